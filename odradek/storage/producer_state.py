"""Producer state of one partition: what idempotent and transactional producers last wrote.

For every producer id that wrote to the partition the log keeps, as Kafka's ProducerStateManager
does: the producer epoch, the sequence ranges and offsets of its last 5 batches (a producer has at
most 5 requests in flight), the time of its last write, the coordinator epoch of its last
transaction marker, and the first offset of its ongoing transaction in this partition, if any. The
log consults it at these points:

- ``validate_append(headers, markers)`` before anything is written. A batch whose epoch is older
  than the producer's is refused (INVALID_PRODUCER_EPOCH); a batch equal to one of the last 5 is a
  retry whose response was lost: ``DuplicateBatch`` carries the original offsets and nothing is
  written; a sequence that does not follow the last one is OUT_OF_ORDER_SEQUENCE_NUMBER. A new epoch
  must start at sequence 0. A producer the partition has no state for (never seen, or expired) is
  accepted at any sequence, as Kafka does since 2.5 (KIP-360). A non-transactional batch from a
  producer with an ongoing transaction is INVALID_TXN_STATE. A transaction marker (a COMMIT or
  ABORT control batch, ``markers[i]`` for ``headers[i]``) older than the producer's epoch is
  INVALID_PRODUCER_EPOCH, and one whose coordinator epoch is older than the last marker's is
  TRANSACTION_COORDINATOR_FENCED.
- ``on_append(headers, markers)`` once the batches are written, with their offsets. A transactional
  data batch from a producer without an ongoing transaction starts one at its base offset; a marker
  ends it (a marker for a producer with no ongoing transaction changes only epochs) and is returned
  as a ``CompletedTxn`` for the log's transaction index.
- ``first_unstable_offset``: the first offset of the earliest transaction that is ongoing, or
  completed by a marker not yet below the high watermark (``on_high_watermark``) — the log's last
  stable offset is this, capped by the high watermark. Kept up to date on every change, read in O(1).
- ``take_snapshot(offset)`` when a segment rolls and when the log closes: the state as of
  ``offset`` goes to ``<offset, 20 digits>.snapshot`` (Kafka's name; written atomically).
- ``load(log_start, log_end, batches_from)`` when the log opens: the newest snapshot at or below the
  log end (or below ``replay_from``, when the log rebuilds transaction indexes from there), then the
  batches from there to the end, so a restart reads at most one segment's headers instead of the
  whole log. Without a snapshot the batches from the log start are read. Every transaction completed
  during the replay is passed to ``on_completed``.
- ``truncate(log_start, log_end, batches_from)`` after the log end moved back or its start moved on:
  snapshots outside the log are removed; state newer than the end is rebuilt as in ``load``.
- ``remove_expired(now)``: producers silent longer than ``producer.id.expiration.ms`` are forgotten,
  except those with an ongoing transaction.

Snapshot file (big-endian): version int16 (1), crc uint32 (CRC-32C of everything after it), count
int32, then per producer: producer_id int64, epoch int16, last_sequence int32, last_offset int64,
offset_delta int32, timestamp int64, coordinator_epoch int32, current_txn_first_offset int64 —
Kafka's layout without its schema framing. A snapshot keeps each producer's last batch only (as
Kafka's does), so after a restart the retry window is one batch deep until new batches arrive.

Invariants:
- A batch without a producer id (-1) is never checked or recorded.
- ``validate_append`` changes nothing; state changes only in ``on_append``, ``on_high_watermark``,
  ``load`` and ``truncate``.
- ``_ongoing`` maps the first offset of every ongoing transaction to its producer, in increasing
  offset order (a transaction starts at the log end, after every one already open), so the earliest
  is its first key; it agrees with the producers' ``current_txn_first_offset``. ``_completing`` holds
  the transactions completed by a marker at or above the high watermark, in marker order (few: a
  marker waits there only until the high watermark passes it).
- A damaged or unreadable snapshot is skipped with a warning (the log is read from further back);
  it never stops the log from opening.
"""

from __future__ import annotations

import logging
import struct
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

from crc32c import crc32c

from odradek.protocol.batch import CONTROL_BIT, NO_PRODUCER_ID, NO_SEQUENCE, TRANSACTIONAL_BIT, BatchHeader
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import ControlType, decode_records, parse_control_key, parse_end_txn_marker
from odradek.storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
RETRY_WINDOW = 5  # batches remembered per producer: Kafka's max in-flight requests for idempotence
SNAPSHOTS_KEPT = 2
NO_EPOCH = -1
_VERSION = 1
_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")



