"""Broker throughput and latency over the Kafka protocol: Odradek beside this machine's raw limits
and a peer broker (Tansu), all measured in the same run.

Run (from the repository root)::

    python -m bench.broker_throughput            # full (~7 min once the machine is free)
    python -m bench.broker_throughput --quick    # smoke test (~1 min)
    python -m bench.broker_throughput --only produce --sizes 1024   # a subset
    python -m bench.broker_throughput --profile  # py-spy profiles of Odradek under the same loads

What is measured (every broker on 127.0.0.1, one partition, one replica):

- **produce**: librdkafka's ``rdkafka_performance -P`` (built from Debian's librdkafka-dev example
  into ``bench/.cache``; see ``bench/_kafka.py`` for which librdkafka it runs with) sends ``count``
  records of 100 B and of 1 KiB (no key, no compression, idempotence off, linger.ms 5 as
  librdkafka's default -- the tool's own 1000 ms holds its last partial batch back a whole second,
  since it waits for the queue to drain without flushing --, batches of up to 10,000 records /
  1 MB) with acks=1 and acks=-1.
  Records/s and MB/s (payload, 10^6 B/s) are the tool's own: first produce to last delivery
  report. A fresh broker per run (Odradek: empty data directory; Tansu: ``memory://``).
- **consume**: a fresh broker is filled with ``count`` records by the same tool (acks=1), its data
  is in the page cache, then ``rdkafka_performance -C -p 0 -o beginning`` (assigned partition, no
  group) reads them all, ``rounds`` times; first to last record.
- **latency**: ``rdkafka_performance -P -l -r 10000`` (100 B, acks -1, idempotence off; the
  build replaces its spinning rate loop by an open-loop schedule that sleeps, see ``_kafka.py``)
  stamps each value with the wall clock when it produces it; ``rdkafka_performance -C -l -A file``
  (assigned partition, default fetch settings: fetch.min.bytes 1, fetch.wait.max.ms 500, a long
  poll) writes receipt time - stamp for every record. p50/p99/p99.9/max after a 2 s warm-up, for
  linger.ms 0 (a request per record or so: the goal is judged here) and linger.ms 1 (the client
  batches ~10 records a request). ``--latency-client python`` uses confluent-kafka clients
  (``bench/_e2e.py``) instead.
- **raw limits** (``bench/_raw_net.py``): loopback TCP from one process appended to a file by
  another (produce's limit), and ``sendfile`` of that page-cached file into loopback TCP (consume's
  limit); 1 GiB each (quick: 256 MiB), ``rounds`` times, median.

Also per run: the broker's CPU and the load generator's, as cores = CPU seconds (all threads, read
from /proc and from the tool's rusage) / the tool's measured seconds, so it shows who ran out of CPU
on this 2-core machine (connection set-up is in the CPU but not in the seconds: a slight overstatement).
Before each timed run, ``os.sync()`` and ``_common.prewarm`` (this VM returns idle memory to its
host; see there), for raw and brokers alike. Every loop ends at its count or ``--max-seconds``,
whichever comes first. A full run first waits (``--wait``) until no storage benchmark
(``bench.log_*``) and no pytest runs, then for an idle machine.

Goals: produce >= 1.0x Tansu and >= 0.5x raw tcp->file; consume >= 1.0x Tansu and >= 0.7x raw
sendfile; p99 end-to-end latency <= 5 ms at 10,000 records/s.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    DEFAULT_TMP_ROOT,
    REPO,
    CpuWatch,
    GiB,
    MiB,
    machine_facts,
    median,
    prewarm,
    print_facts,
    scratch_dir,
    settle,
    verdict,
    wait_for_idle,
)
from bench._kafka import (
    TANSU_PACKAGE,
    Broker,
    PerfTool,
    build_rdkafka_performance,
    cpu_split,
    ensure_tansu,
    run_perf,
)
from bench._raw_net import sendfile_to_socket, tcp_to_file

SIZES = (100, 1024)
ACKS = ("1", "-1")
TOPIC = "bench"
GOALS = {"produce_peer": 1.0, "produce_raw": 0.5, "consume_peer": 1.0, "consume_raw": 0.7, "p99_ms": 5.0}
OUT = REPO / "bench" / "out"


def count_for(size: int, quick: bool, phase: str = "produce") -> int:
    """Records per run: ~1 GB of payload, 2 GB to consume 1 KiB records (quick: 100-200 MB)."""
    if size <= 100:
        return 1_000_000 if quick else 10_000_000
    return 200_000 if quick else (2_000_000 if phase == "consume" else 1_000_000)


@dataclass
class Run:
    rps: float
    mbps: float
    broker_cores: float
    client_cores: float
    seconds: float


def _cores(cpu: float, secs: float) -> float:
    return cpu / secs if secs > 0 else float("nan")


def produce_once(tool: PerfTool, broker: Broker, size: int, acks: str, count: int, max_seconds: float,
                 scratch: Path, *, idempotent: bool = False, transaction_ms: int = 0, warmup: bool = False,
                 topic: str = TOPIC, bootstrap: str | None = None, extra: Sequence[str] = ()) -> Run:
    """``transaction_ms`` > 0: a transactional producer committing every ``transaction_ms`` ms; ``warmup``:
    the clock starts after one record is delivered (connected, producer id obtained). ``bootstrap`` (default the
    broker's PLAINTEXT address) and ``extra`` (more options, e.g. ``-X security.protocol=SSL``) select another
    listener and its client settings."""
    settle()
    prewarm(scratch, int(count * (size + 40) * 1.1) + 64 * MiB)
    cpu0 = broker.cpu()
    txn = ["-X", f"transactional.id=bench-{time.monotonic_ns()}"] if transaction_ms else []
    r = run_perf(tool, ["-P", "-t", topic, "-p", "0", "-b", bootstrap or broker.bootstrap, "-s", str(size), "-c",
                        str(count), "-a", acks, "-X",
                        f"enable.idempotence={str(idempotent or bool(transaction_ms)).lower()}",
                        "-X", "linger.ms=5", *txn, *extra], max_seconds,
                 env={"BENCH_TXN_MS": str(transaction_ms), **({"BENCH_WARMUP": "1"} if warmup else {})})
    cpu = broker.cpu() - cpu0
    failed = re.findall(r"(\d+) failed\)", r.output)
    if failed and int(failed[-1]):
        raise RuntimeError(f"{broker.kind}: {failed[-1]} records failed:\n{r.output[-2000:]}")
    if r.records < count and not r.timed_out:
        raise RuntimeError(f"{broker.kind}: {r.records} of {count} delivered:\n{r.output[-2000:]}")
    return Run(r.rps, r.mbps, _cores(cpu, r.seconds), _cores(r.client_cpu, r.seconds), r.seconds)


def consume_once(tool: PerfTool, broker: Broker, count: int, max_seconds: float, *,
                 isolation: str = "read_uncommitted", topic: str = TOPIC, bootstrap: str | None = None,
                 extra: Sequence[str] = (), start: str = "beginning") -> Run:
    """``topic``, ``bootstrap`` and ``extra`` as for ``produce_once``; ``start``: the first offset (``-o``)."""
    cpu0 = broker.cpu()
    r = run_perf(tool, ["-C", "-t", topic, "-p", "0", "-b", bootstrap or broker.bootstrap, "-o", start,
                        "-c", str(count), "-X", f"isolation.level={isolation}", *extra], max_seconds)
    cpu = broker.cpu() - cpu0
    if r.records < count and not r.timed_out:
        raise RuntimeError(f"{broker.kind}: consumed {r.records} of {count}:\n{r.output[-2000:]}")
    return Run(r.rps, r.mbps, _cores(cpu, r.seconds), _cores(r.client_cpu, r.seconds), r.seconds)


BROKER_ENV: dict[str, str] = {}  # --broker-env: extra environment of the Odradek broker (experiments)


def make_broker(kind: str, scratch: Path, tansu: Path | None, n: int) -> Broker:
    return Broker(kind, scratch / f"{kind}-{n}", tansu_exe=tansu, env=BROKER_ENV if kind == "odradek" else {})


def _drop(broker: Broker) -> None:
    broker.stop()
    shutil.rmtree(broker.data_dir, ignore_errors=True)


# -- phases ----------------------------------------------------------------------------------------


def phase_raw_tcp(scratch: Path, total: int, max_seconds: float) -> float:
    path = scratch / "raw.bin"
    settle()
    prewarm(scratch, total + 64 * MiB)
    try:
        n, s = tcp_to_file(path, total, max_seconds)
    finally:
        path.unlink(missing_ok=True)
    return n / s / 1e6


def phase_raw_sendfile(scratch: Path, total: int, max_seconds: float) -> float:
    path = scratch / "raw.bin"
    try:
        tcp_to_file(path, total, max_seconds)
        settle()
        n, s = sendfile_to_socket(path, max_seconds)
    finally:
        path.unlink(missing_ok=True)
    return n / s / 1e6


def phase_produce(a, tool, tansu, brokers, scratch, raw_total) -> tuple[dict, list[float]]:
    results: dict[tuple[str, int, str], list[Run]] = collections.defaultdict(list)
    raws: list[float] = []
    n = 0
    for r in range(a.rounds):
        raws.append(phase_raw_tcp(scratch, raw_total, a.max_seconds))
        print(f"#   round {r + 1}: raw tcp->file {raws[-1]:.0f} MB/s", flush=True)
        order = brokers if r % 2 == 0 else brokers[::-1]
        for size in a.sizes:
            for acks in ACKS:
                for kind in order:
                    n += 1
                    b = make_broker(kind, scratch, tansu, n)
                    try:
                        b.start()
                        b.create_topic(TOPIC)
                        run = produce_once(tool, b, size, acks, count_for(size, a.quick), a.max_seconds, scratch)
                    finally:
                        _drop(b)
                    results[(kind, size, acks)].append(run)
                    print(f"#   round {r + 1}: produce {size} B acks={acks} {kind}: {run.rps:,.0f} rec/s "
                          f"{run.mbps:.0f} MB/s, broker {run.broker_cores:.2f} cores, client "
                          f"{run.client_cores:.2f}", flush=True)
    return results, raws


def phase_consume(a, tool, tansu, brokers, scratch, raw_total) -> tuple[dict, list[float]]:
    results: dict[tuple[str, int], list[Run]] = collections.defaultdict(list)
    raws: list[float] = []
    for _ in range(a.rounds):
        settle()
        prewarm(scratch, raw_total + 64 * MiB)
        raws.append(phase_raw_sendfile(scratch, raw_total, a.max_seconds))
        print(f"#   raw sendfile {raws[-1]:.0f} MB/s", flush=True)
    n = 100
    for size in a.sizes:
        count = count_for(size, a.quick, "consume")
        for kind in brokers:
            n += 1
            b = make_broker(kind, scratch, tansu, n)
            try:
                b.start()
                b.create_topic(TOPIC)
                produce_once(tool, b, size, "1", count, a.max_seconds, scratch)
                settle()
                for r in range(a.rounds):
                    run = consume_once(tool, b, count, a.max_seconds)
                    results[(kind, size)].append(run)
                    print(f"#   round {r + 1}: consume {size} B {kind}: {run.rps:,.0f} rec/s {run.mbps:.0f} MB/s, "
                          f"broker {run.broker_cores:.2f} cores, client {run.client_cores:.2f}", flush=True)
            finally:
                _drop(b)
    return results, raws


@dataclass
class Latency:
    n: int
    p50: float  # microseconds
    p99: float
    p999: float
    max: float
    rate: float  # records/s the producer achieved
    broker_cores: float
    client_cores: float  # producer + consumer
    other_cpu: float = float("nan")  # share of the CPUs other processes used meanwhile


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _percentiles(lat_us: list[float]) -> tuple[int, float, float, float, float]:
    s = sorted(lat_us)
    if not s:
        raise RuntimeError("no latency samples")

    def pct(p: float) -> float:
        return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]

    return len(s), pct(50), pct(99), pct(99.9), s[-1]


def latency_once_c(tool: PerfTool, broker: Broker, rate: float, seconds: float, warmup: float,
                   max_seconds: float, linger: float, scratch: Path) -> Latency:
    """rdkafka_performance's latency mode: ``-P -l -r rate`` stamps each value with the wall clock
    (gettimeofday, us) when it is produced; ``-C -l -A file`` writes now - stamp for every record."""
    total = int(rate * seconds)
    lat_file = scratch / "latency.txt"
    cons = subprocess.Popen([str(tool.path), "-q", "-C", "-t", TOPIC, "-p", "0", "-b", broker.bootstrap, "-o",
                             "beginning", "-l", "-A", str(lat_file), "-c", str(total)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(1.5)  # let it connect and start fetching at offset 0
        if cons.poll() is not None:
            raise RuntimeError(f"latency consumer exited: {cons.communicate()[0][-2000:]}")
        cpu0, ccpu0, t0 = broker.cpu(), _children_cpu(), time.perf_counter()
        prod = subprocess.run([str(tool.path), "-q", "-P", "-t", TOPIC, "-p", "0", "-b", broker.bootstrap, "-s",
                               "100", "-l", "-r", f"{rate:.0f}", "-c", str(total), "-a", "-1", "-X",
                               f"linger.ms={linger:g}", "-X", "enable.idempotence=false"],
                              capture_output=True, text=True, timeout=max_seconds)
        try:
            cons.communicate(timeout=max(5.0, max_seconds - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            cons.send_signal(signal.SIGINT)  # prints its totals, closes the file
            cons.communicate(timeout=15)
        wall = time.perf_counter() - t0
        cpu, ccpu = broker.cpu() - cpu0, _children_cpu() - ccpu0
    finally:
        if cons.poll() is None:
            cons.kill()
            cons.wait()
    m = re.findall(r"(\d+) delivered \(offset -?\d+, (\d+) failed\) in (\d+)ms", prod.stdout)
    if not m or int(m[-1][1]):
        raise RuntimeError(f"latency producer failed:\n{prod.stdout[-2000:]}")
    delivered, _, ms = m[-1]
    lat = [float(x) for x in lat_file.read_text().split()][int(rate * warmup):]
    lat_file.unlink()
    n, p50, p99, p999, mx = _percentiles(lat)
    return Latency(n, p50, p99, p999, mx, int(delivered) / (int(ms) / 1000), _cores(cpu, wall), _cores(ccpu, wall))


def latency_once_py(broker: Broker, rate: float, seconds: float, warmup: float, max_seconds: float,
                    linger: float) -> Latency:
    """``bench/_e2e.py``: confluent-kafka clients in two Python processes, monotonic-clock stamps."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    total = int(rate * seconds)
    common = ["--bootstrap", broker.bootstrap, "--topic", TOPIC]
    cons = subprocess.Popen([sys.executable, "-m", "bench._e2e", "consume", *common, "--count", str(total),
                             "--warmup", str(int(rate * warmup)), "--max-seconds", str(max_seconds)],
                            stdout=subprocess.PIPE, text=True, cwd=str(REPO), env=env)
    try:
        assert cons.stdout is not None
        if cons.stdout.readline().strip() != "ready":
            raise RuntimeError("latency consumer did not start")
        time.sleep(1.0)  # let it connect and start fetching at offset 0
        cpu0, ccpu0, t0 = broker.cpu(), _children_cpu(), time.perf_counter()
        prod = subprocess.run([sys.executable, "-m", "bench._e2e", "produce", *common, "--rate", str(rate),
                               "--seconds", str(seconds), "--linger", str(linger)],
                              capture_output=True, text=True, cwd=str(REPO), env=env, timeout=max_seconds)
        cout, _ = cons.communicate(timeout=max_seconds)
        wall = time.perf_counter() - t0
        cpu, ccpu = broker.cpu() - cpu0, _children_cpu() - ccpu0
    finally:
        if cons.poll() is None:
            cons.kill()
            cons.wait()
    sent, elapsed, errors, left = prod.stdout.split()
    if int(errors) or int(left):
        raise RuntimeError(f"latency producer: {errors} delivery errors, {left} undelivered")
    n, p50, p99, p999, mx, _mean = cout.split()
    return Latency(int(n), float(p50), float(p99), float(p999), float(mx), int(sent) / float(elapsed),
                   _cores(cpu, wall), _cores(ccpu, wall))


def latency_once(a, tool: PerfTool, broker: Broker, linger: float, scratch: Path) -> Latency:
    if a.latency_client == "c":
        return latency_once_c(tool, broker, a.rate, a.latency_seconds, 2.0, a.latency_seconds + 60, linger, scratch)
    return latency_once_py(broker, a.rate, a.latency_seconds, 2.0, a.latency_seconds + 60, linger)


def phase_latency(a, tool, tansu, brokers, scratch) -> dict[tuple[str, float], Latency]:
    out = {}
    n = 200
    for linger in a.lingers:
        for kind in brokers:
            n += 1
            b = make_broker(kind, scratch, tansu, n)
            try:
                b.start()
                b.create_topic(TOPIC)
                settle()
                watch = CpuWatch()
                lat = latency_once(a, tool, b, linger, scratch)
            finally:
                _drop(b)
            lat.other_cpu = watch.other_share()  # after the broker is reaped, so its CPU counts as ours
            out[(kind, linger)] = lat
            print(f"#   latency linger.ms={linger:g} {kind}: p50 {lat.p50 / 1e3:.2f} ms p99 {lat.p99 / 1e3:.2f} ms "
                  f"p99.9 {lat.p999 / 1e3:.2f} ms ({lat.n} records at {lat.rate:,.0f}/s), broker "
                  f"{lat.broker_cores:.2f} cores, clients {lat.client_cores:.2f}; other CPU {lat.other_cpu:.0%}",
                  flush=True)
    return out


# -- profile -----------------------------------------------------------------------------------------


_IDLE = re.compile(r"^EpollSelector\.select \(selectors\.py")
_LINE = re.compile(r":\d+\)$")


def summarize_pyspy(raw: Path, rate: int, load_seconds: float, top: int = 18) -> str:
    """The event-loop thread in a py-spy ``--format raw --threads --idle`` file: how much of the
    load's wall time it was busy (not waiting in ``select``), and where the busy samples were
    (self = leaf frame with its line; inclusive = anywhere on the stack, line numbers dropped)."""
    self_n: collections.Counter[str] = collections.Counter()
    incl_n: collections.Counter[str] = collections.Counter()
    total = idle = 0
    for line in raw.read_text().splitlines():
        stack, _, cnt = line.rpartition(" ")
        if not stack or not cnt.isdigit():
            continue
        k = int(cnt)
        frames = stack.split(";")
        if not frames[0].endswith("MainThread"):
            continue  # the to_thread pool: idle but for the periodic flush
        total += k
        if _IDLE.search(frames[-1]):
            idle += k
            continue
        self_n[frames[-1]] += k
        for f in {_LINE.sub(")", f) for f in frames[1:]}:
            incl_n[f] += k
    busy = total - idle
    if not busy:
        return "  (no busy samples)"
    lines = [f"  event-loop thread busy {busy / rate:.2f} s during the {load_seconds:.2f} s load = "
             f"{busy / rate / load_seconds:.0%} (py-spy {rate} Hz, {busy} busy of {total} samples)",
             "  self time, % of the busy samples:"]
    lines += [f"    {c / busy:6.1%}  {f}" for f, c in self_n.most_common(top)]
    lines.append("  inclusive time, % of the busy samples:")
    skip = re.compile(r"<module>|runpy|Runner\.run|run_forever|run_until|\brun \(|main \(cli|_run_once|"
                      r"Handle\._run")
    lines += [f"    {c / busy:6.1%}  {f}" for f, c in incl_n.most_common(top + 12) if not skip.search(f)][:top]
    return "\n".join(lines)


class PySpy:
    RATE = 250

    def __init__(self, pid: int, out: Path, max_seconds: float) -> None:
        self.out = out
        self.proc = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--rate", str(self.RATE), "--nonblocking",
                                      "--idle", "--threads", "--format", "raw", "--output", str(out),
                                      "--duration", str(int(max_seconds))],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)

    def stop(self, load_seconds: float) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if not self.out.exists():
            return f"  py-spy wrote nothing: {err[-500:]}"
        return summarize_pyspy(self.out, self.RATE, load_seconds)


