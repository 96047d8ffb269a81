"""DeleteRecords (v0-2) and OffsetForLeaderEpoch (v2-4).

DeleteRecords moves a partition's log start offset forward (``Log.delete_records_before``); whole
segments below it are deleted, the rest is hidden from fetches. ``offset`` -1 means the high
watermark. The answer's ``low_watermark`` is the log start offset afterwards (-1 on error). An
offset below the current log start changes nothing and reports the current one, as in Kafka.

OffsetForLeaderEpoch answers "where did leader epoch N end?", which followers use to truncate and
consumers use to validate their position after a leader change (KIP-320). Per partition:

1. ``current_leader_epoch`` (if >= 0) is checked against this broker's epoch for the partition:
   lower -> ``FENCED_LEADER_EPOCH`` (the asker's metadata is stale), higher ->
   ``UNKNOWN_LEADER_EPOCH`` (the asker knows an epoch we do not), as Kafka's leader checks.
2. ``(leader_epoch, end_offset)`` comes from the partition's leader-epoch cache
   (``LeaderEpochCache.end_offset_for``) with the log end offset, exactly as Kafka computes it.

In a ZooKeeper cluster leaders stamp their epoch on every batch and the answer is Kafka's, from the
partition's leader (NOT_LEADER_OR_FOLLOWER elsewhere). A single node never assigns leader epochs (its
appends carry none), so the cache is normally empty,
while Metadata reports every partition's leader epoch as 0. Kafka answers an empty cache with
``(-1, -1)``; a Java or librdkafka consumer reads that as "truncation detected" and resets its
position (or raises ``LogTruncationException`` with no reset policy), although nothing was ever
truncated. So an empty cache is treated as one epoch, 0, covering the whole log:

- requested epoch -1 (undefined) -> ``(-1, -1)``, as Kafka;
- any requested epoch >= 0 -> ``(0, log end offset)``: epoch 0 is the largest epoch not above the
  one asked for, and it has not ended. The epochs consumers send come from fetched batches'
  ``partitionLeaderEpoch``, which here is whatever the producer wrote, so an epoch above 0 does not
  mean the asker saw a later leader; it cannot have, since there is only this one. Answering
  ``(-1, -1)`` for it (Kafka's rule for epochs above the latest) would make the consumer reset for
  no reason, while ``(0, LEO)`` makes it keep its position whenever that position is <= LEO, and
  truncate to LEO otherwise, which is correct for a log that only ever grew from the start.

Authorization, as Kafka's: DeleteRecords needs DELETE on each topic; OffsetForLeaderEpoch needs CLUSTER_ACTION
on the cluster (followers) or else DESCRIBE on each topic (consumers, KIP-320); a topic refused is
TOPIC_AUTHORIZATION_FAILED on each of its partitions.

Invariants: errors are per partition (``UNKNOWN_TOPIC_OR_PARTITION`` for a partition this broker
does not host); ``replica_id`` (v3+) is ignored: every asker is answered as a consumer would be,
and with one replica the log end offset is the high watermark.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.authorization import TOPIC_DENIED, denied_topics, denied_topics_unless_cluster
from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import AclOperation
from odradek.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from odradek.storage.log import Log

HIGH_WATERMARK = -1


# -- DeleteRecords -----------------------------------------------------------------------------------


async def handle_delete_records(ctx: RequestContext, request: Any) -> dict[str, Any]:
    b = ctx.broker
    denied = denied_topics(ctx, AclOperation.DELETE, (t.name for t in request.topics))
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "low_watermark": -1,
                                     "error_code": TOPIC_DENIED if t.name in denied else ErrorCode.NONE}
            if t.name in denied:
                parts.append(entry)
                continue
            try:
                lg = b.replicas.leader_partition(t.name, p.partition_index).log
                offset = lg.high_watermark if p.offset == HIGH_WATERMARK else p.offset
                entry["low_watermark"] = lg.delete_records_before(offset)
            except KafkaError as e:
                entry["error_code"] = e.code
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


# -- OffsetForLeaderEpoch ----------------------------------------------------------------------------


def current_epoch(lg: Log) -> int:
    """The partition's leader epoch as Metadata reports it (0 when none was ever assigned)."""
    latest = lg.leader_epochs.latest_epoch
    return latest if latest is not None else 0


def end_offset_for(lg: Log, requested_epoch: int) -> tuple[int, int]:
    """``(epoch, end_offset)`` for ``requested_epoch``; see the module docstring for an empty cache."""
    if lg.leader_epochs.latest_epoch is None:
        if requested_epoch < 0:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return 0, lg.next_offset
    return lg.leader_epochs.end_offset_for(requested_epoch, lg.next_offset)


def _epoch_end_offset(ctx: RequestContext, topic: str, p: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"partition": p.partition, "error_code": ErrorCode.NONE,
                             "leader_epoch": UNDEFINED_EPOCH, "end_offset": UNDEFINED_EPOCH_OFFSET}
    try:
        part = ctx.broker.replicas.leader_partition(topic, p.partition)
        lg = part.log
        if part.replicated:
            part.check_epoch(p.current_leader_epoch)
            entry["leader_epoch"], entry["end_offset"] = lg.leader_epochs.end_offset_for(p.leader_epoch,
                                                                                         lg.next_offset)
            return entry
    except KafkaError as e:
        entry["error_code"] = e.code
        return entry
    ours = current_epoch(lg)
    asked = p.current_leader_epoch
    if asked >= 0 and asked < ours:
        entry["error_code"] = ErrorCode.FENCED_LEADER_EPOCH
    elif asked > ours:
        entry["error_code"] = ErrorCode.UNKNOWN_LEADER_EPOCH
    else:
        entry["leader_epoch"], entry["end_offset"] = end_offset_for(lg, p.leader_epoch)
    return entry


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> dict[str, Any]:
    denied = denied_topics_unless_cluster(ctx, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE,
                                          (t.topic for t in request.topics))
    topics = [
        {"topic": t.topic, "partitions": [
            {"partition": p.partition, "error_code": TOPIC_DENIED, "leader_epoch": UNDEFINED_EPOCH,
             "end_offset": UNDEFINED_EPOCH_OFFSET} if t.topic in denied else _epoch_end_offset(ctx, t.topic, p)
            for p in t.partitions]}
        for t in request.topics
    ]
    return {"throttle_time": 0, "topics": topics}
