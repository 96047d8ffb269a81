"""CreateTopics (v2-7), DeleteTopics (v1-6) and CreatePartitions (v0-3).

On a single node creation and deletion are synchronous (the registry is persisted before the call
returns). In a ZooKeeper cluster the change is written to ZooKeeper and the answer waits (up to the
request's ``timeout``) until this broker sees it take effect: leaders elected, or the topic gone.

Invariants:
- Each topic gets its own error code and, where the version has one, a message taken from the
  ``KafkaError`` that refused it; a client mistake never raises out of a handler.
- A topic named more than once in one request is not acted on and is answered once, with
  ``INVALID_REQUEST`` (Kafka: "Duplicate topic name.").
- Manual replica assignments name registered brokers only (this broker alone on a single node), each
  at most once per partition, the same number of replicas for every partition, partitions numbered
  ``0..n-1`` (CreateTopics) or one assignment per new partition (CreatePartitions). Anything else is
  ``INVALID_REPLICA_ASSIGNMENT``; assignments together with an explicit partition count or
  replication factor are ``INVALID_REQUEST``, as in Kafka.
- ``validate_only`` runs every check and changes nothing.
- With ``delete.topic.enable=false`` every DeleteTopics entry fails: ``INVALID_REQUEST`` before
  v3, ``TOPIC_DELETION_DISABLED`` from v3 (Kafka's split).

Authorization, as Kafka's (after the checks of the request's shape, before any topic is looked at):
CreateTopics needs CREATE on the cluster or on the topic (TOPIC_AUTHORIZATION_FAILED); without DESCRIBE_CONFIGS on
the topic a created topic's answer carries no configs, partitions or replication factor and
``topic_config_error_code`` TOPIC_AUTHORIZATION_FAILED. DeleteTopics needs DELETE on the topic; a topic named by id
that the principal may not DESCRIBE is answered without its name. CreatePartitions needs ALTER on the topic.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from odradek.broker import throttle
from odradek.broker.authorization import TOPIC_DENIED, denied_topics, denied_topics_unless_cluster
from odradek.broker.broker import Broker
from odradek.broker.context import RequestContext
from odradek.broker.handlers.admin_configs import topic_config_entries
from odradek.cluster.metadata import UnknownTopicError
from odradek.protocol.entities import millis
from odradek.protocol.errors import ErrorCode, InvalidConfigError, KafkaError
from odradek.security.acl import AclOperation

ZERO_UUID = uuid.UUID(int=0)


class _InvalidRequest(KafkaError):
    code = ErrorCode.INVALID_REQUEST


class _InvalidReplicaAssignment(KafkaError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class _UnknownTopicId(KafkaError):
    code = ErrorCode.UNKNOWN_TOPIC_ID


class _TopicDeletionDisabled(KafkaError):
    code = ErrorCode.TOPIC_DELETION_DISABLED


def _check_replicas(broker: Broker, where: str, broker_ids: Any) -> None:
    ids = list(broker_ids or ())
    if not ids:
        raise _InvalidReplicaAssignment(f"{where} has an empty replica list")
    if len(set(ids)) != len(ids):
        raise _InvalidReplicaAssignment(f"{where} names a broker more than once: {ids}")
    known = set(broker.cluster.brokers) if broker.cluster is not None else {broker.node_id}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise _InvalidReplicaAssignment(
            f"{where} includes broker {unknown[0]}, but no such broker is registered "
            f"(registered: {', '.join(str(b) for b in sorted(known))})"
        )


# -- CreateTopics ------------------------------------------------------------------------------------


def _partitions_from_assignments(broker: Broker, topic: Any) -> tuple[int, int]:
    """(partitions, replication factor) of a manual assignment, or a ``KafkaError``."""
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        raise _InvalidRequest(
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time."
        )
    indexes = sorted(a.partition_index for a in topic.assignments)
    if indexes != list(range(len(indexes))):
        raise _InvalidReplicaAssignment(
            f"partitions of a manual assignment must be numbered 0..{len(indexes) - 1} without gaps, got {indexes}"
        )
    sizes = {len(list(a.broker_ids or ())) for a in topic.assignments}
    for a in topic.assignments:
        _check_replicas(broker, f"the assignment of partition {a.partition_index}", a.broker_ids)
    if len(sizes) != 1:
        raise _InvalidReplicaAssignment("every partition of a manual assignment needs the same number of replicas")
    return len(indexes), sizes.pop()


def _create_one(ctx: RequestContext, topic: Any, validate_only: bool) -> dict[str, Any]:
    b = ctx.broker
    nulls = [c.name for c in topic.configs if c.value is None]
    if nulls:
        raise InvalidConfigError(f"Null value not supported for topic configs: {', '.join(nulls)}")
    configs = {c.name: c.value for c in topic.configs}
    assignment = None
    if topic.assignments:
        partitions, rf = _partitions_from_assignments(b, topic)
        assignment = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
    else:
        partitions, rf = topic.num_partitions, topic.replication_factor
    if not validate_only and ctx.quota is not None:  # valid first, then charged to controller_mutation_rate
        b.create_topic(topic.name, partitions, rf, configs, validate_only=True, assignment=assignment)
        throttle.mutate(ctx, b.config.num_partitions if partitions == -1 else partitions, strict_from=6)
    created = b.create_topic(topic.name, partitions, rf, configs, validate_only=validate_only, assignment=assignment)
    if created is not None:
        partitions, configs, topic_id = created.partitions, created.configs, created.topic_id
    else:
        partitions = b.config.num_partitions if partitions == -1 else partitions
        topic_id = ZERO_UUID
    return {
        "name": topic.name,
        "topic_id": topic_id,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "topic_config_error_code": ErrorCode.NONE,
        "num_partitions": partitions,
        "replication_factor": b.config.default_replication_factor if rf == -1 else rf,
        "configs": topic_config_entries(b, configs),
    }


def _create_error(name: str, code: int, message: str) -> dict[str, Any]:
    return {"name": name, "topic_id": ZERO_UUID, "error_code": code, "error_message": message,
            "num_partitions": -1, "replication_factor": -1, "configs": []}


def _each_name_once(topics: Iterable[Any]) -> Iterator[tuple[Any, bool]]:
    """Each topic entry whose name comes first in the request, with whether the name repeats."""
    topics = list(topics)
    counts = Counter(t.name for t in topics)
    answered: set[str] = set()
    for topic in topics:
        if topic.name not in answered:
            answered.add(topic.name)
            yield topic, counts[topic.name] > 1


async def handle_create_topics(ctx: RequestContext, request: Any) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    names = [t.name for t in request.topics]
    uncreatable = denied_topics_unless_cluster(ctx, AclOperation.CREATE, AclOperation.CREATE, names)
    undescribable = denied_topics(ctx, AclOperation.DESCRIBE_CONFIGS, names)
    for topic, duplicate in _each_name_once(request.topics):
        if duplicate:
            results.append(_create_error(topic.name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            continue
        if topic.name in uncreatable:
            results.append(_create_error(topic.name, TOPIC_DENIED, "Authorization failed."))
            continue
        try:
            created = _create_one(ctx, topic, bool(request.validate_only))
        except KafkaError as e:
            results.append(_create_error(topic.name, e.code, e.message))
            continue
        if topic.name in undescribable:  # Kafka: no configs or metadata without DESCRIBE_CONFIGS
            created.update(configs=[], num_partitions=-1, replication_factor=-1,
                           topic_config_error_code=TOPIC_DENIED)
        results.append(created)
    if ctx.broker.replicated and not request.validate_only:
        await _await_topics(ctx, [r["name"] for r in results if r["error_code"] == ErrorCode.NONE], request, True)
    return {"throttle_time": 0, "topics": results}


async def _await_topics(ctx: RequestContext, names: list[str], request: Any, exists: bool) -> None:
    """Cluster mode: answer once this broker sees the change (leaders elected, or the topic gone), or at the
    request's timeout, as Kafka's delayed CreateTopics/DeleteTopics do."""
    timeout_ms = millis(getattr(request, "timeout", 30_000))
    for name in names:
        await ctx.broker.wait_for_topic(name, exists=exists, timeout_ms=timeout_ms)


# -- DeleteTopics ------------------------------------------------------------------------------------


def _requested_deletions(ctx: RequestContext, request: Any) -> list[tuple[str | None, uuid.UUID]]:
    """(name, topic id) per entry: v6 names a topic by either; older versions by name only."""
    if ctx.version >= 6:
        return [(t.name, t.topic_id if t.topic_id is not None else ZERO_UUID) for t in request.topics]
    return [(name, ZERO_UUID) for name in request.topic_names]


class _TopicAuthorizationFailed(KafkaError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _delete_one(ctx: RequestContext, name: str | None, topic_id: uuid.UUID) -> tuple[str | None, uuid.UUID]:
    """Delete the topic; its (name, id). Raises the ``KafkaError`` that refused it."""
    broker = ctx.broker
    if name is not None and topic_id != ZERO_UUID:
        raise _InvalidRequest("give either a topic name or a topic id, not both")
    if name is None:
        if topic_id == ZERO_UUID:
            raise _InvalidRequest("neither a topic name nor a topic id was given")
        found = broker.registry.by_id(topic_id)
        if found is None:
            raise _UnknownTopicId(f"no topic has id {topic_id}")
        if denied_topics(ctx, AclOperation.DESCRIBE, (found.name,)):  # the id is no secret, the name is
            raise _TopicAuthorizationFailed("Topic authorization failed.")
        name = found.name
    if denied_topics(ctx, AclOperation.DELETE, (name,)):
        raise _TopicAuthorizationFailed("Topic authorization failed.")
    topic = broker.registry.get(name)
    if topic is None:
        raise UnknownTopicError(f"topic '{name}' does not exist")
    throttle.mutate(ctx, topic.partitions, strict_from=5)
    broker.delete_topic(name)
    return name, topic.topic_id


async def handle_delete_topics(ctx: RequestContext, request: Any) -> dict[str, Any]:
    b = ctx.broker
    wanted = _requested_deletions(ctx, request)
    keys = Counter(name if name is not None else topic_id for name, topic_id in wanted)
    responses: list[dict[str, Any]] = []
    answered: set[Any] = set()
    for name, topic_id in wanted:
        key = name if name is not None else topic_id
        if key in answered:
            continue
        answered.add(key)
        entry: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": ErrorCode.NONE,
                                 "error_message": None}
        try:
            if not b.config.delete_topic_enable:
                if ctx.version < 3:
                    raise _InvalidRequest("Topic deletion is disabled.")
                raise _TopicDeletionDisabled("Topic deletion is disabled (delete.topic.enable=false).")
            if keys[key] > 1:
                raise _InvalidRequest("Duplicate topic name." if name is not None else "Duplicate topic id.")
            entry["name"], entry["topic_id"] = _delete_one(ctx, name, topic_id)
        except KafkaError as e:
            entry.update(error_code=e.code, error_message=e.message)
        responses.append(entry)
    if b.replicated:
        await _await_topics(ctx, [r["name"] for r in responses if r["error_code"] == ErrorCode.NONE], request, False)
    return {"throttle_time": 0, "responses": responses}


# -- CreatePartitions --------------------------------------------------------------------------------


def _create_partitions_one(ctx: RequestContext, topic: Any, validate_only: bool) -> None:
    b = ctx.broker
    known = b.registry.get(topic.name)
    if known is None:
        raise UnknownTopicError(f"topic '{topic.name}' does not exist")
    b.add_partitions(topic.name, topic.count, validate_only=True)  # INVALID_PARTITIONS first, as Kafka
    if topic.assignments is not None:
        added = topic.count - known.partitions
        if len(topic.assignments) != added:
            raise _InvalidReplicaAssignment(
                f"Attempted to add {added} additional partition(s), but only "
                f"{len(topic.assignments)} assignment(s) were specified."
            )
        for i, a in enumerate(topic.assignments):
            _check_replicas(b, f"the assignment of new partition {known.partitions + i}", a.broker_ids)
    if not validate_only:
        throttle.mutate(ctx, topic.count - known.partitions, strict_from=3)
        manual = ({known.partitions + i: tuple(a.broker_ids) for i, a in enumerate(topic.assignments)}
                  if topic.assignments is not None else None)
        b.add_partitions(topic.name, topic.count, assignment=manual)


async def handle_create_partitions(ctx: RequestContext, request: Any) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    denied = denied_topics(ctx, AclOperation.ALTER, (t.name for t in request.topics))
    for topic, duplicate in _each_name_once(request.topics):
        entry: dict[str, Any] = {"name": topic.name, "error_code": ErrorCode.NONE, "error_message": None}
        try:
            if duplicate:
                raise _InvalidRequest("Duplicate topic name.")
            if topic.name in denied:
                raise _TopicAuthorizationFailed("The topic authorization is failed.")
            _create_partitions_one(ctx, topic, bool(request.validate_only))
        except KafkaError as e:
            entry.update(error_code=e.code, error_message=e.message)
        results.append(entry)
    return {"throttle_time": 0, "results": results}
