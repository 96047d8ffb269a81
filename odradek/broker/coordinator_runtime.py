"""What the two coordinator runtimes share: their internal topic, waiting requests, growth, reading back.

``GroupRuntime`` (``__consumer_offsets``) and ``TxnRuntime`` (``__transaction_state``) each give a pure
coordinator a clock and a log; this base holds the mechanics that do not depend on which coordinator:

- ``create_topic``: the internal topic on first use (no retention, the runtime's segment size, never
  deleted or produced to by clients) with a log per partition.
- ``await_reply``: run one operation with a fresh ticket and wait for the reply addressed to it;
  ``deliver`` hands replies to the waiting requests.
- ``log_effects``: an operation's warnings and notes go to the broker's log.
- Growth: each partition is rewritten to its live state once it has grown by more than a segment and
  twice its live state since the last rewrite (``due_for_rewrite``, ``rewritten``).
- ``stored_batches``: the batches of a partition in [start, end), read in chunks, for replay at load.

Invariants: a reply reaches only a request still waiting for its ticket; growth after a failed rewrite
counts the whole partition as live, so a failing rewrite is not retried after every write.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.coordinator.group.effects import Effects, Reply
from odradek.coordinator.group.model import Ticket
from odradek.protocol.batch import BatchHeader
from odradek.protocol.records import iter_batches
from odradek.storage.log import Log

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

log = logging.getLogger(__name__)

_READ_CHUNK = 1 << 20


@dataclass(slots=True)
class _Growth:
    size_after_rewrite: int
    live_bytes: int


class CoordinatorRuntime:
    def __init__(self, broker: Broker, topic: str, segment_bytes: int) -> None:
        self.broker = broker
        self.topic = topic
        self.segment_bytes = segment_bytes
        self._futures: dict[Ticket, asyncio.Future[Any]] = {}
        self._tickets = itertools.count(1)
        self._growth: dict[int, _Growth] = {}

    def now(self) -> int:
        return self.broker.clock.milliseconds()

    def create_topic(self, num_partitions: int) -> int:
        """Create the internal topic unless it exists; its partition count (the topic's own if it existed)."""
        b = self.broker
        if b.registry.get(self.topic) is None:
            configs = {"retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": str(self.segment_bytes),
                       "max.message.bytes": str(max(self.segment_bytes, 1 << 20))}
            b.registry.add(self.topic, num_partitions, configs, internal=True)
            for p in range(num_partitions):
                b.replicas.add_local(b.log_manager.get_or_create_log(self.topic, p))
            log.info("created internal topic %s with %d partitions", self.topic, num_partitions)
        topic = b.registry.get(self.topic)
        assert topic is not None
        return topic.partitions

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

    # -- growth --------------------------------------------------------------------------------------

    def reset_growth(self, partition: int) -> None:
        """Count growth of ``partition`` from its size now (after it was loaded or created)."""
        self._growth[partition] = _Growth(self.broker.get_log(self.topic, partition).size, 0)

    def due_for_rewrite(self, partition: int) -> bool:
        lg = self.broker.get_log(self.topic, partition)
        growth = self._growth.setdefault(partition, _Growth(lg.size, 0))
        return lg.size - growth.size_after_rewrite >= max(self.segment_bytes, 2 * growth.live_bytes)

    def rewritten(self, partition: int, *, failed: bool = False) -> None:
        """Record a rewrite of ``partition``: its live state is the active segment (or, if it failed, all)."""
        lg = self.broker.get_log(self.topic, partition)
        live = lg.size if failed else lg.size - sum(s.size for s in lg.segments[:-1])
        self._growth[partition] = _Growth(lg.size, live)


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