def run_profiles(a, tool, scratch) -> None:
    """Odradek alone under the benchmark's loads with py-spy attached (figures disturbed by it, so
    they are not the benchmark's). Produce and consume repeat the same 1 GB-sized load ``reps``
    times on one broker (synced page cache before each, as in the benchmark) for more samples."""
    if not shutil.which("py-spy"):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True, timeout=600)
    OUT.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    phases = set(a.only.split(","))
    cases = [("produce", s, "1") for s in a.sizes] + [("consume", s, "") for s in a.sizes]
    cases.append(("latency", 100, "-1"))
    cases = [c for c in cases if c[0] in phases]
    reps = 1 if a.quick else 3
    for i, (what, size, acks) in enumerate(cases):
        b = make_broker("odradek", scratch, None, 300 + i)
        count = count_for(size, a.quick, what)
        try:
            b.start()
            b.create_topic(TOPIC)
            assert b.proc is not None
            if what == "consume":
                produce_once(tool, b, size, "1", count, a.max_seconds, scratch)
                settle()
            out = OUT / f"pyspy-{stamp}-{what}-{size}.txt"
            spy = PySpy(b.proc.pid, out, reps * a.max_seconds + 60)
            u0, s0 = cpu_split(b.proc.pid)
            t0 = time.perf_counter()
            if what == "latency":
                lat = latency_once(a, tool, b, a.lingers[0], scratch)
                load_seconds = time.perf_counter() - t0
                head = (f"latency at {a.rate:,.0f}/s, linger.ms={a.lingers[0]:g}: p50 {lat.p50 / 1e3:.2f} ms "
                        f"p99 {lat.p99 / 1e3:.2f} ms p99.9 {lat.p999 / 1e3:.2f} ms under py-spy, "
                        f"broker {lat.broker_cores:.2f} cores")
            else:
                runs = []
                for _ in range(reps):
                    if what == "produce":
                        runs.append(produce_once(tool, b, size, acks, count, a.max_seconds, scratch))
                    else:
                        settle()
                        runs.append(consume_once(tool, b, count, a.max_seconds))
                load_seconds = sum(r.seconds for r in runs)
                head = (f"{what} {size} B{f' acks={acks}' if acks else ''}, {reps} x {count:,} records: "
                        f"{median([r.rps for r in runs]):,.0f} rec/s {median([r.mbps for r in runs]):.0f} MB/s "
                        f"under py-spy (median), broker {median([r.broker_cores for r in runs]):.2f} cores, "
                        f"client {median([r.client_cores for r in runs]):.2f}")
            u1, s1 = cpu_split(b.proc.pid)
            summary = spy.stop(load_seconds)
            summary = (f"  broker process CPU over the loads (all threads): user {u1 - u0:.2f} s, "
                       f"system {s1 - s0:.2f} s\n{summary}")
        finally:
            _drop(b)
        print(f"\n## {head}\n  collapsed stacks: {out.relative_to(REPO)}\n{summary}", flush=True)


