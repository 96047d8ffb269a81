"""What the HTTP listener and its Prometheus ``/metrics`` cost the broker, beside this machine's raw limits and the
formatting library's own floor, all measured in the same run.

Run (from the repository root)::

    python -m bench.metrics              # full (~8 min on this 2-core machine)
    python -m bench.metrics --quick      # smoke test (~2 min)
    python -m bench.metrics --only throughput --rounds 9
    python -m bench.metrics --only scrape --partitions 10000

What is measured:

- **throughput, metrics on vs off**: librdkafka's ``rdkafka_performance`` produces ``count`` records of 100 B
  (default 5 M) to one partition of a new topic (acks=1, linger.ms 5, as ``bench/broker_throughput.py``), then
  consumes them all from the beginning, under two loads: librdkafka's default batches (up to 10,000 records, 1 MB:
  the client is the bottleneck) and small ones (100 records a batch, 16 KiB fetches: ~16,000 produce requests a
  second, the broker is the bottleneck, and per-request costs show). By default one ``odradek serve`` with an HTTP
  listener serves every run (its topics are deleted after each run, outside the timed phases); *on*: a scraper
  GETs ``/metrics`` every second for the whole run, as Prometheus would (``Accept-Encoding: gzip``); *off*: nobody
  scrapes. So this compares a scraped broker with an unscraped one that has an idle HTTP listener (an asyncio
  server socket waiting in accept, which costs nothing between requests); one broker removes the broker-to-broker
  variance of fresh processes (page-cache and heap state, ±10-20 % per run here), which swamped the effect.
  ``--fresh-brokers``: a fresh ``odradek serve`` per run instead, *off* with ``http.listeners=`` empty (no HTTP
  listener, aiohttp not imported), *on* with a listener and the scraper. The request counters on the hot path
  (``odradek/metrics/``) run in both modes either way: they cannot be turned off. Each run is
  measured two ways: wall-clock throughput (MB/s as ``rdkafka_performance`` times it) and the broker process's CPU
  per record (the on-CPU time of all its threads, ``/proc/<pid>/task/*/schedstat``, in ns: ``/proc/<pid>/stat``'s
  utime + stime without its 10 ms rounding; sampled before and after each phase, over the records; in "on" runs
  it includes the scrapes that fell in the phase). ``rounds`` off/on pairs of adjacent runs, the
  order alternating (off,on then on,off: slow drift of the machine cancels); per pair and per load and phase,
  the throughput ratio on/off and the CPU ratio off/on (a broker-bound phase's throughput is inversely
  proportional to its CPU per record, so this is the ratio such a phase would show, and CPU time is not
  stretched by waits for a CPU that other work on a shared machine holds, as wall time is; for a client-bound
  phase it is the broker's share only). Reported: each pair's ratios, their median and min-max. Goal: on >= 0.97x
  off for every load and phase, judged on the median per-pair throughput ratio; the CPU ratio's verdict beside
  it. Raw limits beside them, the median of min(rounds, 3) runs (``bench/_raw_net.py``): loopback TCP into a
  file (produce's) and ``sendfile`` into loopback TCP (consume's).
- **scrape of a large broker**: a fresh broker with ``--partitions`` partitions (1,000 a topic) or as many as
  this machine's open-files limit lets one process open (1 file a partition), one record in each, and a consumer
  group with an offset committed on every partition of the first topic (so the lag series exist); ``/metrics`` is
  fetched ``scrapes`` times: wall time (client side, median and max), body size plain and gzip'ed, how long a
  tiny Kafka request (ApiVersions v0 on its own connection, every 5 ms) took during the scrapes vs. without them
  (the broker's loop must stay responsive), and the broker's CPU per scrape, of the large broker and, first, of
  the same broker with one topic (what the throughput part's scraper costs). Beside it, the floor:
  prometheus_client formatting the same number of samples from a trivial collector in this process. The
  formatting step (``collector.render``, the bulk of a scrape) is also timed on a snapshot of ``--partitions``
  partitions in this process.

Results go to docs/performance.md ("HTTP listener and /metrics"), with the command that produced them.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import multiprocessing
import socket
import statistics
import struct
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import DEFAULT_TMP_ROOT, GiB, MiB, machine_facts, median, print_facts, scratch_dir, verdict
from bench._kafka import Broker, build_rdkafka_performance, free_port
from bench._raw_net import sendfile_to_socket, tcp_to_file
from bench.broker_throughput import TOPIC, Run, consume_once, produce_once

SIZE = 100  # small records: the most requests and batches per byte, where per-request counters cost most
GOAL = 0.97


class Scraper:
    """GET ``url`` every ``interval`` seconds in a thread, as Prometheus does; keeps each scrape's time and size."""

    def __init__(self, url: str, interval: float = 1.0) -> None:
        self.url = url
        self.interval = interval
        self.times: list[float] = []
        self.sizes: list[int] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                self.sizes.append(len(fetch(self.url, gzip_ok=True)))
                self.times.append(time.perf_counter() - started)
            except OSError:
                self.failures += 1
            self._stop.wait(max(self.interval - (time.perf_counter() - started), 0.0))

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def fetch(url: str, *, gzip_ok: bool = False) -> bytes:
    headers = {"Accept-Encoding": "gzip"} if gzip_ok else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as r:
        return bytes(r.read())


class PreciseBroker(Broker):
    """A broker whose ``cpu()`` is the sum of its threads' on-CPU time in nanoseconds
    (``/proc/<pid>/task/*/schedstat``) instead of ``/proc/<pid>/stat``'s utime + stime, the same quantity rounded
    to 10 ms ticks (±2 % of a client-bound phase's CPU). Only live threads count: ``exited`` counts the calls that
    found a thread of the previous call gone (its time is then missing; the broker's threads are long-lived, so
    expected 0, and reported)."""

    exited: int = 0
    _tids: frozenset[str] = frozenset()

    def cpu(self) -> float:
        if self.proc is None:
            return float("nan")
        task = Path(f"/proc/{self.proc.pid}/task")
        total, tids = 0, set()
        for t in task.iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int((t / "schedstat").read_text().split()[0])
                tids.add(t.name)
        if self._tids - tids:
            self.exited += 1
        self._tids = frozenset(tids)
        return total / 1e9


@contextlib.contextmanager
def broker(scratch: Path, name: str, http: bool) -> Iterator[tuple[PreciseBroker, str | None]]:
    port = free_port()
    overrides = [f"http.listeners=http://127.0.0.1:{port}"] if http else []
    b = PreciseBroker("odradek", scratch / name, overrides=overrides)
    with b:
        yield b, (f"http://127.0.0.1:{port}/metrics" if http else None)


# (name, produce options, consume options): librdkafka's defaults (batches up to 10,000 records / 1 MB: the client
# is the bottleneck) and small batches (100 records, 16 KiB fetches: ~16,000 produce requests/s, the broker is)
LOADS: tuple[tuple[str, list[str], list[str]], ...] = (
    ("large batches", [], []),
    ("small batches", ["-X", "batch.num.messages=100"], ["-X", "max.partition.fetch.bytes=16384"]),
)


@dataclass
class Phase:
    """One timed phase of one run: wall-clock throughput (as ``rdkafka_performance`` times it) and the broker's
    CPU per record (its utime + stime from ``/proc/<pid>/stat`` before and after the phase, over the records)."""

    mbps: float
    cpu_us: float  # broker CPU microseconds per record
    cores: float


def _phase(run: Run) -> Phase:
    # run.broker_cores is the broker's CPU seconds over the phase / run.seconds, run.rps is records / run.seconds
    return Phase(run.mbps, run.broker_cores / run.rps * 1e6, run.broker_cores)


def _spread(xs: list[float]) -> str:
    return f"{min(xs):.3f}-{max(xs):.3f}"


def _delete_topics(b: Broker, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})
    for fut in admin.delete_topics(names, operation_timeout=60).values():
        fut.result(timeout=60)


def throughput(a: argparse.Namespace, scratch: Path) -> None:
    tool = build_rdkafka_performance()
    count = a.count or (1_000_000 if a.quick else 5_000_000)
    rounds = a.rounds
    raw_reps = min(rounds, 3)
    raw_bytes = (256 if a.quick else 1024) * MiB
    raw_file = scratch / "raw.bin"
    raw_in = [tcp_to_file(raw_file, raw_bytes, a.max_seconds) for _ in range(raw_reps)]
    raw_out = [sendfile_to_socket(raw_file, a.max_seconds) for _ in range(raw_reps)]
    raw_file.unlink(missing_ok=True)
    raw = {"produce": median([n / s / 1e6 for n, s in raw_in]), "consume": median([n / s / 1e6 for n, s in raw_out])}
    # (round, on) -> {(load, phase): Phase}
    runs: dict[tuple[int, bool], dict[tuple[str, str], Phase]] = {}
    scrapes: list[float] = []
    sizes: list[int] = []
    failures = 0
    print(
        f"# throughput: {count:,} records of {SIZE} B per load, acks=1; {rounds} off/on pairs, "
        f"order off,on / on,off alternating; "
        + ("a fresh broker per run" if a.fresh_brokers else "one broker with an HTTP listener, the scraper on or off"),
        flush=True,
    )
    brokers: list[PreciseBroker] = []
    with contextlib.ExitStack() as whole:
        shared = None if a.fresh_brokers else whole.enter_context(broker(scratch, "tp-shared", True))
        if shared is not None:
            brokers.append(shared[0])
        for r in range(rounds):
            for on in (False, True) if r % 2 == 0 else (True, False):
                with contextlib.ExitStack() as one:
                    if shared is not None:
                        b, url = shared
                    else:
                        b, url = one.enter_context(broker(scratch, f"tp-{r}-{'on' if on else 'off'}", on))
                        brokers.append(b)
                    topics = [f"{TOPIC}-{r}-{int(on)}-{n}" for n, _ in enumerate(LOADS)]
                    for topic in topics:
                        b.create_topic(topic)
                    scraper = Scraper(url) if on and url else contextlib.nullcontext()
                    line = []
                    got: dict[tuple[str, str], Phase] = {}
                    with scraper:
                        for topic, (load, produce_opts, consume_opts) in zip(topics, LOADS, strict=True):
                            p = _phase(
                                produce_once(
                                    tool, b, SIZE, "1", count, a.max_seconds, scratch, topic=topic, extra=produce_opts
                                )
                            )
                            c = _phase(consume_once(tool, b, count, a.max_seconds, topic=topic, extra=consume_opts))
                            got[(load, "produce")], got[(load, "consume")] = p, c
                            line.append(
                                f"{load}: produce {p.mbps:6.1f} MB/s {p.cpu_us:5.3f} us/rec ({p.cores:.2f} cores), "
                                f"consume {c.mbps:6.1f} MB/s {c.cpu_us:5.3f} us/rec ({c.cores:.2f} cores)"
                            )
                    if shared is not None:
                        _delete_topics(b, topics)  # bounds the disk used; outside the timed phases
                    runs[(r, on)] = got
                    if isinstance(scraper, Scraper):
                        scrapes += scraper.times
                        sizes += scraper.sizes
                        failures += scraper.failures
                    print(f"  pair {r + 1} metrics {'on ' if on else 'off'}: " + "; ".join(line), flush=True)
    exited = sum(b.exited for b in brokers)
    print()
    print(
        "on/off per pair (adjacent runs): throughput = on MB/s / off MB/s; broker CPU = off CPU per record / "
        "on CPU per record (the throughput ratio a broker-bound load would show)"
    )
    keys = [(load, phase) for load, _, _ in LOADS for phase in ("produce", "consume")]
    for key in keys:
        tp = [runs[(r, True)][key].mbps / runs[(r, False)][key].mbps for r in range(rounds)]
        cpu = [runs[(r, False)][key].cpu_us / runs[(r, True)][key].cpu_us for r in range(rounds)]
        print(f"  {key[0]:14} {key[1]:8} throughput " + " ".join(f"{x:.3f}" for x in tp))
        print(f"  {'':14} {'':8} broker CPU " + " ".join(f"{x:.3f}" for x in cpu))
    print()
    print(
        f"{'load':14} {'phase':8} {'off MB/s':>9} {'on MB/s':>9} {'raw MB/s':>9} {'on/off (pairs)':>20} "
        f"{'CPU us/rec off/on':>18} {'CPU on/off (pairs)':>20}  goal >= {GOAL}x off (median per-pair throughput; CPU)"
    )
    for key in keys:
        off, on = [runs[(r, False)][key] for r in range(rounds)], [runs[(r, True)][key] for r in range(rounds)]
        tp = [y.mbps / x.mbps for x, y in zip(off, on, strict=True)]
        cpu = [x.cpu_us / y.cpu_us for x, y in zip(off, on, strict=True)]
        us = f"{median([x.cpu_us for x in off]):.3f} / {median([y.cpu_us for y in on]):.3f}"
        print(
            f"{key[0]:14} {key[1]:8} {median([x.mbps for x in off]):9.1f} {median([y.mbps for y in on]):9.1f} "
            f"{raw[key[1]]:9.1f} {median(tp):7.3f} ({_spread(tp)}) {us:>18} {median(cpu):7.3f} ({_spread(cpu)})  "
            f"{verdict(median(tp), GOAL)}; CPU {verdict(median(cpu), GOAL)}"
        )
    print(
        "broker cores off/on (median): "
        + "; ".join(
            f"{k[0]} {k[1]} {median([runs[(r, False)][k].cores for r in range(rounds)]):.2f}/"
            f"{median([runs[(r, True)][k].cores for r in range(rounds)]):.2f}"
            for k in keys
        )
    )
    print(f"broker threads that exited during the runs (their CPU uncounted): {exited}")
    if scrapes:
        print(
            f"scrapes during the 'on' runs: {len(scrapes)}, {failures} failed; "
            f"median {median(scrapes) * 1000:.1f} ms, max {max(scrapes) * 1000:.1f} ms, "
            f"{median(sizes) / 1024:.1f} KiB gzip'ed"
        )


