"""``odradek acls``: add, remove and list ACLs, in ``kafka-acls.sh --bootstrap-server``'s habits, through
confluent-kafka's AdminClient (``create_acls``, ``delete_acls``, ``describe_acls``).

    odradek acls --add --allow-principal User:alice --operation Read --topic orders
    odradek acls --add --allow-principal User:bob --consumer --topic orders --group billing
    odradek acls --add --allow-principal User:carol --producer --topic orders --transactional-id tx
    odradek acls --add --deny-principal User:mallory --deny-host 10.0.0.9 --operation All --topic orders
    odradek acls --remove --allow-principal User:alice --operation Read --topic orders --force
    odradek acls --list [--topic orders] [--resource-pattern-type match] [--principal User:alice]

Invariants (kafka-acls' rules):
- Exactly one of ``--add``, ``--remove``, ``--list``; ``--add`` and ``--remove`` need a resource
  (``--topic``, ``--group``, ``--cluster``, ``--transactional-id``; confluent-kafka has no delegation-token or
  user resource types, nor their token operations, so neither has an option here);
  ``--add`` needs a principal and a LITERAL or PREFIXED ``--resource-pattern-type`` (the default LITERAL).
- Hosts default to ``*`` for the principals given; the operation defaults to All.
- ``--producer``: WRITE, DESCRIBE and CREATE on the topics, WRITE and DESCRIBE on the transactional ids,
  IDEMPOTENT_WRITE on the cluster with ``--idempotent``; ``--consumer``: READ and DESCRIBE on the topics, READ on
  the groups (a group is required). Each operation is checked against what the resource type supports.
- ``--remove`` asks for confirmation per resource unless ``--force``; without an answer of ``y`` nothing is removed.
- Usage errors exit with code 2 before anything is sent; a broker's refusal is an error naming its Kafka error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from odradek.cli import _client
from odradek.cli._client import CliError

CLUSTER_NAME = "kafka-cluster"
OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
              if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
PATTERN_TYPES = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED,
                 "match": ResourcePatternType.MATCH, "any": ResourcePatternType.ANY}
# What each resource type supports (kafka-acls' AclEntry.supportedOperations, plus ALL).
SUPPORTED = {
    ResourceType.TOPIC: {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS",
                         "ALTER_CONFIGS"},
    ResourceType.GROUP: {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"},
    ResourceType.BROKER: {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
                          "ALTER", "DESCRIBE"},
    ResourceType.TRANSACTIONAL_ID: {"DESCRIBE", "WRITE"},
}
_CLUSTER = ResourceType.BROKER  # confluent-kafka's name of Kafka's CLUSTER resource type (code 4)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "acls", help="add, remove and list ACLs (like kafka-acls.sh)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="examples:\n" + "\n".join(line for line in (__doc__ or "").splitlines() if "odradek acls --" in line),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    r = p.add_argument_group("resources")
    r.add_argument("--topic", action="append", default=[], metavar="NAME", help="a topic ('*': every topic)")
    r.add_argument("--group", action="append", default=[], metavar="NAME", help="a consumer group")
    r.add_argument("--cluster", action="store_true", help="the cluster")
    r.add_argument("--transactional-id", action="append", default=[], metavar="ID", help="a transactional id")
    r.add_argument("--resource-pattern-type", default=None, choices=sorted(PATTERN_TYPES), type=str.lower,
                   help="literal (default), prefixed; for --list and --remove also match and any")
    e = p.add_argument_group("entries")
    e.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                   help="principal the ACL allows, e.g. User:alice (User:* for everyone)")
    e.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME", help="principal denied")
    e.add_argument("--allow-host", action="append", default=[], metavar="IP", help="host allowed from (default *)")
    e.add_argument("--deny-host", action="append", default=[], metavar="IP", help="host denied from (default *)")
    e.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens, All (default All)")
    e.add_argument("--producer", action="store_true", help="the ACLs a producer needs on the --topic (and "
                   "--transactional-id) resources")
    e.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    e.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs on the --topic and --group")
    e.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                   help="--list: only the ACLs of these principals")
    p.add_argument("--force", action="store_true", help="--remove: do not ask for confirmation")
    _client.add_common_options(p)
    p.set_defaults(func=lambda args: _client.run_verb("acls", run, args))


def _usage(message: str, hint: str | None = None) -> CliError:
    return CliError(message, hint, exit_code=2)


def _principal(text: str) -> str:
    kind, sep, _ = text.partition(":")
    if not sep or not kind:
        raise _usage(f"principal {text!r} is not TYPE:NAME", "e.g. User:alice")
    return text


def _operation(text: str) -> AclOperation:
    op = OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if op is None:
        raise _usage(f"unknown operation {text!r}", f"use one of {', '.join(o.name for o in OPERATIONS.values())}")
    return op


def resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    """The resources named on the command line, in kafka-acls' order."""
    out = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    if args.cluster or (args.producer and args.idempotent):
        out.append((_CLUSTER, CLUSTER_NAME))
    return out + [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]


