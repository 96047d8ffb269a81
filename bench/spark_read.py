"""Benchmark of the ``odradek`` PySpark data source (issue 5) beside Spark's own baselines, in one run.

    python -m bench.spark_read                  # 5 M records of 100 B (~6 min with an idle machine)
    python -m bench.spark_read --quick          # smoke run: 200 k records, 1 trial, 8 micro-batches
    python -m bench.spark_read --records 1000000 --trials 1

What it does:

1. starts ``odradek serve`` with an empty data directory under ``--tmp``, creates a topic of
   ``--partitions`` partitions and loads ``--records`` records of 100 B (null key, unique
   incompressible values: an 8-byte counter + 92 bytes sliced from a random buffer) with
   confluent-kafka producers in ``--producers`` processes, one partition range each; reports the load
   rate. (rdkafka_performance is not used: its values are a repeated pattern, which Parquet would
   dictionary-encode into nothing and so flatter the Parquet baseline.)
2. Spark ``local[2]``: ``spark.read.format("odradek")...load()`` with ``minPartitions`` (default
   2 x cores) into ``selectExpr("count(*)", "sum(length(value))")`` -- an aggregation that has to touch
   every row, so neither side can answer from metadata -- and into Parquet (snappy, Spark's default).
3. The Parquet written once by an odradek read is Spark's baseline: the same rows, same schema. Spark
   reads it into the same aggregation and into Parquet again. Ratio odradek/Parquet per query (goal
   in the issue: >= 0.5). Beside them the ceiling of any Python data source (``_spark_ceiling.py``:
   Arrow batches already in memory) into the same two queries.
4. Streaming: a trivial query (``readStream`` -> ``noop`` sink, ``Trigger.processingTime`` of
   ``--trigger-ms``) over the odradek topic while a producer trickles ``--trickle-rate`` records/s,
   and the same query over Spark's built-in ``rate`` source at the same rate. Median/p90 of
   ``durationMs.triggerExecution`` over ``--batches`` micro-batches after 3 warm-up batches.
5. Unless ``--no-probe``: where a task's time goes, outside Spark -- one partition's range read with a
   bare confluent-kafka consume loop, with both of a task's readers (``odradek.spark.task``:
   ``read_consumed`` and ``read_fetched``), ``read_fetched`` with both isolation levels over a
   transactional topic (one transaction in four aborted), and ``read_fetched`` under cProfile.

Each timed Spark query runs once untimed (warming the JVM's code paths, the Python workers and, for
odradek, numba's compile cache), then ``--trials`` rounds run every query in turn, so that both
sides meet an equally warm JVM; the table shows the median, each trial is printed. Other CPU use
(processes outside this benchmark's process tree) is measured over the run and printed.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import multiprocessing as mp
import os
import pstats
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    DEFAULT_TMP_ROOT,
    GB,
    machine_facts,
    median,
    percentile,
    print_facts,
    scratch_dir,
    wait_for_idle,
)
from bench._kafka import Broker
from bench._spark_ceiling import CeilingSource

TOPIC = "spark-bench"
STREAM_TOPIC = "spark-bench-stream"
VALUE_LEN = 100
GOAL = 0.5
WARMUP = 1  # untimed runs of each batch query before its trials


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- other load on the machine -------------------------------------------------------------------


def _tree_cpu() -> float:
    """CPU seconds of this process and every live descendant (Spark's JVM, Python workers, the broker),
    with the time of their reaped children; plus our own reaped children."""
    tck = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cols = (p / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(p.name)] = int(cols[1])
        cpu[int(p.name)] = sum(int(c) for c in cols[11:15]) / tck
    me = os.getpid()
    total = 0.0
    for pid in cpu:
        q, hops = pid, 0
        while q > 1 and q != me and hops < 64:
            q, hops = parent.get(q, 0), hops + 1
        if q == me and pid != me:
            total += cpu[pid]
    t = os.times()
    return total + t.user + t.system + t.children_user + t.children_system


def _busy_seconds() -> float:
    with open("/proc/stat") as f:
        cols = [int(x) for x in f.readline().split()[1:]]
    return (sum(cols[:8]) - cols[3] - cols[4]) / os.sysconf("SC_CLK_TCK")


class TreeCpuWatch:
    """Share of the machine's CPUs used by processes outside this benchmark's process tree."""

    def __init__(self) -> None:
        self.t0, self.busy0, self.own0 = time.monotonic(), _busy_seconds(), _tree_cpu()

    def other_share(self) -> float:
        elapsed = time.monotonic() - self.t0
        other = (_busy_seconds() - self.busy0) - (_tree_cpu() - self.own0)
        return max(0.0, other / (elapsed * (os.cpu_count() or 1))) if elapsed > 0 else 0.0


def busy_processes() -> list[str]:
    """Command lines of pytest runs and other benchmarks now running (outside this process tree)."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() or "bench.spark_read" in cmd:
            continue
        if re.search(r"\bpytest\b|-m bench\.\w+|bench/\w+\.py|rdkafka_performance", cmd):
            found.append(cmd)
    return found


def wait_for_machine(max_wait: float) -> list[str]:
    t0 = time.monotonic()
    while (busy := busy_processes()) and time.monotonic() - t0 < max_wait:
        log(f"waiting: {len(busy)} pytest/benchmark process(es) running, e.g. {busy[0][:100]}")
        time.sleep(min(30.0, max(1.0, max_wait - (time.monotonic() - t0))))
    notes = [f"other benchmarks/pytest at start: {'none' if not busy else 'STILL RUNNING: ' + busy[0][:100]} "
             f"(waited {time.monotonic() - t0:.0f} s)"]
    notes.append(wait_for_idle(max(5.0, max_wait - (time.monotonic() - t0))))
    return notes


# -- loading the topic ---------------------------------------------------------------------------


def _produce_worker(bootstrap: str, topic: str, partitions: list[int], count: int, first: int,
                    done: Any) -> None:
    """Produce ``count`` records round-robin over ``partitions``; values unique and incompressible."""
    from confluent_kafka import Producer

    rnd = os.urandom(1 << 20)
    span = len(rnd) - (VALUE_LEN - 8)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False, "linger.ms": 5,
                  "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 1_048_576, "log_level": 3})
    errors = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1

    n_parts = len(partitions)
    for i in range(first, first + count):
        off = (i * 7919) % span
        value = i.to_bytes(8, "big") + rnd[off:off + VALUE_LEN - 8]
        while True:
            try:
                p.produce(topic, value, partition=partitions[i % n_parts], on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i & 0xFFFF == 0:
            p.poll(0)
    left = p.flush(120)
    done.put((count - left - errors[0], errors[0] + left))


def load_topic(bootstrap: str, topic: str, partitions: int, records: int, producers: int) -> tuple[float, int]:
    """Load ``records`` records with ``producers`` processes; returns (seconds, records acknowledged)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    producers = max(1, min(producers, partitions))
    parts = [list(range(partitions))[i::producers] for i in range(producers)]
    share = [records // producers + (1 if i < records % producers else 0) for i in range(producers)]
    firsts = [sum(share[:i]) for i in range(producers)]
    procs = [ctx.Process(target=_produce_worker, args=(bootstrap, topic, parts[i], share[i], firsts[i], q))
             for i in range(producers)]
    t0 = time.perf_counter()
    for pr in procs:
        pr.start()
    ok = bad = 0
    deadline = time.monotonic() + max(120.0, records / 50_000)
    for _ in procs:
        a, b = q.get(timeout=max(1.0, deadline - time.monotonic()))
        ok, bad = ok + a, bad + b
    seconds = time.perf_counter() - t0
    for pr in procs:
        pr.join(timeout=30)
    if bad:
        raise RuntimeError(f"{bad} records were not acknowledged")
    return seconds, ok


def log_ends(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-bench-ends", "log_level": 3})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                for p in range(partitions)]
    finally:
        c.close()


# -- Spark ---------------------------------------------------------------------------------------


def spark_session(cores: int, scratch: Path) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import odradek.spark

    spark = (SparkSession.builder.master(f"local[{cores}]").appName("odradek-spark-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g")
             .config("spark.sql.shuffle.partitions", str(cores))
             .config("spark.local.dir", str(scratch / "spark-local"))
             .config("spark.sql.streaming.checkpointLocation", str(scratch / "checkpoints"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    odradek.spark.register(spark)
    from pyspark import cloudpickle  # ship the ceiling source by value, not by import in the workers

    cloudpickle.register_pickle_by_value(sys.modules[CeilingSource.__module__])
    spark.dataSource.register(CeilingSource)
    return spark


@dataclass
class Timed:
    name: str
    rows: int
    seconds: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        s = median(self.seconds)
        return self.rows / s if s > 0 else float("nan")


def timed_round_robin(queries: dict[str, tuple[str, Callable[[], None]]], rows: int, trials: int,
                      warmup: int = WARMUP) -> dict[str, Timed]:
    """Each query ``warmup`` times untimed, then ``trials`` rounds of every query in turn, so that
    odradek and the Parquet baseline meet the JVM equally warm (its JIT keeps improving for minutes)."""
    for i in range(warmup):
        for name, fn in queries.values():
            t0 = time.perf_counter()
            fn()
            log(f"  {name}: warm-up {i + 1}/{warmup}: {time.perf_counter() - t0:.2f} s (not counted)")
    res = {key: Timed(name, rows) for key, (name, _fn) in queries.items()}
    for i in range(trials):
        for key, (name, fn) in queries.items():
            t0 = time.perf_counter()
            fn()
            res[key].seconds.append(time.perf_counter() - t0)
            log(f"  {name}: trial {i + 1}/{trials}: {res[key].seconds[-1]:.2f} s = "
                f"{rows / res[key].seconds[-1]:,.0f} rows/s")
    return res


def scan_check(df: Any, rows: int) -> None:
    r = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
    if r["n"] != rows or r["b"] != rows * VALUE_LEN:
        raise RuntimeError(f"scan saw {r['n']} rows, {r['b']} value bytes; expected {rows}, {rows * VALUE_LEN}")


def batch_reads(spark: Any, bootstrap: str, rows: int, min_partitions: int, trials: int,
                scratch: Path) -> dict[str, Timed]:
    def odradek_df() -> Any:
        return (spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", TOPIC).option("minPartitions", str(min_partitions)).load())

    def ceiling_df() -> Any:
        return (spark.read.format("arrow-ceiling").option("rows", str(rows)).option("partitions", str(min_partitions))
                .option("valueLen", str(VALUE_LEN)).load())

    base = scratch / "baseline.parquet"
    out = scratch / "out.parquet"
    odradek_out = scratch / "odradek-out.parquet"
    log(f"batch: odradek -> Parquet once, as the baseline's input (minPartitions={min_partitions})")
    odradek_df().write.mode("overwrite").parquet(str(base))
    size = sum(f.stat().st_size for f in base.rglob("*.parquet"))
    log(f"  baseline Parquet: {size / 1e6:.0f} MB in {len(list(base.glob('*.parquet')))} files")
    queries: dict[str, tuple[str, Callable[[], None]]] = {
        "odradek_scan": ("odradek -> count(*), sum(length(value))", lambda: scan_check(odradek_df(), rows)),
        "parquet_scan": ("Parquet -> count(*), sum(length(value))",
                         lambda: scan_check(spark.read.parquet(str(base)), rows)),
        "ceiling_scan": ("ceiling -> count(*), sum(length(value))", lambda: scan_check(ceiling_df(), rows)),
        "odradek_parquet": ("odradek -> Parquet",
                            lambda: odradek_df().write.mode("overwrite").parquet(str(odradek_out))),
        "parquet_parquet": ("Parquet -> Parquet",
                            lambda: spark.read.parquet(str(base)).write.mode("overwrite").parquet(str(out))),
        "ceiling_parquet": ("ceiling -> Parquet",
                            lambda: ceiling_df().write.mode("overwrite").parquet(str(out))),
    }
    res = timed_round_robin(queries, rows, trials)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(odradek_out, ignore_errors=True)
    return res


# -- streaming -----------------------------------------------------------------------------------


class Trickle:
    """A producer thread sending ``rate`` records/s (in 10 ms slices) until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "log_level": 3})
        self.topic, self.rate, self.sent = topic, rate, 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        value = os.urandom(VALUE_LEN)
        while not self.stop_event.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            for _ in range(min(due - self.sent, 100_000)):
                self.producer.produce(self.topic, value)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(10)

    def __enter__(self) -> Trickle:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(timeout=30)