class TxnMarker(NamedTuple):
    """What a transaction marker (a COMMIT or ABORT control batch) says."""

    commit: bool
    coordinator_epoch: int


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker: its first offset, the marker's offset and the outcome."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool
    last_stable_offset: int  # the LSO once it completed: the next ongoing transaction's start, or marker + 1


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """One producer's state as DescribeProducers reports it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no ongoing transaction


LoggedBatch = tuple[BatchHeader, TxnMarker | None]
"""A batch of the log as the producer state replays it: its header, and what it says if a marker."""

BatchesFrom = Callable[[int], Iterable[LoggedBatch]]
OnCompleted = Callable[[CompletedTxn], None]
_NO_COMPLETIONS: tuple[CompletedTxn, ...] = ()


class OutOfOrderSequenceError(KafkaError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(KafkaError):
    """A producer with an ongoing transaction wrote a non-transactional batch."""

    code = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(KafkaError):
    """A marker from a coordinator epoch older than one the partition already saw (a zombie coordinator)."""

    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


def read_marker(batch: bytes | bytearray | memoryview) -> TxnMarker | None:
    """The marker a control batch (exactly one batch) holds; None for other control records (or none).

    Raises ``CorruptRecordError`` if the batch or its control record is malformed.
    """
    records = decode_records(batch)
    if not records:  # every record cleaned away (compaction): nothing to apply
        return None
    kind = parse_control_key(records[0].key).type
    if kind not in (ControlType.COMMIT, ControlType.ABORT):
        return None
    return TxnMarker(kind == ControlType.COMMIT, parse_end_txn_marker(records[0].value))


class DuplicateBatch(Exception):
    """A retried batch already in the log: answer with its original offsets, write nothing."""

    def __init__(self, first_offset: int, last_offset: int, timestamp: int) -> None:
        super().__init__(f"duplicate of the batch at offsets {first_offset}..{last_offset}")
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.timestamp = timestamp


class ProducerStateHook(Protocol):
    first_unstable_offset: int | None

    def validate_append(self, headers: Sequence[BatchHeader],
                        markers: Sequence[TxnMarker | None] | None = None) -> None: ...

    def on_append(self, headers: Sequence[BatchHeader],
                  markers: Sequence[TxnMarker | None] | None = None) -> Sequence[CompletedTxn]: ...

    def on_high_watermark(self, high_watermark: int) -> bool: ...

    def ongoing_first_offset(self, producer_id: int) -> int | None: ...

    def active_producers(self) -> list[ActiveProducer]: ...

    def last_data_offsets(self) -> dict[int, int]: ...

    def take_snapshot(self, offset: int) -> None: ...

    def load(self, log_start: int, log_end: int, batches_from: BatchesFrom, *, replay_from: int | None = None,
             on_completed: OnCompleted | None = None) -> None: ...

    def truncate(self, log_start: int, log_end: int, batches_from: BatchesFrom) -> None: ...

    def remove_expired(self, now_ms: int) -> int: ...


class NoProducerState:
    """Keeps nothing: every append is accepted and no transaction is tracked (logs of tools and tests
    that do not need it): the last stable offset is the high watermark."""

    first_unstable_offset: int | None = None

    def validate_append(self, headers: Sequence[BatchHeader],
                        markers: Sequence[TxnMarker | None] | None = None) -> None:
        return None

    def on_append(self, headers: Sequence[BatchHeader],
                  markers: Sequence[TxnMarker | None] | None = None) -> Sequence[CompletedTxn]:
        return _NO_COMPLETIONS

    def on_high_watermark(self, high_watermark: int) -> bool:
        return False

    def ongoing_first_offset(self, producer_id: int) -> int | None:
        return None

    def active_producers(self) -> list[ActiveProducer]:
        return []

    def last_data_offsets(self) -> dict[int, int]:
        return {}

    def take_snapshot(self, offset: int) -> None:
        return None

    def load(self, log_start: int, log_end: int, batches_from: BatchesFrom, *, replay_from: int | None = None,
             on_completed: OnCompleted | None = None) -> None:
        return None

    def truncate(self, log_start: int, log_end: int, batches_from: BatchesFrom) -> None:
        return None

    def remove_expired(self, now_ms: int) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_EPOCH
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=RETRY_WINDOW))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


class SnapshotEntry(NamedTuple):
    """One producer in a snapshot file: its last batch and transaction state."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int  # last_offset - the batch's first offset
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no ongoing transaction

    @property
    def first_sequence(self) -> int:
        return (self.last_sequence - self.offset_delta) & 0x7FFFFFFF


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    """The entries of a snapshot file. Raises ``OSError``, or ``ValueError`` if the version, CRC or length
    is wrong."""
    data = path.read_bytes()
    try:
        version, crc, count = _HEAD.unpack_from(data, 0)
    except struct.error:
        raise ValueError(f"{len(data)} bytes is shorter than the {_HEAD.size}-byte header") from None
    if version != _VERSION:
        raise ValueError(f"version {version}, expected {_VERSION}")
    if crc32c(data[6:]) != crc:
        raise ValueError("the CRC does not match")
    if len(data) != _HEAD.size + count * _ENTRY.size:
        raise ValueError(f"{len(data)} bytes do not hold the {count} entries the header announces")
    return [SnapshotEntry(*e) for e in _ENTRY.iter_unpack(data[_HEAD.size:])]


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == 0x7FFFFFFF)


