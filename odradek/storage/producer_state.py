"""Producer state of one partition: what idempotent producers last wrote, so retries never duplicate.

For every producer id that wrote to the partition the log keeps, as Kafka's ProducerStateManager
does: the producer epoch, the sequence ranges and offsets of its last 5 batches (a producer has at
most 5 requests in flight), and the time of its last write. The log consults it at these points:

- ``validate_append(headers)`` before anything is written. A batch whose epoch is older than the
  producer's is refused (INVALID_PRODUCER_EPOCH); a batch equal to one of the last 5 is a retry
  whose response was lost: ``DuplicateBatch`` carries the original offsets and nothing is written;
  a sequence that does not follow the last one is OUT_OF_ORDER_SEQUENCE_NUMBER. A new epoch must
  start at sequence 0. A producer the partition has no state for (never seen, or expired) is
  accepted at any sequence, as Kafka does since 2.5 (KIP-360).
- ``on_append(headers)`` once the batches are written, with their offsets.
- ``take_snapshot(offset)`` when a segment rolls and when the log closes: the state as of
  ``offset`` goes to ``<offset, 20 digits>.snapshot`` (Kafka's name; written atomically).
- ``load(log_start, log_end, headers_from)`` when the log opens: the newest snapshot at or below the
  log end, then the batch headers from there to the end, so a restart reads at most one segment's
  headers instead of the whole log. Without a snapshot the headers from the log start are read.
- ``truncate(log_start, log_end, headers_from)`` after the log end moved back or its start moved on:
  snapshots outside the log are removed; state newer than the end is rebuilt as in ``load``.
- ``remove_expired(now)``: producers silent longer than ``producer.id.expiration.ms`` are forgotten.

Snapshot file (big-endian): version int16 (1), crc uint32 (CRC-32C of everything after it), count
int32, then per producer: producer_id int64, epoch int16, last_sequence int32, last_offset int64,
offset_delta int32, timestamp int64, coordinator_epoch int32, current_txn_first_offset int64 —
Kafka's layout without its schema framing. A snapshot keeps each producer's last batch only (as
Kafka's does), so after a restart the retry window is one batch deep until new batches arrive.

Invariants:
- A batch without a producer id (-1) is never checked or recorded.
- ``validate_append`` changes nothing; state changes only in ``on_append``, ``load`` and ``truncate``.
- A damaged or unreadable snapshot is skipped with a warning (the log is read from further back);
  it never stops the log from opening.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from crc32c import crc32c

from odradek.protocol.batch import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
RETRY_WINDOW = 5  # batches remembered per producer: Kafka's max in-flight requests for idempotence
SNAPSHOTS_KEPT = 2
NO_EPOCH = -1
_VERSION = 1
_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")

HeadersFrom = Callable[[int], Iterable[BatchHeader]]


class OutOfOrderSequenceError(KafkaError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class DuplicateBatch(Exception):
    """A retried batch already in the log: answer with its original offsets, write nothing."""

    def __init__(self, first_offset: int, last_offset: int, timestamp: int) -> None:
        super().__init__(f"duplicate of the batch at offsets {first_offset}..{last_offset}")
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.timestamp = timestamp


class ProducerStateHook(Protocol):
    def validate_append(self, headers: Sequence[BatchHeader]) -> None: ...

    def on_append(self, headers: Sequence[BatchHeader]) -> None: ...

    def take_snapshot(self, offset: int) -> None: ...

    def load(self, log_start: int, log_end: int, headers_from: HeadersFrom) -> None: ...

    def truncate(self, log_start: int, log_end: int, headers_from: HeadersFrom) -> None: ...

    def remove_expired(self, now_ms: int) -> int: ...


class NoProducerState:
    """Keeps nothing: every append is accepted (logs of tools and tests that do not need it)."""

    def validate_append(self, headers: Sequence[BatchHeader]) -> None:
        return None

    def on_append(self, headers: Sequence[BatchHeader]) -> None:
        return None

    def take_snapshot(self, offset: int) -> None:
        return None

    def load(self, log_start: int, log_end: int, headers_from: HeadersFrom) -> None:
        return None

    def truncate(self, log_start: int, log_end: int, headers_from: HeadersFrom) -> None:
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

    # -- appends ---------------------------------------------------------------------------------

    def validate_append(self, headers: Sequence[BatchHeader]) -> None:
        seen: dict[int, tuple[int, int]] = {}  # producer -> (epoch, last seq) of earlier batches in this append
        for h in headers:
            pid = h.producer_id
            if pid == NO_PRODUCER_ID or h.is_control:
                continue
            entry = self.producers.get(pid)
            epoch, last_seq = seen.get(pid, (entry.epoch, entry.last_seq) if entry else (NO_EPOCH, NO_SEQUENCE))
            if h.producer_epoch < epoch:
                raise InvalidProducerEpochError(
                    f"{self.name}: producer {pid} wrote with epoch {h.producer_epoch}, older than its current epoch "
                    f"{epoch}; a newer instance of this producer has taken over")
            if entry is not None and pid not in seen and h.producer_epoch == entry.epoch:
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
            seen[pid] = (h.producer_epoch, h.last_sequence)

    def on_append(self, headers: Sequence[BatchHeader]) -> None:
        for h in headers:
            self._apply(h)
        if headers:
            self.applied_end = max(self.applied_end, headers[-1].next_offset)

    def _apply(self, h: BatchHeader) -> None:
        pid = h.producer_id
        if pid == NO_PRODUCER_ID:
            return
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        if h.producer_epoch != entry.epoch:
            entry.epoch = h.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        if not h.is_control and h.base_sequence != NO_SEQUENCE:
            entry.batches.append(BatchMeta(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset,
                                           h.max_timestamp))

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
            data = path.read_bytes()
            version, crc, count = _HEAD.unpack_from(data, 0)
            if version != _VERSION or crc32c(data[6:]) != crc or len(data) != _HEAD.size + count * _ENTRY.size:
                raise ValueError("version, CRC or length does not match")
        except (OSError, ValueError, struct.error) as e:
            log.warning("%s: producer snapshot %s is unreadable (%s); reading the log further back", self.name,
                        path.name, e)
            return None
        producers = {}
        for i in range(count):
            pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first = _ENTRY.unpack_from(
                data, _HEAD.size + i * _ENTRY.size)
            entry = ProducerEntry(pid, epoch, last_timestamp=ts, coordinator_epoch=coord_epoch,
                                  current_txn_first_offset=txn_first)
            if last_seq != NO_SEQUENCE:
                first_seq = (last_seq - delta) & 0x7FFFFFFF
                entry.batches.append(BatchMeta(first_seq, last_seq, last_offset - delta, last_offset, ts))
            producers[pid] = entry
        return producers

    # -- opening and truncation ------------------------------------------------------------------

    def load(self, log_start: int, log_end: int, headers_from: HeadersFrom) -> None:
        """Rebuild the state as of ``log_end``: newest usable snapshot, then the headers after it."""
        for path in self._snapshots():
            if int(path.name[: -len(SNAPSHOT_SUFFIX)]) > log_end:
                path.unlink(missing_ok=True)  # written before the log was cut shorter
        self.producers = {}
        start = log_start
        for path in reversed(self._snapshots()):
            offset = int(path.name[: -len(SNAPSHOT_SUFFIX)])
            if offset < log_start:
                break
            loaded = self._read_snapshot(path)
            if loaded is not None:
                self.producers, start = loaded, offset
                break
        if start < log_end:
            for h in headers_from(start):
                if h.base_offset >= log_end:
                    break
                self._apply(h)
        self.applied_end = log_end

    def truncate(self, log_start: int, log_end: int, headers_from: HeadersFrom) -> None:
        if log_end < self.applied_end:
            self.load(log_start, log_end, headers_from)
        for path in self._snapshots():
            if int(path.name[: -len(SNAPSHOT_SUFFIX)]) < log_start:
                path.unlink(missing_ok=True)