@dataclass
class StreamResult:
    name: str
    trigger_ms: list[float]
    parts: dict[str, float]  # median of each durationMs entry
    rows_per_batch: float
    note: str = ""


def _progress(p: Any) -> dict[str, Any]:
    if isinstance(p, dict):
        return p
    return {"durationMs": dict(p.durationMs), "numInputRows": p.numInputRows, "batchId": p.batchId}


def run_stream(name: str, sdf: Any, trigger_ms: int, batches: int, max_seconds: float, scratch: Path,
               need_rows: bool) -> StreamResult:
    warm = 3
    q = (sdf.writeStream.format("noop").queryName(re.sub(r"\W", "_", name))
         .option("checkpointLocation", str(scratch / f"ckpt-{re.sub(r'[^a-z]', '', name.lower())}"))
         .trigger(processingTime=f"{trigger_ms} milliseconds").start())
    seen: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + max_seconds
    note = ""
    try:
        last_print = 0
        while True:
            for p in q.recentProgress:
                d = _progress(p)
                if not need_rows or d["numInputRows"] > 0:
                    seen.setdefault(d["batchId"], d)
            if len(seen) - last_print >= 5:
                last_print = len(seen)
                log(f"  {name}: {len(seen)} micro-batches")
            if len(seen) >= batches + warm:
                break
            if q.exception() is not None:
                raise RuntimeError(f"{name}: {q.exception()}")
            if time.monotonic() > deadline:
                note = f"only {len(seen)} batches within {max_seconds:.0f} s"
                break
            time.sleep(0.2)
    finally:
        q.stop()
    use = [seen[k] for k in sorted(seen)][warm:warm + batches]
    keys = sorted({k for d in use for k in d["durationMs"]})
    parts = {k: median([float(d["durationMs"].get(k, 0)) for d in use]) for k in keys}
    return StreamResult(name, [float(d["durationMs"]["triggerExecution"]) for d in use], parts,
                        median([float(d["numInputRows"]) for d in use]), note)


