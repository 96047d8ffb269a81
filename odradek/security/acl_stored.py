"""The stored form of ACLs, as Kafka's ZooKeeper-mode authorizer writes it (``kafka.zk.ZkData``: ``ZkAclStore``,
``ZkAclChangeStore``, ``AclEntry``). Pure: paths and bytes, no I/O.

- A resource's ACLs are one znode: literal patterns at ``/kafka-acl/<ResourceType>/<name>``, prefixed ones at
  ``/kafka-acl-extended/prefixed/<ResourceType>/<name>`` (``Topic``, ``Group``, ``Cluster``, ``TransactionalId``,
  ``DelegationToken``, ``User``), holding
  ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}``.
  A resource left without ACLs has no znode.
- A change is announced by a sequential znode ``acl_changes_<10 digits>``: under ``/kafka-acl-changes`` for a
  literal pattern, holding ``TOPIC:orders`` (Kafka's ``ResourceType.toString`` and the name); under
  ``/kafka-acl-extended-changes`` for a prefixed one, holding
  ``{"version":1,"resourceType":"TOPIC","name":"ord","patternType":"PREFIXED"}``.
- The single-node metadata file keeps the same entries per resource: ``{"resourceType":"Topic","patternType":
  "LITERAL","name":"orders","acls":[...]}`` (``to_document``/``from_document``).

Invariants: entries are written sorted (the same set always gives the same bytes); readers take names in any case
(as Kafka's ``SecurityUtils`` does); every decoder raises ``AclDataError`` naming what is wrong, never returning part
of a znode.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from odradek.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_principal,
)

ACL_PATH = "/kafka-acl"
ACL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_ACL_PATH = "/kafka-acl-extended"
PREFIXED_ACL_PATH = f"{EXTENDED_ACL_PATH}/prefixed"
EXTENDED_ACL_CHANGES_PATH = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
VERSION = 1
STORE_PATHS = (ACL_PATH, ACL_CHANGES_PATH, PREFIXED_ACL_PATH, EXTENDED_ACL_CHANGES_PATH)
STORED_TYPES = tuple(t for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY))

Entries = frozenset[AccessControlEntry]


class AclDataError(ValueError):
    """Stored ACL data that is not in Kafka's format."""


def root_path(pattern_type: PatternType) -> str:
    if pattern_type == PatternType.LITERAL:
        return ACL_PATH
    if pattern_type == PatternType.PREFIXED:
        return PREFIXED_ACL_PATH
    raise ValueError(f"{pattern_type.name} patterns are not stored")


def changes_path(pattern_type: PatternType) -> str:
    return ACL_CHANGES_PATH if pattern_type == PatternType.LITERAL else EXTENDED_ACL_CHANGES_PATH


def resource_path(pattern: ResourcePattern) -> str:
    return f"{root_path(pattern.pattern_type)}/{pattern.resource_type.kafka_name}/{pattern.name}"


def change_sequence(node_name: str) -> int | None:
    """The sequence number of an ``acl_changes_0000000042`` node; None for another name."""
    digits = node_name[len(CHANGE_PREFIX):]
    return int(digits) if node_name.startswith(CHANGE_PREFIX) and digits.isdigit() else None


# -- entries ---------------------------------------------------------------------------------------------------


def entry_to_json(entry: AccessControlEntry) -> dict[str, str]:
    return {"principal": entry.principal, "permissionType": entry.permission.kafka_name,
            "operation": entry.operation.kafka_name, "host": entry.host}


def entry_from_json(item: Any) -> AccessControlEntry:
    if not isinstance(item, dict) or not all(isinstance(item.get(k), str)
                                             for k in ("principal", "permissionType", "operation", "host")):
        raise AclDataError(f"an ACL must have the string fields principal, permissionType, operation and host: "
                           f"{item!r}")
    try:
        parse_principal(item["principal"])
        return AccessControlEntry(item["principal"], item["host"], AclOperation.parse(item["operation"]),
                                  AclPermissionType.parse(item["permissionType"]))
    except ValueError as e:
        raise AclDataError(f"ACL {item!r}: {e}") from None


