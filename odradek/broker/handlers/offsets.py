"""Committed offsets: OffsetCommit, OffsetFetch (one group, or many from v8) and OffsetDelete.

The coordinator (``coordinator/group/offsets.py``) decides; this module maps requests and results
across versions: OffsetFetch v1 has no group-level error (it goes on every partition), v2-v7 one
group with a top-level error, v8+ a list of groups.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.context import RawResponse, RequestContext
from odradek.coordinator.group.model import OffsetEntry
from odradek.protocol import offset_commit_response
from odradek.protocol.entities import millis
from odradek.protocol.errors import ErrorCode

E = ErrorCode
NO_OFFSET = -1


def _grouped(results: dict[tuple[str, int], ErrorCode]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in results.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


async def handle_offset_commit(ctx: RequestContext, request: Any) -> RawResponse:
    b = ctx.broker
    offsets = [(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata) for t in request.topics for p in t.partitions]
    retention = millis(getattr(request, "retention_time", -1))

    def exists(topic: str, partition: int) -> bool:
        known = b.registry.get(topic)
        return known is not None and 0 <= partition < known.partitions

    results = await b.groups.call(lambda c, ticket, now: c.commit(
        ticket, group_id=request.group_id, generation_id=request.generation_id_or_member_epoch,
        member_id=request.member_id, group_instance_id=getattr(request, "group_instance_id", None),
        offsets=offsets, retention_ms=retention, partition_exists=exists, now=now))
    return RawResponse([offset_commit_response.encode(ctx.version, results)])


def _fetch_group(ctx: RequestContext, group_id: str, topics: Any) -> tuple[ErrorCode, list[dict[str, Any]]]:
    coord = ctx.broker.groups.view()
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    error, found = coord.fetch_offsets(group_id, wanted)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), entry in found:
        by_topic.setdefault(topic, []).append(_partition(partition, entry, E.NONE))
    return error, [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


def _partition(partition: int, entry: OffsetEntry | None, error: ErrorCode) -> dict[str, Any]:
    if entry is None:
        return {"partition_index": partition, "committed_offset": NO_OFFSET, "committed_leader_epoch": -1,
                "metadata": "", "error_code": error}
    return {"partition_index": partition, "committed_offset": entry.offset,
            "committed_leader_epoch": entry.leader_epoch, "metadata": entry.metadata, "error_code": error}


async def handle_offset_fetch(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.version >= 8:
        groups = []
        for g in request.groups:
            error, topics = _fetch_group(ctx, g.group_id, g.topics)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return {"throttle_time": 0, "groups": groups}
    error, topics = _fetch_group(ctx, request.group_id, request.topics)
    if ctx.version < 2 and error != E.NONE:  # v1 has no group-level error: put it on every partition
        for t in topics:
            for p in t["partitions"]:
                p["error_code"] = error
    return {"throttle_time": 0, "topics": topics, "error_code": error}


async def handle_offset_delete(ctx: RequestContext, request: Any) -> dict[str, Any]:
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, results = await ctx.broker.groups.call(
        lambda c, ticket, now: c.delete_offsets(ticket, request.group_id, partitions))
    return {"throttle_time": 0, "error_code": error, "topics": _grouped(results)}
