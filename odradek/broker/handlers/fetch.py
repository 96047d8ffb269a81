"""Fetch: long polling, fetch sessions, isolation levels, and record sets sent with sendfile.

Per partition: records from ``fetch_offset`` up to the high watermark (read_uncommitted) or the last
stable offset (read_committed: nothing of an undecided transaction), at most
``partition_max_bytes``, within the response's ``max_bytes``; the first batch of the first
partition with data is returned whole even if it is larger (so consumers always progress). If
fewer than ``min_bytes`` are available the request waits up to ``max_wait_ms`` for an append to any
of its partitions (a transaction marker notifies too, so a read_committed fetch wakes when the last
stable offset moves), re-reading until enough is visible or the time is up.

A partition's leader serves consumers, after checking ``current_leader_epoch`` (FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH). Fetching from the closest replica (KIP-392): from v11 a follower serves consumers too,
up to its own high watermark; with ``replica.selector.class`` = Kafka's RackAwareReplicaSelector, a leader
asked by a client whose ``rack_id`` is not its own rack names an in-sync follower of that rack as
``preferred_read_replica`` (and returns no records), as Kafka's leader does. Any other broker answers
NOT_LEADER_OR_FOLLOWER, with the current leader as KIP-951 suggests.
Fetches from follower replicas (``replica_state``/``replica_id``) go to ``replica_fetch.py``.

A client over its ``consumer_byte_rate`` quota gets no records: the answer is empty and carries the throttle
time (the bytes are not charged), and one fetch never asks for more than the quota lets through in one window
(Kafka's throttled fetch). Any other throttle time (``request_percentage``) goes into the answer too.

Every partition reports its real last stable offset, whatever the isolation level (as Kafka does).
A read_committed answer lists the aborted transactions overlapping the range it returns,
``[fetch_offset, offset after its last batch)``; batches are still sent as stored (no filtering, no
decoding): the consumer drops the aborted producers' records using that list, as with Kafka. A
read_uncommitted answer has no list (null).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from odradek.broker.authorization import TOPIC_DENIED, denied_topics
from odradek.broker.context import RawResponse, RequestContext
from odradek.broker.fetch_session import FetchSession, FetchSessionCache, SessionPartition
from odradek.broker.handlers import replica_fetch
from odradek.metrics.broker_metrics import BrokerMetrics
from odradek.protocol import fetch_response as fr
from odradek.protocol.entities import millis
from odradek.protocol.error_counts import ErrorCounts, add_code
from odradek.protocol.errors import ErrorCode, KafkaError, OffsetOutOfRangeError
from odradek.replica.partition import Partition, Role
from odradek.security.acl import AclOperation

READ_COMMITTED = 1
_ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class _Want:
    topic: str
    topic_id: uuid.UUID
    partition: int
    state: SessionPartition
    error: int = 0


async def handle(ctx: RequestContext, request: Any) -> RawResponse:
    b = ctx.broker
    v = ctx.version
    replica_state = getattr(request, "replica_state", None)
    replica_id = replica_state.replica_id if replica_state is not None else getattr(request, "replica_id", -1)
    if replica_id >= 0:
        epoch_sent = replica_state.replica_epoch if replica_state is not None else -1
        return await replica_fetch.handle(ctx, request, replica_id, epoch_sent)
    now = b.clock.milliseconds()
    session_id = request.session_id if v >= 7 else 0
    epoch = request.session_epoch if v >= 7 else -1
    cache = b.fetch_sessions
    session: FetchSession | None = None
    incremental = False

    if epoch == -1:
        if session_id:
            cache.remove(session_id)
        wants = _requested(ctx, request)
    elif epoch == 0:
        if session_id:
            cache.remove(session_id)
        wants = _requested(ctx, request)
        session = cache.create(now)
        if session is not None:
            for w in wants:
                session.partitions[(w.topic, w.partition)] = w.state
    else:
        session = cache.get(session_id)
        if session is None:
            return RawResponse(fr.encode(v, [], error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
                               {ErrorCode.FETCH_SESSION_ID_NOT_FOUND: 1})
        if epoch != session.next_epoch:
            return RawResponse(fr.encode(v, [], error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                                         session_id=session.session_id), {ErrorCode.INVALID_FETCH_SESSION_EPOCH: 1})
        incremental = True
        for forgotten in request.forgotten_topics_data or ():
            name = _topic_name(ctx, forgotten)
            for p in forgotten.partitions:
                session.partitions.pop((name, p), None)
        for w in _requested(ctx, request):
            old = session.partitions.get((w.topic, w.partition))
            if old is not None:
                w.state.sent_high_watermark = old.sent_high_watermark
                w.state.sent_last_stable_offset = old.sent_last_stable_offset
                w.state.sent_log_start_offset = old.sent_log_start_offset
            session.partitions[(w.topic, w.partition)] = w.state
        wants = [_want_from_session(ctx, key, state) for key, state in session.partitions.items()]
    if b.authorizer is not None:  # consumers need READ on each topic, asked once per topic per request
        _authorize(ctx, wants)

    max_bytes = min(request.max_bytes, b.config.fetch_max_bytes) if request.max_bytes > 0 else 0
    quota = ctx.quota.fetch if ctx.quota is not None else None
    if quota is not None:  # no more than the quota lets through in one window, as Kafka caps it
        max_bytes = min(max_bytes, max(int(b.quotas.max_value_in_window(quota)), 1))
    max_wait = millis(request.max_wait)
    min_bytes = request.min_bytes
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    client = _Client(v >= 11, getattr(request, "rack_id", "") or "" if b.config.rack_aware_fetch else "")
    deadline = time.monotonic() + max_wait / 1000
    while True:
        topics, total, errors = _read(ctx, wants, max_bytes, read_committed, client)
        remaining_ms = (deadline - time.monotonic()) * 1000
        if total >= min_bytes or errors or remaining_ms <= 0 or not wants or b.shutting_down:
            break
        await b.wait_for_data([(w.topic, w.partition) for w in wants], int(remaining_ms) + 1)
        if time.monotonic() >= deadline:
            topics, total, errors = _read(ctx, wants, max_bytes, read_committed, client)
            break

    sent_states: list[tuple[SessionPartition, fr.PartitionData]] = []
    if session is not None:
        topics, sent_states = _select(session, topics, incremental)
    response = RawResponse(fr.encode(v, topics, session_id=session.session_id if session is not None else 0))
    throttle = ctx.throttle_ms
    if quota is not None or throttle:  # charged the size of the response as it would be sent, as Kafka does
        throttle = max(throttle, b.quotas.record(quota, response.size))
        if throttle:  # Kafka's throttled fetch: nothing sent (nor charged), the client comes back later
            b.quotas.unrecord(quota, response.size)
            ctx.throttle_ms = throttle
            return _throttled(cache, session, incremental, v, now, throttle)
    response.errors = _count(b.metrics, topics)
    if session is not None:
        for state, pd in sent_states:  # the session remembers what went out
            state.sent_high_watermark = pd.high_watermark
            state.sent_last_stable_offset = pd.last_stable_offset
            state.sent_log_start_offset = pd.log_start_offset
        if incremental:  # a new session already expects epoch 1
            session.advance(now)
    return response


def _count(metrics: BrokerMetrics, topics: list[fr.TopicData]) -> ErrorCounts:
    """Per topic of a consumer's fetch that goes out: one fetch request, a failed one if a partition has an error
    (Kafka's FailedFetchRequestsPerSec), and the bytes of its record sets (BytesOutPerSec). Returns the response's
    error codes: its own (none) and each partition's."""
    errors: ErrorCounts = {ErrorCode.NONE: 1}
    for td in topics:
        stats = metrics.topic(td.name)
        stats.fetch_requests += 1
        failed = False
        for pd in td.partitions:
            if pd.records is not None:
                stats.bytes_out += pd.records.length
            add_code(errors, pd.error_code)
            if pd.error_code:
                failed = True
        if failed:
            stats.failed_fetch_requests += 1
    return errors


def _authorize(ctx: RequestContext, wants: list[_Want]) -> None:
    """TOPIC_AUTHORIZATION_FAILED on the partitions of topics the consumer may not READ (before telling whether
    they exist; an unknown topic id stays UNKNOWN_TOPIC_ID, as in Kafka)."""
    denied = denied_topics(ctx, AclOperation.READ, (w.topic for w in wants if w.error != ErrorCode.UNKNOWN_TOPIC_ID))
    if denied:
        for w in wants:
            if w.topic in denied and w.error != ErrorCode.UNKNOWN_TOPIC_ID:
                w.error = TOPIC_DENIED


def _throttled(cache: FetchSessionCache, session: FetchSession | None, incremental: bool, v: int, now: int,
               throttle_ms: int) -> RawResponse:
    """An empty answer with the throttle time. A session asked for by this fetch is not created (the client
    starts over with a full fetch); an incremental one keeps its partitions and moves to its next epoch."""
    if session is not None and not incremental:
        cache.remove(session.session_id)
        session = None
    if session is not None:
        session.advance(now)
    return RawResponse(fr.encode(v, [], session_id=session.session_id if session is not None else 0,
                                 throttle_ms=throttle_ms), {ErrorCode.NONE: 1})


def _topic_name(ctx: RequestContext, t: Any) -> str:
    name = getattr(t, "topic", None)
    if name is not None:
        return str(name)
    found = ctx.broker.registry.by_id(t.topic_id)
    return found.name if found is not None else f"<unknown topic id {t.topic_id}>"


def _requested(ctx: RequestContext, request: Any) -> list[_Want]:
    wants = []
    for t in request.topics:
        name = _topic_name(ctx, t)
        topic = ctx.broker.registry.get(name)
        topic_id = getattr(t, "topic_id", None) or (topic.topic_id if topic is not None else _ZERO_UUID)
        for p in t.partitions:
            state = SessionPartition(p.fetch_offset, p.partition_max_bytes, getattr(p, "current_leader_epoch", -1))
            wants.append(_want(ctx, name, topic_id, p.partition, state, by_id=hasattr(t, "topic_id")))
    return wants


def _want_from_session(ctx: RequestContext, key: tuple[str, int], state: SessionPartition) -> _Want:
    topic = ctx.broker.registry.get(key[0])
    return _want(ctx, key[0], topic.topic_id if topic is not None else _ZERO_UUID, key[1], state, by_id=False)


def _want(ctx: RequestContext, name: str, topic_id: uuid.UUID, partition: int, state: SessionPartition,
          *, by_id: bool) -> _Want:
    topic = ctx.broker.registry.get(name)
    error = 0
    if topic is None:
        error = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    elif partition >= topic.partitions or partition < 0:
        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return _Want(name, topic_id, partition, state, error)


@dataclass(frozen=True, slots=True)
class _Client:
    follower_reads: bool  # Fetch v11+ carries client metadata: followers may serve it (KIP-392)
    rack: str  # the client's rack when the broker selects replicas by rack, else ""


def _serving_partition(ctx: RequestContext, w: _Want, client: _Client) -> Partition:
    """The partition replica that serves this read: the leader, or (v11+) a follower; else the leader lookup's
    NOT_LEADER_OR_FOLLOWER. The client's leader epoch is checked either way."""
    part = ctx.broker.replicas.get(w.topic, w.partition)
    if part is None or not (part.is_leader or (client.follower_reads and part.role is Role.FOLLOWER)):
        part = ctx.broker.replicas.leader_partition(w.topic, w.partition)
    part.check_epoch(w.state.current_leader_epoch)
    return part


def _preferred_replica(ctx: RequestContext, part: Partition, rack: str) -> int | None:
    """Kafka's RackAwareReplicaSelector: an in-sync follower in the client's rack when this leader is not in it
    (the first in assignment order); None to serve it here."""
    b = ctx.broker
    cluster = b.cluster
    if cluster is None or b.config.rack == rack:
        return None
    for r in part.replicas:
        reg = cluster.brokers.get(r)
        if r != b.node_id and r in part.isr and reg is not None and reg.rack == rack:
            return r
    return None


def _read(
    ctx: RequestContext, wants: list[_Want], max_bytes: int, read_committed: bool, client: _Client
) -> tuple[list[fr.TopicData], int, int]:
    by_topic: dict[str, fr.TopicData] = {}
    remaining = max_bytes
    min_one = True
    total = 0
    errors = 0
    for w in wants:
        td = by_topic.get(w.topic)
        if td is None:
            td = by_topic[w.topic] = fr.TopicData(w.topic, w.topic_id)
        pd = fr.PartitionData(w.partition)
        td.partitions.append(pd)
        if w.error:
            pd.error_code = w.error
            errors += 1
            continue
        try:
            part = _serving_partition(ctx, w, client)
        except KafkaError as e:
            pd.error_code = e.code
            if e.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
                pd.current_leader = replica_fetch.current_leader(ctx, w.topic, w.partition)
            errors += 1
            continue
        lg = part.log
        high_watermark = lg.high_watermark
        last_stable = lg.last_stable_offset
        visible_end = last_stable if read_committed else high_watermark
        pd.high_watermark = high_watermark
        pd.last_stable_offset = last_stable
        pd.log_start_offset = lg.log_start_offset
        pd.aborted_transactions = [] if read_committed else None
        if client.rack and part.is_leader:
            preferred = _preferred_replica(ctx, part, client.rack)
            if preferred is not None:
                pd.preferred_read_replica = preferred  # the client fetches from there; no records from here
                continue
        if w.state.fetch_offset > visible_end and w.state.fetch_offset <= lg.next_offset:
            continue  # above what this isolation level may see but inside the log: nothing visible yet
        limit = min(w.state.max_bytes, remaining)
        if limit <= 0 and not min_one:
            continue
        try:
            region = lg.read(w.state.fetch_offset, max(limit, 0), max_offset=visible_end, min_one=min_one)
        except OffsetOutOfRangeError:
            pd.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            errors += 1
            continue
        except KafkaError as e:
            pd.error_code = e.code
            errors += 1
            continue
        if region is not None and region.length:
            if read_committed:
                pd.aborted_transactions = lg.aborted_transactions(w.state.fetch_offset, region.end_offset)
            pd.records = region
            total += region.length
            remaining -= region.length
            min_one = False
    return list(by_topic.values()), total, errors


def _select(session: FetchSession, topics: list[fr.TopicData], incremental: bool
            ) -> tuple[list[fr.TopicData], list[tuple[SessionPartition, fr.PartitionData]]]:
    """What goes out (for incremental fetches only the partitions worth sending), and the session's partition
    states with what each would be told. The session itself is not changed: the caller updates those states
    only once the response goes out (a throttled fetch sends nothing)."""
    out = []
    sent: list[tuple[SessionPartition, fr.PartitionData]] = []
    for td in topics:
        kept = []
        for pd in td.partitions:
            state = session.partitions.get((td.name, pd.partition_index))
            changed = state is None or (
                pd.records is not None or pd.error_code != 0
                or pd.high_watermark != state.sent_high_watermark
                or pd.last_stable_offset != state.sent_last_stable_offset
                or pd.log_start_offset != state.sent_log_start_offset
            )
            if state is not None:
                sent.append((state, pd))
            if changed or not incremental:
                kept.append(pd)
        if kept:
            td.partitions = kept
            out.append(td)
    return out, sent
