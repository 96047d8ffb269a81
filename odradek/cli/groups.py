"""``odradek groups list|describe|delete|reset-offsets``: consumer groups, as ``kafka-consumer-groups.sh`` shows them.

Everything goes through confluent-kafka's ``AdminClient``: ListGroups, DescribeGroups, OffsetFetch,
ListOffsets, DeleteGroups (and OffsetCommit for reset-offsets, in ``groups_reset``).

list prints one line per group (``--state`` filters, case-insensitive, comma-separated or repeated)::

    GROUP   STATE   PROTOCOL-TYPE
    orders  Stable  consumer

describe (``--group G`` repeatable, or ``--all-groups``) has three views; columns are separated by
at least two spaces:

- default: one row per partition the group has a committed offset for or a member is assigned,
  ``GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID`` ("-" where
  there is none). LOG-END-OFFSET is the high watermark, LAG = LOG-END-OFFSET - CURRENT-OFFSET.
- ``--members``: ``GROUP CONSUMER-ID GROUP-INSTANCE-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT``, the
  assignment written ``topic(0,1),other(2)``.
- ``--state``: ``GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS``.

A group without members is announced as Kafka does ("Consumer group 'G' has no active members."),
a group that does not exist is an error (exit code 1, the other groups are still shown).

delete deletes each ``--group`` and prints one line per group; a group that still has members is
refused by the broker (NON_EMPTY_GROUP) and reported with what to do. Exit code 1 if any failed.

reset-offsets: see ``odradek.cli.groups_reset``.

Usage::

    odradek groups list --state Stable,Empty
    odradek groups describe --group orders-app
    odradek groups describe --group orders-app --members
    odradek groups describe --all-groups --state
    odradek groups delete --group old-app
    odradek groups reset-offsets --group orders-app --topic orders --to-earliest            # dry run
    odradek groups reset-offsets --group orders-app --topic orders:0,1 --shift-by -10 --execute
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from odradek.cli import _client, _progress
from odradek.cli._client import CliError

ACTIONS = ("list", "describe", "delete", "reset-offsets")

# Kafka's names for the group states (what kafka-consumer-groups.sh prints and accepts).
STATE_NAMES: dict[ConsumerGroupState, str] = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
_STATES_BY_LOWER = {name.lower(): state for state, name in STATE_NAMES.items() if state != ConsumerGroupState.UNKNOWN}

TP = tuple[str, int]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from odradek.cli import groups_reset

    p = sub.add_parser(
        "groups",
        help="list, describe, delete consumer groups and reset their offsets (like kafka-consumer-groups.sh)",
        description="List, describe and delete consumer groups, and reset their committed offsets.",
        epilog="examples:\n"
        "  odradek groups list --state Stable\n"
        "  odradek groups describe --group orders-app            # offsets and lag per partition\n"
        "  odradek groups describe --group orders-app --members  # members and their partitions\n"
        "  odradek groups describe --all-groups --state\n"
        "  odradek groups delete --group old-app\n"
        "  odradek groups reset-offsets --group orders-app --topic orders --to-earliest   # dry run\n"
        "  odradek groups reset-offsets --group orders-app --all-topics --shift-by -100 --execute\n"
        "  odradek groups reset-offsets --group orders-app --topic orders:0,2 --by-duration PT1H --execute",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=ACTIONS, help="what to do")
    p.add_argument("--group", action="append", default=[], metavar="G",
                   help="consumer group id (describe, delete, reset-offsets), repeatable")
    p.add_argument("--all-groups", action="store_true", help="describe/delete/reset-offsets: every group")
    p.add_argument("--state", nargs="*", action="extend", metavar="STATE",
                   help="list: only groups in these states (e.g. Stable,Empty; case-insensitive); "
                        "describe: show each group's state, coordinator, assignor and member count")
    p.add_argument("--members", action="store_true", help="describe: show the members and their partitions")
    p.add_argument("--offsets", action="store_true",
                   help="describe: show offsets and lag per partition (the default view)")
    p.add_argument("--verbose", action="store_true", help="accepted for kafka-consumer-groups.sh users")
    groups_reset.add_arguments(p)
    _client.add_common_options(p)
    p.set_defaults(func=lambda args: _client.run_verb("groups", run, args))


def run(args: argparse.Namespace) -> int:
    from odradek.cli import groups_reset

    _check_options(args)
    admin = _client.make_client(AdminClient, _client.base_config(args))
    if args.action == "list":
        return list_groups(admin, args)
    if args.action == "describe":
        return describe(admin, args)
    if args.action == "delete":
        return delete(admin, args)
    return groups_reset.reset_offsets(admin, args)


def _check_options(args: argparse.Namespace) -> None:
    from odradek.cli import groups_reset

    a = args.action
    if a in ("describe", "delete", "reset-offsets"):
        if not args.group and not args.all_groups:
            raise CliError(f"groups {a} needs --group G (or --all-groups)",
                           f"e.g. odradek groups {a} --group my-app; `odradek groups list` shows the groups",
                           exit_code=2)
        if args.group and args.all_groups:
            raise CliError("give either --group or --all-groups, not both", exit_code=2)
        for g in args.group:
            if not g.strip():
                raise CliError("--group must not be empty", exit_code=2)
    elif args.group or args.all_groups:
        raise CliError("groups list takes no --group/--all-groups",
                       "use `odradek groups describe --group G` for one group", exit_code=2)
    if args.state is not None:
        if a == "list":
            args.state = parse_states(args.state)
        elif a == "describe":
            if args.state:
                raise CliError("groups describe --state takes no values (it selects the state view)",
                               "to filter groups by state use `odradek groups list --state STATE`", exit_code=2)
        else:
            raise CliError(f"--state is for list and describe, not {a}", exit_code=2)
    views = [flag for flag, on in (("--members", args.members), ("--offsets", args.offsets),
                                    ("--state", args.state is not None and a == "describe")) if on]
    if views and a != "describe":
        raise CliError(f"{views[0]} is only for describe", exit_code=2)
    if len(views) > 1:
        raise CliError(f"choose one view: {' or '.join(views)}", exit_code=2)
    groups_reset.check_options(args)


def parse_states(items: Iterable[str]) -> list[ConsumerGroupState]:
    """``["Stable,empty", "Dead"]`` → the states; a ``CliError`` naming the valid ones otherwise."""
    out: list[ConsumerGroupState] = []
    for word in _client.comma_words(items):
        state = _STATES_BY_LOWER.get(word.lower())
        if state is None:
            valid = ", ".join(sorted(STATE_NAMES[s] for s in _STATES_BY_LOWER.values()))
            raise CliError(f"--state {word!r} is not a group state", f"the states are: {valid}", exit_code=2)
        if state not in out:
            out.append(state)
    return out


# -- shared helpers (also used by groups_reset) --------------------------------------------------------


def state_name(state: Any) -> str:
    return STATE_NAMES.get(state, str(state))


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, out: Any = None) -> None:
    """Left-aligned columns separated by at least two spaces (values never contain two spaces)."""
    out = out or sys.stdout
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=out)


def kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {"request_timeout": _client.timeout_s(args)}


def describe_groups(admin: AdminClient, args: argparse.Namespace, groups: list[str]) -> dict[str, Any]:
    """group id → ConsumerGroupDescription, or the ``CliError`` for that group (not found included)."""
    futures = admin.describe_consumer_groups(groups, **kwargs(args))
    out: dict[str, Any] = {}
    for g in groups:
        try:
            desc = _client.wait(futures[g], args, f"describe group '{g}'")
        except CliError as e:
            if e.code == KafkaError.GROUP_ID_NOT_FOUND:
                e = not_found(g)
            elif e.code in _UNREACHABLE_CODES:
                raise e from None
            out[g] = e
            continue
        out[g] = desc
    return out


_UNREACHABLE_CODES = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
                      KafkaError._RESOLVE, KafkaError.REQUEST_TIMED_OUT, None}


def not_found(group: str) -> CliError:
    return CliError(f"Consumer group '{group}' does not exist.",
                    "`odradek groups list` shows the groups there are", code=KafkaError.GROUP_ID_NOT_FOUND)


def committed_offsets(admin: AdminClient, args: argparse.Namespace, groups: list[str],
                      progress: Progress | None = None) -> dict[str, dict[TP, int] | CliError]:
    """group id → {(topic, partition): committed offset} for every partition it has a commit for.

    librdkafka fetches one group per request, so the requests for all groups are sent at once.
    """
    futures = {g: admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)], **kwargs(args))[g]
               for g in groups}
    out: dict[str, dict[TP, int] | CliError] = {}
    for g, future in futures.items():
        try:
            result = _client.wait(future, args, f"fetch the committed offsets of group '{g}'")
        except CliError as e:
            if e.code in _UNREACHABLE_CODES:
                raise
            out[g] = e
            continue
        finally:
            if progress is not None:
                progress.step()
        out[g] = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or []
                  if tp.error is None and tp.offset >= 0}
    return out


def log_offsets(admin: AdminClient, args: argparse.Namespace, tps: Iterable[TP], spec: OffsetSpec,
                what: str) -> dict[TP, int | CliError]:
    """(topic, partition) → the offset ``spec`` names (ListOffsets), or the error for that partition."""
    wanted = sorted(set(tps))
    if not wanted:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in wanted}, **kwargs(args))
    by_tp = {(tp.topic, tp.partition): f for tp, f in futures.items()}
    out: dict[TP, int | CliError] = {}
    with _progress.bar(total=len(wanted), desc=f"{what} offsets", unit="partition", min_total=50) as bar:
        for t, p in wanted:
            try:
                out[(t, p)] = int(_client.wait(by_tp[(t, p)], args, f"list the {what} offset of {t}-{p}",
                                               subject=t).offset)
            except CliError as e:
                if e.code in _UNREACHABLE_CODES:
                    raise
                out[(t, p)] = e
            bar.update(1)
    return out


class Progress:
    """"fetched the offsets of groups 3/40" as a bar on stderr (``_progress``: only when stderr is a terminal),
    when there are more than a few."""

    def __init__(self, total: int, what: str) -> None:
        self.total = total
        self.what = what
        self.done = 0
        self._bar = _progress.bar(total=total, desc=what, unit="group", min_total=6)
        self.enabled = not self._bar.disable

    def step(self) -> None:
        self.done += 1
        self._bar.update(1)
        if self.done >= self.total:
            self._bar.close()


def all_group_ids(admin: AdminClient, args: argparse.Namespace,
                  states: list[ConsumerGroupState] | None = None) -> list[Any]:
    """ConsumerGroupListing of every group (in ``states`` when given), sorted by id."""
    opts = kwargs(args)
    if states:
        opts["states"] = set(states)
    result = _client.wait(admin.list_consumer_groups(**opts), args, "list the consumer groups")
    for err in result.errors or []:
        raise _client.error_from_kafka(err, args, "list the consumer groups")
    return sorted(result.valid or [], key=lambda g: g.group_id)


def selected_groups(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        return [g.group_id for g in all_group_ids(admin, args)]
    return list(dict.fromkeys(args.group))


# -- list ------------------------------------------------------------------------------------------------


def list_groups(admin: AdminClient, args: argparse.Namespace) -> int:
    listings = all_group_ids(admin, args, args.state or None)
    types = _protocol_types(admin, args) if listings else {}
    rows = []
    for g in listings:
        ptype = types.get(g.group_id)
        if ptype is None:  # what ListConsumerGroups tells: consumer protocol, or none (a "simple" group)
            ptype = "" if g.is_simple_consumer_group else "consumer"
        rows.append((g.group_id, state_name(g.state), ptype or "-"))
    if rows:
        print_table(("GROUP", "STATE", "PROTOCOL-TYPE"), rows)
    return 0


def _protocol_types(admin: AdminClient, args: argparse.Namespace) -> dict[str, str]:
    """group id → its protocol type ("consumer", "connect", "" for offsets-only groups).

    ListConsumerGroups only says whether the type is empty; librdkafka's older group listing (the
    same ListGroups request) has the type itself. Best effort: without it the column is derived.
    """
    legacy = getattr(admin, "list_groups", None)
    if legacy is None:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return {g.id: g.protocol_type for g in legacy(timeout=_client.timeout_s(args)) if g.error is None}
    except Exception:  # the column falls back to what list_consumer_groups said
        return {}


# -- describe ------------------------------------------------------------------------------------------


@dataclass
class Row:
    topic: str
    partition: int
    current: int | None = None
    end: int | CliError | None = None
    member: Any = None


def describe(admin: AdminClient, args: argparse.Namespace) -> int:
    groups = selected_groups(admin, args)
    if not groups:
        print("There are no consumer groups.", file=sys.stderr)
        return 0
    descs = describe_groups(admin, args, groups)
    status = 0
    live = []
    for g in groups:
        d = descs[g]
        if isinstance(d, CliError):
            _client.report("groups", d)
            status = 1
        elif d.state == ConsumerGroupState.DEAD:
            _client.report("groups", not_found(g))
            status = 1
        else:
            live.append(d)
    if args.state is not None:
        _describe_state(live)
    elif args.members:
        _describe_members(live)
    else:
        status = max(status, _describe_offsets(admin, args, live))
    return status


def _announce(d: Any) -> bool:
    """Kafka's notes for groups without members or in a rebalance; True when the group has members."""
    if d.state in (ConsumerGroupState.PREPARING_REBALANCING, ConsumerGroupState.COMPLETING_REBALANCING):
        print(f"\nWarning: Consumer group '{d.group_id}' is rebalancing.", file=sys.stderr)
    if not d.members:
        print(f"\nConsumer group '{d.group_id}' has no active members.")
        return False
    return True


