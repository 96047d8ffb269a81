"""Consumer groups as the console shows them: state, members and their assignments, committed offsets, lag, and
resetting a group's offsets (with a dry run).

Read from the group coordinator of this broker (``broker.groups.view()``: in a cluster, the groups whose
``__consumer_offsets`` partition this broker leads). Lag is what ``kafka-consumer-groups.sh`` prints: the
partition's log end (its high watermark, from the local replica) minus the committed offset, never below 0; none
without a committed offset or a local replica.

Resetting reuses the CLI's planner (``cli/groups_reset.plan_offsets``: Kafka's rules and clamping) and commits
through the coordinator as an admin commit (generation -1, no member), which the coordinator accepts only for an
Empty or unknown group; like Kafka's tool, any other state is refused up front with its message.

Invariants: listing and describing read in-memory state only (cheap on the event loop); only a reset to a
date-time reads logs (``offset_for_timestamp``, run in a worker thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.cli._client import CliError
from odradek.cli.groups_reset import Plan, Target, plan_offsets
from odradek.console.access import AccessDenied
from odradek.console.errors import ConsoleError
from odradek.console.messages import offset_for_timestamp, parse_time
from odradek.console.paging import Listing, page_of
from odradek.coordinator.group.consumer_protocol import ConsumerProtocolError, decode_assignment
from odradek.coordinator.group.model import GroupState
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

TP = tuple[str, int]
MODES = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_current", "to_datetime")


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    members: int
    lag: int | None  # total over partitions with a known lag


@dataclass(frozen=True, slots=True)
class MemberInfo:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TP, ...]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    member: str | None  # the member assigned the partition (its client id), if any

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end is None or self.committed < 0:
            return None
        return max(self.end - self.committed, 0)


@dataclass(slots=True)
class GroupDetail:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberInfo] = field(default_factory=list)
    partitions: list[PartitionLag] = field(default_factory=list)

    @property
    def total_lag(self) -> int | None:
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None


def end_offset(b: Broker, topic: str, partition: int) -> int | None:
    part = b.replicas.get(topic, partition)
    return part.log.high_watermark if part is not None else None


def _committed(b: Broker, group_id: str) -> dict[TP, int]:
    error, found = b.groups.view().fetch_offsets(group_id, None)
    if error != ErrorCode.NONE:
        return {}
    return {tp: entry.offset for tp, entry, _ in found if entry is not None}


def _lag_of(b: Broker, committed: dict[TP, int]) -> int | None:
    total = None
    for (t, p), off in committed.items():
        end = end_offset(b, t, p)
        if end is not None and off >= 0:
            total = (total or 0) + max(end - off, 0)
    return total


PAGE_SIZE = 50


def list_groups(
    b: Broker,
    query: str = "",
    page: int = 1,
    *,
    page_size: int = PAGE_SIZE,
    visible: Callable[[str], bool] | None = None,
) -> Listing[GroupSummary]:
    """A page of the groups whose id contains ``query`` (and that ``visible`` lets through), sorted by id; lag is
    computed for the shown ones only."""
    coord = b.groups.view()
    listed = [g for g in coord.list_groups() if query in g["group_id"] and (visible is None or visible(g["group_id"]))]
    shown, page, pages = page_of(listed, page, page_size)
    out = []
    for g in shown:
        group = coord.groups.get(g["group_id"])
        members = len(group.members) if group is not None else 0
        out.append(
            GroupSummary(
                g["group_id"], g["group_state"], g["protocol_type"], members, _lag_of(b, _committed(b, g["group_id"]))
            )
        )
    return Listing(out, len(listed), page, pages)


def total_lags(b: Broker) -> dict[str, int]:
    """Every listed group's total lag (groups with none known are left out): what the lag chart samples."""
    coord = b.groups.view()
    out = {}
    for g in coord.list_groups():
        lag = _lag_of(b, _committed(b, g["group_id"]))
        if lag is not None:
            out[g["group_id"]] = lag
    return out


def _assignment(protocol_type: str, data: bytes) -> tuple[TP, ...]:
    if protocol_type != "consumer" or not data:
        return ()
    try:
        a = decode_assignment(data)
    except ConsumerProtocolError:
        return ()
    return tuple((t, p) for t, ps in a.partitions for p in ps)


