"""Metadata: brokers, and topics with their partitions, leaders and ids; auto-creates topics.

Authorization, as Kafka's: a topic needs DESCRIBE. An all-topics request leaves out the topics the principal may
not describe; a topic asked for by name is TOPIC_AUTHORIZATION_FAILED (with no id, so nothing tells whether it
exists), one asked for by id the same with its id and no name. Auto-creation of a describable topic needs CREATE
on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED and it is not created. ``topic_authorized_operations``
and (v8-10) ``cluster_authorized_operations`` are filled when asked for (the cluster's is 0 without DESCRIBE on it).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from odradek.broker.authorization import (
    OPERATIONS_UNSET,
    TOPIC_DENIED,
    cluster_operations_if,
    denied_topics,
    denied_topics_unless_cluster,
    operations_if,
)
from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import AclOperation, ResourceType

log = logging.getLogger(__name__)

AUTHORIZED_OPERATIONS_UNSET = OPERATIONS_UNSET
ZERO_UUID = uuid.UUID(int=0)


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
    all_topics = requested is None or (ctx.version == 0 and not requested)
    refused: list[dict[str, Any]] = []  # TOPIC_AUTHORIZATION_FAILED entries
    if all_topics:
        names = sorted(b.registry.topics)  # all topics (v0: an empty list means all)
        hidden = denied_topics(ctx, AclOperation.DESCRIBE, names)
        names = [n for n in names if n not in hidden]  # left out, not refused
    else:
        names, by_id = _requested_names(ctx, requested)
        hidden = denied_topics(ctx, AclOperation.DESCRIBE, names)
        refused += [_refused(name, by_id.get(name)) for name in names if name in hidden]
        names = [n for n in names if n not in hidden]
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        if allow_create and b.config.auto_create_topics:
            missing = [n for n in names if b.registry.get(n) is None]
            uncreatable = denied_topics_unless_cluster(ctx, AclOperation.CREATE, AclOperation.CREATE, missing)
            refused += [_refused(name, None) for name in names if name in uncreatable]
            names = [n for n in names if n not in uncreatable]
            for name in missing:
                if name not in uncreatable:
                    _auto_create(ctx, name)
    with_operations = bool(getattr(request, "include_topic_authorized_operations", False))
    topics = []
    for name in names:
        entry = topic_entry(ctx, name)
        if entry["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            try:
                from odradek.cluster.metadata import validate_topic_name

                validate_topic_name(name)
            except KafkaError:
                entry["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
        elif with_operations:
            entry["topic_authorized_operations"] = operations_if(ctx, True, ResourceType.TOPIC, name)
        topics.append(entry)
    return {
        "throttle_time": 0,
        "brokers": broker_entries(ctx),
        "cluster_id": b.registry.cluster_id,
        "controller_id": controller_id(ctx),
        "topics": topics + refused,
        "cluster_authorized_operations": cluster_operations_if(
            ctx, bool(getattr(request, "include_cluster_authorized_operations", False))),
        "error_code": ErrorCode.NONE,
    }


def _requested_names(ctx: RequestContext, requested: Any) -> tuple[list[str], dict[str, uuid.UUID]]:
    """The names of the topics asked for (those asked for by a known id resolved), and the ids they were asked by."""
    names: list[str] = []
    by_id: dict[str, uuid.UUID] = {}
    for t in requested:
        name = getattr(t, "name", None)
        topic_id = getattr(t, "topic_id", None)
        if name is None and topic_id is not None:
            found = ctx.broker.registry.by_id(topic_id)
            name = found.name if found is not None else None
            if name is not None:
                by_id[name] = topic_id
        if name is not None:
            names.append(name)
    return names, by_id


def _refused(name: str, topic_id: uuid.UUID | None) -> dict[str, Any]:
    """A topic the principal may not describe (or auto-create): no id when asked by name, no name when by id."""
    return {"error_code": TOPIC_DENIED, "name": name if topic_id is None else None,
            "topic_id": topic_id or ZERO_UUID, "is_internal": False, "partitions": [],
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_UNSET}


def _auto_create(ctx: RequestContext, name: str) -> None:
    try:
        ctx.broker.create_topic(name)
        log.info("auto-created topic %s for %s", name, ctx.peer)
    except KafkaError as e:
        log.info("auto-creation of %r refused: %s", name, e)
