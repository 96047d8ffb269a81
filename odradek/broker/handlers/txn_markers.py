"""WriteTxnMarkers (v1): end producers' transactions in partitions this broker leads.

In Kafka a transaction coordinator sends it to the leaders of a transaction's partitions; operators
send it through the admin client's ``abortTransaction`` (``kafka-transactions.sh abort``, ``odradek
transactions abort``) to end a hanging transaction, one whose coordinator will never write its
marker. This broker's own coordinator writes its markers in-process (``Broker.append_txn_marker``,
the same path).

Every partition of every marker gets its own result: UNKNOWN_TOPIC_OR_PARTITION for a partition this
broker does not host, INVALID_PRODUCER_EPOCH for an epoch older than the producer's,
TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than the producer's last marker's,
KAFKA_STORAGE_ERROR if the append fails, INVALID_REQUEST for a negative producer id. A marker for a
producer with no transaction open in the partition is written anyway and ends nothing (as in Kafka).
In a cluster a marker is answered once it is committed (every in-sync replica has it), as Kafka appends
markers with acks=all; NOT_LEADER_OR_FOLLOWER from a broker that does not lead the partition.

Authorization, as Kafka's: ALTER on the cluster (an operator's abort) or CLUSTER_ACTION (a coordinator broker),
else every partition is CLUSTER_AUTHORIZATION_FAILED and nothing is written.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.authorization import cluster_error
from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.replica.partition import Partition
from odradek.security.acl import AclOperation

MARKER_TIMEOUT_MS = 30_000  # request.timeout.ms of Kafka's marker channel


async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> dict[str, Any]:
    b = ctx.broker
    markers = []
    waits: list[tuple[dict[str, Any], Partition, int]] = []
    denied = cluster_error(ctx, AclOperation.ALTER, AclOperation.CLUSTER_ACTION)
    for m in request.markers:
        topics = []
        for t in m.topics:
            parts = []
            for index in t.partition_indexes:
                if denied or m.producer_id < 0:
                    parts.append({"partition_index": index, "error_code": denied or ErrorCode.INVALID_REQUEST})
                    continue
                entry = {"partition_index": index, "error_code": ErrorCode.NONE}
                try:
                    part = b.append_txn_marker(t.name, index, m.producer_id, m.producer_epoch, m.transaction_result,
                                               m.coordinator_epoch)
                    if part.replicated:
                        waits.append((entry, part, part.log.next_offset))
                except KafkaError as e:
                    entry["error_code"] = e.code
                parts.append(entry)
            topics.append({"name": t.name, "partitions": parts})
        markers.append({"producer_id": m.producer_id, "topics": topics})
    if waits:  # as Kafka: a marker counts once it is committed (acks=all)
        codes = await b.replicas.wait_replicated([(part, end) for _, part, end in waits], MARKER_TIMEOUT_MS)
        for (entry, _, _), code in zip(waits, codes, strict=True):
            entry["error_code"] = code
    return {"markers": markers}
