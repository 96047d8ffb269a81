"""``odradek configs describe|alter``: read and change topic and broker configs and client quotas, as
``kafka-configs.sh`` does.

Topics and brokers (``--entity-type topics|brokers``, through confluent-kafka's AdminClient): describe prints
every config of the entity (``--overrides-only``: only those not at their default)::

    Configs for topic t are:
      retention.ms=1000 source=DYNAMIC_TOPIC_CONFIG default=false sensitive=false read-only=false

alter applies ``--add-config k=v,k2=[a,b]`` (SET) and ``--delete-config k,k2`` (DELETE, back to the
default) in one IncrementalAlterConfigs request, so other overrides stay as they are.

Client quotas (``--entity-type users|clients|ips``, through kafka-python: confluent-kafka has no client-quota
API) use DescribeClientQuotas (api 48) and AlterClientQuotas (api 49), sent to any one broker. An entity is a
user, a client-id, a (user, client-id) pair (``--entity-type users ... --entity-type clients ...``) or an ip;
each ``--entity-type`` takes the ``--entity-name NAME`` or ``--entity-default`` that follows it. describe
prints one line per entity, in kafka-configs' words::

    Quota configs for user-principal 'alice', the default client-id are producer_byte_rate=1048576.0

alter sets (``--add-config``) and removes (``--delete-config``) quota keys of one entity in one request and
prints ``Completed updating config for client-id 'app'.``

A user's SCRAM credentials (``--add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'``, ``--delete-config
SCRAM-SHA-512``) and their lines in describe are ``configs_scram.py``'s.

Invariants:
- ``--entity-type``/``--entity-name``/``--entity-default`` are paired in command-line order: a name or
  ``--entity-default`` belongs to the ``--entity-type`` before it. With a single ``--entity-type`` the order
  does not matter (``--entity-name t --entity-type topics`` works, as it always has).
- Only ``--entity-type users --entity-type clients`` may name two types; topics take one ``--entity-name``,
  brokers one ``--entity-name`` (a broker id) or ``--entity-default`` (the cluster-wide dynamic defaults, the
  BROKER resource ``""``: ``configs_broker_default.py``).
- Quota describe filters with ``strict`` set, as kafka-configs does (``ClientQuotaFilter.containsOnly``): only
  entities of exactly the given types are listed. A type with a name matches that name (EXACT), with
  ``--entity-default`` its default entity (DEFAULT, sent as a null name), with neither every entity of the
  type (match type 2, which includes the default entity on Kafka's brokers).
- Quota keys are checked here before anything is sent (users/clients: producer_byte_rate, consumer_byte_rate,
  request_percentage, controller_mutation_rate; ips: connection_creation_rate) and values must be decimal
  numbers; whether a value is acceptable (positive, whole for byte rates) is the broker's to say, and its
  per-entity error message is shown as it sent it.
- Deleting a quota key that is not set is refused before the alteration is sent (kafka-configs' "Invalid
  config(s)"), so a typo is not silently a no-op.
- Quota values print as Java's ``Double.toString`` prints them (``1048576.0``, ``1.048576E7``), as
  kafka-configs does, so output that parses kafka-configs' parses ours.
- Failures are ``CliError``s: exit code 2 for bad usage (unknown type combination, unknown key, bad value),
  1 for an unreachable broker or a broker error.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import kafka.errors as kerrors
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kafka.version import __version__ as KAFKA_PYTHON_VERSION

from odradek.cli import _client, _kafka_python, configs_broker_default, configs_scram
from odradek.cli._client import CliError
from odradek.cli._kafka_python import Admin

# --entity-type word → the resource kind (topics, brokers) or the quota entity type on the wire.
ENTITY_TYPES = {"topics": "topic", "topic": "topic", "brokers": "broker", "broker": "broker",
                "users": "user", "user": "user", "clients": "client-id", "client": "client-id",
                "ips": "ip", "ip": "ip"}
USER, CLIENT_ID, IP = "user", "client-id", "ip"
QUOTA_KINDS = (USER, CLIENT_ID, IP)  # also the order kafka-configs names an entity's components in
CLIENT_QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
IP_QUOTA_KEYS = ("connection_creation_rate",)
# How kafka-configs names a quota entity component in its output.
LABELS = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip"}
# DescribeClientQuotas match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "configs",
        help="describe and alter topic and broker configs and client quotas (like kafka-configs.sh)",
        description="Describe and alter the configs of topics and brokers, and the client quotas of users,\n"
                    "client-ids, (user, client-id) pairs and IP addresses.\n\n"
                    "Each --entity-type takes the --entity-name or --entity-default that follows it; give\n"
                    "--entity-type twice (users, then clients) for the quota of one user's client-id.\n\n"
                    "Quota keys of users and clients: producer_byte_rate, consumer_byte_rate (bytes/s),\n"
                    "request_percentage (% of the broker's request handling), controller_mutation_rate\n"
                    "(partitions created or deleted per second); of ips: connection_creation_rate\n"
                    "(connections per second).\n\n"
                    "SCRAM credentials of a user: SCRAM-SHA-256=[iterations=N,password=P] and SCRAM-SHA-512=[...]\n"
                    "(iterations 4096..16384, 4096 when omitted); the password is salted here, never sent.",
        epilog="examples:\n"
        "  odradek configs describe --entity-type topics --entity-name orders\n"
        "  odradek configs alter --entity-type topics --entity-name orders "
        "--add-config retention.ms=3600000,segment.bytes=104857600\n"
        "  odradek configs alter --entity-type topics --entity-name orders --delete-config retention.ms\n"
        "  odradek configs alter --entity-type brokers --entity-default --add-config log.retention.ms=86400000\n"
        "  odradek configs describe --entity-type brokers --entity-default   # the cluster-wide broker defaults\n"
        "\n"
        "  odradek configs describe --entity-type clients                  # every client-id with quotas\n"
        "  odradek configs describe --entity-type users --entity-name alice --entity-type clients\n"
        "  odradek configs alter --entity-type clients --entity-name app "
        "--add-config producer_byte_rate=1048576,consumer_byte_rate=2097152\n"
        "  odradek configs alter --entity-type users --entity-name alice --entity-type clients --entity-default "
        "--add-config request_percentage=50\n"
        "  odradek configs alter --entity-type clients --entity-default --delete-config producer_byte_rate\n"
        "  odradek configs alter --entity-type ips --entity-name 127.0.0.1 --add-config connection_creation_rate=10\n"
        "\n"
        "  odradek configs alter --entity-type users --entity-name alice "
        "--add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'\n"
        "  odradek configs alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512\n"
        "  odradek configs describe --entity-type users --entity-name alice   # quotas and SCRAM credentials",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=("describe", "alter"), help="what to do")
    p.add_argument("--entity-type", dest="entity_parts", action=_InOrder, default=[], required=True,
                   choices=sorted(ENTITY_TYPES), metavar="TYPE",
                   help="topics, brokers, users, clients or ips; `--entity-type users --entity-type clients` "
                        "names a (user, client-id) pair")
    p.add_argument("--entity-name", dest="entity_parts", action=_InOrder, default=[], metavar="NAME",
                   help="topic name, broker id, user principal, client-id or IP address, for the --entity-type "
                        "before it (describe: every entity of the type when omitted)")
    p.add_argument("--entity-default", dest="entity_parts", action=_InOrder, nargs=0, default=[],
                   help="the default entity of the --entity-type before it: for brokers the cluster-wide dynamic "
                        "defaults every broker applies; for users, clients and ips the quota of every user, "
                        "client-id or IP without one of its own")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K2=V2]",
                   help="configs to set, comma-separated (a list value in brackets: k=[a,b]); repeatable")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K2]",
                   help="configs to remove (they return to their defaults), comma-separated; repeatable")
    p.add_argument("--overrides-only", action="store_true",
                   help="describe: only configs that are not at their default (quotas: always)")
    p.add_argument("--all", action="store_true",
                   help="describe: every config (the default; accepted for kafka-configs.sh users)")
    _client.add_common_options(p)
    p.set_defaults(func=lambda args: _client.run_verb("configs", run, args))


class _InOrder(argparse.Action):
    """Appends ``(option, value)`` to ``entity_parts``, keeping the order of --entity-type, --entity-name and
    --entity-default on the command line (a name belongs to the type before it)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parts = list(getattr(namespace, self.dest, None) or [])
        parts.append((self.option_strings[0], None if self.nargs == 0 else values))
        setattr(namespace, self.dest, parts)


