"""The group coordinator's state and the one way durable state changes: replaying ``__consumer_offsets`` records.

Two kinds of state live here, as in Kafka's classic group coordinator:

- Durable state: committed offsets, pending transactional offsets, and each group's last persisted
  generation (protocol, leader, members and their assignments). It changes only in ``replay`` (one
  data record, with its log offset and the producer id of its transactional batch, if any) and
  ``replay_marker`` (a COMMIT or ABORT control record), which are called for every entry read at
  startup and for every record written, once it is durable. So the state after a restart is exactly
  what replaying the topic gives.
- The rebalance in progress: who has rejoined this round, pending JoinGroup/SyncGroup responses,
  heartbeat deadlines. Kafka keeps these in memory only, and so do we: after a restart members find
  their generation gone or stale and rejoin.

Invariants:
- ``replay`` of a group value is authoritative: the group's generation, protocol, leader and members
  become the record's; runtime fields of members that keep their id survive (pending responses,
  deadlines). A group value with members leaves the group Stable, one without members Empty; a
  group tombstone removes the group.
- Transactional offsets (as Kafka's OffsetMetadataManager): a record of producer P is pending in its
  group (``Group.pending_txn_offsets[P]``), invisible to OffsetFetch, until a marker of P in the same
  partition: COMMIT moves each of P's pending offsets there into the committed offsets unless the
  committed one was written later (a higher ``record_offset``); ABORT drops them. A tombstone of a
  group-partition drops its committed offset and every pending one; a group tombstone drops the
  group with all of its offsets, pending ones included. ``open_txns`` indexes which groups hold
  pending offsets of each (partition, producer), so a marker touches only those groups.
- A partition in ``loading`` answers every group operation with COORDINATOR_LOAD_IN_PROGRESS; in a cluster, a
  partition not in ``owned`` (this broker does not lead it) answers NOT_COORDINATOR.
- Timers are a heap of (deadline, seq, kind, group, member) checked lazily: an entry whose group,
  member or deadline changed since it was pushed is skipped or re-pushed when it comes due, so a
  heartbeat costs no heap operation.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Callable

from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.log_entries import NO_PRODUCER_ID, LogEntry, TxnMarker
from odradek.coordinator.group.model import Group, GroupState, Member, OffsetEntry
from odradek.coordinator.group.records import (
    GroupKey,
    GroupValue,
    Key,
    MemberValue,
    OffsetKey,
    OffsetValue,
    Value,
    partition_for,
)
from odradek.protocol.errors import ErrorCode

HEARTBEAT, PENDING, JOIN, SYNC = "heartbeat", "pending", "join", "sync"


def default_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"


class CoordinatorState:
    def __init__(self, config: GroupConfig, num_partitions: int, *,
                 new_member_id: Callable[[str], str] = default_member_id) -> None:
        self.config = config
        self.num_partitions = num_partitions
        self.groups: dict[str, Group] = {}
        self.loading: set[int] = set()
        # the partitions this broker coordinates; None = all of them (a single node)
        self.owned: set[int] | None = None
        self.open_txns: dict[tuple[int, int], set[str]] = {}  # (partition, producer id) -> groups with its offsets
        self._timers: list[tuple[int, int, str, str, str]] = []
        self._seq = itertools.count()
        self._new_member_id = new_member_id
        self._partition_cache: dict[str, int] = {}

    # -- lookups ------------------------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        part = self._partition_cache.get(group_id)
        if part is None:
            if len(self._partition_cache) > 100_000:  # bounded: ids from arbitrary clients
                self._partition_cache.clear()
            part = self._partition_cache[group_id] = partition_for(group_id, self.num_partitions)
        return part

    def unavailable(self, group_id: str | None) -> ErrorCode | None:
        """The error for any operation on ``group_id`` before looking at the group, or None."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if self.owned is not None and self.partition_of(group_id) not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        if self.partition_of(group_id) in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    def member_error(self, group: Group | None, member_id: str, instance_id: str | None,
                     generation_id: int) -> ErrorCode | None:
        """The error for a request naming this member and generation, as Kafka checks them (or None)."""
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if instance_id is not None and instance_id not in group.static_members:
            return ErrorCode.UNKNOWN_MEMBER_ID  # an instance id no member holds (Kafka's validateCurrentMember)
        if member_id not in group.members or group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return None

    def groups_in(self, partition: int) -> list[Group]:
        return [g for g in self.groups.values() if self.partition_of(g.group_id) == partition]

    # -- timers -------------------------------------------------------------------------------------

    def schedule(self, deadline: int, kind: str, group_id: str, member_id: str = "") -> None:
        heapq.heappush(self._timers, (deadline, next(self._seq), kind, group_id, member_id))

    def schedule_heartbeat(self, group: Group, member: Member, now: int) -> None:
        member.heartbeat_deadline = now + member.session_timeout_ms
        if not member.timer_scheduled:
            member.timer_scheduled = True
            self.schedule(member.heartbeat_deadline, HEARTBEAT, group.group_id, member.member_id)

    def due_timers(self, now: int) -> list[tuple[int, str, str, str]]:
        due = []
        while self._timers and self._timers[0][0] <= now:
            deadline, _, kind, group_id, member_id = heapq.heappop(self._timers)
            due.append((deadline, kind, group_id, member_id))
        return due

    def next_deadline(self) -> int | None:
        return self._timers[0][0] if self._timers else None

    # -- replay -------------------------------------------------------------------------------------

    def replay(self, key: Key, value: Value | None, *, record_offset: int,
               producer_id: int = NO_PRODUCER_ID) -> None:
        """Apply one durable data record: at ``record_offset``, in a transactional batch of ``producer_id``
        (or none). With ``replay_marker``, the only way committed offsets and persisted groups change."""
        if isinstance(key, OffsetKey):
            assert value is None or isinstance(value, OffsetValue)
            self._replay_offset(key, value, record_offset, producer_id)
        else:
            assert value is None or isinstance(value, GroupValue)
            self._replay_group(key, value)

    def replay_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """Apply a COMMIT or ABORT marker of ``producer_id`` in ``partition`` to that producer's pending offsets."""
        for group_id in sorted(self.open_txns.pop((partition, producer_id), ())):
            group = self.groups.get(group_id)
            pending = group.pending_txn_offsets.pop(producer_id, None) if group is not None else None
            if group is None or pending is None or not commit:
                continue
            for tp, entry in pending.items():
                current = group.offsets.get(tp)
                if current is None or entry.record_offset > current.record_offset:
                    group.offsets[tp] = entry

    def replay_entry(self, partition: int, entry: LogEntry) -> None:
        """Apply one entry read back from ``partition`` (a data record or a transaction marker)."""
        if isinstance(entry, TxnMarker):
            self.replay_marker(partition, entry.producer_id, entry.commit)
        else:
            self.replay(entry.key, entry.value, record_offset=entry.record_offset, producer_id=entry.producer_id)

    def _replay_offset(self, key: OffsetKey, value: OffsetValue | None, record_offset: int, producer_id: int) -> None:
        group = self.groups.get(key.group)
        tp = (key.topic, key.partition)
        if value is None:
            if group is not None:
                group.offsets.pop(tp, None)
                for pid in [pid for pid, offsets in group.pending_txn_offsets.items() if tp in offsets]:
                    self._drop_pending(group, pid, tp)
            return
        if group is None:
            group = self.groups[key.group] = Group(key.group)
        entry = OffsetEntry(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
                            value.expire_timestamp, record_offset)
        if producer_id == NO_PRODUCER_ID:
            group.offsets[tp] = entry
            return
        group.pending_txn_offsets.setdefault(producer_id, {})[tp] = entry
        self.open_txns.setdefault((self.partition_of(key.group), producer_id), set()).add(key.group)

    def _drop_pending(self, group: Group, producer_id: int, tp: tuple[str, int]) -> None:
        offsets = group.pending_txn_offsets[producer_id]
        del offsets[tp]
        if not offsets:
            del group.pending_txn_offsets[producer_id]
            self._close_txn(group, producer_id)

    def _close_txn(self, group: Group, producer_id: int) -> None:
        key = (self.partition_of(group.group_id), producer_id)
        groups = self.open_txns.get(key)
        if groups is not None:
            groups.discard(group.group_id)
            if not groups:
                del self.open_txns[key]

    def forget(self, group: Group) -> None:
        """Drop ``group`` and everything it holds from memory (a group tombstone, or a partition reloading)."""
        self.groups.pop(group.group_id, None)
        for producer_id in group.pending_txn_offsets:
            self._close_txn(group, producer_id)
        group.pending_txn_offsets = {}

    def _replay_group(self, key: GroupKey, value: GroupValue | None) -> None:
        if value is None:
            group = self.groups.get(key.group)
            if group is not None:
                self.forget(group)
                group.state = GroupState.DEAD
            return
        group = self.groups.get(key.group)
        if group is None:
            group = self.groups[key.group] = Group(key.group)
        group.persisted = value
        group.generation = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol = value.protocol
        group.state_timestamp = value.current_state_timestamp
        members: dict[str, Member] = {}
        for mv in value.members:
            members[mv.member_id] = self._member_from_record(group, value, mv)
        group.members = members
        group.static_members = {m.group_instance_id: m.member_id for m in members.values()
                                if m.group_instance_id is not None}
        group.leader = value.leader if value.leader in members else next(iter(members), None)
        group.pending_sync &= set(members)
        group.state = GroupState.STABLE if members else GroupState.EMPTY

    def _member_from_record(self, group: Group, value: GroupValue, mv: MemberValue) -> Member:
        member = group.members.get(mv.member_id)
        if member is None:
            member = Member(mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host, mv.rebalance_timeout,
                            mv.session_timeout, value.protocol_type, [(value.protocol or "", mv.subscription)])
        member.assignment = mv.assignment
        return member

    def group_record(self, group: Group, now: int, assignments: dict[str, bytes] | None = None) -> GroupValue:
        """The group value that persists ``group`` as it is now (with these assignments, if given)."""
        members = tuple(
            MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                        m.session_timeout_ms, m.metadata(group.protocol),
                        assignments.get(m.member_id, b"") if assignments is not None else m.assignment)
            for m in group.members.values()
        )
        return GroupValue(group.protocol_type or "", group.generation, group.protocol, group.leader, now, members)