# -- waiting for a free machine ------------------------------------------------------------------------


def other_benchmarks() -> list[str]:
    """Command lines of storage benchmarks or test runs now running (they want the machine to themselves)."""
    found = []
    me = os.getpid()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == me:
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if re.search(r"-m bench\.log_|bench/log_\w+\.py|\bpytest\b", cmd):
            found.append(cmd)
    return found


def wait_for_other_benchmarks(max_wait: float, poll: float = 30.0) -> str:
    deadline = time.monotonic() + max_wait
    t0 = time.monotonic()
    while True:
        busy = other_benchmarks()
        if not busy:
            return f"no storage benchmark or pytest running (waited {time.monotonic() - t0:.0f} s)"
        if time.monotonic() >= deadline:
            return f"still running after {max_wait:.0f} s, measuring anyway: {busy[0][:100]}"
        time.sleep(min(poll, max(1.0, deadline - time.monotonic())))


def wait_for_quiet_machine(max_wait: float) -> None:
    """Before measuring (``max_wait`` > 0): wait, bounded, for other benchmarks and test runs to end, then for the
    machine to go idle; say how that went."""
    if max_wait > 0:
        print("# " + wait_for_other_benchmarks(max_wait), flush=True)
        print("# " + wait_for_idle(min(max_wait, 600)), flush=True)


