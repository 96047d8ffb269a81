"""Produce: append each partition's record set; acks 0 (no response), 1 and -1 (one replica: the
leader's append satisfies both).

Transactional produce (KIP-890 part 1, ``transaction.partition.verification.enable``): before a
producer's first transactional batch in a partition (the partition has no ongoing transaction of
that producer), the transaction coordinator is asked whether the partition is in the producer's
transaction. If not, the batch is refused: INVALID_TXN_STATE (TRANSACTION_ABORTABLE from Produce
v11), so a late batch of an aborted or timed-out transaction never opens a transaction that nothing
would ever end (a "hanging transaction", which would hold back the last stable offset for good).
Retriable coordinator states (loading, a transaction completing) answer NOT_ENOUGH_REPLICAS, which
producers retry, as Kafka does.
"""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.context import CloseConnection, RawResponse, RequestContext
from odradek.protocol import produce_response
from odradek.protocol.batch import HEADER_SIZE, TRANSACTIONAL_BIT, parse_header
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
            elif (request.transactional_id is not None and b.config.txn_partition_verification
                  and (unverified := _verify(ctx, request.transactional_id, topic.name, pd.index, pd.records))):
                result.error_code, result.error_message = unverified
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


_RETRIABLE = (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
              ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR)


def _verify(ctx: RequestContext, transactional_id: str, topic: str, partition: int,
            records: bytes | bytearray | memoryview) -> tuple[ErrorCode, str] | None:
    """None if the record set may be appended as far as the transaction is concerned, else (error, message)."""
    if len(records) < HEADER_SIZE:
        return None  # malformed: the append's validation says why
    h = parse_header(records, 0)
    if not h.attributes & TRANSACTIONAL_BIT or h.producer_id < 0:
        return None
    b = ctx.broker
    if b.get_log(topic, partition).ongoing_transaction_first_offset(h.producer_id) is not None:
        return None  # verified when its transaction's first batch came
    error = b.txns.view().verify_partitions(transactional_id, h.producer_id, h.producer_epoch,
                                            [(topic, partition)])[(topic, partition)]
    if error is ErrorCode.NONE:
        return None
    if error in _RETRIABLE:
        return (ErrorCode.NOT_ENOUGH_REPLICAS,
                f"the transaction coordinator cannot confirm {topic}-{partition} yet ({error.name}): retry")
    if error is ErrorCode.TRANSACTION_ABORTABLE:
        code = ErrorCode.TRANSACTION_ABORTABLE if ctx.version >= 11 else ErrorCode.INVALID_TXN_STATE
        return (code, f"{topic}-{partition} is not in the ongoing transaction of {transactional_id!r}: "
                      "add it with AddPartitionsToTxn first (the transaction must be aborted)")
    if error is ErrorCode.PRODUCER_FENCED:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return (error, f"transactional id {transactional_id!r} with producer {h.producer_id} epoch "
                   f"{h.producer_epoch}: {error.name}")
