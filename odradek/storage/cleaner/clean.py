"""Cleaning one log: the work a cleaner worker process does on the files, with no ``Log`` object and no lock.

Kafka's ``Cleaner.doClean``, as Odradek runs it (the broker plans the task, a worker process runs ``clean``, the
broker swaps the result in: ``swap.py``, ``cleaner.py``):

1. Map the dirty part ``[first_dirty, first_uncleanable)``: for every key, the offset of its latest record
   (``OffsetMap``), skipping control batches and aborted transactions' batches. A map that fills up stops at a
   record; the pass then cleans up to that record and the next pass starts there (a log that does not fit the
   buffer is cleaned in passes).
2. Rewrite the log from its start up to the end of the map, in groups of consecutive segments that fit one
   segment (``planning.group_by_size``), each into new files ``<base>.*.cleaned`` named after the group's first
   segment. A record survives when it is its key's latest (or its key is not in the map: it was last written
   in the clean part); a tombstone (null value) also needs its batch's delete horizon not to have passed;
   records without a key are dropped (they cannot be compacted: Kafka counts them as invalid). Records past the
   last one mapped (in the segment where a full map stopped) are kept as they are: a tombstone there may delete a
   value this pass did not map.
3. Transactions: batches of aborted transactions are dropped whole; an ABORT marker stays while this pass
   still saw (and dropped) data of its transaction, and its entry goes to the cleaned segment's transaction
   index; a COMMIT marker stays while data of its transaction survive. A marker that may go stays until its
   delete horizon passes. The last data batch of every producer the partition keeps state for is retained,
   emptied if need be, so idempotent producers keep their sequence (Kafka's ``RETAIN_EMPTY``).
4. A kept batch that holds a tombstone, or a kept marker, without a delete horizon gets one: now +
   ``delete.retention.ms`` (KIP-534). Tombstones and markers stay at least that long after the cleaning that
   made them eligible, so a consumer that was reading the log when they were cleaned still sees them.

Invariants:
- Reads only segments below the first uncleanable offset (never appended to; the broker checks at the swap
  that they are still the log's) and writes only ``*.cleaned`` files and the scratch directory; never renames or
  deletes a file of the log.
- Offsets never change (``batch_filter``); a cleaned segment's batches are exactly the kept batches of the
  segments it replaces, in order.
- Memory: the offset map (``memory_bytes``), read and write buffers (``io_buffer_bytes``, the compiled path's
  chunks: ``compiled_pass``; larger only for a larger batch) — whatever the log's size.

Two implementations run these rules: this module's Python code (the reference, ``compiled=False``), and the
compiled kernel (``compiled_pass``, ``kernel``, ``key_table``), which does the common batches — uncompressed,
non-transactional data batches that are not a producer's last and need no new delete horizon — and hands every
other batch to this module's per-batch code, over the same map and the same output. Both write the same bytes.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from odradek.protocol import batch as rb
from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import ControlType, parse_control_key
from odradek.storage.checkpoint import fsync_directory
from odradek.storage.cleaner.batch_filter import (
    HAS_VALUE,
    KEY,
    OFFSET_DELTA,
    RecordSpan,
    batch_body,
    has_delete_horizon,
    rewrite_batch,
    scan_records,
)
from odradek.storage.cleaner.offset_map import KeyOffsets, OffsetMap
from odradek.storage.cleaner.planning import SegmentSummary, group_by_size
from odradek.storage.config import LogConfig
from odradek.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_name
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

CLEANED_SUFFIX = ".cleaned"
SCRATCH_DIR = "cleaner-scratch"
SEGMENT_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)  # the log file last


@dataclass(frozen=True, slots=True)
class CleanTask:
    """Everything a worker needs to clean one log (picklable)."""

    directory: str
    name: str
    segments: tuple[SegmentSummary, ...]  # every segment below first_uncleanable, from the log start
    first_dirty: int
    first_uncleanable: int
    aborted: tuple[AbortedTxn, ...]  # every aborted transaction the log's transaction indexes hold
    producer_last_offsets: dict[int, int]  # producer id -> last offset of its last data batch
    config: LogConfig  # segment.bytes / segment.index.bytes / index.interval.bytes of the cleaned segments
    now_ms: int
    delete_retention_ms: int
    memory_bytes: int
    load_factor: float = 0.9
    io_buffer_bytes: int = 512 * 1024
    max_io_bytes_per_second: float = float("inf")


@dataclass(frozen=True, slots=True)
class CleanedSegment:
    base_offset: int  # the first replaced segment's
    replaces: tuple[int, ...]  # base offsets of the segments it replaces, in order
    size: int


@dataclass(slots=True)
class CleanStats:
    bytes_read: int = 0  # of the log the rewrite went through
    bytes_skipped: int = 0  # of those, not read: batches the map showed superseded whole (the compiled path only)
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_bytes_read: int = 0
    map_records: int = 0
    map_utilization: float = 0.0
    tombstones_removed: int = 0
    markers_removed: int = 0
    aborted_batches_removed: int = 0
    keyless_removed: int = 0
    seconds: float = 0.0
    throttled_seconds: float = 0.0


@dataclass(slots=True)
class CleanResult:
    segments: list[CleanedSegment]
    end_offset: int  # the next pass's first dirty offset
    stats: CleanStats = field(default_factory=CleanStats)


class Throttler:
    """``log.cleaner.io.max.bytes.per.second``: sleeps whenever the bytes moved run ahead of the rate."""

    def __init__(self, rate: float, stats: CleanStats) -> None:
        self.rate = rate
        self.stats = stats
        self.started = time.monotonic()
        self.moved = 0

    def account(self, n: int) -> None:
        if self.rate == float("inf") or self.rate <= 0:
            return
        self.moved += n
        ahead = self.moved / self.rate - (time.monotonic() - self.started)
        if ahead > 0.005:
            time.sleep(ahead)
            self.stats.throttled_seconds += ahead


_Map = TypeVar("_Map", bound=KeyOffsets)
_MAPS: dict[tuple[type, int, float], KeyOffsets] = {}


def _offset_map(kind: type[_Map], memory_bytes: int, load_factor: float) -> _Map:
    """The worker's map of this kind (the reference ``OffsetMap`` or the compiled one), allocated once per size
    and cleared between logs (its buffer stays the configured size: the worker's memory does not grow with the
    logs it cleans; one map at a time)."""
    key = (kind, memory_bytes, load_factor)
    m = _MAPS.get(key)
    if m is None:
        _MAPS.clear()
        m = _MAPS[key] = kind(memory_bytes, load_factor)  # type: ignore[call-arg]
    else:
        m.clear()
    assert isinstance(m, kind)
    return m


def _batches(path: Path, size: int, chunk: int, throttle: Throttler,
             start: int = 0) -> Iterator[tuple[bytes, rb.BatchHeader]]:
    """Every batch of the first ``size`` bytes of ``path`` from byte ``start``, CRC-checked, reading ``chunk``
    bytes at a time."""
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        pos = start
        while pos < size:
            data = os.pread(fd, min(max(chunk, rb.HEADER_SIZE), size - pos), pos)
            if len(data) < rb.LOG_OVERHEAD:
                raise CorruptRecordError(f"{path} ends at byte {pos + len(data)}, before its {size} bytes")
            throttle.account(len(data))
            at = 0
            while at + rb.LOG_OVERHEAD <= len(data):
                _, length = rb.read_prefix(data, at)
                whole = length + rb.LOG_OVERHEAD
                if at + whole > len(data):
                    if at == 0:  # a batch larger than the chunk: read it whole
                        data = os.pread(fd, whole, pos)
                        throttle.account(len(data))
                        if len(data) < whole:
                            raise CorruptRecordError(f"{path}: batch at byte {pos} is cut short")
                        continue
                    break
                header = rb.check_batch(data, at, available=whole)
                yield data[at : at + whole], header
                at += whole
            if at == 0:
                raise CorruptRecordError(f"{path}: no whole batch at byte {pos}")
            pos += at


class _Aborted:
    """Which transactional batches belong to aborted transactions: per producer, the (first offset, marker
    offset) ranges of the transaction indexes."""

    def __init__(self, aborted: tuple[AbortedTxn, ...]) -> None:
        ranges: dict[int, list[tuple[int, int]]] = {}
        for txn in aborted:
            ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        self._ranges = {pid: sorted(rs) for pid, rs in ranges.items()}
        self._firsts = {pid: [r[0] for r in rs] for pid, rs in self._ranges.items()}
        self._entries = {(t.producer_id, t.last_offset): t for t in aborted}

    def covers(self, h: rb.BatchHeader) -> AbortedTxn | None:
        firsts = self._firsts.get(h.producer_id)
        if not firsts:
            return None
        i = bisect.bisect_right(firsts, h.base_offset) - 1
        if i < 0:
            return None
        first, last = self._ranges[h.producer_id][i]
        return self._entries[(h.producer_id, last)] if first <= h.base_offset <= last else None


def map_batch(task: CleanTask, raw: bytes, h: rb.BatchHeader, offset_map: KeyOffsets, aborted: _Aborted,
              stats: CleanStats) -> int | None:
    """Map one batch of the dirty part's segments; the offset the mapped part ends at (exclusive) if the pass's
    map ends in this batch (``first_uncleanable`` reached, or the map full), else None."""
    stats.map_bytes_read += h.size
    if h.last_offset < task.first_dirty or h.is_control:
        return None
    if h.base_offset >= task.first_uncleanable:
        return task.first_uncleanable
    if h.is_transactional and aborted.covers(h) is not None:
        return None
    base = h.base_offset
    keys: list[bytes] = []
    offsets: list[int] = []
    end = None
    for r in scan_records(batch_body(raw, h), h):
        offset = base + r[OFFSET_DELTA]
        key = r[KEY]
        if offset < task.first_dirty or key is None:
            continue
        if offset >= task.first_uncleanable:
            end = task.first_uncleanable
            break
        keys.append(key)
        offsets.append(offset)
    done = offset_map.put_many(keys, offsets)  # in order, until one does not fit
    stats.map_records += done
    return offsets[done] if done < len(keys) else end


def build_offset_map(task: CleanTask, offset_map: KeyOffsets, aborted: _Aborted, stats: CleanStats,
                     throttle: Throttler) -> int:
    """Map the dirty part; returns the offset the map covers up to (exclusive): ``first_uncleanable`` unless the
    map filled up first."""
    directory = Path(task.directory)
    for seg in task.segments:
        if seg.next_offset <= task.first_dirty:
            continue
        for raw, h in _batches(directory / (segment_name(seg.base_offset) + LOG_SUFFIX), seg.size,
                               task.io_buffer_bytes, throttle):
            end = map_batch(task, raw, h, offset_map, aborted, stats)
            if end is not None:
                return end
    return task.first_uncleanable


def _marker_type(records: list[RecordSpan]) -> ControlType:
    return parse_control_key(records[0][KEY]).type if records else ControlType.UNKNOWN


class _Rewriter:
    """The per-batch rules of step 2-4 for one pass, in log order."""

    def __init__(self, task: CleanTask, offset_map: KeyOffsets, aborted: _Aborted, stats: CleanStats) -> None:
        self.task = task
        self.map = offset_map
        self.aborted = aborted
        self.stats = stats
        self.horizon = task.now_ms + task.delete_retention_ms
        self.seen_aborted: dict[int, AbortedTxn] = {}  # producer -> its aborted transaction seen in this pass
        self.seen_committed: set[int] = set()  # producers whose committed transaction's data this pass saw

    def _last_of_producer(self, h: rb.BatchHeader) -> bool:
        return h.producer_id >= 0 and self.task.producer_last_offsets.get(h.producer_id) == h.last_offset

    def batch(self, raw: bytes, h: rb.BatchHeader) -> tuple[bytes | None, AbortedTxn | None]:
        """What to write for this batch (None: nothing), and the aborted transaction to index with it."""
        if h.is_control:
            return self._marker(raw, h)
        stats = self.stats
        stats.records_read += h.record_count
        aborted = self.aborted.covers(h) if h.is_transactional else None
        if aborted is not None:
            self.seen_aborted[h.producer_id] = aborted
        elif h.is_transactional:
            self.seen_committed.add(h.producer_id)
        body = batch_body(raw, h)
        records = scan_records(body, h)
        if aborted is not None:
            kept: list[RecordSpan] = []
        else:
            kept = self._kept(h, records)
        if not kept and not self._last_of_producer(h):
            if aborted is not None:
                stats.aborted_batches_removed += 1
            return None, None
        stats.records_kept += len(kept)
        stamp = (not has_delete_horizon(h) and not all(r[HAS_VALUE] for r in kept))
        return rewrite_batch(raw, h, body, records, kept, delete_horizon=self.horizon if stamp else None), None

    def _kept(self, h: rb.BatchHeader, records: list[RecordSpan]) -> list[RecordSpan]:
        base = h.base_offset
        mapped_to = self.map.latest_offset
        expired = has_delete_horizon(h) and self.task.now_ms >= h.base_timestamp
        latest = iter(self.map.get_many([key for r in records
                                         if (key := r[KEY]) is not None and base + r[OFFSET_DELTA] <= mapped_to]))
        kept = []
        for r in records:
            key = r[KEY]
            offset = base + r[OFFSET_DELTA]
            if offset > mapped_to:  # past what this pass mapped: kept as it is (Kafka's pastLatestOffset), or a
                kept.append(r)  # tombstone could go before the value it deletes
                continue
            if key is None:
                self.stats.keyless_removed += 1
                continue
            if offset < next(latest):  # (the latest offset of this key)
                continue
            if expired and not r[HAS_VALUE]:
                self.stats.tombstones_removed += 1
                continue
            kept.append(r)
        return kept

    def _marker(self, raw: bytes, h: rb.BatchHeader) -> tuple[bytes | None, AbortedTxn | None]:
        body = batch_body(raw, h)
        records = scan_records(body, h)
        kind = _marker_type(records)
        entry = None
        if kind is ControlType.ABORT:
            entry = self.seen_aborted.pop(h.producer_id, None)
            may_go = entry is None
        elif kind is ControlType.COMMIT:
            may_go = h.producer_id not in self.seen_committed
            self.seen_committed.discard(h.producer_id)
        else:
            may_go = False
        horizon_passed = has_delete_horizon(h) and self.task.now_ms >= h.base_timestamp
        if may_go and horizon_passed and not self._last_of_producer(h):
            self.stats.markers_removed += 1
            return None, None
        if has_delete_horizon(h):
            return raw, entry
        return rewrite_batch(raw, h, body, records, records, delete_horizon=self.horizon), entry


_SYNC_FILE_RANGE_WRITE = 2


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    try:
        f = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    f.restype = ctypes.c_int
    return f  # type: ignore[no-any-return]


_SYNC_RANGE = _sync_file_range()


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Have the kernel start writing ``length`` bytes of ``fd`` from ``offset`` to the disk, without waiting
    (Linux's ``sync_file_range(SYNC_FILE_RANGE_WRITE)``): the cleaned segment's bytes go to the disk while the pass
    goes on, and its ``fsync`` at the end waits for the tail only (measured: 25-40 ms of fsync for a 50 MB segment,
    10 ms after). Durability still comes from that fsync alone; where the call does not exist, nothing happens."""
    if _SYNC_RANGE is not None and length > 0:
        _SYNC_RANGE(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


class GroupWriter:
    """The cleaned segment of one group, in the scratch directory: batches appended in order, a chunk of at least
    ``io_buffer_bytes`` at a time, then ``finish`` moves its files to ``<base>.*.cleaned``."""

    def __init__(self, task: CleanTask, group: list[SegmentSummary], scratch: Path, stats: CleanStats,
                 throttle: Throttler) -> None:
        self.task = task
        self.group = group
        self.scratch = scratch
        self.stats = stats
        self.throttle = throttle
        self.base = group[0].base_offset
        self.dest = LogSegment.create(scratch, self.base, task.config, now_ms=task.now_ms)
        self.closed = False
        self.rolled = False

    def append(self, data: bytes | memoryview, headers: list[rb.BatchHeader]) -> None:
        at = self.dest.size
        self.dest.append(data, headers)
        start_writeback(self.dest.fd, at, len(data))
        self.throttle.account(len(data))
        self.stats.bytes_written += len(data)

    def finish(self) -> CleanedSegment:
        """Roll, fsync and close the segment and move its files beside the log as ``*.cleaned``."""
        dest = self.dest
        try:
            dest.on_roll()
            self.rolled = True
            dest.flush()
            size = dest.size
        finally:
            self.close()
        directory = Path(self.task.directory)
        stem = segment_name(self.base)
        (self.scratch / (stem + TXN_INDEX_SUFFIX)).touch()  # always one: the swap must replace the old one's
        for suffix in SEGMENT_SUFFIXES:
            os.replace(self.scratch / (stem + suffix), directory / (stem + suffix + CLEANED_SUFFIX))
        return CleanedSegment(self.base, tuple(s.base_offset for s in self.group), size)

    def close(self) -> None:
        """Close the segment; one never rolled (its pass failed) is dropped with its files, without the roll's last
        time index entry, which the failure may have left inconsistent (a damaged batch's offsets)."""
        if not self.closed:
            self.closed = True
            if self.rolled:
                self.dest.close()
            else:
                self.dest.delete_files()


def _write_group(task: CleanTask, group: list[SegmentSummary], rewriter: _Rewriter, scratch: Path,
                 throttle: Throttler) -> CleanedSegment:
    """The reference rewrite of one group: the batches of its segments through ``_Rewriter``, one by one."""
    directory = Path(task.directory)
    writer = GroupWriter(task, group, scratch, rewriter.stats, throttle)
    try:
        pending: list[bytes] = []
        headers: list[rb.BatchHeader] = []
        pending_bytes = 0
        for seg in group:
            for raw, h in _batches(directory / (segment_name(seg.base_offset) + LOG_SUFFIX), seg.size,
                                   task.io_buffer_bytes, throttle):
                rewriter.stats.bytes_read += h.size
                out, entry = rewriter.batch(raw, h)
                if out is None:
                    continue
                if entry is not None:
                    writer.dest.txn_index.append(entry)
                pending.append(out)
                headers.append(rb.parse_header(out))
                pending_bytes += len(out)
                if pending_bytes >= task.io_buffer_bytes:
                    writer.append(b"".join(pending), headers)
                    pending, headers, pending_bytes = [], [], 0
        if pending:
            writer.append(b"".join(pending), headers)
        return writer.finish()
    finally:
        writer.close()


_GroupWrite = Callable[[CleanTask, list[SegmentSummary], "_Rewriter", Path, Throttler], CleanedSegment]


def clean(task: CleanTask, *, compiled: bool = True) -> CleanResult:
    """Clean the log ``task`` describes into ``*.cleaned`` files (see the module docstring). Raises
    ``CorruptRecordError`` (a damaged batch: the log is left alone) or ``OSError``; the scratch files are
    removed either way. ``compiled``: the numba kernel does the uncompressed data batches (``compiled_pass``);
    False runs the reference Python code alone (the tests compare both)."""
    started = time.monotonic()
    stats = CleanStats()
    throttle = Throttler(task.max_io_bytes_per_second, stats)
    aborted = _Aborted(task.aborted)
    if not compiled:
        offset_map = _offset_map(OffsetMap, task.memory_bytes, task.load_factor)
        end = build_offset_map(task, offset_map, aborted, stats, throttle)
        cleaned = _rewrite(task, offset_map, aborted, stats, throttle, end, _write_group)
    else:
        from odradek.storage.cleaner import compiled_pass  # numba: imported by workers only

        compiled_map = _offset_map(compiled_pass.CompiledOffsetMap, task.memory_bytes, task.load_factor)
        with compiled_pass.CompiledPass(task, compiled_map, aborted, stats, throttle) as run:
            end = run.build_offset_map()
            cleaned = _rewrite(task, compiled_map, aborted, stats, throttle, end, run.write_group)
    stats.seconds = time.monotonic() - started
    return CleanResult(cleaned, end, stats)


def _rewrite(task: CleanTask, offset_map: KeyOffsets, aborted: _Aborted, stats: CleanStats, throttle: Throttler,
             end: int, write_group: _GroupWrite) -> list[CleanedSegment]:
    """Steps 2-4 over the segments below ``end``, a group at a time (``write_group``)."""
    stats.map_utilization = offset_map.utilization()
    todo = [s for s in task.segments if s.base_offset < end]
    groups = group_by_size(todo, max_size=task.config.segment_bytes, max_index_bytes=task.config.segment_index_bytes,
                           first_uncleanable=2**63 - 1)
    directory = Path(task.directory)
    scratch = directory / SCRATCH_DIR
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    rewriter = _Rewriter(task, offset_map, aborted, stats)
    cleaned: list[CleanedSegment] = []
    try:
        for group in groups:
            cleaned.append(write_group(task, group, rewriter, scratch, throttle))
        fsync_directory(directory)
    except BaseException:
        for c in cleaned:
            discard_cleaned(directory, c.base_offset)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return cleaned


def discard_cleaned(directory: Path, base_offset: int) -> None:
    stem = segment_name(base_offset)
    for suffix in SEGMENT_SUFFIXES:
        (directory / (stem + suffix + CLEANED_SUFFIX)).unlink(missing_ok=True)
