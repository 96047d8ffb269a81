"""Kafka's ACL authorizer decisions (``AclAuthorizer`` in ZooKeeper mode, ``StandardAuthorizer`` in KRaft; both
decide alike): may principal P, connected from host H, do operation O on the resource (type T, name N)? Pure: the
ACLs are handed in (``replace_all`` at start, ``replace_resource`` after each change); nothing here reads or
writes them.

The rules, in order:
1. A super user (``super.users``: ``User:alice;User:bob``) may do everything.
2. The ACLs that apply to the resource are those stored for the literal pattern N, for the literal wildcard ``*``
   of type T, and for every prefixed pattern N starts with. If there are none at all (whatever their principal,
   host, operation or permission), the answer is ``allow.everyone.if.no.acl.found`` (default false).
3. Otherwise an ACL matches when its principal is P or ``User:*`` and its host is H or ``*``. A matching DENY whose
   operation is O or ALL refuses, whatever else matches (DENY wins).
4. Else a matching ALLOW whose operation is O or ALL permits; so does an ALLOW of READ, WRITE, DELETE or ALTER
   when O is DESCRIBE, and an ALLOW of ALTER_CONFIGS when O is DESCRIBE_CONFIGS (implied operations; a DENY implies
   nothing). Else the answer is no.

Invariants:
- Decisions are cached per (user, host, operation, resource type, name); every change of the ACLs drops the whole
  cache, so no decision outlives the ACLs it came from. The cache is bounded (dropped whole when full).
- A decision costs a few dictionary lookups: the literal name, the wildcard, and one lookup per distinct length
  of the prefixed patterns stored for the type.
- Principals are ``User:<name>`` (Odradek's only principal type); hosts are IP addresses as text.
- Fed and read on the event loop only (not thread-safe).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from odradek.security.acl import (
    MATCH_ALL,
    SUPPORTED_OPERATIONS,
    USER_TYPE,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_principal,
)

AUTHORIZER_CLASSES = ("kafka.security.authorizer.AclAuthorizer",
                      "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
CACHE_LIMIT = 100_000

_ALLOWS = AclPermissionType.ALLOW
_DENIES = AclPermissionType.DENY
# Operations whose ALLOW also allows another: DESCRIBE and DESCRIBE_CONFIGS (Kafka's implied operations).
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER, AclOperation.ALL}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                                              AclOperation.ALL}),
}

Entries = frozenset[AccessControlEntry]


# -- config ----------------------------------------------------------------------------------------------------


def parse_authorizer_class_name(value: str) -> str:
    """``authorizer.class.name``: empty (no authorizer) or one of Kafka's two ACL authorizers."""
    value = value.strip()
    if value and value not in AUTHORIZER_CLASSES:
        raise ValueError(f"the only authorizers are {' and '.join(AUTHORIZER_CLASSES)} (or empty for none)")
    return value


def parse_super_users(value: str) -> str:
    """``super.users``: principals separated by ';' (``User:alice;User:bob``); checked, kept as written."""
    for item in value.split(";"):
        if item.strip():
            parse_principal(item.strip())
    return value.strip()


def from_config(values: Mapping[str, Any]) -> Authorizer | None:
    """The broker's authorizer from its config values, or None when ``authorizer.class.name`` is empty."""
    if not values.get("authorizer.class.name"):
        return None
    supers = [s.strip() for s in (values.get("super.users") or "").split(";") if s.strip()]
    return Authorizer(supers, allow_everyone_if_no_acl_found=bool(values.get("allow.everyone.if.no.acl.found")))


# -- decisions -------------------------------------------------------------------------------------------------


def decide(entries: Iterable[AccessControlEntry], principal: str, host: str, operation: AclOperation,
           allow_if_none: bool) -> bool:
    """Rules 2-4 of the module docstring over the ACLs that apply to one resource."""
    found = allowed = False
    implied = IMPLIED_BY.get(operation)
    for e in entries:
        found = True
        if (e.principal != principal and e.principal != WILDCARD_PRINCIPAL) \
                or (e.host != host and e.host != WILDCARD_HOST):
            continue
        if e.permission == _DENIES:
            if e.operation == operation or e.operation == AclOperation.ALL:
                return False
        elif e.permission == _ALLOWS and not allowed:
            allowed = e.operation == operation or e.operation == AclOperation.ALL or \
                (implied is not None and e.operation in implied)
    return allowed if found else allow_if_none


