"""The log cleaner: how fast it compacts, what it costs the broker's clients, and how much memory it takes.

Run (from the repository root)::

    python -m bench.cleaner            # full (~1-6 min once the machine is free)
    python -m bench.cleaner --quick    # smoke test (~1.5 min)

What is measured:

- **cleaner throughput**: a log of ``--log-mb`` MB (full 512, quick 128) of 1 KiB records (uncompressed batches of
  16 records, 10 % distinct keys, segment.bytes 64 MiB) is built with ``Log.append``, then cleaned once by the
  broker's real execution path: a ``LogCleaner`` thread sends the pass to its (fresh) worker process, which cleans
  the files, and the thread swaps the result in. MB/s = bytes of log cleaned (every segment below the active one) /
  seconds from the pass's start to the end of its swap; the median of 3 such passes, each on a log built anew.
  Beside it, **raw**: this machine's limit for *reading and
  rewriting the same bytes* (the same segment files read in 512 KiB chunks with ``pread`` and written to a new
  file, page cache, no fsync), median of 3, measured in the same run. Goal: cleaner >= 0.5x raw.
- **memory**: the worker's peak RSS (``VmHWM``) above its RSS before the pass, once it is ready (its compiled
  kernel loaded: numba's runtime is a fixed cost, not the pass's), beside ``log.cleaner.dedupe.buffer.size``
  (64 MiB here) — the cleaner must stay within its configured buffer.
- **impact on clients**: the same broker configuration twice, ``log.cleaner.enable=false`` then ``true``. In each,
  a compacted topic is filled with ``--table-mb`` MB of 1 KiB keyed records (10 % distinct keys), and a background
  producer keeps dirtying it at ``--dirty-mbps`` MB/s all along (min.cleanable.dirty.ratio 0.1,
  log.cleaner.backoff.ms 1000: with the cleaner on, it cleans that topic over and over). Meanwhile
  ``rdkafka_performance`` measures produce throughput to another topic (1 KiB, acks=1, as
  ``bench.broker_throughput``; 300,000 records, 7 times, the median run) and then end-to-end latency at 10,000
  records/s (100 B, acks=-1, linger.ms 1). Goals: throughput with the cleaner >= 0.8x without it; p99 <= 2x
  without it. The cleaner's work during the window is read from its ``cleaner-offset-checkpoint`` progress.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import broker_throughput
from bench._common import (
    DEFAULT_TMP_ROOT,
    MiB,
    machine_facts,
    prewarm,
    print_facts,
    scratch_dir,
    settle,
    verdict,
)
from bench._kafka import Broker, build_rdkafka_performance
from bench.broker_throughput import TOPIC, latency_once_c, produce_once, wait_for_quiet_machine
from odradek.protocol.records import RecordInput, build_batch
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.cleaner.cleaner import CLEANER_CHECKPOINT, CleanerConfig, LogCleaner
from odradek.storage.config import LogConfig
from odradek.storage.log import Log

RECORD = 1024
PER_BATCH = 16
BUFFER = 64 * MiB
TABLE = "table"
LATENCY_TOPIC = "latency"


def build_log(directory: Path, total_bytes: int, seed: int) -> Log:
    cfg = LogConfig(segment_bytes=64 * MiB, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01)
    lg = Log.open(directory, cfg)
    rng = random.Random(seed)
    records = total_bytes // RECORD
    keys = max(1, records // 10)
    values = [rng.randbytes(RECORD - 40) for _ in range(256)]
    now = int(time.time() * 1000)
    for i in range(0, records, PER_BATCH):
        lg.append(build_batch([RecordInput(b"key-%010d" % rng.randrange(keys), values[(i + j) % 256], now)
                               for j in range(PER_BATCH)], base_timestamp=now))
    lg.roll()
    lg.update_high_watermark(lg.next_offset)
    return lg


def raw_rewrite(files: list[Path], out: Path) -> float:
    """MB/s of reading ``files`` in 512 KiB chunks and writing them to ``out``."""
    total = 0
    t0 = time.perf_counter()
    fd_out = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for f in files:
            fd = os.open(f, os.O_RDONLY)
            try:
                pos = 0
                while chunk := os.pread(fd, 512 * 1024, pos):
                    os.write(fd_out, chunk)
                    pos += len(chunk)
                    total += len(chunk)
            finally:
                os.close(fd)
    finally:
        os.close(fd_out)
    secs = time.perf_counter() - t0
    out.unlink()
    return total / secs / 1e6


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def clean_pass(log_dir: Path, scratch: Path, seed: int, log_bytes: int) -> tuple[int, float, int, int, int]:
    """One pass on a freshly built log by a fresh worker: (bytes cleaned, seconds, log size after, worker's idle
    and peak RSS in KiB)."""
    lg = build_log(log_dir, log_bytes, seed=seed)
    cleaned_bytes = sum(s.log_path.stat().st_size for s in lg.segments[:-1])
    cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=BUFFER), lambda: iter([(("t", 0), log_dir, lg)]))
    worker = cleaner._worker(0)  # spawned before the clock starts, as a running broker's is
    assert worker.wait_ready(120), "the cleaner worker did not load its kernel"
    idle_rss = _status_kib(worker.process.pid, "VmRSS")
    settle()
    prewarm(scratch, cleaned_bytes + 64 * MiB)
    t0 = time.perf_counter()
    assert cleaner.clean_once(0)
    secs = time.perf_counter() - t0
    peak = _status_kib(worker.process.pid, "VmHWM")
    worker.stop()
    after = lg.size
    lg.close()
    shutil.rmtree(log_dir)
    return cleaned_bytes, secs, after, idle_rss, peak


def phase_throughput(a: argparse.Namespace, scratch: Path) -> dict[str, float]:
    d = scratch / "throughput"
    lg = build_log(d / "raw-0", a.log_mb * 1_000_000, seed=1)
    files = [s.log_path for s in lg.segments[:-1]]
    cleaned_bytes = sum(f.stat().st_size for f in files)
    raws = []
    for _ in range(3):
        settle()
        prewarm(scratch, cleaned_bytes + 64 * MiB)
        raws.append(raw_rewrite(files, scratch / "raw.copy"))
    raw = statistics.median(raws)
    lg.close()
    shutil.rmtree(d / "raw-0")
    passes = [clean_pass(d / f"t-{i}", scratch, 1, a.log_mb * 1_000_000) for i in range(3)]
    rates = [b / secs / 1e6 for b, secs, *_ in passes]
    rate = statistics.median(rates)
    cleaned, secs, after, _, _ = passes[rates.index(rate)]
    print(f"# cleaner: {cleaned / 1e6:.0f} MB cleaned in {secs:.2f} s = {rate:.0f} MB/s, median of 3 passes "
          f"({', '.join(f'{r:.0f}' for r in rates)}; log {cleaned / 1e6:.0f} -> {after / 1e6:.0f} MB); raw "
          f"read+rewrite {raw:.0f} MB/s (runs {', '.join(f'{r:.0f}' for r in raws)}); ratio {rate / raw:.2f} "
          f"(goal >= 0.5: {verdict(rate / raw, 0.5)})", flush=True)
    *_, idle_rss, peak = max(passes, key=lambda p: p[4] - p[3])
    growth = (peak - idle_rss) * 1024
    print(f"# worker memory: peak RSS {peak / 1024:.0f} MiB, {growth / MiB:.0f} MiB above "
          f"its idle {idle_rss / 1024:.0f} MiB (the most of 3 passes); log.cleaner.dedupe.buffer.size "
          f"{BUFFER / MiB:.0f} MiB ({'within' if growth <= BUFFER else 'ABOVE'} it)", flush=True)
    return {"cleaner_mbps": rate, "raw_mbps": raw, "peak_growth_mib": growth / MiB}


class Dirtier(threading.Thread):
    """Keeps a compacted topic dirty at a steady rate (confluent-kafka, keyed 1 KiB records)."""

    def __init__(self, bootstrap: str, mbps: float, keys: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.mbps, self.keys = bootstrap, mbps, keys
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, "acks": "1", "log_level": 3})
        rng = random.Random(7)
        value = rng.randbytes(RECORD - 40)
        per_tick = max(1, int(self.mbps * 1e6 / RECORD / 20))  # 20 ticks a second
        t = time.perf_counter()
        while not self.stop.is_set():
            for _ in range(per_tick):
                p.produce(TABLE, key=b"key-%010d" % rng.randrange(self.keys), value=value, partition=0)
            self.sent += per_tick
            p.poll(0)
            t += 0.05
            time.sleep(max(0.0, t - time.perf_counter()))
        p.flush(30)


def fill_table(bootstrap: str, total_bytes: int, keys: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "1", "log_level": 3,
                  "queue.buffering.max.kbytes": 262144})
    rng = random.Random(3)
    value = rng.randbytes(RECORD - 40)
    for _ in range(total_bytes // RECORD):
        while True:
            try:
                p.produce(TABLE, key=b"key-%010d" % rng.randrange(keys), value=value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def phase_impact(a: argparse.Namespace, tool: object, scratch: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for enabled in ("false", "true"):
        b = Broker("odradek", scratch / f"impact-{enabled}", overrides=[
            f"log.cleaner.enable={enabled}", "log.cleaner.backoff.ms=1000", f"log.cleaner.dedupe.buffer.size={BUFFER}"])
        try:
            b.start()
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})
            admin.create_topics([NewTopic(TABLE, 1, 1, config={
                "cleanup.policy": "compact", "segment.bytes": str(16 * MiB), "min.cleanable.dirty.ratio": "0.1"})]
            )[TABLE].result(30)
            b.create_topic(TOPIC)
            b.create_topic(LATENCY_TOPIC)
            keys = a.table_mb * 1_000_000 // RECORD // 10
            fill_table(b.bootstrap, a.table_mb * 1_000_000, keys)
            dirtier = Dirtier(b.bootstrap, a.dirty_mbps, keys)
            dirtier.start()
            checkpoint = b.data_dir / "data" / CLEANER_CHECKPOINT
            progress0 = OffsetCheckpointFile(checkpoint).read().get((TABLE, 0), 0) if checkpoint.exists() else 0
            runs = [produce_once(tool, b, 1024, "1", a.produce_count, 120, scratch)  # type: ignore[arg-type]
                    for _ in range(a.produce_rounds)]
            run = sorted(runs, key=lambda r: r.mbps)[len(runs) // 2]  # the median run
            broker_throughput.TOPIC = LATENCY_TOPIC  # latency_once_c reads from the beginning of that topic
            try:
                lat = latency_once_c(tool, b, 10_000, a.latency_seconds, 2.0, a.latency_seconds + 60,  # type: ignore[arg-type]
                                     1.0, scratch)
            finally:
                broker_throughput.TOPIC = TOPIC
            dirtier.stop.set()
            dirtier.join(60)
            progress = OffsetCheckpointFile(checkpoint).read().get((TABLE, 0), 0) if checkpoint.exists() else 0
            out[enabled] = {"mbps": run.mbps, "rps": run.rps, "p50": lat.p50 / 1e3, "p99": lat.p99 / 1e3,
                            "cleaned_records": float(progress - progress0), "dirtied": float(dirtier.sent)}
            print(f"# cleaner {'on ' if enabled == 'true' else 'off'}: produce {run.mbps:.1f} MB/s "
                  f"({run.rps:,.0f} rec/s, broker {run.broker_cores:.2f} cores); latency p50 {lat.p50 / 1e3:.2f} ms "
                  f"p99 {lat.p99 / 1e3:.2f} ms at {lat.rate:,.0f} rec/s; table dirtied by {dirtier.sent:,} records, "
                  f"cleaner checkpoint moved {progress - progress0:,} offsets", flush=True)
        finally:
            b.stop()
    off, on = out["false"], out["true"]
    print(f"# impact: throughput with/without cleaner {on['mbps'] / off['mbps']:.2f} (goal >= 0.8: "
          f"{verdict(on['mbps'] / off['mbps'], 0.8)}); p99 {on['p99'] / off['p99']:.2f}x (goal <= 2: "
          f"{verdict(on['p99'] / off['p99'], 2.0, higher_is_better=False)})", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--log-mb", type=int, default=None)
    ap.add_argument("--table-mb", type=int, default=None)
    ap.add_argument("--dirty-mbps", type=float, default=10.0)
    ap.add_argument("--only", choices=("throughput", "impact"), default=None)
    ap.add_argument("--tmp-root", type=Path, default=DEFAULT_TMP_ROOT)
    ap.add_argument("--wait", type=float, default=0.0, help="wait up to this many seconds for an idle machine")
    a = ap.parse_args()
    a.log_mb = a.log_mb or (128 if a.quick else 512)
    a.table_mb = a.table_mb or (64 if a.quick else 256)
    a.produce_count = 100_000 if a.quick else 300_000
    a.produce_rounds = 3 if a.quick else 7
    a.latency_seconds = 8.0 if a.quick else 20.0
    print_facts(machine_facts(a.tmp_root))
    print(f"# command: python -m bench.cleaner {' '.join(sys.argv[1:])}", flush=True)
    if a.wait:
        wait_for_quiet_machine(a.wait)
    with scratch_dir(a.tmp_root, "bench-cleaner", 3 * a.log_mb * 1_000_000 + a.table_mb * 4_000_000) as scratch:
        if a.only in (None, "throughput"):
            phase_throughput(a, scratch)
        if a.only in (None, "impact"):
            tool = build_rdkafka_performance()
            phase_impact(a, tool, scratch)


if __name__ == "__main__":
    main()
