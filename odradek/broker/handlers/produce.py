"""Produce: append each partition's record set; acks 0 (no response), 1 and -1 (one replica: the
leader's append satisfies both)."""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.context import CloseConnection, RawResponse, RequestContext
from odradek.protocol import produce_response
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.produce_response import PartitionResult

log = logging.getLogger(__name__)


async def handle(ctx: RequestContext, request: Any) -> RawResponse | None:
    b = ctx.broker
    acks = request.acks
    responses: list[tuple[str, list[PartitionResult]]] = []
    failed: PartitionResult | None = None
    failed_topic = ""
    for topic in request.topic_data:
        parts = []
        known = b.registry.get(topic.name)
        for pd in topic.partition_data:
            result = PartitionResult(pd.index)
            if acks not in (0, 1, -1):
                result.error_code = ErrorCode.INVALID_REQUIRED_ACKS
                result.error_message = f"acks={acks} is invalid: use 0, 1 or -1 (all)"
            elif known is None or not 0 <= pd.index < known.partitions:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"unknown topic-partition {topic.name}-{pd.index}"
            elif known.internal:
                result.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
                result.error_message = f"topic {topic.name} is internal to the broker: clients cannot produce to it"
            elif pd.records is None:
                result.error_code = ErrorCode.CORRUPT_MESSAGE
                result.error_message = "the record set is null"
            else:
                try:
                    info = b.append(topic.name, pd.index, pd.records)
                    result.base_offset = info.first_offset
                    result.log_append_time = info.log_append_time
                    result.log_start_offset = b.get_log(topic.name, pd.index).log_start_offset
                except KafkaError as e:
                    result.error_code = e.code
                    result.error_message = e.message
                    log.info("produce to %s-%d from %s refused: %s", topic.name, pd.index, ctx.peer, e.message)
            if result.error_code and failed is None:
                failed, failed_topic = result, topic.name
            parts.append(result)
        responses.append((topic.name, parts))
    if acks == 0:
        if failed is not None:  # as Kafka: the only way to tell an acks=0 producer that something went wrong
            raise CloseConnection(f"acks=0 produce failed for {failed_topic}-{failed.index}: {failed.error_message}")
        return None
    return RawResponse([produce_response.encode(ctx.version, responses)])
