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
"""

from __future__ import annotations

from typing import Any

from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode, KafkaError


async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> dict[str, Any]:
    b = ctx.broker
    markers = []
    for m in request.markers:
        topics = []
        for t in m.topics:
            parts = []
            for index in t.partition_indexes:
                if m.producer_id < 0:
                    parts.append({"partition_index": index, "error_code": ErrorCode.INVALID_REQUEST})
                    continue
                try:
                    b.append_txn_marker(t.name, index, m.producer_id, m.producer_epoch, m.transaction_result,
                                        m.coordinator_epoch)
                    error = ErrorCode.NONE
                except KafkaError as e:
                    error = e.code
                parts.append({"partition_index": index, "error_code": error})
            topics.append({"name": t.name, "partitions": parts})
        markers.append({"producer_id": m.producer_id, "topics": topics})
    return {"markers": markers}
