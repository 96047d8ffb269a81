"""Transactional offset commits in the pure group coordinator: pending offsets, markers, their interplay with
plain commits, deletion and retention, and replay (restarts, and restarts after the log cleaner compacted the
log) giving the same state."""

from __future__ import annotations

from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.coordinator import GroupCoordinator
from odradek.coordinator.group.log_entries import DataRecord
from odradek.coordinator.group.model import GroupState
from odradek.coordinator.group.records import OffsetKey
from odradek.protocol.errors import ErrorCode
from tests.coordinator.harness import Harness

E = ErrorCode
S = GroupState
T0, T1, T2 = ("t", 0), ("t", 1), ("t", 2)


def _same_after_restart(h: Harness) -> None:
    fresh = h.rebuilt()
    live = {g.group_id: (g.offsets, g.pending_txn_offsets) for g in h.coord.groups.values()}
    assert {g.group_id: (g.offsets, g.pending_txn_offsets) for g in fresh.groups.values()} == live
    assert fresh.open_txns == h.coord.open_txns


def _durable(coord: GroupCoordinator) -> dict[str, tuple[object, ...]]:
    """Groups with durable state. A group left with none (its offsets deleted, its only transaction aborted)
    is in memory until retention deletes it; a compacted log may no longer say it existed (as in Kafka)."""
    return {g.group_id: (g.offsets, g.pending_txn_offsets, g.persisted) for g in coord.groups.values()
            if g.offsets or g.pending_txn_offsets or g.persisted is not None}


def _same_after_compaction(h: Harness, *, horizon_passed: bool = False) -> None:
    for p in list(h.log):
        h.compact(p, horizon_passed=horizon_passed)
    fresh = h.rebuilt()
    assert _durable(fresh) == _durable(h.coord)
    assert fresh.open_txns == h.coord.open_txns


def _surviving(h: Harness, p: int) -> list[int]:
    return [offset for offset, entry in enumerate(h.log[p]) if entry is not None]


def test_pending_offsets_are_invisible_until_the_commit_marker() -> None:
    h = Harness()
    assert h.txn_commit("g", 7, {T0: 10, T1: 11}) == {T0: E.NONE, T1: E.NONE}
    assert h.committed("g") == {}
    assert h.coord.groups["g"].state is S.EMPTY  # created as a simple group would be
    _same_after_restart(h)
    h.marker("g", 7, commit=True)
    assert h.committed("g") == {T0: 10, T1: 11}
    assert not h.coord.groups["g"].pending_txn_offsets and not h.coord.open_txns
    _same_after_restart(h)


def test_an_abort_marker_drops_them_and_keeps_the_committed_offsets() -> None:
    h = Harness()
    h.commit("g", {T0: 5})
    h.txn_commit("g", 7, {T0: 10, T1: 11})
    h.marker("g", 7, commit=False)
    assert h.committed("g") == {T0: 5}
    assert not h.coord.groups["g"].pending_txn_offsets
    _same_after_restart(h)


def test_markers_settle_only_their_producer_in_their_partition() -> None:
    h = Harness()
    assert h.coord.partition_of("g") != h.coord.partition_of("g1")
    h.txn_commit("g", 7, {T0: 1})
    h.txn_commit("g", 8, {T1: 2})
    h.txn_commit("g1", 7, {T0: 3})
    h.marker("g", 7, commit=True)  # g's partition only: g1's offsets of producer 7 wait for their own marker
    assert h.committed("g") == {T0: 1} and h.committed("g1") == {}
    assert set(h.coord.groups["g"].pending_txn_offsets) == {8}
    h.marker("g", 8, commit=True)
    h.marker("g1", 7, commit=True)
    assert h.committed("g") == {T0: 1, T1: 2} and h.committed("g1") == {T0: 3}
    _same_after_restart(h)


def test_a_marker_without_pending_offsets_is_a_no_op() -> None:
    h = Harness()
    h.commit("g", {T0: 5})
    h.marker("g", 99, commit=True)
    h.marker("g", 99, commit=False)
    assert h.committed("g") == {T0: 5}
    _same_after_restart(h)


def test_a_commit_overrides_only_offsets_written_before_it() -> None:
    h = Harness()
    h.commit("g", {T0: 5, T1: 5})
    h.txn_commit("g", 7, {T0: 10, T1: 10})
    h.commit("g", {T1: 20})  # a plain commit after the transactional one (before its marker) wins
    h.marker("g", 7, commit=True)
    assert h.committed("g") == {T0: 10, T1: 20}
    _same_after_restart(h)


