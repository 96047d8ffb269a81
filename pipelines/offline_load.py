"""Offline load: a topic into Parquet partitioned by date, continuing exactly where the last run stopped.

The design's Hadoop-load pattern: the consumer's position is stored with the data it produced, not in
the broker. Each run

1. deletes data files that no committed run lists (left by a run that died before its commit),
2. starts every partition at the end offset of the last committed run (new partitions at their log start),
   and ends it at the log end read now (so the range is fixed before reading, whatever arrives meanwhile),
3. writes the records as Parquet under ``OUTPUT/date=YYYY-MM-DD/`` (the record timestamp's date in the
   session time zone, UTC from the command line), and
4. commits by writing ``OUTPUT/_offsets/<run-id>.json`` (to a temporary name, then renamed) with the offset
   ranges, per-partition counts and the data files of the run.

A run that fails before step 4 leaves no offsets file, so the next run deletes its files and reads the same
ranges again: each record lands in the output exactly once. Only one run may write an output at a time.
Readers of the output (``spark.read.parquet(OUTPUT)``) do not see ``_offsets`` (Spark skips names starting
with ``_``), but may see a run's files before its commit; read only the files listed in ``_offsets`` for a
strict view.

    python -m pipelines.offline_load --bootstrap-server localhost:9092 --topic events --output /data/events
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OFFSETS_DIR = "_offsets"


@dataclass
class RunSummary:
    """What one run consumed: ``ranges[partition] = (start, end)``, end exclusive."""

    run_id: str
    topic: str
    ranges: dict[int, tuple[int, int]]
    records: dict[int, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    removed_orphans: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.records.values())


class _Files:
    """The output directory through Hadoop's FileSystem, so that OUTPUT may be local, HDFS, S3A, ..."""

    def __init__(self, spark: Any, output: str) -> None:
        sc = spark.sparkContext
        self.jvm = sc._jvm
        root = self.jvm.org.apache.hadoop.fs.Path(output)
        self.fs = root.getFileSystem(sc._jsc.hadoopConfiguration())
        self.root = self.fs.makeQualified(root)
        self.prefix = self.root.toString().rstrip("/") + "/"

    def path(self, relative: str) -> Any:
        return self.jvm.org.apache.hadoop.fs.Path(self.prefix + relative)

    def uri(self, relative: str) -> str:
        return self.prefix + relative

    def data_files(self) -> set[str]:
        """Relative names of the data files: everything except names starting with ``_`` or ``.``."""
        if not self.fs.exists(self.root):
            return set()
        found = set()
        it = self.fs.listFiles(self.root, True)
        while it.hasNext():
            name = it.next().getPath().toString()[len(self.prefix):]
            if not any(part.startswith(("_", ".")) for part in name.split("/")):
                found.add(name)
        return found

    def offsets_files(self) -> list[str]:
        directory = self.path(OFFSETS_DIR)
        if not self.fs.exists(directory):
            return []
        names = [s.getPath().getName() for s in self.fs.listStatus(directory)]
        return sorted(f"{OFFSETS_DIR}/{n}" for n in names if n.endswith(".json"))

    def read_text(self, relative: str) -> str:
        stream = self.fs.open(self.path(relative))
        try:
            return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(stream)).decode()
        finally:
            stream.close()

    def write_atomically(self, relative: str, text: str) -> None:
        tmp = self.path(f"{relative}.tmp-{uuid.uuid4().hex}")
        out = self.fs.create(tmp, True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        if not self.fs.rename(tmp, self.path(relative)):
            self.fs.delete(tmp, False)
            raise OSError(f"could not commit {self.uri(relative)}")

    def delete(self, relative: str) -> None:
        self.fs.delete(self.path(relative), False)


def committed_runs(spark: Any, output: str) -> list[dict[str, Any]]:
    """The commit records of the runs into ``output``, oldest first."""
    files = _Files(spark, output)
    return [json.loads(files.read_text(name)) for name in files.offsets_files()]


def _log_bounds(bootstrap: str, topic: str, client: dict[str, str]) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"offline-load-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, **client})
    try:
        meta = consumer.list_topics(topic, timeout=30)
        t = meta.topics.get(topic)
        if t is None or t.error is not None:
            raise ValueError(f"topic {topic!r} does not exist ({t.error if t is not None else 'no metadata'})")
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in sorted(t.partitions)}
    finally:
        consumer.close()


