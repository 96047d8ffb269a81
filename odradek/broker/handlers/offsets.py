"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch (one group, or many from v8) and OffsetDelete.

The coordinator (``coordinator/group/offsets.py``, ``txn_offsets.py``) decides; this module maps requests
and results across versions: OffsetFetch v1 has no group-level error (it goes on every partition),
v2-v7 one group with a top-level error, v8+ a list of groups; from v7 ``require_stable`` (KIP-447)
turns a partition with a pending transactional offset into UNSTABLE_OFFSET_COMMIT (a partition
error; the group's error stays NONE, as in Kafka). TxnOffsetCommit v0-v2 carry no member fields (the
coordinator then skips the member checks); v0 and v1 clients (Kafka before 2.0) do not retry
COORDINATOR_LOAD_IN_PROGRESS, so they get COORDINATOR_NOT_AVAILABLE instead (KAFKA-7296, as Kafka).
TxnOffsetCommit is served up to v4: v5 belongs to KIP-890's second phase (the broker adding the
offsets partition to the transaction itself), which this broker does not offer. Before a producer's
first transactional offsets in the group's partition, the transaction coordinator confirms that the
partition is in the producer's transaction (KIP-890 part 1, as for Produce): a client that skipped
AddOffsetsToTxn gets INVALID_TXN_STATE instead of leaving offsets pending that no marker would settle.