# -- report ------------------------------------------------------------------------------------------


def _print_rate_table(title: str, rows: list[tuple[str, tuple[int, ...]]], brokers: list[str],
                      results: dict[Any, list[Any]], peer: str | None, raw: list[float], goal_peer: float,
                      goal_raw: float) -> None:
    """One produce or consume table: per row label and broker, rates, cores, and the ratios to the goals."""
    print()
    cols = (f"{title:<14} | {'broker':<8} | {'records/s':>10} {'MB/s':>6} | {'cores broker':>12} "
            f"{'client':>6} | {'vs Tansu (>=' + f'{goal_peer:.1f}' + ')':>16} | "
            f"{'vs raw (>=' + f'{goal_raw:.1f}' + ')':>14}")
    print(cols)
    print("-" * len(cols))
    for label, key in rows:
        for kind in brokers:
            runs = results[(kind, *key)]
            rps, mb = median([x.rps for x in runs]), median([x.mbps for x in runs])
            vs_peer = vs_raw = ""
            if kind == "odradek" and peer:
                vs_peer = ratio_cell(rps / median([x.rps for x in results[(peer, *key)]]), goal_peer)
            if raw:
                vs_raw = ratio_cell(mb / median(raw), goal_raw) if kind == "odradek" else f"{mb / median(raw):5.2f}"
            print(f"{label:<14} | {kind:<8} | {rps:>10,.0f} {mb:>6.0f} | "
                  f"{median([x.broker_cores for x in runs]):>12.2f} {median([x.client_cores for x in runs]):>6.2f}"
                  f" | {vs_peer:>16} | {vs_raw:>14}")


