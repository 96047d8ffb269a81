"""Fetch from a follower replica (``replica_state.replica_id`` >= 0, or ``replica_id`` before v15).

The leader's side of replication (Kafka's ``Partition.fetchRecords`` for followers). Per partition:

1. this broker must lead it (NOT_LEADER_OR_FOLLOWER) and the follower must be one of its replicas
   (NOT_LEADER_OR_FOLLOWER, as Kafka answers a replica it does not know);
2. ``current_leader_epoch`` is checked (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH);
3. ``last_fetched_epoch`` (KIP-320): if the leader's log ends that epoch before ``fetch_offset``, or does not
   know the epoch, the answer is ``diverging_epoch`` = (the largest epoch <= it, where that epoch ends) and no
   records: the follower truncates and asks again;
4. otherwise the fetch offset is the follower's log end: the leader records it (which may move the high
   watermark and add the follower to the ISR) and returns batches from there up to its own log end (not the
   high watermark), as stored.

A follower needs CLUSTER_ACTION on the cluster (brokers' principals are super users in a secured cluster):
without it every partition is TOPIC_AUTHORIZATION_FAILED and nothing changes, as Kafka answers.

A fetch with a broker epoch older than the one the follower's registration has (a zombie's) is refused with
STALE_BROKER_EPOCH and changes nothing. No fetch sessions: followers send full fetches. If nothing is there
yet the fetch waits up to ``max_wait_ms`` for an append.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from odradek.broker.authorization import TOPIC_DENIED, allowed_on_cluster
from odradek.broker.context import RawResponse, RequestContext
from odradek.protocol import fetch_response as fr
from odradek.protocol.entities import millis
from odradek.protocol.error_counts import ErrorCounts, add_code
from odradek.protocol.errors import ErrorCode, KafkaError, NotLeaderOrFollowerError
from odradek.replica.partition import Partition
from odradek.replica.throttle import ReplicationThrottle
from odradek.security.acl import AclOperation

_ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class _Want:
    topic: str
    topic_id: uuid.UUID
    partition: int
    fetch_offset: int
    max_bytes: int
    data: fr.PartitionData
    part: Partition | None = None


def current_leader(ctx: RequestContext, topic: str, partition: int) -> tuple[int, int] | None:
    """(leader id, leader epoch) as this broker knows it, for KIP-951's ``current_leader`` field."""
    cluster = ctx.broker.cluster
    if cluster is None:
        return None
    state = cluster.states.get((topic, partition))
    return (state.leader, state.leader_epoch) if state is not None else None


async def handle(ctx: RequestContext, request: Any, replica_id: int, broker_epoch: int) -> RawResponse:
    b = ctx.broker
    v = ctx.version
    stale = False
    if b.cluster is not None and broker_epoch >= 0:
        known = b.cluster.brokers.get(replica_id)
        stale = known is not None and broker_epoch < known.epoch
    wants: list[_Want] = []
    unauthorized = b.authorizer is not None and not allowed_on_cluster(ctx, AclOperation.CLUSTER_ACTION)
    immediate = stale or unauthorized
    by_topic: dict[str, fr.TopicData] = {}
    for t in request.topics:
        name = getattr(t, "topic", None)
        topic_id = getattr(t, "topic_id", None) or _ZERO_UUID
        if name is None:
            found = b.registry.by_id(topic_id)
            name = found.name if found is not None else None
        key = name if name is not None else str(topic_id)
        td = by_topic.get(key)
        if td is None:
            td = by_topic[key] = fr.TopicData(name or "", topic_id)
        for p in t.partitions:
            pd = fr.PartitionData(p.partition)
            td.partitions.append(pd)
            if unauthorized:
                pd.error_code = TOPIC_DENIED
                continue
            if name is None:
                pd.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                continue
            if stale:
                pd.error_code = ErrorCode.STALE_BROKER_EPOCH
                continue
            w = _Want(name, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes, pd)
            try:
                _prepare(ctx, w, replica_id, broker_epoch, p)
            except KafkaError as e:
                pd.error_code = e.code
                if e.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
                    pd.current_leader = current_leader(ctx, name, p.partition)
                immediate = True
                continue
            if w.part is not None:
                wants.append(w)
            else:
                immediate = True  # a diverging epoch or an out-of-range offset: answer at once
    max_bytes = min(request.max_bytes, b.config.fetch_max_bytes) if request.max_bytes > 0 else 0
    deadline = time.monotonic() + millis(request.max_wait) / 1000
    while True:
        total = _read(wants, max_bytes, replica_id, b.leader_throttle)
        remaining_ms = (deadline - time.monotonic()) * 1000
        if total >= request.min_bytes or immediate or remaining_ms <= 0 or not wants or b.shutting_down:
            break
        await b.wait_for_data([(w.topic, w.partition) for w in wants], int(remaining_ms) + 1)
    b.metrics.replication_bytes_out += total
    errors: ErrorCounts = {ErrorCode.NONE: 1}
    for td in by_topic.values():
        for pd in td.partitions:
            add_code(errors, pd.error_code)
    return RawResponse(fr.encode(v, list(by_topic.values())), errors)


def _prepare(ctx: RequestContext, w: _Want, replica_id: int, broker_epoch: int, p: Any) -> None:
    b = ctx.broker
    part = b.replicas.leader_partition(w.topic, w.partition)
    if replica_id not in part.replicas:
        raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {part.name}")
    part.check_epoch(p.current_leader_epoch)
    lg = part.log
    pd = w.data
    last_fetched = getattr(p, "last_fetched_epoch", -1)
    if last_fetched >= 0:
        epoch, end = lg.leader_epochs.end_offset_for(last_fetched, lg.next_offset)
        if epoch != last_fetched or end < w.fetch_offset:
            pd.diverging_epoch = (epoch, end)
            _fill(pd, part)
            return
    if w.fetch_offset < lg.log_start_offset or w.fetch_offset > lg.next_offset:
        _fill(pd, part)
        pd.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
        return
    b.replicas.on_replica_fetch(part, replica_id, w.fetch_offset, getattr(p, "log_start_offset", -1), broker_epoch)
    w.part = part


def _fill(pd: fr.PartitionData, part: Partition) -> None:
    lg = part.log
    pd.high_watermark = lg.high_watermark
    pd.last_stable_offset = lg.last_stable_offset
    pd.log_start_offset = lg.log_start_offset


def _read(wants: list[_Want], max_bytes: int, replica_id: int, throttle: ReplicationThrottle) -> int:
    total = 0
    remaining = max_bytes
    for w in wants:
        part = w.part
        assert part is not None
        pd = w.data
        _fill(pd, part)
        in_sync = replica_id in part.isr
        if throttle.holds_back(w.topic, w.partition, in_sync):  # leader.replication.throttled.rate used up
            pd.records = None
            continue
        limit = min(w.max_bytes, remaining)
        if limit <= 0 and total:
            pd.records = None
            continue
        try:
            region = part.log.read(w.fetch_offset, max(limit, 0), min_one=total == 0)
        except KafkaError as e:
            pd.error_code = e.code
            continue
        pd.records = region if region is not None and region.length else None
        if pd.records is not None:
            total += region.length  # type: ignore[union-attr]
            remaining -= region.length  # type: ignore[union-attr]
            if not in_sync and throttle.is_throttled(w.topic, w.partition):
                throttle.record(region.length)  # type: ignore[union-attr]
    return total
