"""The classic rebalance protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and their timeouts.

Follows Kafka's classic group coordinator (states in ``model.py``):

- JoinGroup moves a group to PreparingRebalance; the join phase ends when every member (and every
  member id handed out with MEMBER_ID_REQUIRED) has rejoined, or when the largest rebalance timeout
  passes; members that did not rejoin are removed. An Empty group first waits
  ``group.initial.rebalance.delay.ms``, extended while new members keep arriving, never past the
  rebalance timeout. Ending the join phase bumps the generation, selects a protocol and answers
  every pending JoinGroup; only the leader gets the members and their subscriptions.
- The leader's SyncGroup carries the assignment: it is written as a group record, and once durable
  the group is Stable and every waiting member gets its part. Members that do not sync within the
  rebalance timeout are removed (another rebalance).
- A heartbeat keeps a member for ``session.timeout.ms``; expiry removes it and rebalances. Members
  waiting in JoinGroup or SyncGroup are kept alive.
- Static members (``group.instance.id``) rejoining with a new member id take over their old id and
  assignment without a rebalance when the group is Stable and their protocols are unchanged, the
  leader included; the old member id is fenced (FENCED_INSTANCE_ID).
- A malformed assignment from the leader fails that generation only: waiting members get
  REBALANCE_IN_PROGRESS and rejoin.

Every operation takes ``now`` (milliseconds) and returns ``Effects``; nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

from odradek.coordinator.group import consumer_protocol
from odradek.coordinator.group.effects import Effects, Write
from odradek.coordinator.group.model import CONSUMER, Group, GroupState, Member, Ticket
from odradek.coordinator.group.records import GroupKey
from odradek.coordinator.group.state import HEARTBEAT, JOIN, PENDING, SYNC, CoordinatorState
from odradek.protocol.errors import ErrorCode

E = ErrorCode


def join_error(error: ErrorCode, member_id: str = "") -> dict[str, Any]:
    return {"error_code": error, "generation_id": -1, "protocol_type": None, "protocol_name": None, "leader": "",
            "skip_assignment": False, "member_id": member_id, "members": []}


def sync_error(error: ErrorCode) -> dict[str, Any]:
    return {"error_code": error, "protocol_type": None, "protocol_name": None, "assignment": b""}


class Membership(CoordinatorState):
    # -- JoinGroup ----------------------------------------------------------------------------------

    def join(self, ticket: Ticket, *, group_id: str, member_id: str, group_instance_id: str | None,
             protocol_type: str, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
             rebalance_timeout_ms: int, client_id: str, client_host: str, require_known_member_id: bool,
             supports_skip_assignment: bool, now: int) -> Effects:
        fx = Effects()
        error = self.unavailable(group_id)
        if error is None and not (self.config.min_session_timeout_ms <= session_timeout_ms
                                  <= self.config.max_session_timeout_ms):
            error = E.INVALID_SESSION_TIMEOUT
        group = self.groups.get(group_id)
        if error is None and group is None and member_id:
            error = E.UNKNOWN_MEMBER_ID
        if error is None and group is not None and not group.supports(protocol_type, protocols):
            error = E.INCONSISTENT_GROUP_PROTOCOL
        if error is None and group is None and not (protocol_type and protocols):
            error = E.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            return fx.reply(ticket, join_error(error, member_id))
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_timestamp=now)
        args = (session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols)
        if not member_id:
            if len(group.members) + len(group.pending_members) >= self.config.max_size:
                return fx.reply(ticket, join_error(E.GROUP_MAX_SIZE_REACHED))
            new_id = self._new_member_id(client_id)
            if group_instance_id is not None:
                if group_instance_id in group.static_members:
                    return self._rejoin_static(ticket, group, group_instance_id, new_id, args, supports_skip_assignment,
                                               now)
                return self._add_member(ticket, group, new_id, group_instance_id, client_id, client_host, args, now)
            if require_known_member_id:
                deadline = now + session_timeout_ms
                group.pending_members[new_id] = deadline
                self.schedule(deadline, PENDING, group_id, new_id)
                return fx.reply(ticket, join_error(E.MEMBER_ID_REQUIRED, new_id))
            return self._add_member(ticket, group, new_id, None, client_id, client_host, args, now)
        if group.fenced(member_id, group_instance_id):
            return fx.reply(ticket, join_error(E.FENCED_INSTANCE_ID, member_id))
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return self._add_member(ticket, group, member_id, group_instance_id, client_id, client_host, args, now)
        member = group.members.get(member_id)
        if member is None or group.is_(GroupState.EMPTY, GroupState.DEAD):
            return fx.reply(ticket, join_error(E.UNKNOWN_MEMBER_ID, member_id))
        if group.is_(GroupState.PREPARING_REBALANCE):
            return self._update_member(ticket, group, member, args, now)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            if member.same_protocols(protocols):  # a repeated JoinGroup: answer it again
                self.schedule_heartbeat(group, member, now)
                return fx.reply(ticket, self._join_response(group, member, skip_assignment=False))
            return self._update_member(ticket, group, member, args, now)
        # Stable: the leader rejoining, or changed protocols, start a rebalance; anyone else gets the generation.
        if member_id == group.leader or not member.same_protocols(protocols):
            return self._update_member(ticket, group, member, args, now)
        self.schedule_heartbeat(group, member, now)
        return fx.reply(ticket, self._join_response(group, member, skip_assignment=False))

    def _add_member(self, ticket: Ticket, group: Group, member_id: str, instance_id: str | None, client_id: str,
                    client_host: str, args: tuple[int, int, str, list[tuple[str, bytes]]], now: int) -> Effects:
        session, rebalance, protocol_type, protocols = args
        member = Member(member_id, instance_id, client_id, client_host, rebalance, session, protocol_type,
                        list(protocols), join_ticket=ticket)
        group.add(member)
        group.new_member_added = True
        self.schedule_heartbeat(group, member, now)
        return self._prepare_rebalance(group, now).add(self._maybe_complete_join(group, now))

    def _update_member(self, ticket: Ticket, group: Group, member: Member,
                       args: tuple[int, int, str, list[tuple[str, bytes]]], now: int) -> Effects:
        fx = Effects()
        member.session_timeout_ms, member.rebalance_timeout_ms, _, protocols = args
        member.protocols = list(protocols)
        if member.join_ticket is not None:  # an earlier JoinGroup from this member is superseded
            fx.reply(member.join_ticket, join_error(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_ticket = ticket
        self.schedule_heartbeat(group, member, now)
        return fx.add(self._prepare_rebalance(group, now)).add(self._maybe_complete_join(group, now))

    def _rejoin_static(self, ticket: Ticket, group: Group, instance_id: str, new_id: str,
                       args: tuple[int, int, str, list[tuple[str, bytes]]], supports_skip_assignment: bool,
                       now: int) -> Effects:
        fx = Effects()
        old = group.members[group.static_members[instance_id]]
        old_id = old.member_id
        for pending in (old.join_ticket, old.sync_ticket):  # the old incarnation's requests are fenced
            fx.reply(pending, join_error(E.FENCED_INSTANCE_ID, old_id))
        old.join_ticket = old.sync_ticket = None
        was_leader = group.leader == old_id
        member = group.replace_static(instance_id, new_id)
        member.timer_scheduled = False  # its heap entry names the old id, which no longer finds it
        session, rebalance, _, protocols = args
        unchanged = member.same_protocols(protocols)
        member.session_timeout_ms, member.rebalance_timeout_ms = session, rebalance
        if not group.is_(GroupState.STABLE) or not unchanged:
            return fx.add(self._update_member(ticket, group, member, args, now))
        # Stable and unchanged: persist the new member id, then answer with the current generation. A
        # restarted leader keeps the assignment: from v9 it is told to skip assigning; before v9 (no such
        # field) it is named by its old id as the leader, so it acts as a follower and syncs (as Kafka does).
        self.schedule_heartbeat(group, member, now)
        if was_leader and not supports_skip_assignment:
            response = self._join_response(group, member, skip_assignment=False)
            response.update(leader=old_id, members=[])
        else:
            response = self._join_response(group, member, skip_assignment=was_leader)

        def undo(error: ErrorCode) -> list[tuple[Ticket, Any]]:
            if group.static_members.get(instance_id) == new_id:
                restored = group.replace_static(instance_id, old_id)
                restored.timer_scheduled = False
                self.schedule_heartbeat(group, restored, now)
            return [(ticket, join_error(E.UNKNOWN_SERVER_ERROR if error == E.NONE else error, new_id))]

        record = (GroupKey(group.group_id), self.group_record(group, now))
        fx.writes.append(Write(self.partition_of(group.group_id), [record], [(ticket, response)], undo))
        return fx

    def _join_response(self, group: Group, member: Member, *, skip_assignment: bool) -> dict[str, Any]:
        is_leader = member.member_id == group.leader
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata(group.protocol)} for m in group.members.values()] if is_leader else []
        return {"error_code": E.NONE, "generation_id": group.generation, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol, "leader": group.leader or "", "skip_assignment": skip_assignment,
                "member_id": member.member_id, "members": members}

    # -- rebalance phases ---------------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, now: int) -> Effects:
        fx = Effects()
        if group.is_(GroupState.PREPARING_REBALANCE):
            return fx
        if group.is_(GroupState.COMPLETING_REBALANCE):
            fx.add(self._reset_sync(group, E.REBALANCE_IN_PROGRESS))
        initial = group.is_(GroupState.EMPTY) and self.config.initial_rebalance_delay_ms > 0
        timeout = group.max_rebalance_timeout_ms()
        if initial:
            group.in_initial_delay = True
            group.new_member_added = False
            group.join_deadline_cap = now + timeout
            group.join_deadline = now + min(self.config.initial_rebalance_delay_ms, timeout)
        else:
            group.in_initial_delay = False
            group.join_deadline = now + timeout
        group.sync_deadline = None
        group.transition(GroupState.PREPARING_REBALANCE, now)
        self.schedule(group.join_deadline, JOIN, group.group_id)
        return fx

    def _reset_sync(self, group: Group, error: ErrorCode) -> Effects:
        fx = Effects()
        for m in group.members.values():
            m.assignment = b""
            if m.sync_ticket is not None:
                fx.reply(m.sync_ticket, sync_error(error))
                m.sync_ticket = None
        group.pending_sync.clear()
        group.sync_deadline = None
        return fx

    def _maybe_complete_join(self, group: Group, now: int) -> Effects:
        if group.is_(GroupState.PREPARING_REBALANCE) and not group.in_initial_delay and group.all_joined():
            return self._complete_join(group, now)
        return Effects()

    def _complete_join(self, group: Group, now: int) -> Effects:
        fx = Effects()
        for m in [m for m in group.members.values() if m.join_ticket is None]:
            fx.warnings.append(f"group {group.group_id}: member {m.member_id} did not rejoin in time; removed")
            group.remove(m.member_id)
        group.join_deadline = group.join_deadline_cap = None
        group.in_initial_delay = False
        group.generation += 1
        if not group.members:
            group.protocol = None
            group.leader = None
            group.transition(GroupState.EMPTY, now)
            record = (GroupKey(group.group_id), self.group_record(group, now))
            fx.writes.append(Write(self.partition_of(group.group_id), [record]))
            return fx
        group.protocol = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, now)
        group.pending_sync = set(group.members)
        group.sync_deadline = now + group.max_rebalance_timeout_ms()
        self.schedule(group.sync_deadline, SYNC, group.group_id)
        for m in group.members.values():
            fx.reply(m.join_ticket, self._join_response(group, m, skip_assignment=False))
            m.join_ticket = None
            self.schedule_heartbeat(group, m, now)
        return fx

    # -- SyncGroup ----------------------------------------------------------------------------------

    def sync(self, ticket: Ticket, *, group_id: str, generation_id: int, member_id: str,
             group_instance_id: str | None, protocol_type: str | None, protocol_name: str | None,
             assignments: list[tuple[str, bytes]], now: int) -> Effects:
        fx = Effects()
        error = self.unavailable(group_id)
        group = self.groups.get(group_id)
        if error is None:
            error = self.member_error(group, member_id, group_instance_id, generation_id)
        assert error is not None or group is not None
        if error is None and group is not None and (
                (protocol_type is not None and protocol_type != group.protocol_type)
                or (protocol_name is not None and protocol_name != group.protocol)):
            error = E.INCONSISTENT_GROUP_PROTOCOL
        if error is None and group is not None and group.is_(GroupState.PREPARING_REBALANCE):
            error = E.REBALANCE_IN_PROGRESS
        if error is not None or group is None:
            return fx.reply(ticket, sync_error(error or E.UNKNOWN_MEMBER_ID))
        member = group.members[member_id]
        self.schedule_heartbeat(group, member, now)
        group.pending_sync.discard(member_id)
        if group.is_(GroupState.STABLE):
            return fx.reply(ticket, self._sync_ok(group, member.assignment))
        # CompletingRebalance
        if member.sync_ticket is not None:
            fx.reply(member.sync_ticket, sync_error(E.REBALANCE_IN_PROGRESS))
        member.sync_ticket = ticket
        if member_id != group.leader:
            return fx
        problem = self._check_assignment(group, assignments)
        if problem is not None:
            fx.warnings.append(f"group {group_id} generation {group.generation}: leader {member_id} sent a malformed "
                               f"assignment ({problem}); the members rejoin")
            return fx.add(self._reset_sync(group, E.REBALANCE_IN_PROGRESS)).add(self._prepare_rebalance(group, now))
        by_member = dict(assignments)
        waiting = [(m.sync_ticket, by_member.get(m.member_id, b"")) for m in group.members.values()
                   if m.sync_ticket is not None]
        for m in group.members.values():
            m.sync_ticket = None
        generation = group.generation
        replies = [(t, self._sync_ok(group, a)) for t, a in waiting if t is not None]

        def failed(error: ErrorCode) -> list[tuple[Ticket, Any]]:
            out = [(t, sync_error(E.COORDINATOR_NOT_AVAILABLE)) for t, _ in waiting if t is not None]
            if group.is_(GroupState.COMPLETING_REBALANCE) and group.generation == generation:
                rebalance = self._reset_sync(group, E.REBALANCE_IN_PROGRESS).add(self._prepare_rebalance(group, now))
                out.extend(rebalance.replies)
            return out

        record = (GroupKey(group_id), self.group_record(group, now, by_member))
        fx.writes.append(Write(self.partition_of(group_id), [record], replies, failed))
        return fx

    def _sync_ok(self, group: Group, assignment: bytes) -> dict[str, Any]:
        return {"error_code": E.NONE, "protocol_type": group.protocol_type, "protocol_name": group.protocol,
                "assignment": assignment}

    def _check_assignment(self, group: Group, assignments: list[tuple[str, bytes]]) -> str | None:
        seen: set[str] = set()
        for member_id, data in assignments:
            if member_id in seen:
                return f"member {member_id} appears twice"
            seen.add(member_id)
            if member_id not in group.members:
                return f"member {member_id} is not in generation {group.generation}"
            if group.protocol_type == CONSUMER and data:
                try:
                    consumer_protocol.decode_assignment(data)
                except ValueError as e:
                    return f"assignment of {member_id} does not decode: {e}"
        return None

    # -- Heartbeat ----------------------------------------------------------------------------------

    def heartbeat(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                  now: int) -> ErrorCode:
        error = self.unavailable(group_id)
        group = self.groups.get(group_id)
        if error is None:
            error = self.member_error(group, member_id, group_instance_id, generation_id)
        if error is not None or group is None:
            return error or E.UNKNOWN_MEMBER_ID
        self.schedule_heartbeat(group, group.members[member_id], now)
        return E.REBALANCE_IN_PROGRESS if group.is_(GroupState.PREPARING_REBALANCE) else E.NONE

    # -- LeaveGroup ---------------------------------------------------------------------------------

    def leave(self, *, group_id: str, members: list[tuple[str, str | None]], now: int
              ) -> tuple[ErrorCode, list[ErrorCode], Effects]:
        """Remove members (member id, or "" with a group.instance.id); the group-level and per-member errors."""
        fx = Effects()
        error = self.unavailable(group_id)
        if error is not None:
            return error, [error] * len(members), fx
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(members), fx
        results = []
        removed = False
        for member_id, instance_id in members:
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")
            if group.fenced(member_id, instance_id):
                results.append(E.FENCED_INSTANCE_ID)
            elif member_id in group.pending_members:
                del group.pending_members[member_id]
                results.append(E.NONE)
                removed = True
            elif member_id in group.members:
                fx.add(self._remove_member(group, member_id))
                results.append(E.NONE)
                removed = True
            else:
                results.append(E.UNKNOWN_MEMBER_ID)
        if removed:
            fx.add(self._after_removal(group, now))
        return E.NONE, results, fx

    def _remove_member(self, group: Group, member_id: str) -> Effects:
        fx = Effects()
        member = group.remove(member_id)
        if member is not None:
            fx.reply(member.join_ticket, join_error(E.UNKNOWN_MEMBER_ID, member_id))
            fx.reply(member.sync_ticket, sync_error(E.UNKNOWN_MEMBER_ID))
        return fx

    def _after_removal(self, group: Group, now: int) -> Effects:
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return self._prepare_rebalance(group, now).add(self._maybe_complete_join(group, now))
        return self._maybe_complete_join(group, now)

    # -- timers -------------------------------------------------------------------------------------

    def expire(self, now: int) -> Effects:
        """Everything that came due by ``now``: session timeouts, join and sync deadlines, pending members."""
        fx = Effects()
        for deadline, kind, group_id, member_id in self.due_timers(now):
            group = self.groups.get(group_id)
            if group is None:
                continue
            if kind == HEARTBEAT:
                fx.add(self._on_heartbeat_timer(group, member_id, now))
            elif kind == PENDING:
                if group.pending_members.get(member_id) == deadline:
                    del group.pending_members[member_id]
                    fx.add(self._maybe_complete_join(group, now))
            elif kind == JOIN:
                if group.is_(GroupState.PREPARING_REBALANCE) and group.join_deadline == deadline:
                    fx.add(self._on_join_deadline(group, now))
            elif kind == SYNC:
                if group.sync_deadline == deadline:
                    fx.add(self._on_sync_deadline(group, now))
        return fx

    def _on_heartbeat_timer(self, group: Group, member_id: str, now: int) -> Effects:
        member = group.members.get(member_id)
        if member is None:
            return Effects()
        member.timer_scheduled = False
        if member.keep_alive:
            self.schedule_heartbeat(group, member, now)
            return Effects()
        if member.heartbeat_deadline > now:
            member.timer_scheduled = True
            self.schedule(member.heartbeat_deadline, HEARTBEAT, group.group_id, member_id)
            return Effects()
        fx = Effects(warnings=[f"group {group.group_id}: member {member_id} sent no heartbeat within its "
                               f"session timeout ({member.session_timeout_ms} ms); removed"])
        return fx.add(self._remove_member(group, member_id)).add(self._after_removal(group, now))

    def _on_join_deadline(self, group: Group, now: int) -> Effects:
        if group.in_initial_delay:
            cap = group.join_deadline_cap or now
            if group.new_member_added and cap > now:
                group.new_member_added = False
                group.join_deadline = min(now + self.config.initial_rebalance_delay_ms, cap)
                self.schedule(group.join_deadline, JOIN, group.group_id)
                return Effects()
            group.in_initial_delay = False
        return self._complete_join(group, now)

    def _on_sync_deadline(self, group: Group, now: int) -> Effects:
        group.sync_deadline = None
        if not group.pending_sync or not group.is_(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return Effects()
        late = sorted(group.pending_sync)
        fx = Effects(warnings=[f"group {group.group_id}: members {', '.join(late)} did not send SyncGroup within the "
                               "rebalance timeout; removed"])
        for member_id in late:
            fx.add(self._remove_member(group, member_id))
        return fx.add(self._after_removal(group, now))
