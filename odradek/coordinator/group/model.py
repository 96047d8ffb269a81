"""A consumer group as the coordinator holds it in memory: members, generation, state, committed offsets.

The classic group protocol's states (Kafka's GroupState) and their legal transitions::

    Empty ──join──► PreparingRebalance ──all joined / rebalance timeout──► CompletingRebalance
      ▲                 ▲        │ (no member left)                          │ leader's SyncGroup durable
      └─────────────────┼────────┘                                          ▼
                        └──────── join / leave / expiry ◄────────────── Stable
    any ──DeleteGroups / all offsets expired while Empty──► Dead (removed)

Invariants:
- ``transition`` refuses any move not drawn above (an ``AssertionError``: a coordinator bug).
- ``static_members`` maps each ``group.instance.id`` to the member id that currently holds it, and
  only members in ``members`` appear in it.
- The leader, when set, is a member. ``generation`` only grows.
- A member has at most one pending JoinGroup and one pending SyncGroup response (``join_ticket``,
  ``sync_ticket``); a member with either pending is kept alive without heartbeats, as in Kafka.
- ``offsets`` holds what the last applied records say; nothing else writes it. ``pending_txn_offsets``
  holds the transactional offsets (TxnOffsetCommit) whose producer's COMMIT or ABORT marker has not
  been applied yet, by producer id; they are not committed offsets (``txn_offsets.py``). Both change
  only in replay.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from odradek.coordinator.group.records import GroupValue

Ticket = int  # the runtime's handle for a pending response
CONSUMER = "consumer"  # the protocol type of consumer groups (whose metadata consumer_protocol.py reads)


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_ALLOWED: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}),
    GroupState.COMPLETING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset(),
}


TopicPartition = tuple[str, int]


@dataclass(slots=True)
class OffsetEntry:
    """A committed (or pending transactional) offset.

    ``record_offset`` is where the record that wrote it sits in ``__consumer_offsets`` (Kafka's
    recordOffset; a copy an earlier version's rewrite appended keeps its original's): a transactional
    offset is applied at its COMMIT marker only over an offset written before it.
    """

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1
    record_offset: int = -1


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_ticket: Ticket | None = None
    sync_ticket: Ticket | None = None
    heartbeat_deadline: int = 0
    timer_scheduled: bool = False  # a heartbeat-expiry timer for this member is in the heap

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    @property
    def keep_alive(self) -> bool:
        return self.join_ticket is not None or self.sync_ticket is not None


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    state_timestamp: int = -1
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline (MEMBER_ID_REQUIRED)
    pending_sync: set[str] = field(default_factory=set)  # members of this generation not yet synced
    join_deadline: int | None = None  # PreparingRebalance: when the join phase ends regardless
    join_deadline_cap: int | None = None  # initial delay: extensions never pass this
    in_initial_delay: bool = False
    new_member_added: bool = False  # a member joined during the initial delay (which then extends)
    sync_deadline: int | None = None  # CompletingRebalance: members not synced by then are removed
    offsets: dict[TopicPartition, OffsetEntry] = field(default_factory=dict)
    pending_txn_offsets: dict[int, dict[TopicPartition, OffsetEntry]] = field(default_factory=dict)  # by producer id
    persisted: GroupValue | None = None  # the last group record applied (what a restart would rebuild)

    # -- states -------------------------------------------------------------------------------------

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def transition(self, to: GroupState, now: int) -> None:
        assert to in _ALLOWED[self.state], f"group {self.group_id}: illegal transition {self.state} -> {to}"
        self.state = to
        self.state_timestamp = now

    def has_pending(self, tp: TopicPartition) -> bool:
        """Whether a transactional offset of ``tp`` awaits its marker (OffsetFetch: UNSTABLE_OFFSET_COMMIT)."""
        return any(tp in offsets for offsets in self.pending_txn_offsets.values())

    def pending_partitions(self) -> set[TopicPartition]:
        return {tp for offsets in self.pending_txn_offsets.values() for tp in offsets}

    # -- members ------------------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def replace_static(self, instance_id: str, new_member_id: str) -> Member:
        """Give the static member holding ``instance_id`` a new member id (it restarted); same assignment."""
        old = self.members.pop(self.static_members[instance_id])
        if self.leader == old.member_id:
            self.leader = new_member_id
        if old.member_id in self.pending_sync:
            self.pending_sync.discard(old.member_id)
            self.pending_sync.add(new_member_id)
        old.member_id = new_member_id
        self.members[new_member_id] = old
        self.static_members[instance_id] = new_member_id
        return old

    def fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A static member whose instance id is now held by another member id (FENCED_INSTANCE_ID)."""
        if instance_id is None:
            return False
        holder = self.static_members.get(instance_id)
        return holder is not None and holder != member_id

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_ticket is not None for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ----------------------------------------------------------------------------------

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join: same type, and one protocol all members share."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Every member votes for its most preferred protocol that all members support; most votes wins.

        Ties go to the protocol the leader prefers most, so the choice is deterministic.
        """
        candidates = self.candidate_protocols()
        assert candidates, f"group {self.group_id} has no protocol all members support"
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(name for name in m.protocol_names() if name in candidates)] += 1
        best = max(votes.values())
        leader = self.members.get(self.leader or "") or next(iter(self.members.values()))
        order = leader.protocol_names()
        return min((p for p, v in votes.items() if v == best), key=lambda p: order.index(p))
