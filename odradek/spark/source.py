"""The ``odradek`` PySpark data source: batch reads of topics (``spark.read.format("odradek")``).

Spark's Kafka source schema, options and semantics, implemented on the Python Data Source API. The
driver plans (``partitions``) with confluent-kafka: it resolves the subscription and the offset bounds
into ranges (``offsets.py``) and gives each task one range in its ``RangePartition``, which carries
everything the task needs (picklable; the driver keeps no state tasks rely on). A task reads exactly
its range and yields Arrow record batches (``task.py``), so rerunning a task reads the same records.

Loaded automatically by PySpark 4 through the ``pyspark_odradek`` package (``DefaultSource``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from odradek.spark import options as opt
from odradek.spark.offsets import OffsetRange, plan, split, topic_partitions
from odradek.spark.options import consumer_config
from odradek.spark.task import RangePartition, read_range

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "timestampType int")
HEADERS = "headers array<struct<key: string, value: binary>>"
_META_TIMEOUT_S = 30


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

    consumer = Consumer(consumer_config(options.client))
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