class Authorizer:
    """The cluster's ACLs in memory and the decisions over them (see the module docstring)."""

    def __init__(self, super_users: Iterable[str] = (), *, allow_everyone_if_no_acl_found: bool = False,
                 cache_limit: int = CACHE_LIMIT) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, Entries] = {}
        self._literal: dict[ResourceType, dict[str, Entries]] = {}
        self._prefixed: dict[ResourceType, dict[str, Entries]] = {}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._cache: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        self._cache_limit = cache_limit

    # -- decisions ---------------------------------------------------------------------------------------

    def authorize(self, user: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """May ``User:<user>`` connected from ``host`` do ``operation`` on the resource ``resource_type``/``name``?"""
        key = (user, host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(user, host, operation, resource_type, name)
            if len(self._cache) >= self._cache_limit:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def _decide(self, user: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> bool:
        principal = f"{USER_TYPE}:{user}"
        if principal in self.super_users:
            return True
        return decide(self.applicable(resource_type, name), principal, host, operation,
                      self.allow_everyone_if_no_acl_found)

    def applicable(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The ACLs that apply to a resource: its literal name's, the type's wildcard's, its prefixes'."""
        out: list[AccessControlEntry] = []
        literal = self._literal.get(resource_type)
        if literal:
            out.extend(literal.get(name, ()))
            if name != WILDCARD_RESOURCE:
                out.extend(literal.get(WILDCARD_RESOURCE, ()))
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for length in self._prefix_lengths[resource_type]:
                if length > len(name):
                    break
                out.extend(prefixed.get(name[:length], ()))
        return out

    def authorized_operations(self, user: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The ``*_authorized_operations`` bitfield of a resource: bit ``op`` set for each operation Kafka reports
        for its type (``SUPPORTED_OPERATIONS``) that the user may do (Kafka's ``AuthHelper.authorizedOperations``)."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(user, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    # -- the ACLs ----------------------------------------------------------------------------------------

    def acls(self, selector: AclBindingFilter = MATCH_ALL) -> list[AclBinding]:
        """The bindings ``selector`` matches, sorted by pattern then entry."""
        exact = selector.exact_pattern()
        patterns = [exact] if exact is not None else self._acls
        return [AclBinding(p, e) for p in sorted(patterns) if selector.matches_pattern(p)
                for e in sorted(self._acls.get(p, ())) if selector.matches_entry(e)]

    def entries(self, pattern: ResourcePattern) -> Entries:
        return self._acls.get(pattern, frozenset())

    def patterns(self) -> list[ResourcePattern]:
        return sorted(self._acls)

    def replace_resource(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Take the ACLs now stored for ``pattern`` (none: it has no ACLs left); drops the decision cache."""
        self._set(pattern, frozenset(entries))
        self._reindex(pattern.resource_type)

    def replace_all(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        """Take every resource's ACLs; resources not named have none afterwards. Drops the decision cache."""
        self._acls.clear()
        self._literal.clear()
        self._prefixed.clear()
        self._prefix_lengths.clear()
        for pattern, entries in acls.items():
            self._set(pattern, frozenset(entries))
        for resource_type in ResourceType:
            self._reindex(resource_type)

    def _set(self, pattern: ResourcePattern, entries: Entries) -> None:
        if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(f"only LITERAL and PREFIXED patterns hold ACLs, not {pattern.pattern_type.name}")
        index = self._literal if pattern.pattern_type == PatternType.LITERAL else self._prefixed
        if entries:
            self._acls[pattern] = entries
            index.setdefault(pattern.resource_type, {})[pattern.name] = entries
        else:
            self._acls.pop(pattern, None)
            index.get(pattern.resource_type, {}).pop(pattern.name, None)

    def _reindex(self, resource_type: ResourceType) -> None:
        self._prefix_lengths[resource_type] = tuple(sorted({len(n) for n in self._prefixed.get(resource_type, {})}))
        self._cache.clear()