def run(spark: Any, bootstrap: str, topic: str, output: str, *, run_id: str | None = None,
        kafka_options: dict[str, str] | None = None, fail_on_data_loss: bool = True,
        log: Callable[[str], None] = print) -> RunSummary:
    """Load ``topic`` from where the last committed run into ``output`` stopped up to its current end."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    run_id = run_id or dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ") + "-" + uuid.uuid4().hex[:6]
    client = dict(kafka_options or {})
    files = _Files(spark, output)

    runs = [json.loads(files.read_text(name)) for name in files.offsets_files()]
    committed = {name for r in runs for name in r["files"]}
    runs = [r for r in runs if r["topic"] == topic]
    orphans = sorted(files.data_files() - committed)
    for name in orphans:
        log(f"removing {name}: written by a run that did not commit")
        files.delete(name)

    previous: dict[int, int] = {}
    for r in runs:
        for p, (_, end) in r["ranges"].items():
            previous[int(p)] = max(previous.get(int(p), 0), end)
    bounds = _log_bounds(bootstrap, topic, client)
    ranges = {p: (previous.get(p, low), high) for p, (low, high) in bounds.items()}
    for p, (start, end) in ranges.items():
        if start > end:
            raise ValueError(f"{topic}-{p}: the last run stopped at {start} but the log ends at {end} "
                             "(was the topic recreated?)")
    summary = RunSummary(run_id, topic, ranges, removed_orphans=orphans)
    pending = sum(end - start for start, end in ranges.values())
    log(f"run {run_id}: {topic} -> {output}, {len(ranges)} partitions, {len(runs)} earlier runs, "
        f"up to {pending} records")
    if pending == 0:
        summary.records = {p: 0 for p in ranges}
        summary.seconds = time.monotonic() - started
        log("nothing new since the last run")
        return summary

    reader = (spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", json.dumps({topic: {str(p): s for p, (s, _) in ranges.items()}}))
              .option("endingOffsets", json.dumps({topic: {str(p): e for p, (_, e) in ranges.items()}}))
              .option("failOnDataLoss", str(fail_on_data_loss).lower()))
    for k, v in client.items():
        reader = reader.option(f"kafka.{k}", v)
    df = reader.load().withColumn("date", F.date_format("timestamp", "yyyy-MM-dd"))

    before = files.data_files()
    df.write.mode("append").partitionBy("date").parquet(output)
    summary.files = sorted(files.data_files() - before)

    if summary.files:
        written = spark.read.parquet(*[files.uri(f) for f in summary.files])
        counts = {r["partition"]: r["count"] for r in written.groupBy("partition").count().collect()}
    else:
        counts = {}
    summary.records = {p: counts.get(p, 0) for p in ranges}
    record = {"run_id": run_id, "topic": topic, "committed_at": dt.datetime.now(dt.UTC).isoformat(),
              "ranges": {str(p): [s, e] for p, (s, e) in ranges.items()},
              "records": {str(p): n for p, n in summary.records.items()}, "files": summary.files}
    files.write_atomically(f"{OFFSETS_DIR}/{run_id}.json", json.dumps(record, indent=1) + "\n")
    summary.seconds = time.monotonic() - started
    for p, (s, e) in ranges.items():
        log(f"  {topic}-{p}: offsets [{s}, {e}) -> {summary.records[p]} records")
    log(f"run {run_id} committed: {summary.total} records in {len(summary.files)} files, {summary.seconds:.1f} s")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.offline_load", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-server", required=True, help="host:port of the broker")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, help="output directory (local path or any Hadoop URI)")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                        help="client option passed to the connector as kafka.KEY (repeatable)")
    parser.add_argument("--allow-data-loss", action="store_true",
                        help="skip records removed by retention since the last run instead of failing")
    args = parser.parse_args(argv)
    client = dict(kv.split("=", 1) for kv in args.kafka_option)

    from pipelines import spark_session

    spark = spark_session("odradek-offline-load")
    spark.sparkContext.setLogLevel("WARN")
    try:
        run(spark, args.bootstrap_server, args.topic, args.output, kafka_options=client,
            fail_on_data_loss=not args.allow_data_loss)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
