"""``odradek topics create|list|describe|delete|alter``: manage topics, as ``kafka-topics.sh`` does.

All calls go through confluent-kafka's ``AdminClient``. ``--topic`` is, as in kafka-topics.sh, a
regular expression for list/describe/delete/alter (matched against the whole name, so a plain topic
name matches itself); for create it is the exact name.

describe prints, as kafka-topics.sh does, fields separated by tabs (shown here as ``<TAB>``)::

    Topic: t<TAB>TopicId: 8Rj...<TAB>PartitionCount: 3<TAB>ReplicationFactor: 1<TAB>Configs: retention.ms=1000
    <TAB>Topic: t<TAB>Partition: 0<TAB>Leader: 1<TAB>Replicas: 1<TAB>Isr: 1

``Configs`` lists the configs that are not at their default (topic overrides, static broker settings).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from confluent_kafka import KafkaError, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from odradek.cli import _client, _health
from odradek.cli._client import CliError

ACTIONS = ("create", "list", "describe", "delete", "alter")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics (like kafka-topics.sh)",
        description="Create, list, describe, alter and delete topics.",
        epilog="examples:\n"
        "  odradek topics create --topic orders --partitions 3 --config retention.ms=86400000\n"
        "  odradek topics describe --topic orders\n"
        "  odradek topics alter --topic orders --partitions 6\n"
        "  odradek topics delete --topic orders",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=ACTIONS, help="what to do")
    p.add_argument("--topic", metavar="NAME",
                   help="topic name (create); for the other actions a regular expression matched against "
                        "whole names (a plain name matches itself)")
    p.add_argument("--partitions", type=_client.positive_int, metavar="N",
                   help="number of partitions (create: default is the broker's num.partitions; "
                        "alter: the new, larger count)")
    p.add_argument("--replication-factor", type=_client.positive_int, metavar="N",
                   help="replicas per partition (create; default is the broker's default.replication.factor)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="topic config override (create, alter), repeatable, e.g. --config retention.ms=3600000")
    p.add_argument("--if-not-exists", action="store_true", help="create: do nothing if the topic exists")
    p.add_argument("--if-exists", action="store_true",
                   help="describe/alter/delete: do nothing if no topic matches")
    p.add_argument("--exclude-internal", action="store_true", help="list/describe: leave out internal topics")
    f = p.add_argument_group("describe: only the partitions that are (partition lines only, as kafka-topics.sh)")
    f.add_argument("--under-replicated-partitions", action="store_true",
                   help="with fewer in-sync replicas than replicas")
    f.add_argument("--under-min-isr-partitions", action="store_true",
                   help="with fewer in-sync replicas than min.insync.replicas")
    f.add_argument("--at-min-isr-partitions", action="store_true",
                   help="with exactly min.insync.replicas in-sync replicas")
    f.add_argument("--unavailable-partitions", action="store_true", help="without a live leader")
    _client.add_common_options(p)
    p.set_defaults(func=lambda args: _client.run_verb("topics", run, args))


def run(args: argparse.Namespace) -> int:
    _check_options(args)
    admin = _client.make_client(AdminClient, _client.base_config(args))
    return {
        "create": create, "list": list_topics, "describe": describe, "delete": delete, "alter": alter,
    }[args.action](admin, args)


def _check_options(args: argparse.Namespace) -> None:
    a = args.action
    if a in ("create", "delete", "alter") and not args.topic:
        raise CliError(f"topics {a} needs --topic", f"e.g. odradek topics {a} --topic NAME", exit_code=2)
    if args.partitions is not None and a not in ("create", "alter"):
        raise CliError(f"--partitions is for create and alter, not {a}", exit_code=2)
    if args.replication_factor is not None and a != "create":
        raise CliError("--replication-factor is only for create", exit_code=2)
    if args.config and a not in ("create", "alter"):
        raise CliError(f"--config is for create and alter, not {a}",
                       "see `odradek configs describe --entity-type topics --entity-name NAME`", exit_code=2)
    if args.if_not_exists and a != "create":
        raise CliError("--if-not-exists is only for create", exit_code=2)
    if args.if_exists and a not in ("describe", "alter", "delete"):
        raise CliError("--if-exists is for describe, alter and delete", exit_code=2)
    if a == "alter" and args.partitions is None and not args.config:
        raise CliError("topics alter needs --partitions N and/or --config KEY=VALUE",
                       "e.g. odradek topics alter --topic NAME --partitions 6", exit_code=2)
    if _filters(args) and a != "describe":
        raise CliError("the --*-partitions filters are for describe only", exit_code=2)
    if args.topic and a != "create":
        try:
            re.compile(args.topic)
        except re.error as e:
            raise CliError(f"--topic {args.topic!r} is not a valid regular expression: {e}", exit_code=2) from None


# -- helpers -----------------------------------------------------------------------------------------


def _all_topics(admin: AdminClient, args: argparse.Namespace) -> dict[str, Any]:
    """name -> TopicMetadata of every topic in the cluster."""
    md = _client.check_reachable(admin, args)
    return dict(md.topics)


def _matching(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    """Names matching ``--topic`` (all when absent), sorted; a ``CliError`` if none match, unless --if-exists."""
    topics = _all_topics(admin, args)
    names = sorted(topics)
    if args.exclude_internal:
        names = [n for n in names if not n.startswith("__")]
    if args.topic:
        pattern = re.compile(args.topic)
        names = [n for n in names if pattern.fullmatch(n)]
        if not names and not args.if_exists:
            raise CliError(
                f"topic '{args.topic}' does not exist",
                "list the topics with `odradek topics list`, or add --if-exists to ignore missing topics",
            )
    return names


def _admin_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {"request_timeout": _client.timeout_s(args)}


def _configs(args: argparse.Namespace) -> dict[str, str]:
    return _client.parse_pairs(args.config, "--config")


# -- actions -----------------------------------------------------------------------------------------


def create(admin: AdminClient, args: argparse.Namespace) -> int:
    _client.check_reachable(admin, args)
    new = NewTopic(
        args.topic,
        num_partitions=args.partitions if args.partitions is not None else -1,
        replication_factor=args.replication_factor if args.replication_factor is not None else -1,
        config=_configs(args),
    )
    future = admin.create_topics([new], operation_timeout=_client.timeout_s(args), **_admin_kwargs(args))[args.topic]
    try:
        _client.wait(future, args, f"create topic '{args.topic}'")
    except CliError as e:
        if args.if_not_exists and e.code == KafkaError.TOPIC_ALREADY_EXISTS:
            return 0
        raise
    print(f"Created topic {args.topic}.")
    return 0


def list_topics(admin: AdminClient, args: argparse.Namespace) -> int:
    for name in _matching(admin, args):
        print(name)
    return 0


def describe(admin: AdminClient, args: argparse.Namespace) -> int:
    names = _matching(admin, args)
    if not names:
        return 0
    live = set(_client.check_reachable(admin, args).brokers) if _filters(args) else set()
    futures = admin.describe_topics(TopicCollection(names), **_admin_kwargs(args))
    resources = {name: ConfigResource("topic", name) for name in names}
    config_futures = admin.describe_configs(list(resources.values()), **_admin_kwargs(args))
    status = 0
    for name in names:
        try:
            desc = _client.wait(futures[name], args, f"describe topic '{name}'", subject=name)
            configs = _client.wait(config_futures[resources[name]], args, f"describe the configs of '{name}'")
        except CliError as e:
            if args.if_exists and e.code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue  # deleted between listing and describing
            _client.report("topics", e)
            status = 1
            continue
        if args.exclude_internal and desc.is_internal:
            continue
        wanted = _filters(args)
        if wanted:
            lines = _filtered_lines(desc, configs, wanted, live)
            if lines:
                print("\n".join(lines))
        else:
            print(_describe_lines(desc, configs))
    return status


_FILTERS = {"under_replicated_partitions": _health.UNDER_REPLICATED,
            "under_min_isr_partitions": _health.UNDER_MIN_ISR,
            "at_min_isr_partitions": _health.AT_MIN_ISR,
            "unavailable_partitions": _health.UNAVAILABLE}


def _filters(args: argparse.Namespace) -> set[str]:
    return {flag for option, flag in _FILTERS.items() if getattr(args, option, False)}


def min_isr_of(configs: dict[str, ConfigEntry]) -> int:
    entry = configs.get("min.insync.replicas")
    try:
        return int(entry.value) if entry is not None and entry.value is not None else 1
    except ValueError:
        return 1


def _filtered_lines(desc: Any, configs: dict[str, ConfigEntry], wanted: set[str], live: set[int]) -> list[str]:
    """The partition lines of ``desc`` whose health matches any of ``wanted``."""
    min_isr = min_isr_of(configs)
    out = []
    for p in sorted(desc.partitions, key=lambda p: p.id):
        health = _health.PartitionHealth(p.leader.id if p.leader is not None else -1,
                                         [n.id for n in p.replicas], [n.id for n in p.isr], min_isr)
        if health.flags(live) & wanted:
            out.append(_partition_line(desc.name, p))
    return out


def _describe_lines(desc: Any, configs: dict[str, ConfigEntry]) -> str:
    overrides = ",".join(
        f"{k}={e.value}" for k, e in sorted(configs.items())
        if _source(e) != ConfigSource.DEFAULT_CONFIG and not e.is_sensitive
    )
    rf = max((len(p.replicas) for p in desc.partitions), default=0)
    lines = [
        f"Topic: {desc.name}\tTopicId: {_kafka_uuid(desc.topic_id)}\tPartitionCount: {len(desc.partitions)}\t"
        f"ReplicationFactor: {rf}\tConfigs: {overrides}"
    ]
    for p in sorted(desc.partitions, key=lambda p: p.id):
        lines.append(_partition_line(desc.name, p))
    return "\n".join(lines)


def _partition_line(topic: str, p: Any) -> str:
    leader = p.leader.id if p.leader is not None else "none"
    replicas = ",".join(str(n.id) for n in p.replicas)
    isr = ",".join(str(n.id) for n in p.isr)
    return f"\tTopic: {topic}\tPartition: {p.id}\tLeader: {leader}\tReplicas: {replicas}\tIsr: {isr}"


def _kafka_uuid(topic_id: Any) -> str:
    """Kafka prints ids in URL-safe base64 without padding; confluent-kafka's str() uses the standard alphabet."""
    return str(topic_id).replace("+", "-").replace("/", "_").rstrip("=")


