"""The sparse offset index and time index: entries, lookups, truncation, preallocation, reopening."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from odradek.protocol.errors import StorageError
from odradek.storage.index import IndexCorruptError, OffsetIndex, TimeIndex

BASE = 1000


def offset_index(tmp_path: Path, max_bytes: int = 100, *, writable: bool = True) -> OffsetIndex:
    return OffsetIndex(tmp_path / "00000000000000001000.index", BASE, max_bytes, writable=writable)


def time_index(tmp_path: Path, max_bytes: int = 100, *, writable: bool = True) -> TimeIndex:
    return TimeIndex(tmp_path / "00000000000000001000.timeindex", BASE, max_bytes, writable=writable)


def filled_offset_index(tmp_path: Path) -> OffsetIndex:
    idx = offset_index(tmp_path)
    for rel, pos in [(5, 100), (10, 250), (20, 600), (21, 700)]:
        idx.append(BASE + rel, pos)
    return idx


# ---- OffsetIndex ---------------------------------------------------------------------------------


def test_offset_index_is_preallocated_to_whole_entries(tmp_path: Path) -> None:
    idx = offset_index(tmp_path, 100)
    assert idx.writable
    assert idx.max_entries == 12
    assert idx.entries == 0
    assert idx.path.stat().st_size == 96  # 100 rounded down to 8-byte entries
    idx.close()


def test_offset_index_append_and_lookup(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    assert idx.entries == 4
    assert idx.size_bytes == 32
    assert idx.last_entry == (BASE + 21, 700)
    assert idx.entry(1) == (BASE + 10, 250)
    # below the first entry: scan from the start of the segment
    assert idx.lookup(BASE) == (BASE, 0)
    assert idx.lookup(BASE + 4) == (BASE, 0)
    assert idx.lookup(BASE - 50) == (BASE, 0)
    # exact hits and values between entries
    assert idx.lookup(BASE + 5) == (BASE + 5, 100)
    assert idx.lookup(BASE + 9) == (BASE + 5, 100)
    assert idx.lookup(BASE + 10) == (BASE + 10, 250)
    assert idx.lookup(BASE + 19) == (BASE + 10, 250)
    assert idx.lookup(BASE + 21) == (BASE + 21, 700)
    assert idx.lookup(BASE + 10_000) == (BASE + 21, 700)
    idx.close()


def test_offset_index_lookup_position(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    assert idx.lookup_position(0) == (BASE, 0)
    assert idx.lookup_position(99) == (BASE, 0)
    assert idx.lookup_position(100) == (BASE + 5, 100)
    assert idx.lookup_position(599) == (BASE + 10, 250)
    assert idx.lookup_position(600) == (BASE + 20, 600)
    assert idx.lookup_position(10**9) == (BASE + 21, 700)
    idx.close()


def test_offset_index_lookup_many_entries_agrees_with_a_linear_scan(tmp_path: Path) -> None:
    idx = offset_index(tmp_path, 8 * 500)
    entries = [(BASE + 3 * i + 1, 50 * i + 7) for i in range(500)]
    for off, pos in entries:
        idx.append(off, pos)
    assert idx.is_full
    for target in range(BASE - 2, BASE + 1505, 7):
        expected = (BASE, 0)
        for off, pos in entries:
            if off <= target:
                expected = (off, pos)
        assert idx.lookup(target) == expected
    idx.close()


@pytest.mark.parametrize("entry", [(BASE + 21, 800), (BASE + 20, 800), (BASE + 22, 700), (BASE + 22, 650)])
def test_offset_index_refuses_entries_that_do_not_increase(tmp_path: Path, entry: tuple[int, int]) -> None:
    idx = filled_offset_index(tmp_path)
    with pytest.raises(StorageError, match="not after the last one"):
        idx.append(*entry)
    assert idx.entries == 4
    idx.close()


def test_offset_index_refuses_appends_when_full(tmp_path: Path) -> None:
    idx = offset_index(tmp_path, 24)
    for i in range(3):
        assert not idx.is_full
        idx.append(BASE + i + 1, 10 * (i + 1))
    assert idx.is_full
    with pytest.raises(StorageError, match="full"):
        idx.append(BASE + 10, 1000)
    assert idx.entries == 3
    idx.close()


def test_offset_index_truncate_to(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    idx.truncate_to(BASE + 100)  # past the last entry: nothing goes
    assert idx.entries == 4
    idx.truncate_to(BASE + 21)  # removes entries >= the offset
    assert idx.entries == 3 and idx.last_entry == (BASE + 20, 600)
    idx.truncate_to(BASE + 11)
    assert idx.entries == 2 and idx.last_entry == (BASE + 10, 250)
    idx.truncate_to(BASE + 10)
    assert idx.entries == 1
    idx.truncate_to(BASE)
    assert idx.entries == 0
    assert idx.last_entry == (BASE, 0)
    assert idx.lookup(BASE + 50) == (BASE, 0)
    # appends resume after truncation, overwriting the old slots
    idx.append(BASE + 3, 40)
    assert idx.lookup(BASE + 50) == (BASE + 3, 40)
    idx.close()


def test_truncating_an_empty_writable_index_keeps_it_empty(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.truncate_to(BASE + 50)
    assert idx.entries == 0
    assert idx.lookup(BASE + 50) == (BASE, 0)
    idx.close()
    assert idx.path.stat().st_size == 0


def test_stale_slots_of_a_truncated_writable_index_are_never_read(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    idx.truncate_to(BASE)  # every entry goes, but the mapped file still holds their bytes
    assert idx.entries == 0
    assert idx.lookup(BASE + 21) == (BASE, 0)
    assert idx.lookup_position(700) == (BASE, 0)
    idx.truncate_to(BASE + 15)
    assert idx.entries == 0
    idx.close()


def test_truncate_of_a_trimmed_index_shrinks_the_file(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    idx.trim()
    assert idx.path.stat().st_size == 32
    idx.truncate_to(BASE + 11)
    assert idx.entries == 2
    assert idx.path.stat().st_size == 16
    assert idx.lookup(BASE + 100) == (BASE + 10, 250)
    idx.close()


def test_trim_shrinks_to_entries_and_closes_for_appends(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    assert idx.path.stat().st_size == 96
    idx.trim()
    assert not idx.writable
    assert idx.path.stat().st_size == 32
    assert idx.lookup(BASE + 12) == (BASE + 10, 250)  # lookups still work on the trimmed file
    with pytest.raises(StorageError, match="closed for appends"):
        idx.append(BASE + 30, 900)
    idx.trim()  # idempotent
    assert idx.path.stat().st_size == 32
    idx.close()


def test_make_writable_preallocates_again_and_keeps_entries(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    idx.trim()
    idx.make_writable()
    assert idx.writable
    assert idx.path.stat().st_size == 96
    assert idx.entries == 4
    assert idx.last_entry == (BASE + 21, 700)
    idx.append(BASE + 30, 900)
    assert idx.lookup(BASE + 31) == (BASE + 30, 900)
    idx.close()
    assert idx.path.stat().st_size == 40


def test_offset_index_reopens_from_its_trimmed_file(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    idx.close()
    reopened = offset_index(tmp_path, writable=False)
    assert not reopened.writable
    assert reopened.entries == 4
    assert [reopened.entry(i) for i in range(4)] == [
        (BASE + 5, 100), (BASE + 10, 250), (BASE + 20, 600), (BASE + 21, 700)
    ]
    assert reopened.lookup(BASE + 15) == (BASE + 10, 250)
    reopened.sanity_check(log_size=800)
    reopened.close()
    writable = offset_index(tmp_path, writable=True)
    assert writable.entries == 4 and writable.path.stat().st_size == 96
    writable.close()


def test_new_read_only_index_creates_an_empty_file(tmp_path: Path) -> None:
    idx = offset_index(tmp_path, writable=False)
    assert idx.path.exists() and idx.path.stat().st_size == 0
    assert idx.entries == 0
    assert idx.lookup(BASE + 5) == (BASE, 0)
    assert idx.lookup_position(50) == (BASE, 0)
    idx.sanity_check(log_size=0)
    idx.close()


def test_offset_index_reset_drops_every_entry(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    idx.reset()
    assert idx.entries == 0 and idx.writable
    assert idx.lookup(BASE + 21) == (BASE, 0)
    idx.append(BASE + 1, 10)
    assert idx.entries == 1
    idx.trim()
    idx.reset()
    assert idx.entries == 0 and idx.path.stat().st_size == 0
    idx.close()


def test_offset_index_sanity_check_accepts_a_good_index(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    idx.sanity_check(log_size=701)
    idx.close()


def test_offset_index_sanity_check_catches_position_past_the_log(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    idx.close()
    reopened = offset_index(tmp_path, writable=False)
    with pytest.raises(IndexCorruptError, match="past the log"):
        reopened.sanity_check(log_size=700)  # the log was cut below the last indexed batch
    reopened.close()


def test_an_index_left_preallocated_by_a_crash_fails_the_sanity_check(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    idx.flush()
    idx._unmap()  # simulate a crash: the file keeps its preallocated size with zeroed tail slots
    reopened = offset_index(tmp_path, writable=False)
    assert reopened.entries == 12
    with pytest.raises(IndexCorruptError):
        reopened.sanity_check(log_size=10_000)
    reopened.close()


def test_offset_index_sanity_check_catches_decreasing_last_offset(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(struct.pack(">IIII", 5, 100, 0, 200))  # last relative offset 0 after 5
    idx = OffsetIndex(path, BASE, 100, writable=False)
    with pytest.raises(IndexCorruptError, match="last offset"):
        idx.sanity_check(log_size=10_000)
    idx.close()


def test_index_file_of_partial_entries_is_refused_on_open(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(b"\x00" * 13)
    with pytest.raises(IndexCorruptError, match="multiple of 8"):
        OffsetIndex(path, BASE, 100, writable=False)
    tpath = tmp_path / "00000000000000001000.timeindex"
    tpath.write_bytes(b"\x00" * 16)
    with pytest.raises(IndexCorruptError, match="multiple of 12"):
        TimeIndex(tpath, BASE, 100, writable=False)


def test_rename_and_delete(tmp_path: Path) -> None:
    idx = filled_offset_index(tmp_path)
    idx.trim()
    target = tmp_path / "moved.index.deleted"
    idx.rename(target)
    assert target.exists() and idx.path == target
    assert idx.lookup(BASE + 10) == (BASE + 10, 250)
    idx.delete()
    assert not target.exists()


# ---- TimeIndex -----------------------------------------------------------------------------------


def filled_time_index(tmp_path: Path) -> TimeIndex:
    idx = time_index(tmp_path)
    idx.maybe_append(500, BASE + 2)
    idx.maybe_append(700, BASE + 5)
    idx.maybe_append(900, BASE + 9)
    return idx


def test_time_index_is_preallocated_to_whole_entries(tmp_path: Path) -> None:
    idx = time_index(tmp_path, 100)
    assert idx.max_entries == 8
    assert idx.path.stat().st_size == 96
    assert idx.last_entry == (-1, BASE)
    idx.close()
    assert idx.path.stat().st_size == 0


def test_time_index_appends_only_larger_timestamps(tmp_path: Path) -> None:
    idx = filled_time_index(tmp_path)
    idx.maybe_append(900, BASE + 12)  # same timestamp: ignored
    idx.maybe_append(800, BASE + 13)  # smaller: ignored
    assert idx.entries == 3
    assert idx.last_entry == (900, BASE + 9)
    idx.maybe_append(901, BASE + 9)  # same offset with a larger timestamp is allowed
    assert idx.entries == 4
    idx.close()


def test_time_index_refuses_offsets_going_backwards(tmp_path: Path) -> None:
    idx = filled_time_index(tmp_path)
    with pytest.raises(StorageError, match="backwards"):
        idx.maybe_append(1000, BASE + 8)
    assert idx.entries == 3
    idx.close()


def test_time_index_lookup(tmp_path: Path) -> None:
    idx = filled_time_index(tmp_path)
    assert idx.lookup(0) == (-1, BASE)
    assert idx.lookup(499) == (-1, BASE)
    assert idx.lookup(500) == (500, BASE + 2)
    assert idx.lookup(699) == (500, BASE + 2)
    assert idx.lookup(700) == (700, BASE + 5)
    assert idx.lookup(10**15) == (900, BASE + 9)
    idx.close()


def test_empty_time_index_lookup_finds_nothing(tmp_path: Path) -> None:
    writable = time_index(tmp_path)
    assert writable.lookup(0) == (-1, BASE)
    assert writable.lookup(10**12) == (-1, BASE)
    writable.close()
    read_only = time_index(tmp_path, writable=False)
    assert read_only.lookup(10**12) == (-1, BASE)
    read_only.close()


def test_time_index_keeps_its_last_slot_for_the_roll_entry(tmp_path: Path) -> None:
    idx = time_index(tmp_path, 36)
    assert idx.max_entries == 3
    idx.maybe_append(1, BASE)
    assert not idx.is_full
    idx.maybe_append(2, BASE + 1)
    assert idx.is_full  # one slot early, as Kafka's TimeIndex
    with pytest.raises(StorageError, match="full"):
        idx.maybe_append(3, BASE + 2)
    assert idx.entries == 2
    idx.maybe_append(3, BASE + 2, skip_full_check=True)  # the roll-time entry takes the reserved slot
    assert idx.entries == 3 and idx.last_entry == (3, BASE + 2)
    idx.maybe_append(4, BASE + 3, skip_full_check=True)  # no room at all: dropped quietly
    assert idx.entries == 3
    idx.close()


def test_a_one_slot_time_index_is_full_from_the_start(tmp_path: Path) -> None:
    idx = time_index(tmp_path, 12)
    assert idx.is_full
    idx.maybe_append(7, BASE + 4, skip_full_check=True)
    assert idx.last_entry == (7, BASE + 4)
    idx.close()


def test_time_index_truncate_to(tmp_path: Path) -> None:
    idx = filled_time_index(tmp_path)
    idx.truncate_to(BASE + 9)
    assert idx.entries == 2 and idx.last_entry == (700, BASE + 5)
    idx.truncate_to(BASE + 3)
    assert idx.entries == 1 and idx.last_entry == (500, BASE + 2)
    idx.truncate_to(BASE + 2)
    assert idx.entries == 0 and idx.last_entry == (-1, BASE)
    assert idx.lookup(10**12) == (-1, BASE)
    idx.truncate_to(BASE + 50)
    assert idx.entries == 0
    idx.maybe_append(100, BASE)
    assert idx.lookup(10**12) == (100, BASE)
    idx.close()


def test_time_index_trim_reopen_and_make_writable(tmp_path: Path) -> None:
    idx = filled_time_index(tmp_path)
    assert idx.path.stat().st_size == 96
    idx.trim()
    assert idx.path.stat().st_size == 36
    idx.close()
    reopened = time_index(tmp_path, writable=False)
    assert reopened.entries == 3
    assert reopened.lookup(800) == (700, BASE + 5)
    reopened.sanity_check()
    reopened.make_writable()
    assert reopened.path.stat().st_size == 96
    reopened.maybe_append(1000, BASE + 20)
    reopened.close()
    assert reopened.path.stat().st_size == 48


def test_time_index_sanity_check_catches_decreasing_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.timeindex"
    path.write_bytes(struct.pack(">qI", 900, 1) + struct.pack(">qI", 100, 2))
    idx = TimeIndex(path, BASE, 120, writable=False)
    with pytest.raises(IndexCorruptError, match="inconsistent"):
        idx.sanity_check()
    idx.close()


def test_time_index_left_preallocated_by_a_crash_fails_the_sanity_check(tmp_path: Path) -> None:
    idx = filled_time_index(tmp_path)
    idx.flush()
    idx._unmap()
    reopened = time_index(tmp_path, writable=False)
    assert reopened.entries == 8
    with pytest.raises(IndexCorruptError):
        reopened.sanity_check()
    reopened.close()


def test_make_writable_with_a_smaller_limit_keeps_entries_in_use(tmp_path: Path) -> None:
    idx = offset_index(tmp_path, 800)
    for i in range(20):
        idx.append(BASE + i + 1, 10 * (i + 1))
    idx.close()
    smaller = offset_index(tmp_path, 80, writable=True)  # segment.index.bytes was lowered
    assert smaller.entries == 20 and smaller.is_full
    assert smaller.lookup(BASE + 20) == (BASE + 20, 200)
    with pytest.raises(StorageError, match="full"):
        smaller.append(BASE + 30, 1000)
    smaller.close()
    assert smaller.path.stat().st_size == 160


def test_an_entry_outside_the_relative_offset_range_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.append(BASE + 1, 10)
    with pytest.raises(StorageError, match="does not fit"):
        idx.append(BASE + (1 << 32), 20)  # relative offset past u32, as Kafka's IndexOffsetOverflowException
    with pytest.raises(StorageError, match="does not fit"):
        idx.append_many([(BASE + 2, 30), (BASE + (1 << 32) + 5, 40)])
    assert idx.entries == 1 and idx.last_entry == (BASE + 1, 10)
    tix = time_index(tmp_path)
    with pytest.raises(StorageError, match="does not fit"):
        tix.maybe_append(1_000, BASE + (1 << 32))
    assert tix.entries == 0
    idx.close()
    tix.close()
