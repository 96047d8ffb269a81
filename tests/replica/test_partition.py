"""A partition's roles over real logs, with no network: a leader and two followers wired by hand.

The leader's appends, the followers' copies (offsets, leader epochs and producer state kept), the high
watermark and acks=all waiting, min.insync.replicas, truncation of a diverging tail after a leader change.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from odradek.clock import ManualClock
from odradek.cluster.model import LeaderAndIsr
from odradek.protocol.errors import ErrorCode, NotEnoughReplicasError, NotLeaderOrFollowerError
from odradek.replica.isr import truncation_offset
from odradek.replica.partition import Partition, Role
from odradek.storage.producer_state import ProducerStateManager
from tests.storage.helpers import T0, all_records, batch, open_log, small_config

REPLICAS = (1, 2, 3)


def _partition(tmp_path: Path, broker: int, clock: ManualClock, **config: object) -> Partition:
    d = tmp_path / f"b{broker}" / "t-0"
    state = ProducerStateManager(d, "t-0", expiration_ms=86_400_000)
    lg = open_log(d, small_config(**config), clock, producer_state=state)
    return Partition(lg, broker, replicated=True)


def _state(leader: int, epoch: int, isr: tuple[int, ...] = REPLICAS) -> LeaderAndIsr:
    return LeaderAndIsr(leader, epoch, isr, controller_epoch=1, zk_version=epoch)


def _replicate(leader: Partition, follower: Partition, clock: ManualClock) -> None:
    """One follower fetch round: report the position, copy what the leader has past it."""
    lg = follower.log
    leader.on_follower_fetch(follower.local_id, lg.next_offset, lg.log_start_offset, clock.milliseconds())
    region = leader.log.read(lg.next_offset, 1 << 20) if lg.next_offset < leader.log.next_offset else None
    follower.append_as_follower(region.read_bytes() if region is not None else None, leader.high_watermark,
                                leader.log.log_start_offset)


@pytest.fixture
def trio(tmp_path: Path) -> tuple[ManualClock, Partition, Partition, Partition]:
    clock = ManualClock(T0)
    parts = [_partition(tmp_path, b, clock) for b in REPLICAS]
    parts[0].make_leader(_state(1, 0), REPLICAS, clock.milliseconds())
    for p in parts[1:]:
        p.make_follower(_state(1, 0), REPLICAS)
    return clock, parts[0], parts[1], parts[2]


def test_leader_stamps_its_epoch_and_followers_copy_batches_exactly(trio: tuple) -> None:
    clock, leader, f2, f3 = trio
    leader.make_leader(_state(1, 4), REPLICAS, clock.milliseconds())
    leader.append_as_leader(batch(3))
    leader.append_as_leader(batch(2, tag="w"))
    assert leader.high_watermark == 0, "nobody else has the records yet"
    for f in (f2, f3):
        f.make_follower(_state(1, 4), REPLICAS)
        _replicate(leader, f, clock)
    for f in (f2, f3):
        _replicate(leader, f, clock)  # the second round reports the new log ends
    assert leader.high_watermark == 5
    _replicate(leader, f2, clock)  # a follower learns the high watermark in its next fetch's answer
    for f in (f2, f3):
        assert [(r.offset, r.value) for r in all_records(f.log)] == [
            (r.offset, r.value) for r in all_records(leader.log)]
        assert f.log.leader_epochs.entries == [(4, 0)]
        assert f.high_watermark == 5


def test_acks_all_waits_for_every_isr_member(trio: tuple) -> None:
    clock, leader, f2, f3 = trio

    async def scenario() -> ErrorCode:
        info = leader.append_as_leader(batch(2), required_acks=-1)
        fut = leader.wait_for_offset(info.last_offset + 1)
        _replicate(leader, f2, clock)
        _replicate(leader, f2, clock)
        assert not fut.done(), "one follower is not enough while the ISR has three members"
        _replicate(leader, f3, clock)
        _replicate(leader, f3, clock)
        return await asyncio.wait_for(fut, 1)

    assert asyncio.run(scenario()) is ErrorCode.NONE


def test_min_insync_replicas_refuses_before_appending(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    leader = _partition(tmp_path, 1, clock, min_insync_replicas=2)
    leader.make_leader(_state(1, 0, isr=(1,)), REPLICAS, clock.milliseconds())
    with pytest.raises(NotEnoughReplicasError):
        leader.append_as_leader(batch(1), required_acks=-1)
    assert leader.log.next_offset == 0
    leader.append_as_leader(batch(1), required_acks=1)  # acks=1 is not subject to it
    assert leader.log.next_offset == 1


def test_losing_leadership_answers_waiting_writes(trio: tuple) -> None:
    _clock, leader, _f2, _f3 = trio

    async def scenario() -> ErrorCode:
        info = leader.append_as_leader(batch(1), required_acks=-1)
        fut = leader.wait_for_offset(info.last_offset + 1)
        leader.make_follower(_state(2, 1), REPLICAS)
        return await asyncio.wait_for(fut, 1)

    assert asyncio.run(scenario()) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(NotLeaderOrFollowerError):
        leader.append_as_leader(batch(1))


def test_a_diverging_tail_is_truncated_after_a_leader_change(trio: tuple) -> None:
    clock, old, f2, f3 = trio
    old.append_as_leader(batch(2, tag="committed"))
    for f in (f2, f3):
        _replicate(old, f, clock)
        _replicate(old, f, clock)
    assert old.high_watermark == 2
    old.append_as_leader(batch(3, tag="lost"))  # nobody copies these: the leader dies
    new_state = _state(2, 1, isr=(2, 3))
    f2.make_leader(new_state, REPLICAS, clock.milliseconds())
    f2.append_as_leader(batch(1, tag="new"))
    old.make_follower(new_state, REPLICAS)
    assert old.role is Role.FOLLOWER
    # the old leader fetches with last_fetched_epoch 0 from offset 5; the new leader says epoch 0 ended at 2
    epoch, end = f2.log.leader_epochs.end_offset_for(0, f2.log.next_offset)
    assert (epoch, end) == (0, 2)
    local = old.log.leader_epochs.end_offset_for(epoch, old.log.next_offset)
    old.truncate_to(truncation_offset(local, epoch, end, old.log.next_offset), "test")
    _replicate(f2, old, clock)
    assert [r.value.rstrip(b".") for r in all_records(old.log)] == [b"committed0", b"committed1", b"new0"]
    assert old.log.leader_epochs.entries == [(0, 0), (1, 2)]


def test_followers_keep_producer_state_so_a_new_leader_deduplicates_retries(trio: tuple) -> None:
    clock, leader, f2, f3 = trio
    first = batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    leader.append_as_leader(first)
    for f in (f2, f3):
        _replicate(leader, f, clock)
        _replicate(leader, f, clock)
    f2.make_leader(_state(2, 1, isr=(2, 3)), REPLICAS, clock.milliseconds())
    info = f2.append_as_leader(first)  # the producer's retry after the failover
    assert info.first_offset == 0 and info.record_count == 0, "answered with the original offsets, not appended"
    assert f2.log.next_offset == 2
