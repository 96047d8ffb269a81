"""Transactional offset commits (KIP-98 TxnOffsetCommit, with KIP-447's member fields).

A transactional producer that consumes too (read-process-write) commits the consumed offsets inside
its transaction: the transaction coordinator adds the group's ``__consumer_offsets`` partition to the
transaction (AddOffsetsToTxn), then the producer sends TxnOffsetCommit here. The offsets are written
as one transactional batch of that producer (a ``Write`` with ``producer_id``) and are *pending*:
OffsetFetch does not see them and they are not the group's committed offsets. When the transaction
ends, the transaction coordinator appends a COMMIT or ABORT marker to the partition and the runtime
replays it (``CoordinatorState.replay_marker``): on COMMIT the pending offsets become committed,
each unless the partition's committed offset was written after it; on ABORT they are dropped.

Checks follow Kafka's classic group (``validateOffsetCommit`` with ``isTransactional``):

- An unknown group is created, Empty, when the generation is negative (as a simple OffsetCommit
  creates it); with a generation it is ILLEGAL_GENERATION. A Dead group: COORDINATOR_NOT_AVAILABLE.
- Generation -1 on an Empty group, or generation -1 with no member id and no instance id (v0-v2 carry
  neither), skips the member checks, whatever the group's state: the transaction, not the group
  membership, fences these commits. Otherwise, as OffsetCommit: FENCED_INSTANCE_ID,
  UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION. Unlike OffsetCommit, a group waiting for its SyncGroup
  round does not refuse them, and they do not count as a heartbeat.
- A negative producer id cannot start a transactional batch: INVALID_PRODUCER_ID_MAPPING.
- Per partition, as OffsetCommit: OFFSET_METADATA_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION; the other
  partitions are still written. The offsets carry no expire time.

Invariants: nothing here changes durable state; the pending offsets appear when the write's records
are replayed with the producer id of their batch, exactly as they do when the log is loaded again.
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.coordinator.group.effects import Effects
from odradek.coordinator.group.model import Group, GroupState, Ticket
from odradek.coordinator.group.offsets import CommitRequest, OffsetOps
from odradek.protocol.errors import ErrorCode

E = ErrorCode


class TxnOffsetOps(OffsetOps):
    def txn_commit(self, ticket: Ticket, *, group_id: str, producer_id: int, producer_epoch: int,
                   generation_id: int, member_id: str, group_instance_id: str | None,
                   offsets: list[CommitRequest], partition_exists: Callable[[str, int], bool], now: int) -> Effects:
        """TxnOffsetCommit: write ``offsets`` as pending offsets of ``producer_id``; the reply is
        ``{(topic, partition): ErrorCode}``, sent once the transactional batch is durable."""
        fx = Effects()
        error = self.unavailable(group_id)
        group = self.groups.get(group_id)
        if error is None and producer_id < 0:
            error = E.INVALID_PRODUCER_ID_MAPPING
        if error is None:
            error = self._txn_commit_error(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return fx.reply(ticket, {(t, p): error for t, p, *_ in offsets})
        if group is None:
            self.groups[group_id] = Group(group_id, state_timestamp=now)
        return self.write_offsets(ticket, group_id, offsets, partition_exists, now, producer_id=producer_id,
                                  producer_epoch=producer_epoch)

    def _txn_commit_error(self, group: Group | None, generation_id: int, member_id: str,
                          instance_id: str | None) -> ErrorCode | None:
        if group is None:
            return None if generation_id < 0 else E.ILLEGAL_GENERATION
        if group.is_(GroupState.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None
        if generation_id < 0 and not member_id and instance_id is None:
            return None  # v0-v2, or a producer outside the group: the transaction fences it
        return self.member_error(group, member_id, instance_id, generation_id)