def _source(entry: ConfigEntry) -> ConfigSource:
    """confluent-kafka gives the source as a plain int in describe_configs results."""
    try:
        return ConfigSource(getattr(entry.source, "value", entry.source))
    except ValueError:
        return ConfigSource.UNKNOWN_CONFIG


def delete(admin: AdminClient, args: argparse.Namespace) -> int:
    names = _matching(admin, args)
    if not names:
        return 0
    futures = admin.delete_topics(names, operation_timeout=_client.timeout_s(args), **_admin_kwargs(args))
    status = 0
    for name in names:
        try:
            _client.wait(futures[name], args, f"delete topic '{name}'", subject=name)
            print(f"Deleted topic {name}.")
        except CliError as e:
            _client.report("topics", e)
            status = 1
    return status


def alter(admin: AdminClient, args: argparse.Namespace) -> int:
    names = _matching(admin, args)
    configs = _configs(args)
    status = 0
    if args.partitions is not None and names:
        futures = admin.create_partitions([NewPartitions(n, args.partitions) for n in names],
                                          operation_timeout=_client.timeout_s(args), **_admin_kwargs(args))
        for name in names:
            try:
                _client.wait(futures[name], args, f"add partitions to '{name}'", subject=name)
                print(f"Topic {name} now has {args.partitions} partitions.")
            except CliError as e:
                _client.report("topics", e)
                status = 1
    if configs and names:
        resources = [
            ConfigResource("topic", n, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
            ])
            for n in names
        ]
        futures = admin.incremental_alter_configs(resources, **_admin_kwargs(args))
        for res in resources:
            try:
                _client.wait(futures[res], args, f"alter the configs of '{res.name}'", subject=res.name)
                print(f"Updated configs of topic {res.name}: " + ",".join(f"{k}={v}" for k, v in configs.items()))
            except CliError as e:
                _client.report("topics", e)
                status = 1
    sys.stdout.flush()
    return status