Authorization, as Kafka's (before anything reaches a coordinator): OffsetCommit needs READ on the group (else
GROUP_AUTHORIZATION_FAILED on every partition) and READ on each topic (TOPIC_AUTHORIZATION_FAILED on its
partitions); TxnOffsetCommit first needs WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED on
every partition), then the same; OffsetFetch needs DESCRIBE on each group (the group's error) and leaves out the
topics it may not DESCRIBE (all of a group's offsets), or answers them TOPIC_AUTHORIZATION_FAILED (named ones);
OffsetDelete needs DELETE on the group (the response's error) and READ on each topic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from odradek.broker.authorization import (
    TOPIC_DENIED,
    denied_topics,
    group_error,
    transactional_id_error,
)
from odradek.broker.context import RawResponse, RequestContext
from odradek.broker.handlers.produce import verify_with_coordinator
from odradek.coordinator.group.model import OffsetEntry
from odradek.coordinator.group.offsets import CommitRequest
from odradek.coordinator.group.records import OFFSETS_TOPIC, partition_for
from odradek.coordinator.txn.replies import for_request_version
from odradek.protocol import offset_commit_response
from odradek.protocol.entities import millis
from odradek.protocol.error_counts import ErrorCounts, add_code
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation

E = ErrorCode
NO_OFFSET = -1


def _grouped(results: dict[tuple[str, int], ErrorCode]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in results.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


def _commit_requests(request: Any) -> list[CommitRequest]:
    return [(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
             p.committed_metadata) for t in request.topics for p in t.partitions]


def _partition_exists(ctx: RequestContext) -> Callable[[str, int], bool]:
    registry = ctx.broker.registry

    def exists(topic: str, partition: int) -> bool:
        known = registry.get(topic)
        return known is not None and 0 <= partition < known.partitions

    return exists


def _commit_refusals(ctx: RequestContext, offsets: list[CommitRequest], *checks: ErrorCode
                     ) -> dict[tuple[str, int], ErrorCode]:
    """The partitions of an offset commit that authorization refuses: all of them with the first error of
    ``checks`` (the transactional id's, the group's), else those of the topics the principal may not READ."""
    for error in checks:
        if error:
            return {(t, p): error for t, p, *_ in offsets}
    denied = denied_topics(ctx, AclOperation.READ, (t for t, *_ in offsets))
    return {(t, p): TOPIC_DENIED for t, p, *_ in offsets if t in denied}


def _merged(offsets: list[CommitRequest], refused: dict[tuple[str, int], ErrorCode],
            results: dict[tuple[str, int], ErrorCode]) -> dict[tuple[str, int], ErrorCode]:
    """Every partition's result, in request order."""
    return {(t, p): refused[(t, p)] if (t, p) in refused else results[(t, p)] for t, p, *_ in offsets}


async def handle_offset_commit(ctx: RequestContext, request: Any) -> RawResponse:
    b = ctx.broker
    offsets = _commit_requests(request)
    refused = _commit_refusals(ctx, offsets, group_error(ctx, AclOperation.READ, request.group_id))
    allowed = [o for o in offsets if (o[0], o[1]) not in refused] if refused else offsets
    results: dict[tuple[str, int], ErrorCode] = {}
    if allowed:
        retention = millis(getattr(request, "retention_time", -1))
        exists = _partition_exists(ctx)
        results = await b.groups.call(lambda c, ticket, now: c.commit(
            ticket, group_id=request.group_id, generation_id=request.generation_id_or_member_epoch,
            member_id=request.member_id, group_instance_id=getattr(request, "group_instance_id", None),
            offsets=allowed, retention_ms=retention, partition_exists=exists, now=now))
    if refused:
        results = _merged(offsets, refused, results)
    errors: ErrorCounts = {}
    for code in results.values():
        add_code(errors, code)
    return RawResponse([offset_commit_response.encode(ctx.version, results)], errors)


_VERIFY_RETRIABLE = (E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE,
                     E.NOT_COORDINATOR)


async def _txn_verification_error(ctx: RequestContext, request: Any) -> ErrorCode | None:
    """KIP-890 part 1: the group's offsets partition must be in the producer's ongoing transaction before the
    producer's first offsets in it (AddOffsetsToTxn puts it there); None if so, else the error to answer."""
    b = ctx.broker
    if not b.config.txn_partition_verification or request.producer_id < 0:
        return None
    groups = b.groups.ensure_started()
    partition = partition_for(request.group_id, groups.num_partitions)
    part = b.replicas.get(OFFSETS_TOPIC, partition)
    if part is not None and part.log.ongoing_transaction_first_offset(request.producer_id) is not None:
        return None
    error = await verify_with_coordinator(ctx, request.transactional_id, request.producer_id, request.producer_epoch,
                                          OFFSETS_TOPIC, partition)
    if error is E.NONE:
        return None
    if error in _VERIFY_RETRIABLE:
        return E.COORDINATOR_LOAD_IN_PROGRESS if ctx.version >= 2 else E.COORDINATOR_NOT_AVAILABLE
    if error is E.TRANSACTION_ABORTABLE:
        return E.INVALID_TXN_STATE
    return for_request_version(error, "TxnOffsetCommit", ctx.version)


async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> dict[str, Any]:
    offsets = _commit_requests(request)
    refused = _commit_refusals(ctx, offsets,
                               transactional_id_error(ctx, AclOperation.WRITE, request.transactional_id),
                               group_error(ctx, AclOperation.READ, request.group_id))
    allowed = [o for o in offsets if (o[0], o[1]) not in refused] if refused else offsets
    if not allowed:
        return {"throttle_time": 0, "topics": _grouped(refused)}
    unverified = await _txn_verification_error(ctx, request)
    if unverified is not None:
        return {"throttle_time": 0, "topics": _grouped(_merged(offsets, refused, dict.fromkeys(
            ((t, p) for t, p, *_ in allowed), unverified)))}
    exists = _partition_exists(ctx)
    results = await ctx.broker.groups.call(lambda c, ticket, now: c.txn_commit(
        ticket, group_id=request.group_id, producer_id=request.producer_id, producer_epoch=request.producer_epoch,
        generation_id=getattr(request, "generation_id", -1), member_id=getattr(request, "member_id", ""),
        group_instance_id=getattr(request, "group_instance_id", None), offsets=allowed, partition_exists=exists,
        now=now))
    if ctx.version < 2:
        results = {tp: E.COORDINATOR_NOT_AVAILABLE if e == E.COORDINATOR_LOAD_IN_PROGRESS else e
                   for tp, e in results.items()}
    return {"throttle_time": 0, "topics": _grouped(_merged(offsets, refused, results) if refused else results)}


def _fetch_group(ctx: RequestContext, group_id: str, topics: Any, require_stable: bool
                 ) -> tuple[ErrorCode, list[dict[str, Any]]]:
    if denied_group := group_error(ctx, AclOperation.DESCRIBE, group_id):
        return denied_group, []
    coord = ctx.broker.groups.view()
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    refused = denied_topics(ctx, AclOperation.DESCRIBE, (t for t, _ in wanted or ()))
    if refused:
        wanted = [tp for tp in wanted or () if tp[0] not in refused]
    error, found = coord.fetch_offsets(group_id, wanted, require_stable=require_stable)
    # all of a group's offsets: those of topics the principal may not describe are left out
    hidden = denied_topics(ctx, AclOperation.DESCRIBE, (tp[0] for tp, _, _ in found)) if wanted is None else refused
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), entry, partition_error in found:
        if topic not in hidden:
            by_topic.setdefault(topic, []).append(_partition(partition, entry, partition_error))
    if error == E.NONE and refused:  # named topics it may not describe: refused
        for t in topics:
            if t.name in refused:
                by_topic.setdefault(t.name, []).extend(_partition(p, None, TOPIC_DENIED) for p in t.partition_indexes)
    return error, [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


def _partition(partition: int, entry: OffsetEntry | None, error: ErrorCode) -> dict[str, Any]:
    if entry is None:
        return {"partition_index": partition, "committed_offset": NO_OFFSET, "committed_leader_epoch": -1,
                "metadata": "", "error_code": error}
    return {"partition_index": partition, "committed_offset": entry.offset,
            "committed_leader_epoch": entry.leader_epoch, "metadata": entry.metadata, "error_code": error}


async def handle_offset_fetch(ctx: RequestContext, request: Any) -> dict[str, Any]:
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.version >= 8:
        groups = []
        for g in request.groups:
            error, topics = _fetch_group(ctx, g.group_id, g.topics, require_stable)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return {"throttle_time": 0, "groups": groups}
    error, topics = _fetch_group(ctx, request.group_id, request.topics, require_stable)
    if ctx.version < 2 and error != E.NONE:  # v1 has no group-level error: put it on every partition asked for
        topics = [{"name": t.name, "partitions": [_partition(p, None, error) for p in t.partition_indexes]}
                  for t in request.topics or ()] or topics
        for t in topics:
            for p in t["partitions"]:
                p["error_code"] = error
    return {"throttle_time": 0, "topics": topics, "error_code": error}


async def handle_offset_delete(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if denied_group := group_error(ctx, AclOperation.DELETE, request.group_id):
        return {"throttle_time": 0, "error_code": denied_group, "topics": []}
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    denied = denied_topics(ctx, AclOperation.READ, (t for t, _ in partitions))
    refused = {(t, p): TOPIC_DENIED for t, p in partitions if t in denied}
    allowed = [tp for tp in partitions if tp not in refused]
    error, results = E.NONE, {}
    if allowed:
        error, results = await ctx.broker.groups.call(
            lambda c, ticket, now: c.delete_offsets(ticket, request.group_id, allowed))
    if refused:
        results = {tp: refused.get(tp) or results.get(tp, E.NONE) for tp in partitions} if not error else refused
    return {"throttle_time": 0, "error_code": error, "topics": _grouped(results)}
