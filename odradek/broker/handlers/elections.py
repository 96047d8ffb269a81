"""ElectLeaders (v0-2): preferred or unclean leader election on request, as Kafka's controller does it.

Admin clients send it to the controller; another broker answers ``NOT_CONTROLLER``. A single node is its own
controller and every partition's only replica: ``ELECTION_NOT_NEEDED`` for each partition it has. v0 has
no election type and means PREFERRED. ``topic_partitions`` null means every partition. Per partition, as
Kafka: ``ELECTION_NOT_NEEDED`` (preferred: already led by its preferred replica; unclean: it has a live
leader), ``PREFERRED_LEADER_NOT_AVAILABLE`` (the preferred replica is not live or not in the ISR),
``ELIGIBLE_LEADERS_NOT_AVAILABLE`` (unclean: no live replica) and ``UNKNOWN_TOPIC_OR_PARTITION``. The answer
comes once the new leaders are written to ZooKeeper. The request needs ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED at the top and on every partition named (Kafka's answer).
"""

from __future__ import annotations

from typing import Any

from odradek.broker.authorization import cluster_error
from odradek.broker.context import RequestContext
from odradek.cluster.model import TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation

PREFERRED = 0
UNCLEAN = 1
_NOT_CONTROLLER = "this broker is not the controller: send the request to the controller Metadata names"


async def handle_elect_leaders(ctx: RequestContext, request: Any) -> dict[str, Any]:
    election = getattr(request, "election_type", PREFERRED)
    wanted: list[TopicPartition] | None = (
        None if request.topic_partitions is None
        else [(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions])
    controller = ctx.broker.controller
    if denied := cluster_error(ctx, AclOperation.ALTER):
        return _response(denied, {tp: (denied, None) for tp in wanted or []})
    if election not in (PREFERRED, UNCLEAN):
        return _response(ErrorCode.INVALID_REQUEST, {tp: (ErrorCode.INVALID_REQUEST,
                         f"election type {election} is neither PREFERRED (0) nor UNCLEAN (1)") for tp in wanted or []})
    if ctx.broker.cluster is None:
        reg = ctx.broker.registry
        every = [(t.name, p) for t in reg.topics.values() for p in range(t.partitions)]
        return _response(ErrorCode.NONE, {
            tp: ((ErrorCode.ELECTION_NOT_NEEDED, "a single node leads every partition")
                 if (t := reg.get(tp[0])) is not None and 0 <= tp[1] < t.partitions
                 else (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic-partition {tp[0]}-{tp[1]}"))
            for tp in (every if wanted is None else wanted)})
    if controller is None or not controller.active:
        return _response(ErrorCode.NOT_CONTROLLER,
                         {tp: (ErrorCode.NOT_CONTROLLER, _NOT_CONTROLLER) for tp in wanted or []})
    outcomes = await controller.elect_leaders(election == UNCLEAN, wanted)
    results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
    for tp, outcome in outcomes.items():
        if outcome is None:
            results[tp] = (ErrorCode.NONE, None)
        else:
            name, _, why = outcome.partition(": ")
            code = ErrorCode[name]
            if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                why = f"unknown topic-partition {tp[0]}-{tp[1]}"
            elif code is ErrorCode.ELECTION_NOT_NEEDED:
                why = ("the preferred replica already leads it" if election == PREFERRED
                       else "it has a live leader")
            results[tp] = (code, why or None)
    return _response(ErrorCode.NONE, results)


def _response(code: ErrorCode, results: dict[TopicPartition, tuple[ErrorCode, str | None]]) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), (c, message) in results.items():
        by_topic.setdefault(topic, []).append({"partition_id": p, "error_code": c, "error_message": message})
    return {"throttle_time": 0, "error_code": code, "replica_election_results": [
        {"topic": t, "partition_result": parts} for t, parts in by_topic.items()]}