def operations_by_resource(args: argparse.Namespace) -> dict[tuple[ResourceType, str], list[AclOperation]]:
    """Each resource's operations: ``--producer``/``--consumer``'s expansions, else ``--operation`` (All)."""
    if args.producer or args.consumer:
        if args.operation:
            raise _usage("--operation cannot be combined with --producer or --consumer")
        if args.consumer and not args.group:
            raise _usage("with --consumer you must specify a --group")
        ops: dict[tuple[ResourceType, str], list[AclOperation]] = {}
        for kind, name in resources(args):
            wanted: list[AclOperation] = []
            if args.producer:
                wanted += {ResourceType.TOPIC: [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE],
                           ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
                           _CLUSTER: [AclOperation.IDEMPOTENT_WRITE]}.get(kind, [])
            if args.consumer:
                wanted += {ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
                           ResourceType.GROUP: [AclOperation.READ]}.get(kind, [])
            if wanted:
                ops[(kind, name)] = list(dict.fromkeys(wanted))
        return ops
    chosen = [_operation(o) for o in args.operation] or [AclOperation.ALL]
    for kind, _ in resources(args):
        bad = [o.name for o in chosen if o != AclOperation.ALL and o.name not in SUPPORTED[kind]]
        if bad:
            raise _usage(f"{', '.join(bad)} is not a valid operation for resource type {_type_name(kind)}",
                         f"valid operations: {', '.join(sorted(SUPPORTED[kind]))}, ALL")
    return {res: chosen for res in resources(args)}


def entries(args: argparse.Namespace, operations: Iterable[AclOperation]
            ) -> list[tuple[str, str, AclOperation, AclPermissionType]]:
    out = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        if hosts and not principals:
            raise _usage("--allow-host/--deny-host need the --allow-principal/--deny-principal they are for")
        for principal in principals:
            out += [(_principal(principal), host, op, permission) for host in (hosts or ["*"]) for op in operations]
    return out


def run(args: argparse.Namespace) -> int:
    pattern_name = args.resource_pattern_type or ("any" if args.list else "literal")
    pattern = PATTERN_TYPES[pattern_name]
    if args.add and pattern not in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED):
        raise _usage(f"a --resource-pattern-type of {pattern_name!r} is not valid when adding ACLs",
                     "use literal or prefixed")
    if (args.add or args.remove) and not resources(args):
        raise _usage("you must specify a resource: --topic, --group, --cluster or --transactional-id")
    if args.add and not (args.allow_principal or args.deny_principal):
        raise _usage("you must specify --allow-principal or --deny-principal when adding ACLs")
    if args.list and (args.producer or args.consumer or args.allow_principal or args.deny_principal):
        raise _usage("--list takes only resources, --resource-pattern-type and --principal")
    admin = _client.make_client(AdminClient, _client.base_config(args))
    if args.list:
        return list_acls(admin, args, pattern)
    by_resource = operations_by_resource(args)
    if args.add:
        return add(admin, args, pattern, by_resource)
    return remove(admin, args, pattern, by_resource)


