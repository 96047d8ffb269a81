"""A transactional id as the coordinator holds it: its producer id and epoch, and its transaction's state.

The states are Kafka's ``TransactionState`` with their wire codes (``transaction_status`` in
``__transaction_state`` values) and names (what DescribeTransactions/ListTransactions show)::

    Empty | Complete* ──AddPartitionsToTxn / AddOffsetsToTxn──► Ongoing (start time = now)
    Ongoing ──EndTxn(commit)──► PrepareCommit ──markers written──► CompleteCommit
    Ongoing ──EndTxn(abort)───► PrepareAbort ───markers written──► CompleteAbort
    Ongoing ──InitProducerId or timeout: PrepareEpochFence (epoch + 1)──► PrepareAbort
    Empty | Complete* ──InitProducerId (epoch + 1, or a new producer id)──► Empty
    Empty | Complete* ──idle for transactional.id.expiration.ms──► Dead (a tombstone: the id is gone)

Invariants:
- ``TxnState.previous`` lists the only states a state may be entered from (Kafka's
  ``validPreviousStates``); ``Dead`` and ``PrepareEpochFence`` are never written to the log: Dead
  is written as a tombstone, and PrepareEpochFence only exists while an epoch-bumping abort is being
  prepared (it goes to the log as PrepareAbort).
- ``TxnMetadata`` holds what the last applied record says (the durable fields) plus
  ``last_producer_epoch``, which Kafka keeps in memory only: it comes from the record object the
  coordinator wrote and reads back as -1 after a reload.
- An epoch is *exhausted* at ``Short.MAX_VALUE - 1`` (32766): the last epoch is kept so that the
  coordinator can always fence one more time.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE

TopicPartition = tuple[str, int]


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``TransactionMetadata.isEpochExhausted``: no epoch may be handed out past 32766."""
    return epoch >= MAX_EPOCH - 1


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name Kafka's admin APIs use (``TransactionState.name``)."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)

    @property
    def previous(self) -> frozenset[TxnState]:
        return _PREVIOUS[self]

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def expiration_allowed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

_S = TxnState
_COMPLETE_OR_EMPTY = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: _COMPLETE_OR_EMPTY,
    _S.ONGOING: _COMPLETE_OR_EMPTY | {_S.ONGOING},
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: _COMPLETE_OR_EMPTY,
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


def completion_of(state: TxnState) -> TxnState:
    """The state a prepared transaction reaches once its markers are written."""
    if state is TxnState.PREPARE_COMMIT:
        return TxnState.COMPLETE_COMMIT
    if state is TxnState.PREPARE_ABORT:
        return TxnState.COMPLETE_ABORT
    raise ValueError(f"{state.display_name} is not a prepared state")


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's metadata: exactly the last applied record (plus the in-memory last epoch)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int  # -1 while no transaction has started (Empty)
    last_update_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    last_producer_epoch: int = NO_PRODUCER_EPOCH  # in memory only, as in Kafka

    def durable(self) -> tuple[object, ...]:
        """Everything a restart rebuilds from the log (all but ``last_producer_epoch``)."""
        return (self.transactional_id, self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                self.partitions, self.start_ms, self.last_update_ms, self.previous_producer_id,
                self.next_producer_id, self.client_transaction_version)
