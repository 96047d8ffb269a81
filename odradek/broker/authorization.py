"""The authorize step, as request handlers ask it: may this request's principal, from its client's address, do an
operation on a resource? And which operations may it do there (the ``*_authorized_operations`` fields)?

``allowed(ctx, AclOperation.READ, ResourceType.TOPIC, "orders")`` is the whole question. With no authorizer
configured (``broker.authorizer`` is None) everything is allowed and nothing else runs, as in Kafka's
``AuthHelper``; otherwise the answer is the broker's ``security/authorizer.py`` decision for ``ctx.user`` from the
host of ``ctx.peer``, cached there until the ACLs change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

if TYPE_CHECKING:
    from odradek.broker.context import RequestContext


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