def add(admin: AdminClient, args: argparse.Namespace, pattern: ResourcePatternType,
        by_resource: dict[tuple[ResourceType, str], list[AclOperation]]) -> int:
    for (kind, name), ops in by_resource.items():
        ptype = _pattern_of(kind, pattern)
        bindings = [AclBinding(kind, name, ptype, *entry) for entry in entries(args, ops)]
        print(f"Adding ACLs for resource `{_pattern_text(kind, name, ptype)}`: ")
        print("".join(f" \t{_entry_text(b)} \n" for b in bindings))
        for binding, future in admin.create_acls(bindings, request_timeout=_client.timeout_s(args)).items():
            _client.wait(future, args, f"add ACL {_entry_text(binding)}")
    return list_acls(admin, args, pattern, named=list(by_resource))


def remove(admin: AdminClient, args: argparse.Namespace, pattern: ResourcePatternType,
           by_resource: dict[tuple[ResourceType, str], list[AclOperation]]) -> int:
    for (kind, name), ops in by_resource.items():
        chosen = entries(args, ops) if (args.allow_principal or args.deny_principal) else \
            [(None, None, AclOperation.ANY, AclPermissionType.ANY)]
        ptype = _pattern_of(kind, pattern)
        filters = [AclBindingFilter(kind, name, ptype, *entry) for entry in chosen]  # type: ignore[arg-type]
        what = "all ACLs" if chosen[0][0] is None else \
            "ACLs: \n" + "".join(f" \t{_entry_text(f)} \n" for f in filters)
        if not args.force and not _confirm(f"Are you sure you want to remove {what} from resource filter "
                                           f"`{_pattern_text(kind, name, ptype)}`? (y/n)"):
            continue
        for _filter, future in admin.delete_acls(filters, request_timeout=_client.timeout_s(args)).items():
            _client.wait(future, args, f"remove ACLs of {_pattern_text(kind, name, ptype)}")
    return list_acls(admin, args, pattern, named=list(by_resource))


def list_acls(admin: AdminClient, args: argparse.Namespace, pattern: ResourcePatternType,
              named: list[tuple[ResourceType, str]] | None = None) -> int:
    targets: list[tuple[ResourceType, str | None]] = list(named if named is not None else resources(args))
    filters = [AclBindingFilter(kind, name, _pattern_of(kind, pattern), None, None, AclOperation.ANY,
                                AclPermissionType.ANY)
               for kind, name in targets or [(ResourceType.ANY, None)]]
    principals = set(args.principal)
    for f in filters:
        found = _client.wait(admin.describe_acls(f, request_timeout=_client.timeout_s(args)), args, "list ACLs")
        grouped: dict[tuple[ResourceType, str, ResourcePatternType], list[AclBinding]] = {}
        for b in found:
            if not principals or b.principal in principals:
                grouped.setdefault((b.restype, b.name, b.resource_pattern_type), []).append(b)
        for (kind, name, ptype), bindings in grouped.items():
            print(f"Current ACLs for resource `{_pattern_text(kind, name, ptype)}`: ")
            print("".join(f" \t{_entry_text(b)} \n" for b in bindings))
    return 0


def _pattern_of(kind: ResourceType, pattern: ResourcePatternType) -> ResourcePatternType:
    """The cluster's ACLs are always LITERAL ones (kafka-acls ignores a prefixed pattern type for it)."""
    return ResourcePatternType.LITERAL if kind == _CLUSTER and pattern == ResourcePatternType.PREFIXED else pattern


def _confirm(question: str) -> bool:
    print(question)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _type_name(kind: ResourceType) -> str:
    return "CLUSTER" if kind == _CLUSTER else kind.name


def _pattern_text(kind: ResourceType, name: str, pattern: ResourcePatternType) -> str:
    return f"ResourcePattern(resourceType={_type_name(kind)}, name={name}, patternType={pattern.name})"


def _entry_text(b: AclBinding | AclBindingFilter) -> str:
    return f"(principal={b.principal}, host={b.host}, operation={b.operation.name}, " \
           f"permissionType={b.permission_type.name})"