def _describe_state(descs: list[Any]) -> None:
    for d in descs:
        c = d.coordinator
        coordinator = f"{c.host}:{c.port} ({c.id})" if c is not None else "-"
        print()
        print_table(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                    [(d.group_id, coordinator, d.partition_assignor or "-", state_name(d.state), len(d.members))])


def format_assignment(tps: Iterable[Any]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in sorted(by_topic.items())) or "-"


def _assigned(member: Any) -> list[Any]:
    return list(member.assignment.topic_partitions or []) if member.assignment is not None else []


def _describe_members(descs: list[Any]) -> None:
    for d in descs:
        if not _announce(d):
            continue
        print()
        rows = []
        for m in sorted(d.members, key=lambda m: (m.client_id or "", m.member_id)):
            tps = _assigned(m)
            rows.append((d.group_id, m.member_id, m.group_instance_id or "-", m.host or "-", m.client_id or "-",
                         len(tps), format_assignment(tps)))
        print_table(("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"),
                    rows)


def _describe_offsets(admin: AdminClient, args: argparse.Namespace, descs: list[Any]) -> int:
    progress = Progress(len(descs), "fetched the offsets of groups")
    committed = committed_offsets(admin, args, [d.group_id for d in descs], progress)
    status = 0
    tables: dict[str, dict[TP, Row]] = {}
    for d in descs:
        c = committed[d.group_id]
        if isinstance(c, CliError):
            _client.report("groups", c)
            status = 1
            continue
        rows = {tp: Row(tp[0], tp[1], current=off) for tp, off in c.items()}
        for m in d.members:
            for tp in _assigned(m):
                rows.setdefault((tp.topic, tp.partition), Row(tp.topic, tp.partition)).member = m
        tables[d.group_id] = rows
    ends = log_offsets(admin, args, (tp for rows in tables.values() for tp in rows), OffsetSpec.latest(), "end")
    for d in descs:
        rows = tables.get(d.group_id)
        if rows is None:
            continue
        _announce(d)
        if not rows:
            if d.members:
                print(f"\nConsumer group '{d.group_id}' has no committed offsets and no assigned partitions.")
            continue
        print()
        print_table(
            ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
             "CLIENT-ID"),
            (_offset_row(d.group_id, r, ends.get((r.topic, r.partition))) for _, r in sorted(rows.items())),
        )
    return status


