"""The transaction coordinator's I/O: ``__transaction_state``, loading it, pending replies, and markers.

``TransactionCoordinator`` (``coordinator/txn/``) is pure; this runtime gives it a clock, a log and
the partitions its markers go to:

- ``call(op)`` runs one coordinator operation with a fresh ticket and waits for the reply to it.
- Effects are applied in order: each ``Write``'s records are appended to their partition of
  ``__transaction_state`` as one append, replayed into the coordinator, its replies sent, then its
  markers started. A failed append sends the write's failure replies and applies nothing.
- Markers (Kafka's WriteTxnMarkers, done in-process: every partition lives on this broker): a COMMIT
  or ABORT control batch is appended with ``Log.append_marker`` to each partition of the transaction;
  a marker in ``__consumer_offsets`` also settles the group coordinator's pending transactional
  offsets (``GroupRuntime.complete_txn``); waiting fetches are woken because the last stable offset
  moved. A partition that no longer exists counts as written. A partition whose append fails (a full
  disk, say) is retried by ``tick`` until it succeeds; only then is ``markers_written`` reported and
  the Complete record appended. A marker the partition refuses as stale (an older producer epoch or
  coordinator epoch than the partition has seen: a newer coordinator decision already reached it) is
  logged and counted as written, as Kafka's marker channel does.
- The topic is created on first use (FindCoordinator for a transactional id) with
  ``transaction.state.log.num.partitions`` partitions. At startup each partition is replayed from its
  log start (its ids answer COORDINATOR_LOAD_IN_PROGRESS meanwhile); transactions found prepared get
  their markers written again.
- The topic stays bounded as ``__consumer_offsets`` does: once a partition has grown by a segment and
  twice its live state, the live records are appended to a fresh segment and the log start moves to it.

Invariant: the coordinator epoch is this broker's: 0. With one broker no other coordinator can write
markers, so the epoch never needs to fence one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.broker.coordinator_runtime import CoordinatorRuntime, stored_batches
from odradek.coordinator.group.model import Ticket
from odradek.coordinator.txn.config import TxnConfig
from odradek.coordinator.txn.coordinator import TransactionCoordinator
from odradek.coordinator.txn.effects import Effects, Record, TxnMarkers, Write
from odradek.coordinator.txn.records import TxnRecordError, decode_record, encode_key, encode_value
from odradek.protocol.errors import ErrorCode, KafkaError, UnknownTopicError
from odradek.protocol.records import build_batch, decode_records
from odradek.storage.log import Log

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

log = logging.getLogger(__name__)

TXN_STATE_TOPIC = "__transaction_state"
COORDINATOR_EPOCH = 0
_STALE_MARKER = (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED)


@dataclass(slots=True)
class _Outstanding:
    """Markers of one transaction still to be written: the partitions not yet done."""

    markers: TxnMarkers
    left: list[tuple[str, int]] = field(default_factory=list)


class TxnRuntime(CoordinatorRuntime):
    def __init__(self, broker: Broker, config: TxnConfig, segment_bytes: int) -> None:
        super().__init__(broker, TXN_STATE_TOPIC, segment_bytes)
        self.config = config
        self.coordinator: TransactionCoordinator | None = None
        self._outstanding: dict[str, _Outstanding] = {}  # transactional id -> markers not yet all written

    # -- lifecycle -------------------------------------------------------------------------------

    def _new_coordinator(self, partitions: int) -> TransactionCoordinator:
        return TransactionCoordinator(self.config, self.broker.producer_ids, partitions)

    def start(self) -> list[int]:
        """Open the coordinator over an existing topic; returns the partitions to load (all loading)."""
        topic = self.broker.registry.get(TXN_STATE_TOPIC)
        if topic is None:
            return []
        self.coordinator = self._new_coordinator(topic.partitions)
        for p in range(topic.partitions):
            self.coordinator.begin_load(p, COORDINATOR_EPOCH)
        return list(range(topic.partitions))

    async def load(self, partitions: list[int]) -> None:
        """Replay each partition (reading off the event loop), serve its ids, finish prepared transactions."""
        coord = self.coordinator
        if coord is None:
            return
        for p in partitions:
            lg = self.broker.get_log(TXN_STATE_TOPIC, p)
            records = await asyncio.to_thread(read_records, lg)
            for key, value in records:
                coord.replay(key, value)
            self.reset_growth(p)
            self.apply(coord.finish_load(p, self.now()))
            if records:
                log.info("loaded %d records of %s-%d", len(records), TXN_STATE_TOPIC, p)

    def ensure_started(self) -> TransactionCoordinator:
        """The coordinator, creating ``__transaction_state`` on first use."""
        if self.coordinator is None:
            self.coordinator = self._new_coordinator(self.create_topic(self.config.num_partitions))
        return self.coordinator

    def view(self) -> TransactionCoordinator:
        """The coordinator for read-only requests: before the topic exists, an empty one (nothing is created)."""
        return self.coordinator or self._new_coordinator(self.config.num_partitions)

    def shutdown(self) -> None:
        """Answer every waiting request with NOT_COORDINATOR (the broker is going away)."""
        self.fail_waiting(_ShuttingDown())

    # -- operations ------------------------------------------------------------------------------

    async def call(self, op: Callable[[TransactionCoordinator, Ticket, int], Effects]) -> Any:
        """Run ``op(coordinator, ticket, now)`` and wait for the reply to ``ticket``.

        Raises ``KafkaError`` (NOT_COORDINATOR) if the broker shuts down first.
        """
        coord = self.ensure_started()
        return await self.await_reply(lambda ticket: self.apply(op(coord, ticket, self.now())))

    def tick(self) -> None:
        """Retry markers that could not be written; the coordinator's timeouts and expiry."""
        coord = self.coordinator
        if coord is None:
            return
        for tid in list(self._outstanding):
            self._write_markers(tid)
        self.apply(coord.tick(self.now()))

    def apply(self, fx: Effects) -> None:
        self.log_effects(fx)
        for write in fx.writes:
            self._write(write)
        self.deliver(fx.replies)
        for markers in fx.markers:
            self._start_markers(markers)

    def _write(self, write: Write) -> None:
        coord = self.coordinator
        assert coord is not None
        try:
            self._append(write.partition, write.records)
        except KafkaError as e:
            log.error("could not write %d records to %s-%d: %s", len(write.records), TXN_STATE_TOPIC,
                      write.partition, e.message)
            if write.on_failure is not None:
                self.deliver(write.on_failure(e.code))
            return
        for key, value in write.records:
            coord.replay(key, value)
        self.deliver(write.replies)
        for markers in write.markers:
            self._start_markers(markers)
        self._maybe_rewrite(write.partition)

    def _append(self, partition: int, records: list[Record]) -> None:
        encoded = [(encode_key(k), encode_value(v)) for k, v in records]
        self.broker.append(TXN_STATE_TOPIC, partition, build_batch(encoded, base_timestamp=self.now()))

    # -- markers ---------------------------------------------------------------------------------

    def _start_markers(self, markers: TxnMarkers) -> None:
        self._outstanding[markers.transactional_id] = _Outstanding(markers, list(markers.partitions))
        self._write_markers(markers.transactional_id)

    def _write_markers(self, transactional_id: str) -> None:
        """Write what is left of one transaction's markers; once all are written, report it."""
        out = self._outstanding[transactional_id]
        m = out.markers
        while out.left:
            topic, partition = out.left[0]
            try:
                self._write_marker(m, topic, partition)
            except KafkaError as e:
                log.warning("transactional id %s: could not write the %s marker to %s-%d (retrying): %s",
                            transactional_id, "COMMIT" if m.commit else "ABORT", topic, partition, e.message)
                return
            out.left.pop(0)
        del self._outstanding[transactional_id]
        coord = self.coordinator
        if coord is not None:
            self.apply(coord.markers_written(transactional_id, m.producer_id, m.producer_epoch, now=self.now()))

    def _write_marker(self, m: TxnMarkers, topic: str, partition: int) -> None:
        try:
            self.broker.append_txn_marker(topic, partition, m.producer_id, m.producer_epoch, m.commit,
                                          m.coordinator_epoch)
        except UnknownTopicError:
            return  # deleted since it joined the transaction: nothing to mark
        except KafkaError as e:
            if e.code not in _STALE_MARKER:
                raise
            log.error("transactional id %s: %s-%d refused the marker of producer %d epoch %d as stale (%s); "
                      "a newer decision already reached it", m.transactional_id, topic, partition, m.producer_id,
                      m.producer_epoch, e.message)
            return

    def outstanding_markers(self) -> dict[str, list[tuple[str, int]]]:
        """Transactional id -> partitions whose marker is not written yet (for operators and tests)."""
        return {tid: list(o.left) for tid, o in self._outstanding.items()}

    # -- keeping the topic bounded ----------------------------------------------------------------

    def _maybe_rewrite(self, partition: int) -> None:
        if self.due_for_rewrite(partition):
            self.rewrite(partition)

    def rewrite(self, partition: int) -> None:
        """Append the partition's live state to a fresh segment and drop everything before it."""
        coord = self.coordinator
        assert coord is not None
        lg = self.broker.get_log(TXN_STATE_TOPIC, partition)
        lg.roll()
        start = lg.next_offset
        live: list[Record] = list(coord.live_records(partition))
        try:
            if live:
                self._append(partition, live)
            lg.delete_records_before(start)
        except KafkaError as e:
            log.error("could not rewrite %s-%d (it keeps its older records): %s", TXN_STATE_TOPIC, partition,
                      e.message)
            self.rewritten(partition, failed=True)
            return
        self.rewritten(partition)
        log.info("rewrote %s-%d: %d live records from offset %d", TXN_STATE_TOPIC, partition, len(live), start)


class _ShuttingDown(KafkaError):
    code = ErrorCode.NOT_COORDINATOR

    def __init__(self) -> None:
        super().__init__("the broker is shutting down: find the coordinator again")


def read_records(lg: Log) -> list[Record]:
    """Every decodable ``__transaction_state`` record of ``lg`` from its log start, in order (off the loop)."""
    out: list[Record] = []
    start = lg.log_start_offset
    for data, pos, header in stored_batches(lg, start, lg.next_offset):
        if header.is_control:
            continue
        for rec in decode_records(data[pos:pos + header.size]):
            if rec.offset < start or rec.key is None:
                continue
            try:
                decoded = decode_record(bytes(rec.key), None if rec.value is None else bytes(rec.value))
            except TxnRecordError as e:
                log.warning("%s offset %d: skipping an unreadable record: %s", lg.name, rec.offset, e)
                continue
            if decoded is not None:
                out.append(decoded)
    return out
