"""The group coordinator as a pure state machine: rebalances, liveness, static members, offsets, replay."""

from __future__ import annotations

from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.log_entries import DataRecord
from odradek.coordinator.group.model import GroupState
from odradek.coordinator.group.records import GroupKey
from odradek.protocol.errors import ErrorCode
from tests.coordinator.harness import Harness, assignment, subscription

E = ErrorCode
S = GroupState


def test_two_step_join_then_sync_makes_the_group_stable() -> None:
    h = Harness()
    first = h.reply(h.join("g", client="a"))
    assert first["error_code"] == E.MEMBER_ID_REQUIRED and first["member_id"].startswith("a-")
    t = h.join("g", first["member_id"])
    joined = h.reply(t)
    assert joined["error_code"] == E.NONE and joined["generation_id"] == 1
    assert joined["leader"] == first["member_id"] and joined["protocol_name"] == "range"
    assert [m["member_id"] for m in joined["members"]] == [first["member_id"]]
    assert h.coord.groups["g"].state is S.COMPLETING_REBALANCE
    plan = assignment(("t", (0, 1)))
    s = h.sync("g", first["member_id"], 1, [(first["member_id"], plan)])
    assert h.reply(s)["assignment"] == plan
    assert h.coord.groups["g"].state is S.STABLE
    last = h.log[h.coord.partition_of("g")][-1]
    assert isinstance(last, DataRecord) and isinstance(last.key, GroupKey)


def test_followers_get_their_assignment_and_no_member_list() -> None:
    h = Harness()
    (a, gen), (b, _) = h.stable_group("g", 2)
    group = h.coord.groups["g"]
    assert group.members[a].assignment == assignment(("t", (0,)))
    assert group.members[b].assignment == assignment(("t", (1,)))
    # a follower rejoining a Stable group with the same protocols gets the generation back, no rebalance
    again = h.reply(h.join("g", b))
    assert again["generation_id"] == gen and again["members"] == [] and group.state is S.STABLE


def test_old_clients_join_in_one_step() -> None:
    h = Harness()
    r = h.reply(h.join("g", version=3))
    assert r["error_code"] == E.NONE and r["member_id"] and r["generation_id"] == 1


def test_initial_delay_waits_for_more_members_then_completes() -> None:
    h = Harness(GroupConfig(initial_rebalance_delay_ms=300, min_session_timeout_ms=100))
    a = h.reply(h.join("g", client="a", version=3))
    assert a is None  # waiting in the initial delay
    h.advance(200)
    b_ticket = h.join("g", client="b", version=3)
    h.advance(150)  # first delay over, but b arrived during it: extended
    assert h.reply(b_ticket) is None
    h.advance(300)
    assert h.reply(b_ticket)["error_code"] == E.NONE
    assert len(h.coord.groups["g"].members) == 2


def test_joining_member_triggers_a_rebalance_that_members_learn_from_heartbeats() -> None:
    h = Harness()
    (a, gen), (b, _) = h.stable_group("g", 2)
    c = h.reply(h.join("g", client="c"))["member_id"]
    c_join = h.join("g", c)
    assert h.coord.groups["g"].state is S.PREPARING_REBALANCE and h.reply(c_join) is None
    assert h.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    # commits of the current generation are still accepted while preparing (as Kafka)
    assert h.commit("g", {("t", 0): 5}, member_id=a, generation=gen) == {("t", 0): E.NONE}
    ta, tb = h.join("g", a), h.join("g", b)
    replies = [h.reply(t) for t in (ta, tb, c_join)]
    assert {r["generation_id"] for r in replies} == {gen + 1}
    assert sum(bool(r["members"]) for r in replies) == 1  # only the leader gets the members


