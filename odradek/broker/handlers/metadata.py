"""Metadata: brokers, and topics with their partitions, leaders and ids; auto-creates topics."""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

AUTHORIZED_OPERATIONS_UNSET = -(2**31)


def broker_entries(ctx: RequestContext) -> list[dict[str, Any]]:
    cfg = ctx.broker.config
    return [{"node_id": ctx.broker.node_id, "host": cfg.advertised_host, "port": cfg.advertised_port, "rack": None}]


def topic_entry(ctx: RequestContext, name: str) -> dict[str, Any]:
    b = ctx.broker
    topic = b.registry.get(name)
    if topic is None:
        return {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": [],
                "topic_authorized_operations": AUTHORIZED_OPERATIONS_UNSET}
    partitions = []
    for p in range(topic.partitions):
        lg = b.log_manager.get_log(name, p)
        epoch = lg.leader_epochs.latest_epoch if lg is not None else None
        partitions.append({
            "error_code": ErrorCode.NONE, "partition_index": p, "leader_id": b.node_id,
            "leader_epoch": epoch if epoch is not None else 0,
            "replica_nodes": [b.node_id], "isr_nodes": [b.node_id], "offline_replicas": [],
        })
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
        "controller_id": b.node_id,
        "topics": topics,
        "error_code": ErrorCode.NONE,
    }
