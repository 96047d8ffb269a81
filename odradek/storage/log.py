"""A partition log: an ordered list of segments with start, end and high-watermark offsets.

Invariants:
- Offsets are dense and strictly increasing: every append gets ``[next_offset, next_offset + n)``.
- ``log_start_offset <= high_watermark <= next_offset``; ``recovery_point <= next_offset`` and every
  byte below the recovery point has been fsynced.
- The segment list is an immutable tuple replaced on roll, retention and truncation (copy-on-write),
  so a reader holding an older tuple keeps working while segments are added or deleted. Deleted
  segments are renamed ``*.deleted`` and unlinked only after ``file.delete.delay.ms``, so regions
  already handed to a reader stay valid.
- Appends validate every batch before writing any byte; a refused append or a failed write leaves
  the log exactly as it was (offsets included).
- Writers (append, roll, retention, truncation) serialize on ``_lock``; reads take no lock.
- An I/O failure of a writer (a ``StorageError`` caused by an ``OSError``: EIO, ENOSPC...) is reported to
  ``on_io_error`` before it is raised: the log manager takes the whole log directory offline, as Kafka's
  ``LogDirFailureChannel`` does (``manager.py``).

Compaction (``cleaner/``): the cleaner plans from ``cleaning_view`` (segments, last stable offset, aborted
transactions, live producers' last batches) and cleans files elsewhere; ``replace_with_cleaned`` swaps a cleaned
segment in for the run of segments it replaces, under ``_lock``, only if they are still the log's (crash-safe
renames: ``cleaner/swap.py``, recovered by ``open``). Offsets never change, so readers, followers and the producer
state see the same log minus superseded records. On a compacted topic a produced record without a key is refused
(INVALID_RECORD): the only look at a produced batch's records, and only there.

Transactions (with a ``ProducerStateManager``; see producer_state.py and txn_index.py):
- ``last_stable_offset`` = the first offset of the earliest transaction still ongoing (or completed
  by a marker not yet below the high watermark), capped by the high watermark and floored at the
  log start: read_committed readers see nothing at or past it.
- A marker (``append_marker``, or a control batch appended by a replica or coordinator) ends its
  producer's ongoing transaction; an ABORT adds an entry to the transaction index of the segment it
  was written to. Every aborted transaction whose marker is in the log has an entry there.
- ``_txn_segments`` holds, in order, exactly the segments whose transaction index has entries, so
  ``aborted_transactions`` skips the others without touching them.
- After an unclean shutdown the transaction index of every recovered segment is rebuilt by replaying
  the producer state from a snapshot at or below it; a damaged index is rebuilt the same way.
"""

from __future__ import annotations

import bisect
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, NamedTuple, ParamSpec, TypeVar

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.protocol import batch as rb
from odradek.protocol.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    StorageError,
)

__all__ = ["AppendInfo", "Log", "RecordListTooLargeError", "TimestampOffset", "parse_log_dir_name"]
from odradek.protocol.records import ControlType, build_control_batch, decode_records, iter_batches
from odradek.storage.cleaner import swap as cleaner_swap
from odradek.storage.cleaner.batch_filter import KEY, batch_body, scan_records
from odradek.storage.cleaner.clean import CLEANED_SUFFIX, CleanedSegment, discard_cleaned
from odradek.storage.cleaner.planning import Cleanable, SegmentSummary, cleanable
from odradek.storage.config import LogConfig
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.producer_state import (
    ActiveProducer,
    CompletedTxn,
    DuplicateBatch,
    LoggedBatch,
    NoProducerState,
    ProducerStateHook,
    TxnMarker,
    read_marker,
)
from odradek.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    FileRegion,
    LogSegment,
    segment_name,
)
from odradek.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
_MAX_IOVEC = 1024  # IOV_MAX on Linux: buffers one pwritev call accepts
_HEADER_SCAN_BYTES = 1 << 20  # chunk read while rebuilding producer state

_P = ParamSpec("_P")
_R = TypeVar("_R")


def is_io_error(e: BaseException) -> bool:
    """Whether ``e`` is a failure of the disk (not of the request): an ``OSError``, or a ``StorageError``
    raised because of one."""
    return isinstance(e, OSError) or (isinstance(e, StorageError) and isinstance(e.__cause__, OSError))