def streaming(spark: Any, broker: Broker, rate: int, trigger_ms: int, batches: int, max_seconds: float,
              scratch: Path) -> list[StreamResult]:
    broker.create_topic(STREAM_TOPIC, 1)
    out = []
    with Trickle(broker.bootstrap, STREAM_TOPIC, rate):
        log(f"streaming: odradek -> noop, trigger {trigger_ms} ms, producer trickling {rate} records/s")
        sdf = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
               .option("subscribe", STREAM_TOPIC).option("startingOffsets", "latest").load())
        out.append(run_stream("odradek", sdf, trigger_ms, batches, max_seconds, scratch, need_rows=True))
    log(f"streaming: rate source ({rate} rows/s) -> noop, trigger {trigger_ms} ms")
    sdf = spark.readStream.format("rate").option("rowsPerSecond", str(rate)).load()
    out.append(run_stream("rate", sdf, trigger_ms, batches, max_seconds, scratch, need_rows=True))
    return out


# -- where a task's time goes --------------------------------------------------------------------


def probe(bootstrap: str, end: int, top: int) -> list[str]:
    """One partition's range [0, end) read in this process, outside Spark: a bare confluent-kafka
    consume loop, then both of a task's readers, then the fetch reader under cProfile."""
    from confluent_kafka import Consumer, TopicPartition

    from odradek.spark import options as opt
    from odradek.spark.offsets import OffsetRange
    from odradek.spark.task import RangePartition, read_consumed, read_fetched

    lines = []
    o = opt.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC})

    c = Consumer(opt.consumer_config(o.client))
    c.assign([TopicPartition(TOPIC, 0, 0)])
    n = 0
    t0 = time.perf_counter()
    while n < end and time.perf_counter() - t0 < 120:
        for m in c.consume(num_messages=min(8192, end - n), timeout=1.0):
            if m.error() is None:
                m.key(), m.value(), m.offset(), m.timestamp()
                n += 1
    bare = time.perf_counter() - t0
    c.close()
    lines.append(f"bare confluent-kafka consume(8192) loop + key/value/offset/timestamp: {n:,} rows in {bare:.2f} s "
                 f"= {n / bare:,.0f} rows/s")

    part = RangePartition(o.client, OffsetRange(TOPIC, 0, 0, end), False, True, o.poll_timeout_ms)
    for name, reader in (("task.read_consumed (confluent-kafka, Arrow batches)", read_consumed),
                         ("task.read_fetched (Fetch + bulk decode, warm-up)", read_fetched),
                         ("task.read_fetched (Fetch + bulk decode)", read_fetched)):
        t0 = time.perf_counter()
        n = sum(b.num_rows for b in reader(part))
        took = time.perf_counter() - t0
        lines.append(f"{name + ':':<55} {n:,} rows in {took:.2f} s = {n / took:,.0f} rows/s")

    lines += probe_read_committed(o.client, min(end, TXN_PROBE_RECORDS))

    prof = cProfile.Profile()
    prof.enable()
    n = sum(b.num_rows for b in read_fetched(part))
    prof.disable()
    s = io.StringIO()
    st = pstats.Stats(prof, stream=s)
    total = sum(v[2] for v in st.stats.values())  # type: ignore[attr-defined]
    lines.append(f"read_fetched under cProfile, self time (tottime) of {total:.2f} s, top {top}:")
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    for (fname, line, func), v in rows:
        where = f"{Path(fname).name}:{line}" if fname != "~" else "builtin"
        lines.append(f"  {v[2] / total:6.1%}  {v[2]:6.2f} s  {v[0]:>10,} calls  {func} ({where})")
    return lines


