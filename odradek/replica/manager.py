"""All partitions of this broker: the one read/write path the handlers use for partition data.

Kafka's ``ReplicaManager``. Handlers ask it for a partition in the role they need (``leader_partition`` for
produce and consumer fetches), append through it (``append`` / ``append_marker``), and tell it about replica
fetches (``on_replica_fetch``). The cluster link applies the partition states it reads from ZooKeeper
(``apply_state``) and the manager turns them into roles, starting or stopping the follower fetcher.

Invariants:
- Single-node mode (``replicated=False``): every partition of the topic registry is led by this broker with
  a one-replica ISR; appends move the high watermark at once (acks=all is acks=1).
- Cluster mode: a partition exists here only if this broker is one of its replicas; it serves clients only
  as leader. ISR changes go to ZooKeeper through ``isr_writer`` (conditional on the state's version) and take
  effect only once written; one change per partition at a time.
- ``notify(topic, partition)`` is called after every append and every high-watermark move, so waiting
  fetches re-read.
- A partition whose log directory failed (``offline``) is neither led nor followed here until a restart:
  clients get KAFKA_STORAGE_ERROR for it, acks=all waits on it end with that error, and states from
  ZooKeeper do not bring it back (the controller treats this broker as dead for it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator

from odradek.clock import Clock
from odradek.cluster.model import LeaderAndIsr, TopicPartition
from odradek.protocol.errors import (
    ErrorCode,
    NotLeaderOrFollowerError,
    StorageError,
    UnknownTopicError,
)
from odradek.replica.partition import Partition, Role
from odradek.storage.log import AppendInfo, Log
from odradek.storage.manager import LogManager

log = logging.getLogger(__name__)

IsrWriter = Callable[[TopicPartition, LeaderAndIsr], Awaitable[LeaderAndIsr | None]]


class ReplicaManager:
    def __init__(self, local_id: int, log_manager: LogManager, *, clock: Clock, replicated: bool,
                 notify: Callable[[str, int], None], replica_lag_time_max_ms: int = 30_000,
                 isr_writer: IsrWriter | None = None) -> None:
        self.local_id = local_id
        self.log_manager = log_manager
        self.clock = clock
        self.replicated = replicated
        self.notify = notify
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.isr_writer = isr_writer
        self._partitions: dict[TopicPartition, Partition] = {}
        self._isr_tasks: dict[TopicPartition, asyncio.Task[None]] = {}
        # called when the set of followed partitions (leader or epoch) changes: the fetcher re-plans
        self.on_followers_changed: Callable[[], None] | None = None
        # called with (topic, partition, leads now, leader epoch) when this broker gains or loses a leadership
        self.on_leadership: Callable[[str, int, bool, int], None] | None = None
        # the partition set grew or shrank by n (``broker/heap.py`` keeps a large broker's full GCs short)
        self.on_partitions_added: Callable[[int], None] | None = None
        self.on_partitions_removed: Callable[[int], None] | None = None
        # whether a broker is in controlled shutdown: it is not added back to ISRs it is leaving
        self.is_shutting_down: Callable[[int], bool] = lambda _broker: False
        # ISR changes this broker made as a leader and wrote (Kafka's IsrShrinksPerSec and IsrExpandsPerSec)
        self.isr_shrinks = 0
        self.isr_expands = 0

    # -- lookup --------------------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def partitions(self) -> Iterator[Partition]:
        return iter(list(self._partitions.values()))

    def leader_partition(self, topic: str, partition: int) -> Partition:
        """The partition if this broker leads it; ``UnknownTopicError`` or ``NotLeaderOrFollowerError`` otherwise."""
        part = self._partitions.get((topic, partition))
        if part is None:
            if self.log_manager.is_offline(topic, partition):
                raise StorageError(f"{topic}-{partition} is offline on broker {self.local_id}: its log directory "
                                   "failed")
            if self.replicated:
                raise NotLeaderOrFollowerError(
                    f"broker {self.local_id} does not host {topic}-{partition}: refresh metadata")
            raise UnknownTopicError(f"this server does not host topic-partition {topic}-{partition}")
        if part.role is not Role.LEADER:
            part.check_leader()
        return part

    def followed(self) -> dict[TopicPartition, Partition]:
        """Partitions this broker follows, with a known leader."""
        return {tp: p for tp, p in self._partitions.items() if p.role is Role.FOLLOWER and p.leader_id >= 0}

    # -- the partition set ---------------------------------------------------------------------------

    def add_local(self, lg: Log) -> Partition:
        """Single-node mode: a partition of the registry, led here."""
        tp = (lg.topic, lg.partition)
        part = self._partitions.get(tp)
        if part is None or part.log is not lg:
            part = self._partitions[tp] = Partition(lg, self.local_id, replicated=self.replicated)
            if self.on_partitions_added is not None:
                self.on_partitions_added(1)
        return part

    def apply_state(self, topic: str, partition: int, state: LeaderAndIsr, replicas: tuple[int, ...]) -> None:
        """Apply a partition's state from ZooKeeper: lead, follow, or (not a replica any more) delete it."""
        tp = (topic, partition)
        part = self._partitions.get(tp)
        if self.log_manager.is_offline(topic, partition):
            if self.local_id not in replicas:
                self.log_manager.forget_offline(topic, partition)
            return
        if self.local_id not in replicas:  # a reassignment moved it away: its log goes, as Kafka's StopReplica
            if part is not None or self.log_manager.get_log(topic, partition) is not None:
                self.remove(topic, partition, delete=True)
            return
        if part is not None and part.state is not None and state.leader_epoch < part.state.leader_epoch:
            return  # a late event
        if part is None:
            lg = self.log_manager.get_or_create_log(topic, partition)
            part = self._partitions[tp] = Partition(lg, self.local_id, replicated=True)
            if self.on_partitions_added is not None:
                self.on_partitions_added(1)
        was_leader = part.is_leader
        if state.leader == self.local_id:
            if part.make_leader(state, replicas, self.clock.milliseconds()):
                self._followers_changed()
                self._leadership(part, True)
            self.notify(topic, partition)
        else:
            if part.make_follower(state, replicas):
                self._followers_changed()
                if was_leader:
                    self._leadership(part, False)

    def _leadership(self, part: Partition, leader: bool) -> None:
        if self.on_leadership is not None:
            try:
                self.on_leadership(part.topic, part.index, leader, part.leader_epoch)
            except Exception:
                log.exception("%s: reacting to the change of leadership failed", part.name)

    def remove(self, topic: str, partition: int, *, delete: bool) -> None:
        part = self._partitions.pop((topic, partition), None)
        if part is not None:
            if self.on_partitions_removed is not None:
                self.on_partitions_removed(1)
            was_leader = part.is_leader
            part.make_none("removed")
            self._followers_changed()
            if was_leader:
                self._leadership(part, False)
        if delete and self.log_manager.get_log(topic, partition) is not None:
            self.log_manager.delete_log(topic, partition)
        self.notify(topic, partition)

    def take_offline(self, partitions: list[TopicPartition]) -> None:
        """Their log directory failed: stop leading and following them; waiting acks=all requests get
        KAFKA_STORAGE_ERROR."""
        for tp in partitions:
            part = self._partitions.pop(tp, None)
            if part is None:
                continue
            was_leader = part.is_leader
            part.fail_waiting(ErrorCode.KAFKA_STORAGE_ERROR)
            part.make_none("its log directory failed")
            if was_leader:
                self._leadership(part, False)
            self.notify(*tp)
        self._followers_changed()

    def stop_all(self, reason: str) -> None:
        """This broker can lead or follow nothing (lost ZooKeeper session, shutdown)."""
        for part in list(self._partitions.values()):
            was_leader = part.is_leader
            part.make_none(reason)
            part.state = None
            if was_leader:
                self._leadership(part, False)
        self._followers_changed()

    def _followers_changed(self) -> None:
        if self.on_followers_changed is not None:
            self.on_followers_changed()

    # -- appends ------------------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes | bytearray | memoryview, *,
               required_acks: int = 1) -> tuple[Partition, AppendInfo]:
        part = self.leader_partition(topic, partition)
        info = part.append_as_leader(records, required_acks=required_acks)
        self.notify(topic, partition)
        return part, info

    def append_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int) -> tuple[Partition, AppendInfo]:
        part = self.leader_partition(topic, partition)
        info = part.append_marker_as_leader(producer_id, producer_epoch, commit, coordinator_epoch)
        self.notify(topic, partition)
        return part, info

    @staticmethod
    def replication_waits(waits: list[tuple[Partition, int]]) -> list[asyncio.Future[ErrorCode]]:
        """acks=all: for each (partition, offset after the write), a future of its outcome (no timeout)."""
        return [part.wait_for_offset(end) for part, end in waits]

    async def wait_replicated(self, waits: list[tuple[Partition, int]], timeout_ms: int) -> list[ErrorCode]:
        """acks=all: for each (partition, offset after the write), its outcome within ``timeout_ms``."""
        futures = self.replication_waits(waits)
        pending = [f for f in futures if not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=max(timeout_ms, 0) / 1000)
        out = []
        for fut in futures:
            if fut.done():
                out.append(fut.result())
            else:
                fut.cancel()
                out.append(ErrorCode.REQUEST_TIMED_OUT)
        return out

    # -- replica fetches (leader side) --------------------------------------------------------------

    def on_replica_fetch(self, part: Partition, replica_id: int, fetch_offset: int, log_start_offset: int,
                         broker_epoch: int) -> None:
        """A follower fetched from ``fetch_offset``: its log ends there. Moves the HW, may expand the ISR."""
        moved, expand_to = part.on_follower_fetch(replica_id, fetch_offset, log_start_offset,
                                                  self.clock.milliseconds(), broker_epoch)
        if moved:
            self.notify(part.topic, part.index)
        if expand_to is not None and not self.is_shutting_down(replica_id):
            self._change_isr(part, expand_to, f"replica {replica_id} caught up")

    # -- ISR maintenance ----------------------------------------------------------------------------

    def check_isr(self) -> None:
        """Shrink the ISR of every led partition whose followers fell behind (run periodically)."""
        if not self.replicated:
            return
        now = self.clock.milliseconds()
        for part in self.partitions():
            out = part.shrink_candidates(now, self.replica_lag_time_max_ms)
            if out:
                new_isr = tuple(r for r in part.isr if r not in out)
                self._change_isr(part, new_isr, f"replicas {list(out)} fell behind by more than "
                                                f"replica.lag.time.max.ms={self.replica_lag_time_max_ms}")

    def _change_isr(self, part: Partition, new_isr: tuple[int, ...], why: str) -> None:
        tp = (part.topic, part.index)
        ls = part.leader_state
        if (self.isr_writer is None or ls is None or part.state is None or ls.pending is not None
                or tp in self._isr_tasks or tuple(new_isr) == tuple(part.isr)):
            return
        ls.propose_isr(tuple(new_isr))
        proposed = part.state.with_isr(tuple(new_isr))
        log.info("%s: changing the ISR from %s to %s: %s", part.name, list(part.isr), list(new_isr), why)
        task = asyncio.get_running_loop().create_task(self._write_isr(part, proposed))
        self._isr_tasks[tp] = task

    async def _write_isr(self, part: Partition, proposed: LeaderAndIsr) -> None:
        tp = (part.topic, part.index)
        old_isr = part.state.isr if part.state is not None else ()
        try:
            assert self.isr_writer is not None
            try:
                written = await self.isr_writer(tp, proposed)
            except Exception as e:  # ZooKeeper unreachable, session lost...
                log.warning("%s: could not write the ISR change to ZooKeeper: %s", part.name, e)
                written = None
            if self._partitions.get(tp) is not part or part.leader_state is None:
                return
            stale = part.state is not None and part.state.leader_epoch != proposed.leader_epoch
            if written is None and not stale:
                log.info("%s: the ISR change lost against a newer state; waiting for it", part.name)
            if stale or written is None:
                if part.isr_failed():  # abandoning an expansion may let the high watermark move
                    self.notify(part.topic, part.index)
                return
            if len(written.isr) < len(old_isr):
                self.isr_shrinks += 1
            elif len(written.isr) > len(old_isr):
                self.isr_expands += 1
            if part.isr_committed(written):
                self.notify(part.topic, part.index)
        finally:
            self._isr_tasks.pop(tp, None)