class Probe:
    """A tiny Kafka request (ApiVersions v0) every ``interval`` seconds on its own connection, from a child process
    (so that this process's own work, e.g. reading a scrape's body, does not add to what it measures); ``rtts``
    are the round trips, once stopped."""

    REQUEST = struct.pack(">hhih", 18, 0, 1, 5) + b"probe"

    def __init__(self, address: tuple[str, int], interval: float = 0.005) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_probe_main, args=(address, interval, self._stop, child), daemon=True)
        self.rtts: list[float] = []

    def __enter__(self) -> Probe:
        self._proc.start()
        if not self._parent.poll(30):  # connected and ready
            raise RuntimeError("the probe did not start")
        self._parent.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.rtts = self._parent.recv()
        self._proc.join(timeout=30)


def _probe_main(address: tuple[str, int], interval: float, stop: Any, conn: Any) -> None:
    sock = socket.create_connection(address, timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def recv(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the probe")
            buf += chunk
        return buf

    frame = struct.pack(">i", len(Probe.REQUEST)) + Probe.REQUEST
    rtts: list[float] = []
    conn.send("ready")
    while not stop.is_set():
        started = time.perf_counter()
        sock.sendall(frame)
        (size,) = struct.unpack(">i", recv(4))
        recv(size)
        rtts.append(time.perf_counter() - started)
        stop.wait(interval)
    sock.close()
    conn.send(rtts)


def _fill(b: Broker, topics: int, per_topic: int) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})
    names = [f"scrape-{i}" for i in range(topics)]
    for name in names:  # one at a time: each creation makes per_topic partition directories
        admin.create_topics([NewTopic(name, per_topic, 1)], operation_timeout=300)[name].result(timeout=300)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "log_level": 3})
    for name in names:
        for part in range(per_topic):
            p.produce(name, b"x" * 100, partition=part)
        p.poll(0)
    assert p.flush(300) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "scrape-lag", "log_level": 3})
    c.commit(offsets=[TopicPartition(names[0], part, 0) for part in range(per_topic)], asynchronous=False)
    c.close()