TXN_PROBE_RECORDS = 500_000
TXN_PROBE_SIZE = 5_000  # records per transaction; every 4th transaction is aborted


def probe_read_committed(client: dict[str, str], records: int) -> list[str]:
    """A 1-partition topic written in transactions of ``TXN_PROBE_SIZE`` 100-byte records, one in four
    aborted, read by the fetch reader with both isolation levels (the aborted batches are left out per
    batch under read_committed)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from odradek.spark.offsets import OffsetRange
    from odradek.spark.task import RangePartition, read_fetched

    topic = f"{TOPIC}-txn"
    admin = AdminClient({"bootstrap.servers": client["bootstrap.servers"]})  # alive until the result
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    p = Producer({"bootstrap.servers": client["bootstrap.servers"], "transactional.id": "bench-spark-txn",
                  "linger.ms": 5})
    p.init_transactions(30)
    value = os.urandom(100)
    t0 = time.perf_counter()
    for i in range(0, records, TXN_PROBE_SIZE):
        p.begin_transaction()
        for _ in range(min(TXN_PROBE_SIZE, records - i)):
            p.produce(topic, value, partition=0)
            p.poll(0)
        if (i // TXN_PROBE_SIZE) % 4 == 3:
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)
    load = time.perf_counter() - t0
    [end] = log_ends(client["bootstrap.servers"], topic, 1)
    lines = [f"transactional topic: {records:,} records in transactions of {TXN_PROBE_SIZE:,}, every 4th aborted, "
             f"loaded in {load:.2f} s; offsets [0, {end:,})"]
    for isolation in ("read_uncommitted", "read_committed", "read_uncommitted", "read_committed"):
        part = RangePartition({**client, "isolation.level": isolation}, OffsetRange(topic, 0, 0, end), False, True,
                              30_000)
        t0 = time.perf_counter()
        n = sum(b.num_rows for b in read_fetched(part))
        took = time.perf_counter() - t0
        lines.append(f"{'task.read_fetched, ' + isolation + ':':<55} {n:,} rows in {took:.2f} s = "
                     f"{n / took:,.0f} rows/s")
    return lines


# -- report --------------------------------------------------------------------------------------


def table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def fmt_rate(x: float) -> str:
    return f"{x / 1e6:.2f} M rows/s" if x >= 1e6 else f"{x / 1e3:,.0f} k rows/s"


@contextlib.contextmanager
def started_broker(scratch: Path) -> Iterator[Broker]:
    b = Broker("odradek", scratch / "broker")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_read", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=5_000_000, help="records of 100 B to load (default 5,000,000)")
    ap.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4)")
    ap.add_argument("--producers", type=int, default=2, help="producer processes for the load (default 2)")
    ap.add_argument("--cores", type=int, default=2, help="Spark local[N] (default 2)")
    ap.add_argument("--min-partitions", type=int, default=0,
                    help="minPartitions of the odradek read (default 2 x cores)")
    ap.add_argument("--trials", type=int, default=5,
                    help="timed runs of each batch query after its warm-up (default 5)")
    ap.add_argument("--batches", type=int, default=20, help="micro-batches measured per streaming query (default 20)")
    ap.add_argument("--trigger-ms", type=int, default=0, help="Trigger.processingTime in ms (default 0)")
    ap.add_argument("--trickle-rate", type=int, default=1000, help="records/s while streaming (default 1000)")
    ap.add_argument("--stream-max-seconds", type=float, default=180, help="bound of each streaming query (180)")
    ap.add_argument("--max-wait", type=float, default=300, help="seconds to wait for an idle machine (300)")
    ap.add_argument("--no-probe", action="store_true", help="skip the task profile outside Spark")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help=f"scratch root (default {DEFAULT_TMP_ROOT})")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 200,000 records, 1 trial, 8 micro-batches, no waiting for an idle machine")
    a = ap.parse_args()
    if a.quick:
        a.records, a.trials, a.batches, a.max_wait = min(a.records, 200_000), 1, 8, 0
        a.stream_max_seconds = min(a.stream_max_seconds, 90)
    min_parts = a.min_partitions or 2 * a.cores

    facts = machine_facts(a.tmp if a.tmp.exists() else Path("/"))
    import pyspark

    facts["spark"] = f"PySpark {pyspark.__version__}, local[{a.cores}], driver memory 4g"
    print_facts(facts)
    notes = wait_for_machine(a.max_wait) if a.max_wait > 0 else ["no waiting for an idle machine (--quick)"]
    for n in notes:
        print(f"# {n}")
    watch = TreeCpuWatch()
    t_start = time.monotonic()
    need = a.records * VALUE_LEN * 6 + 2 * GB
    with scratch_dir(a.tmp, "spark-read", need) as scratch, started_broker(scratch) as broker:
        broker.create_topic(TOPIC, a.partitions)
        log(f"load: {a.records:,} records of {VALUE_LEN} B into {TOPIC} ({a.partitions} partitions), "
            f"{a.producers} producer processes")
        w = TreeCpuWatch()
        b_cpu0 = broker.cpu()
        load_s, acked = load_topic(broker.bootstrap, TOPIC, a.partitions, a.records, a.producers)
        ends = log_ends(broker.bootstrap, TOPIC, a.partitions)
        if sum(ends) != a.records:
            raise RuntimeError(f"log ends {ends} sum to {sum(ends)}, expected {a.records}")
        load_other = w.other_share()
        log(f"  loaded {acked:,} records in {load_s:.2f} s = {acked / load_s:,.0f} records/s "
            f"({acked * VALUE_LEN / load_s / 1e6:.0f} MB/s), broker CPU {broker.cpu() - b_cpu0:.1f} s, "
            f"log ends {ends}")

        log(f"Spark local[{a.cores}] starting")
        spark = spark_session(a.cores, scratch)
        try:
            w = TreeCpuWatch()
            batch = batch_reads(spark, broker.bootstrap, a.records, min_parts, a.trials, scratch)
            batch_other = w.other_share()
            w = TreeCpuWatch()
            streams = streaming(spark, broker, a.trickle_rate, a.trigger_ms, a.batches, a.stream_max_seconds,
                                scratch)
            stream_other = w.other_share()
        finally:
            spark.stop()
        probe_lines: list[str] = []
        if not a.no_probe:
            log(f"probe: partition 0 ({ends[0]:,} records) read in this process, outside Spark")
            probe_lines = probe(broker.bootstrap, ends[0], 14)
    other = watch.other_share()

    print()
    print(f"## Results ({a.records:,} records of {VALUE_LEN} B, {a.partitions} partitions, "
          f"minPartitions={min_parts}, Spark local[{a.cores}], median of {a.trials} trial(s))")
    print()
    print(f"Load (confluent-kafka, {a.producers} processes, acks=1): {acked / load_s:,.0f} records/s, "
          f"{acked * VALUE_LEN / load_s / 1e6:.0f} MB/s of values, {load_s:.2f} s; other CPU {load_other:.0%}")
    print()
    rows = []
    for what, mine, base, top in (
            ("scan: count(*), sum(length(value))", "odradek_scan", "parquet_scan", "ceiling_scan"),
            ("into Parquet (snappy)", "odradek_parquet", "parquet_parquet", "ceiling_parquet")):
        r = batch[mine].rate / batch[base].rate

        def cell(key: str) -> str:
            return f"{fmt_rate(batch[key].rate)} ({median(batch[key].seconds):.2f} s)"

        rows.append([what, cell(mine), cell(base), f"**{r:.3f}** ({'met' if r >= GOAL else 'NOT met'})", cell(top),
                     f"{batch[top].rate / batch[base].rate:.3f}", f"{batch[mine].rate / batch[top].rate:.3f}"])
    table(["batch read", "odradek topic", "Spark Parquet baseline (same rows)", f"odradek / Parquet (goal >= {GOAL})",
           "ceiling: Python source, batches in memory", "ceiling / Parquet", "odradek / ceiling"], rows)
    print(f"\nother CPU during the batch reads: {batch_other:.0%}")
    print()
    od, rt = streams
    srows = []
    for s in streams:
        srows.append([s.name, f"{median(s.trigger_ms):.0f} ms", f"{percentile(s.trigger_ms, 90):.0f} ms",
                      f"{len(s.trigger_ms)}", f"{s.rows_per_batch:.0f}",
                      ", ".join(f"{k} {v:.0f}" for k, v in sorted(s.parts.items(), key=lambda kv: -kv[1])
                                if k != "triggerExecution" and v >= 1) + (f" ({s.note})" if s.note else "")])
    print(f"Streaming: trivial query -> noop sink, Trigger.processingTime {a.trigger_ms} ms, "
          f"{a.trickle_rate} records/s in")
    print()
    table(["source", "triggerExecution p50", "p90", "batches", "rows/batch (median)", "median ms of the parts"],
          srows)
    print(f"\nodradek/rate p50 latency: {median(od.trigger_ms) / median(rt.trigger_ms):.2f}x; "
          f"other CPU during the streaming queries: {stream_other:.0%}")
    if probe_lines:
        print("\nWhere a task's time goes (partition 0 read in one Python process, outside Spark):")
        for line in probe_lines:
            print(f"  {line}")
    print(f"\nother CPU use during the run (outside this benchmark's process tree): {other:.0%} of "
          f"{os.cpu_count()} CPUs; run time {time.monotonic() - t_start:.0f} s")


if __name__ == "__main__":
    main()
