"""The controller: elected through ZooKeeper, it decides every partition's leader and ISR changes that
follow from brokers coming and going, and creates and deletes partitions.

Every broker runs one ``Controller``; the one whose ephemeral ``/controller`` znode exists is active. Its
decisions are pure (``election.py``, ``assignment.py``); this module only reads the image the broker keeps
(``ClusterMember``) and writes the results, every write fenced by the controller epoch in the same
ZooKeeper multi-op (``ControllerFence``), so a controller that lost its seat cannot write anything.

It is level-triggered: any change of the image (brokers, topics, states) schedules one *reconcile*, which
brings ZooKeeper to what the rules say for the current image:

1. topics marked for deletion lose their znodes (brokers delete the logs when the topic disappears);
2. partitions without a state get their first one (leader = first live replica, ISR = live replicas);
3. partitions led by a dead broker get a new leader from their ISR (or go offline; an unclean election only
   where ``unclean.leader.election.enable``); dead brokers leave every ISR that keeps another member;
4. partitions led by a broker shutting down (controlled shutdown) move to another ISR member.

A write that lost against a newer znode version is retried by the next reconcile (the watch brings the
newer state first). Invariants: only the active controller writes partition states except for a leader's
own ISR changes; each change of leader bumps the leader epoch by one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from odradek.cluster.controller.election import (
    elect_after_broker_failure,
    elect_for_controlled_shutdown,
    elect_for_new_partitions,
    elect_for_returning_broker,
)
from odradek.cluster.model import LeaderAndIsr, TopicPartition
from odradek.cluster.zk.client import ControllerFence, ControllerMovedError

if TYPE_CHECKING:
    from odradek.cluster.member import ClusterMember

log = logging.getLogger(__name__)

RETRY_S = 0.2


class Controller:
    def __init__(self, member: ClusterMember, *, unclean: Callable[[str], bool]) -> None:
        """``unclean(topic)``: the topic's effective ``unclean.leader.election.enable`` (its override, else the
        broker default with the dynamic configs on top)."""
        self.member = member
        self.broker_id = member.broker_id
        self.fence: ControllerFence | None = None
        self._unclean = unclean
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._electing = False
        member.listeners.append(self._on_change)

    @property
    def active(self) -> bool:
        return self.fence is not None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")
        self._dirty.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.fence is not None and self.member.zk is not None:
            try:
                await asyncio.to_thread(self.member.zk.resign_controller, self.broker_id)
            except Exception as e:
                log.info("could not resign as controller: %s", e)
            self.fence = None

    def _on_change(self, what: str) -> None:
        if what == "controller" and self.member.controller_id != self.broker_id and self.fence is not None:
            log.warning("broker %d is no longer the controller (broker %d is)", self.broker_id,
                        self.member.controller_id)
            self.fence = None
        self._dirty.set()

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                if self.fence is None:
                    await self._maybe_elect()
                if self.fence is not None:
                    if not await self.reconcile():
                        await asyncio.sleep(RETRY_S)
                        self._dirty.set()
            except ControllerMovedError:
                log.warning("controller epoch moved on: broker %d resigns as controller", self.broker_id)
                self.fence = None
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller step failed; retrying")
                await asyncio.sleep(RETRY_S)
                self._dirty.set()

    async def _maybe_elect(self) -> None:
        m = self.member
        if m.controller_id >= 0 or not m.registered or m.zk is None or m.shutting_down:
            return
        won = await asyncio.to_thread(m.zk.elect_controller, self.broker_id)
        if won is None:
            return
        epoch, version = won
        self.fence = ControllerFence(epoch, version)
        log.info("broker %d is the controller (controller epoch %d)", self.broker_id, epoch)

    async def reconcile(self) -> bool:
        """Bring ZooKeeper to what the rules say for the current image; False if something must be retried."""
        m = self.member
        zk = m.zk
        fence = self.fence
        if zk is None or fence is None:
            return True
        ok = True
        epoch = fence.controller_epoch
        live = set(m.brokers)
        # 1. deletions
        pending = list(m.deletions)
        for name in pending:
            log.info("deleting topic %s", name)
            await asyncio.to_thread(zk.delete_topic_znodes, name, fence)
            if name in m.deletions:  # done: a reconcile before the watch says so must not delete it again
                m.deletions.remove(name)
        if pending:
            return True  # the watches bring the new image; reconcile again then
        assignments = {(t, p): replicas for t, a in m.assignments.items() for p, replicas in a.replicas.items()}
        # 2. new partitions
        missing = {tp: r for tp, r in assignments.items() if tp not in m.states}
        if missing:
            fresh = elect_for_new_partitions(missing, live, epoch)
            created = await asyncio.to_thread(zk.create_partition_states, fresh, fence)
            for tp, state in created.items():
                m._on_state(tp, state)
            log.info("created the state of %d new partitions", len(created))
        states = {tp: s for tp, s in m.states.items() if tp in assignments}
        changes: dict[TopicPartition, LeaderAndIsr] = {}
        # 3. failures and returns
        failed = elect_after_broker_failure(states, assignments, live, epoch, unclean=self._unclean)
        changes.update(failed.changed)
        for tp in failed.unclean:
            log.warning("%s-%d: unclean leader election: records the old ISR had may be lost", *tp)
        for tp in failed.offline:
            if tp not in changes and states[tp].online:
                log.warning("%s-%d goes offline: no replica of its ISR is alive", *tp)
        leaving = {b for b, reg in m.brokers.items() if reg.shutting_down}
        staying = live - leaving
        for broker in staying:
            back = elect_for_returning_broker({**states, **changes}, assignments, staying, broker, epoch,
                                              unclean=self._unclean)
            changes.update(back.changed)
        # 4. controlled shutdowns
        for broker in sorted(leaving):
            moved = elect_for_controlled_shutdown({**states, **changes}, assignments, live, broker, epoch,
                                                  also_shutting_down=leaving - {broker})
            changes.update(moved.changed)
        if changes:
            written = await asyncio.to_thread(zk.update_partition_states, changes, fence)
            for tp, state in written.items():
                if state is None:
                    ok = False
                else:
                    old = states.get(tp)
                    if old is None or old.leader != state.leader:
                        log.info("%s-%d: leader %s -> %d at epoch %d, ISR %s", tp[0], tp[1],
                                 old.leader if old is not None else "none", state.leader, state.leader_epoch,
                                 list(state.isr))
                    m._on_state(tp, state)
        return ok
