"""``odradek groups reset-offsets``: move a consumer group's committed offsets, as kafka-consumer-groups.sh does.

Which partitions: ``--topic T`` (every partition of T), ``--topic T:0,2`` (those partitions), repeatable;
or ``--all-topics``: every partition the group has a committed offset for (as Kafka's tool does).

Where to (exactly one):

==================  =====================================================================================
--to-earliest       the log start offset
--to-latest         the log end offset (high watermark)
--to-offset N       N, clamped into [log start, log end]
--shift-by N        the committed offset + N (N may be negative), clamped; needs a committed offset
--to-current        the committed offset (partitions without one: the log end)
--to-datetime DT    the first offset whose timestamp is >= DT (ISO 8601, e.g. 2026-01-31T12:00:00.000,
                    with Z or +01:00 for a zone; without one, local time); the log end if there is none
--by-duration D     like --to-datetime with now - D; D is ISO 8601 (PT30M, P1DT2H, PT0.5S) or 1d2h30m10s
==================  =====================================================================================

Nothing changes without ``--execute``: by default (``--dry-run``) the plan is printed as
``GROUP TOPIC PARTITION NEW-OFFSET`` and a note on stderr says it was a dry run. With ``--execute`` the
same table is printed after the offsets are committed (OffsetCommit via alter_consumer_group_offsets).

Only inactive groups can be reset (state Empty, or a group that does not exist yet: ``--execute``
creates it); for any other state this refuses with Kafka's message ("Assignments can only be reset if
the group 'G' is inactive, but the current state is Stable."). Clamped offsets are reported on stderr.

``plan_offsets`` is the pure part: partitions, committed and log offsets in, new offsets out.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from odradek.cli import _client, groups
from odradek.cli._client import CliError

TP = tuple[str, int]

MODES = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_current", "to_datetime", "by_duration")
_RESET_ONLY = ("topic", "all_topics", "dry_run", "execute", *MODES)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("reset-offsets")
    g.add_argument("--topic", action="append", default=[], metavar="T[:P,P...]",
                   help="reset-offsets: this topic (all its partitions, or those listed), repeatable")
    g.add_argument("--all-topics", action="store_true",
                   help="reset-offsets: every partition the group has a committed offset for")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--to-earliest", action="store_true", help="to the log start offset")
    mode.add_argument("--to-latest", action="store_true", help="to the log end offset")
    mode.add_argument("--to-offset", type=_client.non_negative_int, metavar="N",
                      help="to offset N (clamped into the log's offsets)")
    mode.add_argument("--shift-by", type=_integer, metavar="N",
                      help="move the committed offset by N (negative: back), clamped into the log's offsets")
    mode.add_argument("--to-current", action="store_true", help="to the committed offset (the log end without one)")
    mode.add_argument("--to-datetime", metavar="DATETIME",
                      help="to the first record at or after DATETIME, e.g. 2026-01-31T12:00:00.000 "
                           "(add Z or +hh:mm for a zone; local time without)")
    mode.add_argument("--by-duration", metavar="DURATION",
                      help="to the first record at or after now - DURATION, e.g. PT30M, P1DT2H or 1h30m")
    run = g.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="only print the new offsets (the default)")
    run.add_argument("--execute", action="store_true", help="commit the new offsets")


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


@dataclass(frozen=True)
class Target:
    """Where to: ``mode`` is one of MODES; ``value`` the offset, shift or timestamp (ms) it needs."""

    mode: str
    value: int | None = None


@dataclass
class Plan:
    offsets: dict[TP, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def check_options(args: argparse.Namespace) -> None:
    """Usage errors of reset-offsets (and its options given to other actions); sets ``args.targets``."""
    given = [m for m in _RESET_ONLY if getattr(args, m) not in (None, False, [])]
    if args.action != "reset-offsets":
        if given:
            raise CliError(f"--{given[0].replace('_', '-')} is only for reset-offsets", exit_code=2)
        return
    modes = [m for m in MODES if getattr(args, m) not in (None, False)]
    if not modes:
        raise CliError("groups reset-offsets needs where to reset to",
                       "one of --to-earliest, --to-latest, --to-offset N, --shift-by N, --to-current, "
                       "--to-datetime DATETIME, --by-duration DURATION", exit_code=2)
    if not args.topic and not args.all_topics:
        raise CliError("groups reset-offsets needs --topic T[:P,P...] or --all-topics",
                       "e.g. --topic orders, --topic orders:0,1, or --all-topics for every partition the group "
                       "has committed offsets for", exit_code=2)
    if args.topic and args.all_topics:
        raise CliError("give either --topic or --all-topics, not both", exit_code=2)
    args.topic_specs = parse_topic_specs(args.topic)
    args.target = target_of(args, time.time())


def target_of(args: argparse.Namespace, now: float) -> Target:
    if args.to_offset is not None:
        return Target("to_offset", args.to_offset)
    if args.shift_by is not None:
        return Target("shift_by", args.shift_by)
    if args.to_datetime is not None:
        return Target("to_datetime", parse_datetime(args.to_datetime))
    if args.by_duration is not None:
        return Target("by_duration", int(now * 1000) - int(parse_duration(args.by_duration).total_seconds() * 1000))
    for m in ("to_earliest", "to_latest", "to_current"):
        if getattr(args, m):
            return Target(m)
    raise AssertionError("check_options found no mode")


def parse_topic_specs(items: list[str]) -> dict[str, list[int] | None]:
    """``["a", "b:0,2"]`` → {"a": None (all partitions), "b": [0, 2]}."""
    out: dict[str, list[int] | None] = {}
    for item in items:
        topic, sep, parts = item.partition(":")
        topic = topic.strip()
        if not topic:
            raise CliError(f"--topic {item!r} names no topic", "write --topic NAME or --topic NAME:0,1", exit_code=2)
        if not sep:
            out[topic] = None
            continue
        partitions: list[int] = []
        for word in (w.strip() for w in parts.split(",")):
            if not word.isdigit():
                raise CliError(f"--topic {item!r}: {word!r} is not a partition number",
                               "write --topic NAME:0,1,2 (partition numbers, comma-separated)", exit_code=2)
            partitions.append(int(word))
        previous = out.get(topic, [])
        if previous is not None:  # an earlier --topic NAME (all partitions) wins
            out[topic] = sorted(set(previous) | set(partitions))
    return out


def parse_datetime(text: str) -> int:
    """ISO 8601 date-time → epoch milliseconds; without a zone it is local time (as Kafka's tool)."""
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CliError(f"--to-datetime {text!r} is not a date-time",
                       "write it as YYYY-MM-DDTHH:mm:SS.sss, optionally with a zone: Z or +01:00",
                       exit_code=2) from None
    if dt.tzinfo is None:
        dt = dt.astimezone()  # local time
    return int(dt.timestamp() * 1000)


_ISO_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:[.,]\d+)?)S)?)?", re.IGNORECASE)
_SHORT_DURATION = re.compile(
    r"(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?", re.IGNORECASE)


