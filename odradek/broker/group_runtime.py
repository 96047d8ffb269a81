"""The group coordinator's I/O: the ``__consumer_offsets`` topic, loading it, and pending responses.

``GroupCoordinator`` (``coordinator/group/``) is pure; this runtime gives it a clock and a log:

- ``call(op)`` runs one coordinator operation with a fresh ticket and waits for the reply addressed
  to that ticket (JoinGroup and SyncGroup replies may come from another member's request or a timer).
- Effects are applied in order: each ``Write``'s records are appended to their partition of
  ``__consumer_offsets`` as one append (so a commit is all or nothing), replayed into the
  coordinator once appended, and only then are its replies sent. A failed append sends the
  write's failure replies and applies nothing.
- The topic is created on first use with ``offsets.topic.num.partitions`` partitions and never
  deleted, altered to fewer partitions or produced to by clients. At startup every partition is
  replayed from its log start before its groups are served (COORDINATOR_LOAD_IN_PROGRESS meanwhile).
- The topic stays bounded without log compaction: once a partition has grown by more than a segment
  (``offsets.topic.segment.bytes``) and twice its live state since the last rewrite, the live state
  (latest offset of every group-partition, latest record of every group) is appended to a fresh
  segment and the log start moves to it, which deletes the older segments. Replay from the new start
  gives the same state; a crash mid-rewrite leaves the old start, which also replays to it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.coordinator import GroupCoordinator
from odradek.coordinator.group.effects import Effects, Record, Reply, Write
from odradek.coordinator.group.model import Ticket
from odradek.coordinator.group.records import CoordinatorRecordError, decode_record, encode_key, encode_value
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import build_batch, decode_records, iter_batches
from odradek.storage.log import Log

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
_CONTROL_BIT = 0x20
_BATCH_RECORDS = 2000  # records per batch when one write spans many (rewrites, big commits)
_READ_CHUNK = 1 << 20


@dataclass(slots=True)
class _Growth:
    size_after_rewrite: int
    live_bytes: int


class GroupRuntime:
    def __init__(self, broker: Broker, config: GroupConfig, segment_bytes: int) -> None:
        self.broker = broker
        self.config = config
        self.segment_bytes = segment_bytes
        self.coordinator: GroupCoordinator | None = None
        self._futures: dict[Ticket, asyncio.Future[Any]] = {}
        self._tickets = itertools.count(1)
        self._growth: dict[int, _Growth] = {}

    # -- lifecycle -------------------------------------------------------------------------------

    def now(self) -> int:
        return self.broker.clock.milliseconds()

    def start(self) -> list[int]:
        """Open the coordinator over an existing topic; returns the partitions to load (all loading)."""
        topic = self.broker.registry.get(OFFSETS_TOPIC)
        if topic is None:
            return []
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
            records = await asyncio.to_thread(read_records, lg)
            for key, value in records:
                coord.replay(key, value)
            coord.finish_load(p, self.now())
            self._growth[p] = _Growth(lg.size, 0)
            self._drop_missing_topics(p)
            if records:
                log.info("loaded %d records of %s-%d", len(records), OFFSETS_TOPIC, p)

    def ensure_started(self) -> GroupCoordinator:
        """The coordinator, creating ``__consumer_offsets`` on first use (as Kafka's FindCoordinator does)."""
        if self.coordinator is None:
            b = self.broker
            if b.registry.get(OFFSETS_TOPIC) is None:
                configs = {"retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": str(self.segment_bytes),
                           "max.message.bytes": str(max(self.segment_bytes, 1 << 20))}
                b.registry.add(OFFSETS_TOPIC, self.config.num_partitions, configs, internal=True)
                for p in range(self.config.num_partitions):
                    b.log_manager.get_or_create_log(OFFSETS_TOPIC, p)
                log.info("created internal topic %s with %d partitions", OFFSETS_TOPIC, self.config.num_partitions)
            topic = b.registry.get(OFFSETS_TOPIC)
            assert topic is not None
            self.coordinator = GroupCoordinator(self.config, topic.partitions)
            for p in range(topic.partitions):
                self._growth[p] = _Growth(b.get_log(OFFSETS_TOPIC, p).size, 0)
        return self.coordinator

    def view(self) -> GroupCoordinator:
        """The coordinator for requests that create nothing (heartbeats, describes, lists, fetches): before
        ``__consumer_offsets`` exists, an empty one, so that they do not create the topic as a side effect."""
        return self.coordinator or GroupCoordinator(self.config, self.config.num_partitions)

    def shutdown(self) -> None:
        """Answer every waiting JoinGroup/SyncGroup with NOT_COORDINATOR (the broker is going away)."""
        if self.coordinator is None:
            return
        for ticket in self.coordinator.pending_tickets():
            self._deliver([(ticket, {"error_code": ErrorCode.NOT_COORDINATOR})])

    # -- operations ------------------------------------------------------------------------------

    async def call(self, op: Callable[[GroupCoordinator, Ticket, int], Effects]) -> Any:
        """Run ``op(coordinator, ticket, now)`` and wait for the reply to ``ticket``."""
        coord = self.ensure_started()
        ticket = next(self._tickets)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._futures[ticket] = fut
        try:
            self.apply(op(coord, ticket, self.now()))
            return await fut
        finally:
            self._futures.pop(ticket, None)

    def run(self, op: Callable[[GroupCoordinator, int], Effects]) -> None:
        """Run an operation that answers no request (timers, topic deletion)."""
        if self.coordinator is not None:
            self.apply(op(self.coordinator, self.now()))

    def tick(self) -> None:
        self.run(lambda c, now: c.tick(now))

    def on_topic_deleted(self, topic: str) -> None:
        self.run(lambda c, now: c.remove_topic_offsets(topic))

    def apply(self, fx: Effects) -> None:
        for warning in fx.warnings:
            log.warning("%s", warning)
        for note in fx.notes:
            log.info("%s", note)
        for write in fx.writes:
            self._write(write)
        self._deliver(fx.replies)

    def _write(self, write: Write) -> None:
        coord = self.coordinator
        assert coord is not None
        try:
            self._append(write.partition, write.records)
        except KafkaError as e:
            log.error("could not write %d records to %s-%d: %s", len(write.records), OFFSETS_TOPIC, write.partition,
                      e.message)
            if write.on_failure is not None:
                self._deliver(write.on_failure(_coordinator_error(e.code)))
            return
        for key, value in write.records:
            coord.replay(key, value)
        self._deliver(write.replies)
        self._maybe_rewrite(write.partition)

    def _append(self, partition: int, records: list[Record]) -> None:
        now = self.now()
        encoded = [(encode_key(k), encode_value(v)) for k, v in records]
        batches = [build_batch(encoded[i:i + _BATCH_RECORDS], base_timestamp=now)
                   for i in range(0, len(encoded), _BATCH_RECORDS)]
        self.broker.append(OFFSETS_TOPIC, partition, b"".join(batches))

    def _deliver(self, replies: list[Reply]) -> None:
        for ticket, payload in replies:
            fut = self._futures.get(ticket)
            if fut is not None and not fut.done():
                fut.set_result(payload)

    # -- keeping the topic bounded ----------------------------------------------------------------

    def _maybe_rewrite(self, partition: int) -> None:
        lg = self.broker.get_log(OFFSETS_TOPIC, partition)
        growth = self._growth.setdefault(partition, _Growth(lg.size, 0))
        if lg.size - growth.size_after_rewrite < max(self.segment_bytes, 2 * growth.live_bytes):
            return
        self.rewrite(partition)

    def rewrite(self, partition: int) -> None:
        """Append the partition's live state to a fresh segment and drop everything before it."""
        coord = self.coordinator
        assert coord is not None
        lg = self.broker.get_log(OFFSETS_TOPIC, partition)
        before = lg.size
        lg.roll()
        start = lg.next_offset
        live = coord.live_records(partition)
        try:
            if live:
                self._append(partition, list(live))
            lg.delete_records_before(start)
        except KafkaError as e:
            log.error("could not rewrite %s-%d (it keeps its older records): %s", OFFSETS_TOPIC, partition, e.message)
            self._growth[partition] = _Growth(lg.size, lg.size)
            return
        live_bytes = lg.size - sum(s.size for s in lg.segments[:-1])
        self._growth[partition] = _Growth(lg.size, live_bytes)
        log.info("rewrote %s-%d: %d live records from offset %d; %d bytes before, %d after", OFFSETS_TOPIC,
                 partition, len(live), start, before, lg.size)

    def _drop_missing_topics(self, partition: int) -> None:
        coord = self.coordinator
        assert coord is not None
        registry = self.broker.registry
        gone = {t for g in coord.groups_in(partition) for t, _ in g.offsets if registry.get(t) is None}
        for topic in sorted(gone):
            self.on_topic_deleted(topic)


def _coordinator_error(code: ErrorCode) -> ErrorCode:
    """What clients are told when the coordinator's append failed: retriable, as Kafka maps it."""
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


def read_records(lg: Log) -> list[Record]:
    """Every decodable coordinator record of ``lg`` from its log start, in order (runs off the event loop)."""
    out: list[Record] = []
    offset, end = lg.log_start_offset, lg.next_offset
    while offset < end:
        region = lg.read(offset, _READ_CHUNK)
        if region is None:
            break
        data = memoryview(region.read_bytes())
        last = offset
        for pos, header in iter_batches(data, allow_partial_tail=True):
            last = header.last_offset
            if header.attributes & _CONTROL_BIT:
                continue
            for rec in decode_records(data[pos:pos + header.size]):
                if rec.offset < offset or rec.key is None:
                    continue
                try:
                    decoded = decode_record(bytes(rec.key), None if rec.value is None else bytes(rec.value))
                except CoordinatorRecordError as e:
                    log.warning("%s offset %d: skipping an unreadable record: %s", lg.name, rec.offset, e)
                    continue
                if decoded is not None:
                    out.append(decoded)
        offset = max(last + 1, offset + 1)
    return out
