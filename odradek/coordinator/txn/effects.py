"""What a transaction coordinator operation asks the runtime to do: records, replies, transaction markers.

The coordinator never performs I/O. An operation returns ``Effects``:

- ``replies`` that can go out now;
- ``writes``: for each, the runtime appends ``records`` to partition ``partition`` of
  ``__transaction_state`` as one append. Once they are durable it hands each record to ``replay``
  (the only way durable state changes), sends ``replies``, and then starts every ``TxnMarkers`` in
  ``markers``. If the append fails it calls ``on_failure(error)`` instead, sends the replies that
  returns, and starts no markers; nothing was applied;
- ``markers`` to start now (transactions found prepared when a partition finished loading).

Writing markers (``TxnMarkers``): the runtime appends a control batch (COMMIT or ABORT, with
``coordinator_epoch``) for ``producer_id``/``producer_epoch`` to every partition in ``partitions``
(its own WriteTxnMarkers), retrying until each partition has it or no longer exists; then it calls
``TransactionCoordinator.markers_written(transactional_id, producer_id, producer_epoch, now)`` and
applies the Effects that returns (the CompleteCommit/CompleteAbort record). Markers started for a
partition of ``__transaction_state`` that the runtime then unloads may be dropped: the next load
starts them again.

A reply is ``(ticket, payload)``: the ticket is the runtime's handle for a waiting request (the
coordinator only stores and returns it); payload types are in ``replies.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.coordinator.group.model import Ticket
from odradek.coordinator.txn.records import TxnKey, TxnValue
from odradek.protocol.errors import ErrorCode

Reply = tuple[Ticket, Any]
Record = tuple[TxnKey, TxnValue | None]


@dataclass(frozen=True, slots=True)
class TxnMarkers:
    """Write a COMMIT (``commit``) or ABORT control record for this producer to each of ``partitions``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]  # sorted (topic, partition)
    txn_partition: int  # the __transaction_state partition that owns the transactional id


@dataclass(slots=True)
class Write:
    partition: int
    records: list[Record]
    replies: list[Reply] = field(default_factory=list)
    on_failure: Callable[[ErrorCode], list[Reply]] | None = None
    markers: list[TxnMarkers] = field(default_factory=list)  # started once the records are durable


@dataclass(slots=True)
class Effects:
    replies: list[Reply] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    markers: list[TxnMarkers] = field(default_factory=list)  # start now
    warnings: list[str] = field(default_factory=list)  # worth a WARNING line in the broker's log
    notes: list[str] = field(default_factory=list)  # routine housekeeping, logged at INFO

    def add(self, other: Effects) -> Effects:
        self.replies.extend(other.replies)
        self.writes.extend(other.writes)
        self.markers.extend(other.markers)
        self.warnings.extend(other.warnings)
        self.notes.extend(other.notes)
        return self

    def reply(self, ticket: Ticket | None, payload: Any) -> Effects:
        if ticket is not None:
            self.replies.append((ticket, payload))
        return self