def test_session_timeout_removes_a_silent_member_and_rebalances() -> None:
    h = Harness()
    (a, gen), (b, _) = h.stable_group("g", 2)
    for _ in range(3):
        h.advance(300)
        assert h.heartbeat("g", a, gen) == E.NONE  # a keeps heartbeating, b is silent
    assert b in h.coord.groups["g"].members
    h.advance(300)  # b's session (1000 ms) is over
    assert b not in h.coord.groups["g"].members
    assert any("session timeout" in w for w in h.warnings)
    assert h.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    r = h.reply(h.join("g", a))
    assert r["generation_id"] == gen + 1 and [m["member_id"] for m in r["members"]] == [a]


def test_rebalance_timeout_removes_members_that_do_not_rejoin() -> None:
    h = Harness()
    (a, gen), (b, _) = h.stable_group("g", 2)
    t = h.join("g", a)  # leader rejoins: rebalance; b never rejoins (but keeps heartbeating)
    for _ in range(7):
        h.advance(300)
        h.heartbeat("g", b, gen)
    r = h.reply(t)
    assert r["error_code"] == E.NONE and [m["member_id"] for m in r["members"]] == [a]
    assert h.heartbeat("g", b, gen) == E.UNKNOWN_MEMBER_ID


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    ids = [h.reply(h.join("g", client=f"c{i}"))["member_id"] for i in range(2)]
    tickets = [h.join("g", m) for m in ids]
    gen = h.reply(tickets[0])["generation_id"]
    leader = h.reply(tickets[0])["leader"]
    follower = next(m for m in ids if m != leader)
    h.sync("g", leader, gen, [(m, b"") for m in ids])
    for _ in range(8):
        h.advance(300)
        h.heartbeat("g", leader, gen)
        h.heartbeat("g", follower, gen)
    assert follower not in h.coord.groups["g"].members


def test_leave_group_rebalances_and_last_leave_empties_the_group() -> None:
    h = Harness()
    (a, gen), (b, _) = h.stable_group("g", 2)
    assert h.leave("g", (b, None)) == [E.NONE]
    assert h.coord.groups["g"].state is S.PREPARING_REBALANCE
    r = h.reply(h.join("g", a))
    assert r["generation_id"] == gen + 1
    assert h.leave("g", (a, None), ("nobody", None)) == [E.NONE, E.UNKNOWN_MEMBER_ID]
    group = h.coord.groups["g"]
    assert group.state is S.EMPTY and group.generation == gen + 2  # persisted as an empty generation
    assert h.rebuilt().groups["g"].state is S.EMPTY


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    h = Harness()
    first = h.reply(h.join("g", client="s", instance="i-1"))
    assert first["error_code"] == E.NONE  # static members skip MEMBER_ID_REQUIRED
    old = first["member_id"]
    other = h.reply(h.join("g", client="d"))["member_id"]
    t_other = h.join("g", other)
    t_old = h.join("g", old, instance="i-1")
    gen = h.reply(t_other)["generation_id"]
    leader = h.reply(t_old)["leader"] if h.reply(t_old)["members"] else h.reply(t_other)["leader"]
    plan = [(old, assignment(("t", (0,)))), (other, assignment(("t", (1,))))]
    h.sync("g", other, gen, plan if other == leader else None)
    h.sync("g", old, gen, plan if old == leader else None, instance="i-1")
    assert h.coord.groups["g"].state is S.STABLE
    # restart: same instance id, no member id
    again = h.reply(h.join("g", client="s", instance="i-1"))
    assert again["error_code"] == E.NONE and again["generation_id"] == gen and again["member_id"] != old
    assert again["skip_assignment"] == (old == leader)
    assert h.coord.groups["g"].state is S.STABLE
    s = h.reply(h.sync("g", again["member_id"], gen, instance="i-1"))
    assert s["assignment"] == assignment(("t", (0,)))
    # the old incarnation is fenced everywhere
    assert h.heartbeat("g", old, gen, instance="i-1") == E.FENCED_INSTANCE_ID
    fenced = h.commit("g", {("t", 0): 1}, member_id=old, generation=gen, instance="i-1")
    assert fenced == {("t", 0): E.FENCED_INSTANCE_ID}
    assert h.reply(h.join("g", old, instance="i-1"))["error_code"] == E.FENCED_INSTANCE_ID
    # and the new member id survives a restart of the coordinator
    assert again["member_id"] in h.rebuilt().groups["g"].members


