"""Writes of a DataFrame to topics: batch (``df.write.format("odradek")``) and streaming
(``df.writeStream.format("odradek")``), as Spark's Kafka sink does.

Columns: ``value`` (required, binary or string), optional ``key``, ``topic``, ``partition`` and
``headers`` (array of struct<key string, value binary>). The ``topic`` option, when given, wins over
the column. Each task produces its rows with one confluent-kafka producer and fails if any record is
not acknowledged, so a successful job (or micro-batch) has written every row at least once. Batch
writes are at-least-once, like Spark's own Kafka sink: a retried task writes its rows again.
Streaming writes are exactly-once for read_committed readers (``exactly_once.py``: a transaction
per task and micro-batch, skipped when the batch is replayed); ``exactlyOnce=false`` makes them
at-least-once, without transactions.

Tasks receive Arrow record batches (``DataSourceArrowWriter``), not per-row objects.

Save modes: a batch write needs ``.mode("append")``. Spark's default mode (ErrorIfExists) and Ignore are
refused by PySpark itself before this module runs (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``: Python data sources
take only Append and Overwrite); Overwrite is refused here (``OVERWRITE_REFUSED``), as Spark's Kafka sink refuses
it: records cannot be taken back out of a topic. Streaming writes take every output mode (each row is appended).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from odradek.spark.exactly_once import DEFAULT_PREFIX, write_transactionally

_FLUSH_TIMEOUT_S = 120
OVERWRITE_REFUSED = (
    'the odradek data source appends records to topics and cannot overwrite them (nor can Spark\'s Kafka sink): '
    'write with .mode("append"), e.g. df.write.format("odradek").option("kafka.bootstrap.servers", ...)'
    '.option("topic", ...).mode("append").save(); see docs/spark.md, "Writing"'
)


@dataclass(frozen=True)
class Written(WriterCommitMessage):  # type: ignore[misc]
    records: int


def _encode(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"expected binary or string, got {type(value).__name__}")


class _Target:
    """Where rows go: the client settings and the topic option, checked against the DataFrame's schema."""

    def __init__(self, options: dict[str, Any], schema: StructType) -> None:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        self.client = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
        if "bootstrap.servers" not in self.client:
            raise ValueError("option kafka.bootstrap.servers is required")
        self.topic = opts.get("topic")
        names = {f.name.lower(): f for f in schema.fields}
        if "value" not in names:
            raise ValueError("the DataFrame needs a value column (binary or string) to write records")
        for col in ("key", "value"):
            if col in names and not isinstance(names[col].dataType, BinaryType | StringType):
                raise ValueError(f"column {col} must be binary or string, not {names[col].dataType.simpleString()}")
        if self.topic is None and "topic" not in names:
            raise ValueError("say where to write: the topic option, or a topic column")

    def send(self, producer: Any, iterator: Iterator[pa.RecordBatch],
             on_delivery: Callable[[Any, Any], None] | None = None) -> tuple[int, str | None]:
        """Hand every row of ``iterator`` to ``producer``; returns (rows, the first row's topic)."""
        count = 0
        first_topic: str | None = None
        for batch in iterator:
            rows = batch.to_pydict()
            n = batch.num_rows
            values = rows["value"]
            keys = rows.get("key", [None] * n)
            topics = [self.topic] * n if self.topic is not None else rows["topic"]
            partitions = rows.get("partition", [None] * n)
            headers = rows.get("headers", [None] * n)
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise ValueError("a row has no topic: set the topic option or fill the topic column")
                first_topic = first_topic or topic
                kwargs: dict[str, Any] = {"value": _encode(values[i]), "key": _encode(keys[i])}
                if on_delivery is not None:
                    kwargs["on_delivery"] = on_delivery
                if partitions[i] is not None:
                    kwargs["partition"] = partitions[i]
                if headers[i]:
                    kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
                while True:
                    try:
                        producer.produce(topic, **kwargs)
                        break
                    except BufferError:  # local queue full: let deliveries drain
                        producer.poll(0.1)
                count += 1
            producer.poll(0)
        return count, first_topic

    def produce(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        """Produce every row of ``iterator``; returns once all are acknowledged, raises if any is not."""
        from confluent_kafka import KafkaException, Producer

        failures: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None and len(failures) < 5:
                failures.append(str(err))

        producer = Producer({**self.client, "enable.idempotence": False})
        try:
            count, _ = self.send(producer, iterator, on_delivery)
            left = producer.flush(_FLUSH_TIMEOUT_S)
        except KafkaException as e:
            raise RuntimeError(f"writing to the topic failed: {e}") from None
        if left:
            raise RuntimeError(f"{left} records were not acknowledged within {_FLUSH_TIMEOUT_S}s")
        if failures:
            raise RuntimeError(f"records were refused by the broker: {'; '.join(failures)}")
        return Written(count)


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, Any], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ValueError(OVERWRITE_REFUSED)
        self.target = _Target(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return self.target.produce(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # every task flushed its records before reporting success

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # records written by tasks that succeeded stay (at-least-once, as Spark's Kafka sink)


class StreamWriter(DataSourceStreamArrowWriter):
    """Exactly-once by default (``odradek.spark.exactly_once``); ``exactlyOnce=false`` for at-least-once."""

    def __init__(self, options: dict[str, Any], schema: StructType, overwrite: bool) -> None:
        self.target = _Target(options, schema)
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        flag = opts.get("exactlyonce", "true").strip().lower()
        if flag not in ("true", "false"):
            raise ValueError(f"option exactlyOnce must be true or false, got {opts['exactlyonce']!r}")
        self.exactly_once = flag == "true"
        self.prefix = opts.get("transactionalidprefix", DEFAULT_PREFIX)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        if not self.exactly_once:
            return self.target.produce(iterator)
        return Written(write_transactionally(self.target.client, self.prefix, iterator, self.target.send))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # each task committed its own transaction (or acknowledged its records) before reporting success

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # the micro-batch is replayed; with exactlyOnce, tasks that committed skip it
