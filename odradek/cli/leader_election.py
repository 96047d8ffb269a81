"""``odradek leader-election``, as ``kafka-leader-election.sh``: elect the preferred (or, where no in-sync
replica is left, any live) replica as leader, through confluent-kafka's ``AdminClient.elect_leaders``
(ElectLeaders, api 43, sent to the controller).

Usage::

    odradek leader-election --election-type preferred --all-topic-partitions
    odradek leader-election --election-type preferred --topic orders --partition 0
    odradek leader-election --election-type unclean --path-to-json-file partitions.json

The JSON file is Kafka's: ``{"partitions": [{"topic": "orders", "partition": 0}]}``.

Output, as Kafka's tool prints it::

    Successfully completed leader election (PREFERRED) for partitions orders-0, orders-1
    Valid replica already elected for partitions orders-2
    Error completing leader election (PREFERRED) for partition: orders-3: <the broker's message>

Invariants: with ``--all-topic-partitions`` the partitions that need no election are not listed (as Kafka's
tool); the exit code is 1 when any partition's election failed, 0 otherwise (2 for bad usage).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from odradek.cli import _client
from odradek.cli._client import CliError


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "leader-election", help="elect preferred or unclean leaders (like kafka-leader-election.sh)",
        description="Move leadership to each partition's preferred replica, or elect any live replica of "
                    "partitions that have no leader (unclean: records may be lost).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  odradek leader-election --election-type preferred --all-topic-partitions\n"
        "  odradek leader-election --election-type preferred --topic orders --partition 0\n"
        '  odradek leader-election --election-type unclean --path-to-json-file parts.json',
    )
    p.add_argument("--election-type", required=True, choices=["preferred", "unclean", "PREFERRED", "UNCLEAN"],
                   help="preferred: the first replica of the assignment; unclean: any live replica")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    which.add_argument("--topic", metavar="NAME", help="one topic (with --partition: one partition of it)")
    which.add_argument("--path-to-json-file", type=Path, metavar="FILE",
                       help='partitions as {"partitions":[{"topic":"NAME","partition":N}]}')
    p.add_argument("--partition", type=_client.non_negative_int, metavar="N", help="with --topic: the partition")
    _client.add_common_options(p)
    p.set_defaults(func=lambda args: _client.run_verb("leader-election", run, args))


def read_partitions(path: Path) -> list[TopicPartition]:
    obj = _client.read_json(path)
    entries = obj.get("partitions") if isinstance(obj, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CliError(f'{path}: expected {{"partitions":[{{"topic":"NAME","partition":N}}, ...]}}', exit_code=2)
    out = []
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)):
            raise CliError(f"{path}: each entry needs 'topic' and 'partition', got {e!r}", exit_code=2)
        out.append(TopicPartition(e["topic"], e["partition"]))
    return out


def run(args: argparse.Namespace) -> int:
    kind = ElectionType.PREFERRED if args.election_type.lower() == "preferred" else ElectionType.UNCLEAN
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic", exit_code=2)
    admin = _client.make_client(AdminClient, _client.base_config(args))
    md = _client.check_reachable(admin, args)
    partitions: list[TopicPartition] | None
    if args.all_topic_partitions:
        partitions = None
    elif args.path_to_json_file is not None:
        partitions = read_partitions(args.path_to_json_file)
    else:
        topic = md.topics.get(args.topic)
        if topic is None or topic.error is not None:
            raise CliError(f"topic '{args.topic}' does not exist", "`odradek topics list` shows the topics")
        ids = [args.partition] if args.partition is not None else sorted(topic.partitions)
        partitions = [TopicPartition(args.topic, p) for p in ids]
    # No timeout keywords: confluent-kafka 2.16's elect_leaders fails on any (a bug in its C binding); the wait
    # below is bounded by --request-timeout-ms, and librdkafka's own requests by socket.timeout.ms.
    results: dict[Any, Any] = _client.wait(admin.elect_leaders(kind, partitions), args, "elect leaders")
    name = kind.name
    done, not_needed, failed = [], [], []
    for tp, err in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        label = f"{tp.topic}-{tp.partition}"
        error = err.args[0] if isinstance(err, KafkaException) and err.args else err  # a KafkaError
        if error is None:
            done.append(label)
        elif isinstance(error, KafkaError) and error.code() == KafkaError.ELECTION_NOT_NEEDED:
            not_needed.append(label)
        else:
            failed.append(f"{label}: {error.str() if isinstance(error, KafkaError) else error}")
    if done:
        print(f"Successfully completed leader election ({name}) for partitions {', '.join(done)}")
    if not_needed and not args.all_topic_partitions:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for f in failed:
        print(f"Error completing leader election ({name}) for partition: {f}")
    if not (done or not_needed or failed):
        print(f"No partitions needed a leader election ({name})")
    return 1 if failed else 0