def entries_to_json(entries: Iterable[AccessControlEntry]) -> list[dict[str, str]]:
    return [entry_to_json(e) for e in sorted(entries)]


def entries_from_json(items: Any) -> Entries:
    if not isinstance(items, list):
        raise AclDataError(f"'acls' must be a list, got {items!r}")
    return frozenset(entry_from_json(i) for i in items)


# -- znodes ----------------------------------------------------------------------------------------------------


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    return json.dumps({"version": VERSION, "acls": entries_to_json(entries)}, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def decode_acls(path: str, data: bytes | None) -> Entries:
    """A resource znode's entries; no data means none (Kafka's ``AclEntry.fromBytes``)."""
    if not data:
        return frozenset()
    try:
        obj = json.loads(data.decode("utf-8"))
        if not isinstance(obj, dict):
            raise AclDataError("expected a JSON object")
        return entries_from_json(obj.get("acls", []))
    except (UnicodeDecodeError, ValueError) as e:
        raise AclDataError(f"znode {path}: {e}") from None


def pattern_of_path(root: str, resource_type: str, name: str) -> ResourcePattern:
    """The pattern of the znode ``<root>/<resource_type>/<name>``."""
    pattern_type = PatternType.LITERAL if root == ACL_PATH else PatternType.PREFIXED
    try:
        return ResourcePattern(ResourceType.parse(resource_type), name, pattern_type)
    except ValueError as e:
        raise AclDataError(f"znode {root}/{resource_type}/{name}: {e}") from None


def encode_change(pattern: ResourcePattern) -> bytes:
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return json.dumps({"version": VERSION, "resourceType": pattern.resource_type.name, "name": pattern.name,
                       "patternType": pattern.pattern_type.name}, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def decode_change(path: str, data: bytes | None) -> ResourcePattern:
    """The pattern a change notification names (a literal one's ``TYPE:name``, an extended one's JSON)."""
    try:
        text = (data or b"").decode("utf-8")
        if path.startswith(ACL_CHANGES_PATH + "/"):
            kind, sep, name = text.partition(":")
            if not sep:
                raise AclDataError(f"expected ResourceType:ResourceName, got {text!r}")
            return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)
        obj = json.loads(text)
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            raise AclDataError(f"expected an ACL change event, got {text!r}")
        pattern_type = PatternType.parse(str(obj.get("patternType")))
        if pattern_type != PatternType.PREFIXED:
            raise AclDataError(f"unsupported pattern type {pattern_type.name}")
        return ResourcePattern(ResourceType.parse(str(obj.get("resourceType"))), obj["name"],
                               pattern_type)
    except (UnicodeDecodeError, ValueError) as e:
        raise AclDataError(f"ACL change notification {path}: {e}") from None


# -- the single-node metadata file -----------------------------------------------------------------------------


def to_document(acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> list[dict[str, Any]]:
    """Every resource with ACLs, sorted, as the metadata file keeps them."""
    return [{"resourceType": p.resource_type.kafka_name, "patternType": p.pattern_type.name, "name": p.name,
             "acls": entries_to_json(entries)}
            for p, entries in sorted(acls.items()) if entries]


def from_document(items: Any) -> dict[ResourcePattern, Entries]:
    if not isinstance(items, list):
        raise AclDataError(f"the stored ACLs must be a list, got {type(items).__name__}")
    out: dict[ResourcePattern, Entries] = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise AclDataError(f"a stored ACL resource needs resourceType, patternType, name and acls: {item!r}")
        try:
            pattern = ResourcePattern(ResourceType.parse(str(item.get("resourceType"))), item["name"],
                                      PatternType.parse(str(item.get("patternType"))))
        except ValueError as e:
            raise AclDataError(f"stored ACL resource {item!r}: {e}") from None
        if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclDataError(f"stored ACL resource {item!r}: pattern type must be LITERAL or PREFIXED")
        entries = entries_from_json(item.get("acls"))
        if entries:
            out[pattern] = out.get(pattern, frozenset()) | entries
    return out
