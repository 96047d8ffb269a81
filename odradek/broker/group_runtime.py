"""The group coordinator's I/O: the ``__consumer_offsets`` topic, loading it, and pending responses.

``GroupCoordinator`` (``coordinator/group/``) is pure; this runtime gives it a clock and a log:

- ``call(op)`` runs one coordinator operation with a fresh ticket and waits for the reply addressed
  to that ticket (JoinGroup and SyncGroup replies may come from another member's request or a timer).
- Effects are applied in order: each ``Write``'s records are appended to their partition of
  ``__consumer_offsets`` as one append (so a commit is all or nothing), replayed into the
  coordinator once appended (each with its log offset), and only then are its replies sent. A failed
  append sends the write's failure replies and applies nothing. A transactional write (TxnOffsetCommit)
  is one transactional batch of its producer and epoch, with no sequence number (as Kafka writes it).
- Transaction markers: the transaction runtime appends a COMMIT or ABORT control batch to a partition
  of the topic and then calls ``complete_txn(partition, producer_id, commit)``, which replays it. A
  partition still loading ignores the call: its load reads the marker from the log.
- The topic is created on first use with ``offsets.topic.num.partitions`` partitions and never
  deleted, altered to fewer partitions or produced to by clients. At startup every partition is
  replayed from its log start (data records with the producer id of their transactional batch, and
  markers; COORDINATOR_LOAD_IN_PROGRESS meanwhile), up to the log end at the moment it is served, so
  a marker appended while it loads is not missed. Pending offsets whose marker never came stay
  pending; the transaction coordinator writes the marker again once it has loaded.
- The topic stays bounded by compaction, as Kafka's: it is created with ``cleanup.policy=compact`` and
  the broker's log cleaner keeps the latest record of every key (a group-partition's offset, a group's
  metadata), so a partition holds the live state plus what was written since the last cleaning. Nothing
  here rewrites the topic. This needs every deletion written as a tombstone (a null value) for each key
  it removes, and the group coordinator writes them: OffsetDelete, expired offsets and offsets of a
  deleted topic get one per group-partition; DeleteGroups gets one per committed or pending offset and
  one for the group; an Empty group left with no offsets gets a group tombstone (never alone: once it is
  gone, offset records of the group would bring it back). The cleaner keeps a tombstone
  ``delete.retention.ms`` after the first cleaning that saw it, by when every older record of its key
  is gone.
- Compaction and transactions: pending transactional offsets are left to the cleaner's handling of
  transactions, as in Kafka. It never cleans past the last stable offset, so an open transaction's
  records (and everything after them) stay until its marker is written; once the marker is written,
  an aborted transaction's batches are removed and a committed one's records compete as any other
  record of their key (the latest by log offset stays, which is what replay decides too: a COMMIT
  applies a pending offset unless the committed one was written later). A marker stays while records
  of its transaction do, and a further ``delete.retention.ms``, so replay never meets a transactional
  record without its marker.
- Earlier versions rewrote the topic themselves, appending copies of the live records after any
  pending transactional offsets; a copied offset record carries the offset of its original in a record
  header (``odradek.origin.offset``, 8 bytes big-endian), which replay still reads as the record's
  offset. Such a copy can be the latest record of its key although a COMMIT applied a transactional
  offset written before it (its original was older still): compaction would keep the copy and lose
  the committed offset. So the runtime remembers, per partition, the keys whose latest record is such
  a copy, and where the committed offset is no longer the copy's, it appends that offset again with
  the header (``_repair_copies``, after a load and after a COMMIT marker). Logs written since hold no
  copies, and nothing else writes the header.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import Any

from odradek.broker.coordinator_runtime import CoordinatorHost, CoordinatorRuntime, stored_batches
from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.coordinator import GroupCoordinator
from odradek.coordinator.group.effects import Effects, Write
from odradek.coordinator.group.log_entries import NO_PRODUCER_ID, DataRecord, LogEntry, TxnMarker
from odradek.coordinator.group.model import Ticket
from odradek.coordinator.group.records import (
    OFFSETS_TOPIC,
    CoordinatorRecordError,
    OffsetKey,
    OffsetValue,
    decode_record,
    encode_key,
    encode_value,
)
from odradek.protocol.batch import NO_SEQUENCE
from odradek.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from odradek.protocol.records import ControlType, Header, RecordInput, build_batch, decode_records, parse_control_key
from odradek.replica.partition import Partition
from odradek.storage.log import Log

log = logging.getLogger(__name__)

# On an offset record copied by an earlier version's rewrite of the topic: the offset of its original
ORIGIN_HEADER = "odradek.origin.offset"
_ORIGIN = struct.Struct(">q")
_BATCH_RECORDS = 2000  # records per batch when one write spans many (big commits, DeleteGroups)
# Per partition: the offset keys whose latest record is a copy an earlier version's rewrite appended, with the
# offset its header names (its original's)
Copies = dict[OffsetKey, int]


class GroupRuntime(CoordinatorRuntime):
    def __init__(self, broker: CoordinatorHost, config: GroupConfig, segment_bytes: int) -> None:
        super().__init__(broker, OFFSETS_TOPIC, segment_bytes)
        self.config = config
        self.coordinator: GroupCoordinator | None = None
        self._copies: dict[int, Copies] = {}

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> list[int]:
        """Open the coordinator over an existing topic; returns the partitions to load (all loading)."""
        topic = self.broker.registry.get(OFFSETS_TOPIC)
        if topic is None:
            return []
        self.compact_existing_topic()
        self.coordinator = GroupCoordinator(self.config, topic.partitions)
        for p in range(topic.partitions):
            self.coordinator.begin_load(p)
        return list(range(topic.partitions))

    async def load(self, partitions: list[int]) -> None:
        """Replay each partition from its log start (reading off the event loop), then serve its groups."""
        coord = self.coordinator
        if coord is None:
            return
        for p in partitions:
            lg = self.broker.get_log(OFFSETS_TOPIC, p)
            end = lg.next_offset
            copies: Copies = {}
            entries = await asyncio.to_thread(read_entries, lg, lg.log_start_offset, end, copies)
            entries += read_entries(lg, end, lg.next_offset, copies)  # appended meanwhile (a marker): short
            for entry in entries:
                coord.replay_entry(p, entry)
            coord.finish_load(p, self.now())
            self._loaded_copies(p, copies)
            self._drop_missing_topics(p)
            if entries:
                log.info("loaded %d records of %s-%d", len(entries), OFFSETS_TOPIC, p)

    def ensure_started(self) -> GroupCoordinator:
        """The coordinator, creating ``__consumer_offsets`` on first use (as Kafka's FindCoordinator does).

        In a cluster it owns no partition until this broker leads one (``on_leadership``)."""
        if self.coordinator is None:
            b = self.broker
            cfg = b.config
            partitions = self.create_topic(self.config.num_partitions,
                                           replication_factor=cfg.offsets_topic_replication_factor)
            self.coordinator = GroupCoordinator(self.config, partitions)
            if b.replicated:
                self.coordinator.owned = set()
        return self.coordinator

    def _new_cluster_coordinator(self, partitions: int | None) -> GroupCoordinator:
        return GroupCoordinator(self.config, partitions if partitions is not None else self.config.num_partitions)

    def _begin_load(self, partition: int, leader_epoch: int) -> None:
        assert self.coordinator is not None
        self.coordinator.begin_load(partition)

    def _unload(self, partition: int) -> None:
        assert self.coordinator is not None
        self._copies.pop(partition, None)
        tickets = self.coordinator.unload(partition)
        self.deliver([(t, {"error_code": ErrorCode.NOT_COORDINATOR}) for t in tickets])

    async def _load_one(self, p: int, gen: int) -> None:
        coord = self.coordinator
        assert coord is not None
        lg = self.broker.get_log(OFFSETS_TOPIC, p)
        end = lg.next_offset
        copies: Copies = {}
        entries = await asyncio.to_thread(read_entries, lg, lg.log_start_offset, end, copies)
        if not self.load_current(p, gen):
            return
        entries += read_entries(lg, end, lg.next_offset, copies)
        for entry in entries:
            coord.replay_entry(p, entry)
        coord.finish_load(p, self.now())
        self._loaded_copies(p, copies)
        log.info("loaded %d records of %s-%d as its leader", len(entries), OFFSETS_TOPIC, p)

    def view(self) -> GroupCoordinator:
        """The coordinator for requests that create nothing (heartbeats, describes, lists, fetches): before
        ``__consumer_offsets`` exists, an empty one, so that they do not create the topic as a side effect."""
        if self.coordinator is not None:
            return self.coordinator
        empty = GroupCoordinator(self.config, self.config.num_partitions)
        if self.broker.replicated:
            empty.owned = set()
        return empty

    def shutdown(self) -> None:
        """Answer every waiting JoinGroup/SyncGroup with NOT_COORDINATOR (the broker is going away)."""
        if self.coordinator is None:
            return
        for ticket in self.coordinator.pending_tickets():
            self.deliver([(ticket, {"error_code": ErrorCode.NOT_COORDINATOR})])

    # -- operations ------------------------------------------------------------------------------

    async def call(self, op: Callable[[GroupCoordinator, Ticket, int], Effects]) -> Any:
        """Run ``op(coordinator, ticket, now)`` and wait for the reply to ``ticket``."""
        coord = self.ensure_started()
        return await self.await_reply(lambda ticket: self.apply(op(coord, ticket, self.now())))

    def run(self, op: Callable[[GroupCoordinator, int], Effects]) -> None:
        """Run an operation that answers no request (timers, topic deletion)."""
        if self.coordinator is not None:
            self.apply(op(self.coordinator, self.now()))

    def tick(self) -> None:
        self.run(lambda c, now: c.tick(now))

    def on_topic_deleted(self, topic: str) -> None:
        self.run(lambda c, now: c.remove_topic_offsets(topic))

    def apply(self, fx: Effects) -> None:
        self.log_effects(fx)
        for write in fx.writes:
            self._write(write)
        self.deliver(fx.replies)

    def _write(self, write: Write) -> None:
        coord = self.coordinator
        assert coord is not None
        try:
            first, part, end = self._append(write.partition,
                                            [(encode_key(k), encode_value(v)) for k, v in write.records],
                                            producer_id=write.producer_id, producer_epoch=write.producer_epoch)
        except KafkaError as e:
            log.error("could not write %d records to %s-%d: %s", len(write.records), OFFSETS_TOPIC, write.partition,
                      e.message)
            if write.on_failure is not None:
                self.deliver(write.on_failure(_coordinator_error(e.code)))
            return
        for i, (key, value) in enumerate(write.records):
            coord.replay(key, value, record_offset=first + i, producer_id=write.producer_id)
        copies = self._copies.get(write.partition)
        if copies and write.producer_id == NO_PRODUCER_ID:
            for key, _ in write.records:  # a later record of the key: the copy is no longer its latest
                if isinstance(key, OffsetKey):
                    copies.pop(key, None)
        self.deliver_when_replicated(part, end, write.replies, write.on_failure)

    def _append(self, partition: int, records: list[RecordInput] | list[tuple[bytes, bytes | None]], *,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1) -> tuple[int, Partition, int]:
        """Append encoded records as one append, as the partition's leader: (offset of the first — the rest
        follow on —, the partition, the offset after the last)."""
        now = self.now()
        if producer_id != NO_PRODUCER_ID:  # one transactional batch, as Kafka writes a TxnOffsetCommit
            batches = [build_batch(records, base_timestamp=now, producer_id=producer_id,
                                   producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE, is_transactional=True)]
        else:
            batches = [build_batch(records[i:i + _BATCH_RECORDS], base_timestamp=now)
                       for i in range(0, len(records), _BATCH_RECORDS)]
        part, info = self.broker.replicas.append(OFFSETS_TOPIC, partition, b"".join(batches))
        return info.first_offset, part, info.last_offset + 1

    # -- transaction markers -----------------------------------------------------------------------

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """Apply the COMMIT (``commit``) or ABORT marker of ``producer_id`` that was just appended to
        ``__consumer_offsets``-``partition``: that producer's pending offsets there become committed
        offsets (each unless a later commit of the same partition exists) or are dropped.

        Call it after every marker appended to the topic, once the append has succeeded; it replays the
        marker exactly as a restart will. A marker for a producer with no pending offsets there is a no-op.
        """
        coord = self.coordinator
        if coord is None or partition in coord.loading:
            return  # nothing loaded yet: the load reads the marker from the log
        coord.replay_marker(partition, producer_id, commit)
        if commit:
            self._repair_copies(partition)

    # -- copies left by earlier versions' rewrites -------------------------------------------------

    def _loaded_copies(self, partition: int, copies: Copies) -> None:
        if copies:
            self._copies[partition] = copies
            self._repair_copies(partition)
        else:
            self._copies.pop(partition, None)

    def _repair_copies(self, partition: int) -> None:
        """Where a key's latest record is an earlier version's copy but the committed offset is another (a
        transactional offset that a COMMIT applied over the copy's older original), append the committed offset
        after the copy so that compaction keeps it. It names its own record offset in the header, as the copies
        did, so replay and any later COMMIT compare exactly as they did before."""
        coord = self.coordinator
        copies = self._copies.get(partition)
        if coord is None or not copies:
            return
        stale = []
        for key, origin in copies.items():
            group = coord.groups.get(key.group)
            entry = group.offsets.get((key.topic, key.partition)) if group is not None else None
            if entry is not None and entry.record_offset != origin:
                stale.append((key, entry))
        if not stale:
            return
        records = [RecordInput(encode_key(key), encode_value(OffsetValue(e.offset, e.leader_epoch, e.metadata,
                                                                         e.commit_timestamp, e.expire_timestamp)),
                               None, ((ORIGIN_HEADER, _ORIGIN.pack(e.record_offset)),)) for key, e in stale]
        try:
            self._append(partition, records)
        except KafkaError as e:  # tried again after the next load or COMMIT marker
            log.error("could not append %d committed offsets to %s-%d after an earlier version's copies of older "
                      "ones (compaction would keep the copies): %s", len(records), OFFSETS_TOPIC, partition,
                      e.message)
            return
        for key, entry in stale:
            copies[key] = entry.record_offset
        log.info("%s-%d: appended %d committed offsets after an earlier version's copies of older ones",
                 OFFSETS_TOPIC, partition, len(records))

    def _drop_missing_topics(self, partition: int) -> None:
        coord = self.coordinator
        assert coord is not None
        registry = self.broker.registry
        gone = {t for g in coord.groups_in(partition) for t, _ in set(g.offsets) | g.pending_partitions()
                if registry.get(t) is None}
        for topic in sorted(gone):
            self.on_topic_deleted(topic)


_PRODUCER_ERRORS = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED,
                              ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.INVALID_TXN_STATE,
                              ErrorCode.TRANSACTION_COORDINATOR_FENCED})


def _coordinator_error(code: ErrorCode) -> ErrorCode:
    """What clients are told when the coordinator's append failed: retriable, as Kafka maps it, except
    that the log's verdict on a transactional batch's producer (a fenced epoch, say) is passed on."""
    if code in _PRODUCER_ERRORS:
        return code
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


def read_entries(lg: Log, start: int, end: int, copies: Copies | None = None) -> list[LogEntry]:
    """The entries of ``lg`` in [``start``, ``end``), in order: every decodable coordinator record, with its
    record offset and the producer id of its batch when that is transactional, and every COMMIT or ABORT
    marker. Runs off the event loop for a whole partition; unreadable records are skipped with a warning.
    ``copies``, if given, is kept up to date with the offset keys whose latest record (transactional ones
    aside) is an earlier version's copy."""
    out: list[LogEntry] = []
    start = max(start, lg.log_start_offset)
    for data, pos, header in stored_batches(lg, start, end):
        producer_id = header.producer_id if header.is_transactional else NO_PRODUCER_ID
        for rec in decode_records(data[pos:pos + header.size]):
            if start <= rec.offset < end:
                entry = _control_entry(lg, rec.offset, rec.key, producer_id) if header.is_control \
                    else _data_entry(lg, rec.offset, rec.key, rec.value, rec.headers, producer_id)
                if entry is not None:
                    out.append(entry)
                    if copies is not None and isinstance(entry, DataRecord) and isinstance(entry.key, OffsetKey):
                        if entry.record_offset != rec.offset:
                            copies[entry.key] = entry.record_offset
                        elif producer_id == NO_PRODUCER_ID:
                            copies.pop(entry.key, None)
    return out


def _control_entry(lg: Log, offset: int, key: bytes | None, producer_id: int) -> TxnMarker | None:
    try:
        kind = parse_control_key(None if key is None else bytes(key)).type
    except CorruptRecordError as e:
        log.warning("%s offset %d: skipping an unreadable control record: %s", lg.name, offset, e)
        return None
    if kind not in (ControlType.COMMIT, ControlType.ABORT) or producer_id == NO_PRODUCER_ID:
        return None
    return TxnMarker(producer_id, kind == ControlType.COMMIT)


def _data_entry(lg: Log, offset: int, key: bytes | None, value: bytes | None, headers: tuple[Header, ...],
                producer_id: int) -> DataRecord | None:
    if key is None:
        return None
    try:
        decoded = decode_record(bytes(key), None if value is None else bytes(value))
    except CoordinatorRecordError as e:
        log.warning("%s offset %d: skipping an unreadable record: %s", lg.name, offset, e)
        return None
    if decoded is None:
        return None
    record_offset = offset
    for name, raw in headers:
        if name == ORIGIN_HEADER and raw is not None and len(raw) == _ORIGIN.size:
            record_offset = _ORIGIN.unpack(raw)[0]
    return DataRecord(decoded[0], decoded[1], record_offset, producer_id)