def _offset_row(group: str, r: Row, end: int | CliError | None) -> tuple[Any, ...]:
    end_value = end if isinstance(end, int) and end >= 0 else None
    lag = end_value - r.current if end_value is not None and r.current is not None else None
    m = r.member

    def show(v: Any) -> Any:
        return "-" if v is None or v == "" else v

    return (group, r.topic, r.partition, show(r.current), show(end_value), show(lag),
            show(m.member_id if m else None), show(m.host if m else None), show(m.client_id if m else None))


# -- delete ----------------------------------------------------------------------------------------------


def delete(admin: AdminClient, args: argparse.Namespace) -> int:
    groups = selected_groups(admin, args)
    if not groups:
        print("There are no consumer groups.", file=sys.stderr)
        return 0
    futures = admin.delete_consumer_groups(groups, **kwargs(args))
    status = 0
    for g in groups:
        try:
            _client.wait(futures[g], args, f"delete group '{g}'")
        except CliError as e:
            if e.code == KafkaError.NON_EMPTY_GROUP:
                e = CliError(f"cannot delete group '{g}': it has active members (NON_EMPTY_GROUP)",
                             "stop its consumers (or wait for their session timeout), then retry; "
                             f"`odradek groups describe --group {g} --members` shows them", code=e.code)
            elif e.code == KafkaError.GROUP_ID_NOT_FOUND:
                e = CliError(f"cannot delete group '{g}': it does not exist (GROUP_ID_NOT_FOUND)",
                             "`odradek groups list` shows the groups there are", code=e.code)
            elif e.code in _UNREACHABLE_CODES:
                raise
            _client.report("groups", e)
            status = 1
            continue
        print(f"Deleted consumer group '{g}'.")
    return status
