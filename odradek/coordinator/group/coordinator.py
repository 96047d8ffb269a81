"""The group coordinator: the rebalance protocol and committed offsets over one replayable state.

``GroupCoordinator`` is pure: every operation takes the time and returns ``Effects`` (records to
append to ``__consumer_offsets``, responses to send); the broker's runtime (``broker/group_runtime.py``)
does the I/O. Membership is in ``membership.py``, offsets in ``offsets.py``, transactional offsets in
``txn_offsets.py``. This module adds what spans groups: DescribeGroups, ListGroups, DeleteGroups, the
periodic ``tick``, and loading a partition at startup. (The log cleaner keeps the topic bounded:
every deletion here is written as tombstones, one per key it removes, so a compacted log replays
to the same state.)

Invariants:
- State that survives a restart changes only through ``replay`` (``state.py``).
- Loading partition ``p``: ``begin_load(p)`` (requests for its groups get COORDINATOR_LOAD_IN_PROGRESS),
  ``replay_entry`` every record and marker from the log start, ``finish_load(p, now)``; loaded members
  get a fresh session timeout from ``now``. Pending transactional offsets stay pending through a load:
  their markers, when they come, settle them.
"""

from __future__ import annotations

from typing import Any

from odradek.coordinator.group.effects import Effects, Write
from odradek.coordinator.group.membership import Membership
from odradek.coordinator.group.model import GroupState, Ticket
from odradek.coordinator.group.records import GroupKey, OffsetKey
from odradek.coordinator.group.txn_offsets import TxnOffsetOps
from odradek.protocol.errors import ErrorCode

E = ErrorCode


class GroupCoordinator(Membership, TxnOffsetOps):
    _next_retention_check: int | None = None

    # -- loading ------------------------------------------------------------------------------------

    def begin_load(self, partition: int) -> None:
        self.loading.add(partition)
        for group in self.groups_in(partition):  # a reload starts from nothing
            self.forget(group)

    def unload(self, partition: int) -> list[Ticket]:
        """This broker no longer leads ``partition``: forget its groups; the tickets of their waiting
        JoinGroup/SyncGroup requests (to be answered NOT_COORDINATOR)."""
        tickets = []
        for group in self.groups_in(partition):
            for m in group.members.values():
                tickets.extend(t for t in (m.join_ticket, m.sync_ticket) if t is not None)
            self.forget(group)
        self.loading.discard(partition)
        if self.owned is not None:
            self.owned.discard(partition)
        return tickets

    def finish_load(self, partition: int, now: int) -> None:
        self.loading.discard(partition)
        for group in self.groups_in(partition):
            for member in group.members.values():
                member.timer_scheduled = False
                self.schedule_heartbeat(group, member, now)

    # -- periodic work ------------------------------------------------------------------------------

    def tick(self, now: int) -> Effects:
        fx = self.expire(now)
        if self._next_retention_check is None:
            self._next_retention_check = now + self.config.offsets_retention_check_interval_ms
        elif now >= self._next_retention_check:
            self._next_retention_check = now + self.config.offsets_retention_check_interval_ms
            fx.add(self.expire_offsets(now))
        return fx

    # -- DescribeGroups / ListGroups ----------------------------------------------------------------

    def describe(self, group_id: str) -> dict[str, Any]:
        error = self.unavailable(group_id)
        group = self.groups.get(group_id)
        if error is not None or group is None:
            return {"error_code": error or E.NONE, "group_id": group_id, "group_state": GroupState.DEAD.value,
                    "protocol_type": "", "protocol_data": "", "members": []}
        stable = group.is_(GroupState.STABLE)
        members = [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "member_metadata": m.metadata(group.protocol) if stable else b"",
            "member_assignment": m.assignment if stable else b"",
        } for m in group.members.values()]
        return {"error_code": E.NONE, "group_id": group_id, "group_state": group.state.value,
                "protocol_type": group.protocol_type or "", "protocol_data": (group.protocol or "") if stable else "",
                "members": members}

    def list_groups(self, states: set[str] | None = None) -> list[dict[str, Any]]:
        """Every group not being loaded, filtered by state names (case-insensitive, as Kafka)."""
        wanted = {s.lower() for s in states} if states else None
        out = []
        for group in self.groups.values():
            if self.partition_of(group.group_id) in self.loading:
                continue
            if wanted is not None and group.state.value.lower() not in wanted:
                continue
            out.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                        "group_state": group.state.value, "group_type": "classic"})
        return sorted(out, key=lambda g: g["group_id"])

    # -- DeleteGroups -------------------------------------------------------------------------------

    def delete_group(self, ticket: Ticket, group_id: str) -> Effects:
        """Delete an Empty group and its offsets, pending transactional ones included; the reply is an ``ErrorCode``."""
        fx = Effects()
        error = self.unavailable(group_id)
        group = self.groups.get(group_id)
        if error is None and (group is None or group.is_(GroupState.DEAD)):
            error = E.GROUP_ID_NOT_FOUND
        if error is None and group is not None and not group.is_(GroupState.EMPTY):
            error = E.NON_EMPTY_GROUP
        if error is not None or group is None:
            return fx.reply(ticket, error)
        # as Kafka: pending transactional offsets go too (their tombstones drop them), and the group with them
        doomed = sorted(set(group.offsets) | group.pending_partitions())
        records: list[Any] = [(OffsetKey(group_id, t, p), None) for t, p in doomed]
        records.append((GroupKey(group_id), None))
        fx.writes.append(Write(self.partition_of(group_id), records, [(ticket, E.NONE)], lambda err: [(ticket, err)]))
        return fx

    # -- shutdown -----------------------------------------------------------------------------------

    def pending_tickets(self) -> list[Ticket]:
        """Every ticket waiting in JoinGroup or SyncGroup (the runtime answers them at shutdown)."""
        out = []
        for group in self.groups.values():
            for m in group.members.values():
                out.extend(t for t in (m.join_ticket, m.sync_ticket) if t is not None)
        return out
