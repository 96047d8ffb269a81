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
   where ``unclean.leader.election.enable``); dead brokers leave every ISR that keeps another member. A
   broker whose registration lists a partition among its offline replicas (failed log directory) is dead
   for that partition only;
4. partitions led by a broker shutting down (controlled shutdown) move to another ISR member;
5. reassignments whose target replicas are all in the ISR complete (``reassignment.py``): first the state
   (ISR and leader within the target), then, once the state is written, the assignment.

Requests: ``elect_leaders`` (ElectLeaders PREFERRED or UNCLEAN). With ``auto.leader.rebalance.enable`` the
active controller checks every ``leader.imbalance.check.interval.seconds`` whether a broker's preferred
partitions are led elsewhere beyond ``leader.imbalance.per.broker.percentage`` and elects their preferred
leaders (Kafka's auto leader rebalance).

Reassignments start with ``reassign`` (AlterPartitionReassignments on the active controller), which writes
the topic znodes; ``reassignments`` lists the running ones (ListPartitionReassignments).

A write that lost against a newer znode version is retried by the next reconcile (the watch brings the
newer state first). Invariants: only the active controller writes partition states except for a leader's
own ISR changes; each change of leader bumps the leader epoch by one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from odradek.cluster.controller.election import (
    ElectionResult,
    elect_after_broker_failure,
    elect_for_controlled_shutdown,
    elect_for_new_partitions,
    elect_for_returning_broker,
    elect_preferred_leaders,
    elect_unclean_leaders,
    imbalanced_partitions,
)
from odradek.cluster.controller.reassignment import PartitionReassignment, complete, reassign, reassignment_of
from odradek.cluster.model import LeaderAndIsr, TopicAssignment, TopicPartition
from odradek.cluster.zk.client import ControllerFence, ControllerMovedError

if TYPE_CHECKING:
    from odradek.cluster.member import ClusterMember

log = logging.getLogger(__name__)

RETRY_S = 0.2


@dataclass(frozen=True, slots=True)
class Rebalance:
    """``auto.leader.rebalance.enable``, ``leader.imbalance.check.interval.seconds``,
    ``leader.imbalance.per.broker.percentage``."""

    enabled: bool = True
    interval_s: float = 300.0
    percentage: int = 10

REASSIGN_ATTEMPTS = 5


class Controller:
    def __init__(self, member: ClusterMember, *, unclean: Callable[[str], bool],
                 rebalance: Rebalance | None = None) -> None:
        """``unclean(topic)``: the topic's effective ``unclean.leader.election.enable`` (its override, else the
        broker default with the dynamic configs on top). ``rebalance``: the auto leader rebalance settings
        (None: off)."""
        self.member = member
        self.rebalance = rebalance
        self._rebalancer: asyncio.Task[None] | None = None
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
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name="controller")
        if self.rebalance is not None and self.rebalance.enabled:
            self._rebalancer = loop.create_task(self._rebalance_forever(self.rebalance), name="leader-rebalance")
        self._dirty.set()

    async def stop(self) -> None:
        for task in (self._task, self._rebalancer):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
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
        # 2. new partitions
        missing = {tp: r for tp, r in self._replica_lists().items() if tp not in m.states}
        if missing:
            fresh = elect_for_new_partitions(missing, live, epoch)
            created = await asyncio.to_thread(zk.create_partition_states, fresh, fence)
            for tp, state in created.items():
                m._on_state(tp, state)
            log.info("created the state of %d new partitions", len(created))
        states, assignments, _ = self._election_inputs()
        changes: dict[TopicPartition, LeaderAndIsr] = {}
        leaving = {b for b, reg in m.brokers.items() if reg.shutting_down}
        # 3 and 4, for each set of partitions alike in which brokers hold them in a failed log directory (a
        # broker is dead for the partitions offline there, alive for the others)
        for group, offline_on in _by_offline_replicas(states, m.offline_replicas()):
            changes.update(self._failures_and_shutdowns(group, assignments, live - offline_on, leaving, epoch))
        # 5. reassignments ready to complete
        staying = live - leaving
        finished: dict[str, dict[int, tuple[int, ...]]] = {}
        for name, a in m.assignments.items():
            for p in sorted({*a.adding, *a.removing}):
                state = changes.get((name, p), states.get((name, p)))
                done = None if state is None else complete(reassignment_of(a, p), state, staying, epoch)
                if done is None or (name, p) in changes:
                    continue
                if done.state is not None:
                    changes[(name, p)] = done.state
                else:  # the state is complete: the assignment follows
                    finished.setdefault(name, {})[p] = done.replicas
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
        if finished:
            ok = await self._write_assignments(
                [_with_partitions(m.assignments[name], {p: PartitionReassignment(r) for p, r in parts.items()})
                 for name, parts in finished.items()], fence) and ok
            for name, parts in finished.items():
                for p, r in parts.items():
                    log.info("%s-%d: reassignment complete, replicas %s", name, p, list(r))
        return ok

    def _failures_and_shutdowns(self, states: Mapping[TopicPartition, LeaderAndIsr],
                                assignments: Mapping[TopicPartition, tuple[int, ...]], live: set[int],
                                leaving: set[int], epoch: int) -> dict[TopicPartition, LeaderAndIsr]:
        """Steps 3 (failures and returns) and 4 (controlled shutdowns) of a reconcile for ``states``."""
        changes: dict[TopicPartition, LeaderAndIsr] = {}
        failed = elect_after_broker_failure(states, assignments, live, epoch, unclean=self._unclean)
        changes.update(failed.changed)
        for tp in failed.unclean:
            log.warning("%s-%d: unclean leader election: records the old ISR had may be lost", *tp)
        for tp in failed.offline:
            if tp not in changes and states[tp].online:
                log.warning("%s-%d goes offline: no replica of its ISR is alive", *tp)
        staying = live - leaving  # the brokers of this reconcile's start (``live``), not those registered since
        for broker in staying:
            # only partitions without a live leader: one led by a broker in controlled shutdown keeps it until
            # step 4 can move it (electing among the staying brokers would take it offline, and the next
            # reconcile would give it back: a flapping leader epoch)
            leaderless = {tp: s for tp, s in {**states, **changes}.items() if s.leader not in live}
            back = elect_for_returning_broker(leaderless, assignments, staying, broker, epoch,
                                              unclean=self._unclean)
            changes.update(back.changed)
        for broker in sorted(leaving & live):
            moved = elect_for_controlled_shutdown({**states, **changes}, assignments, live, broker, epoch,
                                                  also_shutting_down=leaving - {broker})
            changes.update(moved.changed)
        return changes

    async def _write_assignments(self, assignments: list[TopicAssignment], fence: ControllerFence) -> bool:
        m = self.member
        assert m.zk is not None
        written = await asyncio.to_thread(m.zk.write_topic_assignments, assignments, fence)
        for a in written:
            if a is not None:
                m._on_assignment(a.name, a)
        return all(a is not None for a in written)

    # -- leader elections (ElectLeaders, auto leader rebalance) ---------------------------------------------

    def _replica_lists(self) -> dict[TopicPartition, tuple[int, ...]]:
        return {(t, p): r for t, a in self.member.assignments.items() for p, r in a.replicas.items()}

    def _election_inputs(self) -> tuple[dict[TopicPartition, LeaderAndIsr], dict[TopicPartition, tuple[int, ...]],
                                        set[int]]:
        """(states, replica lists, brokers that may lead: registered and not in controlled shutdown) of the image."""
        m = self.member
        assignments = self._replica_lists()
        states = {tp: s for tp, s in m.states.items() if tp in assignments}
        staying = {b for b, reg in m.brokers.items() if not reg.shutting_down}
        return states, assignments, staying

    async def elect_leaders(self, unclean: bool, partitions: Sequence[TopicPartition] | None,
                            ) -> dict[TopicPartition, str | None]:
        """ElectLeaders: each partition's outcome, None when its new leader is written, else ``CODE[: why]``
        (``NOT_CONTROLLER``, ``UNKNOWN_TOPIC_OR_PARTITION``, ``ELECTION_NOT_NEEDED``,
        ``PREFERRED_LEADER_NOT_AVAILABLE``, ``ELIGIBLE_LEADERS_NOT_AVAILABLE``). ``partitions`` None: all."""
        fence = self.fence
        states, assignments, staying = self._election_inputs()
        wanted = sorted(states) if partitions is None else list(dict.fromkeys(partitions))
        if fence is None or self.member.zk is None:
            return {tp: "NOT_CONTROLLER" for tp in wanted}
        out: dict[TopicPartition, str | None] = {}
        known = []
        for tp in wanted:
            if tp in states and tp[0] not in self.member.deletions:
                known.append(tp)
            else:
                out[tp] = "UNKNOWN_TOPIC_OR_PARTITION"
        epoch = fence.controller_epoch
        elect = elect_unclean_leaders if unclean else elect_preferred_leaders
        result = ElectionResult()
        for group, offline_on in _by_offline_replicas({tp: states[tp] for tp in known},
                                                      self.member.offline_replicas()):
            part = elect(states, assignments, staying - offline_on, epoch, list(group))
            result.changed.update(part.changed)
            result.offline += part.offline
            result.remaining += part.remaining
        if unclean:
            failed = {tp: "ELIGIBLE_LEADERS_NOT_AVAILABLE: no live replica can lead it" for tp in result.offline}
        else:
            failed = {tp: f"PREFERRED_LEADER_NOT_AVAILABLE: the preferred replica {assignments[tp][0]} is not live "
                          "or not in the ISR" for tp in result.remaining}
        for tp in known:
            out[tp] = failed.get(tp, None if tp in result.changed else "ELECTION_NOT_NEEDED")
        written = await self._write_elections(result, fence, "preferred" if not unclean else "unclean")
        for tp in result.changed:
            if written.get(tp) is None:
                out[tp] = "UNKNOWN_SERVER_ERROR: the partition's state changed meanwhile; retry"
        return out

    async def _write_elections(self, result: ElectionResult, fence: ControllerFence, kind: str,
                               ) -> dict[TopicPartition, LeaderAndIsr | None]:
        if not result.changed:
            return {}
        m = self.member
        assert m.zk is not None
        written = await asyncio.to_thread(m.zk.update_partition_states, result.changed, fence)
        for tp, state in written.items():
            if state is not None:
                log.info("%s-%d: %s leader election: leader %d at epoch %d", tp[0], tp[1], kind, state.leader,
                         state.leader_epoch)
                m._on_state(tp, state)
        return written

    async def _rebalance_forever(self, settings: Rebalance) -> None:
        while True:
            await asyncio.sleep(settings.interval_s)
            fence = self.fence
            if fence is None:
                continue
            try:
                states, assignments, staying = self._election_inputs()
                offline = self.member.offline_replicas()
                moving = [tp for tp in imbalanced_partitions(states, assignments, staying, settings.percentage)
                          if assignments[tp][0] not in offline.get(tp, ())]
                if moving:
                    log.info("leader imbalance above %d%%: electing the preferred leaders of %d partitions",
                             settings.percentage, len(moving))
                    result = elect_preferred_leaders(states, assignments, staying, fence.controller_epoch, moving)
                    await self._write_elections(result, fence, "preferred (auto rebalance)")
            except ControllerMovedError:
                self.fence = None
            except Exception:
                log.exception("the leader rebalance check failed")

    # -- reassignments (AlterPartitionReassignments, ListPartitionReassignments) --------------------------

    async def reassign(self, targets: Mapping[TopicPartition, Sequence[int] | None],
                       ) -> dict[TopicPartition, str | None]:
        """Start (a list of brokers) or cancel (None) the reassignment of each partition. Each outcome is None
        (done: the znode is written and the controller carries it on) or an error to report:
        ``NOT_CONTROLLER``, ``UNKNOWN_TOPIC_OR_PARTITION``, ``INVALID_REPLICA_ASSIGNMENT: why`` or
        ``NO_REASSIGNMENT_IN_PROGRESS``. A topic znode that moved meanwhile (a leader's write, another
        reassignment) is retried from the image its watch brings. Raises ControllerMovedError if this broker
        lost the controller seat."""
        out: dict[TopicPartition, str | None] = {}
        pending = dict(targets)
        for attempt in range(REASSIGN_ATTEMPTS):
            m = self.member
            fence = self.fence
            if fence is None or m.zk is None:
                return {**out, **{tp: "NOT_CONTROLLER" for tp in pending}}
            by_topic: dict[str, dict[int, PartitionReassignment]] = {}
            live = set(m.brokers)
            for tp, target in pending.items():
                a = m.assignments.get(tp[0])
                problem = None
                if a is None or tp[0] in m.deletions or tp[1] not in a.replicas:
                    problem = "UNKNOWN_TOPIC_OR_PARTITION"
                elif target is None and not reassignment_of(a, tp[1]).in_progress:
                    problem = "NO_REASSIGNMENT_IN_PROGRESS"
                elif target is not None and (why := _invalid_target(target, live)) is not None:
                    problem = f"INVALID_REPLICA_ASSIGNMENT: {why}"
                if problem is not None:
                    out[tp] = problem
                else:
                    by_topic.setdefault(tp[0], {})[tp[1]] = reassign(reassignment_of(a, tp[1]), target)  # type: ignore[arg-type]
            pending = {}
            if not by_topic:
                break
            changed = [_with_partitions(m.assignments[name], parts) for name, parts in by_topic.items()]
            written = await asyncio.to_thread(m.zk.write_topic_assignments, changed, fence)
            for a, w in zip(changed, written, strict=True):
                if w is None:  # moved meanwhile: again from the image its watch brings
                    pending.update({(a.name, p): targets[(a.name, p)] for p in by_topic[a.name]})
                    continue
                m._on_assignment(w.name, w)
                for p, r in by_topic[a.name].items():
                    out[(a.name, p)] = None
                    log.info("%s-%d: reassignment %s: replicas %s (adding %s, removing %s)", a.name, p,
                             "started" if r.in_progress else "cancelled", list(r.replicas), list(r.adding),
                             list(r.removing))
            self._dirty.set()
            if not pending:
                break
            await asyncio.sleep(RETRY_S * (attempt + 1) / 4)
        for tp in pending:
            out[tp] = "UNKNOWN_SERVER_ERROR: the topic kept changing under the reassignment; retry"
        return out

    def reassignments(self, partitions: Sequence[TopicPartition] | None = None,
                      ) -> dict[TopicPartition, PartitionReassignment]:
        """The running reassignments (of ``partitions`` only, when given)."""
        m = self.member
        out: dict[TopicPartition, PartitionReassignment] = {}
        wanted = None if partitions is None else set(partitions)
        for name, a in m.assignments.items():
            for p in sorted({*a.adding, *a.removing}):
                if wanted is None or (name, p) in wanted:
                    out[(name, p)] = reassignment_of(a, p)
        return out