@dataclass
class EntityArg:
    """One ``--entity-type`` with its name: ``name`` set (a named entity), ``default`` (the default entity), or
    neither (describe: every entity of the type)."""

    option: str  # the --entity-type word as typed, e.g. "clients"
    kind: str  # "topic", "broker", or the quota entity type: "user", "client-id", "ip"
    name: str | None = None
    default: bool = False
    named_by: str = field(default="", compare=False)  # the option that named it, for messages

    @property
    def named(self) -> bool:
        return self.name is not None or self.default

    def cli(self) -> str:
        """The options that name it again, for hints."""
        tail = f" --entity-name {shlex.quote(self.name)}" if self.name is not None else (
            " --entity-default" if self.default else "")
        return f"--entity-type {self.option}{tail}"


def _naming(option: str, value: str | None) -> str:
    return "--entity-default" if option == "--entity-default" else f"--entity-name {value!r}"


def _give_name(e: EntityArg, option: str, value: str | None) -> None:
    if e.named:
        raise CliError(f"--entity-type {e.option} is given two names: {e.named_by} and {_naming(option, value)}",
                       "each --entity-type takes one --entity-name or --entity-default, the one that follows it",
                       exit_code=2)
    e.named_by = _naming(option, value)
    if option == "--entity-default":
        e.default = True
    else:
        e.name = value


