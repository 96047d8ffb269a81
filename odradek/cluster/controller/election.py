"""Leader election and controller-side ISR changes, as Kafka's ZooKeeper-mode controller decides them.

Pure functions over ``LeaderAndIsr`` values: no ZooKeeper, no clock. They mirror Kafka's
``PartitionLeaderElectionAlgorithms`` and ``Election`` (leader choice), the ``OfflineReplica`` transition of its
``ReplicaStateMachine`` (a dead or departing replica leaves the ISR) and the controller's broker-failure,
broker-startup, new-partition and controlled-shutdown callbacks.

Invariants of every result:
- A leader is always chosen in *assignment* order (the preferred replica first), never in ISR order.
- A clean election picks a live member of the old ISR, so no acknowledged (committed) record is lost; only an
  unclean election (``unclean.leader.election.enable``) picks a replica outside it, and then ``isr == (leader,)``.
- Every changed partition's ``leader_epoch`` is the old one plus exactly one, including ISR-only changes the
  controller makes (Kafka's ``OfflineReplica`` transition bumps it too); ``zk_version`` is the old one, so the
  store's write is conditional on the state the decision was made from.
- The controller never empties an ISR: when the last ISR member dies the partition goes offline
  (``leader == NO_LEADER``) and keeps that member (the last leader) in its ISR, so it is the one elected when it
  returns (Kafka's behaviour; with unclean election off no other replica may lead).
- Partitions a decision does not concern are left out of ``changed``: no write, no epoch bump.

One deliberate difference: Kafka removes each dead broker from an ISR in its own ZooKeeper write (one epoch bump
per broker); when several brokers die at once this module folds them into one write with the same final ISR.
Kafka 3.2+ also marks a partition RECOVERING after an unclean election; the model has no recovery state, so
callers learn of unclean elections from ``ElectionResult.unclean`` instead.

``live`` is the set of brokers that may lead or stay in an ISR: registered brokers, excluding those in
controlled shutdown for the offline-partition elections (Kafka's ``liveBrokerIds``). A partition missing from
``assignments`` is treated as having no replicas, as Kafka's controller context does.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from odradek.cluster.model import NO_LEADER, LeaderAndIsr, TopicPartition

__all__ = [
    "ElectionResult",
    "UncleanPolicy",
    "controlled_shutdown_leader",
    "elect_after_broker_failure",
    "elect_for_controlled_shutdown",
    "elect_for_new_partitions",
    "elect_for_returning_broker",
    "elect_preferred_leaders",
    "elect_unclean_leaders",
    "imbalanced_partitions",
    "offline_partition_leader",
    "preferred_leader",
]

# Whether unclean leader election is allowed: one answer for all topics, or per topic (the topic's
# ``unclean.leader.election.enable`` with the broker default behind it).
UncleanPolicy = Callable[[str], bool] | bool


@dataclass
class ElectionResult:
    """What a controller decision changes.

    ``changed``: the new state of every partition to write (conditional on its ``zk_version``).
    ``offline``: partitions left without a leader (no live replica may lead them).
    ``unclean``: partitions whose new leader came from outside the old ISR (data may have been lost).
    ``remaining``: for controlled shutdown, partitions the departing broker still leads (it should not stop yet);
    for preferred-leader election, partitions whose preferred replica could not take over.
    """

    changed: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    offline: list[TopicPartition] = field(default_factory=list)
    unclean: list[TopicPartition] = field(default_factory=list)
    remaining: list[TopicPartition] = field(default_factory=list)


# --- leader choice for one partition -------------------------------------------------------------------------


def offline_partition_leader(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int], *, unclean: bool
) -> tuple[int, bool] | None:
    """``(leader, was_unclean)`` for a partition whose leader is gone; None when nobody may lead.

    The first replica in assignment order that is live and in the ISR; failing that, when ``unclean``, the first
    live replica in assignment order (``was_unclean`` True).
    """
    for replica in assignment:
        if replica in live and replica in isr:
            return replica, False
    if unclean:
        for replica in assignment:
            if replica in live:
                return replica, True
    return None


def controlled_shutdown_leader(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int], shutting_down: Collection[int]
) -> int | None:
    """The first replica in assignment order that is in the ISR, live and not shutting down; else None."""
    for replica in assignment:
        if replica in isr and replica in live and replica not in shutting_down:
            return replica
    return None


def preferred_leader(assignment: Sequence[int], isr: Sequence[int], live: Collection[int]) -> int | None:
    """The preferred replica (``assignment[0]``) when it is live and in the ISR; else None."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


# --- decisions over many partitions ----------------------------------------------------------------------------


