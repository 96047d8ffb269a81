"""DescribeCluster (v0-2): the cluster id, the live brokers (with racks) and the controller.

On a single node the answer is always this broker; in a ZooKeeper cluster, the registered brokers and the
broker holding ``/controller``. As a Kafka broker does, it
serves the broker endpoint type only: a request for controllers (``endpoint_type`` 2, which
clients send to ``bootstrap.controllers``) gets ``MISMATCHED_ENDPOINT_TYPE``, an unknown endpoint
type ``UNSUPPORTED_ENDPOINT_TYPE`` (both ``INVALID_REQUEST`` in v0, which cannot ask for either),
with Kafka's messages.

Invariants:
- ``controller_id`` is a live broker (Kafka brokers report a live broker, never a KRaft controller, since
  clients cannot reach controllers through a broker listener); -1 while no controller is elected.
- ``cluster_authorized_operations`` is Kafka's "not requested" value (INT32 min) unless the
  client asks for it; then the cluster operations the principal may do (every one without an authorizer), or 0
  without DESCRIBE on the cluster. As in Kafka, DescribeCluster itself needs no ACL.
- The broker's host and port are the advertised ones, the same as Metadata returns.
- Nobody is fenced: ``include_fenced_brokers`` changes nothing.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.authorization import cluster_operations_if
from odradek.broker.context import RequestContext
from odradek.broker.handlers.metadata import AUTHORIZED_OPERATIONS_UNSET, broker_entries, controller_id
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import SUPPORTED_OPERATIONS, ResourceType

UNKNOWN_ENDPOINT = 0
BROKER_ENDPOINT = 1
CONTROLLER_ENDPOINT = 2
_ENDPOINT_NAMES = {BROKER_ENDPOINT: "BROKER", CONTROLLER_ENDPOINT: "CONTROLLER"}
# Every operation Kafka reports on the CLUSTER: what a principal may do there without an authorizer.
ALL_CLUSTER_OPERATIONS = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.CLUSTER])


async def handle_describe_cluster(ctx: RequestContext, request: Any) -> dict[str, Any]:
    requested = getattr(request, "endpoint_type", BROKER_ENDPOINT)
    if requested != BROKER_ENDPOINT:
        if requested in _ENDPOINT_NAMES:
            code = ErrorCode.MISMATCHED_ENDPOINT_TYPE
            message = (f"The request was sent to an endpoint of type BROKER, "
                       f"but we wanted an endpoint of type {_ENDPOINT_NAMES[requested]}")
        else:
            code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
            message = f"Unsupported endpoint type {requested}"
        if ctx.version == 0:
            code = ErrorCode.INVALID_REQUEST
        return {"throttle_time": 0, "error_code": code, "error_message": message,
                "endpoint_type": BROKER_ENDPOINT, "cluster_id": "", "controller_id": -1, "brokers": [],
                "cluster_authorized_operations": AUTHORIZED_OPERATIONS_UNSET}
    b = ctx.broker
    brokers = [{"broker_id": e["node_id"], "host": e["host"], "port": e["port"], "rack": e["rack"],
                "is_fenced": False} for e in broker_entries(ctx)]
    ops = cluster_operations_if(ctx, bool(request.include_cluster_authorized_operations))
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": BROKER_ENDPOINT,
        "cluster_id": b.registry.cluster_id,
        "controller_id": controller_id(ctx),
        "brokers": brokers,
        "cluster_authorized_operations": ops,
    }