def _by_offline_replicas(states: Mapping[TopicPartition, LeaderAndIsr],
                         offline: Mapping[TopicPartition, frozenset[int]],
                         ) -> list[tuple[dict[TopicPartition, LeaderAndIsr], frozenset[int]]]:
    """``states`` split by the brokers holding each partition in a failed log directory: (partitions, those
    brokers) per distinct set; one group (with no broker) when no directory failed anywhere."""
    if not offline:
        return [(dict(states), frozenset())]
    groups: dict[frozenset[int], dict[TopicPartition, LeaderAndIsr]] = {}
    for tp, state in states.items():
        groups.setdefault(offline.get(tp, frozenset()), {})[tp] = state
    return [(group, brokers) for brokers, group in groups.items()]


def _invalid_target(target: Sequence[int], live: set[int]) -> str | None:
    if not target:
        return "the replica list is empty"
    if len(set(target)) != len(target):
        return f"the replica list {list(target)} names a broker twice"
    dead = sorted(set(target) - live)
    if dead:
        return f"brokers {dead} are not alive (registered brokers: {sorted(live)})"
    return None


def _with_partitions(a: TopicAssignment, parts: Mapping[int, PartitionReassignment]) -> TopicAssignment:
    """``a`` with these partitions' lists replaced (its ``zk_version`` kept: the write is conditional on it)."""
    adding, removing = dict(a.adding), dict(a.removing)
    for p, r in parts.items():
        adding.pop(p, None)
        removing.pop(p, None)
        if r.adding:
            adding[p] = r.adding
        if r.removing:
            removing[p] = r.removing
    return replace(a, replicas={**a.replicas, **{p: r.replicas for p, r in parts.items()}}, adding=adding,
                   removing=removing)
