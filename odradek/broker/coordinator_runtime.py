"""What the two coordinator runtimes share: their internal topic, waiting requests, reading back.

``GroupRuntime`` (``__consumer_offsets``) and ``TxnRuntime`` (``__transaction_state``) each give a pure
coordinator a clock and a log; this base holds the mechanics that do not depend on which coordinator:

- ``create_topic``: the internal topic on first use, compacted (``cleanup.policy=compact``, as Kafka's:
  the log cleaner keeps the latest record of every key, so the topic stays bounded by the live state
  plus what was written since the last cleaning), with the runtime's segment size, never deleted or
  produced to by clients, with a log per partition. ``compact_existing_topic``: a topic created by an
  earlier version (no cleanup.policy: the runtime then rewrote it itself) is switched to compaction.
- ``await_reply``: run one operation with a fresh ticket and wait for the reply addressed to it;
  ``deliver`` hands replies to the waiting requests.
- ``log_effects``: an operation's warnings and notes go to the broker's log.
- ``stored_batches``: the batches of a partition in [start, end), read in chunks, for replay at load.
- In a cluster: loading and unloading follow the leadership of the topic's partitions (load generations
  keep a superseded load from finishing), and replies to a write wait until it is committed
  (``deliver_when_replicated``; ``offsets.commit.timeout.ms``).

Invariants: a reply reaches only a request still waiting for its ticket. A compacted partition replays to
the coordinator's state because each coordinator's state for a key is what the latest record of that key
says (below the last stable offset; transactions and earlier versions' copies: ``group_runtime.py``) and
every deletion is written as a tombstone (a null value) for each key it removes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from odradek.coordinator.group.effects import Effects, Reply
from odradek.coordinator.group.model import Ticket
from odradek.protocol.batch import BatchHeader
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import iter_batches
from odradek.replica.partition import Partition
from odradek.storage.log import Log

if TYPE_CHECKING:
    from odradek.broker.config import BrokerConfig
    from odradek.clock import Clock
    from odradek.cluster.member import ClusterMember
    from odradek.coordinator.txn.allocator import ProducerIdAllocator
    from odradek.replica.manager import ReplicaManager


class CoordinatorHost(Protocol):
    """What a coordinator runtime needs of the broker (the broker object satisfies it; the runtimes never
    import it, so there is no import circle between the composition root and the runtimes)."""

    clock: Clock
    config: BrokerConfig
    replicas: ReplicaManager
    replicated: bool
    cluster: ClusterMember | None
    pool: Any
    producer_ids: ProducerIdAllocator

    @property
    def registry(self) -> Any: ...

    def get_log(self, topic: str, partition: int) -> Log: ...

    def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str], *,
                              replication_factor: int, min_isr: int | None = None) -> None: ...

    def alter_topic_configs(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> None: ...

    def append_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                          coordinator_epoch: int) -> Partition: ...

log = logging.getLogger(__name__)

_READ_CHUNK = 1 << 20


class CoordinatorRuntime:
    def __init__(self, broker: CoordinatorHost, topic: str, segment_bytes: int) -> None:
        self.broker = broker
        self.topic = topic
        self.segment_bytes = segment_bytes
        self._futures: dict[Ticket, asyncio.Future[Any]] = {}
        self._tickets = itertools.count(1)
        self._load_gens: dict[int, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.commit_timeout_ms = 5000  # offsets.commit.timeout.ms
        self.coordinator: Any = None

    def now(self) -> int:
        return self.broker.clock.milliseconds()

    def create_topic(self, num_partitions: int, *, replication_factor: int = 1, min_isr: int | None = None) -> int:
        """Create the internal topic unless it exists; its partition count (the topic's own if it existed).

        In a cluster the topic appears once ZooKeeper's watches bring it back; until then this answers the
        count it asked for, and requests are NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE (clients retry)."""
        b = self.broker
        if b.registry.get(self.topic) is None:
            configs = {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes),
                       "max.message.bytes": str(max(self.segment_bytes, 1 << 20))}
            b.create_internal_topic(self.topic, num_partitions, configs, replication_factor=replication_factor,
                                    min_isr=min_isr)
        topic = b.registry.get(self.topic)
        return topic.partitions if topic is not None else num_partitions

    def compact_existing_topic(self) -> None:
        """Single node, at startup: the internal topic as an earlier version created it (no cleanup.policy, so
        delete with retention off: the runtime rewrote each partition to its live state itself) becomes
        compacted, or it would grow without bound. A cleanup.policy an operator set is left alone."""
        b = self.broker
        topic = b.registry.get(self.topic)
        if topic is None or b.replicated or "cleanup.policy" in topic.configs:
            return
        b.alter_topic_configs(self.topic, {**topic.configs, "cleanup.policy": "compact"})
        log.info("%s: switched to cleanup.policy=compact (the log cleaner now keeps it bounded)", self.topic)

    # -- leadership (cluster) ------------------------------------------------------------------------

    def on_leadership(self, partition: int, leader: bool, leader_epoch: int) -> None:
        """Cluster: load ``partition`` when this broker becomes its leader (a fresh load generation), unload it
        when it stops. Each runtime says how to begin, load and unload (``_begin_load``, ``_load_one``,
        ``_unload``) and how to make its coordinator owning no partition yet (``_cluster_coordinator``)."""
        if leader:
            coord = self._cluster_coordinator()
            assert coord.owned is not None
            coord.owned.add(partition)
            self._begin_load(partition, leader_epoch)
            self.spawn(self._load_one(partition, self.next_load(partition)))
            return
        self.next_load(partition)
        coord = self.coordinator
        if coord is not None and coord.owned is not None and partition in coord.owned:
            self._unload(partition)
            log.info("%s-%d: no longer its leader: what it coordinated moved to another broker", self.topic,
                     partition)

    def _cluster_coordinator(self) -> Any:
        """The coordinator, created (owning nothing) if this is the first partition this broker leads."""
        if self.coordinator is None:
            topic = self.broker.registry.get(self.topic)
            self.coordinator = self._new_cluster_coordinator(topic.partitions if topic is not None else None)
            self.coordinator.owned = set()
        return self.coordinator

    def _new_cluster_coordinator(self, partitions: int | None) -> Any:
        raise NotImplementedError

    def _begin_load(self, partition: int, leader_epoch: int) -> None:
        raise NotImplementedError

    async def _load_one(self, partition: int, gen: int) -> None:
        raise NotImplementedError

    def _unload(self, partition: int) -> None:
        raise NotImplementedError

    def next_load(self, partition: int) -> int:
        """A new load generation for ``partition``: a load still running for an older one must not finish."""
        gen = self._load_gens.get(partition, 0) + 1
        self._load_gens[partition] = gen
        return gen

    def load_current(self, partition: int, gen: int) -> bool:
        return self._load_gens.get(partition) == gen

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def deliver_when_replicated(self, part: Partition | None, end_offset: int, replies: list[Reply],
                                on_failure: Callable[[ErrorCode], list[Reply]] | None,
                                then: Callable[[], None] | None = None) -> None:
        """Send ``replies`` once the high watermark covers ``end_offset`` (at once on a single node); if the
        write is not committed in time or leadership moves, send ``on_failure``'s replies instead."""
        if part is None or not part.replicated or part.high_watermark >= end_offset:
            self.deliver(replies)
            if then is not None:
                then()
            return
        fut = part.wait_for_offset(end_offset)

        async def wait() -> None:
            try:
                code = await asyncio.wait_for(asyncio.shield(fut), self.commit_timeout_ms / 1000)
            except TimeoutError:
                code = ErrorCode.REQUEST_TIMED_OUT
            if code is ErrorCode.NONE:
                self.deliver(replies)
                if then is not None:
                    then()
            elif on_failure is not None:
                self.deliver(on_failure(replication_error(code)))
            else:
                self.deliver(replies)
        self.spawn(wait())

    # -- waiting requests ----------------------------------------------------------------------------

    async def await_reply(self, run: Callable[[Ticket], None]) -> Any:
        """``run(ticket)`` applies an operation; wait for the reply to that ticket."""
        ticket = next(self._tickets)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._futures[ticket] = fut
        try:
            run(ticket)
            return await fut
        finally:
            self._futures.pop(ticket, None)

    def deliver(self, replies: list[Reply]) -> None:
        for ticket, payload in replies:
            fut = self._futures.get(ticket)
            if fut is not None and not fut.done():
                fut.set_result(payload)

    def fail_waiting(self, error: BaseException) -> None:
        """Every request still waiting gets ``error`` (the broker is going away)."""
        for fut in self._futures.values():
            if not fut.done():
                fut.set_exception(error)

    @staticmethod
    def log_effects(fx: Effects) -> None:
        for warning in fx.warnings:
            log.warning("%s", warning)
        for note in fx.notes:
            log.info("%s", note)


def stored_batches(lg: Log, start: int, end: int) -> Iterator[tuple[memoryview, int, BatchHeader]]:
    """(chunk, position, header) of every batch of ``lg`` holding offsets in [``start``, ``end``), in order,
    read a chunk at a time from ``max(start, log start)``; records below ``start`` may be in the first."""
    offset = max(start, lg.log_start_offset)
    while offset < end:
        region = lg.read(offset, _READ_CHUNK, max_offset=end)
        if region is None:
            break
        data = memoryview(region.read_bytes())
        last = offset
        for pos, header in iter_batches(data, allow_partial_tail=True):
            last = header.last_offset
            yield data, pos, header
        offset = max(last + 1, offset + 1)


def replication_error(code: ErrorCode) -> ErrorCode:
    """What a coordinator's client is told when its write was not committed (Kafka's mapping)."""
    if code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE
