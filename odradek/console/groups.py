"""Consumer groups as the console shows them: state, members and their assignments, committed offsets, lag, and
resetting a group's offsets (with a dry run).

On a single node, read from this broker's group coordinator in memory (``broker.groups.view()``). In a cluster,
every group of the cluster, wherever it is coordinated (``peers.py``): ListGroups to every live broker, then
DescribeGroups and OffsetFetch to each shown group's coordinator (the leader of its ``__consumer_offsets``
partition, as FindCoordinator finds it); what this broker coordinates is still read in memory. Lag is what
``kafka-consumer-groups.sh`` prints: the partition's log end (its high watermark: on a single node the local
replica's; in a cluster the leader's, by ListOffsets unless this broker leads it) minus the committed offset, never
below 0; none without a committed offset or a known end.

Resetting reuses the CLI's planner (``cli/groups_reset.plan_offsets``: Kafka's rules and clamping) and commits
as an admin commit (generation -1, no member), which the coordinator accepts only for an Empty or unknown group;
like Kafka's tool, any other state is refused up front with its message. In a cluster the earliest, latest and
by-time offsets come from the partitions' leaders (ListOffsets) and the commit is an OffsetCommit to the group's
coordinator (this broker's coordinator directly when it is that).

Invariants: on a single node listing and describing read in-memory state only (cheap on the event loop); in a
cluster they also await requests to the other brokers, each bounded in time, and a broker that does not answer
becomes a notice (its groups are left out of the list, or the group's page says so), never an error page; only a
reset to a date-time reads logs (``offset_for_timestamp``, run in a worker thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.cli._client import CliError
from odradek.cli.groups_reset import Plan, Target, plan_offsets
from odradek.console.access import AccessDenied
from odradek.console.errors import ConsoleError
from odradek.console.messages import offset_for_timestamp, parse_time
from odradek.console.paging import Listing, page_of
from odradek.console.peers import EARLIEST, LATEST, PeerError, Peers
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
    d = b.groups.view().describe(group_id)
    committed = _committed(b, group_id)
    if _unknown(d, committed):
        return None
    return _detail(group_id, d, committed, lambda t, p: end_offset(b, t, p))


def _unknown(d: dict[str, Any], committed: dict[TP, int]) -> bool:
    return (
        d["error_code"] != ErrorCode.NONE or (d["group_state"] == GroupState.DEAD.value and not d["members"])
    ) and not committed


def _detail(
    group_id: str, d: dict[str, Any], committed: dict[TP, int], end: Callable[[str, int], int | None]
) -> GroupDetail:
    """A group page's model from DescribeGroups' answer ``d`` (the coordinator's ``describe`` shape) and the
    group's committed offsets."""
    detail = GroupDetail(group_id, d["group_state"], d["protocol_type"], d["protocol_data"])
    owner: dict[TP, str] = {}
    for m in d["members"]:
        assigned = _assignment(d["protocol_type"], m["member_assignment"])
        detail.members.append(
            MemberInfo(m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"], assigned)
        )
        for tp in assigned:
            owner[tp] = m["client_id"] or m["member_id"]
    for tp in sorted(set(committed) | set(owner)):
        detail.partitions.append(PartitionLag(tp[0], tp[1], committed.get(tp), end(*tp), owner.get(tp)))
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


def _planned(target: Target, partitions: list[TP], committed: dict[TP, int], earliest: dict[TP, int],
             latest: dict[TP, int], by_time: dict[TP, int] | None, execute: bool,
             may_commit: Callable[[str], bool] | None) -> ResetResult:
    """Kafka's plan of a reset (``plan_offsets``); before an execution, refused unless the user may commit on each
    of its topics."""
    try:
        plan = plan_offsets(target, partitions, committed, earliest, latest, by_time)
    except CliError as e:
        raise ConsoleError(e.message) from None
    if execute:
        refused = sorted({t for t, _ in plan.offsets if may_commit is not None and not may_commit(t)})
        if refused:
            raise AccessDenied(f"may not commit offsets of topic(s) {', '.join(refused)} (READ on the topic)")
    return ResetResult(plan, execute)


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
    result = _planned(target, partitions, committed, earliest, latest, by_time, execute, may_commit)
    if not execute:
        return result
    plan = result.plan
    outcome = await _commit_here(b, group_id, plan.offsets)
    result.errors = {tp: ErrorCode(e).name for tp, e in outcome.items() if e != ErrorCode.NONE}
    return result


async def _commit_here(b: Broker, group_id: str, new: dict[TP, int]) -> dict[TP, ErrorCode]:
    """An admin commit (generation -1, no member) through this broker's group coordinator."""
    offsets = [(t, p, off, -1, "") for (t, p), off in new.items()]
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
    return outcome


# -- in a cluster -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Seen:
    """What the cluster's coordinators answered for some groups, and a notice per broker that did not."""

    described: dict[str, dict[str, Any]] = field(default_factory=dict)
    committed: dict[str, dict[TP, int]] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)


async def cluster_listed(b: Broker, peers: Peers) -> tuple[dict[str, tuple[int, dict[str, str]]], list[str]]:
    """Every group of the cluster: ListGroups to every live broker (this one's coordinator read in memory), each
    group with the broker that listed it (its coordinator); a notice per broker that did not answer."""
    calls: dict[int, Awaitable[list[dict[str, str]]]] = {
        broker: peers.list_groups(broker) for broker in peers.live() if broker != peers.node_id
    }
    answers, notices = await peers.each(calls)
    answers[peers.node_id] = b.groups.view().list_groups()
    out: dict[str, tuple[int, dict[str, str]]] = {}
    for broker in sorted(answers):
        for g in answers[broker]:
            gid = g["group_id"]
            # listed twice while its coordinator moves: the broker the image names now wins
            if gid not in out or peers.coordinator(b.groups.topic, gid) == broker:
                out[gid] = (broker, g)
    return out, notices


async def _seen(b: Broker, peers: Peers, by_coordinator: dict[int, list[str]], *, describe: bool) -> Seen:
    """The groups' descriptions (with ``describe``) and committed offsets from their coordinators."""
    seen = Seen()

    async def remote(broker: int, ids: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[TP, int]]]:
        if describe:
            described, committed = await asyncio.gather(
                peers.describe_groups(broker, ids), peers.fetch_offsets(broker, ids)
            )
            return described, committed
        return {}, await peers.fetch_offsets(broker, ids)

    calls = {broker: remote(broker, ids) for broker, ids in by_coordinator.items() if broker != peers.node_id}
    answers, seen.notices = await peers.each(calls)
    for described, committed in answers.values():
        seen.described.update(described)
        seen.committed.update(committed)
    coord = b.groups.view()
    for group_id in by_coordinator.get(peers.node_id, []):
        if describe:
            seen.described[group_id] = coord.describe(group_id)
        seen.committed[group_id] = _committed(b, group_id)
    return seen


def _by_coordinator(groups: Iterable[tuple[str, int]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for group_id, broker in groups:
        out.setdefault(broker, []).append(group_id)
    return out


async def _ends(peers: Peers, committed: Iterable[dict[TP, int]]) -> tuple[dict[TP, int], list[str]]:
    tps = {tp for c in committed for tp in c}
    return await peers.list_offsets(dict.fromkeys(tps, LATEST))


def _total_lag(committed: dict[TP, int], ends: dict[TP, int]) -> int | None:
    total = None
    for tp, off in committed.items():
        end = ends.get(tp)
        if end is not None and off >= 0:
            total = (total or 0) + max(end - off, 0)
    return total


async def list_groups_cluster(
    b: Broker,
    peers: Peers,
    query: str = "",
    page: int = 1,
    *,
    page_size: int = PAGE_SIZE,
    visible: Callable[[str], bool] | None = None,
) -> tuple[Listing[GroupSummary], list[str]]:
    """``list_groups`` over the whole cluster (ListGroups to every live broker; members and lag of the shown
    groups from their coordinators, end offsets from the partitions' leaders), and a notice per broker that did
    not answer."""
    found, notices = await cluster_listed(b, peers)
    listed = [
        g for gid, (_, g) in sorted(found.items()) if query in gid and (visible is None or visible(gid))
    ]
    shown, page, pages = page_of(listed, page, page_size)
    seen = await _seen(b, peers, _by_coordinator((g["group_id"], found[g["group_id"]][0]) for g in shown),
                       describe=True)
    ends, missing = await _ends(peers, seen.committed.values())
    out = []
    for g in shown:
        gid = g["group_id"]
        d = seen.described.get(gid)
        members = len(d["members"]) if d is not None and d["error_code"] == ErrorCode.NONE else 0
        committed = seen.committed.get(gid, {})
        out.append(GroupSummary(gid, g["group_state"], g["protocol_type"], members, _total_lag(committed, ends)))
    return Listing(out, len(listed), page, pages), notices + seen.notices + missing


async def total_lags_cluster(b: Broker, peers: Peers, limit: int = 1_000) -> dict[str, int]:
    """``total_lags`` over the whole cluster (at most ``limit`` groups, by id): what the lag chart samples in a
    cluster. Groups whose coordinator or partitions' leaders did not answer are left out of this sample."""
    found, _ = await cluster_listed(b, peers)
    chosen = sorted(found)[:limit]
    seen = await _seen(b, peers, _by_coordinator((gid, found[gid][0]) for gid in chosen), describe=False)
    ends, _ = await _ends(peers, seen.committed.values())
    out = {}
    for gid, committed in seen.committed.items():
        lag = _total_lag(committed, ends)
        if lag is not None:
            out[gid] = lag
    return out


def _no_coordinator(group_id: str) -> str:
    return (
        f"group '{group_id}' has no coordinator now (its __consumer_offsets partition has no live leader, or the "
        "topic does not exist yet): retry"
    )


async def describe_cluster(b: Broker, peers: Peers, group_id: str) -> tuple[GroupDetail | None, list[str]]:
    """``describe`` from the group's coordinator, wherever it is (FindCoordinator's rule, then DescribeGroups and
    OffsetFetch to it); end offsets from the partitions' leaders. None when the coordinator does not know the
    group; when it cannot be asked, a detail in state "Unknown" with the notice saying why."""
    coordinator = peers.coordinator(b.groups.topic, group_id)
    if coordinator is None:
        if b.registry.get(b.groups.topic) is None:
            return None, []
        return GroupDetail(group_id, "Unknown", "", ""), [_no_coordinator(group_id)]
    seen = await _seen(b, peers, {coordinator: [group_id]}, describe=True)
    if seen.notices:
        return GroupDetail(group_id, "Unknown", "", ""), seen.notices
    d = seen.described.get(group_id)
    committed = seen.committed.get(group_id, {})
    if d is None or _unknown(d, committed):
        return None, []
    ends, missing = await _ends(peers, [committed])
    return _detail(group_id, d, committed, lambda t, p: ends.get((t, p))), missing


async def reset_offsets_cluster(
    b: Broker,
    peers: Peers,
    group_id: str,
    topic: str | None,
    mode: str,
    value: str | None,
    *,
    execute: bool,
    may_commit: Callable[[str], bool] | None = None,
) -> ResetResult:
    """``reset_offsets`` for a group coordinated anywhere in the cluster, as ``kafka-consumer-groups.sh
    --reset-offsets`` does it through the admin API: the group's state (DescribeGroups) and committed offsets
    (OffsetFetch) from its coordinator, earliest/latest/by-time offsets (ListOffsets) from the partitions'
    leaders, and the new offsets committed to the coordinator as an admin commit (OffsetCommit, generation -1).
    Raises ``ConsoleError`` (``PeerError`` when a broker does not answer)."""
    coordinator = peers.coordinator(b.groups.topic, group_id)
    if coordinator is None:
        raise ConsoleError(_no_coordinator(group_id))
    target = _target(mode, value)
    seen = await _seen(b, peers, {coordinator: [group_id]}, describe=True)
    if seen.notices:
        raise PeerError(coordinator, "; ".join(seen.notices))
    d = seen.described.get(group_id)
    if d is not None and d["error_code"] == ErrorCode.NONE and d["group_state"] not in (
        GroupState.EMPTY.value,
        GroupState.DEAD.value,
    ):
        raise ConsoleError(
            f"Assignments can only be reset if the group '{group_id}' is inactive, but the current "
            f"state is {d['group_state']}."
        )
    committed = seen.committed.get(group_id, {})
    if topic:
        known = b.registry.get(topic)
        if known is None:
            raise ConsoleError(f"topic '{topic}' does not exist")
        partitions = [(topic, p) for p in range(known.partitions)]
    else:
        partitions = sorted(committed)
        if not partitions:
            raise ConsoleError(f"group '{group_id}' has no committed offsets: name a topic")
    specs: list[dict[TP, int]] = [dict.fromkeys(partitions, EARLIEST), dict.fromkeys(partitions, LATEST)]
    if target.mode == "to_datetime":
        assert target.value is not None
        specs.append(dict.fromkeys(partitions, target.value))
    found = await asyncio.gather(*(peers.list_offsets(s) for s in specs))
    for offsets, notices in found:
        lacking = [tp for tp in partitions if tp not in offsets]
        if lacking:
            raise ConsoleError(
                f"the offsets of {', '.join(f'{t}-{p}' for t, p in lacking)} are unknown: {'; '.join(notices)}"
            )
    earliest, latest = found[0][0], found[1][0]
    by_time = found[2][0] if len(found) > 2 else None
    result = _planned(target, partitions, committed, earliest, latest, by_time, execute, may_commit)
    if not execute:
        return result
    plan = result.plan
    if coordinator == peers.node_id:
        outcome = await _commit_here(b, group_id, plan.offsets)
    else:
        outcome = await peers.commit_offsets(coordinator, group_id, plan.offsets)
    result.errors = {tp: ErrorCode(e).name for tp, e in outcome.items() if e != ErrorCode.NONE}
    return result
