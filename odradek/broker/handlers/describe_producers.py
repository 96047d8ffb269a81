"""DescribeProducers (v0): the producers a partition keeps state for (``kafka-transactions.sh
describe-producers``, and the admin client's ``describeProducers``), used to find hanging
transactions.

Per requested partition: each producer's id, epoch, last sequence, last write time, coordinator
epoch of its last transaction marker and the first offset of its ongoing transaction (-1 if none),
read from the partition's producer state (``Log.active_producers``). A partition this broker does not
host answers UNKNOWN_TOPIC_OR_PARTITION; a topic the principal may not READ, TOPIC_AUTHORIZATION_FAILED (Kafka's
check, made before the topic's existence is looked at); errors are per partition and never fail the request.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.authorization import TOPIC_DENIED, denied_topics
from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import AclOperation


async def handle_describe_producers(ctx: RequestContext, request: Any) -> dict[str, Any]:
    b = ctx.broker
    denied = denied_topics(ctx, AclOperation.READ, (t.name for t in request.topics))
    topics = []
    for t in request.topics:
        parts = []
        for index in t.partition_indexes:
            entry: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.NONE, "error_message": None,
                                     "active_producers": []}
            if t.name in denied:
                entry["error_code"] = TOPIC_DENIED
                parts.append(entry)
                continue
            try:
                lg = b.replicas.leader_partition(t.name, index).log
            except KafkaError as e:
                entry["error_code"], entry["error_message"] = e.code, e.message
            else:
                entry["active_producers"] = [
                    {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
                     "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
                     "coordinator_epoch": p.coordinator_epoch, "current_txn_start_offset": p.current_txn_start_offset}
                    for p in lg.active_producers()
                ]
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