def _reports_io_errors(method: Callable[Concatenate[Log, _P], _R]) -> Callable[Concatenate[Log, _P], _R]:
    """Tell ``Log.on_io_error`` about a disk failure of ``method`` before raising it."""

    @functools.wraps(method)
    def guarded(self: Log, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except (StorageError, OSError) as e:
            if self.on_io_error is not None and is_io_error(e):
                self.on_io_error(e)
            raise

    return guarded


class AppendInfo(NamedTuple):
    """Where an append landed (a NamedTuple: it is built once per produce on the hot path)."""

    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    record_count: int
    size: int


@dataclass(frozen=True, slots=True)
class CleaningView:
    """What the cleaner needs to plan a pass over a log, taken at one moment (``Log.cleaning_view``)."""

    segments: tuple[LogSegment, ...]
    summaries: tuple[SegmentSummary, ...]
    log_start_offset: int
    last_stable_offset: int
    aborted: tuple[AbortedTxn, ...]
    producer_last_offsets: dict[int, int]

    def cleanable(self, checkpoint: int | None, now_ms: int, min_compaction_lag_ms: int) -> Cleanable:
        """What a pass may clean (``planning.cleanable``), from the cleaner's checkpoint."""
        return cleanable(self.summaries, log_start=self.log_start_offset, checkpoint=checkpoint,
                         last_stable_offset=self.last_stable_offset, now_ms=now_ms,
                         min_compaction_lag_ms=min_compaction_lag_ms)


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int


def _markers_of(records: bytes | bytearray | memoryview, headers: Sequence[rb.BatchHeader]
                ) -> list[TxnMarker | None] | None:
    """What each control batch of a record set says (None for other batches); None without any."""
    if not any(h.attributes & rb.CONTROL_BIT for h in headers):
        return None
    view = memoryview(records)
    out: list[TxnMarker | None] = []
    pos = 0
    for h in headers:
        out.append(read_marker(view[pos : pos + h.size]) if h.attributes & rb.CONTROL_BIT else None)
        pos += h.size
    return out


def _check_keys(records: bytes | bytearray | memoryview, headers: Sequence[rb.BatchHeader], name: str) -> None:
    """A compacted topic refuses records without a key (Kafka's LogValidator): they could never be compacted.
    The only record-by-record look at a produced batch, and only for compacted topics."""
    view = memoryview(records)
    pos = 0
    for h in headers:
        raw = view[pos : pos + h.size]
        pos += h.size
        if any(r[KEY] is None for r in scan_records(batch_body(raw, h), h)):
            raise InvalidRecordError(f"Compacted topic cannot accept message without key in topic partition {name}: "
                                     "give every record a key, or use cleanup.policy=delete")


def parse_log_dir_name(name: str) -> tuple[str, int] | None:
    """``orders-3`` -> (``orders``, 3); None if the name is not a partition directory."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


class Log:
    """The log of one topic partition. Open with ``Log.open``."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        segments: Sequence[LogSegment],
        *,
        clock: Clock,
        log_start_offset: int,
        recovery_point: int,
        high_watermark: int,
        producer_state: ProducerStateHook,
        schedule: Callable[[Callable[[], None]], None] | None,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self.producer_state = producer_state
        self._schedule = schedule
        self._lock = threading.RLock()
        self._segments: tuple[LogSegment, ...] = tuple(segments)
        self._bases: tuple[int, ...] = tuple(s.base_offset for s in segments)
        # The segments whose transaction index has entries, and their base offsets (replaced whole).
        self._txn_segments: tuple[tuple[LogSegment, ...], tuple[int, ...]] = ((), ())
        self._refresh_txn_segments()
        self._completions_pending = False  # completed transactions wait for the high watermark
        self.next_offset = self._segments[-1].next_offset
        self.log_start_offset = min(max(log_start_offset, self._bases[0]), self.next_offset)
        self.recovery_point = min(recovery_point, self.next_offset)
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.next_offset)
        self.leader_epochs = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT)
        self.leader_epochs.truncate_from_end(self.next_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        self.unflushed_messages = 0
        self.last_flush_ms = clock.milliseconds()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.closed = False
        # called (from whichever thread saw it) with a disk failure before it is raised
        self.on_io_error: Callable[[BaseException], None] | None = None

    # -- opening and recovery ----------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        clean_shutdown: bool = False,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        producer_state: ProducerStateHook | None = None,
        schedule: Callable[[Callable[[], None]], None] | None = None,
    ) -> Log:
        """Open (or create) the log in ``directory``, named ``<topic>-<partition>``.

        After a clean shutdown the files are trusted; otherwise every segment from the one holding
        ``recovery_point`` on is scanned, cut at the first invalid batch, and its indexes rebuilt.
        """
        parsed = parse_log_dir_name(directory.name)
        if parsed is None:
            raise StorageError(f"{directory} is not a partition directory (expected <topic>-<partition>)")
        topic, partition = parsed
        producer_state = producer_state or NoProducerState()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            cleaner_swap.recover(directory)  # a crash during the cleaner's swap: finish or undo it first
            for stale in directory.iterdir():
                if stale.name.endswith((DELETED_SUFFIX, ".tmp")):
                    stale.unlink(missing_ok=True)
            bases = sorted(int(p.name[: -len(LOG_SUFFIX)]) for p in directory.glob("*" + LOG_SUFFIX))
            for p in directory.iterdir():  # indexes whose segment file is gone
                if p.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX) and int(p.stem) not in bases:
                    p.unlink()
        except (OSError, ValueError) as e:
            raise StorageError(f"cannot open log directory {directory}: {e}") from e
        now = clock.milliseconds()
        if not bases:
            first = LogSegment.create(directory, max(log_start_offset, 0), config, now_ms=now)
            fresh = cls(
                directory, topic, partition, config, [first], clock=clock,
                log_start_offset=first.base_offset, recovery_point=first.base_offset,
                high_watermark=first.base_offset, producer_state=producer_state, schedule=schedule,
            )
            fresh._load_producer_state(set())
            return fresh
        segments = [LogSegment(directory, b, config, now_ms=now) for b in bases]
        recovered_from: int | None = None
        if clean_shutdown:
            for seg in segments:
                seg.load_clean()
        else:
            segments, recovered_from = cls._recover(directory, segments, recovery_point)
        segments[-1].make_active()
        rebuild = cls._txn_indexes_to_rebuild(directory, segments, recovered_from)
        opened = cls(
            directory, topic, partition, config, segments, clock=clock,
            log_start_offset=log_start_offset, recovery_point=recovery_point,
            high_watermark=high_watermark, producer_state=producer_state, schedule=schedule,
        )
        opened._load_producer_state(rebuild)
        if not clean_shutdown:
            opened.flush()
        for seg in segments:
            if seg.base_offset in rebuild:
                seg.txn_index.flush()
        return opened

    @staticmethod
    def _txn_indexes_to_rebuild(directory: Path, segments: list[LogSegment], recovered_from: int | None) -> set[int]:
        """Base offsets of the segments whose transaction index must be rebuilt: those recovered (their
        index was emptied) and those whose index fails its check (emptied here)."""
        rebuild = {s.base_offset for s in segments if recovered_from is not None and s.base_offset >= recovered_from}
        for i, seg in enumerate(segments):
            if seg.base_offset in rebuild:
                continue
            end = segments[i + 1].base_offset if i + 1 < len(segments) else seg.next_offset
            problem = seg.txn_index.check(end)
            if problem is not None:
                log.warning("%s: transaction index %s cannot be trusted (%s); rebuilding it from the log",
                            directory.name, seg.txn_index.path.name, problem)
                seg.txn_index.reset()
                rebuild.add(seg.base_offset)
        return rebuild

    def _load_producer_state(self, rebuild: set[int]) -> None:
        """Load the producer state; refill the transaction indexes of the segments in ``rebuild`` from
        the transactions completed while replaying from a snapshot at or below the first of them."""
        state = self.producer_state
        state.on_high_watermark(self.high_watermark)
        if not rebuild:
            state.load(self.log_start_offset, self.next_offset, self.state_batches)
        else:
            segments, bases = self._segments, self._bases

            def index(txn: CompletedTxn) -> None:
                if txn.aborted:
                    seg = segments[max(bisect.bisect_right(bases, txn.last_offset) - 1, 0)]
                    if seg.base_offset in rebuild:
                        seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                                        txn.last_stable_offset))

            state.load(self.log_start_offset, self.next_offset, self.state_batches, replay_from=min(rebuild),
                       on_completed=index)
            self._refresh_txn_segments()
        self._completions_pending = state.on_high_watermark(self.high_watermark)

    @staticmethod
    def _recover(
        directory: Path, segments: list[LogSegment], recovery_point: int
    ) -> tuple[list[LogSegment], int | None]:
        """Scan the segments from the one holding ``recovery_point``; the kept segments, and the base
        offset of the first one scanned (its transaction index and those after it were emptied)."""
        kept: list[LogSegment] = []
        recovered_from: int | None = None
        for i, seg in enumerate(segments):
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if next_base is not None and next_base <= recovery_point:
                seg.load_clean()
                kept.append(seg)
                continue
            if recovered_from is None:
                recovered_from = seg.base_offset
            cut = seg.recover()
            kept.append(seg)
            if cut:
                log.warning("%s: cut %d invalid bytes from the tail of %s", directory.name, cut, seg.log_path.name)
                for dropped in segments[i + 1 :]:
                    log.warning("%s: dropped segment %s after the damaged one", directory.name,
                                dropped.log_path.name)
                    dropped.delete_files()
                break
        # An empty segment can only be the last one; drop empty ones before it.
        while len(kept) > 1 and kept[-1].size == 0 and kept[-2].next_offset > kept[-1].base_offset:
            kept.pop().delete_files()
        return kept, recovered_from

    # -- properties ------------------------------------------------------------------------------

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed topic config from the next append on (as Kafka does): the active segment
        decides when to roll with its own copy, so it gets the new one too."""
        with self._lock:
            self.config = config
            self._segments[-1].config = config

    def _set_segments(self, segments: Sequence[LogSegment]) -> None:
        self._segments = tuple(segments)
        self._bases = tuple(s.base_offset for s in segments)
        self._refresh_txn_segments()

    def _refresh_txn_segments(self) -> None:
        txn = tuple(s for s in self._segments if s.txn_index.count)
        self._txn_segments = (txn, tuple(s.base_offset for s in txn))

    # -- appending -------------------------------------------------------------------------------

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int | None = None,
        from_client: bool = True,
        assign_offsets: bool = True,
    ) -> AppendInfo:
        """Append a record set (one or more v2 batches) and return the offsets it received.

        ``assign_offsets=False`` is for replicas: batches keep their offsets, which must follow on, and the
        producer state follows them without judging them (their leader did, as Kafka's replication origin).
        Control batches (``from_client=False`` only) update the producer state as ``append_marker`` does.
        Raises a ``KafkaError`` and writes nothing if any batch is invalid.
        """
        cfg = self.config
        headers = rb.validate_record_set(records, max_batch_bytes=cfg.max_message_bytes, from_client=from_client)
        total = len(records)
        if total > cfg.segment_bytes:
            raise RecordListTooLargeError(
                f"record set of {total} bytes is larger than segment.bytes={cfg.segment_bytes}"
            )
        if cfg.compact and from_client:
            _check_keys(records, headers, self.name)
        markers = None if from_client else _markers_of(records, headers)
        return self._append(records, headers, markers, leader_epoch, assign_offsets)

    def append_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, *,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Write a COMMIT or ABORT marker for the producer's transaction in this partition (stamped with
        the log clock's time) and end that transaction. A marker for a producer with no ongoing
        transaction here is written too (as Kafka does) and only updates its epochs.

        Raises ``InvalidProducerEpochError`` if ``producer_epoch`` is older than the producer's current
        epoch, ``TransactionCoordinatorFencedError`` if ``coordinator_epoch`` is older than the one of
        the producer's last marker; nothing is written then.
        """
        if producer_id < 0:
            raise ValueError(f"a transaction marker needs a producer id, not {producer_id}")
        batch = bytearray(build_control_batch(
            ControlType.COMMIT if commit else ControlType.ABORT, producer_id=producer_id,
            producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch, timestamp=self.clock.milliseconds(),
        ))
        return self._append(batch, [rb.parse_header(batch)], [TxnMarker(commit, coordinator_epoch)], leader_epoch,
                            True)

    @_reports_io_errors
    def _append(
        self,
        records: bytes | bytearray | memoryview,
        headers: list[rb.BatchHeader],
        markers: list[TxnMarker | None] | None,
        leader_epoch: int | None,
        assign_offsets: bool,
    ) -> AppendInfo:
        cfg = self.config
        total = len(records)
        data, targets = self._writable_batches(records, headers, assign_offsets)
        with self._lock:
            if self.closed:
                raise StorageError(f"log {self.name} is closed")
            now = self.clock.milliseconds()
            if not cfg.log_append_time and assign_offsets:
                self._check_timestamps(headers, now)
            try:
                if assign_offsets:  # a replica's batches were validated by their leader: mirror them as they are
                    self.producer_state.validate_append(headers, markers)
            except DuplicateBatch as dup:  # a retry whose first response was lost: the original offsets
                return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp if cfg.log_append_time else -1,
                                  dup.timestamp, 0, 0)
            if assign_offsets:
                headers = self._assign_offsets(targets, headers, leader_epoch, now)
            else:
                self._check_replicated_offsets(headers)
                for h in headers:  # a follower learns epochs from the leader's batches
                    latest = self.leader_epochs.latest_epoch
                    if h.partition_leader_epoch >= 0 and (latest is None or h.partition_leader_epoch > latest):
                        self.leader_epochs.assign(h.partition_leader_epoch, h.base_offset)
            if len(headers) == 1:
                count, max_timestamp = headers[0].record_count, headers[0].max_timestamp
            else:
                count = sum(h.record_count for h in headers)
                max_timestamp = max(h.max_timestamp for h in headers)
            segment = self._maybe_roll(total, headers[-1].last_offset, now, max_timestamp)
            segment.append(data, headers)
            first, last = headers[0].base_offset, headers[-1].last_offset
            completed = self.producer_state.on_append(headers, markers)
            if completed:
                self._index_completed(completed, segment, first)
            self.next_offset = last + 1
            if leader_epoch is not None:
                latest = self.leader_epochs.latest_epoch
                if latest is None or leader_epoch > latest:
                    self.leader_epochs.assign(leader_epoch, first)
            self.unflushed_messages += count
            if self.unflushed_messages >= cfg.flush_messages:
                self.flush()
        return AppendInfo(first, last, now if cfg.log_append_time else -1, max_timestamp, count, total)

    def _index_completed(self, completed: Sequence[CompletedTxn], segment: LogSegment, first: int) -> None:
        """Record the aborts among ``completed`` (just written to ``segment`` from ``first``) in its
        transaction index. If that fails, the append is undone: the batches are cut off again and the
        producer state rebuilt, so the log stays as it was."""
        had_entries = segment.txn_index.count > 0
        try:
            for txn in completed:
                if txn.aborted:
                    segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                                        txn.last_stable_offset))
        except StorageError:
            segment.truncate_to(first)
            self.producer_state.truncate(self.log_start_offset, self.next_offset, self.state_batches)
            self._refresh_txn_segments()
            raise
        if not had_entries and segment.txn_index.count:
            self._refresh_txn_segments()
        self._completions_pending = self.producer_state.on_high_watermark(self.high_watermark)

    def _check_timestamps(self, headers: Sequence[rb.BatchHeader], now: int) -> None:
        before, after = self.config.message_timestamp_before_max_ms, self.config.message_timestamp_after_max_ms
        for h in headers:
            if h.max_timestamp - now > after or now - h.base_timestamp > before:
                raise InvalidTimestampError(
                    f"batch timestamps {h.base_timestamp}..{h.max_timestamp} are outside the accepted window "
                    f"(now {now}, message.timestamp.before.max.ms={before}, "
                    f"message.timestamp.after.max.ms={after}): check the producer's clock"
                )

    def _writable_batches(
        self, records: bytes | bytearray | memoryview, headers: list[rb.BatchHeader], assign_offsets: bool
    ) -> tuple[bytes | bytearray | memoryview | list[bytearray | memoryview], list[tuple[bytearray, int]]]:
        """What to write, and where each batch's header can be patched: (buffer, position) per batch.

        A bytearray is patched in place. Immutable input is not copied whole: each batch's 61-byte
        header is copied and patched, and headers and bodies are written together with pwritev —
        unless LogAppendTime needs the CRC recomputed over the whole batch, or there are more
        batches than one pwritev call takes.
        """
        if not assign_offsets:
            return records, []
        if isinstance(records, bytearray):
            buf = records
        elif self.config.log_append_time or 2 * len(headers) > _MAX_IOVEC:
            buf = bytearray(records)
        else:
            view = memoryview(records)
            parts: list[bytearray | memoryview] = []
            targets = []
            pos = 0
            for h in headers:
                head = bytearray(view[pos : pos + rb.HEADER_SIZE])
                parts += (head, view[pos + rb.HEADER_SIZE : pos + h.size])
                targets.append((head, 0))
                pos += h.size
            return parts, targets
        targets, pos = [], 0
        for h in headers:
            targets.append((buf, pos))
            pos += h.size
        return buf, targets

    def _assign_offsets(
        self, targets: list[tuple[bytearray, int]], headers: list[rb.BatchHeader], leader_epoch: int | None,
        now: int,
    ) -> list[rb.BatchHeader]:
        offset = self.next_offset
        out = []
        append_time = self.config.log_append_time
        for h, (buf, pos) in zip(headers, targets, strict=True):
            rb.set_base_offset(buf, pos, offset)
            epoch = h.partition_leader_epoch
            if leader_epoch is not None:
                rb.set_leader_epoch(buf, pos, leader_epoch)
                epoch = leader_epoch
            if append_time:
                rb.set_log_append_time(buf, pos, h.size, now)
                h = h._replace(max_timestamp=now, attributes=h.attributes | rb.TIMESTAMP_TYPE_BIT)
            out.append(rb.BatchHeader(offset, h[1], epoch, *h[3:]))
            offset += h.last_offset_delta + 1
        return out

    def _check_replicated_offsets(self, headers: Sequence[rb.BatchHeader]) -> None:
        expected = self.next_offset
        for h in headers:
            if h.base_offset < expected:
                raise InvalidRecordError(
                    f"replicated batch at offset {h.base_offset} does not follow the log end {expected}"
                )
            expected = h.next_offset

    def _maybe_roll(self, incoming: int, last_offset: int, now: int, max_timestamp: int | None = None) -> LogSegment:
        active = self._segments[-1]
        overflow = active.size and last_offset - active.base_offset > 0x7FFFFFFF
        if active.needs_roll(incoming, now, max_timestamp) or overflow:
            return self.roll()
        return active

    @_reports_io_errors
    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (no-op if the active one is empty)."""
        with self._lock:
            old = self._segments[-1]
            if not old.size:
                return old
            now = self.clock.milliseconds()
            new = LogSegment.create(self.directory, self.next_offset, self.config, now_ms=now)
            old.on_roll()
            self._set_segments((*self._segments, new))
            self.producer_state.take_snapshot(new.base_offset)
            upto = new.base_offset
            if self._schedule is not None:
                self._schedule(lambda: self.flush(upto))
            return new

    # -- reading ---------------------------------------------------------------------------------

    def batch_headers(self, from_offset: int) -> Iterator[rb.BatchHeader]:
        """Headers of the batches from the one holding ``from_offset`` to the log end. Reads whole
        chunks of the segment files; batches are CRC-checked."""
        for _data, _pos, header in self._scan_batches(from_offset):
            yield header

    def state_batches(self, from_offset: int) -> Iterator[LoggedBatch]:
        """``(header, marker)`` of the batches from the one holding ``from_offset`` to the log end, for
        rebuilding producer state: ``marker`` is what a transaction marker says, else None. Only
        control batches are decoded (one small record each)."""
        for data, pos, header in self._scan_batches(from_offset):
            if not header.attributes & rb.CONTROL_BIT:
                yield header, None
                continue
            try:
                marker = read_marker(memoryview(data)[pos : pos + header.size])
            except KafkaError as e:
                log.warning("%s: control batch at offset %d is unreadable (%s); its transaction stays open",
                            self.name, header.base_offset, e)
                marker = None
            yield header, marker

    def _scan_batches(self, from_offset: int) -> Iterator[tuple[bytes, int, rb.BatchHeader]]:
        offset = max(from_offset, self.log_start_offset)
        end = self.next_offset
        while offset < end:
            region = self.read(offset, _HEADER_SCAN_BYTES)
            if region is None:
                return
            data = region.read_bytes()
            last = None
            for pos, header in iter_batches(data, allow_partial_tail=True):
                last = header
                yield data, pos, header
            if last is None or last.next_offset <= offset:
                return
            offset = last.next_offset

    def _check_range(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.next_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.name}: the log holds "
                f"[{self.log_start_offset}, {self.next_offset})",
                offset=offset,
                log_start_offset=self.log_start_offset,
                log_end_offset=self.next_offset,
            )

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one: bool = True
    ) -> FileRegion | None:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one batch
        when ``min_one``), none at or past ``max_offset``. None when nothing is there yet.

        Raises ``OffsetOutOfRangeError`` below the log start or above the log end.
        """
        segments, bases = self._segments, self._bases
        self._check_range(offset)
        if offset == self.next_offset:
            return None
        i = max(bisect.bisect_right(bases, offset) - 1, 0)
        while i < len(segments):
            seg = segments[i]
            max_position = None
            if max_offset is not None:
                if max_offset <= max(seg.base_offset, offset):
                    return None
                if i + 1 == len(segments) or max_offset < bases[i + 1]:
                    max_position = seg.position_of(max_offset)
            region = seg.read(offset, max_bytes, max_position=max_position, min_one=min_one)
            if region is not None:
                return region
            if seg.translate_offset(offset) is not None:
                return None  # the batch holding offset is here but does not fit: never skip past it
            i += 1
        return None

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record with timestamp >= ``timestamp`` at or after the log start (ListOffsets)."""
        for seg in self._segments:
            if seg.largest_timestamp < timestamp or seg.max_timestamp < 0:
                continue
            found = seg.find_timestamp(timestamp)
            if found is None:
                continue
            # As Kafka's searchForTimestamp: go on past batches whose matches lie below the log start.
            for pos, header in seg.iter_headers(found[0]):
                if header.max_timestamp < timestamp or header.last_offset < self.log_start_offset:
                    continue
                for record in decode_records(os.pread(seg.fd, header.size, pos)):
                    if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                        return TimestampOffset(record.timestamp, record.offset)
        return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """The record with the largest timestamp (ListOffsets MAX_TIMESTAMP); earliest on ties."""
        best: LogSegment | None = None
        for seg in self._segments:
            if seg.size and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None or best.max_timestamp < 0:
            return None
        found = best.translate_offset(best.offset_of_max_timestamp)
        if found is None:
            return None
        pos, header = found
        for record in decode_records(os.pread(best.fd, header.size, pos)):
            if record.timestamp == best.max_timestamp:
                return TimestampOffset(record.timestamp, record.offset)
        return TimestampOffset(best.max_timestamp, header.last_offset)

    # -- offsets owned by replication --------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> int:
        self.high_watermark = min(max(offset, self.log_start_offset), self.next_offset)
        if self._completions_pending:
            self._completions_pending = self.producer_state.on_high_watermark(self.high_watermark)
        return self.high_watermark

    # -- transactions ----------------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided: read_committed readers stop here."""
        hw = self.high_watermark
        first = self.producer_state.first_unstable_offset
        if first is None or first >= hw:
            return hw
        return max(first, self.log_start_offset)

    def ongoing_transaction_first_offset(self, producer_id: int) -> int | None:
        """First offset of the producer's ongoing transaction in this partition; None if it has none."""
        return self.producer_state.ongoing_first_offset(producer_id)

    def active_producers(self) -> list[ActiveProducer]:
        """Every producer the partition keeps state for (DescribeProducers)."""
        with self._lock:
            return self.producer_state.active_producers()

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of every aborted transaction overlapping
        ``[start_offset, upper_bound_offset)``: its marker is at or after ``start_offset`` and its first
        offset below ``upper_bound_offset``.

        Reads the transaction indexes of the segments from the one holding ``start_offset`` on that
        have entries, and stops at the first entry whose last stable offset reaches the upper bound
        (Kafka's collectAbortedTransactions): later aborts began at or after it.
        """
        txn_segments, txn_bases = self._txn_segments
        out: list[tuple[int, int]] = []
        if not txn_segments or upper_bound_offset <= start_offset:
            return out
        bases = self._bases
        floor = bases[max(bisect.bisect_right(bases, start_offset) - 1, 0)]
        for seg in txn_segments[bisect.bisect_left(txn_bases, floor) :]:
            if seg.txn_index.collect(start_offset, upper_bound_offset, out):
                break
        return out

    # -- compaction (the cleaner plans from a view, cleans the files elsewhere, swaps the result in) -----------

    def cleaning_view(self) -> CleaningView:
        """The segments (the last one is active), their summaries, and the transactions and producers the
        cleaner must respect."""
        with self._lock:
            segments = self._segments
            summaries = []
            for i, seg in enumerate(segments):
                nxt = segments[i + 1].base_offset if i + 1 < len(segments) else self.next_offset
                summaries.append(SegmentSummary(seg.base_offset, nxt, seg.size, seg.index.size_bytes,
                                                seg.largest_timestamp if seg.size else -1,
                                                seg.rolling_timestamp if seg.rolling_timestamp is not None else -1))
            aborted = tuple(e for seg in self._txn_segments[0] for e in seg.txn_index.entries())
            return CleaningView(segments, tuple(summaries), self.log_start_offset, self.last_stable_offset, aborted,
                                self.producer_state.last_data_offsets())

    @_reports_io_errors
    def replace_with_cleaned(self, old: Sequence[LogSegment], cleaned: CleanedSegment) -> bool:
        """Swap the cleaned segment (its ``*.cleaned`` files, written by a cleaner worker) in for ``old``, crash-safely
        (``cleaner/swap.py``). False, with the cleaned files removed, if ``old`` are no longer the log's segments
        (truncated, deleted by retention, the log closed) while it was cleaned."""
        with self._lock:
            segments = self._segments
            try:
                i = next(k for k, s in enumerate(segments) if s is old[0])
            except StopIteration:
                i = -1
            if (self.closed or i < 0 or tuple(segments[i : i + len(old)]) != tuple(old)
                    or i + len(old) >= len(segments) or any(s.deleted for s in old)):
                discard_cleaned(self.directory, cleaned.base_offset)
                return False
            cleaned_log = self.directory / (segment_name(cleaned.base_offset) + LOG_SUFFIX + CLEANED_SUFFIX)
            try:
                written = cleaned_log.stat().st_size
            except OSError:
                written = -1
            if written != cleaned.size:  # not this pass's file (a worker that outlived its broker?): never swap it
                log.warning("%s: %s holds %d bytes, the pass wrote %d: thrown away", self.name, cleaned_log.name,
                            written, cleaned.size)
                discard_cleaned(self.directory, cleaned.base_offset)
                return False
            now = self.clock.milliseconds()
            try:
                cleaner_swap.commit(self.directory, cleaned.base_offset)
                for seg in old:
                    seg.mark_deleted()
                    self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg))
                cleaner_swap.finish(self.directory, cleaned.base_offset)
                new = LogSegment(self.directory, cleaned.base_offset, self.config, now_ms=now)
                new.load_clean()
            except OSError as e:
                raise StorageError(f"{self.name}: cannot swap in the cleaned segment {cleaned.base_offset}: {e}") from e
            self._set_segments((*segments[:i], new, *segments[i + len(old) :]))
            return True

    # -- flushing --------------------------------------------------------------------------------

    @_reports_io_errors
    def flush(self, upto: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery_point, upto) (default: the log end)."""
        with self._lock:
            end = self.next_offset if upto is None else min(upto, self.next_offset)
            if end <= self.recovery_point and upto is not None:
                return
            start = self.recovery_point
            targets = [
                s for i, s in enumerate(self._segments)
                if not s.deleted and s.base_offset < end and (
                    i + 1 == len(self._segments) or self._segments[i + 1].base_offset > start)
            ]
        for seg in targets:
            if not seg.deleted:
                seg.flush()
        with self._lock:
            self.recovery_point = max(self.recovery_point, end)
            if end >= self.next_offset:
                self.unflushed_messages = 0
            self.last_flush_ms = self.clock.milliseconds()

    def maybe_flush(self) -> None:
        """Apply ``flush.ms``: fsync if the log has unflushed data older than that."""
        if self.recovery_point < self.next_offset:
            if self.clock.milliseconds() - self.last_flush_ms >= self.config.flush_ms:
                self.flush()

    # -- retention -------------------------------------------------------------------------------

    @_reports_io_errors
    def delete_retained_segments(self, *, only_below_log_start: bool = False) -> int:
        """Delete whole segments, oldest first, that are past ``retention.ms``/``retention.bytes`` (only when
        cleanup.policy includes delete) or wholly below the log start offset. As in Kafka, never the active
        segment and never one holding offsets at or above the high watermark. Returns how many were deleted."""
        with self._lock:
            now = self.clock.milliseconds()
            segments = self._segments
            cfg = self.config
            by_size = cfg.retention_bytes >= 0 and not only_below_log_start and cfg.delete
            excess = sum(s.size for s in segments) - cfg.retention_bytes if by_size else -1
            by_time = cfg.retention_ms >= 0 and not only_below_log_start and cfg.delete
            doomed = 0
            for i, seg in enumerate(segments[:-1]):
                next_base = segments[i + 1].base_offset
                if next_base > self.high_watermark:
                    break
                below_start = next_base <= self.log_start_offset
                expired = by_time and now - seg.largest_timestamp > cfg.retention_ms
                too_big = excess >= seg.size
                if not (below_start or expired or too_big):
                    break
                excess -= seg.size
                doomed += 1
            if not doomed:
                return 0
            deleted = segments[:doomed]
            self._set_segments(segments[doomed:])
            new_start = self._segments[0].base_offset
            if new_start > self.log_start_offset:
                self.log_start_offset = new_start
                self.recovery_point = max(self.recovery_point, new_start)
            self.leader_epochs.truncate_from_start(self.log_start_offset)
            self.producer_state.truncate(self.log_start_offset, self.next_offset, self.state_batches)
            for seg in deleted:
                log.info("%s: deleting segment %s by retention", self.name, seg.log_path.name)
                seg.mark_deleted()
                self._pending_deletes.append((now + cfg.file_delete_delay_ms, seg))
        self.purge_deleted()
        return doomed

    @_reports_io_errors
    def purge_deleted(self, *, force: bool = False) -> None:
        """Unlink deleted segments whose ``file.delete.delay.ms`` has passed."""
        with self._lock:
            now = self.clock.milliseconds()
            keep = []
            for deadline, seg in self._pending_deletes:
                if force or deadline <= now:
                    seg.delete_files()
                else:
                    keep.append((deadline, seg))
            self._pending_deletes = keep

    @_reports_io_errors
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset to ``offset`` (<= high watermark)."""
        with self._lock:
            if offset < 0 or offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset} in {self.name}: it must lie in "
                    f"[0, high watermark {self.high_watermark}]",
                    offset=offset, log_start_offset=self.log_start_offset, log_end_offset=self.next_offset,
                )
            if offset > self.log_start_offset:
                self.log_start_offset = offset
                self.leader_epochs.truncate_from_start(offset)
                self.producer_state.truncate(offset, self.next_offset, self.state_batches)
        self.delete_retained_segments(only_below_log_start=True)
        return self.log_start_offset

    # -- truncation (followers) ------------------------------------------------------------------

    @_reports_io_errors
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at or after ``offset``; True if anything was removed. The leader epochs starting
        at or after ``offset`` go too, even when no batch does (an epoch this replica led without appending
        anything, as Kafka's truncateTo): a follower that kept it would send it as its last fetched epoch
        forever, and its leader would answer the same divergence forever."""
        with self._lock:
            if offset >= self.next_offset:
                self.leader_epochs.truncate_from_end(offset)
                return False
            if offset <= self.log_start_offset or offset <= self._bases[0]:
                self.truncate_fully_and_start_at(offset)
                return True
            now = self.clock.milliseconds()
            i = bisect.bisect_right(self._bases, offset) - 1
            if self._bases[i] == offset and i > 0:
                i -= 1
            keep, drop = list(self._segments[: i + 1]), self._segments[i + 1 :]
            target = keep[-1]
            if not target.index.writable:
                target.make_active()
            found = target.translate_offset(offset)
            # The new end is ``offset`` (as Kafka's truncateTo), unless the batch holding it starts below it and goes
            # whole; a compacted log may hold nothing between its last kept batch and ``offset``.
            new_end = offset if found is None else min(offset, found[1].base_offset)
            target.truncate_to(offset)
            self._set_segments(keep)
            for seg in drop:
                seg.mark_deleted()
                self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg))
            self.next_offset = max(target.next_offset, new_end)
            self._after_truncation()
            return True

    @_reports_io_errors
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log empty at ``offset``."""
        with self._lock:
            now = self.clock.milliseconds()
            old = self._segments
            for seg in old:
                seg.mark_deleted()
                self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg))
            self._set_segments([LogSegment.create(self.directory, offset, self.config, now_ms=now)])
            self.next_offset = self.log_start_offset = offset
            self.leader_epochs.clear()
            self._after_truncation()

    def _after_truncation(self) -> None:
        # Truncation removes whole batches, so the end may fall below a log start inside the last one.
        self.log_start_offset = min(self.log_start_offset, self.next_offset)
        self.high_watermark = min(max(self.high_watermark, self.log_start_offset), self.next_offset)
        self.recovery_point = min(self.recovery_point, self.next_offset)
        self.leader_epochs.truncate_from_end(self.next_offset)
        self.producer_state.on_high_watermark(self.high_watermark)
        self.producer_state.truncate(self.log_start_offset, self.next_offset, self.state_batches)
        self._completions_pending = self.producer_state.on_high_watermark(self.high_watermark)

    def remove_expired_producers(self, now_ms: int) -> None:
        with self._lock:
            gone = self.producer_state.remove_expired(now_ms)
        if gone:
            log.info("%s: forgot %d producer id(s) silent past producer.id.expiration.ms", self.name, gone)

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.producer_state.take_snapshot(self.next_offset)
            self.closed = True
            for seg in self._segments:
                seg.close()
            self.purge_deleted(force=True)

    def delete(self) -> None:
        """Close and remove every file of this log (the directory itself is left to the caller)."""
        with self._lock:
            self.closed = True
            for seg in self._segments:
                seg.delete_files()
            self.purge_deleted(force=True)
