"""What a Spark task runs: one offset range of one topic-partition, read into Arrow record batches.

Everything a task needs travels in its ``RangePartition`` (picklable); nothing on the driver is
consulted. A task reads exactly ``[start, end)``, so rerunning it reads the same records.

Two readers, the same rows (tested against each other):

- **fetch** (the default): Fetch requests straight to the leader (``fetcher.py``) and record sets
  decoded in bulk into Arrow columns (``columnar.py``); one Arrow batch per Fetch response, and the
  next Fetch is sent before the current one is decoded.
- **consumer**: a confluent-kafka consumer, one ``Message`` per record. Used when the client settings
  ask for what the fetch reader does not do: ``security.protocol`` other than PLAINTEXT (TLS, SASL).

Both honour ``kafka.isolation.level``: with ``read_committed`` a task reads up to the last stable
offset and leaves out the records of aborted transactions.

Data loss (records gone before the task read them: retention, truncation) is a ``DataLossError`` with
``failOnDataLoss=true``; otherwise the reader skips to what is left, as Spark's Kafka source does:

- the range starts below the log start: continue from the log start;
- the log ends before the range end: stop there.

Offsets without a row are not data loss while the log still starts at or before them (Spark's rule):
records removed by compaction, and under read_committed the records of aborted transactions and the
transaction markers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from odradek.spark import columnar, fetcher
from odradek.spark.offsets import DataLossError, OffsetRange
from odradek.spark.options import consumer_config

CONSUMER_BATCH_ROWS = 8192


@dataclass(frozen=True)
class RangePartition(InputPartition):  # type: ignore[misc]
    client: dict[str, str]
    range: OffsetRange
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int


def read_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """The records of ``part.range`` as Arrow batches in Spark's Kafka schema."""
    if part.range.size <= 0:
        return iter(())
    return read_fetched(part) if fetch_reader_applies(part.client) else read_consumed(part)


def fetch_reader_applies(client: dict[str, str]) -> bool:
    protocol = client.get("security.protocol", "plaintext").lower()
    secure = any(key.startswith(("sasl.", "ssl.")) for key in client)
    return protocol == "plaintext" and not secure


ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


def fetch_settings(client: dict[str, str]) -> fetcher.Settings:
    """Fetch settings from the ``kafka.*`` options, under the names of both Kafka's clients."""
    def ms(*names: str, default: int) -> int:
        for name in names:
            if name in client:
                try:
                    return int(client[name])
                except ValueError:
                    raise ValueError(f"option kafka.{name}={client[name]!r} must be an integer") from None
        return default

    isolation = client.get("isolation.level", "read_uncommitted").lower()
    if isolation not in ISOLATION_LEVELS:
        raise ValueError(f"option kafka.isolation.level={client['isolation.level']!r} must be read_uncommitted or "
                         "read_committed")
    return fetcher.Settings(
        client_id=client.get("client.id", "odradek-spark"),
        isolation_level=ISOLATION_LEVELS[isolation],
        timeout_s=ms("request.timeout.ms", "socket.timeout.ms", default=30_000) / 1000,
        max_wait_ms=ms("fetch.max.wait.ms", "fetch.wait.max.ms", default=500),
        partition_max_bytes=ms("max.partition.fetch.bytes", default=8 << 20),
    )


def read_fetched(part: RangePartition) -> Iterator[pa.RecordBatch]:
    r = part.range
    servers = part.client.get("bootstrap.servers")
    if not servers:
        raise ValueError("option kafka.bootstrap.servers is required")
    check_crcs = part.client.get("check.crcs", "true").lower() != "false"
    position = r.start
    idle_until = time.monotonic() + part.poll_timeout_ms / 1000
    with fetcher.PartitionFetcher(fetcher.parse_bootstrap(servers), r.topic, r.partition,
                                  fetch_settings(part.client)) as source:
        while position < r.end:
            got = source.fetch(position)
            if got.error == fetcher.ErrorCode.OFFSET_OUT_OF_RANGE:
                log_start = source.list_offset(fetcher.EARLIEST)
                if position < log_start:
                    _lost(part, f"offset {position} is no longer in the log, which starts at {log_start}")
                    position = log_start
                    continue
                _lost(part, f"the log ends at {source.list_offset(fetcher.LATEST)}, before the planned end {r.end}")
                return
            if got.error != fetcher.ErrorCode.NONE:
                raise fetcher.FetchError(f"{r.topic}-{r.partition}: Fetch at offset {position} failed with "
                                         f"{fetcher.ErrorCode(got.error).name}")
            records = columnar.parse(got.records, r.topic, r.partition, check_crcs=check_crcs)
            if records.complete_batches == 0:
                if got.records:
                    raise fetcher.FetchError(
                        f"{r.topic}-{r.partition}: the batch at offset {position} is larger than "
                        f"max.partition.fetch.bytes ({len(got.records)} bytes came); "
                        "raise kafka.max.partition.fetch.bytes")
                if got.high_watermark <= position:
                    _lost(part, f"the log ends at {got.high_watermark}, before the planned end {r.end}")
                    return
                if time.monotonic() > idle_until:
                    raise TimeoutError(f"{r.topic}-{r.partition}: no records for {part.poll_timeout_ms} ms at offset "
                                       f"{position} (range ends at {r.end})")
                continue
            idle_until = time.monotonic() + part.poll_timeout_ms / 1000
            following = records.next_offset(position)
            if following <= position:
                raise fetcher.FetchError(f"{r.topic}-{r.partition}: a Fetch at offset {position} returned only "
                                         f"batches before it")
            if following < r.end:
                source.prefetch(following)
            batch = records.to_arrow(position, r.end, part.include_headers, got.aborted)
            if batch is not None:
                yield batch
            position = following


def read_consumed(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """The range through confluent-kafka: errors and the range end checked per message."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    r = part.range
    schema = columnar.arrow_schema(part.include_headers)
    consumer = Consumer(consumer_config(part.client))
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        position = r.start
        first = True
        idle_budget = part.poll_timeout_ms / 1000
        while position < r.end:
            messages = consumer.consume(num_messages=min(CONSUMER_BATCH_ROWS, r.end - position), timeout=1.0)
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
                        if log_end is not None:  # everything before it was delivered or has no row
                            if log_end < r.end:  # the log is shorter than planned
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
                    if off > r.start and _log_start(consumer, r) > r.start:
                        _lost(part, f"offset {r.start} was requested but the first record is {off}")
                good.append(m)
                position = off + 1
            if good:
                yield _messages_to_arrow(good, r, schema, part.include_headers)
    finally:
        consumer.close()


def _log_start(consumer: Any, r: OffsetRange) -> int:
    from confluent_kafka import TopicPartition

    low, _ = consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=10)
    return int(low)


def _messages_to_arrow(messages: list[Any], r: OffsetRange, schema: pa.Schema,
                       include_headers: bool) -> pa.RecordBatch:
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
