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

from dataclasses import dataclass, field
from typing import Any

from odradek.coordinator.group import effects as base
from odradek.coordinator.group.model import Ticket
from odradek.coordinator.txn.records import TxnKey, TxnValue

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
class Write(base.Write):
    """The group coordinator's write (records, replies, on_failure), plus markers to start once durable."""

    markers: list[TxnMarkers] = field(default_factory=list)


@dataclass(slots=True)
class Effects(base.Effects):
    """The group coordinator's effects, plus markers to start now."""

    markers: list[TxnMarkers] = field(default_factory=list)

    def add(self, other: base.Effects) -> Effects:
        base.Effects.add(self, other)  # (zero-argument super() fails in slots dataclasses on 3.11)
        if isinstance(other, Effects):
            self.markers.extend(other.markers)
        return self