def describe(b: Broker, group_id: str) -> GroupDetail | None:
    """The group, or None when this broker's coordinator does not know it."""
    coord = b.groups.view()
    d = coord.describe(group_id)
    if d["error_code"] != ErrorCode.NONE or (d["group_state"] == GroupState.DEAD.value and not d["members"]):
        committed = _committed(b, group_id)
        if not committed:
            return None
    detail = GroupDetail(group_id, d["group_state"], d["protocol_type"], d["protocol_data"])
    owner: dict[TP, str] = {}
    for m in d["members"]:
        assigned = _assignment(d["protocol_type"], m["member_assignment"])
        detail.members.append(
            MemberInfo(m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"], assigned)
        )
        for tp in assigned:
            owner[tp] = m["client_id"] or m["member_id"]
    committed = _committed(b, group_id)
    for tp in sorted(set(committed) | set(owner)):
        detail.partitions.append(PartitionLag(tp[0], tp[1], committed.get(tp), end_offset(b, *tp), owner.get(tp)))
    return detail


# -- offset reset -------------------------------------------------------------------------------------


@dataclass(slots=True)
class ResetResult:
    plan: Plan
    executed: bool
    errors: dict[TP, str] = field(default_factory=dict)


def _partitions(b: Broker, group_id: str, topic: str | None) -> list[TP]:
    if topic:
        known = b.registry.get(topic)
        if known is None:
            raise ConsoleError(f"topic '{topic}' does not exist")
        return [(topic, p) for p in range(known.partitions)]
    parts = sorted(_committed(b, group_id))
    if not parts:
        raise ConsoleError(f"group '{group_id}' has no committed offsets: name a topic")
    return parts


def _target(mode: str, value: str | None) -> Target:
    if mode not in MODES:
        raise ConsoleError(f"unknown reset mode {mode!r}: one of {', '.join(MODES)}")
    if mode == "to_datetime":
        return Target(mode, parse_time(value or ""))
    if mode in ("to_offset", "shift_by"):
        try:
            return Target(mode, int(value or ""))
        except ValueError:
            raise ConsoleError(f"{mode} needs an integer, got {value!r}") from None
    return Target(mode)


async def reset_offsets(
    b: Broker,
    group_id: str,
    topic: str | None,
    mode: str,
    value: str | None,
    *,
    execute: bool,
    may_commit: Callable[[str], bool] | None = None,
) -> ResetResult:
    """Plan a reset of ``group_id``'s offsets (every partition of ``topic``, else every committed one) and, with
    ``execute``, commit it; ``may_commit(topic)`` False refuses the whole reset (``AccessDenied``) before anything
    is committed. Raises ``ConsoleError``."""
    coord = b.groups.view()
    group = coord.groups.get(group_id)
    if group is not None and not group.is_(GroupState.EMPTY, GroupState.DEAD):
        raise ConsoleError(
            f"Assignments can only be reset if the group '{group_id}' is inactive, but the current "
            f"state is {group.state.value}."
        )
    target = _target(mode, value)
    partitions = _partitions(b, group_id, topic)
    committed = _committed(b, group_id)
    earliest: dict[TP, int] = {}
    latest: dict[TP, int] = {}
    logs: dict[TP, Any] = {}
    for tp in partitions:
        part = b.replicas.get(*tp)
        if part is None:
            raise ConsoleError(f"{tp[0]}-{tp[1]} has no replica on this broker")
        logs[tp] = part.log
        earliest[tp], latest[tp] = part.log.log_start_offset, part.log.high_watermark
    by_time = None
    if target.mode == "to_datetime":
        assert target.value is not None
        ts = target.value
        by_time = await asyncio.to_thread(lambda: {tp: offset_for_timestamp(lg, ts) for tp, lg in logs.items()})
    try:
        plan = plan_offsets(target, partitions, committed, earliest, latest, by_time)
    except CliError as e:
        raise ConsoleError(e.message) from None
    result = ResetResult(plan, execute)
    if not execute:
        return result
    refused = sorted({t for t, _ in plan.offsets if may_commit is not None and not may_commit(t)})
    if refused:
        raise AccessDenied(f"may not commit offsets of topic(s) {', '.join(refused)} (READ on the topic)")
    offsets = [(t, p, off, -1, "") for (t, p), off in plan.offsets.items()]
    registry = b.registry

    def exists(topic_name: str, partition: int) -> bool:
        known = registry.get(topic_name)
        return known is not None and 0 <= partition < known.partitions

    outcome: dict[TP, ErrorCode] = await b.groups.call(
        lambda c, ticket, now: c.commit(
            ticket,
            group_id=group_id,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            offsets=offsets,
            retention_ms=-1,
            partition_exists=exists,
            now=now,
        )
    )
    result.errors = {tp: ErrorCode(e).name for tp, e in outcome.items() if e != ErrorCode.NONE}
    return result
