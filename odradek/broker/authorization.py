"""The authorize step, as request handlers ask it: may this request's principal, from its client's address, do an
operation on a resource? And which operations may it do there (the ``*_authorized_operations`` fields)?

``allowed(ctx, AclOperation.READ, ResourceType.TOPIC, "orders")`` is the whole question. With no authorizer
configured (``broker.authorizer`` is None) everything is allowed and nothing else runs, as in Kafka's
``AuthHelper``; otherwise the answer is the broker's ``security/authorizer.py`` decision for ``ctx.user`` from the
host of ``ctx.peer``, cached there until the ACLs change.

Above that question, one narrow helper per kind of check that Kafka's ``KafkaApis`` makes, so each handler reads
as the table in docs/security.md ("## Authorization"): ``denied_topics`` (the topics of a request the principal
may not do an operation on, each asked once whatever its number of partitions), ``group_error`` /
``transactional_id_error`` / ``cluster_error`` (NONE or the error Kafka answers), ``config_resource_error``,
``idempotent_producer_error`` (KIP-679's rule), ``transactional_produce_error``, and the ``*_operations``
fields. Handlers on the produce/fetch path test ``ctx.broker.authorizer is not None`` once per request before
asking anything, so a broker without an authorizer pays one attribute test.

Invariants (Kafka's):
- A check on a resource comes before any answer that reveals whether the resource exists: a topic the principal
  may not use is TOPIC_AUTHORIZATION_FAILED whether it exists or not.
- Errors: TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED and
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, where Kafka puts them (the handlers place them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from odradek.protocol.batch import HEADER_SIZE, TRANSACTIONAL_BIT, parse_header
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    USER_TYPE,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

if TYPE_CHECKING:
    from odradek.broker.context import RequestContext

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TRANSACTIONAL_ID_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
OPERATIONS_UNSET = -(2**31)  # the schemas' default of ``*_authorized_operations``: not asked for

# Config resource types (Kafka's ConfigResource.Type) and what guards each.
_CONFIG_TOPIC = 2
_CONFIG_BROKER = 4
_CONFIG_BROKER_LOGGER = 8
_NOTHING_DENIED: frozenset[str] = frozenset()


def host_of(peer: str) -> str:
    """The client's IP address of an ``ip:port`` peer (``[::1]:5000`` and ``::1:5000`` give ``::1``)."""
    host, sep, _ = peer.rpartition(":")
    return (host if sep else peer).strip("[]")


