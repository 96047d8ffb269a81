"""What a coordinator operation asks the runtime to do: records to make durable, then responses to send.

The coordinator never performs I/O. An operation returns ``Effects``: replies that can go out now,
and ``Write``s. For each write the runtime appends ``records`` to partition ``partition`` of the
coordinator's topic; once they are durable it hands each record to ``replay`` (the only way durable
state changes) and sends ``replies``. If the append fails, it sends ``on_failure(error)`` instead,
and nothing was applied.

A write with a ``producer_id`` is a TxnOffsetCommit: its records go to the log as one transactional
batch of that producer and epoch (no sequence number), and replay keeps them pending until the
producer's COMMIT or ABORT marker in that partition (``txn_offsets.py``).

A reply is ``(ticket, payload)``: the ticket is the runtime's handle for a waiting request (the
coordinator only stores and returns it); the payload is the operation's result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.coordinator.group.log_entries import NO_PRODUCER_ID
from odradek.coordinator.group.model import Ticket
from odradek.coordinator.group.records import Key, Value
from odradek.protocol.errors import ErrorCode

Reply = tuple[Ticket, Any]
Record = tuple[Key, Value | None]


@dataclass(slots=True)
class Write:
    partition: int
    records: list[Record]
    replies: list[Reply] = field(default_factory=list)
    on_failure: Callable[[ErrorCode], list[Reply]] | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1


@dataclass(slots=True)
class Effects:
    replies: list[Reply] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # worth a WARNING line in the broker's log
    notes: list[str] = field(default_factory=list)  # routine housekeeping, logged at INFO

    def add(self, other: Effects) -> Effects:
        self.replies.extend(other.replies)
        self.writes.extend(other.writes)
        self.warnings.extend(other.warnings)
        self.notes.extend(other.notes)
        return self

    def reply(self, ticket: Ticket | None, payload: Any) -> Effects:
        if ticket is not None:
            self.replies.append((ticket, payload))
        return self