def elect_after_broker_failure(
    states: Mapping[TopicPartition, LeaderAndIsr],
    assignments: Mapping[TopicPartition, Sequence[int]],
    live: Collection[int],
    controller_epoch: int,
    *,
    unclean: UncleanPolicy = False,
) -> ElectionResult:
    """The controller's answer to brokers leaving ``live`` (ZooKeeper session lost).

    Every partition whose leader is not live gets a new leader (old ISR minus the dead, or just the leader when
    the election is unclean) or goes offline, keeping its last leader as the ISR. Every partition whose leader is
    live but whose ISR holds dead brokers loses them from the ISR (same leader, epoch + 1), unless that would empty
    the ISR.
    """
    result = ElectionResult()
    for tp, state in states.items():
        if state.leader in live:
            isr = tuple(r for r in state.isr if r in live)
            if isr and isr != state.isr:
                result.changed[tp] = state.new_leader(state.leader, isr, controller_epoch)
            continue
        _elect_offline(tp, state, assignments.get(tp, ()), live, _allows_unclean(unclean, tp[0]),
                       controller_epoch, result)
    return result


def elect_for_returning_broker(
    states: Mapping[TopicPartition, LeaderAndIsr],
    assignments: Mapping[TopicPartition, Sequence[int]],
    live: Collection[int],
    returned: int,
    controller_epoch: int,
    *,
    unclean: UncleanPolicy = False,
) -> ElectionResult:
    """The controller's answer to broker ``returned`` (re)joining ``live``.

    As Kafka's broker-startup callback, every partition without a live leader is tried again (not only those the
    returned broker hosts: the topic's unclean setting may have changed too). Partitions that still cannot get a
    leader are listed in ``offline`` and not changed. ISRs are not grown here: a returning replica rejoins the
    ISR when its leader sees it caught up (AlterPartition), never by the controller's decision.
    """
    if returned not in live:
        raise ValueError(f"broker {returned} is said to have returned but is not in the live set {sorted(live)}")
    result = ElectionResult()
    for tp, state in states.items():
        if state.leader not in live:
            _elect_offline(tp, state, assignments.get(tp, ()), live, _allows_unclean(unclean, tp[0]),
                           controller_epoch, result)
    return result


def elect_for_controlled_shutdown(
    states: Mapping[TopicPartition, LeaderAndIsr],
    assignments: Mapping[TopicPartition, Sequence[int]],
    live: Collection[int],
    shutting_down: int,
    controller_epoch: int,
    *,
    also_shutting_down: Collection[int] = (),
) -> ElectionResult:
    """Move leadership and ISR membership away from ``shutting_down`` before it stops (ControlledShutdown).

    For partitions with more than one assigned replica (Kafka leaves single-replica partitions alone):
    - led by ``shutting_down``: the first replica in assignment order that is in the ISR, live and not shutting
      down (``also_shutting_down`` names other brokers in controlled shutdown) becomes leader; the ISR loses every
      shutting-down broker. When there is no such replica the partition is left as it is.
    - followed by it, with it in the ISR: it leaves the ISR (epoch + 1), unless it is the ISR's only member.
    ``remaining`` lists every partition still led by ``shutting_down`` afterwards, single-replica ones included,
    which the broker reports as the partitions it cannot hand over yet.
    """
    departing = {shutting_down, *also_shutting_down}
    result = ElectionResult()
    for tp, state in states.items():
        assignment = assignments.get(tp, ())
        if shutting_down not in assignment or len(assignment) <= 1:
            continue
        if state.leader == shutting_down:
            leader = controlled_shutdown_leader(assignment, state.isr, live, departing)
            if leader is not None:
                isr = tuple(r for r in state.isr if r not in departing)
                result.changed[tp] = state.new_leader(leader, isr, controller_epoch)
        elif shutting_down in state.isr and len(state.isr) > 1:
            isr = tuple(r for r in state.isr if r != shutting_down)
            result.changed[tp] = state.new_leader(state.leader, isr, controller_epoch)
    result.remaining = [tp for tp, state in states.items() if result.changed.get(tp, state).leader == shutting_down]
    return result


def elect_for_new_partitions(
    assignments: Mapping[TopicPartition, Sequence[int]], live: Collection[int], controller_epoch: int
) -> dict[TopicPartition, LeaderAndIsr]:
    """The first state of newly created partitions: the first live replica leads, the live replicas form the ISR.

    Leader epoch 0, ``zk_version`` unknown (the state znode does not exist yet). A partition with no live replica
    gets ``LeaderAndIsr(NO_LEADER, 0, (), controller_epoch)``: offline with an empty ISR, which the later
    elections read as "never led" and initialise the same way once a replica is live (a clean choice, since no
    record was ever written).
    """
    states: dict[TopicPartition, LeaderAndIsr] = {}
    for tp, assignment in assignments.items():
        replicas = _live_replicas(assignment, live)
        leader = replicas[0] if replicas else NO_LEADER
        states[tp] = LeaderAndIsr(leader, 0, replicas, controller_epoch)
    return states