def test_two_producers_on_one_partition_the_later_write_wins_whatever_the_marker_order() -> None:
    h = Harness()
    h.txn_commit("g", 7, {T0: 1, T1: 1})
    h.txn_commit("g", 8, {T0: 2})
    h.marker("g", 8, commit=True)
    h.marker("g", 7, commit=True)  # producer 7 wrote T0 first: producer 8's offset stays
    assert h.committed("g") == {T0: 2, T1: 1}
    h2 = Harness()
    h2.txn_commit("g", 7, {T0: 1})
    h2.txn_commit("g", 8, {T0: 2})
    h2.marker("g", 7, commit=True)
    h2.marker("g", 8, commit=True)
    assert h2.committed("g") == {T0: 2}
    _same_after_restart(h)
    _same_after_restart(h2)


def test_require_stable_reports_unstable_partitions_and_without_it_the_committed_offset() -> None:
    h = Harness()
    h.commit("g", {T0: 5, T1: 6})
    h.txn_commit("g", 7, {T0: 10, T2: 12})
    error, found = h.coord.fetch_offsets("g", [T0, T1, T2], require_stable=True)
    assert error == E.NONE
    assert [(tp, e and e.offset, err) for tp, e, err in found] == [
        (T0, None, E.UNSTABLE_OFFSET_COMMIT), (T1, 6, E.NONE), (T2, None, E.UNSTABLE_OFFSET_COMMIT)]
    _, found = h.coord.fetch_offsets("g", [T0, T1, T2])
    assert [(tp, e and e.offset, err) for tp, e, err in found] == [(T0, 5, E.NONE), (T1, 6, E.NONE), (T2, None, E.NONE)]
    # all partitions: the committed ones, unstable where a pending offset waits (as Kafka's fetchAllOffsets)
    _, found = h.coord.fetch_offsets("g", None, require_stable=True)
    assert [(tp, err) for tp, _, err in found] == [(T0, E.UNSTABLE_OFFSET_COMMIT), (T1, E.NONE)]
    h.marker("g", 7, commit=True)
    _, found = h.coord.fetch_offsets("g", [T0, T2], require_stable=True)
    assert [(tp, e and e.offset, err) for tp, e, err in found] == [(T0, 10, E.NONE), (T2, 12, E.NONE)]


def test_member_fields_are_checked_when_given() -> None:
    h = Harness()
    (a, gen), (b, _) = h.stable_group("g", 2)
    assert h.txn_commit("g", 7, {T0: 1}) == {T0: E.NONE}  # v0-v2: no member fields, any state
    assert h.txn_commit("g", 7, {T0: 1}, member_id=a, generation=gen) == {T0: E.NONE}
    assert h.txn_commit("g", 7, {T0: 1}, member_id=a, generation=gen + 1) == {T0: E.ILLEGAL_GENERATION}
    assert h.txn_commit("g", 7, {T0: 1}, member_id="ghost", generation=gen) == {T0: E.UNKNOWN_MEMBER_ID}
    assert h.txn_commit("g", 7, {T0: 1}, member_id=a, generation=-1) == {T0: E.ILLEGAL_GENERATION}
    assert h.txn_commit("g", 7, {T0: 1}, member_id=b, generation=gen, instance="someone-else") == {
        T0: E.UNKNOWN_MEMBER_ID}
    assert h.txn_commit("nope", 7, {T0: 1}, member_id="m", generation=3) == {T0: E.ILLEGAL_GENERATION}
    assert "nope" not in h.coord.groups
    assert h.txn_commit("", 7, {T0: 1}) == {T0: E.INVALID_GROUP_ID}
    assert h.txn_commit("g", -1, {T0: 1}) == {T0: E.INVALID_PRODUCER_ID_MAPPING}
    # a rebalance waiting for SyncGroup does not refuse them (unlike OffsetCommit)
    c = h.reply(h.join("g", client="c"))["member_id"]
    tickets = [h.join("g", m) for m in (c, a, b)]
    assert h.coord.groups["g"].state is S.COMPLETING_REBALANCE
    new_gen = h.reply(tickets[0])["generation_id"]
    assert h.txn_commit("g", 7, {T0: 2}, member_id=a, generation=new_gen) == {T0: E.NONE}
    assert h.commit("g", {T0: 2}, member_id=a, generation=new_gen) == {T0: E.REBALANCE_IN_PROGRESS}


def test_static_members_that_were_replaced_are_fenced() -> None:
    h = Harness()
    first = h.reply(h.join("g", client="s", instance="i-1"))
    old = first["member_id"]
    h.sync("g", old, first["generation_id"], [(old, b"")], instance="i-1")
    again = h.reply(h.join("g", client="s", instance="i-1"))
    assert again["member_id"] != old
    fenced = h.txn_commit("g", 7, {T0: 1}, member_id=old, generation=first["generation_id"], instance="i-1")
    assert fenced == {T0: E.FENCED_INSTANCE_ID}


