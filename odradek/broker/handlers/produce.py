"""Produce: append each partition's record set as its leader; acks 0 (no response), 1 (answered after the
leader's append) and -1 (all: answered once the high watermark covers the batch, i.e. every in-sync replica
has it, within the request's timeout — REQUEST_TIMED_OUT otherwise; NOT_ENOUGH_REPLICAS before appending
when the ISR is smaller than min.insync.replicas, NOT_ENOUGH_REPLICAS_AFTER_APPEND when it shrank below it
meanwhile). On a single node the leader's append satisfies both 1 and -1. A broker that does not lead a
partition answers NOT_LEADER_OR_FOLLOWER. An acks=all response waiting for replication is ``Deferred``: the
connection's next requests are read and appended meanwhile (their responses still go out in order), so one
connection carries more than one request per replication round trip.

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

from odradek.broker.authorization import TOPIC_DENIED, denied_topics, transactional_produce_error
from odradek.broker.context import CloseConnection, Deferred, RawResponse, RequestContext
from odradek.broker.txn_runtime import TXN_STATE_TOPIC
from odradek.protocol import apis, produce_response
from odradek.protocol.batch import HEADER_SIZE, TRANSACTIONAL_BIT, parse_header
from odradek.protocol.entities import millis
from odradek.protocol.error_counts import ErrorCounts, add_code
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.produce_response import PartitionResult
from odradek.replica.partition import Partition
from odradek.security.acl import AclOperation

log = logging.getLogger(__name__)


async def handle(ctx: RequestContext, request: Any) -> RawResponse | Deferred | None:
    b = ctx.broker
    acks = request.acks
    responses: list[tuple[str, list[PartitionResult]]] = []
    failed: PartitionResult | None = None
    failed_topic = ""
    waits: list[tuple[PartitionResult, Partition, int]] = []
    denied: frozenset[str] = frozenset()
    if b.authorizer is not None:  # the only cost of authorization on this path without an authorizer
        refused = transactional_produce_error(
            ctx, request.transactional_id, (pd.records for t in request.topic_data for pd in t.partition_data))
        if refused:
            return _refused_whole(ctx, request, refused)
        denied = denied_topics(ctx, AclOperation.WRITE, (t.name for t in request.topic_data))
    metrics = b.metrics
    for topic in request.topic_data:
        parts = []
        known = b.registry.get(topic.name)
        unauthorized = topic.name in denied
        stats = metrics.topic(topic.name)
        stats.produce_requests += 1
        topic_failed = False
        for pd in topic.partition_data:
            result = PartitionResult(pd.index)
            if acks not in (0, 1, -1):
                result.error_code = ErrorCode.INVALID_REQUIRED_ACKS
                result.error_message = f"acks={acks} is invalid: use 0, 1 or -1 (all)"
            elif unauthorized:
                result.error_code = TOPIC_DENIED
                result.error_message = f"not authorized to write to topic {topic.name}"
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
                  and (unverified := await _verify(ctx, request.transactional_id, topic.name, pd.index,
                                                   pd.records))):
                result.error_code, result.error_message = unverified
            else:
                try:
                    part, info = b.replicas.append(topic.name, pd.index, pd.records, required_acks=acks)
                    stats.messages_in += info.record_count
                    stats.bytes_in += len(pd.records)
                    result.base_offset = info.first_offset
                    result.log_append_time = info.log_append_time
                    result.log_start_offset = part.log.log_start_offset
                    # a duplicate (a retry of a batch already in the log: no records appended now) waits too: its
                    # original may still be above the high watermark, and answering at once would acknowledge
                    # records a leader change can still take away
                    if acks == -1 and part.replicated:
                        waits.append((result, part, info.last_offset + 1))
                except KafkaError as e:
                    result.error_code = e.code
                    result.error_message = e.message
                    log.info("produce to %s-%d from %s refused: %s", topic.name, pd.index, ctx.peer, e.message)
            if result.error_code:
                topic_failed = True
                if failed is None:
                    failed, failed_topic = result, topic.name
            parts.append(result)
        if topic_failed:
            stats.failed_produce_requests += 1
        responses.append((topic.name, parts))
    if waits:  # the appends are done: the connection's next requests need not wait for the replication
        futures = b.replicas.replication_waits([(part, end) for _, part, end in waits])
        return Deferred(futures, millis(request.timeout) / 1000,
                        lambda codes: _replicated(ctx.version, responses, waits, codes, ctx.throttle_ms))
    if acks == 0:
        if failed is not None:  # as Kafka: the only way to tell an acks=0 producer that something went wrong
            raise CloseConnection(f"acks=0 produce failed for {failed_topic}-{failed.index}: {failed.error_message}")
        return None
    return _response(ctx.version, responses, ctx.throttle_ms)


def _response(version: int, responses: list[tuple[str, list[PartitionResult]]], throttle_ms: int) -> RawResponse:
    errors: ErrorCounts = {}
    for _, parts in responses:
        for result in parts:
            add_code(errors, result.error_code)
    return RawResponse([produce_response.encode(version, responses, throttle_ms=throttle_ms)], errors)


def _refused_whole(ctx: RequestContext, request: Any, error: ErrorCode) -> RawResponse:
    """Every partition of the request answered ``error`` (a transactional produce without WRITE on its id); an
    acks=0 producer is told by closing its connection."""
    if request.acks == 0:
        raise CloseConnection(f"acks=0 produce refused: {error.name}")
    responses = [(t.name, [PartitionResult(pd.index, error_code=error) for pd in t.partition_data])
                 for t in request.topic_data]
    return _response(ctx.version, responses, ctx.throttle_ms)


def _replicated(version: int, responses: list[tuple[str, list[PartitionResult]]],
                waits: list[tuple[PartitionResult, Partition, int]], codes: list[ErrorCode | None],
                throttle_ms: int) -> RawResponse:
    """acks=all: the response once every in-sync replica has the appended batches (or the wait failed; None:
    not within the request's timeout)."""
    for (result, part, _), code in zip(waits, codes, strict=True):
        code = ErrorCode.REQUEST_TIMED_OUT if code is None else code
        if code is not ErrorCode.NONE:
            result.error_code = code
            result.error_message = _REPLICATION_FAILURES.get(code, code.name).format(part.name)
            result.base_offset = -1
    return _response(version, responses, throttle_ms)


async def verify_with_coordinator(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int,
                                  topic: str, partition: int) -> ErrorCode:
    """Whether the partition is in the producer's ongoing transaction, as its transaction coordinator says:
    in-process when this broker coordinates the id (always on a single node), else an AddPartitionsToTxn
    ``verify_only`` request to the coordinator (KIP-890), as Kafka's brokers ask."""
    b = ctx.broker
    view = b.txns.view()
    cluster = b.cluster
    if cluster is None or view.owned is None or view.partition_of(transactional_id) in view.owned:
        return view.verify_partitions(transactional_id, producer_id, producer_epoch,
                                      [(topic, partition)])[(topic, partition)]
    state = cluster.states.get((TXN_STATE_TOPIC, view.partition_of(transactional_id)))
    if state is None or not state.online:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    request = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                                 "producer_epoch": producer_epoch, "verify_only": True,
                                 "topics": [{"name": topic, "partitions": [partition]}]}]}
    try:
        response = await b.pool.send(state.leader, apis.ADD_PARTITIONS_TO_TXN, request, version=5)
    except Exception as e:
        log.info("verifying %s-%d with the transaction coordinator (broker %d) failed: %s", topic, partition,
                 state.leader, e)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if int(response.error_code):
        return ErrorCode(int(response.error_code))
    for txn in response.results_by_transaction:
        for t in txn.topic_results:
            for r in t.results_by_partition:
                if t.name == topic and r.partition_index == partition:
                    return ErrorCode(int(r.partition_error_code))
    return ErrorCode.UNKNOWN_SERVER_ERROR


_REPLICATION_FAILURES = {
    ErrorCode.REQUEST_TIMED_OUT: "{}: the write was not replicated to every in-sync replica within the request's "
                                 "timeout (it may still be committed later)",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "{}: the in-sync replicas fell below min.insync.replicas before the "
                                                "write was replicated",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "{}: this broker stopped leading the partition before the write was "
                                      "replicated: refresh metadata and retry",
}

_RETRIABLE = (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
              ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR)


async def _verify(ctx: RequestContext, transactional_id: str, topic: str, partition: int,
                  records: bytes | bytearray | memoryview) -> tuple[ErrorCode, str] | None:
    """None if the record set may be appended as far as the transaction is concerned, else (error, message)."""
    if len(records) < HEADER_SIZE:
        return None  # malformed: the append's validation says why
    h = parse_header(records, 0)
    if not h.attributes & TRANSACTIONAL_BIT or h.producer_id < 0:
        return None
    b = ctx.broker
    part = b.replicas.get(topic, partition)
    if part is None or part.log.ongoing_transaction_first_offset(h.producer_id) is not None:
        return None  # verified when its transaction's first batch came
    error = await verify_with_coordinator(ctx, transactional_id, h.producer_id, h.producer_epoch, topic, partition)
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