def pair_entities(parts: Sequence[tuple[str, str | None]]) -> list[EntityArg]:
    """The entities named by the ordered ``(option, value)`` parts, checked (``CliError``, exit code 2)."""
    entities: list[EntityArg] = []
    loose: list[tuple[str, str | None]] = []  # names before any --entity-type
    for option, value in parts:
        if option == "--entity-type":
            assert value is not None
            entities.append(EntityArg(value, ENTITY_TYPES[value]))
        elif entities:
            _give_name(entities[-1], option, value)
        else:
            loose.append((option, value))
    if not entities:
        raise CliError("configs needs --entity-type", "e.g. --entity-type topics --entity-name orders", exit_code=2)
    if loose and len(entities) > 1:
        raise CliError(f"{_naming(*loose[0])} comes before any --entity-type, so it is not clear which type it names",
                       "put each --entity-name/--entity-default after its --entity-type, e.g. --entity-type users "
                       "--entity-name alice --entity-type clients --entity-name app", exit_code=2)
    for option, value in loose:  # a single type: the order does not matter, as it never has
        _give_name(entities[0], option, value)
    check_entities(entities)
    return entities


def check_entities(entities: Sequence[EntityArg]) -> None:
    kinds = [e.kind for e in entities]
    if len(entities) > 1 and sorted(kinds) != [CLIENT_ID, USER]:
        given = " ".join(f"--entity-type {e.option}" for e in entities)
        raise CliError(f"{given}: only users and clients can be given together",
                       "`--entity-type users --entity-name alice --entity-type clients --entity-name app` names "
                       "alice's quota for client-id app; other types take one --entity-type", exit_code=2)
    for e in entities:
        if e.kind not in QUOTA_KINDS:
            if e.default and e.kind != "broker":
                raise CliError(f"--entity-default is for brokers, users, clients and ips, not --entity-type "
                               f"{e.option}", f"name the {e.kind} with --entity-name", exit_code=2)
            continue
        if e.name is not None and not e.name:
            raise CliError(f"--entity-type {e.option} has an empty --entity-name",
                           "for the default entity (the quota of everyone without one of their own) use "
                           "--entity-default", exit_code=2)
        if e.kind == IP and e.name is not None:
            try:
                ipaddress.ip_address(e.name)
            except ValueError:
                raise CliError(f"--entity-name {e.name!r} is not an IP address",
                               "ips are named by address, e.g. 127.0.0.1 or ::1", exit_code=2) from None


def run(args: argparse.Namespace) -> int:
    entities = pair_entities(args.entity_parts)
    if args.action == "describe" and (args.add_config or args.delete_config):
        raise CliError("--add-config/--delete-config are for alter", "use `odradek configs alter ...`", exit_code=2)
    if entities[0].kind in QUOTA_KINDS:
        return run_quotas(args, entities)
    if entities[0].kind == "broker" and entities[0].default:
        return run_broker_default(args)
    args.entity_type, args.entity_name = entities[0].option, entities[0].name
    kind = ENTITY_TYPES[args.entity_type]
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


