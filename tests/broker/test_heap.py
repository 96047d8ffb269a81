"""HeapSettler: freezes the survivors once a burst of new partitions is over, and unfreezes (so that the cycles of
removed partitions are collected) after many removals."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable, Iterator

import pytest

from odradek.broker.heap import HeapSettler


class Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the test process's collector as it was


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in 2 s")


def test_a_burst_of_additions_is_settled_once_it_is_over() -> None:
    async def run() -> None:
        s = HeapSettler(asyncio.get_running_loop(), threshold=3, delay_s=0.1)
        s.partitions_added(2)
        await asyncio.sleep(0.15)
        assert s.settles == 0  # fewer than the threshold
        s.partitions_added(1)
        await asyncio.sleep(0.05)
        s.partitions_added(1)  # still in the burst: pushed back
        await asyncio.sleep(0.07)
        assert s.settles == 0
        await until(lambda: s.settles == 1)
        assert gc.get_freeze_count() > 0
    asyncio.run(run())


def test_frozen_cycles_wait_for_a_settle_after_many_removals() -> None:
    async def run() -> None:
        s = HeapSettler(asyncio.get_running_loop(), threshold=2, delay_s=0.01)
        holder = [Cycle()]
        gone = weakref.ref(holder[0])
        s.partitions_added(2)
        await until(lambda: s.settles == 1)  # the cycle is frozen now
        holder.clear()
        gc.collect()
        assert gone() is not None  # out of the collector's view
        s.partitions_added(2)
        await until(lambda: s.settles == 2)
        assert gone() is not None  # additions do not unfreeze
        s.partitions_removed(2)
        await until(lambda: s.settles == 3)
        assert gone() is None  # removals do: collected
        assert gc.get_freeze_count() > 0  # and the survivors frozen again
    asyncio.run(run())


def test_cancel_drops_a_pending_settle() -> None:
    async def run() -> None:
        s = HeapSettler(asyncio.get_running_loop(), threshold=1, delay_s=0.05)
        s.partitions_added(1)
        s.cancel()
        await asyncio.sleep(0.1)
        assert s.settles == 0
    asyncio.run(run())