def parse_duration(text: str) -> timedelta:
    """``PnDTnHnMn.nS`` (ISO 8601, as Java's Duration) or ``1d2h3m4s`` → a non-negative timedelta."""
    t = text.strip()
    m = _ISO_DURATION.fullmatch(t) or _SHORT_DURATION.fullmatch(t)
    if m is None or not t or not any(m.groups()) or t.upper().endswith("T"):
        raise CliError(f"--by-duration {text!r} is not a duration",
                       "write it as ISO 8601 PnDTnHnMnS (e.g. PT30M, P1DT12H, PT0.5S) or like 1d2h30m10s",
                       exit_code=2)
    return timedelta(days=int(m["d"] or 0), hours=int(m["h"] or 0), minutes=int(m["m"] or 0),
                     seconds=float((m["s"] or "0").replace(",", ".")))


def plan_offsets(target: Target, partitions: list[TP], committed: dict[TP, int], earliest: dict[TP, int],
                 latest: dict[TP, int], by_time: dict[TP, int] | None = None) -> Plan:
    """The new offset of each partition, Kafka's rules; ``by_time`` is ListOffsets(timestamp) (-1: none)."""
    plan = Plan()
    for tp in partitions:
        name = f"{tp[0]}-{tp[1]}"
        lo, hi = earliest[tp], latest[tp]
        mode = target.mode
        if mode == "to_earliest":
            new = lo
        elif mode == "to_latest":
            new = hi
        elif mode == "to_current":
            new = committed.get(tp, hi)
        elif mode in ("to_datetime", "by_duration"):
            found = (by_time or {}).get(tp, -1)
            new = found if found >= 0 else hi
        else:
            if mode == "to_offset":
                assert target.value is not None
                wanted = target.value
            else:
                if tp not in committed:
                    raise CliError(f"cannot shift the offset of {name}: the group has no committed offset for it",
                                   "use --to-offset, --to-earliest or --to-latest for it, or name only partitions "
                                   "with committed offsets (`odradek groups describe` shows them)")
                assert target.value is not None
                wanted = committed[tp] + target.value
            new = min(max(wanted, lo), hi)
            if wanted < lo:
                plan.notes.append(f"New offset ({wanted}) is lower than earliest offset for topic partition {name}. "
                                  f"Value will be set to {lo}")
            elif wanted > hi:
                plan.notes.append(f"New offset ({wanted}) is higher than latest offset for topic partition {name}. "
                                  f"Value will be set to {hi}")
        plan.offsets[tp] = new
    return plan


# -- the verb --------------------------------------------------------------------------------------------


_INACTIVE = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)


def reset_offsets(admin: AdminClient, args: argparse.Namespace) -> int:
    group_ids = groups.selected_groups(admin, args)
    if not group_ids:
        print("There are no consumer groups.", file=sys.stderr)
        return 0
    descs = groups.describe_groups(admin, args, group_ids)
    md = _client.check_reachable(admin, args)
    status = 0
    for g in group_ids:
        try:
            _reset_group(admin, args, g, descs[g], md)
        except CliError as e:
            if len(group_ids) == 1:
                raise
            _client.report("groups", e)
            status = 1
    return status


