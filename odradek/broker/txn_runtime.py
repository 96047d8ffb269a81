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
- The topic stays bounded as ``__consumer_offsets`` does, by compaction (``cleanup.policy=compact``): the
  log cleaner keeps the latest record of every transactional id, which is all replay needs (the durable
  state of an id is its last record). An id that expires (``transactional.id.expiration.ms``) is
  removed by a tombstone, which the cleaner keeps ``delete.retention.ms`` after it first sees it.

Invariant: the coordinator epoch is this broker's: 0. With one broker no other coordinator can write
markers, so the epoch never needs to fence one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.broker.coordinator_runtime import CoordinatorHost, CoordinatorRuntime, replication_error, stored_batches
from odradek.coordinator.group.model import Ticket
from odradek.coordinator.txn.config import TxnConfig
from odradek.coordinator.txn.coordinator import TransactionCoordinator
from odradek.coordinator.txn.effects import Effects, Record, TxnMarkers, Write
from odradek.coordinator.txn.records import TxnRecordError, decode_record, encode_key, encode_value
from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode, KafkaError, UnknownTopicError
from odradek.protocol.records import build_batch, decode_records
from odradek.replica.partition import Partition
from odradek.storage.log import Log

log = logging.getLogger(__name__)

TXN_STATE_TOPIC = "__transaction_state"
COORDINATOR_EPOCH = 0
_STALE_MARKER = (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED)


@dataclass(slots=True)
class _Outstanding:
    """Markers of one transaction still to be written: the partitions not yet done."""

    markers: TxnMarkers
    left: list[tuple[str, int]] = field(default_factory=list)
    sending: bool = False  # cluster: a WriteTxnMarkers round is in flight


