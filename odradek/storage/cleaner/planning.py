"""What the cleaner may clean in a log, how dirty it is, and how its segments are grouped: pure functions over
segment summaries (no files).

Kafka's rules (``LogCleanerManager.cleanableOffsets``, ``LogCleaner.groupSegmentsBySize``), as Odradek applies them:

- The *clean* part of a log runs from its start to the *first dirty offset*: the cleaner's checkpoint when
  it is within the log (``log_start <= checkpoint <= log end``), else the log start (a log never cleaned, or
  truncated/deleted past the checkpoint).
- The *first uncleanable offset* is the smallest of: the base offset of the active segment (never cleaned),
  the last stable offset (nothing of an ongoing transaction, nor past the high watermark), and the base
  offset of the first dirty segment holding a record younger than ``min.compaction.lag.ms``. Whole segments
  only: a segment is cleanable when its records all lie below the first uncleanable offset.
- The *dirty ratio* is dirty bytes / (clean + dirty bytes) over whole segments below the first uncleanable
  offset; a log is due when it reaches ``min.cleanable.dirty.ratio``, or when its oldest dirty record is older
  than ``max.compaction.lag.ms`` (whatever the ratio).
- Groups: consecutive cleanable segments cleaned into one, as long as their total size stays within
  ``segment.bytes``, their index entries within ``segment.index.bytes``, and their offsets within one
  segment's 32-bit relative range. A group always has at least one segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_RELATIVE_OFFSET = 2**31 - 1


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What planning needs of one segment."""

    base_offset: int
    next_offset: int  # one past its last offset
    size: int  # bytes of its log file
    index_bytes: int  # bytes of its offset index entries
    largest_timestamp: int  # of its records, -1 if none
    earliest_timestamp: int = -1  # of its first batch, -1 if unknown


@dataclass(frozen=True, slots=True)
class Cleanable:
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable(segments: Sequence[SegmentSummary], *, log_start: int, checkpoint: int | None,
              last_stable_offset: int, now_ms: int, min_compaction_lag_ms: int) -> Cleanable:
    """The cleanable range of a log whose segments are ``segments`` (oldest first; the last is the active one)."""
    if not segments:
        return Cleanable(log_start, log_start, 0, 0)
    end = segments[-1].next_offset
    first_dirty = checkpoint if checkpoint is not None and log_start <= checkpoint <= end else log_start
    first_uncleanable = min(segments[-1].base_offset, last_stable_offset)
    if min_compaction_lag_ms > 0:
        for s in segments:
            if s.next_offset > first_dirty and s.largest_timestamp > now_ms - min_compaction_lag_ms:
                first_uncleanable = min(first_uncleanable, s.base_offset)
                break
    first_dirty = min(first_dirty, first_uncleanable)
    clean = dirty = 0
    for s in segments[:-1]:
        if s.next_offset <= first_dirty:
            clean += s.size
        elif s.next_offset <= first_uncleanable:
            dirty += s.size
    return Cleanable(first_dirty, first_uncleanable, clean, dirty)


def compaction_overdue(segments: Sequence[SegmentSummary], first_dirty: int, *, now_ms: int,
                       max_compaction_lag_ms: int) -> bool:
    """Whether the oldest dirty record waited longer than ``max.compaction.lag.ms`` (Kafka's KIP-354)."""
    if max_compaction_lag_ms <= 0 or max_compaction_lag_ms >= 2**63 - 1:
        return False
    for s in segments[:-1]:
        if s.next_offset > first_dirty:
            first = s.earliest_timestamp if s.earliest_timestamp >= 0 else s.largest_timestamp
            return 0 <= first <= now_ms - max_compaction_lag_ms
    return False


def group_by_size(segments: Sequence[SegmentSummary], *, max_size: int, max_index_bytes: int,
                  first_uncleanable: int) -> list[list[SegmentSummary]]:
    """Consecutive segments below ``first_uncleanable``, grouped so that each group fits one segment."""
    groups: list[list[SegmentSummary]] = []
    todo = [s for s in segments if s.next_offset <= first_uncleanable]
    i = 0
    while i < len(todo):
        group = [todo[i]]
        size, index = todo[i].size, todo[i].index_bytes
        i += 1
        while i < len(todo):
            s = todo[i]
            if (size + s.size > max_size or index + s.index_bytes > max_index_bytes
                    or s.next_offset - 1 - group[0].base_offset > MAX_RELATIVE_OFFSET):
                break
            group.append(s)
            size += s.size
            index += s.index_bytes
            i += 1
        groups.append(group)
    return groups