def _reset_group(admin: AdminClient, args: argparse.Namespace, g: str, desc: Any, md: Any) -> None:
    exists = True
    if isinstance(desc, CliError):
        if desc.code != KafkaError.GROUP_ID_NOT_FOUND:
            raise desc
        exists = False
    elif desc.state not in _INACTIVE:
        raise CliError(
            f"Assignments can only be reset if the group '{g}' is inactive, but the current state is "
            f"{groups.state_name(desc.state)}.",
            f"stop the group's consumers first (`odradek groups describe --group {g} --members` shows them)")
    else:
        exists = desc.state != ConsumerGroupState.DEAD
    committed_or_error = groups.committed_offsets(admin, args, [g])[g]
    if isinstance(committed_or_error, CliError):
        raise committed_or_error
    committed = committed_or_error
    partitions = _partitions(args, g, committed, md)
    target: Target = args.target
    earliest = _offsets(admin, args, partitions, OffsetSpec.earliest(), "earliest")
    latest = _offsets(admin, args, partitions, OffsetSpec.latest(), "end")
    by_time = None
    if target.mode in ("to_datetime", "by_duration"):
        assert target.value is not None
        by_time = _offsets(admin, args, partitions, OffsetSpec.for_timestamp(target.value), "timestamp")
    plan = plan_offsets(target, partitions, committed, earliest, latest, by_time)
    for note in plan.notes:
        print(f"WARN: {note}", file=sys.stderr)
    if args.execute:
        _commit(admin, args, g, plan.offsets)
    print()
    groups.print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                       [(g, t, p, off) for (t, p), off in sorted(plan.offsets.items())])
    if not args.execute:
        print(f"Dry run: nothing was changed for group '{g}'; add --execute to commit these offsets.",
              file=sys.stderr)
    elif not exists:
        print(f"Group '{g}' did not exist: it now has these committed offsets.", file=sys.stderr)


def _partitions(args: argparse.Namespace, g: str, committed: dict[TP, int], md: Any) -> list[TP]:
    if args.all_topics:
        if not committed:
            raise CliError(f"group '{g}' has no committed offsets, so --all-topics selects nothing",
                           "name the topics with --topic T (or T:0,1)")
        return sorted(committed)
    out: list[TP] = []
    for topic, wanted in args.topic_specs.items():
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None:
            raise CliError(f"topic '{topic}' does not exist", "list the topics with `odradek topics list`",
                           code=KafkaError.UNKNOWN_TOPIC_OR_PART)
        have = sorted(meta.partitions)
        if wanted is None:
            out += [(topic, p) for p in have]
            continue
        missing = [p for p in wanted if p not in meta.partitions]
        if missing:
            raise CliError(f"topic '{topic}' has no partition {', '.join(map(str, missing))} "
                           f"(it has {len(have)}: 0-{len(have) - 1})",
                           f"`odradek topics describe --topic {topic}` shows its partitions")
        out += [(topic, p) for p in wanted]
    return sorted(set(out))


def _offsets(admin: AdminClient, args: argparse.Namespace, partitions: list[TP], spec: OffsetSpec,
             what: str) -> dict[TP, int]:
    found = groups.log_offsets(admin, args, partitions, spec, what)
    out: dict[TP, int] = {}
    for tp, v in found.items():
        if isinstance(v, CliError):
            raise v
        out[tp] = v
    return out


def _commit(admin: AdminClient, args: argparse.Namespace, g: str, offsets: dict[TP, int]) -> None:
    request = ConsumerGroupTopicPartitions(g, [TopicPartition(t, p, off) for (t, p), off in sorted(offsets.items())])
    future = admin.alter_consumer_group_offsets([request], **groups.kwargs(args))[g]
    try:
        result = _client.wait(future, args, f"commit the new offsets of group '{g}'")
    except CliError as e:
        raise _commit_error(g, e) from None
    failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
    active = next((tp.error for tp in failed if tp.error.code() in _ACTIVE_CODES), None)
    if active is not None:
        raise _commit_error(g, CliError(active.str(), code=active.code()))
    if failed:
        details = "; ".join(f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in failed)
        raise CliError(f"cannot commit {len(failed)} of {len(offsets)} offsets of group '{g}': {details}",
                       "the other partitions were committed; fix the cause and run the reset again")


_ACTIVE_CODES = (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS)


def _commit_error(g: str, e: CliError) -> CliError:
    """The broker refuses commits from outside a group that has members (Kafka: UNKNOWN_MEMBER_ID)."""
    if e.code in _ACTIVE_CODES:
        return CliError(f"cannot commit the new offsets of group '{g}': the group became active ({e.message})",
                        "stop the group's consumers and run the reset again", code=e.code)
    return e