class ProducerStateManager:
    """The producer state of the partition whose log lives in ``directory``."""

    def __init__(self, directory: Path, name: str, *, expiration_ms: int) -> None:
        self.directory = directory
        self.name = name
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        self.applied_end = 0  # state reflects every batch below this offset
        self.first_unstable_offset: int | None = None
        self._ongoing: OrderedDict[int, int] = OrderedDict()  # first offset -> producer id, increasing
        self._completing: deque[tuple[int, int]] = deque()  # (first, marker offset) with marker >= the HW
        self._high_watermark = 0
        self._loading = False

    # -- appends ---------------------------------------------------------------------------------

    def validate_append(self, headers: Sequence[BatchHeader],
                        markers: Sequence[TxnMarker | None] | None = None) -> None:
        # producer -> (epoch, last seq, in a transaction, coordinator epoch) after earlier batches of this append
        seen: dict[int, tuple[int, int, bool, int]] = {}
        for i, h in enumerate(headers):
            pid = h.producer_id
            if pid == NO_PRODUCER_ID:
                continue
            entry = self.producers.get(pid)
            known = seen.get(pid)
            if known is not None:
                epoch, last_seq, in_txn, coordinator_epoch = known
            elif entry is not None:
                epoch, last_seq = entry.epoch, entry.last_seq
                in_txn, coordinator_epoch = entry.current_txn_first_offset >= 0, entry.coordinator_epoch
            else:
                epoch, last_seq, in_txn, coordinator_epoch = NO_EPOCH, NO_SEQUENCE, False, -1
            if h.attributes & CONTROL_BIT:
                marker = markers[i] if markers is not None else None
                if marker is not None:
                    self._validate_marker(h, marker, epoch, coordinator_epoch)
                    seen[pid] = (h.producer_epoch, last_seq if h.producer_epoch == epoch else NO_SEQUENCE, False,
                                 marker.coordinator_epoch)
                continue
            if h.producer_epoch < epoch:
                raise InvalidProducerEpochError(
                    f"{self.name}: producer {pid} wrote with epoch {h.producer_epoch}, older than its current epoch "
                    f"{epoch}; a newer instance of this producer has taken over")
            if entry is not None and known is None and h.producer_epoch == entry.epoch:
                for b in entry.batches:
                    if b.first_seq == h.base_sequence and b.last_seq == h.last_sequence:
                        raise DuplicateBatch(b.first_offset, b.last_offset, b.timestamp)
            if h.base_sequence != NO_SEQUENCE:
                if h.producer_epoch != epoch:
                    if h.base_sequence != 0 and epoch != NO_EPOCH:
                        raise OutOfOrderSequenceError(
                            f"{self.name}: producer {pid} started epoch {h.producer_epoch} at sequence "
                            f"{h.base_sequence}; a new epoch starts at 0 (current epoch {epoch})")
                elif epoch != NO_EPOCH and not _in_sequence(last_seq, h.base_sequence):
                    raise OutOfOrderSequenceError(
                        f"{self.name}: producer {pid} sent sequence {h.base_sequence} after {last_seq}; "
                        "batches were lost or reordered between the producer and the broker")
            transactional = bool(h.attributes & TRANSACTIONAL_BIT)
            if in_txn and not transactional:
                raise InvalidTxnStateError(
                    f"{self.name}: producer {pid} wrote a non-transactional batch while its transaction in this "
                    "partition is ongoing; commit or abort the transaction first")
            seen[pid] = (h.producer_epoch, h.last_sequence, in_txn or transactional, coordinator_epoch)

    def _validate_marker(self, h: BatchHeader, marker: TxnMarker, epoch: int, coordinator_epoch: int) -> None:
        kind = "COMMIT" if marker.commit else "ABORT"
        if h.producer_epoch < epoch:
            raise InvalidProducerEpochError(
                f"{self.name}: {kind} marker for producer {h.producer_id} has epoch {h.producer_epoch}, older than "
                f"the producer's current epoch {epoch}; a newer instance of this producer has taken over")
        if marker.coordinator_epoch < coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"{self.name}: {kind} marker for producer {h.producer_id} comes from coordinator epoch "
                f"{marker.coordinator_epoch}, older than the epoch {coordinator_epoch} of the last marker here; "
                "a newer transaction coordinator has taken over")

    def on_append(self, headers: Sequence[BatchHeader],
                  markers: Sequence[TxnMarker | None] | None = None) -> Sequence[CompletedTxn]:
        """Apply written batches; the transactions they completed (markers only complete them)."""
        completed: Sequence[CompletedTxn] = _NO_COMPLETIONS
        if markers is None:
            for h in headers:
                self._apply(h, None)
        else:
            completed = [t for h, m in zip(headers, markers, strict=True) if (t := self._apply(h, m)) is not None]
        if headers:
            self.applied_end = max(self.applied_end, headers[-1].next_offset)
        return completed

    def _apply(self, h: BatchHeader, marker: TxnMarker | None) -> CompletedTxn | None:
        pid = h.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        if h.producer_epoch != entry.epoch:
            entry.epoch = h.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        if h.attributes & CONTROL_BIT:
            return self._end_txn(entry, h, marker) if marker is not None else None
        if h.base_sequence != NO_SEQUENCE:
            entry.batches.append(BatchMeta(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset,
                                           h.max_timestamp))
        if h.attributes & TRANSACTIONAL_BIT and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = h.base_offset
            self._ongoing[h.base_offset] = pid
            if self.first_unstable_offset is None:
                self.first_unstable_offset = h.base_offset
        return None

    def _end_txn(self, entry: ProducerEntry, h: BatchHeader, marker: TxnMarker) -> CompletedTxn | None:
        entry.coordinator_epoch = marker.coordinator_epoch
        first = entry.current_txn_first_offset
        if first < 0:
            return None  # a marker without data here (or a retried one): written, nothing to end
        entry.current_txn_first_offset = -1
        self._ongoing.pop(first, None)
        following = next(iter(self._ongoing), None)
        completed = CompletedTxn(entry.producer_id, first, h.base_offset, not marker.commit,
                                 following if following is not None else h.base_offset + 1)
        if h.base_offset >= self._high_watermark:
            self._completing.append((first, h.base_offset))
        if not self._loading:
            self._refresh_first_unstable()
        return completed

    def _refresh_first_unstable(self) -> None:
        first = next(iter(self._ongoing), None)
        for start, _marker in self._completing:
            if first is None or start < first:
                first = start
        self.first_unstable_offset = first

    def on_high_watermark(self, high_watermark: int) -> bool:
        """The high watermark moved: completed transactions whose marker it passed are stable. True
        while some completed transaction still waits for it."""
        self._high_watermark = high_watermark
        waiting = self._completing
        if waiting and waiting[0][1] < high_watermark:
            while waiting and waiting[0][1] < high_watermark:
                waiting.popleft()
            self._refresh_first_unstable()
        return bool(waiting)

    def ongoing_first_offset(self, producer_id: int) -> int | None:
        """First offset of the producer's ongoing transaction in this partition, None if it has none."""
        entry = self.producers.get(producer_id)
        if entry is None or entry.current_txn_first_offset < 0:
            return None
        return entry.current_txn_first_offset

    def active_producers(self) -> list[ActiveProducer]:
        return [ActiveProducer(e.producer_id, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                               e.current_txn_first_offset) for e in list(self.producers.values())]

    def last_data_offsets(self) -> dict[int, int]:
        """Producer id -> last offset of its last data batch in the log (the cleaner keeps that batch, so the
        state rebuilt from the log after compaction is the same)."""
        return {pid: e.last_offset for pid, e in list(self.producers.items()) if e.last_offset >= 0}

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers silent for longer than ``producer.id.expiration.ms``; how many went."""
        gone = [pid for pid, e in self.producers.items()
                if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= self.expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    # -- snapshots -------------------------------------------------------------------------------

    def take_snapshot(self, offset: int) -> None:
        """Write the state as of ``offset`` (which must be where appends have reached)."""
        if offset != self.applied_end and self.producers:
            log.warning("%s: producer snapshot at %d skipped: state is at %d", self.name, offset, self.applied_end)
            return
        entries = b"".join(
            _ENTRY.pack(e.producer_id, e.epoch, e.last_seq, e.last_offset,
                        (e.batches[-1].last_offset - e.batches[-1].first_offset) if e.batches else 0,
                        e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset)
            for e in self.producers.values())
        body = struct.pack(">i", len(self.producers)) + entries
        data = struct.pack(">hI", _VERSION, crc32c(body)) + body
        try:
            write_atomically(snapshot_path(self.directory, offset), data)
        except OSError as e:  # the log is still correct; a restart reads further back
            log.warning("%s: cannot write producer snapshot at %d: %s", self.name, offset, e)
            return
        for old in self._snapshots()[:-SNAPSHOTS_KEPT]:
            old.unlink(missing_ok=True)

    def _snapshots(self) -> list[Path]:
        found = []
        for p in self.directory.glob("*" + SNAPSHOT_SUFFIX):
            stem = p.name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                found.append((int(stem), p))
        return [p for _, p in sorted(found)]

    def _read_snapshot(self, path: Path) -> dict[int, ProducerEntry] | None:
        try:
            snapshot = read_snapshot(path)
        except (OSError, ValueError) as e:
            log.warning("%s: producer snapshot %s is unreadable (%s); reading the log further back", self.name,
                        path.name, e)
            return None
        producers = {}
        for s in snapshot:
            entry = ProducerEntry(s.producer_id, s.epoch, last_timestamp=s.timestamp,
                                  coordinator_epoch=s.coordinator_epoch,
                                  current_txn_first_offset=s.current_txn_first_offset)
            if s.last_sequence != NO_SEQUENCE:
                entry.batches.append(BatchMeta(s.first_sequence, s.last_sequence, s.last_offset - s.offset_delta,
                                               s.last_offset, s.timestamp))
            producers[s.producer_id] = entry
        return producers

    # -- opening and truncation ------------------------------------------------------------------

    def load(self, log_start: int, log_end: int, batches_from: BatchesFrom, *, replay_from: int | None = None,
             on_completed: OnCompleted | None = None) -> None:
        """Rebuild the state as of ``log_end``: newest usable snapshot (at or below ``replay_from`` when
        given), then the batches after it; ``on_completed`` sees every transaction they complete."""
        for path in self._snapshots():
            if int(path.name[: -len(SNAPSHOT_SUFFIX)]) > log_end:
                path.unlink(missing_ok=True)  # written before the log was cut shorter
        self.producers = {}
        start = log_start
        limit = log_end if replay_from is None else min(log_end, replay_from)
        for path in reversed(self._snapshots()):
            offset = int(path.name[: -len(SNAPSHOT_SUFFIX)])
            if offset > limit:
                continue
            if offset < log_start:
                break
            loaded = self._read_snapshot(path)
            if loaded is not None:
                self.producers, start = loaded, offset
                break
        ongoing = sorted((e.current_txn_first_offset, pid) for pid, e in self.producers.items()
                         if e.current_txn_first_offset >= 0)
        self._ongoing = OrderedDict(ongoing)
        self._completing.clear()
        self._loading = True
        try:
            if start < log_end:
                for h, marker in batches_from(start):
                    if h.base_offset >= log_end:
                        break
                    completed = self._apply(h, marker)
                    if completed is not None and on_completed is not None:
                        on_completed(completed)
        finally:
            self._loading = False
            self._refresh_first_unstable()
        self.applied_end = log_end

    def truncate(self, log_start: int, log_end: int, batches_from: BatchesFrom) -> None:
        if log_end < self.applied_end:
            self.load(log_start, log_end, batches_from)
        for path in self._snapshots():
            if int(path.name[: -len(SNAPSHOT_SUFFIX)]) < log_start:
                path.unlink(missing_ok=True)
