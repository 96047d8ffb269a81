"""Random interleavings of members' requests, transactional offset commits, transaction markers, compaction
of the log (with and without tombstones past their delete horizon) and time: the coordinator never gets stuck,
never answers a request twice, and its durable state (committed and pending offsets with their record offsets,
persisted groups) is always exactly what replaying its log, compacted or not, gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator.group.coordinator import GroupCoordinator
from odradek.coordinator.group.model import GroupState
from odradek.protocol.errors import ErrorCode
from tests.coordinator.harness import Harness, assignment

E = ErrorCode
GROUPS = ("g1", "g2")
CLIENTS = ("a", "b", "c")

action = st.one_of(
    st.tuples(st.just("join"), st.sampled_from(GROUPS), st.sampled_from(CLIENTS), st.booleans()),
    st.tuples(st.just("sync"), st.sampled_from(GROUPS), st.sampled_from(CLIENTS), st.booleans()),
    st.tuples(st.just("heartbeat"), st.sampled_from(GROUPS), st.sampled_from(CLIENTS), st.booleans()),
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.sampled_from(CLIENTS), st.booleans()),
    st.tuples(st.just("leave"), st.sampled_from(GROUPS), st.sampled_from(CLIENTS), st.booleans()),
    st.tuples(st.just("advance"), st.sampled_from(GROUPS), st.sampled_from(CLIENTS), st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from(GROUPS), st.sampled_from(CLIENTS), st.booleans()),
    st.tuples(st.just("txn_commit"), st.sampled_from(GROUPS), st.sampled_from(CLIENTS), st.booleans()),
    st.tuples(st.just("marker"), st.sampled_from(GROUPS), st.sampled_from(CLIENTS), st.booleans()),
    st.tuples(st.just("compact"), st.sampled_from(GROUPS), st.sampled_from(CLIENTS), st.booleans()),
)
PRODUCERS = {"a": 1000, "b": 2000, "c": 1000}  # clients act as transactional producers too (two of them share one)


def _durable(coord: GroupCoordinator) -> dict[str, tuple[object, object, object]]:
    return {g.group_id: (dict(g.offsets), g.persisted, g.pending_txn_offsets) for g in coord.groups.values()
            if g.offsets or g.persisted is not None or g.pending_txn_offsets}


def _check_txn_index(coord: GroupCoordinator) -> None:
    """``open_txns`` names exactly the groups that hold pending offsets of each (partition, producer)."""
    expected: dict[tuple[int, int], set[str]] = {}
    for g in coord.groups.values():
        assert all(g.pending_txn_offsets.values()), "no empty pending maps are kept"
        for pid in g.pending_txn_offsets:
            expected.setdefault((coord.partition_of(g.group_id), pid), set()).add(g.group_id)
    assert coord.open_txns == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(action, max_size=60))
def test_random_interleavings(actions: list[tuple[str, str, str, bool]]) -> None:
    h = Harness()
    known: dict[tuple[str, str], tuple[str, int]] = {}  # (group, client) -> (member id, generation)
    pending: set[int] = set()
    for kind, group, client, flag in actions:
        member_id, generation = known.get((group, client), ("", -1))
        instance = f"inst-{client}" if client == "c" else None
        if kind == "join":
            t = h.join(group, member_id, client=client, instance=instance, version=9 if flag else 3)
            pending.add(t)
        elif kind == "sync":
            current = h.coord.groups.get(group)
            members = list(current.members) if current is not None else []
            plan = [(m, assignment(("t", (i,)))) for i, m in enumerate(members)]
            if flag and len(actions) % 3 == 0:
                plan.append(plan[0] if plan else ("ghost", b"\xff"))  # sometimes malformed
            pending.add(h.sync(group, member_id, generation, plan, instance=instance))
        elif kind == "heartbeat":
            h.heartbeat(group, member_id, generation, instance=instance)
        elif kind == "commit":
            h.commit(group, {("t", 0): len(h.replies), ("t", 1): 7}, member_id=member_id if flag else "",
                     generation=generation if flag else -1, instance=instance)
        elif kind == "leave":
            h.leave(group, (member_id, instance))
        elif kind == "advance":
            h.advance(700 if flag else 150)
        elif kind == "delete":
            h.call("delete_group", group_id=group)
        elif kind == "txn_commit":  # with the member's fields (v3+) or without (v0-v2)
            h.txn_commit(group, PRODUCERS[client], {("t", 1): len(h.replies), ("t", 2): 3},
                         member_id=member_id if flag else "", generation=generation if flag else -1,
                         instance=instance if flag else None)
        elif kind == "marker":
            h.marker(group, PRODUCERS[client], commit=flag)
        elif kind == "compact":  # flag: the tombstones' delete horizon has passed
            h.compact(h.coord.partition_of(group), horizon_passed=flag)
        for t in list(pending):
            r = h.reply(t)
            if r is not None:
                pending.discard(t)
                if r.get("member_id") and r["error_code"] in (E.NONE, E.MEMBER_ID_REQUIRED):
                    known[(group, client)] = (r["member_id"], r.get("generation_id", -1))
        # the durable state is exactly what a restart would rebuild from the records
        fresh = h.rebuilt()
        assert _durable(fresh) == _durable(h.coord)
        _check_txn_index(h.coord)
        _check_txn_index(fresh)
        for g in h.coord.groups.values():
            assert g.leader is None or g.leader in g.members
            assert set(g.static_members.values()) <= set(g.members)
    # nobody is left waiting: once members go quiet every pending request is answered
    for _ in range(10):
        h.advance(1000)
    assert all(h.reply(t) is not None for t in pending)
    assert all(g.state in (GroupState.EMPTY, GroupState.DEAD) for g in h.coord.groups.values())
