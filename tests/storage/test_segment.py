"""One segment: appends, reads on batch boundaries, offset/time lookups, roll, truncation, recovery."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from odradek.protocol import batch as rb
from odradek.protocol.records import iter_batches
from odradek.storage.config import KiB, LogConfig
from odradek.storage.segment import DELETED_SUFFIX, LogSegment, segment_name
from tests.storage.helpers import T0, batch, region_batches, region_records, small_config

BASE = 100


def make_segment(tmp_path: Path, config: LogConfig | None = None, base: int = BASE) -> LogSegment:
    return LogSegment.create(tmp_path, base, config or small_config(segment_bytes=64 * KiB), now_ms=T0)


def put(seg: LogSegment, data: bytes, base_offset: int) -> list[rb.BatchHeader]:
    """Append ``data`` (one or more batches) with offsets assigned from ``base_offset``."""
    buf = bytearray(data)
    headers = []
    offset = base_offset
    for pos, header in iter_batches(bytes(buf)):
        rb.set_base_offset(buf, pos, offset)
        headers.append(header._replace(base_offset=offset))
        offset += header.last_offset_delta + 1
    seg.append(buf, headers)
    return headers


def fill(seg: LogSegment, batches: int, per_batch: int = 3, *, ts_step: int = 10) -> list[rb.BatchHeader]:
    headers: list[rb.BatchHeader] = []
    offset = seg.base_offset
    for i in range(batches):
        (h,) = put(seg, batch(per_batch, ts=T0 + i * ts_step, tag=f"b{i}-"), offset)
        headers.append(h)
        offset = h.next_offset
    return headers


def positions(headers: list[rb.BatchHeader]) -> list[int]:
    out, pos = [], 0
    for h in headers:
        out.append(pos)
        pos += h.size
    return out


# ---- append and read -----------------------------------------------------------------------------


def test_new_segment_is_empty_with_preallocated_indexes(tmp_path: Path) -> None:
    cfg = small_config(segment_index_bytes=800)
    seg = make_segment(tmp_path, cfg)
    assert seg.size == 0
    assert seg.next_offset == BASE
    assert seg.log_path.name == segment_name(BASE) + ".log" == "00000000000000000100.log"
    assert seg.index.path.stat().st_size == 800
    assert seg.time_index.path.stat().st_size == 792
    assert seg.read(BASE, 1000) is None
    assert seg.translate_offset(BASE) is None
    seg.close()


def test_append_and_read_everything(tmp_path: Path) -> None:
    seg = make_segment(tmp_path)
    headers = fill(seg, 5)
    total = sum(h.size for h in headers)
    assert seg.size == total == os.path.getsize(seg.log_path)
    assert seg.next_offset == BASE + 15
    region = seg.read(BASE, 10 * KiB)
    assert region is not None
    assert (region.position, region.length, region.first_offset) == (0, total, BASE)
    records = region_records(region)
    assert [r.offset for r in records] == list(range(BASE, BASE + 15))
    assert records[4].value.startswith(b"b1-1")
    seg.close()


def test_read_starts_at_the_batch_holding_the_offset(tmp_path: Path) -> None:
    seg = make_segment(tmp_path)
    headers = fill(seg, 6)
    starts = positions(headers)
    for i, h in enumerate(headers):
        for offset in range(h.base_offset, h.next_offset):
            region = seg.read(offset, 10 * KiB)
            assert region is not None
            assert region.position == starts[i]
            assert region.first_offset == h.base_offset
            assert region.position + region.length == seg.size
    seg.close()


def test_read_ends_on_a_batch_boundary_within_max_bytes(tmp_path: Path) -> None:
    seg = make_segment(tmp_path)
    headers = fill(seg, 8)
    size = headers[0].size
    assert all(h.size == size for h in headers)
    for max_bytes in range(size, 8 * size + 5, 17):
        region = seg.read(BASE, max_bytes)
        assert region is not None
        assert region.length == (max_bytes // size) * size
        assert len(region_batches(region)) == max_bytes // size
    seg.close()


def test_min_one_returns_a_whole_first_batch_larger_than_max_bytes(tmp_path: Path) -> None:
    seg = make_segment(tmp_path)
    (big,) = put(seg, batch(10, value_size=200), BASE)
    put(seg, batch(1), big.next_offset)
    region = seg.read(BASE + 3, 50)
    assert region is not None
    assert (region.position, region.length) == (0, big.size)
    assert region_batches(region)[0].last_offset == big.last_offset
    assert seg.read(BASE + 3, 50, min_one=False) is None
    seg.close()


def test_read_respects_max_position(tmp_path: Path) -> None:
    seg = make_segment(tmp_path)
    headers = fill(seg, 4)
    starts = positions(headers)
    region = seg.read(BASE, 10 * KiB, max_position=starts[2])
    assert region is not None and region.length == starts[2]
    assert seg.read(headers[2].base_offset, 10 * KiB, max_position=starts[2]) is None
    # min_one does not cross max_position
    assert seg.read(BASE, 1, max_position=starts[1] - 1) is None
    seg.close()


def test_read_past_the_end_returns_none(tmp_path: Path) -> None:
    seg = make_segment(tmp_path)
    fill(seg, 2)
    assert seg.read(BASE + 6, 10 * KiB) is None
    assert seg.read(BASE + 600, 10 * KiB) is None
    seg.close()


def test_index_entries_follow_index_interval_bytes(tmp_path: Path) -> None:
    seg = make_segment(tmp_path, small_config(segment_bytes=64 * KiB, index_interval_bytes=300))
    headers = fill(seg, 30)
    starts = positions(headers)
    entries = [seg.index.entry(i) for i in range(seg.index.entries)]
    assert entries, "a segment this large must be indexed"
    # every entry maps a batch's last offset to that batch's start
    by_last = {h.last_offset: starts[i] for i, h in enumerate(headers)}
    for offset, pos in entries:
        assert by_last[offset] == pos
    # consecutive entries are a little more than index.interval.bytes apart
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(entries)]
    assert all(300 < gap <= 300 + 2 * headers[0].size for gap in gaps)
    seg.close()


def test_translate_offset_agrees_with_a_scan(tmp_path: Path) -> None:
    seg = make_segment(tmp_path, small_config(segment_bytes=64 * KiB, index_interval_bytes=64))
    headers = fill(seg, 40, per_batch=2)
    starts = positions(headers)
    assert seg.index.entries > 10
    for offset in range(BASE - 5, headers[-1].next_offset):
        found = seg.translate_offset(offset)
        expected = next(i for i, h in enumerate(headers) if h.last_offset >= offset)
        assert found is not None
        assert found[0] == starts[expected]
        assert found[1].base_offset == headers[expected].base_offset
        assert seg.position_of(offset) == starts[expected]
    assert seg.translate_offset(headers[-1].next_offset) is None
    assert seg.position_of(headers[-1].next_offset) == seg.size
    seg.close()


def test_find_timestamp(tmp_path: Path) -> None:
    seg = make_segment(tmp_path, small_config(segment_bytes=64 * KiB, index_interval_bytes=64))
    # max timestamps per batch: 100, 300, 200, 400 ... not monotonic
    stamps = [100, 300, 200, 400, 400, 500, 450, 900]
    headers = []
    offset = BASE
    for ts in stamps:
        (h,) = put(seg, batch(2, timestamps=[ts - 50, ts]), offset)
        headers.append(h)
        offset = h.next_offset
    starts = positions(headers)
    for target in [0, 100, 101, 250, 300, 301, 400, 401, 460, 500, 501, 900]:
        found = seg.find_timestamp(target)
        expected = next(i for i, ts in enumerate(stamps) if ts >= target)
        assert found is not None, target
        assert found == (starts[expected], headers[expected]), target
    assert seg.find_timestamp(901) is None
    assert seg.max_timestamp == 900
    assert seg.offset_of_max_timestamp == headers[-1].last_offset
    assert seg.largest_timestamp == 900
    seg.close()


def test_largest_timestamp_falls_back_to_the_file_mtime(tmp_path: Path) -> None:
    seg = make_segment(tmp_path)
    put(seg, batch(1, ts=-1), BASE)
    assert seg.max_timestamp == -1
    mtime = int(os.stat(seg.log_path).st_mtime * 1000)
    assert seg.largest_timestamp == mtime
    seg.close()


# ---- roll ---------------------------------------------------------------------------------------


def test_needs_roll_by_size(tmp_path: Path) -> None:
    seg = make_segment(tmp_path, small_config(segment_bytes=1000))
    assert not seg.needs_roll(5000, T0)  # an empty segment never rolls, whatever comes
    (h,) = put(seg, batch(1), BASE)
    assert not seg.needs_roll(1000 - h.size, T0)
    assert seg.needs_roll(1000 - h.size + 1, T0)
    seg.close()


def test_needs_roll_by_time(tmp_path: Path) -> None:
    seg = make_segment(tmp_path, small_config(segment_ms=10_000))
    put(seg, batch(1, ts=T0 + 500), BASE)
    assert seg.rolling_timestamp == T0 + 500
    assert not seg.needs_roll(10, T0 + 10_500)
    assert seg.needs_roll(10, T0 + 10_501)
    seg.close()


def test_needs_roll_when_an_index_is_full(tmp_path: Path) -> None:
    seg = make_segment(tmp_path, small_config(segment_bytes=64 * KiB, segment_index_bytes=24, index_interval_bytes=0))
    offset = BASE
    while not (seg.index.is_full or seg.time_index.is_full):
        assert not seg.needs_roll(10, T0)
        (h,) = put(seg, batch(1, ts=T0 + offset), offset)
        offset = h.next_offset
    assert seg.needs_roll(10, T0)
    seg.close()


def test_on_roll_trims_indexes_and_records_the_largest_timestamp(tmp_path: Path) -> None:
    cfg = small_config(segment_bytes=64 * KiB, index_interval_bytes=300, segment_index_bytes=1200)
    seg = make_segment(tmp_path, cfg)
    headers = fill(seg, 20)
    assert seg.index.path.stat().st_size == 1200
    assert seg.time_index.path.stat().st_size == 1200
    seg.on_roll()
    assert not seg.index.writable and not seg.time_index.writable
    assert seg.index.path.stat().st_size == 8 * seg.index.entries
    assert seg.time_index.path.stat().st_size == 12 * seg.time_index.entries
    assert seg.time_index.last_entry == (headers[-1].max_timestamp, headers[-1].last_offset)
    # reads keep working on the trimmed indexes
    region = seg.read(headers[10].base_offset, 10 * KiB)
    assert region is not None and region.first_offset == headers[10].base_offset
    seg.close()


# ---- truncation ---------------------------------------------------------------------------------


def test_truncate_to_removes_the_batch_holding_the_offset_and_everything_after(tmp_path: Path) -> None:
    seg = make_segment(tmp_path, small_config(segment_bytes=64 * KiB, index_interval_bytes=100))
    headers = fill(seg, 12)
    starts = positions(headers)
    before = seg.size
    removed = seg.truncate_to(headers[7].base_offset + 1)  # middle of batch 7
    assert removed == before - starts[7]
    assert seg.size == starts[7] == os.path.getsize(seg.log_path)
    assert seg.next_offset == headers[7].base_offset
    assert all(seg.index.entry(i)[0] < headers[7].base_offset for i in range(seg.index.entries))
    assert seg.max_timestamp == headers[6].max_timestamp
    assert seg.offset_of_max_timestamp == headers[6].last_offset
    assert seg.read(headers[7].base_offset, 10 * KiB) is None
    # appending resumes at the cut
    (h,) = put(seg, batch(2, tag="new"), headers[7].base_offset)
    region = seg.read(h.base_offset, 10 * KiB)
    assert region is not None and region.position == starts[7]
    assert region_records(region)[0].value.startswith(b"new0")
    assert seg.truncate_to(h.next_offset) == 0
    seg.close()


def test_truncate_to_the_base_empties_the_segment(tmp_path: Path) -> None:
    seg = make_segment(tmp_path)
    fill(seg, 10)
    seg.truncate_to(BASE)
    assert seg.size == 0 and seg.next_offset == BASE
    assert seg.index.entries == 0 and seg.time_index.entries == 0
    assert seg.max_timestamp == -1 and seg.rolling_timestamp is None
    assert not seg.needs_roll(10**6, T0 + 10**12)
    headers = fill(seg, 3)
    assert seg.rolling_timestamp == headers[0].max_timestamp
    assert [r.offset for r in region_records(seg.read(BASE, 10 * KiB))] == list(range(BASE, BASE + 9))
    seg.close()


# ---- reopen and recovery ---------------------------------------------------------------------------


def test_close_and_load_clean(tmp_path: Path) -> None:
    cfg = small_config(segment_bytes=64 * KiB, index_interval_bytes=100)
    seg = make_segment(tmp_path, cfg)
    headers = fill(seg, 15)
    entries = [seg.index.entry(i) for i in range(seg.index.entries)]
    seg.close()
    again = LogSegment(tmp_path, BASE, cfg, now_ms=T0)
    again.load_clean()
    assert again.size == sum(h.size for h in headers)
    assert again.next_offset == headers[-1].next_offset
    assert [again.index.entry(i) for i in range(again.index.entries)] == entries
    assert again.max_timestamp == headers[-1].max_timestamp
    assert again.rolling_timestamp == headers[0].max_timestamp
    again.make_active()
    (h,) = put(again, batch(1, tag="after"), headers[-1].next_offset)
    assert region_records(again.read(h.base_offset, 1000))[0].value.startswith(b"after")
    again.close()


def test_load_clean_rebuilds_deleted_indexes(tmp_path: Path) -> None:
    cfg = small_config(segment_bytes=64 * KiB, index_interval_bytes=100)
    seg = make_segment(tmp_path, cfg)
    headers = fill(seg, 15)
    entries = [seg.index.entry(i) for i in range(seg.index.entries)]
    time_entries = [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
    seg.close()
    seg.index.path.unlink()
    seg.time_index.path.unlink()
    again = LogSegment(tmp_path, BASE, cfg, now_ms=T0)
    again.load_clean()
    assert [again.index.entry(i) for i in range(again.index.entries)] == entries
    assert [again.time_index.entry(i) for i in range(again.time_index.entries)] == time_entries
    assert again.max_timestamp == headers[-1].max_timestamp
    assert again.find_timestamp(headers[5].max_timestamp)[1].base_offset == headers[5].base_offset
    again.close()


def test_load_clean_rebuilds_an_index_whose_positions_pass_the_log(tmp_path: Path) -> None:
    cfg = small_config(segment_bytes=64 * KiB, index_interval_bytes=100)
    seg = make_segment(tmp_path, cfg)
    headers = fill(seg, 15)
    seg.close()
    keep = sum(h.size for h in headers[:5])
    os.truncate(seg.log_path, keep)  # the log lost batches its index still points into
    again = LogSegment(tmp_path, BASE, cfg, now_ms=T0)
    again.load_clean()
    assert all(again.index.entry(i)[1] < keep for i in range(again.index.entries))
    assert again.next_offset == headers[4].next_offset
    again.close()


def test_recover_of_an_intact_segment_cuts_nothing_and_rebuilds_identical_indexes(tmp_path: Path) -> None:
    cfg = small_config(segment_bytes=64 * KiB, index_interval_bytes=100)
    seg = make_segment(tmp_path, cfg)
    headers = fill(seg, 20)
    entries = [seg.index.entry(i) for i in range(seg.index.entries)]
    seen: list[rb.BatchHeader] = []
    assert seg.recover(seen.append) == 0
    assert seen == headers
    assert [seg.index.entry(i) for i in range(seg.index.entries)] == entries
    assert seg.index.writable  # an active segment stays active
    assert seg.max_timestamp == headers[-1].max_timestamp
    seg.close()


@pytest.mark.parametrize("damage", ["garbage tail", "flipped byte", "torn write", "offset goes back"])
def test_recover_cuts_at_the_first_invalid_batch(tmp_path: Path, damage: str) -> None:
    cfg = small_config(segment_bytes=64 * KiB, index_interval_bytes=100)
    seg = make_segment(tmp_path, cfg)
    headers = fill(seg, 10)
    good = seg.size
    if damage == "garbage tail":
        os.pwrite(seg.fd, b"\x01" * 37, good)
        expected_size = good
    elif damage == "flipped byte":
        last = good - headers[-1].size
        os.pwrite(seg.fd, b"\xee", last + 70)
        expected_size = last
    elif damage == "torn write":
        os.pwrite(seg.fd, batch(3)[:-9], good)
        expected_size = good
    else:
        os.pwrite(seg.fd, batch(1, base_offset=headers[3].base_offset), good)  # repeats earlier offsets
        expected_size = good
    file_size = os.path.getsize(seg.log_path)
    cut = seg.recover()
    assert cut == file_size - expected_size
    assert seg.size == expected_size == os.path.getsize(seg.log_path)
    kept = [h for h in headers if sum(x.size for x in headers[: headers.index(h) + 1]) <= expected_size]
    assert seg.next_offset == kept[-1].next_offset
    assert [r.offset for r in region_records(seg.read(BASE, 64 * KiB))] == list(range(BASE, kept[-1].next_offset))
    assert all(seg.index.entry(i)[1] < expected_size for i in range(seg.index.entries))
    seg.close()


def test_recover_of_a_rolled_segment_leaves_its_indexes_trimmed(tmp_path: Path) -> None:
    cfg = small_config(segment_bytes=64 * KiB, index_interval_bytes=100)
    seg = make_segment(tmp_path, cfg)
    fill(seg, 10)
    seg.close()
    again = LogSegment(tmp_path, BASE, cfg, now_ms=T0)
    assert again.recover() == 0
    assert not again.index.writable
    assert again.index.path.stat().st_size == 8 * again.index.entries
    again.close()


# ---- deletion -----------------------------------------------------------------------------------


def test_mark_deleted_renames_files_and_keeps_open_regions_readable(tmp_path: Path) -> None:
    seg = make_segment(tmp_path)
    fill(seg, 4)
    region = seg.read(BASE, 10 * KiB)
    assert region is not None
    before = region.read_bytes()
    names = {seg.log_path.name, seg.index.path.name, seg.time_index.path.name}
    seg.mark_deleted()
    assert seg.deleted
    remaining = {p.name for p in tmp_path.iterdir()}
    assert remaining == {n + DELETED_SUFFIX for n in names}
    assert region.read_bytes() == before  # the open handle still reads
    again = seg.read(BASE + 4, 10 * KiB)  # so does the segment itself
    assert again is not None and again.first_offset == BASE + 3
    seg.mark_deleted()  # idempotent
    seg.delete_files()
    assert list(tmp_path.iterdir()) == []