def allowed(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """May the request's principal do ``operation`` on the resource? Always, without an authorizer."""
    authorizer = ctx.broker.authorizer
    return authorizer is None or authorizer.authorize(ctx.user, host_of(ctx.peer), operation, resource_type, name)


def allowed_on_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """The bitfield of the operations the principal may do on the resource, among those Kafka reports for its type;
    all of them without an authorizer (Kafka's ``AuthHelper.authorizedOperations``)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type])
    return authorizer.authorized_operations(ctx.user, host_of(ctx.peer), resource_type, name)


# -- many resources of one request -----------------------------------------------------------------------------


def denied_names(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                 names: Iterable[str]) -> frozenset[str]:
    """Those of ``names`` the principal may not do ``operation`` on, each name asked once (Kafka's
    ``filterByAuthorized``); none without an authorizer."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return _NOTHING_DENIED
    user, host = ctx.user, host_of(ctx.peer)
    return frozenset(n for n in set(names) if not authorizer.authorize(user, host, operation, resource_type, n))


def denied_topics(ctx: RequestContext, operation: AclOperation, names: Iterable[str]) -> frozenset[str]:
    return denied_names(ctx, operation, ResourceType.TOPIC, names)


def denied_topics_unless_cluster(ctx: RequestContext, cluster_operation: AclOperation, operation: AclOperation,
                                 names: Iterable[str]) -> frozenset[str]:
    """No topic when the principal may do ``cluster_operation`` on the cluster (CLUSTER_ACTION for a follower's
    OffsetForLeaderEpoch, CREATE for topic creation), else those it may not do ``operation`` on."""
    if allowed_on_cluster(ctx, cluster_operation):
        return _NOTHING_DENIED
    return denied_topics(ctx, operation, names)


# -- one resource: NONE or Kafka's error -----------------------------------------------------------------------


def group_error(ctx: RequestContext, operation: AclOperation, group_id: str) -> ErrorCode:
    return ErrorCode.NONE if allowed(ctx, operation, ResourceType.GROUP, group_id) else GROUP_DENIED


def transactional_id_error(ctx: RequestContext, operation: AclOperation, transactional_id: str | None) -> ErrorCode:
    if transactional_id is not None and allowed(ctx, operation, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.NONE
    return TRANSACTIONAL_ID_DENIED


def cluster_error(ctx: RequestContext, *operations: AclOperation) -> ErrorCode:
    """NONE if the principal may do any of ``operations`` on the cluster, else CLUSTER_AUTHORIZATION_FAILED."""
    return ErrorCode.NONE if any(allowed_on_cluster(ctx, op) for op in operations) else CLUSTER_DENIED


def config_resource_error(ctx: RequestContext, operation: AclOperation, config_resource_type: int,
                          name: str) -> ErrorCode:
    """DescribeConfigs (DESCRIBE_CONFIGS) and AlterConfigs/IncrementalAlterConfigs (ALTER_CONFIGS): a topic's
    configs are guarded by the topic, a broker's (and its loggers') by the cluster. Other resource types pass here:
    the handler refuses them itself."""
    if config_resource_type == _CONFIG_TOPIC:
        return ErrorCode.NONE if allowed(ctx, operation, ResourceType.TOPIC, name) else TOPIC_DENIED
    if config_resource_type in (_CONFIG_BROKER, _CONFIG_BROKER_LOGGER):
        return cluster_error(ctx, operation)
    return ErrorCode.NONE


# -- producers -------------------------------------------------------------------------------------------------


def transactional_produce_error(ctx: RequestContext, transactional_id: str | None,
                                record_sets: Iterable[bytes | bytearray | memoryview | None]) -> ErrorCode:
    """Produce: when the first batch of any partition is transactional, the request needs WRITE on its
    transactional id (none given: denied), else the whole request is TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    (Kafka's ``RequestUtils.hasTransactionalRecords``). Only called with an authorizer."""
    for records in record_sets:
        if records is not None and len(records) >= HEADER_SIZE and \
                parse_header(records, 0).attributes & TRANSACTIONAL_BIT:
            return transactional_id_error(ctx, AclOperation.WRITE, transactional_id)
    return ErrorCode.NONE


def idempotent_producer_error(ctx: RequestContext) -> ErrorCode:
    """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic
    (KIP-679, Kafka 3.0+), else CLUSTER_AUTHORIZATION_FAILED."""
    if allowed_on_cluster(ctx, AclOperation.IDEMPOTENT_WRITE) or \
            allowed_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return ErrorCode.NONE
    return CLUSTER_DENIED


def allowed_by_resource_type(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    """May the principal do ``operation`` on at least one resource of the type (Kafka's
    ``Authorizer.authorizeByResourceType``)? A super user (or anyone, with ``allow.everyone.if.no.acl.found`` and no
    ACLs in the way) may; a wildcard DENY refuses; else some ALLOW of the principal (or ``User:*``) from its host
    must name a literal or prefixed pattern that no DENY of the same kind covers."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    user, host = ctx.user, host_of(ctx.peer)
    if authorizer.authorize(user, host, operation, resource_type, "hardcode"):
        return True
    principal = f"{USER_TYPE}:{user}"
    denied: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
    permitted: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
    for binding in authorizer.acls(AclBindingFilter(resource_type=resource_type)):
        entry, pattern = binding.entry, binding.pattern
        if entry.host not in (host, WILDCARD_HOST) or entry.principal not in (principal, WILDCARD_PRINCIPAL) \
                or entry.operation not in (operation, AclOperation.ALL):
            continue
        if entry.permission == AclPermissionType.DENY:
            if pattern.pattern_type == PatternType.LITERAL and pattern.name == WILDCARD_RESOURCE:
                return False
            denied[pattern.pattern_type].add(pattern.name)
        elif entry.permission == AclPermissionType.ALLOW:
            if pattern.pattern_type == PatternType.LITERAL and pattern.name == WILDCARD_RESOURCE:
                return True
            permitted[pattern.pattern_type].add(pattern.name)
    for pattern_type, names in permitted.items():
        for name in names:
            if pattern_type == PatternType.LITERAL and name in denied[PatternType.LITERAL]:
                continue
            if not any(name[:i] in denied[PatternType.PREFIXED] for i in range(1, len(name) + 1)):
                return True
    return False


# -- the *_authorized_operations fields ------------------------------------------------------------------------


def operations_if(ctx: RequestContext, requested: bool, resource_type: ResourceType, name: str) -> int:
    """A topic's or group's ``*_authorized_operations``: the bitfield when the client asked for it, else unset."""
    return authorized_operations(ctx, resource_type, name) if requested else OPERATIONS_UNSET


def cluster_operations_if(ctx: RequestContext, requested: bool) -> int:
    """``cluster_authorized_operations`` (Metadata v8-10, DescribeCluster): unset unless asked for; 0 without
    DESCRIBE on the cluster, as Kafka answers."""
    if not requested:
        return OPERATIONS_UNSET
    if not allowed_on_cluster(ctx, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
