"""``odradek configs describe|alter``: read and change topic and broker configs, as ``kafka-configs.sh`` does.

describe prints every config of the entity (``--overrides-only``: only those not at their default)::

    Configs for topic t are:
      retention.ms=1000 source=DYNAMIC_TOPIC_CONFIG default=false sensitive=false read-only=false

alter applies ``--add-config k=v,k2=[a,b]`` (SET) and ``--delete-config k,k2`` (DELETE, back to the
default) in one IncrementalAlterConfigs request, so other overrides stay as they are.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from odradek.cli import _client
from odradek.cli._client import CliError

ENTITY_TYPES = {"topics": "topic", "topic": "topic", "brokers": "broker", "broker": "broker"}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "configs",
        help="describe and alter topic and broker configs (like kafka-configs.sh)",
        description="Describe and alter the configs of topics and brokers.",
        epilog="examples:\n"
        "  odradek configs describe --entity-type topics --entity-name orders\n"
        "  odradek configs alter --entity-type topics --entity-name orders "
        "--add-config retention.ms=3600000,segment.bytes=104857600\n"
        "  odradek configs alter --entity-type topics --entity-name orders --delete-config retention.ms",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=("describe", "alter"), help="what to do")
    p.add_argument("--entity-type", required=True, choices=sorted(ENTITY_TYPES), help="topics or brokers")
    p.add_argument("--entity-name", metavar="NAME",
                   help="topic name or broker id (describe: all topics/brokers when omitted)")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K2=V2]",
                   help="configs to set, comma-separated (a list value in brackets: k=[a,b]); repeatable")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K2]",
                   help="configs to remove (they return to their defaults), comma-separated; repeatable")
    p.add_argument("--overrides-only", action="store_true",
                   help="describe: only configs that are not at their default")
    p.add_argument("--all", action="store_true",
                   help="describe: every config (the default; accepted for kafka-configs.sh users)")
    _client.add_common_options(p)
    p.set_defaults(func=lambda args: _client.run_verb("configs", run, args))


def run(args: argparse.Namespace) -> int:
    kind = ENTITY_TYPES[args.entity_type]
    if args.action == "describe" and (args.add_config or args.delete_config):
        raise CliError("--add-config/--delete-config are for alter", "use `odradek configs alter ...`", exit_code=2)
    if args.action == "alter":
        if not args.entity_name:
            raise CliError("configs alter needs --entity-name", exit_code=2)
        if not args.add_config and not args.delete_config:
            raise CliError("configs alter needs --add-config and/or --delete-config",
                           "e.g. --add-config retention.ms=3600000", exit_code=2)
    admin = _client.make_client(AdminClient, _client.base_config(args))
    md = _client.check_reachable(admin, args)
    if args.action == "describe":
        return describe(admin, args, kind, md)
    return alter(admin, args, kind, md)


def _check_entity(args: argparse.Namespace, kind: str, md: Any, name: str) -> None:
    if kind == "topic" and name not in md.topics:
        raise CliError(f"topic '{name}' does not exist",
                       "list the topics with `odradek topics list`", code=KafkaError.UNKNOWN_TOPIC_OR_PART)
    if kind == "broker":
        if not name.isdigit():
            raise CliError(f"--entity-name {name!r} is not a broker id", "broker ids are integers, e.g. 1",
                           exit_code=2)
        if int(name) not in md.brokers:
            ids = ", ".join(str(b) for b in sorted(md.brokers))
            raise CliError(f"broker {name} is not in the cluster", f"the brokers are: {ids}")


def describe(admin: AdminClient, args: argparse.Namespace, kind: str, md: Any) -> int:
    if args.entity_name:
        _check_entity(args, kind, md, args.entity_name)
        names = [args.entity_name]
    elif kind == "topic":
        names = sorted(md.topics)
    else:
        names = [str(b) for b in sorted(md.brokers)]
    resources = [ConfigResource(kind, n) for n in names]
    if not resources:
        return 0
    futures = admin.describe_configs(resources, request_timeout=_client.timeout_s(args))
    status = 0
    for res in resources:
        try:
            entries = _client.wait(futures[res], args, f"describe the configs of {kind} '{res.name}'",
                                   subject=res.name if kind == "topic" else None)
        except CliError as e:
            _client.report("configs", e)
            status = 1
            continue
        shown = [e for _, e in sorted(entries.items()) if not (args.overrides_only and e.is_default)]
        label = "Non-default configs" if args.overrides_only else "Configs"
        print(f"{label} for {kind} {res.name} are:")
        for e in shown:
            print("  " + format_entry(e))
    return status


def format_entry(e: ConfigEntry) -> str:
    value = "null" if e.value is None else e.value
    return (f"{e.name}={value} source={source_name(e)} default={str(bool(e.is_default)).lower()} "
            f"sensitive={str(bool(e.is_sensitive)).lower()} read-only={str(bool(e.is_read_only)).lower()}")


def source_name(e: ConfigEntry) -> str:
    raw = getattr(e.source, "value", e.source)
    try:
        return ConfigSource(raw).name
    except ValueError:
        return f"UNKNOWN({raw})"


def alter(admin: AdminClient, args: argparse.Namespace, kind: str, md: Any) -> int:
    name = args.entity_name
    _check_entity(args, kind, md, name)
    to_set = _client.parse_pairs(args.add_config, "--add-config")
    to_delete = [k for item in args.delete_config for k in (s.strip() for s in item.split(",")) if k]
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise CliError(f"{', '.join(both)} is both added and deleted", exit_code=2)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in to_set.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in to_delete]
    res = ConfigResource(kind, name, incremental_configs=entries)
    futures = admin.incremental_alter_configs([res], request_timeout=_client.timeout_s(args))
    _client.wait(futures[res], args, f"alter the configs of {kind} '{name}'",
                 subject=name if kind == "topic" else None)
    print(f"Completed updating config for {kind} {name}.")
    return 0
