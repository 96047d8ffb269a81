"""Replica placement: Kafka's worked examples, its error messages, and properties over random clusters."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.cluster.controller.assignment import (
    InvalidReplicaAssignmentError,
    add_partitions_assignment,
    assign_replicas,
    rack_alternated_brokers,
)
from odradek.protocol.errors import ErrorCode, InvalidPartitionsError, InvalidReplicationFactorError, KafkaError

NO_RACKS_5 = dict.fromkeys(range(5))
RACKS_6 = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


# --- Kafka's worked examples (AdminUtils' documentation and AdminRackAwareTest) ---------------------------------


def test_rack_unaware_example_five_brokers_ten_partitions() -> None:
    assert assign_replicas(NO_RACKS_5, 10, 3, start_index=0) == {
        0: (0, 1, 2),
        1: (1, 2, 3),
        2: (2, 3, 4),
        3: (3, 4, 0),
        4: (4, 0, 1),
        5: (0, 2, 3),  # second round: the followers' shift grows by one
        6: (1, 3, 4),
        7: (2, 4, 0),
        8: (3, 0, 1),
        9: (4, 1, 2),
    }


def test_rack_alternated_list() -> None:
    assert rack_alternated_brokers(RACKS_6) == [0, 3, 1, 5, 4, 2]
    without_5 = {b: r for b, r in RACKS_6.items() if b != 5}
    assert rack_alternated_brokers(without_5) == [0, 3, 1, 4, 2]
    nine = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rack_alternated_brokers(nine) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_rack_aware_example_seven_partitions() -> None:
    assert assign_replicas(RACKS_6, 7, 3, start_index=0) == {
        0: (0, 3, 1),
        1: (3, 1, 5),
        2: (1, 5, 4),
        3: (5, 4, 2),
        4: (4, 2, 0),
        5: (2, 0, 3),
        6: (0, 4, 2),  # not 0, 3, 1 again: the followers shift after a full round
    }


def test_broker_order_does_not_depend_on_mapping_order() -> None:
    shuffled = dict(reversed(list(NO_RACKS_5.items())))
    assert assign_replicas(shuffled, 10, 3, start_index=1) == assign_replicas(NO_RACKS_5, 10, 3, start_index=1)


def test_more_replicas_than_racks_covers_every_rack() -> None:
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    result = assign_replicas(racks, 6, 5, rng=random.Random(7))
    for replicas in result.values():
        assert len(set(replicas)) == 5
        assert {racks[b] for b in replicas} == {"rack1", "rack2", "rack3"}


def test_single_rack_leads_evenly() -> None:
    racks = dict.fromkeys(range(6), "rack1")
    result = assign_replicas(racks, 6, 3, rng=random.Random(3))
    assert Counter(r[0] for r in result.values()) == dict.fromkeys(range(6), 1)


def test_skips_brokers_already_holding_a_replica() -> None:
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}
    result = assign_replicas(racks, 6, 4, start_index=2)
    for replicas in result.values():
        assert len(set(replicas)) == 4
        assert {racks[b] for b in replicas} == {"a", "b", "c"}


def test_random_start_comes_from_rng() -> None:
    first = assign_replicas(NO_RACKS_5, 20, 3, rng=random.Random(42))
    assert first == assign_replicas(NO_RACKS_5, 20, 3, rng=random.Random(42))
    starts = {assign_replicas(NO_RACKS_5, 1, 1, rng=random.Random(seed))[0] for seed in range(50)}
    assert len(starts) > 1


# --- errors ------------------------------------------------------------------------------------------------------


def test_replication_factor_larger_than_brokers() -> None:
    with pytest.raises(InvalidReplicationFactorError) as err:
        assign_replicas({1: None, 2: None}, 1, 3)
    assert str(err.value) == "Replication factor: 3 larger than available brokers: 2."
    assert err.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_replication_factor_zero() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="must be larger than 0"):
        assign_replicas(NO_RACKS_5, 10, 0)


def test_partitions_zero() -> None:
    with pytest.raises(InvalidPartitionsError, match="must be larger than 0") as err:
        assign_replicas(NO_RACKS_5, 0, 1)
    assert err.value.code == ErrorCode.INVALID_PARTITIONS


def test_no_brokers() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 0"):
        assign_replicas({}, 1, 1)


def test_only_some_brokers_have_racks() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: None}
    with pytest.raises(InvalidReplicaAssignmentError, match="Not all brokers have rack information") as err:
        assign_replicas(racks, 10, 5, start_index=0)
    assert "4" in str(err.value) and "broker.rack" in str(err.value)
    assert err.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_negative_start_index() -> None:
    with pytest.raises(ValueError, match="start_index"):
        assign_replicas(NO_RACKS_5, 1, 1, start_index=-1)


# --- CreatePartitions ---------------------------------------------------------------------------------------------


def test_added_partitions_continue_the_pattern() -> None:
    whole = assign_replicas(NO_RACKS_5, 10, 3, start_index=0)
    existing = {p: whole[p] for p in range(3)}
    assert add_partitions_assignment(existing, 10, NO_RACKS_5) == {p: whole[p] for p in range(3, 10)}


def test_added_partitions_start_at_partition_zeros_leader() -> None:
    brokers = dict.fromkeys((10, 20, 30, 40))
    existing = {0: (30, 40), 1: (40, 10)}
    added = add_partitions_assignment(existing, 4, brokers)
    # Partition 0's first replica is 30, at index 2 in id order: partition 2 starts at index (2 + 2) % 4 = 0.
    assert added == assign_replicas(brokers, 2, 2, start_index=2, start_partition_id=2)
    assert set(added) == {2, 3} and added[2][0] == 10 and added[3][0] == 20
    assert all(len(r) == 2 for r in added.values())


def test_added_partitions_when_partition_zeros_leader_is_gone() -> None:
    existing = {0: (99, 1)}
    added = add_partitions_assignment(existing, 3, dict.fromkeys((1, 2, 3)))
    assert added == assign_replicas(dict.fromkeys((1, 2, 3)), 2, 2, start_index=0, start_partition_id=1)


def test_added_partitions_rack_aware() -> None:
    existing = assign_replicas(RACKS_6, 3, 3, start_index=0)
    added = add_partitions_assignment(existing, 12, RACKS_6)
    assert sorted(added) == list(range(3, 12))
    for replicas in added.values():
        assert {RACKS_6[b] for b in replicas} == {"rack1", "rack2", "rack3"}


def test_partition_count_must_grow() -> None:
    existing = {0: (1,), 1: (2,)}
    with pytest.raises(InvalidPartitionsError) as err:
        add_partitions_assignment(existing, 2, dict.fromkeys((1, 2)))
    assert str(err.value) == "Topic already has 2 partitions."
    with pytest.raises(InvalidPartitionsError) as err:
        add_partitions_assignment(existing, 1, dict.fromkeys((1, 2)))
    assert str(err.value) == "Topic currently has 2 partitions, which is higher than the requested 1."


def test_added_partitions_keep_partition_zeros_replication_factor() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="Replication factor: 3 larger than available brokers: 2"):
        add_partitions_assignment({0: (1, 2, 3)}, 2, dict.fromkeys((1, 2)))


def test_damaged_existing_assignment() -> None:
    with pytest.raises(KafkaError, match=r"numbered 0\.\.n-1"):
        add_partitions_assignment({1: (1,)}, 3, {1: None})


# --- properties ----------------------------------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn, racked: bool) -> dict[int, str | None]:
    ids = draw(st.sets(st.integers(0, 50), min_size=1, max_size=12))
    if not racked:
        return dict.fromkeys(ids)
    rack_names = draw(st.lists(st.sampled_from("abcde"), min_size=len(ids), max_size=len(ids)))
    return dict(zip(sorted(ids), rack_names, strict=True))


@st.composite
def placements(draw: st.DrawFn) -> tuple[dict[int, str | None], int, int, int | None, int]:
    brokers = draw(clusters(draw(st.booleans())))
    rf = draw(st.integers(1, len(brokers)))
    partitions = draw(st.integers(1, 40))
    start_index = draw(st.none() | st.integers(0, 30))
    start_partition_id = draw(st.integers(0, 30))
    return brokers, partitions, rf, start_index, start_partition_id


@settings(max_examples=300, deadline=None)
@given(placements(), st.randoms(use_true_random=False))
def test_every_partition_gets_rf_distinct_known_brokers(placement, rng) -> None:
    brokers, partitions, rf, start_index, first_id = placement
    result = assign_replicas(brokers, partitions, rf, start_index=start_index, start_partition_id=first_id, rng=rng)
    assert sorted(result) == list(range(first_id, first_id + partitions))
    for replicas in result.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)


@settings(max_examples=300, deadline=None)
@given(placements(), st.randoms(use_true_random=False))
def test_leaders_are_balanced(placement, rng) -> None:
    brokers, _, rf, start_index, first_id = placement
    partitions = len(brokers) * (1 + first_id % 3)  # a whole number of rounds
    result = assign_replicas(brokers, partitions, rf, start_index=start_index, start_partition_id=first_id, rng=rng)
    leaders = Counter(replicas[0] for replicas in result.values())
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=300, deadline=None)
@given(clusters(racked=True), st.data())
def test_rack_aware_spreads_over_as_many_racks_as_possible(brokers, data) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    partitions = data.draw(st.integers(1, 30))
    result = assign_replicas(brokers, partitions, rf, rng=data.draw(st.randoms(use_true_random=False)))
    rack_count = len(set(brokers.values()))
    for replicas in result.values():
        assert len({brokers[b] for b in replicas}) == min(rf, rack_count)


@settings(max_examples=200, deadline=None)
@given(placements(), st.integers(1, 20))
def test_added_partitions_are_valid(placement, extra) -> None:
    brokers, partitions, rf, start_index, _ = placement
    existing = assign_replicas(brokers, partitions, rf, start_index=start_index or 0)
    added = add_partitions_assignment(existing, partitions + extra, brokers)
    assert sorted(added) == list(range(partitions, partitions + extra))
    assert all(len(set(r)) == rf and set(r) <= set(brokers) for r in added.values())