def _library_floor(samples: int) -> float:
    """Seconds prometheus_client takes to format ``samples`` gauge samples with two labels (a trivial collector)."""
    from prometheus_client import generate_latest
    from prometheus_client.core import GaugeMetricFamily

    class Trivial:
        def collect(self) -> Iterator[GaugeMetricFamily]:
            g = GaugeMetricFamily("bench_gauge", "floor", labels=["topic", "partition"])
            for i in range(samples):
                g.add_metric(["scrape-topic", str(i)], i)
            yield g

    times = []
    for _ in range(3):
        started = time.perf_counter()
        generate_latest(Trivial())  # type: ignore[arg-type]
        times.append(time.perf_counter() - started)
    return min(times)


FILES_PER_PARTITION = 1  # a one-segment partition's open files: its segment's log (indexes are mapped without one)


def partition_ceiling() -> int:
    """The most partitions one broker process can open under this machine's open-files limit (with room for
    sockets and the rest)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the broker inherits it
        soft = hard
    return max((soft - 1000) // FILES_PER_PARTITION // 1000 * 1000, 1000)


def render_at(partitions: int, groups_offsets: int) -> tuple[float, float, int, int]:
    """The collector's formatting step (``odradek/http/collector.render``) of a snapshot of ``partitions``
    partitions and ``groups_offsets`` committed offsets, in this process: (median seconds, the library floor for
    as many samples, samples, bytes)."""
    from odradek.http.collector import PartitionRow, Snapshot, render

    snap = Snapshot("1", "bench")
    per_topic = 1000
    for i in range(partitions):
        snap.partitions.append(
            PartitionRow(f"scrape-{i // per_topic}", str(i % per_topic), True, 1, 1, 1, 4096 + i, 1, 0, 1 + i, 1 + i)
        )
    for i in range(groups_offsets):
        snap.offsets.append(("scrape-lag", "scrape-0", str(i % per_topic), 0, 1))
    snap.cleaner = {
        k: 0
        for k in (
            "passes",
            "bytes_read",
            "bytes_written",
            "max_clean_seconds",
            "max_buffer_utilization",
            "max_compaction_delay_seconds",
            "max_dirty_ratio",
            "uncleanable",
            "since_last_run",
        )
    }
    times = []
    body = b""
    for _ in range(3):
        started = time.perf_counter()
        body = render(snap)
        times.append(time.perf_counter() - started)
    samples = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    return median(times), _library_floor(samples), samples, len(body)


def scrape(a: argparse.Namespace, scratch: Path) -> None:
    ceiling = partition_ceiling()
    partitions = min(a.partitions, ceiling)
    topics = max(1, partitions // 1000)
    per_topic = partitions // topics
    if partitions < a.partitions:
        print(
            f"# this machine's open-files limit allows {ceiling:,} partitions per broker "
            f"({FILES_PER_PARTITION} files each): the real broker gets {partitions:,}, and the formatting step "
            f"is also timed on a snapshot of {a.partitions:,} (below)"
        )
    print(f"# scrape: {topics} topics x {per_topic} partitions = {topics * per_topic:,}; filling...", flush=True)
    with broker(scratch, "scrape", True) as (b, url):
        assert url is not None
        b.create_topic("scrape-small")
        fetch(url, gzip_ok=True)
        cpu0, n_small = b.cpu(), 100
        for _ in range(n_small):
            fetch(url, gzip_ok=True)
        small_cpu = (b.cpu() - cpu0) / n_small
        print(
            f"  a broker with one topic: {small_cpu * 1000:.1f} ms of broker CPU per scrape (gzip'ed, mean of "
            f"{n_small}) = {small_cpu * 100:.2f} % of a core at one scrape a second",
            flush=True,
        )
        started = time.monotonic()
        _fill(b, topics, per_topic)
        print(f"  filled in {time.monotonic() - started:.0f} s", flush=True)
        with Probe(("127.0.0.1", b.port)) as quiet:
            time.sleep(3)
        times, plain = [], b""
        with Probe(("127.0.0.1", b.port)) as busy:
            for _ in range(a.scrapes):
                t0 = time.perf_counter()
                plain = fetch(url)
                times.append(time.perf_counter() - t0)
        cpu0 = b.cpu()
        zipped = fetch(url, gzip_ok=True)
        large_cpu = b.cpu() - cpu0
        compressed = len(zipped) if zipped[:2] == b"\x1f\x8b" else len(gzip.compress(plain, 1))
    text = plain.decode()
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    floor = _library_floor(samples)
    print()
    print(
        f"/metrics of a broker with {topics * per_topic:,} partitions: {samples:,} samples, "
        f"{len(plain) / MiB:.1f} MiB ({compressed / MiB:.2f} MiB gzip'ed)"
    )
    print(f"  broker CPU of one gzip'ed scrape: {large_cpu * 1000:.0f} ms")
    print(
        f"  scrape wall time: median {median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
        f"over {len(times)} scrapes"
    )
    print(
        f"  floor (prometheus_client formatting {samples:,} samples, trivial collector, in process): "
        f"{floor * 1000:.0f} ms -> scrape / floor {median(times) / floor:.2f}x"
    )
    q = sorted(quiet.rtts)
    w = sorted(busy.rtts)
    print(
        f"  ApiVersions round trip without scrapes: p50 {statistics.median(q) * 1000:.2f} ms, "
        f"p99 {q[int(len(q) * 0.99)] * 1000:.1f} ms, max {q[-1] * 1000:.1f} ms ({len(q)} probes)"
    )
    print(
        f"  ApiVersions round trip during scrapes:  p50 {statistics.median(w) * 1000:.2f} ms, "
        f"p99 {w[int(len(w) * 0.99)] * 1000:.1f} ms, max {w[-1] * 1000:.1f} ms ({len(w)} probes)"
    )
    r_time, r_floor, r_samples, r_bytes = render_at(a.partitions, per_topic)
    print(
        f"formatting step of a {a.partitions:,}-partition snapshot (collector.render, in process): "
        f"{r_time * 1000:.0f} ms, {r_samples:,} samples, {r_bytes / MiB:.1f} MiB; floor {r_floor * 1000:.0f} ms "
        f"-> {r_time / r_floor:.2f}x"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller runs (smoke test)")
    ap.add_argument("--only", choices=["throughput", "scrape"], help="run one part")
    ap.add_argument("--rounds", type=int, default=7, help="off/on pairs for the throughput part (default 7)")
    ap.add_argument(
        "--fresh-brokers",
        action="store_true",
        help="throughput part: a fresh broker per run, 'off' without an HTTP listener (default: one broker with "
        "an HTTP listener for all runs, only the scraper toggled)",
    )
    ap.add_argument("--count", type=int, default=0, help="records per load and run (default 5 M; quick 1 M)")
    ap.add_argument("--partitions", type=int, default=10_000, help="partitions of the scrape part (default 10000)")
    ap.add_argument("--scrapes", type=int, default=5, help="scrapes timed (default 5)")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="bound of every timed loop")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help="scratch directory root")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds = min(a.rounds, 2)
        a.partitions = min(a.partitions, 2000)
        a.scrapes = min(a.scrapes, 3)
    print_facts(machine_facts(a.tmp))
    with scratch_dir(a.tmp, "metrics", 4 * GiB) as scratch:
        if a.only in (None, "throughput"):
            throughput(a, scratch)
            print()
        if a.only in (None, "scrape"):
            scrape(a, scratch)


if __name__ == "__main__":
    main()