def config_changes(args: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    """(configs to set, configs to delete) of ``--add-config``/``--delete-config``; ``CliError`` for a key in both."""
    to_set = _client.parse_pairs(args.add_config, "--add-config")
    to_delete = _client.comma_words(args.delete_config)
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise CliError(f"{', '.join(both)} is both added and deleted", exit_code=2)
    return to_set, to_delete


def run_broker_default(args: argparse.Namespace) -> int:
    """describe/alter of the cluster-wide broker defaults (``configs_broker_default``)."""
    changes: tuple[dict[str, str], list[str]] = ({}, [])
    if args.action == "alter":
        changes = config_changes(args)
        if not changes[0] and not changes[1]:
            raise CliError("configs alter needs --add-config and/or --delete-config",
                           "e.g. --add-config log.retention.ms=3600000", exit_code=2)
    _kafka_python.quiet_kafka_python()
    admin = Admin(args, "configs", error_from)
    try:
        if args.action == "describe":
            what = "describe the default configs of the cluster's brokers"
            response = send(admin, what, configs_broker_default.describe_request())
            for result in response.results:
                if result.error_code:
                    raise CliError(f"cannot {what}: {broker_error(result.error_code, result.error_message)}",
                                   broker_hint(result.error_code), code=result.error_code)
                for line in configs_broker_default.describe_lines(result, args.overrides_only):
                    print(line)
            return 0
        what = "alter the default configs of the cluster's brokers"
        response = send(admin, what, configs_broker_default.alter_request(*changes))
        if not response.responses:
            raise CliError(f"cannot {what}: the broker's answer has no result for the resource", "see the broker's log")
        for r in response.responses:
            if r.error_code:
                raise CliError(f"cannot {what}: {broker_error(r.error_code, r.error_message)}",
                               broker_hint(r.error_code), code=r.error_code)
        print(configs_broker_default.ALTERED)
        return 0
    finally:
        admin.close()


# -- client quotas -----------------------------------------------------------------------------------


def run_quotas(args: argparse.Namespace, entities: list[EntityArg]) -> int:
    changes: tuple[dict[str, float], list[str]] = ({}, [])
    if args.action == "alter":
        unnamed = [e for e in entities if not e.named]
        if unnamed:
            raise CliError(f"configs alter needs an --entity-name or --entity-default after --entity-type "
                           f"{unnamed[0].option}",
                           f"e.g. --entity-type {unnamed[0].option} --entity-default for the default "
                           f"{LABELS[unnamed[0].kind]}", exit_code=2)
        scram = configs_scram.scram_changes([e.kind for e in entities], entities[0].default,
                                            _client.parse_pairs(args.add_config, "--add-config"),
                                            _client.comma_words(args.delete_config))
        if scram is not None:  # a named user alone (checked): its credentials, not its quotas
            return configs_scram.alter(args, str(entities[0].name), scram, entity_text([(USER, entities[0].name)]))
        changes = quota_changes(entities, args.add_config, args.delete_config)
    _kafka_python.quiet_kafka_python()
    admin = Admin(args, "configs", error_from)
    try:
        if args.action == "describe":
            status = describe_quotas(admin, entities)
            if [e.kind for e in entities] == [USER] and not entities[0].default:  # as kafka-configs: users alone
                configs_scram.describe(args, entities[0].name)
            return status
        return alter_quotas(admin, entities, *changes)
    finally:
        admin.close()


def valid_keys(entities: Sequence[EntityArg]) -> tuple[str, ...]:
    return IP_QUOTA_KEYS if entities[0].kind == IP else CLIENT_QUOTA_KEYS


def quota_changes(entities: Sequence[EntityArg], add: Sequence[str],
                  delete: Sequence[str]) -> tuple[dict[str, float], list[str]]:
    """(keys to set with their values, keys to remove) from ``--add-config``/``--delete-config``; ``CliError``
    (exit code 2) for no change, an unknown key, a value that is not a number, or a key both set and removed."""
    raw = _client.parse_pairs(add, "--add-config")
    to_delete = list(dict.fromkeys(_client.comma_words(delete)))
    if not raw and not to_delete:
        raise CliError("configs alter needs --add-config and/or --delete-config",
                       f"e.g. --add-config {valid_keys(entities)[0]}=1048576", exit_code=2)
    keys = valid_keys(entities)
    unknown = [k for k in dict.fromkeys([*raw, *to_delete]) if k not in keys]
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        what = "is not a quota config" if len(unknown) == 1 else "are not quota configs"
        types = " and ".join(e.option for e in entities)
        other = ("users and clients take " + ", ".join(CLIENT_QUOTA_KEYS) if entities[0].kind == IP
                 else "ips take " + ", ".join(IP_QUOTA_KEYS))
        raise CliError(f"{names} {what} of {types}; the valid ones are: {', '.join(keys)}",
                       f"{other}; topic and broker configs go with --entity-type topics or brokers", exit_code=2)
    to_set = {k: parse_number(k, v) for k, v in raw.items()}
    both = [k for k in to_set if k in to_delete]
    if both:
        raise CliError(f"{', '.join(both)} is both added and deleted", exit_code=2)
    return to_set, to_delete


def parse_number(key: str, text: str) -> float:
    """A quota value: a decimal number (``1048576``, ``0.5``, ``1e6``); ``CliError`` (exit code 2) otherwise."""
    if not _NUMBER.fullmatch(text.strip()):
        raise CliError(f"--add-config {key}={text!r}: the value is not a number",
                       f"quota values are numbers, e.g. {key}={'50' if key == 'request_percentage' else '1048576'}",
                       exit_code=2)
    return float(text)


def java_double(x: float) -> str:
    """``x`` as Java's ``Double.toString`` writes it (what kafka-configs prints): ``1048576.0``, ``0.5``,
    ``1.048576E7``, ``1.0E-4``; the shortest digits that read back as ``x``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    if 1e-3 <= abs(x) < 1e7:
        return repr(x)  # Python's repr has no exponent in this range, and the same shortest digits
    _, digits, exp = Decimal(repr(abs(x))).as_tuple()
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    exponent = len(digits) - 1 + int(exp)
    return f"{'-' if x < 0 else ''}{ds[0]}.{ds[1:] or '0'}E{exponent}"


def entity_text(components: Sequence[tuple[str, str | None]]) -> str:
    """kafka-configs' words for an entity: ``user-principal 'alice', the default client-id``."""
    ordered = sorted(components, key=lambda c: QUOTA_KINDS.index(c[0]) if c[0] in QUOTA_KINDS else len(QUOTA_KINDS))
    return ", ".join(f"the default {LABELS.get(t, t)}" if n is None else f"{LABELS.get(t, t)} '{n}'"
                     for t, n in ordered)


def filter_text(entities: Sequence[EntityArg]) -> str:
    """What a describe filter asks for, for messages: ``user-principal 'alice', every client-id``."""
    parts = [(e.kind, e.name) for e in entities if e.named]
    words = [entity_text(parts)] if parts else []
    words += [f"every {LABELS[e.kind]}" for e in entities if not e.named]
    return ", ".join(words)


def format_quota_lines(entries: Sequence[Any] | None) -> list[str]:
    """One kafka-configs line per DescribeClientQuotas entry (``entity``: entity_type/entity_name, ``values``:
    key/value), sorted by entity with each type's default first; the values in the broker's order."""
    def sort_key(entry: Any) -> tuple[tuple[int, int, str], ...]:
        names = {c.entity_type: c.entity_name for c in entry.entity}
        return tuple((0, 0, "") if t not in names else (1, 0, "") if names[t] is None else (1, 1, names[t])
                     for t in QUOTA_KINDS)

    lines = []
    for entry in sorted(entries or [], key=sort_key):
        who = entity_text([(c.entity_type, c.entity_name) for c in entry.entity])
        values = ", ".join(f"{v.key}={java_double(v.value)}" for v in entry.values)
        lines.append(f"Quota configs for {who} are {values}")
    return lines


def describe_request(entities: Sequence[EntityArg]) -> DescribeClientQuotasRequest:
    components = [
        DescribeClientQuotasRequest.ComponentData(
            entity_type=e.kind,
            match_type=MATCH_DEFAULT if e.default else MATCH_EXACT if e.name is not None else MATCH_ANY,
            match=e.name)
        for e in entities
    ]
    return DescribeClientQuotasRequest(components=components, strict=True)


def alter_request(entities: Sequence[EntityArg], to_set: dict[str, float],
                  to_delete: Sequence[str]) -> AlterClientQuotasRequest:
    entry = AlterClientQuotasRequest.EntryData
    ops = [entry.OpData(key=k, value=v, remove=False) for k, v in to_set.items()]
    ops += [entry.OpData(key=k, value=0.0, remove=True) for k in to_delete]
    entity = [entry.EntityData(entity_type=e.kind, entity_name=None if e.default else e.name) for e in entities]
    return AlterClientQuotasRequest(entries=[entry(entity=entity, ops=ops)], validate_only=False)


def send(admin: Admin, what: str, request: Any) -> Any:
    """The response to ``request`` from one broker (the least loaded; any broker answers the client-quota APIs).

    KafkaAdminClient (kafka-python 3) has no client-quota method, so this goes through its connection manager
    (``_manager.send``, which picks the node and the highest version both sides support, inside
    ``_manager.run`` on the client's IO thread); the call is bounded by ``Admin.call``.
    """
    async def exchange(client: Any) -> Any:
        return await client._manager.send(request)

    def call(client: Any) -> Any:
        manager = getattr(client, "_manager", None)
        if manager is None or not hasattr(manager, "send") or not hasattr(manager, "run"):
            raise CliError(f"cannot {what}: kafka-python {KAFKA_PYTHON_VERSION} has no connection manager to send "
                           "DescribeClientQuotas/AlterClientQuotas through",
                           "install the kafka-python version this project pins (3.0.x)")
        return manager.run(exchange, client)

    return admin.call(what, call)


def broker_error(code: int, message: str | None) -> str:
    """A broker's error as shown to the user: its own message (else the code's description) and the code's name."""
    cls = kerrors.for_code(code)
    name = getattr(cls, "message", None) or f"error code {code}"
    text = message or getattr(cls, "description", None) or name
    return f"{text.rstrip('.')} ({name})"


def broker_hint(code: int) -> str | None:
    if code == kerrors.ClusterAuthorizationFailedError.errno:
        return ("describing quotas needs DESCRIBE_CONFIGS, altering them ALTER_CONFIGS, on the cluster resource "
                "for the client's principal")
    if code == kerrors.UnsupportedVersionError.errno:
        return "the broker does not support this quota entity type or key"
    return None


def fetch_quotas(admin: Admin, entities: Sequence[EntityArg]) -> list[Any]:
    """The DescribeClientQuotas entries matching ``entities`` (a strict filter); ``CliError`` on the broker's
    error."""
    what = f"describe the quotas of {filter_text(entities)}"
    response = send(admin, what, describe_request(entities))
    if response.error_code:
        raise CliError(f"cannot {what}: {broker_error(response.error_code, response.error_message)}",
                       broker_hint(response.error_code), code=response.error_code)
    return list(response.entries or [])


def describe_quotas(admin: Admin, entities: Sequence[EntityArg]) -> int:
    for line in format_quota_lines(fetch_quotas(admin, entities)):
        print(line)
    return 0


def alter_quotas(admin: Admin, entities: Sequence[EntityArg], to_set: dict[str, float],
                 to_delete: Sequence[str]) -> int:
    who = entity_text([(e.kind, None if e.default else e.name) for e in entities])
    if to_delete:
        current = {v.key for entry in fetch_quotas(admin, entities) for v in entry.values}
        missing = [k for k in to_delete if k not in current]
        if missing:
            again = " ".join(e.cli() for e in entities)
            raise CliError(f"cannot delete {', '.join(missing)}: not set for {who}",
                           f"`odradek configs describe {again}` shows the quota configs that are set")
    what = f"alter the quotas of {who}"
    response = send(admin, what, alter_request(entities, to_set, to_delete))
    if not response.entries:
        raise CliError(f"cannot {what}: the broker's AlterClientQuotas answer has no result for the entity",
                       "see the broker's log")
    for entry in response.entries:
        if entry.error_code:
            raise CliError(f"cannot {what}: {broker_error(entry.error_code, entry.error_message)}",
                           broker_hint(entry.error_code), code=entry.error_code)
    print(f"Completed updating config for {who}.")
    return 0


_APIS = {"describe": "DescribeClientQuotas (api 48)", "alter": "AlterClientQuotas (api 49)"}


def error_from(e: BaseException, args: argparse.Namespace, what: str, subject: str | None = None) -> CliError:
    """A ``CliError`` for a failed kafka-python call ``what``: an unsupported API is named, the rest is
    ``generic_error``'s (unreachable broker, or the broker's error)."""
    if isinstance(e, CliError):
        return e
    if isinstance(e, kerrors.UnsupportedVersionError):  # IncompatibleBrokerVersion too: not in ApiVersions
        api = _APIS.get(what.split(" ", 1)[0], "this request")
        return CliError(f"cannot {what}: the broker at {args.bootstrap_server} does not support {api}",
                        "client quotas need a broker with Kafka's client-quota APIs (KIP-546, Kafka 2.6 or later)",
                        code=getattr(e, "errno", None))
    return _kafka_python.generic_error(e, args, what)
