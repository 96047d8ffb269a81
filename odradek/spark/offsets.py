"""Planning a read: which topic-partitions, and which offset range of each (on the driver).

Invariants:
- A range is ``[start, end)`` of one topic-partition; ``start <= end``; ranges of one partition never
  overlap, so the tasks of a query read each record exactly once.
- Named bounds and -2/-1 in JSON resolve against the partition's log start and end *now*; timestamps
  resolve to the first offset whose timestamp is at or after them (ListOffsets), or the log end when
  no record is that late (for starting bounds with ``startingOffsetsByTimestampStrategy=error``, that
  is an error instead, as in Spark).
- A start below the log start (data removed by retention) is an error with ``failOnDataLoss=true``
  and moves to the log start otherwise. An end beyond the log end is cut to it.
- ``split`` divides ranges so that there are at least ``min_partitions``, each large range into parts
  proportional to its share of all records, as Spark's Kafka source does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from odradek.spark.options import EARLIEST, LATEST, Bound, SourceOptions, Subscription

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    @property
    def size(self) -> int:
        return self.end - self.start


class DataLossError(RuntimeError):
    """Requested records are gone (removed by retention or never existed) and failOnDataLoss is true."""


def topic_partitions(metadata: Any, sub: Subscription) -> list[TopicPartition]:
    """The partitions a subscription names, from a confluent-kafka ``ClusterMetadata``."""
    topics = {name: sorted(t.partitions) for name, t in metadata.topics.items() if not t.error}
    if sub.assign is not None:
        missing = [f"{t}-{p}" for t, ps in sub.assign.items() for p in ps if p not in topics.get(t, ())]
        if missing:
            raise ValueError(f"option assign names partitions that do not exist: {', '.join(missing)}")
        return [(t, p) for t, ps in sorted(sub.assign.items()) for p in sorted(ps)]
    if sub.pattern is not None:
        rx = re.compile(sub.pattern)
        names = [n for n in topics if rx.fullmatch(n) and not n.startswith("__")]
    else:
        names = list(sub.topics)
        unknown = [n for n in names if n not in topics]
        if unknown:
            raise ValueError(f"option subscribe names topics that do not exist: {', '.join(unknown)}")
    return [(n, p) for n in sorted(names) for p in topics[n]]


def _resolve(bound: Bound, tp: TopicPartition, low: int, high: int, by_time: dict[TopicPartition, int],
             *, ending: bool, strategy: str) -> int:
    if bound.timestamp is not None or bound.timestamps:
        found = by_time.get(tp, LATEST)
        if found < 0:
            if not ending and strategy == "error":
                ts = bound.timestamp if bound.timestamp is not None else bound.timestamps.get(tp)
                raise ValueError(f"no record of {tp[0]}-{tp[1]} has a timestamp at or after {ts}: use an earlier "
                                 "timestamp, or startingOffsetsByTimestampStrategy=latest")
            return high
        return found
    value = bound.offsets.get(tp, LATEST if ending else EARLIEST) if bound.named is None else bound.named
    if value == EARLIEST:
        return low
    if value == LATEST:
        return high
    return value


def plan(opts: SourceOptions, watermarks: dict[TopicPartition, tuple[int, int]],
         starting_times: dict[TopicPartition, int], ending_times: dict[TopicPartition, int]) -> list[OffsetRange]:
    """Ranges for every partition from its (log start, log end) and the timestamp lookups."""
    ranges = []
    for tp, (low, high) in sorted(watermarks.items()):
        start = _resolve(opts.starting, tp, low, high, starting_times, ending=False, strategy=opts.timestamp_strategy)
        end = _resolve(opts.ending, tp, low, high, ending_times, ending=True, strategy=opts.timestamp_strategy)
        if start < low:
            if opts.fail_on_data_loss:
                raise DataLossError(
                    f"{tp[0]}-{tp[1]}: records from offset {start} were requested but the log starts at {low} "
                    "(removed by retention): start later, or set failOnDataLoss=false to skip what is gone")
            start = low
        end = min(end, high)
        if start > end:
            if opts.fail_on_data_loss and start > high:
                raise DataLossError(f"{tp[0]}-{tp[1]}: starting offset {start} is past the log end {high}; set "
                                    "failOnDataLoss=false to read nothing from it")
            start = end
        ranges.append(OffsetRange(tp[0], tp[1], start, end))
    return ranges


def split(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    if not min_partitions or len(ranges) >= min_partitions or total == 0:
        return ranges
    out = []
    for r in ranges:
        parts = max(round(r.size / total * min_partitions), 1)
        step, extra = divmod(r.size, parts)
        start = r.start
        for i in range(parts):
            end = start + step + (1 if i < extra else 0)
            if end > start:
                out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out
