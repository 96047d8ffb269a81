"""``odradek get-offsets``: the offsets of partitions at a point in time, as ``kafka-get-offsets.sh`` prints them.

One line per partition, ``topic:partition:offset``, sorted by topic then partition::

    orders:0:1042
    orders:1:998

``--time`` picks the offset (ListOffsets, through confluent-kafka's ``AdminClient.list_offsets``):

- ``-1`` or ``latest`` (the default): the log end offset, where the next record will be written;
- ``-2`` or ``earliest``: the log start offset, the first record still kept;
- ``-3`` or ``max-timestamp``: the offset of the record with the largest timestamp;
- a timestamp in milliseconds since the epoch: the first offset whose record's timestamp is at or after it.

Invariants:
- The partitions asked for are the ones the filters match, as kafka-get-offsets takes them: ``--topic`` is a
  regular expression matched against the whole topic name (every topic when omitted), ``--partitions`` a list of
  partition ids, ``--topic-partitions`` a list of ``topic[:partitions]`` with partitions ``N``, ``N-M``, ``N-``
  or ``-M`` (``M`` excluded, as Kafka's). No matching partition is an error (exit code 1).
- A partition with no offset for the time (a timestamp after its last record) is left out, as Kafka does. A
  partition whose lookup fails is reported on stderr and left out; the others are printed, the exit code is 1.
- Output goes to stdout only; errors go to stderr as ``odradek get-offsets: error: ...``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from odradek.cli import _client
from odradek.cli._client import CliError

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
_TIME_WORDS = {"latest": LATEST, "earliest": EARLIEST, "max-timestamp": MAX_TIMESTAMP}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "get-offsets",
        help="print the offsets of partitions at a time (like kafka-get-offsets.sh)",
        description="Print topic:partition:offset for every partition that matches the filters.",
        epilog="examples:\n"
        "  odradek get-offsets --topic orders                 # log end offsets\n"
        "  odradek get-offsets --topic orders --time -2       # log start offsets\n"
        "  odradek get-offsets --topic-partitions 'orders:0-2,events' --time 1700000000000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--topic",
        metavar="REGEX",
        help="topics to look at: a regular expression matching whole names (default: every topic)",
    )
    p.add_argument("--partitions", metavar="IDS", help="comma-separated partition ids (default: every partition)")
    p.add_argument(
        "--topic-partitions",
        metavar="LIST",
        help="comma-separated topic[:partitions] (partitions N, N-M, N- or -M); not with --topic/--partitions",
    )
    p.add_argument(
        "--time",
        type=parse_time,
        default=LATEST,
        metavar="TIME",
        help="-1 or latest (default), -2 or earliest, -3 or max-timestamp, or a timestamp in ms",
    )
    p.add_argument("--exclude-internal-topics", action="store_true", help="leave out internal topics")
    _client.add_common_options(p)
    p.set_defaults(func=lambda args: _client.run_verb("get-offsets", run, args))


def parse_time(text: str) -> int:
    word = text.strip().lower()
    if word in _TIME_WORDS:
        return _TIME_WORDS[word]
    try:
        value = int(word)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not -1/latest, -2/earliest, -3/max-timestamp or a timestamp in ms"
        ) from None
    if value < MAX_TIMESTAMP:
        raise argparse.ArgumentTypeError(f"{text!r}: negative times are -1, -2 and -3")
    return value


def offset_spec(time: int) -> OffsetSpec:
    if time == LATEST:
        return OffsetSpec.latest()
    if time == EARLIEST:
        return OffsetSpec.earliest()
    if time == MAX_TIMESTAMP:
        return OffsetSpec.max_timestamp()
    return OffsetSpec.for_timestamp(time)


@dataclass(frozen=True)
class PartitionFilter:
    """One ``topic[:partitions]`` filter: a topic pattern and a test of partition ids."""

    topic: re.Pattern[str] | None  # None: every topic
    partition: Callable[[int], bool]

    def matches(self, topic: str, partition: int) -> bool:
        return (self.topic is None or self.topic.fullmatch(topic) is not None) and self.partition(partition)


def _pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as e:
        raise CliError(f"{text!r} is not a regular expression: {e}", exit_code=2) from None


def _number(text: str, what: str) -> int:
    if not text.strip().isdigit():
        raise CliError(
            f"{what} {text!r}: {text.strip()!r} is not a partition id", "partition ids are 0, 1, 2 ...", exit_code=2
        )
    return int(text)


def parse_partition_range(text: str, what: str) -> Callable[[int], bool]:
    """``N`` (that partition), ``N-M`` (N up to M, M excluded, as Kafka's), ``N-`` (N and above), ``-M`` (below M)."""
    if "-" not in text:
        n = _number(text, what)
        return lambda p: p == n
    low_text, _, high_text = text.partition("-")
    low = _number(low_text, what) if low_text.strip() else 0
    high = _number(high_text, what) if high_text.strip() else None
    return lambda p: p >= low and (high is None or p < high)


def parse_filters(topic: str | None, partitions: str | None, topic_partitions: str | None) -> list[PartitionFilter]:
    """The filters of ``--topic``/``--partitions`` or of ``--topic-partitions`` (``CliError`` if both are given)."""
    if topic_partitions is not None:
        if topic is not None or partitions is not None:
            raise CliError(
                "--topic-partitions cannot be combined with --topic or --partitions",
                "name the partitions in --topic-partitions, e.g. orders:0-2",
                exit_code=2,
            )
        out = []
        for item in (part.strip() for part in topic_partitions.split(",")):
            if not item:
                continue
            name, sep, ranges = item.rpartition(":") if ":" in item else (item, "", "")
            pattern = _pattern(name) if name else None
            test = parse_partition_range(ranges, "--topic-partitions") if sep and ranges else (lambda p: True)
            out.append(PartitionFilter(pattern, test))
        return out or [PartitionFilter(None, lambda p: True)]
    ids = {_number(p, "--partitions") for p in partitions.split(",") if p.strip()} if partitions else None
    return [
        PartitionFilter(
            _pattern(topic) if topic is not None else None, (lambda p: True) if ids is None else ids.__contains__
        )
    ]


def select(
    metadata_topics: dict[str, Any], filters: Iterable[PartitionFilter], exclude_internal: bool
) -> list[TopicPartition]:
    """The partitions of the cluster's topics that any filter matches, sorted by topic then partition."""
    filters = list(filters)
    out = []
    for name in sorted(metadata_topics):
        t = metadata_topics[name]
        if t.error is not None or (exclude_internal and name.startswith("__")):
            continue
        for pid in sorted(t.partitions):
            if any(f.matches(name, pid) for f in filters):
                out.append(TopicPartition(name, pid))
    return out


def run(args: argparse.Namespace) -> int:
    filters = parse_filters(args.topic, args.partitions, args.topic_partitions)
    admin = _client.make_client(AdminClient, _client.base_config(args))
    md = _client.check_reachable(admin, args)
    wanted = select(md.topics, filters, args.exclude_internal_topics)
    if not wanted:
        raise CliError(
            "no partition matches the filters",
            "list the topics with `odradek topics list`; --topic is a regular expression",
        )
    spec = offset_spec(args.time)
    futures = admin.list_offsets({tp: spec for tp in wanted}, request_timeout=_client.timeout_s(args))
    by_key = {(tp.topic, tp.partition): f for tp, f in futures.items()}
    status = 0
    for tp in wanted:
        try:
            info = _client.wait(
                by_key[(tp.topic, tp.partition)],
                args,
                f"list the offsets of {tp.topic}-{tp.partition}",
                subject=tp.topic,
            )
        except CliError as e:  # as kafka-get-offsets: skip the partition, report it, go on with the rest
            _client.report("get-offsets", e)
            status = 1
            continue
        if info.offset >= 0:
            print(f"{tp.topic}:{tp.partition}:{info.offset}")
    return status
