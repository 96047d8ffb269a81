"""Aborted-transaction index of one segment: ``<base offset, 20 digits>.txnindex`` (Kafka's format).

Entries of 34 bytes, big-endian, one per transaction whose ABORT marker lies in the segment::

    version int16 (0) | producer_id int64 | first_offset int64 | last_offset int64 | last_stable_offset int64

``first_offset`` is the offset of the transaction's first batch (possibly in an earlier segment),
``last_offset`` the offset of its ABORT marker, ``last_stable_offset`` the partition's last stable
offset once the abort completed (the first offset of the earliest transaction then still open, or
``last_offset + 1``). A read_committed fetch returns the ``(producer_id, first_offset)`` of every
aborted transaction overlapping the returned range, and the consumer drops those producers' records
from ``first_offset`` to the marker.

Invariants:
- Entries are in marker order: ``last_offset`` strictly increases, and every ``last_offset`` lies in
  the segment, ``[base offset, next segment's base offset)``; ``first_offset <= last_offset``.
- ``last_stable_offset`` never decreases from entry to entry, and every later entry (in this segment
  or a later one) has ``first_offset >= last_stable_offset`` of an earlier one: a transaction still
  open when an abort completed started at or after that LSO, and a newer one at the log end. So a
  search may stop at the first entry whose ``last_stable_offset`` reaches its upper bound.
- The file is a cache of the log, like the offset and time indexes: ``check`` finds a file that
  cannot be trusted and the owning log rebuilds it by replaying the control batches of the segment
  (with the producer state as of the segment's base offset).
- The file exists only once the segment has an entry; no file means no aborted transaction.
- Not thread-safe: the owning log serializes writers. A reader sees whole entries up to ``count``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from odradek.protocol.errors import StorageError

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0
_CHUNK_ENTRIES = 512  # entries read per pread while collecting (17 KiB)
_BISECT_FROM = 64  # fewer entries than this are scanned from the start instead of bisected


class AbortedTxn(NamedTuple):
    """One entry of the index."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """The aborted transactions whose ABORT marker lies in the segment starting at ``base_offset``."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fd: int | None = None
        self._last_offset: int | None = None  # marker offset of the last entry, once read
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        except OSError as e:
            raise StorageError(f"cannot open transaction index {path}: {e}") from e
        self.count = size // ENTRY_SIZE
        self.torn_bytes = size % ENTRY_SIZE  # a partial entry at the end: damage (see check)
        if size:
            self._open()

    # -- file management -------------------------------------------------------------------------

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise StorageError(f"cannot open transaction index {self.path}: {e}") from e
        return self._fd

    def flush(self) -> None:
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as e:
                raise StorageError(f"flush of {self.path} failed: {e}") from e

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename(self, path: Path) -> None:
        """Move the file (segment deletion); a segment without aborts has no file to move."""
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    # -- writing ---------------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Add the entry of an abort whose marker is at ``txn.last_offset`` (after every earlier one)."""
        if self._last_offset is None and self.count:
            last = self._read(self.count - 1, 1)
            self._last_offset = last[0].last_offset if last else None
        if self._last_offset is not None and txn.last_offset <= self._last_offset:
            raise ValueError(f"{self.path}: aborted transaction ending at {txn.last_offset} does not follow "
                             f"the last entry, ending at {self._last_offset}")
        data = ENTRY.pack(VERSION, *txn)
        fd = self._open()
        try:
            written = os.pwrite(fd, data, self.count * ENTRY_SIZE)
            if written != ENTRY_SIZE:
                raise OSError(f"short write ({written} of {ENTRY_SIZE} bytes)")
        except OSError as e:
            try:
                os.ftruncate(fd, self.count * ENTRY_SIZE)
            except OSError:
                pass
            raise StorageError(f"write to {self.path} failed: {e}") from e
        self.count += 1
        self._last_offset = txn.last_offset

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose marker is at or after ``offset`` (the log was cut there)."""
        keep = self.count
        while keep and self._read(keep - 1, 1)[0].last_offset >= offset:
            keep -= 1
        if keep != self.count or self.torn_bytes:
            self._cut(keep)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        if self.count or self.torn_bytes or self._fd is not None:
            self._cut(0)

    def _cut(self, entries: int) -> None:
        fd = self._open()
        try:
            os.ftruncate(fd, entries * ENTRY_SIZE)
        except OSError as e:
            raise StorageError(f"truncate of {self.path} failed: {e}") from e
        self.count = entries
        self.torn_bytes = 0
        self._last_offset = None

    # -- reading ---------------------------------------------------------------------------------

    def _read(self, first: int, n: int) -> list[AbortedTxn]:
        """Entries ``first .. first + n - 1`` (fewer if the file is shorter)."""
        if self._fd is None or n <= 0:
            return []
        data = os.pread(self._fd, n * ENTRY_SIZE, first * ENTRY_SIZE)
        usable = len(data) - len(data) % ENTRY_SIZE
        return [AbortedTxn(pid, f, last, lso) for _v, pid, f, last, lso in ENTRY.iter_unpack(data[:usable])]

    def entries(self) -> list[AbortedTxn]:
        """Every entry, in marker order."""
        return self._read(0, self.count)

    def _first_ending_at_or_after(self, offset: int, n: int) -> int:
        """Index of the first of the first ``n`` entries whose marker is at or after ``offset``."""
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            found = self._read(mid, 1)
            if not found:
                return mid
            if found[0].last_offset < offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def collect(self, start_offset: int, upper_bound: int, out: list[tuple[int, int]]) -> bool:
        """Add ``(producer_id, first_offset)`` of each entry overlapping ``[start_offset, upper_bound)`` to
        ``out``; True when the search is complete (an entry's LSO reached ``upper_bound``: no later
        entry, here or in a later segment, can overlap the range)."""
        n = self.count
        i = self._first_ending_at_or_after(start_offset, n) if n >= _BISECT_FROM else 0
        while i < n:
            chunk = self._read(i, min(n - i, _CHUNK_ENTRIES))
            if not chunk:
                return False
            for txn in chunk:
                if txn.last_offset >= start_offset and txn.first_offset < upper_bound:
                    out.append((txn.producer_id, txn.first_offset))
                if txn.last_stable_offset >= upper_bound:
                    return True
            i += len(chunk)
        return False

    def __iter__(self) -> Iterator[AbortedTxn]:
        return iter(self.entries())

    def check(self, next_offset: int) -> str | None:
        """Why the file cannot be trusted for a segment ending before ``next_offset``, or None if it can."""
        if self.torn_bytes:
            return f"its size is not a multiple of {ENTRY_SIZE} bytes ({self.torn_bytes} bytes of a torn entry)"
        if not self.count:
            return None
        data = os.pread(self._open(), self.count * ENTRY_SIZE, 0)
        if len(data) != self.count * ENTRY_SIZE:
            return "it is shorter than when it was opened"
        previous = self.base_offset - 1
        for n, (version, pid, first, last, lso) in enumerate(ENTRY.iter_unpack(data)):
            if version != VERSION:
                return f"entry {n} has version {version}, expected {VERSION}"
            if pid < 0 or first > last or last <= previous or last >= next_offset or lso < 0:
                return (f"entry {n} (producer {pid}, offsets {first}..{last}, last stable offset {lso}) does not "
                        f"fit the segment's offsets [{self.base_offset}, {next_offset}) after marker {previous}")
            previous = last
        return None
