"""The reassignment decisions (cluster/controller/reassignment.py): pure, no ZooKeeper."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from odradek.cluster.controller.reassignment import PartitionReassignment, complete, reassign
from odradek.cluster.model import LeaderAndIsr

NONE = PartitionReassignment((1, 2, 3))


def test_a_reassignment_lists_target_first_then_the_leaving_replicas() -> None:
    r = reassign(NONE, [4, 2, 5])
    assert r == PartitionReassignment((4, 2, 5, 1, 3), adding=(4, 5), removing=(1, 3))
    assert (r.original, r.target, r.in_progress) == ((2, 1, 3), (4, 2, 5), True)


def test_a_new_target_during_a_reassignment_starts_from_the_original_replicas() -> None:
    running = reassign(NONE, [4, 5, 6])
    again = reassign(running, [1, 4])
    assert again == PartitionReassignment((1, 4, 2, 3), adding=(4,), removing=(2, 3))  # 5 and 6 are dropped


def test_cancelling_moves_back_to_the_original_replicas() -> None:
    running = reassign(NONE, [4, 2])
    back = reassign(running, None)
    assert set(back.replicas) == {1, 2, 3} and not back.in_progress
    assert not reassign(NONE, [1, 2, 3]).in_progress  # the same replicas: nothing to do


def test_completion_waits_for_every_target_replica_in_the_isr() -> None:
    r = reassign(NONE, [1, 2, 4])
    state = LeaderAndIsr(1, 5, (1, 2, 3), 7, zk_version=9)
    assert complete(r, state, {1, 2, 3, 4}, 8) is None
    done = complete(r, LeaderAndIsr(1, 5, (1, 2, 3, 4), 7, zk_version=9), {1, 2, 3, 4}, 8)
    assert done is not None and done.replicas == (1, 2, 4)
    assert done.state == LeaderAndIsr(1, 6, (1, 2, 4), 8, zk_version=9)  # the leaving replica is fenced


def test_completion_moves_leadership_to_the_first_target_replica_when_the_leader_leaves() -> None:
    r = reassign(NONE, [4, 5, 2])
    done = complete(r, LeaderAndIsr(1, 5, (1, 2, 3, 5, 4), 7), {1, 2, 3, 4, 5}, 8)
    assert done is not None and done.state is not None
    assert (done.state.leader, done.state.isr, done.state.leader_epoch) == (4, (2, 5, 4), 6)
    # a dead target replica does not lead
    done = complete(r, LeaderAndIsr(1, 5, (1, 2, 3, 5, 4), 7), {1, 2, 3, 5}, 8)
    assert done is not None and done.state is not None and done.state.leader == 5


def test_nothing_to_complete_without_a_reassignment_or_a_possible_leader() -> None:
    assert complete(NONE, LeaderAndIsr(1, 5, (1, 2, 3), 7), {1, 2, 3}, 8) is None
    r = reassign(NONE, [4])
    assert complete(r, LeaderAndIsr(1, 5, (1, 4), 7), {1}, 8) is None  # 4 is dead: wait


def test_an_already_completed_state_needs_only_the_assignment() -> None:
    r = reassign(NONE, [1, 2])
    done = complete(r, LeaderAndIsr(1, 6, (1, 2), 8), {1, 2, 3}, 8)
    assert done is not None and done.state is None and done.replicas == (1, 2)


brokers = st.lists(st.integers(1, 8), min_size=1, max_size=5, unique=True)


@given(brokers, brokers, st.one_of(st.none(), brokers))
def test_reassignment_lists_are_consistent(original: list[int], first: list[int], second: list[int] | None) -> None:
    r = reassign(reassign(PartitionReassignment(tuple(original)), first), second)
    # a cancel goes back to the original replicas, in the order the znode keeps them (as Kafka's)
    goal = r.original if second is None else tuple(second)
    assert r.target == goal and (second is not None or set(goal) == set(original))
    assert set(r.original) == set(original)
    assert set(r.adding) == set(goal) - set(original) and set(r.removing) == set(original) - set(goal)
    assert len(set(r.replicas)) == len(r.replicas)
    state = LeaderAndIsr(original[0], 3, tuple(r.replicas), 1)
    done = complete(r, state, set(r.replicas), 2)
    if r.in_progress:
        assert done is not None and done.replicas == goal
        final = done.state or state
        assert final.leader in goal and set(final.isr) == set(goal) and final.leader in final.isr
    else:
        assert done is None
