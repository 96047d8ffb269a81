"""The ``odradek`` PySpark data source: batch reads of topics (``spark.read.format("odradek")``).

Spark's Kafka source schema, options and semantics, implemented on the Python Data Source API with
confluent-kafka inside. The driver plans (``partitions``): it resolves the subscription and the
offset bounds into ranges (``offsets.py``) and gives each task one range in its ``RangePartition``,
which carries everything the task needs (picklable; the driver keeps no state tasks rely on). A task
reads exactly its range and yields Arrow record batches, so rerunning a task reads the same records.

Loaded automatically by PySpark 4 through the ``pyspark_odradek`` package (``DefaultSource``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from odradek.spark import options as opt
from odradek.spark.offsets import DataLossError, OffsetRange, plan, split, topic_partitions

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "timestampType int")
HEADERS = "headers array<struct<key: string, value: binary>>"
BATCH_ROWS = 8192
_META_TIMEOUT_S = 30


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(header)))
    return pa.schema(fields)


def client_config(client: dict[str, str]) -> dict[str, Any]:
    """confluent-kafka settings for a connector consumer: never joins a group, never commits."""
    return {**client, "group.id": f"odradek-spark-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "enable.partition.eof": True, "auto.offset.reset": "error"}


class OdradekDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", self.options.get("includeheaders", "false"))).lower()
        return f"{SCHEMA}, {HEADERS}" if include == "true" else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(opt.parse(dict(self.options)))

    def streamReader(self, schema: StructType) -> Any:
        from odradek.spark.stream import StreamReader

        return StreamReader(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from odradek.spark.writer import StreamWriter

        return StreamWriter(dict(self.options), schema, overwrite)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from odradek.spark.writer import BatchWriter

        return BatchWriter(dict(self.options), schema, overwrite)


@dataclass(frozen=True)
class RangePartition(InputPartition):  # type: ignore[misc]
    client: dict[str, str]
    range: OffsetRange
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int


class BatchReader(DataSourceReader):
    def __init__(self, options: opt.SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        ranges = split(plan_ranges(self.options), self.options.min_partitions)
        o = self.options
        return [RangePartition(o.client, r, o.include_headers, o.fail_on_data_loss, o.poll_timeout_ms)
                for r in ranges] or [RangePartition(o.client, OffsetRange("", 0, 0, 0), o.include_headers, True, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_range(partition)


def plan_ranges(options: opt.SourceOptions) -> list[OffsetRange]:
    """Resolve the subscription and bounds against the cluster (driver side)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(client_config(options.client))
    try:
        watermarks = current_watermarks(consumer, options.subscription)
        tps = list(watermarks)

        def by_time(bound: opt.Bound) -> dict[tuple[str, int], int]:
            if bound.timestamp is None and not bound.timestamps:
                return {}
            wanted = [TopicPartition(t, p, bound.timestamp if bound.timestamp is not None
                                     else bound.timestamps.get((t, p), -1)) for t, p in tps]
            found = consumer.offsets_for_times(wanted, timeout=_META_TIMEOUT_S)
            return {(f.topic, f.partition): f.offset for f in found}

        return plan(options, watermarks, by_time(options.starting), by_time(options.ending))
    finally:
        consumer.close()


def current_watermarks(consumer: Any, subscription: opt.Subscription) -> dict[tuple[str, int], tuple[int, int]]:
    """(log start, log end) now of every partition the subscription names."""
    from confluent_kafka import TopicPartition

    tps = topic_partitions(consumer.list_topics(timeout=_META_TIMEOUT_S), subscription)
    return {tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=_META_TIMEOUT_S, cached=False)
            for tp in tps}


def read_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow batches (runs in a Spark task).

    Messages are checked one by one only for errors and the range end; the columns are then built
    with one comprehension each over the good messages, and topic and partition are constants.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    r = part.range
    if r.size <= 0:
        return
    schema = arrow_schema(part.include_headers)
    consumer = Consumer(client_config(part.client))
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        position = r.start
        first = True
        idle_budget = part.poll_timeout_ms / 1000
        while position < r.end:
            messages = consumer.consume(num_messages=min(BATCH_ROWS, r.end - position), timeout=1.0)
            if not messages:
                idle_budget -= 1.0
                if idle_budget <= 0:
                    raise TimeoutError(f"{r.topic}-{r.partition}: no records for {part.poll_timeout_ms} ms at offset "
                                       f"{position} (range ends at {r.end})")
                continue
            good = []
            for m in messages:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        log_end = m.offset()
                        if log_end is not None and log_end < r.end:  # the log is shorter than planned
                            _lost(part, f"the log ends at {log_end}, before the planned end {r.end}")
                            position = r.end
                        continue
                    if err.code() == KafkaError._AUTO_OFFSET_RESET or err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                        _lost(part, f"offset {position} is no longer in the log ({err.str()})")
                        consumer.assign([TopicPartition(r.topic, r.partition, -2)])  # earliest
                        continue
                    raise RuntimeError(f"{r.topic}-{r.partition}: {err.str()}")
                off = m.offset()
                if off >= r.end:
                    position = r.end
                    break
                if first:
                    first = False
                    if off > r.start:
                        _lost(part, f"offset {r.start} was requested but the first record is {off}")
                good.append(m)
                position = off + 1
            if good:
                yield _to_arrow(good, r, schema, part.include_headers)
    finally:
        consumer.close()


def _to_arrow(messages: list[Any], r: OffsetRange, schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    n = len(messages)
    stamps = [m.timestamp() for m in messages]
    columns: list[Any] = [
        [m.key() for m in messages], [m.value() for m in messages], pa.repeat(r.topic, n).cast(pa.string()),
        pa.repeat(r.partition, n).cast(pa.int32()), [m.offset() for m in messages],
        [ts * 1000 for _, ts in stamps], [1 if kind == 2 else 0 for kind, _ in stamps],
    ]
    if include_headers:
        columns.append([[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in messages])
    arrays = [c if isinstance(c, pa.Array) else pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _lost(part: RangePartition, what: str) -> None:
    if part.fail_on_data_loss:
        r = part.range
        raise DataLossError(f"{r.topic}-{r.partition} [{r.start}, {r.end}): {what}; set failOnDataLoss=false to skip "
                            "records that are gone")
