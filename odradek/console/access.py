"""Who may do what through the console, when the broker has an ACL authorizer (``authorizer.class.name``).

The console's user is the one the HTTP listener authenticated (HTTP Basic against the broker's SASL users, kept on
the request by ``odradek.http``), else ``ANONYMOUS``, as a Kafka connection without authentication is; the host is
the HTTP client's address. Each page and action needs the ACL that the Kafka API doing the same thing needs, so the
console never lets a user do more than their Kafka clients could:

============================  =====================================================================
topic list, group list        DESCRIBE on each topic / group (the others are left out, as Metadata and
                              ListGroups leave them out)
topic page                    DESCRIBE on the topic
messages, live tail           READ on the topic (Fetch)
create topic                  CREATE on the cluster or on the topic (CreateTopics)
delete topic                  DELETE on the topic (DeleteTopics)
alter configs                 ALTER_CONFIGS on the topic (IncrementalAlterConfigs)
add partitions                ALTER on the topic (CreatePartitions)
produce                       WRITE on the topic (Produce)
group page, reset dry run     DESCRIBE on the group (DescribeGroups, OffsetFetch)
reset (execute)               READ on the group and on each topic (OffsetCommit)
abort a hanging transaction   ALTER on the cluster (WriteTxnMarkers from an operator)
set / remove a client quota   ALTER_CONFIGS on the cluster (AlterClientQuotas)
add / remove an ACL           ALTER on the cluster (CreateAcls, DeleteAcls)
============================  =====================================================================

Without an authorizer everything is allowed (as for Kafka requests). The overview, transactions, quotas and ACLs
pages are cluster-wide views: with an authorizer they need DESCRIBE on the cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from odradek.console.errors import ConsoleError
from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

ANONYMOUS = "ANONYMOUS"


class AccessDenied(ConsoleError):
    """The user may not do this (answered 403)."""


def _user_key() -> Any:
    try:
        from odradek.http.app import USER  # the HTTP listener's request key, when it is there
    except ImportError:
        return None
    return USER


def user(request: web.Request) -> str:
    key = _user_key()
    found = request.get(key) if key is not None else None
    return found if isinstance(found, str) and found else ANONYMOUS


def allowed(request: web.Request, b: Broker, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    authorizer = b.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(user(request), request.remote or "", operation, resource_type, name)


def require(request: web.Request, b: Broker, operation: AclOperation, resource_type: ResourceType, name: str) -> None:
    """``AccessDenied`` unless the user may do ``operation`` on the resource."""
    if not allowed(request, b, operation, resource_type, name):
        what = "the cluster" if resource_type is ResourceType.CLUSTER else f"{resource_type.name.lower()} '{name}'"
        raise AccessDenied(f"User:{user(request)} may not {operation.name} {what}")


def require_cluster(request: web.Request, b: Broker, operation: AclOperation) -> None:
    require(request, b, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def require_create(request: web.Request, b: Broker, topic: str) -> None:
    if not allowed(request, b, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
        require(request, b, AclOperation.CREATE, ResourceType.TOPIC, topic)
