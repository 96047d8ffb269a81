"""AlterPartitionReassignments (v0-1) and ListPartitionReassignments (v0), as Kafka's brokers answer them.

Admin clients send both to the controller (the broker Metadata names). The active controller validates the
request against its image and writes the topic znodes (``Controller.reassign``); the rest of the reassignment
happens as the controller's reconcile sees the new replicas catch up (``cluster/controller/reassignment.py``).
The response comes once the znodes are written, not when the reassignment is done: ``--verify`` and
ListPartitionReassignments follow its progress, as with Kafka.

A single node is its own controller (Metadata names it) and every partition's only replica: the one
reassignment it accepts is to itself (nothing to do), and none is ever running.

Authorization, as Kafka's: Alter needs ALTER on the cluster, List DESCRIBE on it; else the response's error is
CLUSTER_AUTHORIZATION_FAILED and nothing is listed or changed.

Errors, as Kafka's: a broker that is not the controller answers ``NOT_CONTROLLER`` at the top level; per
partition, ``UNKNOWN_TOPIC_OR_PARTITION``, ``INVALID_REPLICA_ASSIGNMENT`` (empty, a broker twice, a broker
that is not alive), ``INVALID_REPLICATION_FACTOR`` (v1 with ``allow_replication_factor_change`` false and a
target of another size) and ``NO_REASSIGNMENT_IN_PROGRESS`` (a cancel of a partition not being reassigned).
"""

from __future__ import annotations

from typing import Any

from odradek.broker.authorization import cluster_error
from odradek.broker.context import RequestContext
from odradek.cluster.controller.controller import Controller
from odradek.cluster.controller.reassignment import reassignment_of
from odradek.cluster.model import TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation

_NOT_CONTROLLER = "this broker is not the controller: send the request to the controller Metadata names"


def _active_controller(ctx: RequestContext) -> Controller | None:
    controller = ctx.broker.controller
    return controller if controller is not None and controller.active else None


def _single_node_outcome(ctx: RequestContext, topic: str, partition: int,
                          replicas: tuple[int, ...] | None) -> str | None:
    known = ctx.broker.registry.get(topic)
    if known is None or not 0 <= partition < known.partitions:
        return "UNKNOWN_TOPIC_OR_PARTITION"
    if replicas is None:
        return "NO_REASSIGNMENT_IN_PROGRESS"
    if replicas != (ctx.broker.node_id,):
        return (f"INVALID_REPLICA_ASSIGNMENT: brokers {sorted(set(replicas) - {ctx.broker.node_id}) or list(replicas)} "
                f"are not alive (registered brokers: [{ctx.broker.node_id}])")
    return None


async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if denied := cluster_error(ctx, AclOperation.ALTER):
        return {"throttle_time": 0, "allow_replication_factor_change": True, "error_code": denied,
                "error_message": None, "responses": []}
    if ctx.broker.cluster is None:
        responses = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                replicas = None if p.replicas is None else tuple(int(r) for r in p.replicas)
                code, message = _outcome((t.name, p.partition_index),
                                         _single_node_outcome(ctx, t.name, p.partition_index, replicas))
                parts.append({"partition_index": p.partition_index, "error_code": code, "error_message": message})
            responses.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "allow_replication_factor_change": True, "error_code": ErrorCode.NONE,
                "error_message": None, "responses": responses}
    controller = _active_controller(ctx)
    if controller is None:
        return {"throttle_time": 0, "allow_replication_factor_change": True, "error_code": ErrorCode.NOT_CONTROLLER,
                "error_message": _NOT_CONTROLLER,
                "responses": [{"name": t.name, "partitions": [
                    {"partition_index": p.partition_index, "error_code": ErrorCode.NOT_CONTROLLER,
                     "error_message": _NOT_CONTROLLER} for p in t.partitions]} for t in request.topics]}
    allow_rf_change = getattr(request, "allow_replication_factor_change", True)
    targets: dict[TopicPartition, tuple[int, ...] | None] = {}
    refused: dict[TopicPartition, tuple[ErrorCode, str]] = {}
    assignments = controller.member.assignments
    for t in request.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if tp in targets or tp in refused:
                refused[tp] = (ErrorCode.INVALID_REQUEST, f"{t.name}-{p.partition_index} is listed twice")
                targets.pop(tp, None)
                continue
            replicas = None if p.replicas is None else tuple(int(r) for r in p.replicas)
            current = assignments.get(t.name)
            if (not allow_rf_change and replicas is not None and current is not None
                    and p.partition_index in current.replicas
                    and len(replicas) != len(reassignment_of(current, p.partition_index).original)):
                refused[tp] = (ErrorCode.INVALID_REPLICATION_FACTOR,
                               f"the reassignment of {t.name}-{p.partition_index} changes its replication factor, "
                               "which allow_replication_factor_change=false forbids")
                continue
            targets[tp] = replicas
    outcomes = await controller.reassign(targets) if targets else {}
    responses = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            code, message = refused.get(tp) or _outcome(tp, outcomes.get(tp))
            parts.append({"partition_index": p.partition_index, "error_code": code, "error_message": message})
        responses.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "allow_replication_factor_change": allow_rf_change, "error_code": ErrorCode.NONE,
            "error_message": None, "responses": responses}


def _outcome(tp: TopicPartition, outcome: str | None) -> tuple[ErrorCode, str | None]:
    if outcome is None:
        return ErrorCode.NONE, None
    name, _, why = outcome.partition(": ")
    code = ErrorCode[name]
    if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        why = f"unknown topic-partition {tp[0]}-{tp[1]}"
    elif code is ErrorCode.NO_REASSIGNMENT_IN_PROGRESS:
        why = f"{tp[0]}-{tp[1]} has no reassignment in progress to cancel"
    elif code is ErrorCode.NOT_CONTROLLER:
        why = _NOT_CONTROLLER
    return code, why or None


async def handle_list_partition_reassignments(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if denied := cluster_error(ctx, AclOperation.DESCRIBE):
        return {"throttle_time": 0, "error_code": denied, "error_message": None, "topics": []}
    if ctx.broker.cluster is None:  # a single node never reassigns
        return {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": []}
    controller = _active_controller(ctx)
    if controller is None:
        return {"throttle_time": 0, "error_code": ErrorCode.NOT_CONTROLLER, "error_message": _NOT_CONTROLLER,
                "topics": []}
    wanted = None if request.topics is None else [(t.name, int(p)) for t in request.topics
                                                   for p in t.partition_indexes]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (name, p), r in sorted(controller.reassignments(wanted).items()):
        by_topic.setdefault(name, []).append({"partition_index": p, "replicas": list(r.replicas),
                                              "adding_replicas": list(r.adding),
                                              "removing_replicas": list(r.removing)})
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "topics": [{"name": n, "partitions": parts} for n, parts in by_topic.items()]}