class TxnRuntime(CoordinatorRuntime):
    def __init__(self, broker: CoordinatorHost, config: TxnConfig, segment_bytes: int) -> None:
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
        self.compact_existing_topic()
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
            self.apply(coord.finish_load(p, self.now()))
            if records:
                log.info("loaded %d records of %s-%d", len(records), TXN_STATE_TOPIC, p)

    def ensure_started(self) -> TransactionCoordinator:
        """The coordinator, creating ``__transaction_state`` on first use (in a cluster it owns no partition
        until this broker leads one: ``on_leadership``)."""
        if self.coordinator is None:
            cfg = self.broker.config
            partitions = self.create_topic(self.config.num_partitions,
                                           replication_factor=cfg.transaction_state_log_replication_factor,
                                           min_isr=cfg.transaction_state_log_min_isr)
            self.coordinator = self._new_coordinator(partitions)
            if self.broker.replicated:
                self.coordinator.owned = set()
        return self.coordinator

    def view(self) -> TransactionCoordinator:
        """The coordinator for read-only requests: before the topic exists, an empty one (nothing is created)."""
        if self.coordinator is not None:
            return self.coordinator
        empty = self._new_coordinator(self.config.num_partitions)
        if self.broker.replicated:
            empty.owned = set()
        return empty

    def _new_cluster_coordinator(self, partitions: int | None) -> TransactionCoordinator:
        return self._new_coordinator(partitions if partitions is not None else self.config.num_partitions)

    def _begin_load(self, partition: int, leader_epoch: int) -> None:
        """The coordinator epoch is the partition's leader epoch: it fences markers of an older coordinator."""
        assert self.coordinator is not None
        self.coordinator.begin_load(partition, leader_epoch)

    def _unload(self, partition: int) -> None:
        coord = self.coordinator
        assert coord is not None
        coord.unload(partition)
        for tid in [t for t in self._outstanding if coord.partition_of(t) == partition]:
            del self._outstanding[tid]  # the next coordinator writes them again

    async def _load_one(self, p: int, gen: int) -> None:
        coord = self.coordinator
        assert coord is not None
        lg = self.broker.get_log(TXN_STATE_TOPIC, p)
        records = await asyncio.to_thread(read_records, lg)
        if not self.load_current(p, gen):
            return
        for key, value in records:
            coord.replay(key, value)
        self.apply(coord.finish_load(p, self.now()))
        log.info("loaded %d records of %s-%d as its leader", len(records), TXN_STATE_TOPIC, p)

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
            part, end = self._append(write.partition, write.records)
        except KafkaError as e:
            log.error("could not write %d records to %s-%d: %s", len(write.records), TXN_STATE_TOPIC,
                      write.partition, e.message)
            if write.on_failure is not None:
                self.deliver(write.on_failure(replication_error(e.code) if self.broker.replicated else e.code))
            return
        for key, value in write.records:
            coord.replay(key, value)

        def committed() -> None:
            for markers in write.markers:
                self._start_markers(markers)
        self.deliver_when_replicated(part, end, write.replies, write.on_failure, then=committed)

    def _append(self, partition: int, records: list[Record]) -> tuple[Partition, int]:
        """Append as the partition's leader: (the partition, the offset after the write)."""
        encoded = [(encode_key(k), encode_value(v)) for k, v in records]
        part, info = self.broker.replicas.append(TXN_STATE_TOPIC, partition,
                                                 build_batch(encoded, base_timestamp=self.now()))
        return part, info.last_offset + 1

    # -- markers ---------------------------------------------------------------------------------

    def _start_markers(self, markers: TxnMarkers) -> None:
        self._outstanding[markers.transactional_id] = _Outstanding(markers, list(markers.partitions))
        self._write_markers(markers.transactional_id)

    def _write_markers(self, transactional_id: str) -> None:
        """Write what is left of one transaction's markers; once all are written, report it."""
        if self.broker.replicated:
            self._send_markers(transactional_id)
            return
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

    def _send_markers(self, transactional_id: str) -> None:
        """Cluster: send WriteTxnMarkers to the leaders of the partitions still to be marked (this broker's
        own included, through the same path), one request per leader; what fails is retried by ``tick``."""
        out = self._outstanding.get(transactional_id)
        if out is None or out.sending:
            return
        if not out.left:
            self._markers_done(transactional_id)
            return
        out.sending = True
        self.spawn(self._send_markers_async(transactional_id, out))

    async def _send_markers_async(self, transactional_id: str, out: _Outstanding) -> None:
        b = self.broker
        m = out.markers
        cluster = b.cluster
        assert cluster is not None
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in out.left:
            state = cluster.states.get((topic, partition))
            if b.registry.get(topic) is None:
                by_leader.setdefault(-2, []).append((topic, partition))  # deleted: nothing to mark
            elif state is not None and state.online:
                by_leader.setdefault(state.leader, []).append((topic, partition))
        done: set[tuple[str, int]] = set(by_leader.pop(-2, []))
        try:
            results = await asyncio.gather(*(self._send_to(leader, m, parts) for leader, parts in by_leader.items()),
                                           return_exceptions=True)
            for leader, result in zip(list(by_leader), results, strict=True):
                if isinstance(result, BaseException):
                    log.warning("transactional id %s: markers to broker %d failed (retrying): %s", transactional_id,
                                leader, result)
                    continue
                done.update(result)
        finally:
            out.sending = False
        if self._outstanding.get(transactional_id) is not out:
            return  # unloaded meanwhile
        out.left = [tp for tp in out.left if tp not in done]
        if not out.left:
            self._markers_done(transactional_id)

    async def _send_to(self, leader: int, m: TxnMarkers, parts: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """Send one WriteTxnMarkers to ``leader``; the partitions it marked (or that need no marker)."""
        topics: dict[str, list[int]] = {}
        for topic, partition in parts:
            topics.setdefault(topic, []).append(partition)
        request = {"markers": [{"producer_id": m.producer_id, "producer_epoch": m.producer_epoch,
                                "transaction_result": m.commit, "coordinator_epoch": m.coordinator_epoch,
                                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]}
        response = await self.broker.pool.send(leader, apis.WRITE_TXN_MARKERS, request, version=1)
        done: set[tuple[str, int]] = set()
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    code = ErrorCode(int(p.error_code))
                    if code is ErrorCode.NONE or code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        done.add((t.name, p.partition_index))
                    elif code in _STALE_MARKER:
                        log.error("transactional id %s: %s-%d refused the marker as stale (%s); a newer decision "
                                  "already reached it", m.transactional_id, t.name, p.partition_index, code.name)
                        done.add((t.name, p.partition_index))
        return done

    def _markers_done(self, transactional_id: str) -> None:
        out = self._outstanding.pop(transactional_id)
        m = out.markers
        coord = self.coordinator
        if coord is not None:
            self.apply(coord.markers_written(transactional_id, m.producer_id, m.producer_epoch, now=self.now()))

    def outstanding_markers(self) -> dict[str, list[tuple[str, int]]]:
        """Transactional id -> partitions whose marker is not written yet (for operators and tests)."""
        return {tid: list(o.left) for tid, o in self._outstanding.items()}


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
