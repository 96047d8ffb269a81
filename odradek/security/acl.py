"""Kafka's ACL model: resource types, pattern types, operations and permissions with their wire codes, ACL bindings
and the filters that select them (``org.apache.kafka.common.acl`` and ``...common.resource``). Pure: no I/O.

An ACL binding is a resource pattern (type, name, LITERAL or PREFIXED) and an access control entry (principal
``Type:name``, host, operation, ALLOW or DENY). A filter may leave any part open: a null name, principal or host,
resource type ANY, pattern type ANY or MATCH, operation ANY, permission ANY.

Invariants (Kafka's):
- Codes are Kafka's and never renumbered; the names used in ZooKeeper and by the tools (``Topic``, ``Read``,
  ``Allow``, ``TransactionalId``) are Kafka's ``SecurityUtils`` names, read back case-insensitively.
- A binding never holds ANY, MATCH or UNKNOWN (``binding_problem`` says what is wrong with one built from a
  request); a filter may hold ANY and MATCH, and holds UNKNOWN only to be refused.
- Filter matching is Kafka's ``AclBindingFilter.matches``: pattern type ANY matches every stored pattern whose name
  equals the filter's name exactly; MATCH with a name matches the literal pattern of that name, the literal
  wildcard ``*`` and every prefixed pattern the name starts with; a null name matches any name. Entry fields match
  by equality unless null/ANY.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Self

WILDCARD_RESOURCE = "*"  # a literal resource name that names every resource of its type
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the only name of the CLUSTER resource
USER_TYPE = "User"  # the principal type of every Odradek connection


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class _Named(enum.IntEnum):
    """A Kafka enum: wire code, and a ``CamelCase`` name as Kafka's ``SecurityUtils`` writes it."""

    @property
    def kafka_name(self) -> str:
        return _camel(self.name)

    @classmethod
    def parse(cls, text: str) -> Self:
        """From ``Read``, ``READ``, ``read``, ``ClusterAction`` or ``cluster_action``; ValueError otherwise."""
        wanted = text.strip().replace("_", "").replace("-", "").upper()
        for member in cls:
            if member.name.replace("_", "") == wanted and member.name not in ("UNKNOWN", "ANY"):
                return member
        raise ValueError(f"unknown {cls.__name__} {text!r}")

    @classmethod
    def from_code(cls, code: int) -> Self:
        """The member of a wire code; UNKNOWN for a code Kafka does not define."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The operations Kafka reports in the ``*_authorized_operations`` fields (AclEntry.supportedOperations).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


def parse_principal(text: str) -> tuple[str, str]:
    """``User:alice`` -> ("User", "alice"); ValueError unless it is ``Type:name`` with a non-empty type."""
    kind, sep, name = text.partition(":")
    if not sep or not kind:
        raise ValueError(f"expected a string in format principalType:principalName but got {text!r}")
    return kind, name


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " \
               f"patternType={self.pattern_type.name})"


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, " \
               f"permissionType={self.permission.name})"


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


def binding_problem(binding: AclBinding) -> str | None:
    """Why ``binding`` (built from a CreateAcls request) cannot be stored, or None if it can (Kafka's checks: no
    ANY/MATCH/UNKNOWN element, a non-empty name without '/', ``kafka-cluster`` for the CLUSTER, a
    ``Type:name`` principal)."""
    p, e = binding.pattern, binding.entry
    if 0 in (p.resource_type, p.pattern_type, e.operation, e.permission):  # UNKNOWN
        return "ACL binding contains unknown elements"
    if p.resource_type == ResourceType.ANY:
        return "resourceType must not be ANY"
    if p.pattern_type in (PatternType.ANY, PatternType.MATCH):
        return f"patternType must not be {p.pattern_type.name}"
    if e.operation == AclOperation.ANY:
        return "operation must not be ANY"
    if e.permission == AclPermissionType.ANY:
        return "permissionType must not be ANY"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not p.name:
        return "Invalid empty resource name"
    if "/" in p.name:
        return f"ACL binding contains invalid resource name: {p.name}"
    try:
        parse_principal(e.principal)
    except ValueError as exc:
        return f"Invalid principal: {exc}"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects bindings; None and ANY leave a field open (see the module docstring)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:  # MATCH
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)  # MATCH against PREFIXED

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission == AclPermissionType.ANY or self.permission == entry.permission))

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def unknown_element(self) -> str | None:
        """What is UNKNOWN in this filter (Kafka refuses such filters), or None."""
        for what, value in (("resource type", self.resource_type), ("pattern type", self.pattern_type),
                            ("operation", self.operation), ("permission type", self.permission)):
            if value == 0:
                return f"the filter's {what} is UNKNOWN"
        return None

    def exact_pattern(self) -> ResourcePattern | None:
        """The one stored pattern this filter can match, when it names one exactly (Kafka's
        ``ResourcePatternFilter.matchesAtMostOne`` with a concrete pattern type); None otherwise."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or self.name is None \
                or self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return None
        return ResourcePattern(self.resource_type, self.name, self.pattern_type)


MATCH_ALL = AclBindingFilter()  # every binding
