"""How the coordinator proposes a state change: the next metadata (Kafka's ``prepare*``), and the write carrying it.

A change is never applied here. ``propose`` returns a ``Write`` of the record for the next metadata
and marks the id pending; the change happens when the runtime replays the record. If the append
fails, the ``on_failure`` built here clears the pending mark and maps the append error to what Kafka's
``TransactionStateManager.appendTransactionToLog`` answers clients.

Invariants:
- Every proposed metadata is a legal move (``TxnState.previous``); an illegal one is an
  ``AssertionError`` (a coordinator bug), like Kafka's IllegalStateException.
- Every record carries ``previous_producer_id`` = the producer id before the change, and the
  client transaction version 0 (transaction version 1 requests), as Kafka 4.x writes them.
- At most one write per transactional id is in flight: ``propose`` refuses an id already pending,
  except the Complete record of a prepared transaction (``pending`` already names it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from odradek.coordinator.txn.effects import Reply, TxnMarkers, Write
from odradek.coordinator.txn.model import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TxnMetadata,
    TxnState,
    completion_of,
)
from odradek.coordinator.txn.records import TxnKey
from odradek.coordinator.txn.state import TxnCoordinatorState
from odradek.protocol.errors import ErrorCode

E = ErrorCode
S = TxnState

_APPEND_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
}


def append_error(error: ErrorCode) -> ErrorCode:
    """What a client is told when the append of its transaction record failed with ``error``."""
    return _APPEND_ERRORS.get(error, error)


def _next(meta: TxnMetadata, to: TxnState, now: int, **changes: Any) -> TxnMetadata:
    assert meta.state in to.previous, (
        f"transactional id {meta.transactional_id}: illegal transition {meta.state.display_name} -> {to.display_name}")
    return dataclasses.replace(meta, state=to, last_update_ms=now, previous_producer_id=meta.producer_id,
                               client_transaction_version=0, **changes)


def new_metadata(transactional_id: str, producer_id: int, timeout_ms: int, now: int) -> TxnMetadata:
    """A transactional id seen for the first time: no epoch yet (-1), Empty; InitProducerId then bumps it to 0."""
    return TxnMetadata(transactional_id, producer_id, NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY, frozenset(), -1, now,
                       NO_PRODUCER_ID)


def bump_epoch(meta: TxnMetadata, epoch: int, last_epoch: int, timeout_ms: int, now: int) -> TxnMetadata:
    """Kafka's ``prepareIncrementProducerEpoch`` outcome: Empty with this epoch and the new timeout."""
    return _next(meta, S.EMPTY, now, producer_epoch=epoch, last_producer_epoch=last_epoch, timeout_ms=timeout_ms,
                 partitions=frozenset(), start_ms=-1)


def rotate_producer_id(meta: TxnMetadata, producer_id: int, last_epoch: int, timeout_ms: int,
                       now: int) -> TxnMetadata:
    """Kafka's ``prepareProducerIdRotation``: the epochs of the old id are exhausted; a new id at epoch 0."""
    return _next(meta, S.EMPTY, now, producer_id=producer_id, producer_epoch=0, last_producer_epoch=last_epoch,
                 timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)


def add_partitions(meta: TxnMetadata, partitions: frozenset[TopicPartition], now: int) -> TxnMetadata:
    """Kafka's ``prepareAddPartitions``: Ongoing; a transaction starting now gets ``now`` as its start time."""
    starting = meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
    return _next(meta, S.ONGOING, now, partitions=meta.partitions | partitions,
                 start_ms=now if starting else meta.start_ms)


def fence_epoch(meta: TxnMetadata) -> int:
    """Kafka's ``prepareFenceProducerEpoch``: one more epoch, unless a fence already bumped it or it is at the max."""
    return meta.producer_epoch if meta.producer_epoch >= MAX_EPOCH else meta.producer_epoch + 1


def prepare_end(meta: TxnMetadata, commit: bool, now: int, *, fence_to: int | None = None) -> TxnMetadata:
    """Kafka's ``prepareAbortOrCommit`` at transaction version 1 (no epoch bump unless this is an epoch fence)."""
    to = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
    if fence_to is not None:
        return _next(meta, to, now, producer_epoch=fence_to, last_producer_epoch=NO_PRODUCER_EPOCH,
                     next_producer_id=NO_PRODUCER_ID)
    return _next(meta, to, now, next_producer_id=NO_PRODUCER_ID)


def complete(meta: TxnMetadata, now: int) -> TxnMetadata:
    """Kafka's ``prepareComplete``: markers are written; no partitions any more, same producer id and epoch."""
    return _next(meta, completion_of(meta.state), now, partitions=frozenset(), next_producer_id=NO_PRODUCER_ID)


def markers_for(meta: TxnMetadata, coordinator_epoch: int, txn_partition: int) -> TxnMarkers:
    return TxnMarkers(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                      meta.state is S.PREPARE_COMMIT, coordinator_epoch, tuple(sorted(meta.partitions)), txn_partition)


class Transitions(TxnCoordinatorState):
    def propose(self, meta: TxnMetadata, replies: list[Reply],
                failure_reply: Callable[[ErrorCode], list[Reply]] | None = None, *,
                then_markers: bool = False, on_failure: Callable[[], None] | None = None) -> Write:
        """The write that makes ``meta`` durable; the id is pending ``meta.state`` until it lands or fails.

        ``failure_reply(client_error)`` gives the replies for a failed append; ``on_failure`` runs first
        (in-memory bookkeeping). With ``then_markers`` (a Prepare* record) the runtime starts the
        transaction's markers once the record is durable.
        """
        tid = meta.transactional_id
        assert tid not in self.pending, f"transactional id {tid}: a write is already in flight"
        self.pending[tid] = meta.state
        part = self.partition_of(tid)
        markers = [markers_for(meta, self.coordinator_epoch(tid), part)] if then_markers else []

        def failed(error: ErrorCode) -> list[Reply]:
            if self.pending.get(tid) is meta.state:
                del self.pending[tid]
            if on_failure is not None:
                on_failure()
            return failure_reply(append_error(error)) if failure_reply is not None else []

        return Write(part, [(TxnKey(tid), self.value_of(meta))], replies, failed, markers=markers)

    def propose_complete(self, meta: TxnMetadata, now: int) -> Write:
        """Append the Complete record of a prepared transaction whose markers are written; retried by ``tick``."""
        tid = meta.transactional_id
        self.completing.add(tid)

        def failed(error: ErrorCode) -> list[Reply]:
            self.completing.discard(tid)
            return []

        return Write(self.partition_of(tid), [(TxnKey(tid), self.value_of(complete(meta, now)))], [], failed)

    def fence(self, meta: TxnMetadata, now: int) -> TxnMetadata:
        """Decide an epoch fence of an Ongoing transaction: bump the in-memory epoch now (as Kafka does), and
        return the PrepareAbort metadata to write. The bumped epoch stays fenced if that write fails."""
        epoch = meta.producer_epoch if meta.transactional_id in self.fenced else fence_epoch(meta)
        self.fenced[meta.transactional_id] = epoch
        return prepare_end(meta, False, now, fence_to=epoch)