def test_per_partition_errors_and_a_failed_append() -> None:
    h = Harness()
    result = h.txn_commit("g", 7, {T0: 1, ("zz", 0): 1}, metadata="m")
    assert result == {T0: E.NONE, ("zz", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert h.txn_commit("g", 7, {T1: 1}, metadata="x" * 5000) == {T1: E.OFFSET_METADATA_TOO_LARGE}
    assert set(h.coord.groups["g"].pending_txn_offsets[7]) == {T0}
    h.fail_writes = True
    assert h.txn_commit("g", 8, {T1: 1}) == {T1: E.KAFKA_STORAGE_ERROR}
    assert set(h.coord.groups["g"].pending_txn_offsets) == {7}


def test_the_write_is_one_transactional_batch_of_the_producer() -> None:
    h = Harness()
    fx = h.coord.txn_commit(1, group_id="g", producer_id=7, producer_epoch=3, generation_id=-1, member_id="",
                            group_instance_id=None, offsets=[("t", 0, 1, -1, None), ("t", 1, 2, 5, "m")],
                            partition_exists=lambda t, p: True, now=0)
    [write] = fx.writes
    assert (write.partition, write.producer_id, write.producer_epoch) == (h.coord.partition_of("g"), 7, 3)
    assert [k for k, _ in write.records] == [OffsetKey("g", "t", 0), OffsetKey("g", "t", 1)]
    assert write.records[1][1] is not None and write.records[1][1].leader_epoch == 5


def test_loading_partitions_answer_load_in_progress_and_pending_offsets_survive_a_reload() -> None:
    h = Harness()
    h.txn_commit("g", 7, {T0: 1})
    p = h.coord.partition_of("g")
    h.coord.begin_load(p)
    assert not h.coord.open_txns
    assert h.txn_commit("g", 7, {T0: 1}) == {T0: E.COORDINATOR_LOAD_IN_PROGRESS}
    for entry in h.log[p]:
        assert entry is not None
        h.coord.replay_entry(p, entry)
    h.coord.finish_load(p, h.now)
    assert h.coord.groups["g"].pending_txn_offsets[7][T0].offset == 1
    h.marker("g", 7, commit=True)
    assert h.committed("g") == {T0: 1}


def test_deleting_a_group_with_pending_offsets_deletes_them_too() -> None:
    h = Harness()
    h.commit("g", {T0: 5})
    h.txn_commit("g", 7, {T0: 10, T1: 11})
    assert h.reply(h.call("delete_group", group_id="g")) == E.NONE
    tombstoned = {e.key for e in h.log[h.coord.partition_of("g")][-3:] if e.value is None}  # type: ignore[union-attr]
    assert tombstoned >= {OffsetKey("g", "t", 0), OffsetKey("g", "t", 1)}
    assert "g" not in h.coord.groups and not h.coord.open_txns
    h.marker("g", 7, commit=True)  # the transaction ends later: nothing comes back
    assert "g" not in h.coord.groups
    _same_after_restart(h)


def test_offset_delete_and_deleted_topics_drop_pending_offsets() -> None:
    h = Harness()
    h.txn_commit("g", 7, {T0: 10, ("tt", 0): 3})
    fx = h.coord.delete_offsets(99, "g", [T0])
    h.apply(fx)
    assert h.replies[99] == (E.NONE, {T0: E.NONE})
    assert set(h.coord.groups["g"].pending_txn_offsets[7]) == {("tt", 0)}
    h.apply(h.coord.remove_topic_offsets("tt"))
    assert not h.coord.groups["g"].pending_txn_offsets and not h.coord.open_txns
    h.marker("g", 7, commit=True)
    assert h.committed("g") == {}
    _same_after_restart(h)


def test_retention_waits_for_pending_offsets() -> None:
    cfg = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100, offsets_retention_ms=10_000,
                      offsets_retention_check_interval_ms=1000)
    h = Harness(cfg)
    h.commit("g", {T0: 1, T1: 1})
    h.txn_commit("g", 7, {T0: 2})
    h.txn_commit("only-pending", 7, {T0: 2})
    h.advance(5000)
    h.advance(6000)  # past retention: T1 expires, T0 waits for its pending offset, the groups stay
    assert h.committed("g") == {T0: 1}
    assert "only-pending" in h.coord.groups
    h.marker("g", 7, commit=True)
    h.marker("only-pending", 7, commit=False)
    assert h.committed("g") == {T0: 2}
    h.advance(11_000)
    assert "g" not in h.coord.groups and "only-pending" not in h.coord.groups
    _same_after_restart(h)


def test_compaction_stops_at_a_pending_offset_and_replays_to_the_same_state_once_it_settles() -> None:
    h = Harness()
    p = h.coord.partition_of("g")
    assert h.coord.partition_of("y") == p
    h.commit("g", {T0: 5, T1: 5})  # offsets 0, 1
    h.txn_commit("g", 7, {T0: 10})  # 2: pending
    h.commit("g", {T1: 20})  # 3
    for i in range(5):
        h.commit("y", {T2: i})  # 4-8: another group of the same partition
    _same_after_compaction(h, horizon_passed=True)
    assert _surviving(h, p) == list(range(9))  # nothing is superseded below the open transaction
    h.marker("g", 7, commit=True)  # 9: T0 was committed before the transactional offset: overridden
    assert h.committed("g") == {T0: 10, T1: 20}
    _same_after_compaction(h)
    assert _surviving(h, p) == [2, 3, 8, 9]  # the committed transaction's record keeps its marker
    h.commit("g", {T0: 30})  # 10: supersedes the transactional record
    _same_after_compaction(h, horizon_passed=True)
    assert _surviving(h, p) == [3, 8, 10]  # and then the marker goes too
    assert h.committed("g") == {T0: 30, T1: 20}
    _same_after_restart(h)


def test_after_compaction_a_commit_still_overrides_only_offsets_written_before_it() -> None:
    h = Harness()
    p = h.coord.partition_of("g")
    h.commit("g", {T0: 5, T1: 5})  # 0, 1
    h.txn_commit("g", 7, {T0: 10, T1: 10})  # 2, 3
    h.commit("g", {T1: 20})  # 4: written after the transactional T1, before its marker: it wins
    _same_after_compaction(h, horizon_passed=True)
    assert _surviving(h, p) == [0, 1, 2, 3, 4]
    h.marker("g", 7, commit=True)  # 5
    assert h.committed("g") == {T0: 10, T1: 20}
    _same_after_compaction(h, horizon_passed=True)
    assert _surviving(h, p) == [2, 4, 5]  # compaction keeps what replay applies: the latest record of each key
    h.txn_commit("g", 8, {T0: 99})  # 6
    h.marker("g", 8, commit=False)  # 7
    _same_after_compaction(h)
    assert _surviving(h, p) == [2, 4, 5, 7]  # the aborted batch goes, its marker until its horizon
    _same_after_compaction(h, horizon_passed=True)
    assert _surviving(h, p) == [2, 4, 5]
    assert h.committed("g") == {T0: 10, T1: 20}


def test_deletions_are_tombstones_so_compaction_brings_nothing_back() -> None:
    cfg = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100, offsets_retention_ms=10_000,
                      offsets_retention_check_interval_ms=1000)
    h = Harness(cfg)
    (member, gen), = h.stable_group("expiring", 1)
    h.commit("expiring", {T2: 3}, member_id=member, generation=gen)
    h.leave("expiring", (member, None))
    h.advance(5000)
    h.advance(6000)  # past retention: the empty group's offsets and then the group itself are tombstoned
    assert "expiring" not in h.coord.groups
    h.commit("deleted", {T0: 1})
    h.txn_commit("deleted", 7, {T1: 2})
    assert h.reply(h.call("delete_group", group_id="deleted")) == E.NONE
    h.marker("deleted", 7, commit=True)
    h.commit("g", {T0: 1, T1: 1, ("tt", 0): 1})
    h.apply(h.coord.delete_offsets(99, "g", [T0]))
    h.apply(h.coord.remove_topic_offsets("tt"))
    assert h.committed("g") == {T1: 1}
    _same_after_compaction(h)
    _same_after_compaction(h, horizon_passed=True)  # the tombstones themselves are gone now
    assert not any(e.value is None for entries in h.log.values() for e in entries if isinstance(e, DataRecord))
    fresh = h.rebuilt()
    assert set(fresh.groups) == {"g"} and fresh.groups["g"].offsets.keys() == {T1}


def test_pending_offsets_survive_compaction_of_other_groups_and_a_reload() -> None:
    h = Harness()
    p = h.coord.partition_of("g")
    h.txn_commit("g", 7, {T0: 10})
    for i in range(5):
        h.commit("y", {T2: i})
    _same_after_compaction(h, horizon_passed=True)
    fresh = h.rebuilt()  # a restart while the transaction is open
    assert fresh.groups["g"].pending_txn_offsets[7][T0].offset == 10
    h.marker("g", 7, commit=True)
    fresh.replay_marker(p, 7, True)  # the marker written after the restart settles it there too
    assert {tp: e.offset for tp, e in fresh.groups["g"].offsets.items()} == {T0: 10} == h.committed("g")
    _same_after_compaction(h, horizon_passed=True)
