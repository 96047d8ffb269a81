"""A pass's two loops (map the dirty part, rewrite the groups) run by the compiled kernel, in a worker process.

``clean.clean`` calls ``build_offset_map`` and ``write_group`` from here unless told to run the reference code
alone. Per segment, the file's first ``size`` bytes are mmapped and handed to ``kernel`` as a numpy array, a window
of ``WINDOW_BYTES`` per call (thousands of batches, not one call per batch). Python's work per *batch* is one
``crc32c`` call for each batch read (the library's hardware CRC-32C; the kernel lists the spans), one for each
batch rebuilt, and the header of each batch written (``LogSegment.append`` indexes the cleaned segment); Python
does nothing per *record* of an uncompressed data batch. Each batch the kernel leaves (see ``kernel``'s
statuses) goes to the reference code of ``clean.py`` — ``map_batch``, ``_Rewriter.batch`` — over the same map,
so every rule has one implementation and the compiled path writes the same bytes as the reference.

Invariants:
- Every batch read is CRC-checked before the pass uses what the kernel did with it (a mismatch raises
  ``CorruptRecordError`` through ``batch.check_batch``; the pass is then thrown away).
- A segment file shorter than its summary's size, or empty, is read by the reference reader (which raises where
  the reference raises).
- Memory: the offset map (``key_table``), at most ``WINDOW_BYTES`` plus one batch of mapped file pages (pages
  behind the kernel are dropped from the process with ``MADV_DONTNEED``; the page cache keeps them), one output
  buffer of ``io_buffer_bytes`` (larger only for a larger batch), and small span and scratch arrays.
- numba compiles the kernel on first use and caches it beside the modules (``cache=True``); ``warm_up`` loads it
  at a worker's start so that the first pass pays nothing.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from types import TracebackType

import numpy as np
from crc32c import crc32c

from odradek.protocol import batch as rb
from odradek.storage.cleaner import kernel as k
from odradek.storage.cleaner.clean import (
    CleanedSegment,
    CleanStats,
    CleanTask,
    GroupWriter,
    Throttler,
    _Aborted,
    _batches,
    _Rewriter,
    map_batch,
)
from odradek.storage.cleaner.key_table import CompiledOffsetMap, table_get, table_put
from odradek.storage.cleaner.planning import SegmentSummary
from odradek.storage.segment import LOG_SUFFIX, segment_name

WINDOW_BYTES = 4 * 1024 * 1024  # of a segment per kernel call (mapped pages are dropped behind it)
SPAN_ROWS = 4096  # batches a kernel call reads before the caller checks their CRCs
_PAGE = mmap.PAGESIZE
_CRC = struct.Struct(">I")

_MAPS: dict[tuple[int, float], CompiledOffsetMap] = {}


def offset_map(memory_bytes: int, load_factor: float) -> CompiledOffsetMap:
    """The worker's map, allocated once per size and cleared between passes."""
    key = (memory_bytes, load_factor)
    m = _MAPS.get(key)
    if m is None:
        _MAPS.clear()
        m = _MAPS[key] = CompiledOffsetMap(memory_bytes, load_factor)
    else:
        m.clear()
    return m


class _Work:
    """The kernel's arrays for one pass: record scratch, span list, counters (grown on demand)."""

    def __init__(self) -> None:
        self.scratch = np.zeros((1024, k.SCRATCH_COLUMNS), np.int64)
        self.spans = np.zeros((SPAN_ROWS, 3), np.int64)
        self.counters = np.zeros(k.N_COUNTERS, np.int64)

    def grow_scratch(self, rows: int) -> None:
        self.scratch = np.zeros((max(rows, 2 * self.scratch.shape[0]), k.SCRATCH_COLUMNS), np.int64)

    def check_crcs(self, buf: np.ndarray, n: int) -> None:
        """CRC-32C of the ``n`` batches the kernel listed; the reference's error for a damaged one."""
        for pos, size, stored in self.spans[:n].tolist():
            if crc32c(buf[pos + rb.ATTRIBUTES_AT : pos + size]) != stored:
                rb.check_batch(buf, pos, available=size)


class _Segment:
    """The first ``size`` bytes of a segment file, mmapped read-only as a numpy array (``buf``; None when the
    file is empty or shorter: the caller then reads it with the reference reader)."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        self.file = open(path, "rb", buffering=0)
        self.map: mmap.mmap | None = None
        self.buf: np.ndarray | None = None
        self.released = 0
        if size > 0 and os.fstat(self.file.fileno()).st_size >= size:
            self.map = mmap.mmap(self.file.fileno(), size, prot=mmap.PROT_READ)
            self.buf = np.frombuffer(self.map, np.uint8)

    def __enter__(self) -> _Segment:
        return self

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.buf = None
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:  # an exception's frames still view it: unmapped when they go
                pass
        self.file.close()

    def release(self, pos: int) -> None:
        """Drop the mapped pages before ``pos`` from this process."""
        assert self.map is not None
        upto = pos - pos % _PAGE
        if upto > self.released:
            self.map.madvise(mmap.MADV_DONTNEED, self.released, upto - self.released)
            self.released = upto

    def batch_at(self, pos: int, status: int, task: CleanTask, throttle: Throttler) -> tuple[bytes, rb.BatchHeader]:
        """The batch at ``pos`` the kernel left, checked as the reference reader checks it (which raises for a
        damaged one)."""
        assert self.buf is not None
        if status == k.STRUCTURE:
            return next(_batches(self.path, self.size, task.io_buffer_bytes, throttle, start=pos))
        whole = rb.read_prefix(self.buf, pos)[1] + rb.LOG_OVERHEAD
        raw = self.buf[pos : pos + whole].tobytes()
        return raw, rb.check_batch(raw, 0, available=whole)


def _log_path(task: CleanTask, seg: SegmentSummary) -> Path:
    return Path(task.directory) / (segment_name(seg.base_offset) + LOG_SUFFIX)


def build_offset_map(task: CleanTask, offset_map: CompiledOffsetMap, aborted: _Aborted, stats: CleanStats,
                     throttle: Throttler) -> int:
    """``clean.build_offset_map`` with the kernel: the offset the map covers up to (exclusive)."""
    work = _Work()
    try:
        for seg in task.segments:
            if seg.next_offset <= task.first_dirty:
                continue
            end = _map_segment(task, seg, offset_map, aborted, stats, throttle, work)
            if end is not None:
                return end
        return task.first_uncleanable
    finally:
        stats.map_bytes_read += int(work.counters[k.MAP_BYTES_READ])
        stats.map_records += int(work.counters[k.MAP_RECORDS])


def _map_segment(task: CleanTask, seg: SegmentSummary, offset_map: CompiledOffsetMap, aborted: _Aborted,
                 stats: CleanStats, throttle: Throttler, work: _Work) -> int | None:
    path = _log_path(task, seg)
    with _Segment(path, seg.size) as s:
        if s.buf is None:
            for raw, h in _batches(path, seg.size, task.io_buffer_bytes, throttle):
                end = map_batch(task, raw, h, offset_map, aborted, stats)
                if end is not None:
                    return end
            return None
        pos = 0
        while pos < seg.size:
            status, after, n, value = k.map_batches(
                s.buf, pos, seg.size, min(seg.size, pos + WINDOW_BYTES), task.first_dirty, task.first_uncleanable,
                offset_map.table, work.scratch, work.spans, work.counters)
            work.check_crcs(s.buf, n)
            throttle.account(after - pos)
            pos = after
            s.release(pos)
            if status == k.MAP_DONE or status == k.MAP_FULL:
                return int(value)
            if status == k.NEED_SCRATCH:
                work.grow_scratch(value)
            elif status == k.FALLBACK or status == k.STRUCTURE:
                raw, h = s.batch_at(pos, status, task, throttle)
                pos += h.size
                end = map_batch(task, raw, h, offset_map, aborted, stats)
                if end is not None:
                    return end
    return None


class _Output:
    """The rewrite's output buffer: the kernel writes batches into ``buf``; their headers (CRCs computed for the
    rebuilt ones) are gathered until the buffer is appended to the group's segment."""

    def __init__(self, size: int) -> None:
        self._allocate(size)
        self.pos = 0
        self.headers: list[rb.BatchHeader] = []

    def _allocate(self, size: int) -> None:
        self.buf = np.zeros(size, np.uint8)
        self.batches = np.zeros((size // rb.HEADER_SIZE + 1, 3), np.int64)

    def took(self, m: int, pos: int) -> None:
        """The kernel wrote ``m`` batches, up to ``pos``."""
        buf = self.buf
        headers = self.headers
        for at, size, rebuilt in self.batches[:m].tolist():
            if rebuilt:
                _CRC.pack_into(buf, at + rb.CRC_AT, crc32c(buf[at + rb.ATTRIBUTES_AT : at + size]))
            headers.append(rb.parse_header(buf, at))
        self.pos = pos

    def add(self, data: bytes, writer: GroupWriter) -> None:
        """A batch the reference rewrote."""
        if self.pos + len(data) > len(self.buf):
            self.flush(writer)
            self.fit(len(data))
        self.buf[self.pos : self.pos + len(data)] = np.frombuffer(data, np.uint8)
        self.headers.append(rb.parse_header(data))
        self.pos += len(data)

    def fit(self, size: int) -> None:
        """Room for one batch of ``size`` bytes in an empty buffer."""
        if size > len(self.buf):
            self._allocate(size)

    def flush(self, writer: GroupWriter) -> None:
        if self.pos:
            writer.append(memoryview(self.buf)[: self.pos], self.headers)
            self.pos = 0
            self.headers = []


def write_group(task: CleanTask, group: list[SegmentSummary], rewriter: _Rewriter, scratch: Path,
                throttle: Throttler) -> CleanedSegment:
    """``clean._write_group`` with the kernel."""
    writer = GroupWriter(task, group, scratch, rewriter.stats, throttle)
    out = _Output(max(task.io_buffer_bytes, 64 * 1024))
    work = _Work()
    assert isinstance(rewriter.map, CompiledOffsetMap)
    last_offsets = np.array(sorted(set(task.producer_last_offsets.values())), np.int64)
    try:
        for seg in group:
            _rewrite_segment(task, seg, rewriter, writer, out, work, last_offsets, throttle)
        out.flush(writer)
        return writer.finish()
    finally:
        writer.close()
        stats = rewriter.stats
        c = work.counters
        stats.bytes_read += int(c[k.BYTES_READ])
        stats.records_read += int(c[k.RECORDS_READ])
        stats.records_kept += int(c[k.RECORDS_KEPT])
        stats.tombstones_removed += int(c[k.TOMBSTONES_REMOVED])
        stats.keyless_removed += int(c[k.KEYLESS_REMOVED])


def _rewrite_segment(task: CleanTask, seg: SegmentSummary, rewriter: _Rewriter, writer: GroupWriter, out: _Output,
                     work: _Work, last_offsets: np.ndarray, throttle: Throttler) -> None:
    path = _log_path(task, seg)
    offset_map = rewriter.map
    assert isinstance(offset_map, CompiledOffsetMap)
    with _Segment(path, seg.size) as s:
        if s.buf is None:
            for raw, h in _batches(path, seg.size, task.io_buffer_bytes, throttle):
                _rewrite_one(raw, h, rewriter, writer, out)
            return
        mapped_to = offset_map.latest_offset
        pos = 0
        while pos < seg.size:
            status, after, n, m, out_pos = k.rewrite_batches(
                s.buf, pos, seg.size, min(seg.size, pos + WINDOW_BYTES), mapped_to, task.now_ms, last_offsets,
                offset_map.table, work.scratch, work.spans, out.buf, out.pos, out.batches, work.counters)
            work.check_crcs(s.buf, n)
            out.took(m, out_pos)
            throttle.account(after - pos)
            pos = after
            s.release(pos)
            if status == k.LISTS_FULL:
                out.flush(writer)
                out.fit(rb.read_prefix(s.buf, pos)[1] + rb.LOG_OVERHEAD)
            elif status == k.NEED_SCRATCH:
                work.grow_scratch(rb.parse_header(s.buf, pos).record_count)
            elif status == k.FALLBACK or status == k.STRUCTURE:
                raw, h = s.batch_at(pos, status, task, throttle)
                pos += h.size
                _rewrite_one(raw, h, rewriter, writer, out)


def _rewrite_one(raw: bytes, h: rb.BatchHeader, rewriter: _Rewriter, writer: GroupWriter, out: _Output) -> None:
    """One batch through the reference rules."""
    rewriter.stats.bytes_read += h.size
    data, entry = rewriter.batch(raw, h)
    if data is None:
        return
    if entry is not None:
        writer.dest.txn_index.append(entry)
    out.add(data, writer)


def warm_up() -> None:
    """Load (or compile, the first time) every kernel function with the argument types a pass uses."""
    m = CompiledOffsetMap(1024, 1.0)
    key = np.frombuffer(b"k", np.uint8)
    table_put(m.table, key, 0, 1, 0)
    table_get(m.table, key, 0, 1)
    m.clear()
    work = _Work()
    out = _Output(1024)
    buf = np.frombuffer(bytes(rb.HEADER_SIZE), np.uint8)
    k.map_batches(buf, 0, 0, 0, 0, 0, m.table, work.scratch, work.spans, work.counters)
    k.rewrite_batches(buf, 0, 0, 0, -1, 0, np.zeros(0, np.int64), m.table, work.scratch, work.spans, out.buf, 0,
                      out.batches, work.counters)
