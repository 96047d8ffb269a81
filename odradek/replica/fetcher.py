"""Followers fetching from leaders: Kafka's replica fetcher, over Kafka's own Fetch request.

One task per leader broker (``num.replica.fetchers`` = 1) fetches every partition this broker follows from
that leader in one Fetch (v15+: ``replica_state`` with this broker's id and broker epoch;
``current_leader_epoch`` and ``last_fetched_epoch`` per partition), waits up to ``replica.fetch.wait.max.ms``
for data, and for each partition in the answer:

- records: appended as the leader's bytes (offsets and leader epochs kept, producer state rebuilt from them);
  the high watermark follows the leader's, bounded by the local log end; the log start follows the leader's;
- ``diverging_epoch``: the local tail after the point where it diverges from the leader's is cut
  (``isr.truncation_offset``: the smaller of the leader's end offset for that epoch and ours), then fetching
  resumes from there — so a follower of a new leader drops what the old leader wrote and nobody committed;
- OFFSET_OUT_OF_RANGE below the leader's log start: the local log restarts empty at the leader's log start;
- NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC...: this partition waits
  ``replica.fetch.backoff.ms``; the partition state from ZooKeeper will say who leads now.

Replication throttles (``replica/throttle.py``): a partition whose replica here is throttled on the follower
side and outside the ISR is left out of the fetch while ``follower.replication.throttled.rate`` is used up.

A connection error backs the whole task off. Appends run on the event loop in slices the size of one fetch
(``replica.fetch.max.bytes`` per partition, ``replica.fetch.response.max.bytes`` per response).

Invariants: a partition is fetched only while this broker follows it with a known leader; the fetch offset is
always the local log end offset; the leader epoch sent is the one of the applied state.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.metrics.broker_metrics import BrokerMetrics
from odradek.protocol import apis, entities
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.replica.isr import truncation_offset
from odradek.replica.manager import ReplicaManager
from odradek.replica.partition import Partition, Role
from odradek.replica.throttle import ReplicationThrottle

log = logging.getLogger(__name__)

FETCH_VERSION = 15  # the first with replica_state; our brokers serve up to 17


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    max_bytes: int = 1 << 20  # replica.fetch.max.bytes (per partition)
    response_max_bytes: int = 10 << 20  # replica.fetch.response.max.bytes
    wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms


class ReplicaFetcher:
    def __init__(self, replicas: ReplicaManager, pool: Any, *, config: FetcherConfig,
                 broker_epoch: Callable[[], int], topic_id: Callable[[str], uuid.UUID | None],
                 throttle: ReplicationThrottle | None = None, metrics: BrokerMetrics | None = None) -> None:
        self.replicas = replicas
        self.metrics = metrics
        self.throttle = throttle
        self.pool = pool
        self.config = config
        self.broker_epoch = broker_epoch
        self.topic_id = topic_id
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._backoff_until: dict[tuple[str, int], float] = {}
        self._wake: dict[int, asyncio.Event] = {}
        self.running = True

    # -- planning ----------------------------------------------------------------------------------

    def replan(self) -> None:
        """Start a task for every leader we follow a partition of; tasks with nothing to fetch end by themselves."""
        if not self.running:
            return
        self._backoff_until.clear()  # a partition backed off under its old leader may fetch from the new one now
        leaders = {p.leader_id for p in self.replicas.followed().values()}
        for leader in leaders:
            task = self._tasks.get(leader)
            if task is None or task.done():
                self._wake[leader] = asyncio.Event()
                self._tasks[leader] = asyncio.get_running_loop().create_task(self._run(leader),
                                                                             name=f"replica-fetcher-{leader}")
            else:
                self._wake[leader].set()

    async def stop(self) -> None:
        self.running = False
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    # -- one leader --------------------------------------------------------------------------------

    def _partitions_of(self, leader: int) -> list[Partition]:
        now = time.monotonic()
        local, th = self.replicas.local_id, self.throttle
        return [p for p in self.replicas.followed().values()
                if p.leader_id == leader and self._backoff_until.get((p.topic, p.index), 0) <= now
                and (th is None or not th.holds_back(p.topic, p.index, local in p.isr))]

    async def _run(self, leader: int) -> None:
        cfg = self.config
        backoff = cfg.backoff_ms / 1000
        while self.running:
            parts = self._partitions_of(leader)
            if not parts:
                if not any(p.leader_id == leader for p in self.replicas.followed().values()):
                    return
                await self._sleep(leader, 0.1)
                continue
            request, sent = self._request(parts)
            if not sent:
                await self._sleep(leader, backoff)
                continue
            try:
                response = await self.pool.send(leader, apis.FETCH, request, version=FETCH_VERSION,
                                                 timeout_ms=cfg.socket_timeout_ms + cfg.wait_max_ms)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("fetching from broker %d failed (%s); retrying in %d ms", leader, e, cfg.backoff_ms)
                await self._sleep(leader, backoff)
                continue
            if response.error_code != 0:
                log.warning("broker %d refused our fetch: %s", leader, ErrorCode(int(response.error_code)).name)
                await self._sleep(leader, backoff)
                continue
            try:
                self._handle(leader, response, sent)
            except Exception:
                log.exception("handling a fetch response from broker %d failed", leader)
                await self._sleep(leader, backoff)

    async def _sleep(self, leader: int, seconds: float) -> None:
        ev = self._wake.get(leader)
        if ev is None:
            await asyncio.sleep(seconds)
            return
        ev.clear()
        try:
            await asyncio.wait_for(ev.wait(), seconds)
        except TimeoutError:
            pass

    def _request(self, parts: list[Partition]) -> tuple[Any, dict[tuple[uuid.UUID, int], tuple[Partition, int]]]:
        cfg = self.config
        by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
        sent: dict[tuple[uuid.UUID, int], tuple[Partition, int]] = {}
        for p in parts:
            tid = self.topic_id(p.topic)
            if tid is None:
                continue
            lg = p.log
            last_epoch = lg.leader_epochs.latest_epoch
            by_topic.setdefault(tid, []).append({
                "partition": p.index, "current_leader_epoch": p.leader_epoch, "fetch_offset": lg.next_offset,
                "last_fetched_epoch": last_epoch if last_epoch is not None else -1,
                "log_start_offset": lg.log_start_offset, "partition_max_bytes": cfg.max_bytes,
            })
            sent[(tid, p.index)] = (p, p.leader_epoch)
        request = entities.build(apis.request_class(apis.FETCH, FETCH_VERSION), {
            "replica_state": {"replica_id": self.replicas.local_id, "replica_epoch": self.broker_epoch()},
            "max_wait": cfg.wait_max_ms, "min_bytes": cfg.min_bytes, "max_bytes": cfg.response_max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()],
            "forgotten_topics_data": [], "rack_id": "",
        })
        return request, sent

    def _handle(self, leader: int, response: Any, sent: dict[tuple[uuid.UUID, int], tuple[Partition, int]]) -> None:
        for topic in response.responses:
            for pd in topic.partitions:
                entry = sent.get((topic.topic_id, pd.partition_index))
                if entry is None:
                    continue
                part, epoch = entry
                # the state may have changed while the fetch was out: drop answers for another epoch or role
                if part.role is not Role.FOLLOWER or part.leader_id != leader or part.leader_epoch != epoch:
                    continue
                if self.replicas.get(part.topic, part.index) is not part:
                    continue
                self._handle_partition(part, pd)

    def _handle_partition(self, part: Partition, pd: Any) -> None:
        code = ErrorCode(int(pd.error_code))
        key = (part.topic, part.index)
        if code is ErrorCode.NONE:
            div = pd.diverging_epoch
            if div is not None and div.epoch >= 0 and div.end_offset >= 0:
                lg = part.log
                local = lg.leader_epochs.end_offset_for(div.epoch, lg.next_offset)
                target = truncation_offset(local, div.epoch, div.end_offset, lg.next_offset)
                part.truncate_to(target, f"diverges from the leader's log at epoch {div.epoch}, "
                                         f"which ends at {div.end_offset} there")
                return
            th = self.throttle
            if (th is not None and pd.records is not None and self.replicas.local_id not in part.isr
                    and th.is_throttled(part.topic, part.index)):
                th.record(len(pd.records))
            if pd.records is not None and self.metrics is not None:
                self.metrics.replication_bytes_in += len(pd.records)
            try:
                if part.append_as_follower(pd.records, pd.high_watermark, pd.log_start_offset):
                    self.replicas.notify(part.topic, part.index)
            except KafkaError as e:
                log.error("%s: cannot append the leader's batches: %s", part.name, e)
                self._backoff_until[key] = time.monotonic() + self.config.backoff_ms / 1000
            return
        if code is ErrorCode.OFFSET_OUT_OF_RANGE:
            lg = part.log
            if pd.log_start_offset > lg.next_offset:
                part.truncate_fully_and_start_at(pd.log_start_offset, "our log end is below the leader's log start")
                return
        log.debug("%s: fetch from broker %d answered %s; backing off", part.name, part.leader_id, code.name)
        self._backoff_until[key] = time.monotonic() + self.config.backoff_ms / 1000
