"""The partition log: dense offsets, reads, rolling, timestamps, retention, truncation, epochs, flushing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odradek.clock import ManualClock
from odradek.protocol import batch as rb
from odradek.protocol.errors import (
    ErrorCode,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
)
from odradek.protocol.records import build_batch, decode_records, iter_batches
from odradek.storage.checkpoint import read_checkpoint_lines
from odradek.storage.config import DAYS, LOG_APPEND_TIME, KiB
from odradek.storage.log import LEADER_EPOCH_CHECKPOINT, Log, TimestampOffset
from odradek.storage.segment import DELETED_SUFFIX
from tests.storage.helpers import (
    T0,
    all_records,
    batch,
    open_log,
    region_batches,
    region_records,
    small_config,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def fill(log: Log, batches: int, *, per_batch: int = 3, value_size: int = 40, ts: int | None = None) -> None:
    for _ in range(batches):
        log.append(batch(per_batch, value_size=value_size, ts=log.clock.milliseconds() if ts is None else ts))


def segment_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((".log", DELETED_SUFFIX)))


# ---- appends and offsets ---------------------------------------------------------------------------


def test_new_log_is_empty(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    assert (log.topic, log.partition, log.name) == ("t", 0, "t-0")
    assert log.next_offset == log.log_start_offset == log.high_watermark == log.recovery_point == 0
    assert len(log.segments) == 1 and log.size == 0
    assert log.read(0, 1000) is None
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() is None
    log.close()


def test_append_assigns_dense_offsets_across_many_batches_and_segments(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    expected: list[bytes] = []
    next_offset = 0
    for i in range(120):
        n = 1 + i % 5
        info = log.append(batch(n, tag=f"r{i}-", value_size=30))
        assert (info.first_offset, info.last_offset, info.record_count) == (next_offset, next_offset + n - 1, n)
        assert info.log_append_time == -1
        expected.extend(f"r{i}-{j}".encode().ljust(30, b".") for j in range(n))
        next_offset += n
        assert log.next_offset == next_offset
    assert len(log.segments) > 4
    # each segment starts where the previous one ends, and no segment exceeds segment.bytes
    for prev, seg in zip(log.segments, log.segments[1:], strict=False):
        assert seg.base_offset == prev.next_offset
        assert prev.size <= log.config.segment_bytes
    records = all_records(log)
    assert [r.offset for r in records] == list(range(next_offset))
    assert [r.value for r in records] == expected
    log.close()


def test_multi_batch_record_set(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    log.append(batch(2))
    parts = [batch(3, tag="a"), batch(1, tag="b"), batch(4, tag="c")]
    data = b"".join(parts)
    info = log.append(data)
    assert (info.first_offset, info.last_offset, info.record_count, info.size) == (2, 9, 8, len(data))
    region = log.read(2, 64 * KiB)
    assert region is not None
    headers = region_batches(region)
    assert [(h.base_offset, h.last_offset) for h in headers] == [(2, 4), (5, 5), (6, 9)]
    # the stored bytes are the producer's bytes with only baseOffset rewritten
    stored = region.read_bytes()
    pos = 0
    for part, header in zip(parts, headers, strict=True):
        assert stored[pos + 8 : pos + header.size] == part[8:]
        pos += header.size
    log.close()


def test_append_accepts_bytes_bytearray_and_memoryview(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    log.append(batch(1))
    log.append(bytearray(batch(1)))
    log.append(memoryview(batch(2)))
    assert log.next_offset == 4
    assert [r.offset for r in all_records(log)] == [0, 1, 2, 3]
    log.close()


# ---- reads ---------------------------------------------------------------------------------------


def test_read_starts_at_the_batch_holding_the_offset_and_ends_on_a_boundary(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=64 * KiB), clock=clock)
    fill(log, 10, per_batch=4)
    size = region_batches(log.read(0, 1))[0].size
    for offset in range(40):
        for max_bytes in (size, size + 1, 3 * size - 1, 3 * size, 100 * size):
            region = log.read(offset, max_bytes)
            assert region is not None
            headers = region_batches(region)
            assert headers[0].base_offset == offset - offset % 4
            assert headers[0].base_offset <= offset <= headers[0].last_offset
            assert region.first_offset == headers[0].base_offset
            assert region.length <= max_bytes
            assert len(headers) == min(max_bytes // size, 10 - offset // 4)
    log.close()


def test_min_one_returns_a_batch_larger_than_max_bytes(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    log.append(batch(1))
    log.append(batch(5, value_size=300))  # offsets 1..5, ~1.7 KB
    log.append(batch(1))
    region = log.read(3, 100)
    assert region is not None
    (header,) = region_batches(region)
    assert (header.base_offset, header.last_offset) == (1, 5)
    assert region.length == header.size > 100
    log.close()


def test_without_min_one_a_batch_larger_than_max_bytes_reads_nothing(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    log.append(batch(5, value_size=300))
    log.roll()
    log.append(batch(1))
    assert len(log.segments) == 2
    # the batch holding offset 2 does not fit: the read must not skip it to serve later data
    assert log.read(2, 100, min_one=False) is None
    assert log.read(0, 100, min_one=False) is None
    region = log.read(5, 100, min_one=False)
    assert region is not None and region.first_offset == 5
    log.close()


def test_read_stays_within_one_segment(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    fill(log, 40)
    first, second = log.segments[0], log.segments[1]
    last_of_first = second.base_offset - 1
    region = log.read(last_of_first, 64 * KiB)
    assert region is not None
    assert region_batches(region)[-1].last_offset == last_of_first
    region = log.read(second.base_offset, 64 * KiB)
    assert region is not None and region.first_offset == second.base_offset
    assert region.file is not first.file
    log.close()


def test_read_with_max_offset(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    fill(log, 40)  # offsets 0..119 in batches of 3, several segments
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    # the batch holding max_offset and everything after are excluded
    region = log.read(0, 64 * KiB, max_offset=6)
    assert [h.last_offset for h in region_batches(region)] == [2, 5]
    region = log.read(0, 64 * KiB, max_offset=7)
    assert [h.last_offset for h in region_batches(region)] == [2, 5]
    assert log.read(6, 64 * KiB, max_offset=6) is None
    assert log.read(7, 64 * KiB, max_offset=6) is None
    assert log.read(0, 64 * KiB, max_offset=0) is None
    # max_offset at the next segment's base: the whole first segment is readable
    region = log.read(0, 64 * KiB, max_offset=bases[1])
    assert region_batches(region)[-1].last_offset == bases[1] - 1
    # max_offset inside a later segment
    region = log.read(bases[1], 64 * KiB, max_offset=bases[1] + 4)
    assert [h.last_offset for h in region_batches(region)] == [bases[1] + 2]
    # max_offset at the log end reads everything up to it
    region = log.read(bases[-1], 64 * KiB, max_offset=log.next_offset)
    assert region_batches(region)[-1].last_offset == log.next_offset - 1
    log.close()


def test_read_at_the_log_end_returns_none(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    fill(log, 3)
    assert log.read(9, 1000) is None
    assert log.read(9, 1000, max_offset=9) is None
    log.close()


def test_read_out_of_range_on_both_sides(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    fill(log, 40)
    log.update_high_watermark(log.next_offset)
    end = log.next_offset
    with pytest.raises(OffsetOutOfRangeError) as above:
        log.read(end + 1, 1000)
    err = above.value
    assert err.code == ErrorCode.OFFSET_OUT_OF_RANGE == 1
    assert (err.offset, err.log_start_offset, err.log_end_offset) == (end + 1, 0, end)
    assert str(end + 1) in str(err)
    start = log.segments[2].base_offset + 1
    log.delete_records_before(start)
    assert log.log_start_offset == start
    with pytest.raises(OffsetOutOfRangeError) as below:
        log.read(start - 1, 1000)
    assert (below.value.offset, below.value.log_start_offset, below.value.log_end_offset) == (start - 1, start, end)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)
    # the log start itself is readable (from the batch that holds it)
    region = log.read(start, 1000)
    assert region is not None and region.first_offset <= start
    log.close()


# ---- rolling -------------------------------------------------------------------------------------


def test_roll_by_size(tmp_path: Path, clock: ManualClock) -> None:
    cfg = small_config(segment_bytes=2 * KiB)
    log = open_log(tmp_path / "t-0", cfg, clock=clock)
    size = len(batch(3, value_size=40))
    per_segment = (2 * KiB) // size
    for _ in range(per_segment):
        log.append(batch(3, value_size=40))
    assert len(log.segments) == 1
    log.append(batch(3, value_size=40))
    assert len(log.segments) == 2
    assert log.segments[0].size == per_segment * size
    assert log.segments[1].base_offset == 3 * per_segment
    assert not log.segments[0].index.writable  # rolled: indexes trimmed
    assert log.segments[0].index.path.stat().st_size == 8 * log.segments[0].index.entries
    assert log.active_segment.index.path.stat().st_size == cfg.segment_index_bytes
    log.close()


def test_roll_by_segment_ms(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=64 * KiB, segment_ms=10_000), clock=clock)
    log.append(batch(1, ts=clock.milliseconds()))
    clock.advance(10_000)
    log.append(batch(1, ts=clock.milliseconds()))
    assert len(log.segments) == 1
    clock.advance(1)
    log.append(batch(1, ts=clock.milliseconds()))
    assert [s.base_offset for s in log.segments] == [0, 2]
    clock.advance(5_000)
    log.append(batch(1, ts=clock.milliseconds()))
    assert len(log.segments) == 2
    clock.advance(5_001)
    log.append(batch(1, ts=clock.milliseconds()))
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    log.close()


def test_empty_active_segment_is_not_rolled_by_time(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_ms=1_000), clock=clock)
    clock.advance(10 * DAYS)
    assert log.roll() is log.active_segment  # rolling an empty segment is a no-op
    log.append(batch(1, ts=clock.milliseconds()))
    assert len(log.segments) == 1
    log.append(batch(1, ts=clock.milliseconds()))
    assert len(log.segments) == 1
    log.close()


def test_historical_timestamps_do_not_roll_every_append(tmp_path: Path, clock: ManualClock) -> None:
    # As Kafka: segment.ms is measured in record time from the segment's first batch, so replaying
    # old data (or data without timestamps) fills segments instead of making one per batch.
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=64 * KiB, segment_ms=1 * DAYS), clock=clock)
    old = clock.milliseconds() - 30 * DAYS
    for i in range(5):
        log.append(batch(1, ts=old + i))
    for _ in range(5):
        log.append(batch(1, ts=-1))
    assert len(log.segments) == 1
    log.append(batch(1, ts=old + 1 * DAYS + 1))  # a day of record time after the first batch
    assert len(log.segments) == 2
    log.close()


# ---- timestamps ----------------------------------------------------------------------------------


def test_create_time_leaves_the_batch_byte_identical_but_offset_and_epoch(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    log.append(batch(2))
    original = batch(3, ts=T0 - 5000, producer_id=7, producer_epoch=1, base_sequence=0)
    info = log.append(original)
    assert info.log_append_time == -1 and info.max_timestamp == T0 - 5000
    stored = log.read(2, 64 * KiB).read_bytes()
    assert len(stored) == len(original)
    assert stored[12:] == original[12:]  # leader epoch untouched without leader_epoch
    assert rb.parse_header(stored).base_offset == 2
    rb.check_batch(stored)
    original = batch(2, ts=T0 - 100)
    log.append(original, leader_epoch=5)
    stored = log.read(5, 64 * KiB).read_bytes()
    header = rb.parse_header(stored)
    assert (header.base_offset, header.partition_leader_epoch) == (5, 5)
    assert stored[:8] != original[:8] and stored[12:16] != original[12:16]
    assert stored[8:12] == original[8:12] and stored[16:] == original[16:]
    rb.check_batch(stored)
    log.close()


def test_log_append_time_stamps_max_timestamp_and_keeps_the_crc_valid(tmp_path: Path, clock: ManualClock) -> None:
    cfg = small_config(message_timestamp_type=LOG_APPEND_TIME, message_timestamp_before_max_ms=1000)
    log = open_log(tmp_path / "t-0", cfg, clock=clock)
    clock.advance(123)
    now = clock.milliseconds()
    data = batch(2, ts=T0 - 10 * DAYS) + batch(3, ts=T0 - 9 * DAYS)  # old, but not checked
    info = log.append(data)
    assert info.log_append_time == now and info.max_timestamp == now
    stored = log.read(0, 64 * KiB).read_bytes()
    for pos, header in iter_batches(stored):  # iter_batches runs check_batch, CRC included
        assert header.is_log_append_time
        assert header.attributes & rb.TIMESTAMP_TYPE_BIT
        assert header.max_timestamp == now
        rb.check_batch(stored, pos)
        assert all(r.timestamp == now for r in decode_records(stored[pos : pos + header.size]))
    assert log.active_segment.max_timestamp == now
    assert log.max_timestamp_offset() == TimestampOffset(now, 0)
    log.close()


def test_timestamp_window_refusals(tmp_path: Path, clock: ManualClock) -> None:
    cfg = small_config(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=500)
    log = open_log(tmp_path / "t-0", cfg, clock=clock)
    now = clock.milliseconds()
    log.append(batch(1, ts=now - 1000))  # both limits are inclusive
    log.append(batch(1, ts=now + 500))
    files = {p.name: p.read_bytes() for p in (tmp_path / "t-0").iterdir() if p.suffix == ".log"}
    for stamps in ([now - 1001], [now + 501], [now, now + 501], [now - 1001, now]):
        with pytest.raises(InvalidTimestampError) as exc_info:
            log.append(batch(len(stamps), timestamps=stamps))
        assert exc_info.value.code == ErrorCode.INVALID_TIMESTAMP == 32
        assert "message.timestamp" in str(exc_info.value)
    # a refused batch inside a record set refuses the whole set
    with pytest.raises(InvalidTimestampError):
        log.append(batch(1, ts=now) + batch(1, ts=now + 10_000))
    assert log.next_offset == 2
    assert {p.name: p.read_bytes() for p in (tmp_path / "t-0").iterdir() if p.suffix == ".log"} == files
    log.close()


# ---- retention -----------------------------------------------------------------------------------


def test_retention_by_time_deletes_old_segments_but_never_the_active_one(tmp_path: Path, clock: ManualClock) -> None:
    cfg = small_config(retention_ms=10_000, file_delete_delay_ms=5_000)
    log = open_log(tmp_path / "t-0", cfg, clock=clock)
    for i in range(80):
        log.append(batch(3, ts=T0 + i * 100, value_size=40))
    log.update_high_watermark(log.next_offset)  # as the broker does once records are acknowledged
    segments = log.segments
    assert len(segments) >= 4
    # at T0 + 10_000 + largest(seg0) + 1 only the first segment is expired
    clock.set(segments[0].largest_timestamp + 10_001)
    assert log.delete_retained_segments() == 1
    assert log.segments == segments[1:]
    assert log.log_start_offset == segments[1].base_offset
    assert log.high_watermark >= log.log_start_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)
    # far in the future: everything but the active segment goes
    clock.advance(365 * DAYS)
    assert log.delete_retained_segments() == len(segments) - 2
    assert log.segments == (segments[-1],)
    assert log.log_start_offset == segments[-1].base_offset
    assert log.delete_retained_segments() == 0  # the active segment is never deleted
    assert [r.offset for r in all_records(log)] == list(range(segments[-1].base_offset, log.next_offset))
    log.append(batch(1, ts=clock.milliseconds()))
    assert log.next_offset == 241
    log.close()


def test_retention_by_size(tmp_path: Path, clock: ManualClock) -> None:
    cfg = small_config(retention_bytes=6 * KiB)
    log = open_log(tmp_path / "t-0", cfg, clock=clock)
    fill(log, 60)
    log.update_high_watermark(log.next_offset)
    segments = log.segments
    total = log.size
    deleted = log.delete_retained_segments()
    assert deleted > 0
    assert log.segments == segments[deleted:]
    # the oldest segments went while what remained stayed above the limit
    assert total - sum(s.size for s in segments[:deleted]) >= cfg.retention_bytes
    assert log.size - log.segments[0].size < cfg.retention_bytes
    assert log.log_start_offset == log.segments[0].base_offset
    assert log.delete_retained_segments() == 0
    log.close()


def test_retention_bytes_never_deletes_the_active_segment(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", small_config(retention_bytes=0, retention_ms=0), clock=clock)
    fill(log, 40)
    log.update_high_watermark(log.next_offset)
    clock.advance(1)
    assert log.delete_retained_segments() > 0
    assert len(log.segments) == 1
    assert log.segments[0].size > 0
    log.close()


def test_deleted_segments_wait_for_file_delete_delay_and_open_regions_stay_readable(
    tmp_path: Path, clock: ManualClock
) -> None:
    cfg = small_config(retention_ms=1_000, file_delete_delay_ms=60_000)
    directory = tmp_path / "t-0"
    log = open_log(directory, cfg, clock=clock)
    fill(log, 30)
    first = log.segments[0]
    region = log.read(0, 64 * KiB)
    assert region is not None and region.file is first.file
    content = region.read_bytes()
    clock.advance(1_001)
    log.append(batch(1, ts=clock.milliseconds()))  # keeps the active segment young
    log.update_high_watermark(log.next_offset)
    segments = log.segments
    deleted = log.delete_retained_segments()
    assert deleted >= 1 and log.segments == segments[deleted:]
    assert first.deleted
    names = os.listdir(directory)
    stem = f"{0:020d}"
    assert f"{stem}.log{DELETED_SUFFIX}" in names
    assert f"{stem}.index{DELETED_SUFFIX}" in names
    assert f"{stem}.timeindex{DELETED_SUFFIX}" in names
    assert f"{stem}.log" not in names
    assert region.read_bytes() == content  # a fetch in flight still reads its bytes
    clock.advance(59_999)
    log.purge_deleted()
    assert any(n.endswith(DELETED_SUFFIX) for n in os.listdir(directory))
    assert region.read_bytes() == content
    clock.advance(1)
    log.purge_deleted()
    assert not any(n.endswith(DELETED_SUFFIX) for n in os.listdir(directory))
    log.close()


def test_delete_records_before(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    fill(log, 40)
    end = log.next_offset
    with pytest.raises(OffsetOutOfRangeError) as exc_info:
        log.delete_records_before(1)  # the high watermark is still 0
    assert exc_info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    hw = end - 10
    log.update_high_watermark(hw)
    with pytest.raises(OffsetOutOfRangeError) as exc_info:
        log.delete_records_before(hw + 1)
    assert (exc_info.value.offset, exc_info.value.log_end_offset) == (hw + 1, end)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(-1)
    assert log.log_start_offset == 0
    bases = [s.base_offset for s in log.segments]
    target = bases[1] + 2
    assert target < hw
    assert log.delete_records_before(target) == target
    assert log.log_start_offset == target
    assert log.segments[0].base_offset == max(b for b in bases if b <= target)
    assert log.delete_records_before(target - 5) == target  # never moves back
    records = all_records(log)
    assert records[0].offset == target
    assert [r.offset for r in records] == list(range(target, end))
    assert log.delete_records_before(hw) == hw  # up to the high watermark itself
    assert log.read(hw, 1000) is not None
    log.close()


# ---- truncation ----------------------------------------------------------------------------------


def test_truncate_to_inside_the_active_segment_then_append_continues(tmp_path: Path, clock: ManualClock) -> None:
    cfg = small_config(segment_bytes=64 * KiB, index_interval_bytes=250)
    log = open_log(tmp_path / "t-0", cfg, clock=clock)
    for _ in range(20):
        log.append(batch(1, value_size=50))
    assert log.active_segment.index.entries > 3
    assert log.truncate_to(1)
    assert log.next_offset == 1
    # smaller batches than before, so stale index slots would point into the middle of batches
    for _ in range(2):
        log.append(batch(3, value_size=7, tag="new"))
    assert log.next_offset == 7
    for offset in range(7):
        region = log.read(offset, 64 * KiB)
        assert region is not None, offset
        assert region_batches(region)[0].base_offset <= offset
    records = all_records(log)
    assert [r.offset for r in records] == list(range(7))
    assert records[1].value.startswith(b"new0")
    assert not log.truncate_to(7)
    assert not log.truncate_to(100)
    log.close()


def test_truncating_to_the_log_end_drops_an_epoch_that_holds_nothing(tmp_path: Path, clock: ManualClock) -> None:
    """A replica that led epoch 3 without appending anything, then follows a leader that never knew epoch 3: the
    leader answers its fetches with the divergence (2, log end), and the truncation to the log end must drop
    epoch 3, or the replica asks with it again forever (found by the partition-tolerance suite: a follower
    stuck for minutes, the ISR never full)."""
    log = open_log(tmp_path / "t-0", small_config(), clock=clock)
    log.append(batch(2), leader_epoch=2)
    end = log.next_offset
    log.leader_epochs.assign(3, end)  # became leader at epoch 3, appended nothing
    assert log.leader_epochs.latest_epoch == 3
    assert not log.truncate_to(end)  # no record goes...
    assert log.leader_epochs.latest_epoch == 2  # ...but the empty epoch does
    assert log.leader_epochs.end_offset_for(2, log.next_offset) == (2, end)
    log.leader_epochs.assign(5, end)
    assert not log.truncate_to(end + 10) and log.leader_epochs.latest_epoch == 5  # beyond the end: nothing goes
    log.close()


def test_truncate_to_an_earlier_segment_drops_later_ones(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, small_config(file_delete_delay_ms=1_000), clock=clock)
    fill(log, 80, value_size=30)
    log.update_high_watermark(log.next_offset)
    segments = log.segments
    assert len(segments) >= 4
    target = segments[1].base_offset + 4  # inside segment 1, in the middle of a batch
    assert log.truncate_to(target)
    assert log.segments == segments[:2]
    assert log.next_offset == target - target % 3  # the whole batch holding the target goes
    assert log.high_watermark == log.next_offset
    assert log.active_segment is segments[1] and segments[1].index.writable
    for seg in segments[2:]:
        assert seg.deleted and seg.log_path.name.endswith(DELETED_SUFFIX)
    log.append(batch(2, tag="after"))
    records = all_records(log)
    assert [r.offset for r in records] == list(range(log.next_offset))
    assert records[-1].value.startswith(b"after1")
    clock.advance(1_000)
    log.purge_deleted()
    assert not any(n.endswith(DELETED_SUFFIX) for n in os.listdir(directory))
    log.close()


def test_truncate_to_a_segment_base(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    fill(log, 50)
    segments = log.segments
    base = segments[2].base_offset
    assert log.truncate_to(base)
    assert log.next_offset == base
    assert log.segments == segments[:2]
    log.append(batch(1))
    assert [r.offset for r in all_records(log)] == list(range(base + 1))
    log.close()


def test_truncate_fully_and_start_at(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, clock=clock)
    fill(log, 30)
    log.append(batch(1), leader_epoch=3)
    log.truncate_fully_and_start_at(500)
    assert log.next_offset == log.log_start_offset == log.high_watermark == 500
    assert [s.base_offset for s in log.segments] == [500]
    assert log.leader_epochs.entries == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(499, 1000)
    info = log.append(batch(4))
    assert (info.first_offset, info.last_offset) == (500, 503)
    assert [r.offset for r in all_records(log)] == [500, 501, 502, 503]
    assert (directory / f"{500:020d}.log").exists()
    log.close()


def test_truncate_to_below_the_first_segment_starts_over(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    fill(log, 10)
    assert log.truncate_to(0)
    assert log.next_offset == 0 and log.size == 0
    log.append(batch(2))
    assert [r.offset for r in all_records(log)] == [0, 1]
    log.close()


# ---- leader epochs -------------------------------------------------------------------------------


def test_leader_epochs_are_assigned_on_append_and_checkpointed(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, clock=clock)
    log.append(batch(2))
    assert log.leader_epochs.entries == []
    assert not (directory / LEADER_EPOCH_CHECKPOINT).exists()
    log.append(batch(2), leader_epoch=1)
    log.append(batch(2), leader_epoch=1)
    log.append(batch(3), leader_epoch=4)
    log.append(batch(1), leader_epoch=2)  # a stale epoch changes nothing
    assert log.leader_epochs.entries == [(1, 2), (4, 6)]
    lines = read_checkpoint_lines(directory / LEADER_EPOCH_CHECKPOINT)
    assert [text for _, text in lines] == ["1 2", "4 6"]
    assert (directory / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n1 2\n4 6\n"
    epochs = [rb.parse_header(log.read(o, 1).read_bytes()).partition_leader_epoch for o in (0, 2, 4, 6, 9)]
    assert epochs == [-1, 1, 1, 4, 2]
    # truncation drops the epochs that started at or after the new end
    log.truncate_to(6)
    assert log.leader_epochs.entries == [(1, 2)]
    assert (directory / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n1 2\n"
    log.append(batch(1), leader_epoch=7)
    log.close()
    reopened = Log.open(directory, log.config, clock=clock, clean_shutdown=True)
    assert reopened.leader_epochs.entries == [(1, 2), (7, 6)]
    reopened.close()


def test_log_start_offset_moves_the_first_epoch(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    for epoch in (1, 2, 3):
        for _ in range(15):
            log.append(batch(3), leader_epoch=epoch)
    log.update_high_watermark(log.next_offset)
    log.delete_records_before(60)
    assert log.leader_epochs.entries == [(2, 60), (3, 90)]
    log.close()


# ---- ListOffsets ---------------------------------------------------------------------------------


def test_offset_for_timestamp(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    # record i has timestamp T0 + 10 * i, except a dip in the middle of each batch
    expected_ts = []
    for b in range(80):
        stamps = [T0 + 10 * (3 * b), T0 + 10 * (3 * b) - 25, T0 + 10 * (3 * b + 2)]
        expected_ts.extend(stamps)
        log.append(batch(3, timestamps=stamps))
    assert len(log.segments) > 2
    for target in range(T0 - 50, T0 + 10 * 240 + 20, 7):
        got = log.offset_for_timestamp(target)
        candidates = [(o, ts) for o, ts in enumerate(expected_ts) if ts >= target]
        if not candidates:
            assert got is None
        else:
            offset, ts = candidates[0]
            assert got == TimestampOffset(ts, offset), target
    log.close()


def test_offset_for_timestamp_respects_the_log_start_offset(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=64 * KiB), clock=clock)
    log.append(batch(5, ts=T0 + 100))  # offsets 0..4
    log.append(batch(5, ts=T0 + 100))  # offsets 5..9, same segment
    log.update_high_watermark(10)
    log.delete_records_before(5)
    assert log.offset_for_timestamp(T0) == TimestampOffset(T0 + 100, 5)
    assert log.offset_for_timestamp(T0 + 100) == TimestampOffset(T0 + 100, 5)
    log.delete_records_before(7)
    assert log.offset_for_timestamp(T0 + 100) == TimestampOffset(T0 + 100, 7)
    log.close()


def test_max_timestamp_offset(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    fill(log, 20, ts=T0)
    log.append(batch(3, timestamps=[T0 + 5, T0 + 900, T0 + 900]))  # the maximum, first at offset 61
    fill(log, 20, ts=T0 + 10)
    log.append(batch(1, ts=T0 + 900))  # a tie later on does not win
    assert log.max_timestamp_offset() == TimestampOffset(T0 + 900, 61)
    log.close()


# ---- flushing ------------------------------------------------------------------------------------


def test_flush_messages_flushes_and_advances_the_recovery_point(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    log = open_log(tmp_path / "t-0", small_config(flush_messages=5), clock=clock)
    log.append(batch(2))
    log.append(batch(2))
    assert log.recovery_point == 0 and log.unflushed_messages == 4
    assert log.active_segment.fd not in synced
    log.append(batch(1))
    assert log.recovery_point == 5 and log.unflushed_messages == 0
    assert log.active_segment.fd in synced
    log.append(batch(7))  # one big append crosses the threshold at once
    assert log.recovery_point == 12
    log.close()


def test_maybe_flush_applies_flush_ms(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", small_config(flush_ms=1_000), clock=clock)
    log.append(batch(3))
    clock.advance(999)
    log.maybe_flush()
    assert log.recovery_point == 0
    clock.advance(1)
    log.maybe_flush()
    assert log.recovery_point == 3
    assert log.last_flush_ms == clock.milliseconds()
    log.append(batch(1))
    log.maybe_flush()
    assert log.recovery_point == 3
    log.close()


def test_roll_schedules_a_flush_of_the_rolled_segment(tmp_path: Path, clock: ManualClock) -> None:
    tasks = []
    log = open_log(tmp_path / "t-0", clock=clock, schedule=tasks.append)
    fill(log, 20)
    assert len(log.segments) > 1 and tasks
    assert log.recovery_point == 0
    for task in tasks:
        task()
    assert log.recovery_point == log.active_segment.base_offset
    log.close()


# ---- replicas ------------------------------------------------------------------------------------


def test_replica_appends_keep_their_offsets(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, clock=clock)
    leader_batches = [
        build_batch([(b"k", b"a"), (b"k", b"b")], base_offset=0, base_timestamp=T0, partition_leader_epoch=3),
        build_batch([(b"k", b"c")], base_offset=2, base_timestamp=T0, partition_leader_epoch=3),
    ]
    info = log.append(b"".join(leader_batches), assign_offsets=False, from_client=False)
    assert (info.first_offset, info.last_offset) == (0, 2)
    stored = log.read(0, 64 * KiB).read_bytes()
    assert stored == b"".join(leader_batches)  # byte-identical: nothing is rewritten
    # a gap (compacted away on the leader) is accepted
    log.append(build_batch([(b"k", b"d")], base_offset=10, base_timestamp=T0), assign_offsets=False,
               from_client=False)
    assert log.next_offset == 11
    files = {p.name: p.read_bytes() for p in directory.iterdir()}
    with pytest.raises(InvalidRecordError, match="does not follow"):
        log.append(build_batch([(b"k", b"e")], base_offset=5, base_timestamp=T0), assign_offsets=False,
                   from_client=False)
    assert log.next_offset == 11
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == files
    assert [r.offset for r in region_records(log.read(0, 64 * KiB))] == [0, 1, 2, 10]
    assert log.read(5, 64 * KiB).first_offset == 10  # an offset in the gap reads the next batch
    log.close()


def test_replica_appends_accept_control_batches(tmp_path: Path, clock: ManualClock) -> None:
    from odradek.protocol.records import ControlType, build_control_batch

    log = open_log(tmp_path / "t-0", clock=clock)
    marker = build_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                                 timestamp=T0)
    log.append(marker, from_client=False)
    assert log.next_offset == 1
    log.close()


# ---- reopen ------------------------------------------------------------------------------------


def test_clean_reopen_keeps_everything(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, clock=clock)
    fill(log, 40)
    before = all_records(log)
    bases = [s.base_offset for s in log.segments]
    log.flush()
    log.close()
    reopened = Log.open(directory, log.config, clock=clock, clean_shutdown=True, recovery_point=log.next_offset)
    assert [s.base_offset for s in reopened.segments] == bases
    assert reopened.next_offset == 120
    assert all_records(reopened) == before
    reopened.append(batch(1))
    assert reopened.next_offset == 121
    reopened.close()


def test_unclean_reopen_cuts_a_torn_tail(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, clock=clock)
    fill(log, 40)
    last = log.active_segment
    end = log.next_offset
    log.close()
    with open(last.log_path, "ab") as f:
        f.write(batch(2)[:50])  # half a batch: a write the crash interrupted
    reopened = Log.open(directory, log.config, clock=clock, recovery_point=0)
    assert reopened.next_offset == end
    assert reopened.recovery_point == end
    assert os.path.getsize(last.log_path) == reopened.active_segment.size
    assert [r.offset for r in all_records(reopened)] == list(range(end))
    reopened.close()


def test_closed_log_refuses_appends(tmp_path: Path, clock: ManualClock) -> None:
    from odradek.protocol.errors import StorageError

    log = open_log(tmp_path / "t-0", clock=clock)
    log.close()
    with pytest.raises(StorageError, match="closed"):
        log.append(batch(1))


def test_open_refuses_a_directory_that_is_not_a_partition(tmp_path: Path) -> None:
    from odradek.protocol.errors import StorageError

    with pytest.raises(StorageError, match="not a partition directory"):
        open_log(tmp_path / "no_partition_number")


def test_tiny_indexes_fill_without_breaking_multi_batch_appends(tmp_path: Path, clock: ManualClock) -> None:
    # One-entry indexes and an entry per batch: a record set of several batches needs more index
    # entries than the segment has room for. The index is sparse, so the append must still succeed.
    cfg = small_config(segment_bytes=64 * KiB, segment_index_bytes=12, index_interval_bytes=0)
    directory = tmp_path / "t-0"
    log = open_log(directory, cfg, clock=clock)
    for i in range(10):
        log.append(b"".join(batch(1, ts=T0 + 10 * i + j, tag=f"{i}-{j}-") for j in range(4)))
    assert log.next_offset == 40
    assert [r.offset for r in all_records(log)] == list(range(40))
    for seg in log.segments:
        assert seg.index.entries <= 1 and seg.time_index.entries <= 1
        assert os.path.getsize(seg.log_path) == seg.size
    for offset in range(40):
        assert log.offset_for_timestamp(T0 + 10 * (offset // 4) + offset % 4) == TimestampOffset(
            T0 + 10 * (offset // 4) + offset % 4, offset
        )
    log.close()
    reopened = Log.open(directory, cfg, clock=clock, clean_shutdown=True)
    assert [r.offset for r in all_records(reopened)] == list(range(40))
    # every segment still knows its largest timestamp after a clean restart
    for seg in reopened.segments:
        headers = region_batches(seg.read(seg.base_offset, 64 * KiB))
        assert seg.max_timestamp == max(h.max_timestamp for h in headers)
    reopened.close()


def test_truncating_the_batch_holding_the_log_start_keeps_the_offsets_ordered(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    log.append(batch(5))  # 0..4
    log.append(batch(5))  # 5..9
    log.update_high_watermark(10)
    log.delete_records_before(7)  # the log start lies inside the second batch
    assert log.truncate_to(8)  # removes the whole batch holding 8, and so the log start
    assert log.next_offset == 5
    assert log.log_start_offset <= log.high_watermark <= log.next_offset
    info = log.append(batch(2))
    assert (info.first_offset, info.last_offset) == (5, 6)
    assert [r.offset for r in all_records(log)][-2:] == [5, 6]
    log.close()


def test_lowering_segment_index_bytes_between_restarts(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "t-0"
    big = small_config(segment_bytes=64 * KiB, index_interval_bytes=0, segment_index_bytes=800)
    log = Log.open(directory, big, clock=clock)
    for _ in range(30):
        log.append(batch(1))
    assert log.active_segment.index.entries > 10
    log.close()
    small = small_config(segment_bytes=64 * KiB, index_interval_bytes=0, segment_index_bytes=80)
    reopened = Log.open(directory, small, clock=clock, clean_shutdown=True)
    assert [r.offset for r in all_records(reopened)] == list(range(30))
    reopened.append(batch(1))  # the over-full index makes the segment roll
    assert len(reopened.segments) == 2
    assert [r.offset for r in all_records(reopened)] == list(range(31))
    reopened.close()


def test_retention_never_deletes_segments_at_or_above_the_high_watermark(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", small_config(retention_bytes=0, retention_ms=0), clock=clock)
    fill(log, 60)
    clock.advance(1)
    segments = log.segments
    assert len(segments) >= 4
    assert log.high_watermark == 0
    assert log.delete_retained_segments() == 0  # nothing is acknowledged yet: nothing may go
    log.update_high_watermark(segments[2].base_offset)
    assert log.delete_retained_segments() == 2  # only segments wholly below the high watermark
    assert log.segments == segments[2:]
    assert log.log_start_offset == segments[2].base_offset
    log.close()


def test_delete_records_removes_only_segments_below_the_new_log_start(tmp_path: Path, clock: ManualClock) -> None:
    log = open_log(tmp_path / "t-0", small_config(retention_bytes=0, retention_ms=0), clock=clock)
    fill(log, 40)
    log.update_high_watermark(log.next_offset)
    clock.advance(1)
    segments = log.segments
    target = segments[1].base_offset + 1
    assert log.delete_records_before(target) == target  # retention by size/time is not applied here
    assert log.segments == segments[1:]
    log.close()
