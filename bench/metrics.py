"""What the HTTP listener and its Prometheus ``/metrics`` cost the broker, beside this machine's raw limits and the
formatting library's own floor, all measured in the same run.

Run (from the repository root)::

    python -m bench.metrics              # full (~6 min on this 2-core machine)
    python -m bench.metrics --quick      # smoke test (~2 min)
    python -m bench.metrics --only scrape --partitions 10000

What is measured:

- **throughput, metrics on vs off**: a fresh ``odradek serve`` per run; librdkafka's ``rdkafka_performance``
  produces ``count`` records of 100 B to one partition (acks=1, linger.ms 5, as ``bench/broker_throughput.py``),
  then consumes them all from the beginning, under two loads: librdkafka's default batches (up to 10,000 records,
  1 MB: the client is the bottleneck) and small ones (100 records a batch, 16 KiB fetches: ~16,000 produce requests
  a second, the broker is the bottleneck, and per-request costs show). *Off*: ``http.listeners=`` (no HTTP
  listener); *on*: an HTTP listener and a scraper that GETs ``/metrics`` every second for the whole run, as
  Prometheus would (``Accept-Encoding: gzip``). The request counters on the hot path (``odradek/metrics/``) run
  in both: they cannot be turned off, so "on" is what a scraped broker costs over an unscraped one. Off and on
  alternate, ``rounds`` pairs; medians. Raw limits beside them (``bench/_raw_net.py``): loopback TCP into a file
  (produce's) and ``sendfile`` into loopback TCP (consume's). Goal: on >= 0.97x off for both.
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
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import DEFAULT_TMP_ROOT, GiB, MiB, machine_facts, median, print_facts, scratch_dir, verdict
from bench._kafka import Broker, build_rdkafka_performance, free_port
from bench._raw_net import sendfile_to_socket, tcp_to_file
from bench.broker_throughput import TOPIC, consume_once, produce_once

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


@contextlib.contextmanager
def broker(scratch: Path, name: str, http: bool) -> Iterator[tuple[Broker, str | None]]:
    port = free_port()
    overrides = [f"http.listeners=http://127.0.0.1:{port}"] if http else []
    b = Broker("odradek", scratch / name, overrides=overrides)
    with b:
        yield b, (f"http://127.0.0.1:{port}/metrics" if http else None)


# (name, produce options, consume options): librdkafka's defaults (batches up to 10,000 records / 1 MB: the client
# is the bottleneck) and small batches (100 records, 16 KiB fetches: ~16,000 produce requests/s, the broker is)
LOADS: tuple[tuple[str, list[str], list[str]], ...] = (
    ("large batches", [], []),
    ("small batches", ["-X", "batch.num.messages=100"], ["-X", "max.partition.fetch.bytes=16384"]),
)


def throughput(a: argparse.Namespace, scratch: Path) -> None:
    tool = build_rdkafka_performance()
    count = 1_000_000 if a.quick else 10_000_000
    rounds = 1 if a.quick else a.rounds
    raw_bytes = (256 if a.quick else 1024) * MiB
    raw_file = scratch / "raw.bin"
    raw_in = [tcp_to_file(raw_file, raw_bytes, a.max_seconds) for _ in range(rounds)]
    raw_out = [sendfile_to_socket(raw_file, a.max_seconds) for _ in range(rounds)]
    raw_file.unlink(missing_ok=True)
    raw = {"produce": median([n / s / 1e6 for n, s in raw_in]), "consume": median([n / s / 1e6 for n, s in raw_out])}
    results: dict[tuple[str, str, bool], list[tuple[float, float]]] = {}  # (load, phase, on) -> [(MB/s, cores)]
    scrapes: list[float] = []
    sizes: list[int] = []
    failures = 0
    print(
        f"# throughput: {count:,} records of {SIZE} B per load, acks=1; {rounds} alternating off/on pairs", flush=True
    )
    for r in range(rounds):
        for on in (False, True):
            with broker(scratch, f"tp-{r}-{'on' if on else 'off'}", on) as (b, url):
                for n, _ in enumerate(LOADS):
                    b.create_topic(f"{TOPIC}-{n}")
                scraper = Scraper(url) if url else contextlib.nullcontext()
                line = []
                with scraper:
                    for n, (load, produce_opts, consume_opts) in enumerate(LOADS):
                        topic = f"{TOPIC}-{n}"
                        p = produce_once(
                            tool, b, SIZE, "1", count, a.max_seconds, scratch, topic=topic, extra=produce_opts
                        )
                        c = consume_once(tool, b, count, a.max_seconds, topic=topic, extra=consume_opts)
                        results.setdefault((load, "produce", on), []).append((p.mbps, p.broker_cores))
                        results.setdefault((load, "consume", on), []).append((c.mbps, c.broker_cores))
                        line.append(
                            f"{load}: produce {p.mbps:6.1f} MB/s ({p.broker_cores:.2f} cores), "
                            f"consume {c.mbps:6.1f} MB/s ({c.broker_cores:.2f} cores)"
                        )
                if isinstance(scraper, Scraper):
                    scrapes += scraper.times
                    sizes += scraper.sizes
                    failures += scraper.failures
                print(f"  round {r + 1} metrics {'on ' if on else 'off'}: " + "; ".join(line), flush=True)
    print()
    print(
        f"{'load':14} {'phase':8} {'off MB/s':>9} {'on MB/s':>9} {'on/off':>7} {'raw MB/s':>9}  "
        f"{'broker cores off/on':>19}  goal"
    )
    for load, _, _ in LOADS:
        for phase in ("produce", "consume"):
            off, on = results[(load, phase, False)], results[(load, phase, True)]
            off_mbps, on_mbps = median([x for x, _ in off]), median([x for x, _ in on])
            cores = f"{median([c for _, c in off]):.2f} / {median([c for _, c in on]):.2f}"
            print(
                f"{load:14} {phase:8} {off_mbps:9.1f} {on_mbps:9.1f} {on_mbps / off_mbps:7.3f} {raw[phase]:9.1f}  "
                f"{cores:>19}  >= {GOAL}x off: {verdict(on_mbps / off_mbps, GOAL)}"
            )
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
    ap.add_argument("--rounds", type=int, default=3, help="off/on pairs for the throughput part (default 3)")
    ap.add_argument("--partitions", type=int, default=10_000, help="partitions of the scrape part (default 10000)")
    ap.add_argument("--scrapes", type=int, default=5, help="scrapes timed (default 5)")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="bound of every timed loop")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help="scratch directory root")
    a = ap.parse_args(argv)
    if a.quick:
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