def ratio_cell(x: float, goal: float) -> str:
    return f"{x:5.2f} {'ok' if verdict(x, goal) == 'met' else 'MISS'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs, 1 round, 5 s latency")
    ap.add_argument("--only", default="produce,consume,latency", help="phases (default all three)")
    ap.add_argument("--sizes", help="record sizes in bytes (default 100,1024)")
    ap.add_argument("--brokers", default="odradek,tansu")
    ap.add_argument("--rounds", type=int, help="rounds of every produce/consume run (default 3, quick 1)")
    ap.add_argument("--rate", type=float, default=10_000.0, help="latency test: records/s")
    ap.add_argument("--latency-seconds", type=float, help="latency test length (default 20, quick 5)")
    ap.add_argument("--lingers", default="0,1", help="latency test: producer linger.ms values (default 0,1)")
    ap.add_argument("--latency-client", choices=["c", "python"], default="c",
                    help="latency test clients: rdkafka_performance -l (default) or bench/_e2e.py (confluent-kafka)")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="time bound of any one transfer")
    ap.add_argument("--librdkafka", choices=["wheel", "system"], default="wheel",
                    help="library rdkafka_performance links against (see bench/_kafka.py)")
    ap.add_argument("--wait", type=float, help="wait up to this many s for storage benchmarks / pytest to end "
                    "and for an idle machine (default 1800, quick 0)")
    ap.add_argument("--profile", action="store_true", help="only py-spy profiles of Odradek under the loads")
    ap.add_argument("--broker-env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment of the Odradek broker process (repeatable), for experiments")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help="scratch root (deleted after)")
    a = ap.parse_args()
    for item in a.broker_env:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--broker-env {item!r} is not KEY=VALUE")
        BROKER_ENV[key] = value
    a.sizes = tuple(int(s) for s in a.sizes.split(",")) if a.sizes else SIZES
    a.lingers = tuple(float(x) for x in a.lingers.split(","))
    a.rounds = a.rounds or (1 if a.quick else 3)
    a.latency_seconds = a.latency_seconds or (5.0 if a.quick else 20.0)
    phases = set(a.only.split(","))
    brokers = a.brokers.split(",")
    raw_total = (256 if a.quick else 1024) * MiB

    tool = build_rdkafka_performance(a.librdkafka)
    tansu, tansu_version = ensure_tansu() if "tansu" in brokers else (None, "-")
    a.tmp.mkdir(parents=True, exist_ok=True)
    facts = machine_facts(a.tmp)
    facts["librdkafka"] = tool.librdkafka
    facts["confluent"] = __import__("confluent_kafka").version()
    facts["peer"] = f"{tansu_version} (memory:// storage; PyPI {TANSU_PACKAGE})" if tansu else "-"
    if BROKER_ENV:
        facts["odradek env"] = " ".join(f"{k}={v}" for k, v in BROKER_ENV.items())
    print_facts(facts)
    wait = a.wait if a.wait is not None else (0 if a.quick else 1800)
    wait_for_quiet_machine(wait)
    watch = CpuWatch()
    t_start = time.monotonic()

    with scratch_dir(a.tmp, "broker_throughput", 4 * GiB) as scratch:
        if a.profile:
            run_profiles(a, tool, scratch)
            return
        prod = cons = lat = None
        raw_tcp: list[float] = []
        raw_sf: list[float] = []
        if "produce" in phases:
            print("# produce", flush=True)
            prod, raw_tcp = phase_produce(a, tool, tansu, brokers, scratch, raw_total)
        if "consume" in phases:
            print("# consume", flush=True)
            cons, raw_sf = phase_consume(a, tool, tansu, brokers, scratch, raw_total)
        if "latency" in phases:
            print("# latency", flush=True)
            lat = phase_latency(a, tool, tansu, brokers, scratch)

    print()
    limits = ([f"loopback TCP -> file append {median(raw_tcp):.0f} MB/s"] if raw_tcp else []) + \
        ([f"sendfile file -> loopback TCP {median(raw_sf):.0f} MB/s"] if raw_sf else [])
    if limits:
        print(f"raw limits (median of {a.rounds}, MB/s = 10^6 B/s): {'; '.join(limits)}")
    peer = "tansu" if "tansu" in brokers else None
    if prod is not None:
        rows = [(f"{size} B acks={acks}", (size, acks)) for size in a.sizes for acks in ACKS]
        _print_rate_table("produce", rows, brokers, prod, peer, raw_tcp, GOALS["produce_peer"], GOALS["produce_raw"])
    if cons is not None:
        rows = [(f"{size} B", (size,)) for size in a.sizes]
        _print_rate_table("consume", rows, brokers, cons, peer, raw_sf, GOALS["consume_peer"], GOALS["consume_raw"])
    if lat is not None:
        print()
        cols = (f"{'latency':<22} | {'broker':<8} | {'records/s':>10} | {'p50 ms':>7} {'p99 ms':>7} "
                f"{'p99.9 ms':>8} {'max ms':>7} | {'cores broker':>12} {'clients':>7} | {'other CPU':>9} | "
                f"{'p99 <= 5 ms':>11}")
        print(cols)
        print("-" * len(cols))
        for linger in a.lingers:
            for kind in brokers:
                x = lat[(kind, linger)]
                ok = ""
                if kind == "odradek":
                    ok = verdict(x.p99 / 1e3, GOALS["p99_ms"], higher_is_better=False)
                    ok = ok if linger == 0 else f"({ok})"
                print(f"{f'100 B linger.ms={linger:g}':<22} | {kind:<8} | {x.rate:>10,.0f} | {x.p50 / 1e3:>7.2f} "
                      f"{x.p99 / 1e3:>7.2f} {x.p999 / 1e3:>8.2f} {x.max / 1e3:>7.2f} | {x.broker_cores:>12.2f} "
                      f"{x.client_cores:>7.2f} | {x.other_cpu:>9.0%} | {ok:>11}")
    print()
    print(f"medians of {a.rounds} round(s); MB/s = payload 10^6 B/s; cores = CPU seconds (all threads) / the "
          f"tool's seconds; ratios: Odradek / Tansu records/s, Odradek payload MB/s / raw limit")
    print(f"other CPU use during the run (not this process nor its children): {watch.other_share():.0%} of "
          f"{os.cpu_count()} CPUs; run took {time.monotonic() - t_start:.0f} s")


if __name__ == "__main__":
    main()
