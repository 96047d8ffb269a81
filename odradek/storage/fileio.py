"""File primitives the log's files share: whole writes at an offset, and memory mappings that hold no file
descriptor.

Why a mapping of our own: CPython 3.11's ``mmap.mmap`` keeps a duplicate of the file's descriptor for the whole
life of the mapping (3.13 added ``trackfd=False``). An active segment's two indexes would then hold two descriptors
beside the log's own, three per partition, and a broker with 10,000 partitions would need 30,000 open files. Kafka
closes an index file as soon as it is mapped; ``FileMapping`` does the same, through libc's ``mmap``: a segment
holds one descriptor, its log's.

Invariants:
- ``pwrite_all`` returns only once every byte is written at the offset (a short write is continued), or raises
  ``OSError``.
- ``opened`` closes the descriptor it opened on every path out of its block.
- A ``FileMapping`` holds no descriptor, and no buffer over its memory ever leaves it: it is read and written only
  through its own calls (``unpack_from``, ``pack_into``, ``last_at_most``, ``read``), which copy values in or out,
  so nothing can touch the memory after ``close()`` unmaps it (reading it then raises ``ValueError``).
  ``close()`` is idempotent, and runs when the object is collected. A read-only mapping refuses ``pack_into`` with
  ``TypeError`` instead of faulting.
- A mapping never reaches past the file's end when made (``ValueError``). Like any mapping, a store into a page
  the file does not back (cut off later, or unallocated on a full disk) raises SIGBUS: the owner sizes the file
  and reserves its blocks first (see ``index.py``).
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_msync = _libc.msync
_msync.restype = ctypes.c_int
_msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

_PROT_READ, _PROT_WRITE = 0x1, 0x2
_MAP_SHARED = 0x01
_MS_SYNC = 4
_MAP_FAILED = ctypes.c_void_p(-1).value


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of ``fd``."""
    written = os.pwrite(fd, data, offset)
    if written < len(data):
        view = memoryview(data)
        while written < len(view):
            written += os.pwrite(fd, view[written:], offset + written)


@contextmanager
def opened(path: Path, flags: int, mode: int = 0o644) -> Iterator[int]:
    """A descriptor of ``path`` opened with ``flags`` (and ``mode`` if created) for the block, closed after it."""
    fd = os.open(path, flags, mode)
    try:
        yield fd
    finally:
        os.close(fd)


def _errno_error(what: str, path: Path) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what} failed: {os.strerror(err)}", str(path))


class FileMapping:
    """The first ``size`` bytes of a file mapped shared, read-only or read-write, with no descriptor kept."""

    __slots__ = ("_addr", "_view", "path", "size")

    def __init__(self, path: Path, size: int, *, writable: bool) -> None:
        self._addr: int | None = None
        if size <= 0:
            raise ValueError(f"cannot map {size} bytes of {path}")
        self.path, self.size = path, size
        prot = _PROT_READ | (_PROT_WRITE if writable else 0)
        with opened(path, os.O_RDWR if writable else os.O_RDONLY) as fd:
            if (length := os.fstat(fd).st_size) < size:  # pages past the end would fault (SIGBUS) when read
                raise ValueError(f"cannot map {size} bytes of {path}: the file has {length}")
            addr = _mmap(None, size, prot, _MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            raise _errno_error("mmap", path)
        self._addr = addr
        view = memoryview((ctypes.c_ubyte * size).from_address(addr)).cast("B")
        self._view: memoryview = view if writable else view.toreadonly()

    def unpack_from(self, st: struct.Struct, offset: int) -> tuple[Any, ...]:
        return st.unpack_from(self._view, offset)

    def pack_into(self, st: struct.Struct, offset: int, *values: Any) -> None:
        st.pack_into(self._view, offset, *values)

    def last_at_most(self, st: struct.Struct, field: int, key: int, count: int) -> int:
        """Of the first ``count`` records ``st`` packed one after another from the start, sorted by ``field``: the
        index of the last whose ``field`` is <= ``key``, or -1 (a binary search, in one call)."""
        unpack, size, view = st.unpack_from, st.size, self._view
        if not count or unpack(view, 0)[field] > key:
            return -1
        lo, hi = 0, count - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(view, mid * size)[field] <= key:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def read(self, offset: int, n: int) -> bytes:
        """A copy of ``n`` bytes from ``offset``."""
        return self._view[offset : offset + n].tobytes()

    def flush(self) -> None:
        """Write the mapping's dirty pages to the file and wait for them (``msync(MS_SYNC)``)."""
        if self._addr is not None and _msync(self._addr, self.size, _MS_SYNC) != 0:
            raise _errno_error("msync", self.path)

    def close(self) -> None:
        """Unmap (no flush: the pages are the file's page cache, and reach the disk as any written page does)."""
        if self._addr is not None:
            self._view.release()
            addr, self._addr = self._addr, None
            _munmap(addr, self.size)

    def __del__(self) -> None:
        self.close()
