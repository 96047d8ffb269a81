"""Transaction APIs: AddPartitionsToTxn (v0-5), AddOffsetsToTxn (v0-4), EndTxn (v0-4),
DescribeTransactions (v0), ListTransactions (v0-2).

Each turns its request into one transaction-coordinator operation (``coordinator/txn/``) and its
result into the response of the request's version; the rules live in the coordinator.

- AddPartitionsToTxn v0-3 carries one transaction (a client's); v4+ carries a batch of them, each
  possibly ``verify_only`` (KIP-890, sent by brokers; answered read-only with the coordinator's
  verification). Partitions of unknown topics fail with UNKNOWN_TOPIC_OR_PARTITION and the others of
  that transaction with OPERATION_NOT_ATTEMPTED, as in Kafka; nothing is added then.
- AddOffsetsToTxn adds the group's partition of ``__consumer_offsets`` (created if missing).
- EndTxn is answered once the PrepareCommit/PrepareAbort record is durable; the markers follow.
- PRODUCER_FENCED goes to clients that predate it as INVALID_PRODUCER_EPOCH (KIP-588).

Authorization, as Kafka's: AddPartitionsToTxn v0-3 (clients) needs WRITE on the transactional id (every partition
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic (TOPIC_AUTHORIZATION_FAILED, internal topics always;
the others then OPERATION_NOT_ATTEMPTED); v4+ (brokers) CLUSTER_ACTION on the cluster (the response's
CLUSTER_AUTHORIZATION_FAILED). AddOffsetsToTxn needs WRITE on the transactional id, then READ on the group; EndTxn
WRITE on the transactional id. DescribeTransactions needs DESCRIBE on each transactional id (its error) and lists
only the topics the principal may DESCRIBE; ListTransactions lists only the ids it may DESCRIBE.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from odradek.broker.authorization import (
    TOPIC_DENIED,
    cluster_error,
    denied_names,
    denied_topics,
    group_error,
    transactional_id_error,
)
from odradek.broker.context import RequestContext
from odradek.coordinator.group.records import partition_for as offsets_partition_for
from odradek.coordinator.txn.replies import DescribedTransaction, ListTransactionsResult, for_request_version
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import AclOperation, ResourceType

E = ErrorCode
TopicPartitions = list[tuple[str, int]]


async def _call(ctx: RequestContext, op: Any) -> Any:
    try:
        return await ctx.broker.txns.call(op)
    except KafkaError as e:
        return e.code


# -- AddPartitionsToTxn ---------------------------------------------------------------------------


def _unknown(ctx: RequestContext, partitions: TopicPartitions) -> set[tuple[str, int]]:
    registry = ctx.broker.registry
    out = set()
    for topic, p in partitions:
        known = registry.get(topic)
        if known is None or not 0 <= p < known.partitions:
            out.add((topic, p))
    return out


async def _add_partitions(ctx: RequestContext, tid: str, pid: int, epoch: int, partitions: TopicPartitions,
                          verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
    if verify_only:
        return ctx.broker.txns.view().verify_partitions(tid, pid, epoch, partitions)
    if ctx.version <= 3:  # a client's: WRITE on the transactional id and on each (non-internal) topic
        if denied_txn := transactional_id_error(ctx, AclOperation.WRITE, tid):
            return dict.fromkeys(partitions, denied_txn)
        if ctx.broker.authorizer is not None:
            registry = ctx.broker.registry
            denied = denied_topics(ctx, AclOperation.WRITE, (t for t, _ in partitions)) | {
                t for t, _ in partitions if (known := registry.get(t)) is not None and known.internal}
            if denied:
                unknown = _unknown(ctx, [tp for tp in partitions if tp[0] not in denied])
                return {tp: TOPIC_DENIED if tp[0] in denied else E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                        else E.OPERATION_NOT_ATTEMPTED for tp in partitions}
    unknown = _unknown(ctx, partitions)
    if unknown:
        return {tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else E.OPERATION_NOT_ATTEMPTED for tp in partitions}
    error = await _call(ctx, lambda c, ticket, now: c.add_partitions(ticket, tid, pid, epoch, partitions, now=now))
    error = for_request_version(error, "AddPartitionsToTxn", ctx.version)
    return dict.fromkeys(partitions, error)


def _by_topic(results: dict[tuple[str, int], ErrorCode]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), error in results.items():
        topics.setdefault(topic, []).append({"partition_index": p, "partition_error_code": error})
    return [{"name": t, "results_by_partition": parts} for t, parts in topics.items()]


def _partitions(topics: Any) -> TopicPartitions:
    return [(t.name, p) for t in topics for p in t.partitions]


async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.version <= 3:
        results = await _add_partitions(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                                        request.v3_and_below_producer_epoch,
                                        _partitions(request.v3_and_below_topics), False)
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _by_topic(results)}
    if denied_cluster := cluster_error(ctx, AclOperation.CLUSTER_ACTION):  # v4+ come from brokers
        return {"throttle_time": 0, "error_code": denied_cluster, "results_by_transaction": []}
    out = []
    for txn in request.transactions:
        results = await _add_partitions(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                        _partitions(txn.topics), txn.verify_only)
        out.append({"transactional_id": txn.transactional_id, "topic_results": _by_topic(results)})
    return {"throttle_time": 0, "error_code": E.NONE, "results_by_transaction": out}


# -- AddOffsetsToTxn / EndTxn ----------------------------------------------------------------------


async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> dict[str, Any]:
    denied = transactional_id_error(ctx, AclOperation.WRITE, request.transactional_id) or \
        group_error(ctx, AclOperation.READ, request.group_id)
    if denied:
        return {"throttle_time": 0, "error_code": denied}
    if not request.group_id:
        return {"throttle_time": 0, "error_code": E.INVALID_GROUP_ID}
    groups = ctx.broker.groups.ensure_started()
    part = offsets_partition_for(request.group_id, groups.num_partitions)
    error = await _call(ctx, lambda c, ticket, now: c.add_offsets(
        ticket, request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, part,
        now=now))
    return {"throttle_time": 0, "error_code": for_request_version(error, "AddOffsetsToTxn", ctx.version)}


async def handle_end_txn(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if denied := transactional_id_error(ctx, AclOperation.WRITE, request.transactional_id):
        return {"throttle_time": 0, "error_code": denied, "producer_id": -1, "producer_epoch": -1}
    error = await _call(ctx, lambda c, ticket, now: c.end_txn(
        ticket, request.transactional_id, request.producer_id, request.producer_epoch, request.committed, now=now))
    return {"throttle_time": 0, "error_code": for_request_version(error, "EndTxn", ctx.version),
            "producer_id": request.producer_id, "producer_epoch": request.producer_epoch}


# -- DescribeTransactions / ListTransactions --------------------------------------------------------


def _described(d: DescribedTransaction) -> dict[str, Any]:
    start = datetime.datetime.fromtimestamp(max(d.start_ms, 0) / 1000, tz=datetime.UTC) if d.start_ms >= 0 else \
        datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
    return {"error_code": d.error, "transactional_id": d.transactional_id, "transaction_state": d.state,
            "transaction_timeout": d.timeout_ms, "transaction_start_time": start, "producer_id": d.producer_id,
            "producer_epoch": d.producer_epoch,
            "topics": [{"topic": t, "partitions": list(ps)} for t, ps in d.topics]}


async def handle_describe_transactions(ctx: RequestContext, request: Any) -> dict[str, Any]:
    ids = list(request.transactional_ids)
    refused = denied_names(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, ids)
    described = iter(ctx.broker.txns.view().describe([t for t in ids if t not in refused]))
    states = [_refused_transaction(t) if t in refused else _described(next(described)) for t in ids]
    if ctx.broker.authorizer is not None:  # only the topics the principal may describe
        hidden = denied_topics(ctx, AclOperation.DESCRIBE, (t["topic"] for s in states for t in s["topics"]))
        for state in states:
            state["topics"] = [t for t in state["topics"] if t["topic"] not in hidden]
    return {"throttle_time": 0, "transaction_states": states}


def _refused_transaction(transactional_id: str) -> dict[str, Any]:
    return {"error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional_id": transactional_id,
            "transaction_state": "", "transaction_timeout": 0,
            "transaction_start_time": datetime.datetime.fromtimestamp(0, tz=datetime.UTC), "producer_id": -1,
            "producer_epoch": -1, "topics": []}


async def handle_list_transactions(ctx: RequestContext, request: Any) -> dict[str, Any]:
    b = ctx.broker
    duration = request.duration_filter if ctx.version >= 1 else -1
    result: ListTransactionsResult = b.txns.view().list_transactions(
        list(request.state_filters), list(request.producer_id_filters), duration, now=b.clock.milliseconds())
    listed = result.transactions
    pattern = getattr(request, "transactional_id_pattern", None)
    if pattern:
        try:
            regex = re.compile(pattern)
        except re.error:
            return {"throttle_time": 0, "error_code": E.INVALID_REGULAR_EXPRESSION, "unknown_state_filters": [],
                    "transaction_states": []}
        listed = tuple(t for t in listed if regex.fullmatch(t.transactional_id))
    hidden = denied_names(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                          (t.transactional_id for t in listed))
    listed = tuple(t for t in listed if t.transactional_id not in hidden)
    return {"throttle_time": 0, "error_code": result.error,
            "unknown_state_filters": list(result.unknown_state_filters),
            "transaction_states": [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                    "transaction_state": t.state} for t in listed]}
