"""Metadata: brokers, and topics with their partitions, leaders and ids; auto-creates topics."""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

AUTHORIZED_OPERATIONS_UNSET = -(2**31)


def broker_entries(ctx: RequestContext) -> list[dict[str, Any]]:
    """Every live broker at its address on the request's listener (this broker alone on a single node)."""
    b = ctx.broker
    cfg = b.config
    cluster = b.cluster
    if cluster is None:
        a = ctx.advertised
        return [{"node_id": b.node_id, "host": a.host, "port": a.port, "rack": cfg.rack}]
    out = []
    for broker_id, reg in sorted(cluster.brokers.items()):
        e = reg.address(ctx.listener_name)
        out.append({"node_id": broker_id, "host": e.host, "port": e.port, "rack": reg.rack})
    return out


def controller_id(ctx: RequestContext) -> int:
    cluster = ctx.broker.cluster
    return ctx.broker.node_id if cluster is None else cluster.controller_id


def _local_partition(ctx: RequestContext, name: str, p: int) -> dict[str, Any]:
    """A single node's partition: led here, one replica."""
    b = ctx.broker
    part = b.replicas.get(name, p)
    offline = b.log_manager.is_offline(name, p)  # its log directory failed
    return {"error_code": ErrorCode.KAFKA_STORAGE_ERROR if offline else ErrorCode.NONE, "partition_index": p,
            "leader_id": -1 if offline else b.node_id, "leader_epoch": part.leader_epoch if part is not None else 0,
            "replica_nodes": [b.node_id], "isr_nodes": [b.node_id], "offline_replicas": [b.node_id] if offline else []}


def _cluster_partition(ctx: RequestContext, name: str, p: int) -> dict[str, Any]:
    cluster = ctx.broker.cluster
    assert cluster is not None
    assignment = cluster.assignments.get(name)
    replicas = list(assignment.replicas.get(p, ())) if assignment is not None else []
    state = cluster.states.get((name, p))
    live = cluster.brokers
    entry = {"error_code": ErrorCode.NONE, "partition_index": p, "leader_id": -1, "leader_epoch": -1,
             "replica_nodes": replicas, "isr_nodes": [],
             "offline_replicas": [r for r in replicas if r not in live or (name, p) in live[r].offline_replicas]}
    if state is None or not state.online or state.leader not in live:
        entry["error_code"] = ErrorCode.LEADER_NOT_AVAILABLE
        if state is not None:
            entry["leader_epoch"], entry["isr_nodes"] = state.leader_epoch, list(state.isr)
        return entry
    entry.update(leader_id=state.leader, leader_epoch=state.leader_epoch, isr_nodes=list(state.isr))
    return entry


def topic_entry(ctx: RequestContext, name: str) -> dict[str, Any]:
    b = ctx.broker
    topic = b.registry.get(name)
    if topic is None:
        return {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": [],
                "topic_authorized_operations": AUTHORIZED_OPERATIONS_UNSET}
    if b.cluster is not None:
        partitions = [_cluster_partition(ctx, name, p) for p in range(topic.partitions)]
    else:
        partitions = [_local_partition(ctx, name, p) for p in range(topic.partitions)]
    return {"error_code": ErrorCode.NONE, "name": name, "topic_id": topic.topic_id, "is_internal": topic.internal,
            "partitions": partitions, "topic_authorized_operations": AUTHORIZED_OPERATIONS_UNSET}


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    b = ctx.broker
    requested = request.topics
    if requested is None or (ctx.version == 0 and not requested):
        names = sorted(b.registry.topics)  # all topics (v0: an empty list means all)
    else:
        names = []
        for t in requested:
            name = getattr(t, "name", None)
            if name is None and getattr(t, "topic_id", None) is not None:
                found = b.registry.by_id(t.topic_id)
                name = found.name if found is not None else None
            if name is not None:
                names.append(name)
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        if allow_create and b.config.auto_create_topics:
            for name in names:
                if b.registry.get(name) is None:
                    try:
                        b.create_topic(name)
                        log.info("auto-created topic %s for %s", name, ctx.peer)
                    except KafkaError as e:
                        log.info("auto-creation of %r refused: %s", name, e)
    topics = []
    for name in names:
        entry = topic_entry(ctx, name)
        if entry["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            try:
                from odradek.cluster.metadata import validate_topic_name

                validate_topic_name(name)
            except KafkaError:
                entry["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
        topics.append(entry)
    return {
        "throttle_time": 0,
        "brokers": broker_entries(ctx),
        "cluster_id": b.registry.cluster_id,
        "controller_id": controller_id(ctx),
        "topics": topics,
        "error_code": ErrorCode.NONE,
    }
