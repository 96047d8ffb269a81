"""What the transaction coordinator's operations answer, as plain values the API handlers serialize.

AddPartitionsToTxn (including AddOffsetsToTxn) and EndTxn answer a bare ``ErrorCode``;
InitProducerId answers ``InitProducerIdResult``; DescribeTransactions a ``DescribedTransaction`` per
id; ListTransactions a ``ListTransactionsResult``. ``verify_partitions`` answers a dict
``{(topic, partition): ErrorCode}``.

Invariants: every error is a Kafka wire code; on an error InitProducerId carries producer id -1 and
epoch -1, and a DescribedTransaction carries the zero values Kafka's generated response has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.coordinator.txn.model import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from odradek.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    transactional_id: str
    error: ErrorCode
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = 0
    producer_id: int = 0
    producer_epoch: int = 0
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error: ErrorCode
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[ListedTransaction, ...] = field(default_factory=tuple)


def for_request_version(error: ErrorCode, api: str, version: int) -> ErrorCode:
    """The code to send a client of this request version (KIP-588): PRODUCER_FENCED as INVALID_PRODUCER_EPOCH.

    Clients before InitProducerId v4, AddPartitionsToTxn v2, AddOffsetsToTxn v2, EndTxn v2 and
    TxnOffsetCommit v3 do not know PRODUCER_FENCED; Kafka sends them INVALID_PRODUCER_EPOCH, which
    they handle the same way. ``api`` is one of those names.
    """
    first = _PRODUCER_FENCED_SINCE[api]
    if error is ErrorCode.PRODUCER_FENCED and version < first:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


_PRODUCER_FENCED_SINCE = {
    "InitProducerId": 4,
    "AddPartitionsToTxn": 2,
    "AddOffsetsToTxn": 2,
    "EndTxn": 2,
    "TxnOffsetCommit": 3,
}
