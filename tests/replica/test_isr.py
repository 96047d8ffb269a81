"""The leader's ISR and high-watermark rules, one at a time, with time as plain integers."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.replica.isr import (
    FetchUpdate,
    FollowerState,
    IsrChangeError,
    LeaderReplicaState,
    PendingIsr,
    StaleBrokerEpochError,
    UnknownReplicaError,
    follower_high_watermark,
    truncation_offset,
)
from odradek.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache

LAG = 30_000
T0 = 1_000_000


def leader(
    isr: tuple[int, ...] = (1, 2, 3),
    replicas: tuple[int, ...] = (1, 2, 3),
    log_end: int = 10,
    hw: int = 10,
    now: int = T0,
    epoch_start: int | None = None,
) -> LeaderReplicaState:
    return LeaderReplicaState(
        local_id=1,
        leader_epoch=5,
        isr=isr,
        replicas=replicas,
        local_log_end=log_end,
        high_watermark=hw,
        now_ms=now,
        epoch_start_offset=epoch_start,
    )


def fetch(state: LeaderReplicaState, replica: int, offset: int, now: int = T0, epoch: int = -1) -> FetchUpdate:
    return state.on_follower_fetch(replica, offset, 0, now, state.local_log_end, broker_epoch=epoch)


# ---- starting to lead ----------------------------------------------------------------------------------


def test_leadership_start_gives_isr_followers_the_benefit_of_the_doubt() -> None:
    state = leader(isr=(1, 2), replicas=(1, 2, 3))
    by_id = {f.replica_id: f for f in state.follower_states()}
    assert set(by_id) == {2, 3}
    assert by_id[2] == FollowerState(2, last_caught_up_ms=T0)
    assert by_id[3] == FollowerState(3, last_caught_up_ms=-1)
    assert by_id[2].log_end_offset == -1 and by_id[2].last_fetch_ms == -1
    assert state.epoch_start_offset == 10  # defaults to the log end at leadership start
    assert state.pending is None and state.effective_isr() == (1, 2)


def test_leader_alone_in_the_isr_moves_the_hw_to_its_log_end_at_once() -> None:
    state = leader(isr=(1,), log_end=10, hw=4)
    assert state.high_watermark == 10
    assert state.on_local_append(12) == 12
    assert state.on_local_append(12) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"isr": (2, 3)}, "excludes it"),
        ({"replicas": (2, 3), "isr": (1,)}, "exclude it"),
        ({"isr": (1, 1)}, "twice"),
        ({"hw": 11}, "high watermark"),
        ({"hw": -1}, "high watermark"),
        ({"epoch_start": 11}, "epoch start"),
    ],
)
def test_constructor_rejects_impossible_states(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        leader(**kwargs)  # type: ignore[arg-type]


# ---- the high watermark -------------------------------------------------------------------------------


def test_hw_advances_only_when_every_isr_member_has_the_data() -> None:
    state = leader(log_end=10, hw=10)
    assert state.on_local_append(20) is None  # followers' log ends unknown: they hold the HW
    assert fetch(state, 2, 20).new_hw is None  # 3 still unknown
    assert fetch(state, 3, 15).new_hw == 15
    assert state.high_watermark == 15
    assert fetch(state, 3, 20).new_hw == 20
    assert state.on_local_append(25) is None
    assert fetch(state, 2, 25).new_hw is None
    assert fetch(state, 3, 22).new_hw == 22
    assert state.compute_high_watermark() == 22


def test_non_isr_followers_do_not_hold_the_hw() -> None:
    state = leader(isr=(1, 2), log_end=10, hw=10)
    state.on_local_append(30)
    assert fetch(state, 3, 0).new_hw is None
    assert fetch(state, 2, 30).new_hw == 30


def test_hw_never_decreases() -> None:
    state = leader(log_end=10, hw=10)
    state.on_local_append(20)
    fetch(state, 2, 20)
    fetch(state, 3, 20)
    assert state.high_watermark == 20
    # A follower that restarted and lost unflushed data reports a lower position: recorded, HW stays.
    assert fetch(state, 3, 12, epoch=7).new_hw is None
    assert state.follower_state(3).log_end_offset == 12
    assert state.high_watermark == 20
    assert state.compute_high_watermark() == 20
    with pytest.raises(ValueError, match="move back"):
        state.on_local_append(19)


def test_a_member_no_longer_assigned_is_dropped_and_not_waited_for() -> None:
    state = leader(log_end=10, hw=10)
    state.on_local_append(20)
    fetch(state, 2, 20)
    assert state.high_watermark == 10  # 3 unknown
    assert state.update_assignment((1, 2, 3), (1, 2)) == 20
    assert [f.replica_id for f in state.follower_states()] == [2]
    assert state.shrink_candidates(T0, LAG) == (3,)  # unassigned ISR members are out of sync at once
    with pytest.raises(UnknownReplicaError):
        fetch(state, 3, 20)


def test_update_assignment_with_a_new_epoch_keeps_positions_and_restarts_timing() -> None:
    state = leader(isr=(1, 2), replicas=(1, 2, 3), log_end=10, hw=10)
    fetch(state, 3, 4, now=T0 + 1)
    state.on_local_append(14)
    state.propose_isr((1,))
    assert state.update_assignment((1, 2), (1, 2, 3, 4), leader_epoch=6, now_ms=T0 + 100) is None
    assert state.pending is None and state.leader_epoch == 6 and state.epoch_start_offset == 14
    by_id = {f.replica_id: f for f in state.follower_states()}
    assert by_id[3].log_end_offset == 4 and by_id[3].last_caught_up_ms == -1
    assert by_id[2].last_caught_up_ms == T0 + 100 and by_id[2].last_fetch_leader_end == 14
    assert by_id[4] == FollowerState(4, last_fetch_leader_end=14)
    with pytest.raises(ValueError, match="older"):
        state.update_assignment((1,), (1, 2), leader_epoch=5)
    with pytest.raises(ValueError, match="needs now_ms"):
        state.update_assignment((1,), (1, 2), leader_epoch=7)


def test_update_assignment_in_the_same_epoch_keeps_timing_and_epoch_start() -> None:
    state = leader(isr=(1, 2), replicas=(1, 2, 3), log_end=10, hw=10, epoch_start=8)
    fetch(state, 2, 10, now=T0 + 5)
    before = state.follower_state(2)
    state.propose_isr((1,))
    assert state.update_assignment((1, 2, 3), (1, 2, 3)) is None
    assert state.isr == (1, 2, 3) and state.pending is None
    assert state.leader_epoch == 5 and state.epoch_start_offset == 8
    assert state.follower_state(2) == before
    with pytest.raises(IsrChangeError, match="excludes the leader"):
        state.update_assignment((2, 3), (1, 2, 3))
    with pytest.raises(ValueError, match="exclude it"):
        state.update_assignment((1,), (2, 3))


# ---- shrinking ----------------------------------------------------------------------------------------


def test_slow_follower_is_shrunk_after_lag_time_max_ms() -> None:
    state = leader(log_end=10, hw=10)
    fetch(state, 2, 10, now=T0)
    fetch(state, 3, 10, now=T0)
    state.on_local_append(20)
    # 2 keeps up; 3 keeps fetching but stays behind the leader's end at its previous fetch.
    for t in range(T0 + 1_000, T0 + LAG + 2_000, 1_000):
        fetch(state, 2, state.local_log_end, now=t)
        fetch(state, 3, 11, now=t)
    assert state.follower_state(3).last_caught_up_ms == T0
    assert state.shrink_candidates(T0 + LAG, LAG) == ()
    assert state.shrink_candidates(T0 + LAG + 1, LAG) == (3,)


def test_stuck_follower_is_shrunk_but_one_with_the_leaders_end_is_not() -> None:
    state = leader(log_end=10, hw=10)
    fetch(state, 2, 10, now=T0)
    # 3 never fetches: its log end stays unknown; 2 has everything and then goes quiet.
    assert state.shrink_candidates(T0 + LAG + 1, LAG) == (3,)
    state.on_local_append(11)
    assert state.shrink_candidates(T0 + LAG + 1, LAG) == (2, 3)


def test_follower_fetching_below_the_leaders_end_but_at_the_previous_end_stays_in_sync() -> None:
    # Kafka's second rule: small produces at high rate keep the follower a little behind, but each fetch
    # covers what the leader had at the previous fetch, so the previous fetch time counts as caught up.
    state = leader(isr=(1, 2), replicas=(1, 2), log_end=10, hw=10)
    end, t = 10, T0
    fetch(state, 2, 10, now=t)
    for _ in range(10):
        t += 10_000
        before = end
        end += 3
        state.on_local_append(end)
        fetch(state, 2, before, now=t)
        assert state.high_watermark == before
    assert state.follower_state(2).last_caught_up_ms == t - 10_000
    assert state.shrink_candidates(t + 1_000, LAG) == ()


def test_leader_is_never_a_shrink_candidate_and_none_while_pending() -> None:
    state = leader(isr=(1, 2), replicas=(1, 2))
    assert state.shrink_candidates(T0 + 10 * LAG, LAG) == (2,)
    state.propose_isr((1,))
    assert state.shrink_candidates(T0 + 10 * LAG, LAG) == ()


# ---- expanding ----------------------------------------------------------------------------------------


def test_follower_is_proposed_for_expansion_only_after_reaching_hw_and_epoch_start() -> None:
    state = leader(isr=(1, 2), replicas=(1, 2, 3), log_end=100, hw=40, epoch_start=60)
    fetch(state, 2, 50)
    assert state.high_watermark == 50
    assert fetch(state, 3, 45).expand_to is None  # below the HW
    assert fetch(state, 3, 55).expand_to is None  # past the HW, before the epoch start
    with pytest.raises(IsrChangeError, match="cannot join"):
        state.propose_isr((1, 2, 3))
    update = fetch(state, 3, 60)
    assert update.expand_to == (1, 2, 3)
    assert state.propose_isr(update.expand_to) == PendingIsr(proposed=(1, 2, 3), maximal=(1, 2, 3))
    assert fetch(state, 3, 70).expand_to is None  # a change is pending
    assert state.isr_committed((1, 2, 3)) is None
    assert state.isr == (1, 2, 3) and state.pending is None
    assert fetch(state, 3, 80).expand_to is None  # already in


def test_expansion_must_reach_the_hw_even_when_the_epoch_start_is_behind() -> None:
    state = leader(isr=(1, 2), replicas=(1, 2, 3), log_end=100, hw=0, epoch_start=0)
    fetch(state, 2, 80)
    assert fetch(state, 3, 79).expand_to is None
    assert fetch(state, 3, 80).expand_to == (1, 2, 3)


# ---- pending changes (KIP-497) ------------------------------------------------------------------------


def test_pending_expansion_holds_the_hw_at_the_joining_follower() -> None:
    state = leader(isr=(1, 2), replicas=(1, 2, 3), log_end=20, hw=20)
    fetch(state, 2, 20)
    fetch(state, 3, 20)
    state.propose_isr((1, 2, 3))
    assert state.effective_isr() == (1, 2, 3)
    state.on_local_append(30)
    assert fetch(state, 2, 30).new_hw is None  # 3, about to join, still at 20
    assert state.high_watermark == 20
    assert fetch(state, 3, 25).new_hw == 25


def test_pending_shrink_still_waits_for_the_leaving_follower_until_committed() -> None:
    state = leader(log_end=20, hw=20)
    fetch(state, 2, 20)
    fetch(state, 3, 20)
    state.on_local_append(30)
    fetch(state, 2, 30)
    state.propose_isr((1, 2))
    assert state.effective_isr() == (1, 2, 3)
    assert state.high_watermark == 20
    assert state.isr_committed((1, 2)) == 30
    assert state.effective_isr() == (1, 2)


def test_isr_failed_reverts_to_the_committed_isr() -> None:
    state = leader(log_end=20, hw=20)
    fetch(state, 2, 20)
    fetch(state, 3, 20)
    state.propose_isr((1, 2))
    assert state.isr_failed() is None
    assert state.isr == (1, 2, 3) and state.pending is None and state.effective_isr() == (1, 2, 3)


def test_isr_failed_for_an_expansion_lets_the_hw_move_past_the_joiner() -> None:
    state = leader(isr=(1, 2), replicas=(1, 2, 3), log_end=20, hw=20)
    fetch(state, 2, 20)
    fetch(state, 3, 20)
    state.propose_isr((1, 2, 3))
    state.on_local_append(30)
    fetch(state, 2, 30)
    assert state.high_watermark == 20
    assert state.isr_failed() == 30
    assert state.isr == (1, 2)


def test_isr_change_rules() -> None:
    state = leader(log_end=20, hw=20)
    with pytest.raises(IsrChangeError, match="excludes the leader"):
        state.propose_isr((2, 3))
    with pytest.raises(IsrChangeError, match="twice"):
        state.propose_isr((1, 2, 2))
    with pytest.raises(IsrChangeError, match="same members"):
        state.propose_isr((3, 2, 1))
    with pytest.raises(IsrChangeError, match="no ISR change is pending"):
        state.isr_committed((1, 2))
    assert state.isr_failed() is None  # nothing pending: a late answer is harmless
    with pytest.raises(IsrChangeError, match="cannot join"):
        state.propose_isr((1, 2, 3, 4))
    state.propose_isr((1,))
    with pytest.raises(IsrChangeError, match="still pending"):
        state.propose_isr((1, 2))
    with pytest.raises(IsrChangeError, match="excludes the leader"):
        state.isr_committed((2,))


def test_commit_outside_the_maximal_isr_is_refused() -> None:
    state = leader(isr=(1, 2), replicas=(1, 2, 3), log_end=20, hw=20)
    state.propose_isr((1,))
    with pytest.raises(IsrChangeError, match="outside the maximal ISR"):
        state.isr_committed((1, 3))
    assert state.isr_committed((1,)) is None  # 2 is unknown; the leader alone now
    assert state.high_watermark == 20


def test_min_isr_counts_the_committed_isr() -> None:
    state = leader(log_end=20, hw=20)
    fetch(state, 2, 20)
    state.propose_isr((1, 2))
    assert state.min_isr_satisfied(3)  # pending changes do not count
    state.isr_committed((1, 2))
    assert state.min_isr_satisfied(2) and not state.min_isr_satisfied(3)


# ---- fetches that must not be recorded ----------------------------------------------------------------


def test_unknown_replica_is_rejected() -> None:
    state = leader(isr=(1, 2), replicas=(1, 2))
    with pytest.raises(UnknownReplicaError, match="not an assigned replica") as info:
        fetch(state, 9, 0)
    assert info.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(UnknownReplicaError, match="the leader itself"):
        fetch(state, 1, 0)
    with pytest.raises(UnknownReplicaError):
        state.follower_state(9)


def test_offsets_outside_the_leaders_log_and_stale_broker_epochs_are_rejected() -> None:
    state = leader(log_end=20, hw=20)
    with pytest.raises(ValueError, match="OFFSET_OUT_OF_RANGE"):
        fetch(state, 2, 21)
    with pytest.raises(ValueError, match="OFFSET_OUT_OF_RANGE"):
        fetch(state, 2, -1)
    with pytest.raises(ValueError, match="behind the recorded"):
        state.on_follower_fetch(2, 5, 0, T0, 19)
    fetch(state, 2, 20, epoch=100)
    with pytest.raises(StaleBrokerEpochError, match="older incarnation") as info:
        fetch(state, 2, 20, epoch=99)
    assert info.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    fetch(state, 2, 20)  # -1: no epoch given, not checked
    assert state.follower_state(2).broker_epoch == 100


def test_fetch_with_a_larger_leader_end_adopts_it() -> None:
    state = leader(isr=(1,), replicas=(1, 2), log_end=20, hw=20)
    update = state.on_follower_fetch(2, 20, 3, T0, 25)
    assert update.new_hw == 25 and state.local_log_end == 25
    assert state.follower_state(2).log_start_offset == 3


# ---- the follower's side ------------------------------------------------------------------------------


def test_follower_high_watermark_is_capped_by_its_own_log() -> None:
    assert follower_high_watermark(100, 40) == 40
    assert follower_high_watermark(30, 40) == 30


def test_truncation_to_the_common_end_of_the_same_epoch() -> None:
    # Leader: epoch 3 ended at 50. Follower also wrote epoch 3 up to 60 (it led it longer): truncate to 50.
    assert truncation_offset((3, 60), 3, 50, 70) == 50
    # The follower's epoch 3 ended earlier than the leader's: keep everything up to its own end.
    assert truncation_offset((3, 45), 3, 50, 70) == 45
    # Never above the log end.
    assert truncation_offset((3, 80), 3, 90, 70) == 70


def test_truncation_when_the_follower_lacks_the_leaders_epoch_is_intermediate() -> None:
    # Follower's largest epoch <= 3 is 1, which ends at 8 on the follower: truncate there and fetch again.
    assert truncation_offset((1, 8), 3, 10, 20) == 8
    # Next round the leader reports epoch 1 ending at 5.
    assert truncation_offset((1, 8), 1, 5, 8) == 5


def test_truncation_with_undefined_answers() -> None:
    assert truncation_offset((UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET), 2, 30, 40) == 30
    assert truncation_offset((2, 35), UNDEFINED_EPOCH, 30, 40) == 30
    assert truncation_offset((2, 35), 2, UNDEFINED_EPOCH_OFFSET, 40, high_watermark=25) == 25
    with pytest.raises(ValueError, match="high_watermark"):
        truncation_offset((2, 35), 2, UNDEFINED_EPOCH_OFFSET, 40)


def test_truncation_matches_the_leader_epoch_cache(tmp_path: Path) -> None:
    follower = LeaderEpochCache(tmp_path / "f")
    for epoch, start in [(0, 0), (1, 5), (4, 8)]:
        follower.assign(epoch, start)
    leader_cache = LeaderEpochCache(tmp_path / "l")
    for epoch, start in [(0, 0), (1, 5), (3, 6), (5, 12)]:
        leader_cache.assign(epoch, start)
    leader_end = 14
    follower_end = 11
    # Round 1: the follower's latest epoch is 4; the leader answers with its largest epoch <= 4.
    epoch, end = leader_cache.end_offset_for(4, leader_end)
    assert (epoch, end) == (3, 12)
    follower_end = truncation_offset(follower.end_offset_for(epoch, follower_end), epoch, end, follower_end)
    assert follower_end == 8
    follower.truncate_from_end(follower_end)
    # Round 2: latest epoch 1 now; the leader's epoch 1 ended at 6.
    epoch, end = leader_cache.end_offset_for(follower.latest_epoch or 0, leader_end)
    assert (epoch, end) == (1, 6)
    assert truncation_offset(follower.end_offset_for(epoch, follower_end), epoch, end, follower_end) == 6
