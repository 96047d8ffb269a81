"""File primitives: mappings that keep no descriptor, whole writes at an offset."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from odradek.storage.fileio import FileMapping, opened, pwrite_all
from odradek.storage.index import OffsetIndex, TimeIndex


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_mapping_keeps_no_descriptor_and_writes_reach_the_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(8192))
    before = open_fds()
    m = FileMapping(path, 8192, writable=True)
    assert open_fds() == before  # mapped, and the file closed again
    m.pack_into(struct.Struct(">Q"), 4096, 0x0102030405060708)
    m.flush()
    assert path.read_bytes()[4096:4104] == bytes(range(1, 9))
    m.close()
    m.close()  # idempotent
    assert open_fds() == before


def test_read_only_mapping_sees_writes_and_refuses_stores(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abcdefgh")
    m = FileMapping(path, 8, writable=False)
    assert m.read(0, 8) == b"abcdefgh"
    with opened(path, os.O_WRONLY) as fd:
        pwrite_all(fd, b"XY", 2)
    assert m.read(0, 4) == b"abXY"  # the same page cache
    assert m.unpack_from(struct.Struct(">H"), 2) == (0x5859,)
    with pytest.raises(TypeError):
        m.pack_into(struct.Struct(">H"), 0, 1)
    m.close()


def test_closed_mapping_refuses_reads(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abcdefgh")
    m = FileMapping(path, 8, writable=False)
    m.close()
    with pytest.raises(ValueError):
        m.read(0, 1)
    with pytest.raises(ValueError):
        m.unpack_from(struct.Struct(">H"), 0)


def test_mapping_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        FileMapping(tmp_path / "missing", 8, writable=False)
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(ValueError, match="cannot map 0 bytes"):
        FileMapping(tmp_path / "f", 0, writable=False)
    with pytest.raises(ValueError, match="the file has 1"):
        FileMapping(tmp_path / "f", 4096, writable=False)


def test_pwrite_all_writes_at_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = os.urandom(3 << 20)
    with opened(path, os.O_RDWR | os.O_CREAT) as fd:
        pwrite_all(fd, b"head", 0)
        pwrite_all(fd, memoryview(data), 4)
    assert path.read_bytes() == b"head" + data
    assert path.stat().st_mode & 0o777 == 0o644 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_indexes_hold_no_descriptor(tmp_path: Path) -> None:
    """A partition's indexes, active (writable) or trimmed, keep no file open: a broker holds one descriptor a
    partition, its active segment's log."""
    before = open_fds()
    idx = OffsetIndex(tmp_path / "0.index", 0, 4096, writable=True)
    tix = TimeIndex(tmp_path / "0.timeindex", 0, 4096, writable=True)
    idx.append(5, 100)
    idx.append_many([(7, 200), (9, 300)])
    tix.maybe_append(1000, 5)
    assert open_fds() == before
    assert idx.lookup(8) == (7, 200)
    idx.trim()
    tix.trim()
    assert idx.lookup(9) == (9, 300) and tix.lookup(1000) == (1000, 5)  # read through read-only mappings
    assert open_fds() == before
    idx.close()
    tix.close()


def test_last_at_most_is_a_binary_search_over_packed_records(tmp_path: Path) -> None:
    st = struct.Struct(">II")
    path = tmp_path / "f"
    path.write_bytes(b"".join(st.pack(k, 1000 - k) for k in (3, 5, 5, 9, 20)))
    m = FileMapping(path, 5 * st.size, writable=False)
    assert [m.last_at_most(st, 0, key, 5) for key in (0, 3, 4, 5, 8, 9, 19, 20, 99)] == [-1, 0, 0, 2, 2, 3, 3, 4, 4]
    assert m.last_at_most(st, 0, 99, 2) == 1  # only the first `count` records
    assert m.last_at_most(st, 0, 99, 0) == -1
    m.close()
