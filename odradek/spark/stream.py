"""Streaming reads (``spark.readStream.format("odradek")``): micro-batches of offset ranges.

An offset, as Spark stores it in the query's checkpoint, is ``{"topic": {"partition": next offset}}``.
Each micro-batch reads ``[start, end)`` of every partition, planned on the driver from the checkpointed
start and the partitions' current log ends; the tasks are the batch reader's (``task.read_range``),
so a retried task or a restart from the checkpoint reads exactly the same records. With Spark's file
sinks that gives exactly-once output.

Invariants:
- ``startingOffsets`` (default ``latest``) applies only when the query has no checkpoint.
- Partitions and topics that appear later (new partitions, new topics matching ``subscribePattern``)
  are read from their beginning, as Spark's Kafka source does.
- Admission control: ``maxOffsetsPerTrigger`` caps a micro-batch, spread over partitions in
  proportion to what each has waiting; ``minOffsetsPerTrigger`` holds a micro-batch back until that
  many records wait or ``maxTriggerDelay`` has passed since the last one. A ``ReadAllAvailable``
  limit from the engine (e.g. Trigger.AvailableNow) overrides both. Trigger.AvailableNow stops at the
  log ends seen when the query started.
- Records removed by retention before they were read: an error with ``failOnDataLoss=true``, skipped
  otherwise (the gap is logged by the range reader).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from odradek.spark import options as opt
from odradek.spark.offsets import DataLossError, OffsetRange
from odradek.spark.options import consumer_config
from odradek.spark.source import current_watermarks
from odradek.spark.task import RangePartition, read_range

Offsets = dict[str, dict[str, int]]


def _to_json(offsets: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = o
    return out


def _from_json(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def _duration_ms(value: str) -> int:
    """Spark-style durations: "15s", "2m", "500ms", "1h", or plain milliseconds."""
    v = value.strip().lower()
    for suffix, factor in (("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)):
        if v.endswith(suffix) and v[: -len(suffix)].strip().isdigit():
            return int(v[: -len(suffix)]) * factor
    if v.isdigit():
        return int(v)
    raise ValueError(f"option maxTriggerDelay={value!r} is not a duration such as 15s, 2m or 500ms")


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, raw_options: dict[str, Any]) -> None:
        raw = {str(k).lower(): str(v) for k, v in raw_options.items()}
        if "startingoffsets" not in raw and not any(k.startswith("starting") for k in raw):
            raw["startingoffsets"] = "latest"
        if "endingoffsets" in raw or "endingtimestamp" in raw or "endingoffsetsbytimestamp" in raw:
            raise ValueError("ending offsets are for batch queries: a streaming query has no end")
        self.options = opt.parse(raw, batch=False)
        self.max_per_trigger = int(raw["maxoffsetspertrigger"]) if "maxoffsetspertrigger" in raw else None
        self.min_per_trigger = int(raw["minoffsetspertrigger"]) if "minoffsetspertrigger" in raw else None
        for name, value in (("maxOffsetsPerTrigger", self.max_per_trigger),
                            ("minOffsetsPerTrigger", self.min_per_trigger)):
            if value is not None and value < 1:
                raise ValueError(f"option {name}={value} must be a positive number of records")
        self.max_trigger_delay_ms = _duration_ms(raw.get("maxtriggerdelay", "15m"))
        self._last_trigger = time.monotonic()
        self._available_now: dict[tuple[str, int], int] | None = None
        self._consumer: Any = None  # one metadata client for the query's lifetime (driver side)

    # -- the cluster ------------------------------------------------------------------------------

    def _watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        from confluent_kafka import Consumer

        if self._consumer is None:
            self._consumer = Consumer(consumer_config(self.options.client))
        return current_watermarks(self._consumer, self.options.subscription)

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- offsets ----------------------------------------------------------------------------------

    def initialOffset(self) -> Offsets:
        from odradek.spark.source import plan_ranges

        return _to_json({(r.topic, r.partition): r.start for r in plan_ranges(self.options)})

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_per_trigger is not None:
            return ReadMaxRows(self.max_per_trigger)
        if self.min_per_trigger is not None:
            return ReadMinRows(self.min_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {tp: high for tp, (_, high) in self._watermarks().items()}

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        begin = _from_json(start)
        marks = self._watermarks()
        latest = {tp: high for tp, (_, high) in marks.items()}
        if self._available_now is not None:
            latest = {tp: min(h, self._available_now.get(tp, 0)) for tp, h in latest.items()}
        # new partitions start at their log start; partitions that disappeared keep their position
        from_ = {tp: begin.get(tp, marks[tp][0]) for tp in latest}
        waiting = {tp: max(latest[tp] - max(from_[tp], marks[tp][0]), 0) for tp in latest}
        total = sum(waiting.values())
        if not isinstance(limit, ReadAllAvailable):
            if self.min_per_trigger is not None and total < self.min_per_trigger:
                if (time.monotonic() - self._last_trigger) * 1000 < self.max_trigger_delay_ms:
                    return _to_json({**begin, **from_})
            if self.max_per_trigger is not None and total > self.max_per_trigger:
                latest = _capped(from_, marks, waiting, self.max_per_trigger)
        end = {**begin, **{tp: max(latest[tp], from_[tp]) for tp in latest}}
        if end != {**begin, **from_}:
            self._last_trigger = time.monotonic()
        return _to_json(end)

    def reportLatestOffset(self) -> Offsets:
        return _to_json({tp: high for tp, (_, high) in self._watermarks().items()})

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        begin, stop = _from_json(start), _from_json(end)
        marks = self._watermarks()
        o = self.options
        out: list[InputPartition] = []
        for tp, last in sorted(stop.items()):
            low, high = marks.get(tp, (0, 0))
            first = begin.get(tp, low)
            if tp not in marks:
                if o.fail_on_data_loss and last > first:
                    raise DataLossError(f"{tp[0]}-{tp[1]} no longer exists; set failOnDataLoss=false to go on "
                                        "without it")
                continue
            if first < low:
                if o.fail_on_data_loss:
                    raise DataLossError(f"{tp[0]}-{tp[1]}: offsets {first}-{low - 1} were removed by retention "
                                        "before this query read them; set failOnDataLoss=false to skip them")
                first = low
            if last > first:
                out.append(RangePartition(o.client, OffsetRange(tp[0], tp[1], first, min(last, high)),
                                          o.include_headers, o.fail_on_data_loss, o.poll_timeout_ms))
        return out

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, RangePartition)
        yield from read_range(partition)

    def commit(self, end: Offsets) -> None:
        pass  # positions live in Spark's checkpoint; nothing is committed to the broker


def _capped(from_: dict[tuple[str, int], int], marks: dict[tuple[str, int], tuple[int, int]],
            waiting: dict[tuple[str, int], int], cap: int) -> dict[tuple[str, int], int]:
    """End offsets that admit at most ``cap`` records, shared in proportion to what each partition has waiting."""
    total = sum(waiting.values())
    out = {}
    given = 0
    for tp, n in sorted(waiting.items()):
        share = min(n, cap * n // total) if total else 0
        given += share
        out[tp] = max(from_[tp], marks[tp][0]) + share
    # hand out what rounding left, one record at a time, to partitions that still have some waiting
    for tp, n in sorted(waiting.items()):
        if given >= cap:
            break
        extra = min(n - (out[tp] - max(from_[tp], marks[tp][0])), cap - given)
        out[tp] += extra
        given += extra
    return out