def test_commit_checks_generation_member_and_rebalance_state() -> None:
    h = Harness()
    (a, gen), _ = h.stable_group("g", 2)
    assert h.commit("g", {("t", 0): 1}, member_id=a, generation=gen + 1) == {("t", 0): E.ILLEGAL_GENERATION}
    assert h.commit("g", {("t", 0): 1}, member_id="x", generation=gen) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert h.commit("g", {("t", 0): 1}) == {("t", 0): E.UNKNOWN_MEMBER_ID}  # simple commit to an active group
    assert h.commit("nope", {("t", 0): 1}, member_id="m", generation=3) == {("t", 0): E.ILLEGAL_GENERATION}
    assert h.commit("", {("t", 0): 1}) == {("t", 0): E.INVALID_GROUP_ID}
    ok = h.commit("g", {("t", 0): 7, ("t", 1): 9, ("zz", 0): 1}, member_id=a, generation=gen, metadata="m")
    assert ok == {("t", 0): E.NONE, ("t", 1): E.NONE, ("zz", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    big = h.commit("g", {("t", 2): 1}, member_id=a, generation=gen, metadata="x" * 5000)
    assert big == {("t", 2): E.OFFSET_METADATA_TOO_LARGE}
    error, found = h.coord.fetch_offsets("g", [("t", 0), ("t", 2)])
    assert error == E.NONE and found[0][1] is not None and found[0][1].offset == 7 and found[0][1].metadata == "m"
    assert found[1][1] is None
    # during CompletingRebalance commits are refused
    c = h.reply(h.join("g", client="c"))["member_id"]
    h.join("g", c)
    h.join("g", a)
    assert h.coord.groups["g"].state is S.PREPARING_REBALANCE


def test_simple_commits_create_a_group_and_survive_replay() -> None:
    h = Harness()
    assert h.commit("simple", {("t", 0): 42, ("t", 1): 43}, metadata="hello") == {("t", 0): E.NONE, ("t", 1): E.NONE}
    fresh = h.rebuilt()
    error, found = fresh.fetch_offsets("simple", None)
    assert error == E.NONE
    assert [(tp, e.offset, e.metadata) for tp, e, _ in found if e] == [(("t", 0), 42, "hello"), (("t", 1), 43, "hello")]


def test_heartbeat_and_sync_errors() -> None:
    h = Harness()
    (a, gen), (b, _) = h.stable_group("g", 2)
    assert h.heartbeat("unknown", a, gen) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", "ghost", gen) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", a, gen - 1) == E.ILLEGAL_GENERATION
    assert h.heartbeat("", a, gen) == E.INVALID_GROUP_ID
    assert h.reply(h.sync("g", a, gen + 5))["error_code"] == E.ILLEGAL_GENERATION
    assert h.reply(h.sync("g", "ghost", gen))["error_code"] == E.UNKNOWN_MEMBER_ID
    h.join("g", a)  # rebalance
    assert h.reply(h.sync("g", b, gen))["error_code"] == E.REBALANCE_IN_PROGRESS


def test_join_validation() -> None:
    h = Harness()
    assert h.reply(h.join("g", session=10))["error_code"] == E.INVALID_SESSION_TIMEOUT
    assert h.reply(h.join("g", "made-up"))["error_code"] == E.UNKNOWN_MEMBER_ID
    h.stable_group("g", 1)
    other = h.call("join", group_id="g", member_id="", group_instance_id=None, protocol_type="consumer",
                   protocols=[("unknown-assignor", subscription("t"))], session_timeout_ms=1000,
                   rebalance_timeout_ms=1000, client_id="x", client_host="/h", require_known_member_id=True,
                   supports_skip_assignment=True)
    assert h.reply(other)["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    h2 = Harness(GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100, max_size=1))
    h2.stable_group("g", 1)
    assert h2.reply(h2.join("g", client="late"))["error_code"] == E.GROUP_MAX_SIZE_REACHED


def test_protocol_selection_prefers_what_all_members_support() -> None:
    h = Harness()
    a = h.reply(h.join("g", client="a", version=3, protocols=[("cooperative-sticky", b""), ("range", b"")]))
    assert a["protocol_name"] == "cooperative-sticky"
    h.reply(h.sync("g", a["member_id"], 1, [(a["member_id"], b"")]))
    b = h.join("g", client="b", version=3, protocols=[("range", b"")])
    ra = h.reply(h.join("g", a["member_id"], version=3, protocols=[("cooperative-sticky", b""), ("range", b"")]))
    assert ra["protocol_name"] == "range" and h.reply(b)["protocol_name"] == "range"


def test_malformed_assignment_fails_only_that_generation() -> None:
    h = Harness()
    ids = [h.reply(h.join("g", client=f"c{i}"))["member_id"] for i in range(2)]
    tickets = [h.join("g", m) for m in ids]
    gen = h.reply(tickets[0])["generation_id"]
    leader = h.reply(tickets[0])["leader"]
    follower = next(m for m in ids if m != leader)
    fs = h.sync("g", follower, gen)
    ls = h.sync("g", leader, gen, [(leader, b"\x00\x03garbage"), ("stranger", b"")])
    assert h.reply(fs)["error_code"] == E.REBALANCE_IN_PROGRESS
    assert h.reply(ls)["error_code"] == E.REBALANCE_IN_PROGRESS
    assert any("malformed assignment" in w for w in h.warnings)
    assert h.coord.groups["g"].state is S.PREPARING_REBALANCE
    t = [h.join("g", m) for m in ids]
    assert all(h.reply(x)["generation_id"] == gen + 1 for x in t)


def test_failed_append_answers_with_a_retriable_error_and_changes_nothing() -> None:
    h = Harness()
    (a, gen), _ = h.stable_group("g", 2)
    h.fail_writes = True
    result = h.commit("g", {("t", 0): 5}, member_id=a, generation=gen)
    assert result == {("t", 0): E.KAFKA_STORAGE_ERROR}
    assert h.coord.fetch_offsets("g", [("t", 0)])[1][0][1] is None


def test_delete_groups_and_offsets() -> None:
    h = Harness()
    [(a, gen)] = h.stable_group("g", 1)
    h.commit("g", {("t", 0): 3}, member_id=a, generation=gen)
    assert h.reply(h.call("delete_group", group_id="g")) == E.NON_EMPTY_GROUP
    assert h.reply(h.call("delete_group", group_id="nope")) == E.GROUP_ID_NOT_FOUND
    # OffsetDelete: a subscribed topic is refused while the group is active
    fx = h.coord.delete_offsets(99, "g", [("t", 0), ("other", 0)])
    h.apply(fx)
    error, results = h.replies[99]
    assert error == E.NONE and results == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("other", 0): E.NONE}
    h.leave("g", (a, None))
    assert h.reply(h.call("delete_group", group_id="g")) == E.NONE
    assert "g" not in h.coord.groups and "g" not in h.rebuilt().groups


def test_offsets_of_empty_groups_expire_after_retention() -> None:
    cfg = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100, offsets_retention_ms=10_000,
                      offsets_retention_check_interval_ms=1000)
    h = Harness(cfg)
    [(a, gen)] = h.stable_group("g", 1)
    h.commit("g", {("t", 0): 3}, member_id=a, generation=gen)
    h.commit("simple", {("t", 1): 4})
    h.advance(5000)
    assert h.coord.fetch_offsets("g", [("t", 0)])[1][0][1] is not None  # active group: kept
    h.leave("g", (a, None))
    h.advance(6000)  # the simple group's commit is now 11 s old
    assert "simple" not in h.coord.groups
    assert h.coord.fetch_offsets("g", [("t", 0)])[1][0][1] is not None  # empty for 6 s only
    h.advance(5000)
    assert "g" not in h.coord.groups
    assert not h.rebuilt().groups


