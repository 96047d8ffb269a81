"""ListOffsets: earliest, latest, max timestamp, or the first offset at or after a timestamp.

The isolation level (v2+) bounds what may be answered, as in Kafka: read_uncommitted sees up to the
high watermark, read_committed up to the last stable offset. LATEST is that bound itself; an offset
found by timestamp (or MAX_TIMESTAMP) is answered only if it lies below the bound, else the answer
is "none found" (offset and timestamp -1), so a consumer is never pointed into undecided data.

Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER otherwise), after checking
``current_leader_epoch`` (v4+: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH). A topic the principal may not
DESCRIBE is TOPIC_AUTHORIZATION_FAILED on each of its partitions, as Kafka answers.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.authorization import TOPIC_DENIED, denied_topics
from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import AclOperation

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
READ_COMMITTED = 1


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    b = ctx.broker
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    denied = denied_topics(ctx, AclOperation.DESCRIBE, (t.name for t in request.topics))
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "error_code": ErrorCode.NONE,
                                     "timestamp": -1, "offset": -1, "leader_epoch": -1}
            if t.name in denied:
                entry["error_code"] = TOPIC_DENIED
                parts.append(entry)
                continue
            try:
                part = b.replicas.leader_partition(t.name, p.partition_index)
                part.check_epoch(getattr(p, "current_leader_epoch", -1))
                lg = part.log
                fetchable_end = lg.last_stable_offset if read_committed else lg.high_watermark
                ts = p.timestamp
                if ts == LATEST:
                    entry["offset"] = fetchable_end
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    entry["offset"] = lg.log_start_offset
                elif ts == LATEST_TIERED:
                    pass  # no tiered storage: nothing is tiered
                elif ts == MAX_TIMESTAMP:
                    found = lg.max_timestamp_offset()
                    if found is not None and found.offset < fetchable_end:
                        entry["timestamp"], entry["offset"] = found.timestamp, found.offset
                elif ts < 0:
                    entry["error_code"] = ErrorCode.UNSUPPORTED_VERSION
                else:
                    found = lg.offset_for_timestamp(ts)
                    if found is not None and found.offset < fetchable_end:
                        entry["timestamp"], entry["offset"] = found.timestamp, found.offset
                if entry["offset"] >= 0:
                    epoch = lg.leader_epochs.epoch_for_offset(entry["offset"])
                    entry["leader_epoch"] = epoch if epoch is not None else -1
            except KafkaError as e:
                entry["error_code"] = e.code
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
