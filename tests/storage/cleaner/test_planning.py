"""The cleaner's planning: cleanable range, dirty ratio, max compaction lag, groups of segments."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.cleaner.planning import (
    SegmentSummary,
    cleanable,
    compaction_overdue,
    group_by_size,
)

NOW = 1_700_000_000_000


def segs(*sizes: int, records: int = 10, ts: int = NOW - 10**9) -> list[SegmentSummary]:
    out, base = [], 0
    for size in sizes:
        out.append(SegmentSummary(base, base + records, size, 80, ts, ts))
        base += records
    return out


def test_never_cleaned_log_is_all_dirty_up_to_the_active_segment() -> None:
    s = segs(100, 100, 100, 50)  # the last is active
    c = cleanable(s, log_start=0, checkpoint=None, last_stable_offset=40, now_ms=NOW, min_compaction_lag_ms=0)
    assert (c.first_dirty, c.first_uncleanable, c.clean_bytes, c.dirty_bytes) == (0, 30, 0, 300)
    assert c.dirty_ratio == 1.0


def test_the_checkpoint_splits_clean_from_dirty() -> None:
    s = segs(100, 100, 100, 50)
    c = cleanable(s, log_start=0, checkpoint=20, last_stable_offset=40, now_ms=NOW, min_compaction_lag_ms=0)
    assert (c.first_dirty, c.clean_bytes, c.dirty_bytes) == (20, 200, 100)
    assert abs(c.dirty_ratio - 1 / 3) < 1e-9


def test_a_checkpoint_outside_the_log_is_ignored() -> None:
    s = segs(100, 100, 50)
    for bad in (-1, 5_000):
        c = cleanable(s, log_start=0, checkpoint=bad, last_stable_offset=30, now_ms=NOW, min_compaction_lag_ms=0)
        assert c.first_dirty == 0
    c = cleanable(s, log_start=10, checkpoint=5, last_stable_offset=30, now_ms=NOW, min_compaction_lag_ms=0)
    assert c.first_dirty == 10


def test_an_open_transaction_and_young_records_stop_the_cleaner() -> None:
    s = segs(100, 100, 100, 50)
    c = cleanable(s, log_start=0, checkpoint=None, last_stable_offset=15, now_ms=NOW, min_compaction_lag_ms=0)
    assert c.first_uncleanable == 15 and c.dirty_bytes == 100  # only the first segment lies wholly below it
    young = [*s[:2], SegmentSummary(20, 30, 100, 80, NOW - 5, NOW - 5), s[3]]
    c = cleanable(young, log_start=0, checkpoint=None, last_stable_offset=40, now_ms=NOW, min_compaction_lag_ms=1000)
    assert c.first_uncleanable == 20 and c.dirty_bytes == 200


def test_max_compaction_lag() -> None:
    s = segs(100, 100, 50, ts=NOW - 60_000)
    assert compaction_overdue(s, 0, now_ms=NOW, max_compaction_lag_ms=30_000)
    assert not compaction_overdue(s, 0, now_ms=NOW, max_compaction_lag_ms=120_000)
    assert not compaction_overdue(s, 20, now_ms=NOW, max_compaction_lag_ms=30_000)  # nothing dirty but the active
    assert not compaction_overdue(s, 0, now_ms=NOW, max_compaction_lag_ms=2**63 - 1)  # Kafka's default: never


def test_groups_fit_one_segment() -> None:
    s = segs(40, 40, 40, 90, 10, 10)
    groups = group_by_size(s, max_size=100, max_index_bytes=10_000, first_uncleanable=50)
    assert [[g.base_offset for g in group] for group in groups] == [[0, 10], [20], [30, 40]]  # 90 + 10 fits
    groups = group_by_size(s, max_size=1000, max_index_bytes=160, first_uncleanable=60)
    assert [len(g) for g in groups] == [2, 2, 2]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 500), st.integers(1, 50)), min_size=1, max_size=30),
       st.integers(1, 1500), st.integers(0, 40))
def test_groups_are_consecutive_complete_and_within_bounds(spec: list[tuple[int, int]], max_size: int,
                                                           cut: int) -> None:
    segments, base = [], 0
    for size, count in spec:
        segments.append(SegmentSummary(base, base + count, size, 8 * count, NOW, NOW))
        base += count
    first_uncleanable = segments[min(cut, len(segments) - 1)].base_offset
    groups = group_by_size(segments, max_size=max_size, max_index_bytes=10**9, first_uncleanable=first_uncleanable)
    flat = [s for g in groups for s in g]
    assert flat == [s for s in segments if s.next_offset <= first_uncleanable]
    for g in groups:
        assert g and (len(g) == 1 or sum(s.size for s in g) <= max_size)