def test_deleted_topics_lose_their_offsets() -> None:
    h = Harness()
    h.commit("g1", {("t", 0): 1, ("tt", 0): 2})
    h.apply(h.coord.remove_topic_offsets("t"))
    assert [tp for tp, _, _ in h.coord.fetch_offsets("g1", None)[1]] == [("tt", 0)]


def test_loading_partitions_answer_load_in_progress() -> None:
    h = Harness()
    p = h.coord.partition_of("g")
    h.coord.begin_load(p)
    assert h.reply(h.join("g"))["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.heartbeat("g", "m", 1) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.coord.fetch_offsets("g", None)[0] == E.COORDINATOR_LOAD_IN_PROGRESS
    h.coord.finish_load(p, h.now)
    assert h.reply(h.join("g"))["error_code"] == E.MEMBER_ID_REQUIRED


def test_replay_rebuilds_stable_groups_whose_members_must_heartbeat() -> None:
    h = Harness()
    members = h.stable_group("g", 3)
    fresh = h.rebuilt()
    group = fresh.groups["g"]
    assert group.state is S.STABLE and set(group.members) == {m for m, _ in members}
    assert group.members[members[1][0]].assignment == assignment(("t", (1,)))
    fx = fresh.tick(h.now + 5000)  # nobody heartbeats to the restarted coordinator
    assert not fresh.groups["g"].members and fx.writes


def test_describe_and_list() -> None:
    h = Harness()
    h.stable_group("g", 2)
    h.commit("s", {("t", 0): 1})
    d = h.coord.describe("g")
    assert d["group_state"] == "Stable" and d["protocol_data"] == "range" and len(d["members"]) == 2
    assert d["members"][0]["member_assignment"] == assignment(("t", (0,)))
    assert h.coord.describe("missing")["group_state"] == "Dead"
    assert [g["group_id"] for g in h.coord.list_groups()] == ["g", "s"]
    assert [g["group_id"] for g in h.coord.list_groups({"empty"})] == ["s"]


def test_a_restarted_static_leader_of_an_old_client_syncs_as_a_follower_without_rebalance() -> None:
    h = Harness()
    lead = h.reply(h.join("g", client="s", instance="i-1", version=5))
    old = lead["member_id"]
    plan = assignment(("t", (0, 1)))
    h.sync("g", old, lead["generation_id"], [(old, plan)], instance="i-1")
    again = h.reply(h.join("g", client="s", instance="i-1", version=5))
    assert again["error_code"] == E.NONE and again["generation_id"] == lead["generation_id"]
    assert again["leader"] == old and again["members"] == [] and not again["skip_assignment"]
    assert h.coord.groups["g"].state is S.STABLE and h.coord.groups["g"].leader == again["member_id"]
    s = h.reply(h.sync("g", again["member_id"], again["generation_id"], instance="i-1"))
    assert s["assignment"] == plan


def test_a_static_member_that_rejoined_with_a_new_id_still_expires_when_silent() -> None:
    h = Harness()
    first = h.reply(h.join("g", client="s", instance="i-1", version=3))
    h.sync("g", first["member_id"], first["generation_id"], [(first["member_id"], b"")], instance="i-1")
    again = h.reply(h.join("g", client="s", instance="i-1", version=3))
    assert again["member_id"] != first["member_id"] and h.coord.groups["g"].state is S.STABLE
    for _ in range(3):
        h.advance(1000)  # its session timeout is 1000 ms: the renamed member must not be kept forever
    assert not h.coord.groups["g"].members and h.coord.groups["g"].state is S.EMPTY


def test_an_instance_id_no_member_holds_is_an_unknown_member() -> None:
    h = Harness()
    (a, gen), _ = h.stable_group("g", 2)
    assert h.heartbeat("g", a, gen, instance="nobody") == E.UNKNOWN_MEMBER_ID
    assert h.commit("g", {("t", 0): 1}, member_id=a, generation=gen, instance="nobody") == {
        ("t", 0): E.UNKNOWN_MEMBER_ID}
