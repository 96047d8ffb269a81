"""Leader election and controller ISR changes: Kafka's rules case by case, properties, and a kill/revive machine."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from odradek.cluster.controller.election import (
    ElectionResult,
    controlled_shutdown_leader,
    elect_after_broker_failure,
    elect_for_controlled_shutdown,
    elect_for_new_partitions,
    elect_for_returning_broker,
    elect_preferred_leaders,
    offline_partition_leader,
    preferred_leader,
)
from odradek.cluster.model import NO_LEADER, LeaderAndIsr, TopicPartition

T0: TopicPartition = ("t", 0)
T1: TopicPartition = ("t", 1)
U0: TopicPartition = ("u", 0)
CE = 7  # the controller epoch of the deciding controller


def state(leader: int, isr: tuple[int, ...], epoch: int = 5, version: int = 11) -> LeaderAndIsr:
    return LeaderAndIsr(leader, epoch, isr, controller_epoch=3, zk_version=version)


# --- one partition ---------------------------------------------------------------------------------------------------


def test_offline_leader_is_first_live_isr_member_in_assignment_order() -> None:
    assert offline_partition_leader([1, 2, 3], [3, 2], {2, 3}, unclean=False) == (2, False)
    assert offline_partition_leader([3, 2, 1], [1, 2], {1, 2}, unclean=False) == (2, False)


def test_offline_leader_unclean_only_when_allowed() -> None:
    assert offline_partition_leader([1, 2, 3], [1], {2, 3}, unclean=False) is None
    assert offline_partition_leader([1, 2, 3], [1], {3, 2}, unclean=True) == (2, True)
    assert offline_partition_leader([1, 2, 3], [1], set(), unclean=True) is None
    # A clean choice wins even when unclean election is allowed.
    assert offline_partition_leader([1, 2, 3], [3], {2, 3}, unclean=True) == (3, False)


def test_offline_leader_ignores_isr_members_outside_the_assignment() -> None:
    assert offline_partition_leader([1, 2], [9, 2], {9, 2}, unclean=False) == (2, False)


def test_controlled_shutdown_leader() -> None:
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}) == 2
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2}) == 3
    assert controlled_shutdown_leader([1, 2, 3], [1, 3], {1, 2}, {1}) is None


def test_preferred_leader() -> None:
    assert preferred_leader([1, 2], [2, 1], {1, 2}) == 1
    assert preferred_leader([1, 2], [2], {1, 2}) is None
    assert preferred_leader([1, 2], [1, 2], {2}) is None
    assert preferred_leader([], [1], {1}) is None


# --- broker failure --------------------------------------------------------------------------------------------------


def test_leader_failure_elects_next_isr_member_and_shrinks_isr() -> None:
    result = elect_after_broker_failure({T0: state(1, (1, 2, 3))}, {T0: [1, 2, 3]}, {2, 3}, CE)
    assert result.changed == {T0: LeaderAndIsr(2, 6, (2, 3), CE, 11)}
    assert result.offline == [] and result.unclean == []


def test_follower_failure_shrinks_isr_and_bumps_epoch() -> None:
    result = elect_after_broker_failure({T0: state(1, (1, 2, 3))}, {T0: [1, 2, 3]}, {1, 2}, CE)
    assert result.changed == {T0: LeaderAndIsr(1, 6, (1, 2), CE, 11)}


def test_several_failures_at_once_are_one_write() -> None:
    result = elect_after_broker_failure({T0: state(3, (1, 2, 3))}, {T0: [1, 2, 3]}, {3}, CE)
    assert result.changed == {T0: LeaderAndIsr(3, 6, (3,), CE, 11)}


def test_last_isr_member_dies_partition_goes_offline_keeping_it() -> None:
    result = elect_after_broker_failure({T0: state(1, (1,))}, {T0: [1, 2]}, {2}, CE)
    assert result.changed == {T0: LeaderAndIsr(NO_LEADER, 6, (1,), CE, 11)}
    assert result.offline == [T0]


def test_whole_isr_dies_at_once_keeps_the_last_leader() -> None:
    result = elect_after_broker_failure({T0: state(2, (1, 2))}, {T0: [1, 2, 3]}, {3}, CE)
    assert result.changed == {T0: LeaderAndIsr(NO_LEADER, 6, (2,), CE, 11)}
    assert result.offline == [T0]


def test_already_offline_partition_is_not_written_again() -> None:
    result = elect_after_broker_failure({T0: state(NO_LEADER, (1,))}, {T0: [1, 2]}, {2}, CE)
    assert result.changed == {} and result.offline == [T0]


def test_unclean_election_leader_alone_in_isr() -> None:
    result = elect_after_broker_failure({T0: state(1, (1,))}, {T0: [1, 3, 2]}, {2, 3}, CE, unclean=True)
    assert result.changed == {T0: LeaderAndIsr(3, 6, (3,), CE, 11)}
    assert result.unclean == [T0] and result.offline == []


def test_unclean_is_a_per_topic_setting() -> None:
    states = {T0: state(1, (1,)), U0: state(1, (1,))}
    assignments = {T0: [1, 2], U0: [1, 2]}
    result = elect_after_broker_failure(states, assignments, {2}, CE, unclean=lambda topic: topic == "u")
    assert result.changed[U0].leader == 2 and result.unclean == [U0]
    assert result.changed[T0].leader == NO_LEADER and result.offline == [T0]


def test_unclean_election_of_an_offline_partition() -> None:
    result = elect_after_broker_failure({T0: state(NO_LEADER, (1,))}, {T0: [1, 2]}, {2}, CE, unclean=True)
    assert result.changed == {T0: LeaderAndIsr(2, 6, (2,), CE, 11)} and result.unclean == [T0]


def test_untouched_partitions_do_not_change() -> None:
    states = {T0: state(2, (2, 3)), T1: state(1, (1, 2))}
    result = elect_after_broker_failure(states, {T0: [2, 3, 1], T1: [1, 2, 3]}, {1, 2}, CE)
    assert set(result.changed) == {T0}
    assert result.changed[T0] == LeaderAndIsr(2, 6, (2,), CE, 11)


def test_never_led_partition_is_initialised_when_a_replica_is_live() -> None:
    fresh = elect_for_new_partitions({T0: [1, 2, 3]}, {9}, CE)[T0]
    result = elect_after_broker_failure({T0: fresh}, {T0: [1, 2, 3]}, {3, 2}, CE)
    assert result.changed == {T0: LeaderAndIsr(2, 1, (2, 3), CE)}
    assert result.unclean == []


# --- returning broker -----------------------------------------------------------------------------------------------


def test_returning_isr_member_leads_its_offline_partitions() -> None:
    states = {T0: state(NO_LEADER, (1,)), T1: state(NO_LEADER, (3,)), U0: state(2, (2,))}
    assignments = {T0: [1, 2], T1: [3, 1], U0: [2, 1]}
    result = elect_for_returning_broker(states, assignments, {1, 2}, 1, CE)
    assert result.changed == {T0: LeaderAndIsr(1, 6, (1,), CE, 11)}
    assert result.offline == [T1]


def test_returning_broker_unclean() -> None:
    states = {T1: state(NO_LEADER, (3,))}
    result = elect_for_returning_broker(states, {T1: [3, 1]}, {1}, 1, CE, unclean=True)
    assert result.changed == {T1: LeaderAndIsr(1, 6, (1,), CE, 11)} and result.unclean == [T1]


def test_returning_broker_must_be_live() -> None:
    with pytest.raises(ValueError, match="not in the live set"):
        elect_for_returning_broker({}, {}, {1}, 2, CE)


# --- new partitions -------------------------------------------------------------------------------------------------


def test_new_partitions() -> None:
    result = elect_for_new_partitions({T0: [3, 1, 2], T1: [4, 2], U0: [4]}, {1, 2, 3}, CE)
    assert result == {
        T0: LeaderAndIsr(3, 0, (3, 1, 2), CE),
        T1: LeaderAndIsr(2, 0, (2,), CE),
        U0: LeaderAndIsr(NO_LEADER, 0, (), CE),
    }


# --- controlled shutdown --------------------------------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_and_leaves_isrs() -> None:
    states = {T0: state(1, (1, 2, 3)), T1: state(2, (2, 1)), U0: state(3, (3,))}
    assignments = {T0: [1, 2, 3], T1: [2, 1], U0: [3, 1]}
    result = elect_for_controlled_shutdown(states, assignments, {1, 2, 3}, 1, CE)
    assert result.changed == {T0: LeaderAndIsr(2, 6, (2, 3), CE, 11), T1: LeaderAndIsr(2, 6, (2,), CE, 11)}
    assert result.remaining == []


def test_controlled_shutdown_keeps_partitions_nobody_can_take() -> None:
    states = {T0: state(1, (1,)), T1: state(1, (1, 2)), U0: state(1, (1,))}
    assignments = {T0: [1, 2], T1: [1, 2], U0: [1]}
    result = elect_for_controlled_shutdown(states, assignments, {1}, 1, CE)
    # T0: the only ISR member; T1: its other ISR member is not live; U0: a single replica (Kafka skips those).
    assert result.changed == {}
    assert result.remaining == [T0, T1, U0]


def test_controlled_shutdown_avoids_other_departing_brokers() -> None:
    states = {T0: state(1, (1, 2, 3))}
    result = elect_for_controlled_shutdown(states, {T0: [1, 2, 3]}, {1, 2, 3}, 1, CE, also_shutting_down={2})
    assert result.changed == {T0: LeaderAndIsr(3, 6, (3,), CE, 11)}


def test_controlled_shutdown_follower_alone_in_isr_is_kept() -> None:
    states = {T0: state(NO_LEADER, (1,))}
    result = elect_for_controlled_shutdown(states, {T0: [2, 1]}, {1, 2}, 1, CE)
    assert result == ElectionResult()


# --- preferred leader -------------------------------------------------------------------------------------------


def test_preferred_leader_election() -> None:
    states = {T0: state(2, (2, 1)), T1: state(2, (2,)), U0: state(1, (1, 2))}
    assignments = {T0: [1, 2], T1: [1, 2], U0: [1, 2]}
    result = elect_preferred_leaders(states, assignments, {1, 2}, CE)
    assert result.changed == {T0: LeaderAndIsr(1, 6, (2, 1), CE, 11)}
    assert result.remaining == [T1]
    assert elect_preferred_leaders(states, assignments, {1, 2}, CE, partitions=[T1]).changed == {}


# --- properties of broker failure ------------------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> tuple[dict, dict, set[int], bool]:
    """Consistent partition states on brokers 0..n-1 (leader in ISR, ISR within the assignment) and a live set."""
    n = draw(st.integers(1, 6))
    brokers = list(range(n))
    states: dict[TopicPartition, LeaderAndIsr] = {}
    assignments: dict[TopicPartition, tuple[int, ...]] = {}
    for p in range(draw(st.integers(1, 8))):
        replicas = tuple(draw(st.permutations(brokers))[: draw(st.integers(1, n))])
        isr = tuple(draw(st.permutations(replicas))[: draw(st.integers(1, len(replicas)))])
        online = draw(st.booleans())
        leader = draw(st.sampled_from(isr)) if online else NO_LEADER
        if not online:
            isr = isr[:1]
        tp = ("t", p)
        states[tp] = LeaderAndIsr(leader, draw(st.integers(0, 100)), isr, 1, draw(st.integers(0, 100)))
        assignments[tp] = replicas
    live = set(draw(st.lists(st.sampled_from(brokers), unique=True)))
    return states, assignments, live, draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(clusters())
def test_broker_failure_properties(cluster) -> None:
    states, assignments, live, unclean = cluster
    result = elect_after_broker_failure(states, assignments, live, CE, unclean=unclean)
    for tp, new in result.changed.items():
        old = states[tp]
        assert new.leader_epoch == old.leader_epoch + 1
        assert new.zk_version == old.zk_version
        assert new.controller_epoch == CE
        assert new.isr, "the controller never empties an ISR"
        if tp not in result.unclean:
            assert set(new.isr) <= set(old.isr), "the controller only shrinks ISRs (leaders grow them)"
        if new.leader != NO_LEADER:
            assert new.leader in live and new.leader in assignments[tp]
            assert new.leader in new.isr
            if tp not in result.unclean:
                assert new.leader in old.isr
            else:
                assert new.isr == (new.leader,) and not any(r in live for r in old.isr)
    for tp, old in states.items():
        new = result.changed.get(tp, old)
        assert new.leader == NO_LEADER or new.leader in live, "no dead broker leads"
        if any(r in live for r in new.isr):
            assert all(r in live for r in new.isr), "no dead broker stays in an ISR that has a live member"
        if new.leader == NO_LEADER:
            assert tp in result.offline
            if not unclean:
                assert not any(r in live for r in old.isr), "a partition with a live ISR member is never offline"
        untouched = old.leader in live and all(r in live for r in old.isr)
        if untouched:
            assert tp not in result.changed
    assert not unclean or not result.offline or all(
        not any(r in live for r in assignments[tp]) for tp in result.offline
    )


@settings(max_examples=200, deadline=None)
@given(clusters(), st.data())
def test_controlled_shutdown_properties(cluster, data) -> None:
    states, assignments, live, _ = cluster
    departing = data.draw(st.sampled_from(sorted({r for a in assignments.values() for r in a})))
    live = live | {departing}
    result = elect_for_controlled_shutdown(states, assignments, live, departing, CE)
    for tp, new in result.changed.items():
        old = states[tp]
        assert new.leader_epoch == old.leader_epoch + 1 and new.zk_version == old.zk_version
        assert departing not in new.isr and new.isr
        assert new.leader == old.leader or (new.leader in old.isr and new.leader in live)
    for tp, old in states.items():
        new = result.changed.get(tp, old)
        assert (tp in result.remaining) == (new.leader == departing)
        if departing not in assignments[tp]:
            assert tp not in result.changed


# --- a cluster that loses and regains brokers ------------------------------------------------------------------------


class KillRevive(RuleBasedStateMachine):
    """Brokers die, return and shut down cleanly; leaders take records with acks=all and grow their ISR back.

    ``has[tp][b]`` is how many acknowledged records broker ``b`` holds (a dead broker keeps its disk). Records are
    acknowledged once every ISR member has them, so the high watermark ``hw[tp]`` is what no election may lose.
    """

    BROKERS = (0, 1, 2, 3)

    @initialize(
        placements=st.lists(
            st.permutations(BROKERS).flatmap(lambda p: st.integers(1, 3).map(lambda k: tuple(p[:k]))),
            min_size=1,
            max_size=5,
        )
    )
    def create(self, placements: list[tuple[int, ...]]) -> None:
        self.live = set(self.BROKERS)
        self.assignments = {("t", p): replicas for p, replicas in enumerate(placements)}
        self.states = elect_for_new_partitions(self.assignments, self.live, 0)
        self.hw = dict.fromkeys(self.assignments, 0)
        self.has = {tp: dict.fromkeys(self.BROKERS, 0) for tp in self.assignments}
        self.controller_epoch = 1

    def _apply(self, result: ElectionResult) -> None:
        assert not result.unclean
        for tp, new in result.changed.items():
            old = self.states[tp]
            assert new.leader_epoch == old.leader_epoch + 1
            if new.leader != NO_LEADER and new.leader != old.leader:
                assert new.leader in old.isr, "the new leader is a member of the last ISR"
                assert self.has[tp][new.leader] == self.hw[tp], "an election lost acknowledged records"
            self.states[tp] = new

    @precondition(lambda self: len(self.live) > 0)
    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        self.live.discard(data.draw(st.sampled_from(sorted(self.live))))
        self._apply(elect_after_broker_failure(self.states, self.assignments, self.live, self.controller_epoch))

    @precondition(lambda self: len(self.live) < len(self.BROKERS))
    @rule(data=st.data())
    def revive(self, data: st.DataObject) -> None:
        broker = data.draw(st.sampled_from(sorted(set(self.BROKERS) - self.live)))
        self.live.add(broker)
        self._apply(elect_for_returning_broker(self.states, self.assignments, self.live, broker, self.controller_epoch))

    @precondition(lambda self: len(self.live) > 0)
    @rule(data=st.data())
    def shut_down_cleanly(self, data: st.DataObject) -> None:
        broker = data.draw(st.sampled_from(sorted(self.live)))
        self._apply(elect_for_controlled_shutdown(self.states, self.assignments, self.live, broker,
                                                  self.controller_epoch))
        self.live.discard(broker)
        self._apply(elect_after_broker_failure(self.states, self.assignments, self.live, self.controller_epoch))

    @rule(data=st.data())
    def produce(self, data: st.DataObject) -> None:
        tp = data.draw(st.sampled_from(sorted(self.states)))
        state = self.states[tp]
        if state.leader == NO_LEADER:
            return
        self.hw[tp] += 1
        for replica in state.isr:
            self.has[tp][replica] = self.hw[tp]

    @rule(data=st.data())
    def follower_catches_up(self, data: st.DataObject) -> None:
        tp = data.draw(st.sampled_from(sorted(self.states)))
        state = self.states[tp]
        joiners = [r for r in self.assignments[tp] if r in self.live and r not in state.isr]
        if state.leader == NO_LEADER or not joiners:
            return
        joiner = data.draw(st.sampled_from(joiners))
        self.has[tp][joiner] = self.hw[tp]
        self.states[tp] = state.with_isr((*state.isr, joiner))  # the leader's AlterPartition: same epoch

    @rule()
    def controller_fails_over(self) -> None:
        self.controller_epoch += 1

    @invariant()
    def partitions_with_a_live_isr_member_are_online(self) -> None:
        for tp, state in self.states.items():
            if any(r in self.live for r in state.isr):
                assert state.leader in self.live, f"{tp} is offline with a live ISR member: {state}"

    @invariant()
    def leaders_are_live_isr_members_with_every_acknowledged_record(self) -> None:
        for tp, state in self.states.items():
            assert state.isr
            if state.leader != NO_LEADER:
                assert state.leader in self.live and state.leader in state.isr
                assert self.has[tp][state.leader] == self.hw[tp]
                assert all(r in self.live for r in state.isr)


KillRevive.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_kill_revive = KillRevive.TestCase


def test_unclean_leader_election_on_request() -> None:
    from odradek.cluster.controller.election import elect_unclean_leaders

    states = {("t", 0): LeaderAndIsr(NO_LEADER, 4, (1,), 2), ("t", 1): LeaderAndIsr(2, 4, (2, 3), 2),
              ("t", 2): LeaderAndIsr(NO_LEADER, 4, (1,), 2)}
    assignments = {("t", 0): (1, 2, 3), ("t", 1): (2, 3, 1), ("t", 2): (1,)}
    r = elect_unclean_leaders(states, assignments, {2, 3}, 5, list(states))
    assert r.changed == {("t", 0): LeaderAndIsr(2, 5, (2,), 5)}
    assert r.unclean == [("t", 0)] and r.offline == [("t", 2)]  # t-1 has a live leader: not needed


def test_imbalance_lists_partitions_whose_preferred_leader_can_take_over() -> None:
    from odradek.cluster.controller.election import imbalanced_partitions

    assignments = {("t", p): r for p, r in enumerate([(1, 2), (1, 2), (2, 1), (1, 3), (3, 1)])}
    states = {("t", 0): LeaderAndIsr(2, 1, (1, 2), 1), ("t", 1): LeaderAndIsr(1, 1, (1, 2), 1),
              ("t", 2): LeaderAndIsr(2, 1, (2, 1), 1), ("t", 3): LeaderAndIsr(3, 1, (3,), 1),
              ("t", 4): LeaderAndIsr(3, 1, (3, 1), 1)}
    # broker 1 prefers 3 partitions and leads 1: 67 % elsewhere; t-3 cannot move (1 is not in its ISR)
    assert imbalanced_partitions(states, assignments, {1, 2, 3}, 10) == [("t", 0)]
    assert imbalanced_partitions(states, assignments, {1, 2, 3}, 70) == []
    assert imbalanced_partitions(states, assignments, {2, 3}, 10) == []  # broker 1 is not live
