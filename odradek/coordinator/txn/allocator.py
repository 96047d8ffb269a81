"""Where producer ids come from: the coordinator asks an injected allocator, so it stays pure.

Kafka hands out producer ids in blocks from the controller, unique for the cluster's lifetime. Here
the runtime supplies any object with ``next_producer_id()``; ``SequentialProducerIds`` is the simple
one for a single broker and for tests.

Invariants: an allocator never returns the same id twice, nor a negative id. ``SequentialProducerIds``
remembers nothing across restarts by itself: the runtime must seed it above every producer id it has
handed out before (for example, above ``TxnCoordinatorState.max_producer_id()`` after loading and
above every producer id in the partition logs), or persist a high-water mark.
"""

from __future__ import annotations

from typing import Protocol


class ProducerIdAllocator(Protocol):
    def next_producer_id(self) -> int: ...


class SequentialProducerIds:
    """Ids ``start``, ``start + 1``, ...; ``ensure_above(n)`` skips past ids known to be in use."""

    __slots__ = ("_next",)

    def __init__(self, start: int = 0) -> None:
        if start < 0:
            raise ValueError(f"producer ids are not negative, got start {start}")
        self._next = start

    def next_producer_id(self) -> int:
        pid = self._next
        self._next += 1
        return pid

    def ensure_above(self, producer_id: int) -> None:
        self._next = max(self._next, producer_id + 1)
