"""A pass's two loops (map the dirty part, rewrite the groups) run by the compiled kernel, in a worker process.

``clean.clean`` runs a ``CompiledPass`` unless told to run the reference code alone. Each segment is read with
``pread`` in chunks of ``CHUNK_BYTES`` (plus ``OVERLAP_BYTES``, so that a batch starting in a chunk is whole in it)
into ``READ_AHEAD + 1`` buffers in turn: a reader thread reads the next chunks, in order, while ``kernel`` scans
this one in one call (thousands of batches, not a call per batch; both release the GIL, so the copies and the scan
use two cores; two readers measured no faster: the copies share the memory bandwidth; three chunks queued ahead
rather than one keep the reader busy where the scan is quicker than the copy, as in the rewrite).
The rewrite does not read at all the runs of ``SKIP_MIN_BYTES`` or more of batches the map pass showed it would
drop whole (``_plan_skips``: every record in the mapped part, none its key's latest), and counts them as read:
in a log whose keys are updated often, most of what is old is such runs (1 KiB records, 10 % distinct keys: 60 %
of the log).
Reading into a warm buffer costs less than faulting mmapped pages in and dropping them again (measured: 1 MiB
chunks beat 256 KiB, 512 KiB and 4 MiB ones, and mmap). Python's work per *batch* is one ``crc32c`` call for
each batch read (the library's hardware CRC-32C over the spans the kernel lists), one for each batch rebuilt, and
the header of each batch written (``LogSegment.append`` indexes the cleaned segment); Python does nothing per
*record* of an uncompressed data batch. Each batch the kernel leaves (see ``kernel``'s statuses) goes to the
reference code of ``clean.py`` — ``map_batch``, ``_Rewriter.batch`` — over the same map, so every rule has one
implementation and the compiled path writes the same bytes as the reference
(``tests/storage/cleaner/test_kernel_equivalence.py`` compares them on generated logs).

Invariants:
- Every batch is CRC-checked before the pass uses what the kernel did with it, once per pass: the map pass
  checks what it reads; the rewrite pass checks what the map pass did not read (the clean part, the rest of the
  segment where the map ended). The segments below the first uncleanable offset are never written, so a batch
  checked by the map pass is the same bytes when it is rewritten. A mismatch raises ``CorruptRecordError``
  through ``batch.check_batch``; the pass is thrown away.
- A segment file shorter than its summary's size is read by the reference reader, and a batch whose header is
  damaged by the reference reader from that batch on: either raises where the reference raises.
- Memory: the offset map (``key_table``), ``READ_AHEAD + 1`` read buffers (``CHUNK_BYTES + OVERLAP_BYTES`` each;
  a batch larger than the overlap is read alone into a buffer of its size), one output buffer
  (``io_buffer_bytes``, larger only for a larger batch), small span and scratch arrays, and the map pass's list of
  batches the rewrite may skip (at most ``1 / DROPPED_SHARE`` of the map's memory; past that, batches are read).
- A skipped range starts and ends at batch boundaries the map pass walked, below the bytes it CRC-checked; the
  rewrite's reads stop at a skipped range's start (``_pieces``).
- Threads: the pass's reader threads only read into buffers the kernel is not scanning (piece ``j``'s is read into
  again only once piece ``j + READ_AHEAD + 1`` is asked for, when the caller is done with every earlier piece); a
  read is waited for before its buffer is used, and the readers are shut down when the pass ends (``CompiledPass``
  is a context manager).
- numba compiles the kernel on first use (about 7 s) and caches it beside the modules (``cache=True``);
  ``warm_up`` loads it (about 0.3 s) when a worker starts, before it says it is ready, so a pass never waits for
  the compiler once the cache exists. numba keys a function's cache on its own module's source only: a change
  to ``key_table.py`` alone leaves ``kernel``'s cached functions as they were compiled — change ``kernel.py``
  too, or remove the ``*.nbi``/``*.nbc`` files of ``__pycache__``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

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
from odradek.storage.cleaner.key_table import CompiledOffsetMap, latest_offsets
from odradek.storage.cleaner.planning import SegmentSummary
from odradek.storage.segment import LOG_SUFFIX, segment_name

CHUNK_BYTES = 1024 * 1024  # of a segment per kernel call
OVERLAP_BYTES = 64 * 1024  # read past each chunk: batches up to this long starting in it are whole in it
READ_AHEAD = 3  # pieces read ahead of the one scanned (1 measured 5-15 % slower: the reader idled between pieces)
READERS = 1  # reader threads (2 measured no faster: the copies share the memory bandwidth)
SPAN_ROWS = 4096  # batches a kernel call reads before the caller checks their CRCs
SKIP_MIN_BYTES = 128 * 1024  # a run of batches the rewrite drops whole is not read if at least this long
DROPPED_SHARE = 16  # the list of batches the rewrite may drop whole: at most this fraction of the map's memory
_DROPPED_COLUMNS = (k.SPAN_POS, k.SPAN_SIZE, k.SPAN_LOW, k.SPAN_HIGH, k.SPAN_COUNT, k.SPAN_KEYLESS)
SCRATCH_ROWS = 1024  # records of one batch the scratch holds before it grows
OUTPUT_MIN_BYTES = 64 * 1024  # the output buffer: io_buffer_bytes, at least this
_CRC = struct.Struct(">I")

class _Work:
    """The kernel's arrays for one pass: record scratch, span list, counters (grown on demand), and the thread
    that reads ahead."""

    def __init__(self) -> None:
        self.scratch = np.zeros((SCRATCH_ROWS, k.SCRATCH_COLUMNS), np.int64)
        self.spans = np.zeros((SPAN_ROWS, k.SPAN_COLUMNS), np.int64)
        self.counters = np.zeros(k.N_COUNTERS, np.int64)
        self.chunks = tuple(np.empty(CHUNK_BYTES + OVERLAP_BYTES, np.uint8) for _ in range(READ_AHEAD + 1))
        self.reader = ThreadPoolExecutor(READERS, thread_name_prefix="odradek-cleaner-read")

    def close(self) -> None:
        self.reader.shutdown()

    def grow_scratch(self, rows: int) -> None:
        self.scratch = np.zeros((max(rows, 2 * self.scratch.shape[0]), k.SCRATCH_COLUMNS), np.int64)

    def check_crcs(self, buf: np.ndarray, n: int, from_pos: int) -> None:
        """CRC-32C of the batches the kernel listed that end after ``from_pos`` (in ``buf``); the reference's error
        for a damaged one."""
        view = memoryview(buf)
        for pos, size, stored in self.spans[:n, : k.SPAN_CRC + 1].tolist():
            if pos + size > from_pos and crc32c(view[pos + rb.ATTRIBUTES_AT : pos + size]) != stored:
                rb.check_batch(buf, pos, available=size)


def _pread(fd: int, buf: np.ndarray, n: int, at: int) -> int:
    """Read ``n`` bytes of the file at ``at`` into ``buf`` (fewer only at its end)."""
    view = memoryview(buf)
    done = 0
    while done < n:
        got = os.preadv(fd, [view[done:n]], at + done)
        if got <= 0:
            break
        done += got
    return done


def _pieces(size: int, skips: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """The reads of a segment's first ``size`` bytes but the ranges ``skips`` (sorted, each starting and ending at a
    batch boundary): (file position, bytes to read, bytes in which the batches to scan start). A piece holds
    ``CHUNK_BYTES`` of batch starts and reads ``OVERLAP_BYTES`` past them (so that a batch starting in it and no
    longer than the overlap is whole in it), never past the range it is in."""
    pieces = []
    start = 0
    for end, resume in [*skips, (size, size)]:
        for at in range(start, end, CHUNK_BYTES):
            pieces.append((at, min(CHUNK_BYTES + OVERLAP_BYTES, end - at), min(CHUNK_BYTES, end - at)))
        start = resume
    return pieces


class _Chunks:
    """A segment's ``pieces`` (``_pieces``), piece ``j`` read into buffer ``j % (READ_AHEAD + 1)``; asking for piece
    ``j`` queues the next ``READ_AHEAD`` ones for the reader threads (``pread`` and the kernel release the GIL: the
    copies and the scan share the cores). Asking for piece ``j`` means the caller is
    done with every earlier piece: its buffer is read into again."""

    def __init__(self, fd: int, pieces: list[tuple[int, int, int]], work: _Work) -> None:
        self.fd = fd
        self.pieces = pieces
        self.work = work
        self.ahead: dict[int, Future[int]] = {}  # piece -> its read under way

    def _read(self, j: int) -> int:
        at, n, _ = self.pieces[j]
        return _pread(self.fd, self._buffer(j), n, at)

    def _buffer(self, j: int) -> np.ndarray:
        chunks = self.work.chunks
        return chunks[j % len(chunks)]

    def get(self, j: int) -> tuple[np.ndarray, int]:
        """Piece ``j`` and the bytes in it."""
        future = self.ahead.pop(j, None)
        for earlier in [i for i in self.ahead if i < j]:  # skipped (a batch larger than a chunk was read alone)
            self.ahead.pop(earlier).result()
        if future is None:
            self.close()  # (no read under way may be writing into this piece's buffer)
            avail = self._read(j)
        else:
            avail = future.result()  # (a read under way must end before its buffer is used)
        for i in range(j + 1, min(j + 1 + READ_AHEAD, len(self.pieces))):
            if i not in self.ahead:
                self.ahead[i] = self.work.reader.submit(self._read, i)
        return self._buffer(j), avail

    def close(self) -> None:
        """Wait for the reads under way."""
        while self.ahead:
            self.ahead.popitem()[1].result()


# A kernel call: (buffer, position, bytes in it, limit: batches starting before it) -> (status, position it
# stopped at, spans listed, MAP_DONE / MAP_FULL offset).
_Step = Callable[[np.ndarray, int, int, int], tuple[int, int, int, int]]
# A batch for the reference code: the pass's end offset if it ends there (map pass), else None.
_Fallback = Callable[[bytes, rb.BatchHeader], "int | None"]


class _Scan:
    """One segment through a pass's kernel ``step``, the batches it leaves through ``fallback``, every batch
    listed past byte ``checked`` of the file CRC-checked; the byte ranges ``skips`` are not read at all, and
    ``listed`` is given the rows the kernel listed with the file position of their buffer."""

    def __init__(self, task: CleanTask, seg: SegmentSummary, work: _Work, throttle: Throttler, step: _Step,
                 fallback: _Fallback, checked: int, on_full: Callable[[int], None] | None,
                 skips: list[tuple[int, int]] | None = None,
                 listed: Callable[[np.ndarray, int], None] | None = None) -> None:
        self.task = task
        self.path = Path(task.directory) / (segment_name(seg.base_offset) + LOG_SUFFIX)
        self.size = seg.size
        self.work = work
        self.throttle = throttle
        self.step = step
        self.fallback = fallback
        self.checked = checked
        self.on_full = on_full
        self.skips = skips or []
        self.listed = listed

    def run(self) -> tuple[int | None, int]:
        """(The offset the map pass ends at, or None; the file position read and checked up to.)"""
        with open(self.path, "rb", buffering=0) as f:
            self.fd = f.fileno()
            if os.fstat(self.fd).st_size < self.size:  # the reference reader raises where the file ends
                for raw, h in _batches(self.path, self.size, self.task.io_buffer_bytes, self.throttle):
                    end = self.fallback(raw, h)
                    if end is not None:
                        return end, self.size
                return None, self.size
            pieces = _pieces(self.size, self.skips)
            chunks = _Chunks(self.fd, pieces, self.work)
            try:
                at = 0
                for j, (start, _, limit) in enumerate(pieces):
                    if at >= start + limit:  # (read past it: a batch larger than the overlap was read alone)
                        continue
                    at = max(at, start)  # (past a skipped range)
                    buf, avail = chunks.get(j)
                    self.throttle.account(min(avail, limit))
                    at, end = self._buffer(buf, at - start, min(avail, limit), avail, start)
                    if end is not None:
                        return end, at
            finally:
                chunks.close()
        return None, self.size

    def _buffer(self, buf: np.ndarray, pos: int, limit: int, avail: int, base: int) -> tuple[int, int | None]:
        """The batches of ``buf`` (the file from ``base``, ``avail`` bytes) that start from ``pos`` to ``limit``:
        (the file position after them, the map pass's end offset or None)."""
        work = self.work
        while pos < limit:
            status, pos, n, value = self.step(buf, pos, avail, limit)
            work.check_crcs(buf, n, self.checked - base)
            if self.listed is not None and n:
                self.listed(work.spans[:n], base)
            if status == k.MAP_DONE or status == k.MAP_FULL:
                return base + pos, value
            if status == k.NEED_SCRATCH:
                work.grow_scratch(rb.parse_header(buf, pos).record_count)
            elif status == k.LISTS_FULL and self.on_full is not None:  # (the span list: checked above)
                self.on_full(rb.read_prefix(buf, pos)[1] + rb.LOG_OVERHEAD)
            elif status == k.FALLBACK:
                whole = rb.read_prefix(buf, pos)[1] + rb.LOG_OVERHEAD
                raw = buf[pos : pos + whole].tobytes()
                pos += whole
                end = self.fallback(raw, rb.check_batch(raw, 0, available=whole))
                if end is not None:
                    return base + pos, end
            elif status == k.STRUCTURE:
                at = base + pos
                prefix = os.pread(self.fd, rb.LOG_OVERHEAD, at)
                whole = rb.read_prefix(prefix)[1] + rb.LOG_OVERHEAD if len(prefix) == rb.LOG_OVERHEAD else 0
                if pos + whole > avail and rb.HEADER_SIZE <= whole <= self.size - at:  # larger than the overlap
                    big = np.empty(whole, np.uint8)
                    self.throttle.account(_pread(self.fd, big, whole, at))
                    after, end = self._buffer(big, 0, 1, whole, at)
                else:  # damaged: the reference reader raises (or reads it as the reference would)
                    raw, h = next(_batches(self.path, self.size, self.task.io_buffer_bytes, self.throttle, start=at))
                    after, end = at + h.size, self.fallback(raw, h)
                if end is not None:
                    return after, end
                pos = after - base
        return base + pos, None


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
        """Room for a batch of ``size`` bytes in an empty buffer."""
        if size > len(self.buf):
            self._allocate(size)

    def flush(self, writer: GroupWriter) -> None:
        if self.pos:
            writer.append(memoryview(self.buf)[: self.pos], self.headers)
            self.pos = 0
            self.headers = []


class CompiledPass:
    """The two loops of one pass with the kernel (``clean.build_offset_map`` and ``clean._write_group``'s)."""

    def __init__(self, task: CleanTask, offset_map: CompiledOffsetMap, aborted: _Aborted, stats: CleanStats,
                 throttle: Throttler) -> None:
        self.task = task
        self.map = offset_map
        self.aborted = aborted
        self.stats = stats
        self.throttle = throttle
        self.work = _Work()
        self.checked: dict[int, int] = {}  # segment base offset -> bytes of it the map pass CRC-checked
        self.latest = np.zeros(0, np.int64)
        self.last_offsets = np.array(sorted(set(task.producer_last_offsets.values())), np.int64)
        # segment base offset -> the batches the map pass listed that the rewrite may drop whole (_DROPPED_COLUMNS)
        self.droppable: dict[int, list[np.ndarray]] = {}
        self.droppable_room = task.memory_bytes // DROPPED_SHARE // (8 * len(_DROPPED_COLUMNS))  # rows
        # segment base offset -> (file ranges the rewrite does not read, their bytes, records, keyless records)
        self.skips: dict[int, tuple[list[tuple[int, int]], int, int, int]] = {}

    def __enter__(self) -> CompiledPass:
        return self

    def __exit__(self, *exc: object) -> None:
        self.work.close()

    def build_offset_map(self) -> int:
        """Map the dirty part; the offset the map covers up to (exclusive)."""
        task, work, table = self.task, self.work, self.map.table

        def step(buf: np.ndarray, pos: int, avail: int, limit: int) -> tuple[int, int, int, int]:
            return k.map_batches(buf, pos, avail, limit, task.first_dirty, task.first_uncleanable,
                                 self.last_offsets, table, work.scratch, work.spans, work.counters)

        def fallback(raw: bytes, h: rb.BatchHeader) -> int | None:
            return map_batch(task, raw, h, self.map, self.aborted, self.stats)

        try:
            for seg in task.segments:
                if seg.next_offset <= task.first_dirty:
                    continue
                end, self.checked[seg.base_offset] = _Scan(task, seg, work, self.throttle, step, fallback, 0,
                                                           None, listed=self._lister(seg.base_offset)).run()
                if end is not None:
                    return end
            return task.first_uncleanable
        finally:
            self.stats.map_bytes_read += int(work.counters[k.MAP_BYTES_READ])
            self.stats.map_records += int(work.counters[k.MAP_RECORDS])
            self.latest = latest_offsets(table)
            self._plan_skips()

    def _lister(self, segment: int) -> Callable[[np.ndarray, int], None]:
        """Keeps the droppable batches of what a map step listed in ``segment`` (while there is room)."""
        parts = self.droppable.setdefault(segment, [])

        def listed(spans: np.ndarray, base: int) -> None:
            rows = spans[spans[:, k.SPAN_LOW] >= 0][: self.droppable_room][:, _DROPPED_COLUMNS]
            if len(rows):
                rows[:, 0] += base
                parts.append(rows)
                self.droppable_room -= len(rows)

        return listed

    def _plan_skips(self) -> None:
        """The runs of batches the rewrite would drop whole, of ``SKIP_MIN_BYTES`` or more: every record of each is
        in the mapped part and none is its key's latest (no offset of ``latest`` between its lowest and highest
        offset), so the rewrite's kernel would read it, keep nothing and count it: the rewrite skips reading the
        run and counts it from what the map pass listed (the map pass CRC-checked those batches)."""
        latest, mapped_to = self.latest, self.map.latest_offset
        for segment, parts in self.droppable.items():
            if not parts:
                continue
            pos, size, low, high, count, keyless = np.concatenate(parts).T
            latest_within = np.searchsorted(latest, high, side="right") - np.searchsorted(latest, low)
            dropped = (high <= mapped_to) & (latest_within == 0)
            pos, size, count, keyless = pos[dropped], size[dropped], count[dropped], keyless[dropped]
            if not len(pos):
                continue
            run = np.flatnonzero(np.concatenate(([True], pos[1:] != pos[:-1] + size[:-1])))  # first batch of each
            run_bytes = np.add.reduceat(size, run)
            long = run_bytes >= SKIP_MIN_BYTES
            ranges = list(zip(pos[run][long].tolist(), (pos[run] + run_bytes)[long].tolist(), strict=True))
            self.skips[segment] = (ranges, int(run_bytes[long].sum()), int(np.add.reduceat(count, run)[long].sum()),
                                   int(np.add.reduceat(keyless, run)[long].sum()))
        self.droppable.clear()

    def write_group(self, task: CleanTask, group: list[SegmentSummary], rewriter: _Rewriter, scratch: Path,
                    throttle: Throttler) -> CleanedSegment:
        """Rewrite one group into its cleaned segment."""
        writer = GroupWriter(task, group, scratch, self.stats, throttle)
        out = _Output(max(task.io_buffer_bytes, OUTPUT_MIN_BYTES))
        work, table, latest, last_offsets = self.work, self.map.table, self.latest, self.last_offsets
        mapped_to = self.map.latest_offset
        counters = work.counters
        before = counters.copy()

        def step(buf: np.ndarray, pos: int, avail: int, limit: int) -> tuple[int, int, int, int]:
            status, after, n, m, out.pos = k.rewrite_batches(
                buf, pos, avail, limit, task.first_dirty, mapped_to, latest, task.now_ms, last_offsets, table,
                work.scratch, work.spans, out.buf, out.pos, out.batches, counters)
            out.took(m, out.pos)
            return status, after, n, 0

        def fallback(raw: bytes, h: rb.BatchHeader) -> None:
            self.stats.bytes_read += h.size
            data, entry = rewriter.batch(raw, h)
            if data is not None:
                if entry is not None:
                    writer.dest.txn_index.append(entry)
                out.add(data, writer)

        def on_full(batch_size: int) -> None:  # the output buffer or its lists: write them out
            out.flush(writer)
            out.fit(batch_size)

        try:
            for seg in group:
                skips, skipped_bytes, skipped_records, skipped_keyless = self.skips.get(seg.base_offset, ([], 0, 0, 0))
                counters[k.BYTES_READ] += skipped_bytes  # (the kernel would have read them and kept nothing)
                self.stats.bytes_skipped += skipped_bytes
                counters[k.RECORDS_READ] += skipped_records
                counters[k.KEYLESS_REMOVED] += skipped_keyless
                _Scan(task, seg, work, throttle, step, fallback, self.checked.get(seg.base_offset, 0), on_full,
                      skips).run()
            out.flush(writer)
            return writer.finish()
        finally:
            writer.close()
            done = counters - before
            stats = self.stats
            stats.bytes_read += int(done[k.BYTES_READ])
            stats.records_read += int(done[k.RECORDS_READ])
            stats.records_kept += int(done[k.RECORDS_KEPT])
            stats.tombstones_removed += int(done[k.TOMBSTONES_REMOVED])
            stats.keyless_removed += int(done[k.KEYLESS_REMOVED])


def warm_up() -> None:
    """Load (or compile, the first time) every kernel function with the argument types a pass uses."""
    m = CompiledOffsetMap(1024, 1.0)
    m.put_many([b"k"], [0])  # (what the reference code calls, for the batches the kernel leaves)
    m.get_many([b"k"])
    m.clear()
    work = _Work()
    out = _Output(1024)
    none = np.zeros(0, np.int64)
    buf = work.chunks[0]
    k.map_batches(buf, 0, 0, 0, 0, 0, none, m.table, work.scratch, work.spans, work.counters)
    k.rewrite_batches(buf, 0, 0, 0, 0, -1, none, 0, none, m.table, work.scratch, work.spans, out.buf, 0,
                      out.batches, work.counters)
    work.close()
