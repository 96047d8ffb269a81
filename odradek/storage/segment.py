"""One segment of a partition log: ``<base>.log`` plus its ``.index``, ``.timeindex`` and ``.txnindex``.

The log file is a plain concatenation of v2 record batches with their offsets assigned; the name
is the 20-digit base offset of the first batch. The segment never decodes records: it moves whole
batches, reading only their 61-byte headers when it needs offsets or timestamps.

Invariants:
- Batches in the file are contiguous and their offsets strictly increase; ``size`` is the length of
  the valid prefix, and every byte before it belongs to a whole batch.
- An index entry is added for the first batch after each ``index.interval.bytes`` of appended data;
  the entry maps the batch's last offset to the batch's start position.
- ``read`` returns a region that starts at a batch boundary and ends at one, and holds at least one
  whole batch when ``min_one`` is set; its ``end_offset`` is the offset after its last batch.
- The transaction index (``txn_index.py``) holds the aborted transactions whose ABORT marker is in
  this segment; the owning log appends to it and rebuilds it, the segment truncates, renames and
  deletes it with the log file.
- A failed write truncates the file back to its previous size, so what was stored stays readable.
- Not thread-safe: the owning ``Log`` serializes appends, truncation and rolling. Reads of a rolled
  segment are safe alongside appends to the active one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from odradek.protocol import batch as rb
from odradek.protocol.errors import CorruptRecordError, InvalidRecordError, StorageError
from odradek.storage.config import LogConfig
from odradek.storage.fileio import pwrite_all
from odradek.storage.index import IndexCorruptError, OffsetIndex, TimeIndex
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
_SCAN_CHUNK = 4096
_RECOVERY_CHUNK = 4 * 1024 * 1024


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class FileRegion:
    """A byte range of a segment file, ready for ``os.sendfile(sock, file.fileno(), position, length)``."""

    file: BinaryIO
    position: int
    length: int
    first_offset: int  # base offset of the first batch in the region
    end_offset: int  # the offset after the last batch in the region

    def read_bytes(self) -> bytes:
        """Copy the region into memory (tools and tests; the server uses sendfile)."""
        return os.pread(self.file.fileno(), self.length, self.position)


class LogSegment:
    """A segment; open existing files with ``open``, create new ones with ``create``."""

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, *, now_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        stem = segment_name(base_offset)
        self.log_path = directory / (stem + LOG_SUFFIX)
        try:
            self.file: BinaryIO = open(self.log_path, "r+b" if self.log_path.exists() else "w+b", buffering=0)
        except OSError as e:
            raise StorageError(f"cannot open segment {self.log_path}: {e}") from e
        self.fd = self.file.fileno()
        self.size = os.fstat(self.fd).st_size
        # An index is a cache: a missing (or unreadable, see _open_index) one is rebuilt by load_clean.
        self.indexes_missing = not all((directory / (stem + s)).exists() for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX))
        self.index = self._open_index(OffsetIndex, directory / (stem + INDEX_SUFFIX))
        self.time_index = self._open_index(TimeIndex, directory / (stem + TIME_INDEX_SUFFIX))
        self.txn_index = TransactionIndex(directory / (stem + TXN_INDEX_SUFFIX), base_offset)
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index_entry = 0
        self.created_ms = now_ms
        self.rolling_timestamp: int | None = None  # max timestamp of the first batch
        self.deleted = False

    def _open_index(self, cls: type[OffsetIndex] | type[TimeIndex], path: Path) -> OffsetIndex | TimeIndex:
        try:
            return cls(path, self.base_offset, self.config.segment_index_bytes, writable=False)
        except IndexCorruptError:
            path.unlink(missing_ok=True)
            self.indexes_missing = True
            return cls(path, self.base_offset, self.config.segment_index_bytes, writable=False)

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig, *, now_ms: int) -> LogSegment:
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            (directory / (segment_name(base_offset) + suffix)).unlink(missing_ok=True)
        seg = cls(directory, base_offset, config, now_ms=now_ms)
        seg.make_active()
        return seg

    def load_clean(self) -> None:
        """Trust the files (clean shutdown or before the recovery point); rebuild broken indexes only."""
        # A rolled segment with data always has a time-index entry (written at roll): an empty file is
        # one lost in a crash, and would leave the segment without a largest timestamp.
        if self.size and (self.indexes_missing or not self.time_index.entries):
            self.rebuild_indexes()
            return
        try:
            self.index.sanity_check(self.size)
            self.time_index.sanity_check()
        except IndexCorruptError:
            self.rebuild_indexes()
            return
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        if self.size:
            first = self._header_at(0)
            if first is not None:
                self.rolling_timestamp = first.max_timestamp

    def make_active(self) -> None:
        """Open the indexes for appends (preallocated) and find where appending resumes."""
        self.index.make_writable()
        self.time_index.make_writable()
        _, last_pos = self.index.last_entry
        # Batches after the last index entry may carry a larger timestamp than the time index knows.
        for _, header in self.iter_headers(last_pos):
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
        self.bytes_since_last_index_entry = self.size - last_pos if self.size else 0

    # -- reading headers -------------------------------------------------------------------------

    def _header_at(self, pos: int) -> rb.BatchHeader | None:
        data = os.pread(self.fd, rb.HEADER_SIZE, pos)
        if len(data) < rb.HEADER_SIZE:
            return None
        return rb.parse_header(data)

    def iter_headers(self, start: int, end: int | None = None) -> Iterator[tuple[int, rb.BatchHeader]]:
        """(position, header) of each batch from ``start`` (a batch boundary) to ``end``."""
        limit = self.size if end is None else min(end, self.size)
        pos = start
        chunk = b""
        chunk_at = 0
        while pos + rb.HEADER_SIZE <= limit:
            off = pos - chunk_at
            if off < 0 or off + rb.HEADER_SIZE > len(chunk):
                chunk = os.pread(self.fd, min(_SCAN_CHUNK, limit - pos), pos)
                chunk_at, off = pos, 0
                if len(chunk) < rb.HEADER_SIZE:
                    return
            header = rb.parse_header(chunk, off)
            yield pos, header
            pos += header.size

    def translate_offset(self, offset: int, start: int = 0) -> tuple[int, rb.BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``.

        First try the batch the next index entry names (one 61-byte read when ``offset`` lies in an
        indexed batch), else scan headers from the entry at or below ``offset``."""
        ceiling = self.index.lookup_ceiling(offset)
        if ceiling is not None and ceiling[1] >= start:
            header = self._header_at(ceiling[1])
            if header is not None and header.base_offset <= offset <= header.last_offset:
                return ceiling[1], header
        _, pos = self.index.lookup(offset)
        for position, header in self.iter_headers(max(pos, start)):
            if header.last_offset >= offset:
                return position, header
        return None

    @property
    def next_offset(self) -> int:
        """The offset after the last batch (base offset if empty); scans from the last index entry."""
        _, pos = self.index.last_entry
        last = None
        for _, header in self.iter_headers(pos):
            last = header
        return last.next_offset if last is not None else self.base_offset

    @property
    def largest_timestamp(self) -> int:
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self.fd).st_mtime * 1000)

    # -- reading ---------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, max_position: int | None = None, min_one: bool = True
    ) -> FileRegion | None:
        """Whole batches from the one containing ``offset``, at most ``max_bytes`` unless ``min_one``
        needs a larger first batch; never past ``max_position``. None if no batch qualifies."""
        found = self.translate_offset(offset)
        if found is None:
            return None
        start, first = found
        ceiling = self.size if max_position is None else min(max_position, self.size)
        if start >= ceiling:
            return None
        limit = min(ceiling, start + max_bytes)
        if start + first.size > limit:
            if not min_one or start + first.size > ceiling:
                return None
            return FileRegion(self.file, start, first.size, first.base_offset, first.next_offset)
        _, scan_from = self.index.lookup_position(limit)
        scan_from = max(scan_from, start)
        end = scan_from
        end_offset = -1  # the offset after the batch ending at ``end``: the next batch's base offset
        for pos, header in self.iter_headers(scan_from, limit):
            if end_offset < 0:
                end_offset = header.base_offset
            if pos + header.size > limit:
                break
            end, end_offset = pos + header.size, header.next_offset
        if end_offset < 0:  # the batch at scan_from (which the index names) starts too close to the limit
            following = self._header_at(scan_from)
            end_offset = following.base_offset if following is not None else self.next_offset
        return FileRegion(self.file, start, end - start, first.base_offset, end_offset)

    def position_of(self, offset: int) -> int:
        """File position where the batch holding ``offset`` starts, or ``size`` if none."""
        found = self.translate_offset(offset)
        return found[0] if found is not None else self.size

    def find_timestamp(self, timestamp: int) -> tuple[int, rb.BatchHeader] | None:
        """The first batch whose max timestamp is >= ``timestamp`` (position, header)."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.index.lookup(ts_offset)
        for position, header in self.iter_headers(pos):
            if header.max_timestamp >= timestamp:
                return position, header
        return None

    # -- writing ---------------------------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview],
        headers: Sequence[rb.BatchHeader],
    ) -> None:
        """Write whole batches (offsets already assigned) and index them. ``data`` is one buffer, or
        several written in order with one pwritev (headers patched apart from their bodies).

        On an I/O error (of the log file or an index) the file and the indexes are cut back to their previous
        size and ``StorageError`` is raised.
        """
        start = self.size
        try:
            if isinstance(data, bytes | bytearray | memoryview):
                total = len(data)
                pwrite_all(self.fd, data, start)
            else:
                total = sum(len(part) for part in data)
                written = os.pwritev(self.fd, data, start)
                if written < total:  # a short vector write is rare: finish from one buffer
                    pwrite_all(self.fd, memoryview(b"".join(data))[written:], start + written)
        except OSError as e:
            self._cut_back(start)
            raise StorageError(f"write to {self.log_path} failed: {e}") from e
        before = (self.rolling_timestamp, self.max_timestamp, self.offset_of_max_timestamp,
                  self.bytes_since_last_index_entry, self.index.entries, self.time_index.entries)
        if not start and headers:
            self.rolling_timestamp = headers[0].max_timestamp
        try:
            self._index_headers(headers, start)
        except StorageError:  # an index could not grow (a full disk): the batches are taken back too
            self._cut_back(start)
            (self.rolling_timestamp, self.max_timestamp, self.offset_of_max_timestamp,
             self.bytes_since_last_index_entry, index_entries, time_entries) = before
            self.index.truncate_entries(index_entries)
            self.time_index.truncate_entries(time_entries)
            raise
        self.size = start + total

    def _cut_back(self, size: int) -> None:
        try:
            os.ftruncate(self.fd, size)
        except OSError:
            pass

    def needs_roll(self, incoming_bytes: int, now_ms: int, max_timestamp: int | None = None) -> bool:
        """As Kafka's shouldRoll: segment.ms (or a smaller max.compaction.lag.ms of a compacted topic) is
        measured from the first batch's timestamp to the incoming ``max_timestamp`` (record time, so replayed
        old data does not roll every append), or from the segment's creation to ``now_ms`` when the first
        batch has no timestamp."""
        if not self.size:
            return False
        if self.size + incoming_bytes > self.config.segment_bytes:
            return True
        if self.index.is_full or self.time_index.is_full:
            return True
        first = self.rolling_timestamp
        if first is not None and first >= 0:
            return (now_ms if max_timestamp is None else max_timestamp) - first > self.config.max_segment_ms
        return now_ms - self.created_ms > self.config.max_segment_ms

    def on_roll(self) -> None:
        """The segment stops being active: record its largest timestamp and trim the indexes."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.index.trim()
        self.time_index.trim()

    def flush(self) -> None:
        try:
            os.fsync(self.fd)
            self.index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except OSError as e:
            raise StorageError(f"flush of {self.log_path} failed: {e}") from e

    def truncate_to(self, offset: int) -> int:
        """Remove every batch from the one holding ``offset`` on; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        pos, header = found
        removed = self.size - pos
        self.index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        try:
            os.ftruncate(self.fd, pos)
        except OSError as e:
            raise StorageError(f"truncate of {self.log_path} failed: {e}") from e
        self.size = pos
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        _, last_pos = self.index.last_entry
        for _, h in self.iter_headers(last_pos):
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset
        self.bytes_since_last_index_entry = pos - last_pos if pos else 0
        if not pos:
            self.rolling_timestamp = None
        return removed

    # -- recovery --------------------------------------------------------------------------------

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from the log, which is trusted (no CRC checks)."""
        self._reindex([h for _, h in self.iter_headers(0)])

    def _reindex(self, headers: Sequence[rb.BatchHeader]) -> None:
        """Replace both indexes and the timestamp bookkeeping with those of ``headers`` (every batch
        of the segment, in order); a rolled segment stays rolled (indexes trimmed)."""
        writable = self.index.writable
        self.index.reset()
        self.time_index.reset()
        self.index.make_writable()
        self.time_index.make_writable()
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.bytes_since_last_index_entry = 0
        self._index_headers(headers)
        self.rolling_timestamp = headers[0].max_timestamp if headers else None
        if not writable:
            self.on_roll()

    def _index_headers(self, headers: Sequence[rb.BatchHeader], pos: int = 0) -> None:
        """Track the largest timestamp and add index entries for batches written from ``pos``."""
        interval = self.config.index_interval_bytes
        since = self.bytes_since_last_index_entry
        max_ts, max_ts_offset = self.max_timestamp, self.offset_of_max_timestamp
        offset_room = self.index.max_entries - self.index.entries
        time_room = self.time_index.max_entries - 1 - self.time_index.entries  # its is_full, kept per entry
        last_ts = self.time_index.last_entry[0]
        offsets: list[tuple[int, int]] = []
        times: list[tuple[int, int]] = []
        for header in headers:
            size = header.batch_length + rb.LOG_OVERHEAD
            last_offset = header.base_offset + header.last_offset_delta
            if header.max_timestamp > max_ts:
                max_ts, max_ts_offset = header.max_timestamp, last_offset
            if since > interval and len(offsets) < offset_room and len(times) < time_room:  # sparse: may skip
                offsets.append((last_offset, pos))
                if max_ts > last_ts:
                    times.append((max_ts, max_ts_offset))
                    last_ts = max_ts
                since = 0
            since += size
            pos += size
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        self.index.append_many(offsets)
        self.time_index.append_many(times)
        self.bytes_since_last_index_entry = since

    def recover(self, on_batch: Callable[[rb.BatchHeader], None] | None = None) -> int:
        """Check every batch (structure, CRC, increasing offsets), rebuild the offset and time indexes,
        and cut the file at the first invalid batch. Returns the number of bytes cut off. The
        transaction index is emptied: the log refills it by replaying the segment's markers."""
        self.txn_index.reset()
        file_size = os.fstat(self.fd).st_size
        valid: list[rb.BatchHeader] = []
        pos = 0
        expected = self.base_offset
        chunk = b""
        chunk_at = 0
        while pos + rb.LOG_OVERHEAD <= file_size:
            off = pos - chunk_at
            if off + rb.LOG_OVERHEAD > len(chunk):
                chunk = os.pread(self.fd, min(_RECOVERY_CHUNK, file_size - pos), pos)
                chunk_at, off = pos, 0
            _, length = rb.read_prefix(chunk, off)
            size = length + rb.LOG_OVERHEAD
            if length < rb.MIN_BATCH_LENGTH or pos + size > file_size:
                break
            if off + size > len(chunk):
                chunk = os.pread(self.fd, max(size, min(_RECOVERY_CHUNK, file_size - pos)), pos)
                chunk_at, off = pos, 0
            try:
                header = rb.check_batch(chunk, off, available=size)
            except (CorruptRecordError, InvalidRecordError):  # a damaged magic byte reads as v0/v1
                break
            # baseOffset is outside the CRC: a damaged one may go backwards or out of the segment's
            # relative-offset range (which appends never exceed: the log rolls first).
            if header.base_offset < expected or header.last_offset - self.base_offset > 0x7FFFFFFF:
                break
            if on_batch is not None:
                on_batch(header)
            valid.append(header)
            expected = header.next_offset
            pos += size
        cut = file_size - pos
        if cut:
            try:
                os.ftruncate(self.fd, pos)
            except OSError as e:
                raise StorageError(f"cannot truncate damaged tail of {self.log_path}: {e}") from e
        self.size = pos
        self._reindex(valid)
        return cut

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        if self.index.writable:
            self.on_roll()
        self.index.close()
        self.time_index.close()
        self.txn_index.close()
        self.file.close()

    def mark_deleted(self) -> None:
        """Rename the files to ``*.deleted``; open handles (in-flight reads) stay valid."""
        if self.deleted:
            return
        self.index.trim()
        self.time_index.trim()
        try:
            new_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
            os.replace(self.log_path, new_log)
            self.log_path = new_log
            self.index.rename(self.index.path.with_name(self.index.path.name + DELETED_SUFFIX))
            self.time_index.rename(self.time_index.path.with_name(self.time_index.path.name + DELETED_SUFFIX))
            self.txn_index.rename(self.txn_index.path.with_name(self.txn_index.path.name + DELETED_SUFFIX))
        except OSError as e:
            raise StorageError(f"cannot rename segment {self.log_path} for deletion: {e}") from e
        self.deleted = True

    def delete_files(self) -> None:
        """Close and unlink (after ``file.delete.delay.ms``, or at once when the log is deleted)."""
        self.index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.file.close()
        self.log_path.unlink(missing_ok=True)