def elect_preferred_leaders(
    states: Mapping[TopicPartition, LeaderAndIsr],
    assignments: Mapping[TopicPartition, Sequence[int]],
    live: Collection[int],
    controller_epoch: int,
    partitions: Iterable[TopicPartition] | None = None,
) -> ElectionResult:
    """Move leadership back to the preferred replica (ElectLeaders PREFERRED, auto leader rebalance).

    Partitions already led by their preferred replica are skipped (Kafka's ELECTION_NOT_NEEDED). Otherwise the
    preferred replica leads if it is live and in the ISR (ISR unchanged, epoch + 1); if not, the partition is
    listed in ``remaining``. ``partitions`` limits the decision to those partitions (all when None).
    """
    result = ElectionResult()
    for tp in states if partitions is None else partitions:
        state = states[tp]
        assignment = assignments.get(tp, ())
        if assignment and state.leader == assignment[0]:
            continue
        leader = preferred_leader(assignment, state.isr, live)
        if leader is None:
            result.remaining.append(tp)
        else:
            result.changed[tp] = state.new_leader(leader, state.isr, controller_epoch)
    return result


def elect_unclean_leaders(
    states: Mapping[TopicPartition, LeaderAndIsr],
    assignments: Mapping[TopicPartition, Sequence[int]],
    live: Collection[int],
    controller_epoch: int,
    partitions: Iterable[TopicPartition],
) -> ElectionResult:
    """ElectLeaders UNCLEAN: a partition without a live leader gets one, from its ISR if possible, else any live
    replica (``unclean``). Partitions with a live leader are left out (Kafka's ELECTION_NOT_NEEDED); those no
    live replica can lead are listed in ``offline``."""
    result = ElectionResult()
    for tp in partitions:
        state = states[tp]
        if state.leader in live:
            continue
        _elect_offline(tp, state, assignments.get(tp, ()), live, True, controller_epoch, result)
    return result


def imbalanced_partitions(
    states: Mapping[TopicPartition, LeaderAndIsr],
    assignments: Mapping[TopicPartition, Sequence[int]],
    live: Collection[int],
    percentage: int,
) -> list[TopicPartition]:
    """Kafka's auto leader rebalance check: for each live broker, the share of the partitions it is the preferred
    replica of that another broker leads; where that share exceeds ``percentage`` %, those partitions whose
    preferred replica could lead now (live and in the ISR) are returned, for a preferred-leader election."""
    preferred_of: dict[int, list[TopicPartition]] = {}
    for tp, assignment in assignments.items():
        if assignment and tp in states:
            preferred_of.setdefault(assignment[0], []).append(tp)
    out: list[TopicPartition] = []
    for broker, tps in sorted(preferred_of.items()):
        if broker not in live:
            continue
        elsewhere = [tp for tp in tps if states[tp].leader != broker]
        if elsewhere and len(elsewhere) * 100 > percentage * len(tps):
            out.extend(tp for tp in elsewhere if preferred_leader(assignments[tp], states[tp].isr, live) is not None)
    return out


# --- helpers ---------------------------------------------------------------------------------------------------


def _allows_unclean(policy: UncleanPolicy, topic: str) -> bool:
    return policy if isinstance(policy, bool) else bool(policy(topic))


def _live_replicas(assignment: Sequence[int], live: Collection[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(r for r in assignment if r in live))


def _elect_offline(
    tp: TopicPartition,
    state: LeaderAndIsr,
    assignment: Sequence[int],
    live: Collection[int],
    allow_unclean: bool,
    controller_epoch: int,
    result: ElectionResult,
) -> None:
    """Decide for one partition whose leader is not live; record the outcome in ``result``."""
    if not state.isr:
        # Never led (no replica was live at creation): initialise it as a new partition.
        replicas = _live_replicas(assignment, live)
        if replicas:
            result.changed[tp] = state.new_leader(replicas[0], replicas, controller_epoch)
        else:
            result.offline.append(tp)
        return
    choice = offline_partition_leader(assignment, state.isr, live, unclean=allow_unclean)
    if choice is not None:
        leader, was_unclean = choice
        isr = (leader,) if was_unclean else tuple(r for r in state.isr if r in live)
        result.changed[tp] = state.new_leader(leader, isr, controller_epoch)
        if was_unclean:
            result.unclean.append(tp)
        return
    result.offline.append(tp)
    # Offline: keep the last leader as the ISR's one member (it holds every committed record), as Kafka's
    # OfflineReplica transition leaves it. An already-offline partition is not written again.
    isr = (state.leader,) if state.leader in state.isr else state.isr
    if state.leader != NO_LEADER or isr != state.isr:
        result.changed[tp] = state.new_leader(NO_LEADER, isr, controller_epoch)
