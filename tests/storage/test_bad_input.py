"""Refused input and failing disks: every refusal names its error, and the log stays exactly as it was.

For each kind of bad record set, ``Log.append`` must raise the specific ``KafkaError`` subclass with
its wire code, write nothing (the directory is byte-identical before and after) and leave the offsets
alone, so that the next good append gets the next offset. A full disk or an I/O error must reach the
caller as ``StorageError`` and leave what was stored before intact and readable.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from odradek.clock import ManualClock
from odradek.protocol import batch as rb
from odradek.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    KafkaError,
    RecordTooLargeError,
    StorageError,
    UnsupportedMagicError,
)
from odradek.protocol.records import ControlType, build_batch, build_control_batch
from odradek.storage import segment as segment_module
from odradek.storage.config import KiB, MiB
from odradek.storage.log import Log, RecordListTooLargeError
from tests.storage.helpers import T0, all_records, batch, small_config, snapshot


def patched(data: bytes, at: int, fmt: str, value: int, *, restamp: bool = False) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, at, value)
    if restamp:
        rb.restamp_crc(buf, 0, len(buf))
    return bytes(buf)


GOOD = batch(3, value_size=30)


def bad_crc() -> bytes:
    buf = bytearray(GOOD)
    buf[-1] ^= 0x01
    return bytes(buf)


def bad_stored_crc() -> bytes:
    return patched(GOOD, rb.CRC_AT, ">I", rb.parse_header(GOOD).crc ^ 0xFFFF)


# (name, record set, expected error class, expected wire code)
CASES: list[tuple[str, Callable[[], bytes], type[KafkaError], ErrorCode]] = [
    ("bad CRC in a record", bad_crc, CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    ("bad stored CRC", bad_stored_crc, CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    ("magic 0", lambda: patched(GOOD, rb.MAGIC_AT, ">b", 0), UnsupportedMagicError,
     ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
    ("magic 1", lambda: patched(GOOD, rb.MAGIC_AT, ">b", 1), UnsupportedMagicError,
     ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
    ("magic 3", lambda: patched(GOOD, rb.MAGIC_AT, ">b", 3), CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    ("batchLength below the minimum", lambda: patched(GOOD, rb.LENGTH_AT, ">i", rb.MIN_BATCH_LENGTH - 1),
     CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    ("batchLength zero", lambda: patched(GOOD, rb.LENGTH_AT, ">i", 0), CorruptRecordError,
     ErrorCode.CORRUPT_MESSAGE),
    ("batchLength negative", lambda: patched(GOOD, rb.LENGTH_AT, ">i", -100), CorruptRecordError,
     ErrorCode.CORRUPT_MESSAGE),
    ("fewer bytes than batchLength claims", lambda: GOOD[:-7], CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    ("batchLength larger than the input", lambda: patched(GOOD, rb.LENGTH_AT, ">i", len(GOOD)),
     CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    ("shorter than the batch prefix", lambda: GOOD[:10], CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    ("header cut short", lambda: GOOD[:40], CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    ("trailing garbage shorter than a prefix", lambda: GOOD + b"\x07" * 5, CorruptRecordError,
     ErrorCode.CORRUPT_MESSAGE),
    ("trailing garbage claiming a huge batch", lambda: GOOD + GOOD[:8] + struct.pack(">i", 10**6) + GOOD[12:30],
     CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    ("trailing partial batch", lambda: GOOD + GOOD[:-1], CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    ("bad second batch", lambda: GOOD + bad_crc(), CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    ("batch larger than max.message.bytes", lambda: batch(4, value_size=400), RecordTooLargeError,
     ErrorCode.MESSAGE_TOO_LARGE),
    ("record set larger than segment.bytes", lambda: GOOD * (4 * KiB // len(GOOD) + 1), RecordListTooLargeError,
     ErrorCode.RECORD_LIST_TOO_LARGE),
    ("empty input", lambda: b"", InvalidRecordError, ErrorCode.INVALID_RECORD),
    ("control batch from a client",
     lambda: build_control_batch(ControlType.COMMIT, producer_id=5, producer_epoch=0, coordinator_epoch=1,
                                 timestamp=T0),
     InvalidRecordError, ErrorCode.INVALID_RECORD),
    ("control bit on an ordinary batch", lambda: batch(1, is_control=True), InvalidRecordError,
     ErrorCode.INVALID_RECORD),
    ("recordCount disagrees with lastOffsetDelta", lambda: build_batch([(b"k", b"v")], last_offset_delta=3),
     InvalidRecordError, ErrorCode.INVALID_RECORD),
    ("batch without records", lambda: build_batch([], last_offset_delta=0), InvalidRecordError,
     ErrorCode.INVALID_RECORD),
]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def log(tmp_path: Path, clock: ManualClock) -> Iterator[Log]:
    """A log of several segments (4 KiB each), max.message.bytes 1 KiB."""
    opened = Log.open(tmp_path / "t-0", small_config(max_message_bytes=1 * KiB), clock=clock)
    for _ in range(60):
        opened.append(GOOD, leader_epoch=1)
    assert len(opened.segments) > 2
    yield opened
    opened.close()


@pytest.mark.parametrize(("name", "make", "error", "code"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_its_error_and_writes_nothing(
    log: Log, name: str, make: Callable[[], bytes], error: type[KafkaError], code: ErrorCode
) -> None:
    data = make()
    before = snapshot(log.directory)
    next_offset, size, segments = log.next_offset, log.size, log.segments
    with pytest.raises(KafkaError) as exc_info:
        log.append(data, leader_epoch=2)
    assert type(exc_info.value) is error, f"{name}: {exc_info.value!r}"
    assert exc_info.value.code == code
    assert str(exc_info.value)  # a message saying what was wrong
    assert snapshot(log.directory) == before
    assert (log.next_offset, log.size, log.segments) == (next_offset, size, segments)
    assert log.leader_epochs.entries == [(1, 0)]
    # the same input as a bytearray is refused without being modified
    buf = bytearray(data)
    with pytest.raises(error):
        log.append(buf)
    assert bytes(buf) == data
    # and the log goes on as if nothing happened
    info = log.append(GOOD)
    assert info.first_offset == next_offset
    assert [r.offset for r in all_records(log)] == list(range(next_offset + 3))


def test_a_batch_exactly_max_message_bytes_is_accepted(tmp_path: Path, clock: ManualClock) -> None:
    data = batch(2, value_size=100)
    log = Log.open(tmp_path / "t-0", small_config(max_message_bytes=len(data)), clock=clock)
    log.append(data)
    with pytest.raises(RecordTooLargeError):
        log.append(batch(2, value_size=101))
    assert log.next_offset == 2
    log.close()


def test_a_record_set_exactly_segment_bytes_is_accepted(tmp_path: Path, clock: ManualClock) -> None:
    data = GOOD * 4
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=len(data)), clock=clock)
    log.append(GOOD)
    log.append(data)  # rolls, then fills the new segment exactly
    assert [s.size for s in log.segments] == [len(GOOD), len(data)]
    with pytest.raises(RecordListTooLargeError):
        log.append(data + GOOD)
    log.close()


# ---- full disk and I/O errors ------------------------------------------------------------------------


class FullDisk:
    """os.pwrite/pwritev that write part of what they are given and then fail with ENOSPC, while ``full``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, short_write_first: bool) -> None:
        self.full = True
        self.calls = 0
        self.short_write_first = short_write_first
        real = os.pwrite

        def pwrite(fd: int, data: bytes, offset: int) -> int:
            if not self.full:
                return real(fd, data, offset)
            self.calls += 1
            view = memoryview(data)
            if self.short_write_first and self.calls % 2 == 1:
                return real(fd, view[: max(1, len(view) // 2)], offset)  # a short write, as near-full disks do
            real(fd, view[: max(1, len(view) // 3)], offset)  # part of the data reaches the file...
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # ...then the disk is full

        def pwritev(fd: int, buffers: list[bytes], offset: int) -> int:
            return pwrite(fd, b"".join(buffers), offset)  # the same failures for vector writes

        monkeypatch.setattr(segment_module.os, "pwrite", pwrite)
        monkeypatch.setattr(segment_module.os, "pwritev", pwritev)


@pytest.mark.parametrize("short_write_first", [False, True], ids=["partial-then-ENOSPC", "short-write-then-ENOSPC"])
def test_full_disk_raises_storage_error_and_keeps_what_was_stored(
    log: Log, monkeypatch: pytest.MonkeyPatch, short_write_first: bool
) -> None:
    before_records = all_records(log)
    before_files = snapshot(log.directory)
    active = log.active_segment
    size_on_disk = os.path.getsize(active.log_path)
    next_offset = log.next_offset
    disk = FullDisk(monkeypatch, short_write_first=short_write_first)
    for _ in range(3):
        with pytest.raises(StorageError) as exc_info:
            log.append(GOOD)
        assert exc_info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "No space left" in str(exc_info.value)
    assert disk.calls >= 3
    assert os.path.getsize(active.log_path) == size_on_disk == active.size
    assert log.next_offset == next_offset
    assert snapshot(log.directory) == before_files
    assert all_records(log) == before_records  # everything stored before is still readable
    disk.full = False  # space was freed
    info = log.append(GOOD)
    assert info.first_offset == next_offset
    assert [r.offset for r in all_records(log)] == list(range(next_offset + 3))


def test_full_disk_on_the_append_that_rolls(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=len(GOOD) * 3), clock=clock)
    for _ in range(3):
        log.append(GOOD)
    assert len(log.segments) == 1
    first_bytes = log.segments[0].log_path.read_bytes()
    disk = FullDisk(monkeypatch, short_write_first=False)
    with pytest.raises(StorageError):
        log.append(GOOD)  # rolls to a new segment, whose first write fails
    assert log.next_offset == 9
    assert log.segments[0].log_path.read_bytes() == first_bytes
    assert all(os.path.getsize(s.log_path) == s.size for s in log.segments)
    disk.full = False
    assert log.append(GOOD).first_offset == 9
    assert [r.offset for r in all_records(log)] == list(range(12))
    log.close()
    reopened = Log.open(tmp_path / "t-0", log.config, clock=clock)  # unclean: scans and agrees
    assert reopened.next_offset == 12
    reopened.close()


def test_io_error_on_flush_is_a_storage_error(log: Log, monkeypatch: pytest.MonkeyPatch) -> None:
    recovery_point = log.recovery_point

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(segment_module.os, "fsync", failing_fsync)
    with pytest.raises(StorageError, match="flush"):
        log.flush()
    assert log.recovery_point == recovery_point


# ---- a real full disk --------------------------------------------------------------------------------


def _mount_tiny_tmpfs(mountpoint: Path) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a real full-disk test needs root and mount(8) to create a 256 KiB tmpfs")
    mountpoint.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mountpoint)],
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {result.stderr.strip() or result.returncode}")


def test_a_real_full_disk(tmp_path: Path, clock: ManualClock) -> None:
    mountpoint = tmp_path / "tiny"
    _mount_tiny_tmpfs(mountpoint)
    log: Log | None = None
    try:
        filler = mountpoint / "filler"
        filler.write_bytes(b"\0" * (64 * KiB))
        # Segments larger than the disk (no roll), one-page indexes, an index entry per batch: the index
        # pages are touched by the second append, long before the disk fills, so no mmap write can
        # ever meet a full disk.
        cfg = small_config(segment_bytes=1 * MiB, segment_index_bytes=4 * KiB, index_interval_bytes=0,
                           max_message_bytes=64 * KiB)
        log = Log.open(mountpoint / "t-0", cfg, clock=clock)
        error: StorageError | None = None
        for i in range(200):
            data = batch(1, value_size=4000, tag=f"r{i}-", ts=T0 + i)
            state = (snapshot(log.directory), log.next_offset, os.path.getsize(log.active_segment.log_path))
            try:
                log.append(data)
            except StorageError as e:
                error = e
                break
        assert error is not None, "the 256 KiB disk never filled"
        assert error.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "No space left" in str(error)
        files, next_offset, size = state
        assert len(log.segments) == 1
        assert os.path.getsize(log.active_segment.log_path) == size == log.active_segment.size
        assert log.next_offset == next_offset > 10
        assert snapshot(log.directory) == files
        records = all_records(log)
        assert [r.offset for r in records] == list(range(next_offset))
        assert records[-1].value.startswith(f"r{next_offset - 1}-".encode())
        filler.unlink()  # space comes back
        info = log.append(batch(1, value_size=4000, tag="after-", ts=T0 + 500))
        assert info.first_offset == next_offset
        assert all_records(log)[-1].value.startswith(b"after-")
        log.close()
        log = None
        reopened = Log.open(mountpoint / "t-0", cfg, clock=clock, clean_shutdown=True)
        assert reopened.next_offset == next_offset + 1
        reopened.close()
    finally:
        if log is not None:
            log.close()
        subprocess.run(["umount", str(mountpoint)], check=False, capture_output=True)
