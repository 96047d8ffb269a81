"""The group and offset APIs against an in-process broker, through request and response encoding.

Each call builds the request with kio's class for one version, decodes it as the server does, runs
the handler on one event loop (JoinGroup and SyncGroup answers may wait for other members) and
encodes the answer in that version's response class, so every supported version is proven valid on
the wire. Also: the internal topic (creation, protection, loading, restart, and compaction by the
log cleaner keeping it bounded while it replays to the same state).
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer

from odradek.broker import dispatch
from odradek.broker.broker import Broker
from odradek.broker.config import BrokerConfig
from odradek.broker.context import RawResponse, RequestContext
from odradek.broker.group_runtime import OFFSETS_TOPIC, read_entries
from odradek.coordinator.group import consumer_protocol as cp
from odradek.coordinator.group.log_entries import DataRecord, LogEntry
from odradek.protocol import apis, entities
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.frame import RequestHeader
from odradek.storage.cleaner.cleaner import wait_for_passes
from tests.storage.helpers import batch

E = ErrorCode
PROPS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "100",
         "offsets.topic.num.partitions": "3", "num.partitions": "2"}
# Compaction of __consumer_offsets within a test: small segments, any dirty ratio, a small offset map, and
# tombstones and markers removable by the pass after the one that first saw them (delete.retention.ms=0).
# The cleaner thread is off: ``clean`` runs passes in the test's thread (one test runs the thread instead).
COMPACTING = {"offsets.topic.segment.bytes": "4096", "offsets.topic.num.partitions": "1",
              "log.cleaner.enable": "false", "log.cleaner.min.cleanable.ratio": "0.01",
              "log.cleaner.dedupe.buffer.size": str(1 << 20), "log.cleaner.delete.retention.ms": "0"}


def _encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


class Node:
    def __init__(self, data: Path, **props: str) -> None:
        self.data = data
        self.props = {"log.dirs": str(data), **PROPS, **props}
        self.loop = asyncio.new_event_loop()
        self.broker = self._start()
        self.correlation = 0

    def _start(self) -> Broker:
        broker = Broker(BrokerConfig.from_properties(self.props))
        broker.start()
        to_load, txns = broker.groups.start(), broker.txns.start()
        self.loop.run_until_complete(broker.groups.load(to_load))
        self.loop.run_until_complete(broker.txns.load(txns))
        return broker

    def restart(self) -> None:
        self.broker.stop()
        self.broker = self._start()

    def close(self) -> None:
        self.broker.stop()
        self.loop.close()

    async def acall(self, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        request = entities.build(apis.request_class(api_key, version), fields)
        decoded = apis.decode_request(api_key, version, _encode(request), 0)
        self.correlation += 1
        header = RequestHeader(api_key, version, self.correlation, "test-client", 0)
        result = await dispatch.HANDLERS[api_key](RequestContext(self.broker, header, "127.0.0.1:5555"), decoded)
        cls = apis.response_class(api_key, version)
        if isinstance(result, RawResponse):  # Produce and Fetch lay out their own bytes
            body = b"".join(c for c in result.chunks if isinstance(c, bytes))
        else:
            assert isinstance(result, dict)
            body = apis.encode_body(entities.build(cls, result))
        response, size = entity_reader(cls)(body, 0)
        assert size == len(body)
        return response

    def call(self, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        return self.loop.run_until_complete(self.acall(api_key, version, fields))

    def gather(self, *calls: tuple[int, int, dict[str, Any]]) -> list[Any]:
        async def run() -> list[Any]:
            return list(await asyncio.gather(*(self.acall(*c) for c in calls)))
        return self.loop.run_until_complete(run())


def clean(node: Node) -> int:
    """Run the broker's log cleaner in this thread until no log is due for cleaning; the passes it made."""
    cleaner = node.broker.log_manager.cleaner
    passes = 0
    while cleaner.clean_once(in_process=True):
        passes += 1
    return passes


def offsets_entries(node: Node, partition: int = 0) -> list[LogEntry]:
    """What a load of ``__consumer_offsets``-``partition`` replays now."""
    lg = node.broker.get_log(OFFSETS_TOPIC, partition)
    return read_entries(lg, lg.log_start_offset, lg.next_offset)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path / "data")
    try:
        yield n
    finally:
        n.close()


def version_of(api_key: int, i: int) -> int:
    r = apis.SUPPORTED[api_key]
    return max(r.min_version, min(i, r.max_version))


def join_fields(group: str, member_id: str = "", instance: str | None = None) -> dict[str, Any]:
    meta = cp.encode_subscription(cp.Subscription(("orders",)))
    return {"group_id": group, "session_timeout": 5000, "rebalance_timeout": 5000, "member_id": member_id,
            "group_instance_id": instance, "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "range", "metadata": meta}]}


def join(node: Node, version: int, group: str, instance: str | None = None) -> Any:
    r = node.call(apis.JOIN_GROUP, version, join_fields(group, instance=instance))
    if r.error_code == E.MEMBER_ID_REQUIRED:
        assert version >= 4 and r.member_id
        r = node.call(apis.JOIN_GROUP, version, join_fields(group, r.member_id, instance))
    assert r.error_code == E.NONE, r
    return r


@pytest.mark.parametrize("i", range(10))
def test_a_member_lifecycle_in_every_version(node: Node, i: int) -> None:
    node.broker.create_topic("orders", 2)
    group = f"group-{i}"
    fc = node.call(apis.FIND_COORDINATOR, version_of(apis.FIND_COORDINATOR, i),
                   {"key": group, "key_type": 0, "coordinator_keys": [group, "other"]})
    if version_of(apis.FIND_COORDINATOR, i) >= 4:
        assert [(c.key, c.node_id, c.error_code) for c in fc.coordinators] == [(group, 1, E.NONE), ("other", 1, E.NONE)]
    else:
        assert (fc.node_id, fc.error_code) == (1, E.NONE)
    jv = version_of(apis.JOIN_GROUP, i)
    joined = join(node, jv, group)
    member, gen = joined.member_id, joined.generation_id
    assert joined.leader == member and len(joined.members) == 1 and gen == 1
    plan = cp.encode_assignment(cp.Assignment((("orders", (0, 1)),)))
    synced = node.call(apis.SYNC_GROUP, version_of(apis.SYNC_GROUP, i), {
        "group_id": group, "generation_id": gen, "member_id": member, "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": plan}]})
    assert synced.error_code == E.NONE and synced.assignment == plan
    hb = node.call(apis.HEARTBEAT, version_of(apis.HEARTBEAT, i),
                   {"group_id": group, "generation_id": gen, "member_id": member, "group_instance_id": None})
    assert hb.error_code == E.NONE
    cv = version_of(apis.OFFSET_COMMIT, i)
    commit = node.call(apis.OFFSET_COMMIT, cv, {
        "group_id": group, "generation_id_or_member_epoch": gen, "member_id": member, "group_instance_id": None,
        "retention_time": -1, "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "committed_offset": 17, "committed_leader_epoch": 0, "committed_metadata": "m"},
            {"partition_index": 5, "committed_offset": 1, "committed_leader_epoch": -1, "committed_metadata": None},
        ]}]})
    errors = {p.partition_index: p.error_code for t in commit.topics for p in t.partitions}
    assert errors == {0: E.NONE, 5: E.UNKNOWN_TOPIC_OR_PARTITION}
    fv = version_of(apis.OFFSET_FETCH, i)
    topics = [{"name": "orders", "partition_indexes": [0, 1]}]
    if fv >= 8:
        one = {"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}
        fetched = node.call(apis.OFFSET_FETCH, fv, {"groups": [one], "require_stable": False})
        parts = fetched.groups[0].topics[0].partitions
    else:
        fetched = node.call(apis.OFFSET_FETCH, fv, {"group_id": group, "topics": topics, "require_stable": False})
        parts = fetched.topics[0].partitions
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in parts] == [(0, 17, "m"), (1, -1, "")]
    described = node.call(apis.DESCRIBE_GROUPS, version_of(apis.DESCRIBE_GROUPS, i),
                          {"groups": [group], "include_authorized_operations": False}).groups[0]
    assert (described.group_state, described.protocol_data, len(described.members)) == ("Stable", "range", 1)
    assert described.members[0].member_assignment == plan and described.members[0].client_host == "/127.0.0.1"
    listed = node.call(apis.LIST_GROUPS, version_of(apis.LIST_GROUPS, i), {"states_filter": [], "types_filter": []})
    assert [g.group_id for g in listed.groups] == [group]
    lv = version_of(apis.LEAVE_GROUP, i)
    left = node.call(apis.LEAVE_GROUP, lv, {"group_id": group, "member_id": member, "members": [
        {"member_id": member, "group_instance_id": None, "reason": "bye"}]})
    assert left.error_code == E.NONE
    after = node.call(apis.DESCRIBE_GROUPS, 0, {"groups": [group]}).groups[0]
    assert after.group_state == "Empty"
    deleted = node.call(apis.DELETE_GROUPS, version_of(apis.DELETE_GROUPS, i), {"groups_names": [group, "nope"]})
    assert [(r.group_id, r.error_code) for r in deleted.results] == [(group, E.NONE), ("nope", E.GROUP_ID_NOT_FOUND)]


def test_two_members_wait_for_each_other_and_split_the_topic(node: Node) -> None:
    node.broker.create_topic("orders", 2)
    a = node.call(apis.JOIN_GROUP, 9, join_fields("g")).member_id
    b = node.call(apis.JOIN_GROUP, 9, join_fields("g")).member_id
    ja, jb = node.gather((apis.JOIN_GROUP, 9, join_fields("g", a)), (apis.JOIN_GROUP, 9, join_fields("g", b)))
    leader = ja if ja.members else jb
    assert {m.member_id for m in leader.members} == {a, b} and ja.generation_id == jb.generation_id
    gen = ja.generation_id
    plans = {a: cp.encode_assignment(cp.Assignment((("orders", (0,)),))),
             b: cp.encode_assignment(cp.Assignment((("orders", (1,)),)))}

    def sync(member: str) -> tuple[int, int, dict[str, Any]]:
        is_leader = member == leader.member_id
        assignments = [{"member_id": m, "assignment": p} for m, p in plans.items()] if is_leader else []
        return (apis.SYNC_GROUP, 5, {"group_id": "g", "generation_id": gen, "member_id": member,
                                     "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                                     "assignments": assignments})

    follower = b if leader.member_id == a else a
    sf, sl = node.gather(sync(follower), sync(leader.member_id))
    assert sf.assignment == plans[follower] and sl.assignment == plans[leader.member_id]


def test_find_coordinator_creates_the_internal_topic_and_refuses_other_keys(node: Node) -> None:
    r = node.call(apis.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g", ""]})
    assert [c.error_code for c in r.coordinators] == [E.NONE, E.INVALID_REQUEST]
    topic = node.broker.registry.get(OFFSETS_TOPIC)
    assert topic is not None and topic.internal and topic.partitions == 3
    txn = node.call(apis.FIND_COORDINATOR, 3, {"key": "tx", "key_type": 1})
    assert (txn.error_code, txn.node_id) == (E.NONE, node.broker.node_id)
    meta = node.call(apis.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
    assert sorted((t.name, t.is_internal) for t in meta.topics) == [(OFFSETS_TOPIC, True),
                                                                     ("__transaction_state", True)]


def test_the_internal_topic_cannot_be_produced_to_deleted_or_resized(node: Node) -> None:
    node.broker.groups.ensure_started()
    r = node.call(apis.PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": OFFSETS_TOPIC, "partition_data": [{"index": 0, "records": batch(1)}]}]})
    assert r.responses[0].partition_responses[0].error_code == E.INVALID_TOPIC_EXCEPTION
    with pytest.raises(KafkaError, match="internal"):
        node.broker.delete_topic(OFFSETS_TOPIC)
    with pytest.raises(KafkaError, match="internal"):
        node.broker.add_partitions(OFFSETS_TOPIC, 10)


def commit(node: Node, group: str, offsets: dict[int, int], topic: str = "orders", metadata: str = "", *,
           member_id: str = "", generation: int = -1) -> list[int]:
    r = node.call(apis.OFFSET_COMMIT, 9, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": metadata}
            for p, o in offsets.items()]}]})
    return [p.error_code for t in r.topics for p in t.partitions]


def fetch(node: Node, groups: list[str], topic: str = "orders") -> dict[str, Any]:
    wanted = [{"group_id": g, "member_id": None, "member_epoch": -1, "topics": None} for g in groups]
    r = node.call(apis.OFFSET_FETCH, 9, {"groups": wanted, "require_stable": False})
    return {g.group_id: (g.error_code, {(t.name, p.partition_index): p.committed_offset
                                        for t in g.topics for p in t.partitions}) for g in r.groups}


def test_offsets_survive_a_restart_and_loading_answers_load_in_progress(node: Node) -> None:
    node.broker.create_topic("orders", 2)
    assert commit(node, "g1", {0: 5, 1: 6}) == [E.NONE, E.NONE]
    assert commit(node, "g2", {0: 7}) == [E.NONE]
    node.broker.stop()
    broker = Broker(BrokerConfig.from_properties(node.props))
    broker.start()
    node.broker = broker
    to_load = broker.groups.start()
    assert sorted(to_load) == [0, 1, 2]
    loading = fetch(node, ["g1"])
    assert loading["g1"][0] == E.COORDINATOR_LOAD_IN_PROGRESS
    node.loop.run_until_complete(broker.groups.load(to_load))
    assert fetch(node, ["g1", "g2", "g3"]) == {
        "g1": (E.NONE, {("orders", 0): 5, ("orders", 1): 6}), "g2": (E.NONE, {("orders", 0): 7}), "g3": (E.NONE, {})}


def test_deleting_a_topic_deletes_its_committed_offsets(node: Node) -> None:
    node.broker.create_topic("orders", 1)
    node.broker.create_topic("other", 1)
    commit(node, "g", {0: 1})
    commit(node, "g", {0: 2}, topic="other")
    node.broker.delete_topic("orders")
    assert fetch(node, ["g"])["g"][1] == {("other", 0): 2}
    node.restart()
    assert fetch(node, ["g"])["g"][1] == {("other", 0): 2}


def test_the_internal_topics_are_compacted(node: Node) -> None:
    node.broker.groups.ensure_started()
    node.broker.txns.ensure_started()
    for name in (OFFSETS_TOPIC, "__transaction_state"):
        topic = node.broker.registry.get(name)
        assert topic is not None and topic.configs["cleanup.policy"] == "compact"
        assert "retention.ms" not in topic.configs  # no retention override: with compact alone it does nothing
        assert node.broker.get_log(name, 0).config.compact


def test_an_internal_topic_created_by_an_earlier_version_becomes_compacted(tmp_path: Path) -> None:
    node = Node(tmp_path / "data")
    try:
        node.broker.create_topic("orders", 1)
        assert commit(node, "g", {0: 7}) == [E.NONE]
        # as earlier versions created it: delete policy (by default) with retention off; they rewrote it
        old = {"retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": "104857600",
               "max.message.bytes": "104857600"}
        node.broker.alter_topic_configs(OFFSETS_TOPIC, old)
        assert not node.broker.get_log(OFFSETS_TOPIC, 0).config.compact
        node.restart()
        topic = node.broker.registry.get(OFFSETS_TOPIC)
        assert topic is not None and topic.configs == {**old, "cleanup.policy": "compact"}
        assert all(node.broker.get_log(OFFSETS_TOPIC, p).config.compact for p in range(topic.partitions))
        assert fetch(node, ["g"])["g"][1] == {("orders", 0): 7}
        # a policy an operator chose is theirs
        node.broker.alter_topic_configs(OFFSETS_TOPIC, {**old, "cleanup.policy": "compact,delete"})
        node.restart()
        assert node.broker.get_log(OFFSETS_TOPIC, 0).config.cleanup_policy == "compact,delete"
    finally:
        node.close()


def test_the_offsets_topic_stays_bounded_once_the_cleaner_runs(tmp_path: Path) -> None:
    # the cleaner thread runs (every 50 ms), with its worker process, as in a broker
    node = Node(tmp_path / "data", **{**COMPACTING, "log.cleaner.enable": "true", "log.cleaner.backoff.ms": "50"})
    try:
        node.broker.create_topic("orders", 4)
        for i in range(600):  # ~130 bytes per commit: ~80 KB written in all
            assert commit(node, "g", {i % 4: i}, metadata="x" * 20) == [E.NONE]
        lg = node.broker.get_log(OFFSETS_TOPIC, 0)
        cleaner = node.broker.log_manager.cleaner
        deadline = time.monotonic() + 60
        while lg.size >= 2 * 4096:  # the live state (4 records) and the active segment
            assert time.monotonic() < deadline, f"__consumer_offsets still holds {lg.size} bytes"
            assert wait_for_passes(cleaner, cleaner.stats.passes + 1, 30), "the cleaner made no pass"
        assert lg.log_start_offset == 0  # compaction, not a rewrite: offsets stay where they were written
        node.restart()
        assert fetch(node, ["g"])["g"][1] == {("orders", p): 596 + p for p in range(4)}
    finally:
        node.close()


def test_compaction_keeps_deletions_deleted_even_once_their_tombstones_are_gone(tmp_path: Path) -> None:
    node = Node(tmp_path / "data", **COMPACTING)
    try:
        node.broker.create_topic("orders", 4)
        node.broker.create_topic("doomed", 1)
        member, gen = _stable_member(node, "members")
        assert commit(node, "members", {0: 3}, member_id=member, generation=gen) == [E.NONE]
        for i in range(300):
            assert commit(node, "g", {i % 4: i}, metadata="x" * 20) == [E.NONE]
            if i % 100 == 0:
                assert commit(node, f"gone-{i}", {0: i}) == [E.NONE]
        assert commit(node, "g", {0: 1}, topic="doomed") == [E.NONE]
        deleted = node.call(apis.DELETE_GROUPS, 2, {"groups_names": ["gone-0", "gone-100", "gone-200"]})
        assert {r.error_code for r in deleted.results} == {E.NONE}
        od = node.call(apis.OFFSET_DELETE, 0, {"group_id": "g", "topics": [
            {"name": "orders", "partitions": [{"partition_index": 3}]}]})
        assert od.error_code == E.NONE
        node.broker.delete_topic("doomed")
        expected = {("orders", p): 296 + p for p in range(3)}
        assert fetch(node, ["g"])["g"][1] == expected
        tombstones = sum(1 for e in offsets_entries(node) if isinstance(e, DataRecord) and e.value is None)
        assert tombstones == 3 * 2 + 1 + 1  # DeleteGroups: offset and group; OffsetDelete; the deleted topic

        def same_state() -> None:
            node.restart()
            assert fetch(node, ["g", "gone-0", "gone-100", "gone-200"]) == {
                "g": (E.NONE, expected), "gone-0": (E.NONE, {}), "gone-100": (E.NONE, {}), "gone-200": (E.NONE, {})}
            assert fetch(node, ["members"])["members"][1] == {("orders", 0): 3}
            groups = node.call(apis.LIST_GROUPS, 4, {"states_filter": []}).groups
            assert sorted(g.group_id for g in groups) == ["g", "members"]

        for _ in range(40):  # the deletions move into closed segments
            assert commit(node, "g", {0: 296}, metadata="x" * 20) == [E.NONE]
        assert clean(node) >= 1
        same_state()  # the tombstones are kept by the first pass that sees them
        assert sum(1 for e in offsets_entries(node) if isinstance(e, DataRecord) and e.value is None) == tombstones
        for _ in range(40):
            assert commit(node, "g", {0: 296}, metadata="x" * 20) == [E.NONE]
        assert clean(node) >= 1
        assert not [e for e in offsets_entries(node) if isinstance(e, DataRecord) and e.value is None]
        same_state()  # and once their delete horizon has passed they go: nothing comes back
        assert node.broker.get_log(OFFSETS_TOPIC, 0).size < 2 * 4096
    finally:
        node.close()


def _stable_member(node: Node, group: str) -> tuple[str, int]:
    joined = join(node, 9, group)
    synced = node.call(apis.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": joined.generation_id, "member_id": joined.member_id,
        "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": joined.member_id, "assignment": b""}]})
    assert synced.error_code == E.NONE
    return joined.member_id, joined.generation_id


def test_join_errors_on_the_wire(node: Node) -> None:
    bad = dict(join_fields("g"), session_timeout=10)
    assert node.call(apis.JOIN_GROUP, 5, bad).error_code == E.INVALID_SESSION_TIMEOUT
    assert node.call(apis.JOIN_GROUP, 5, join_fields("")).error_code == E.INVALID_GROUP_ID
    assert node.call(apis.JOIN_GROUP, 5, join_fields("g", "ghost")).error_code == E.UNKNOWN_MEMBER_ID
    hb = node.call(apis.HEARTBEAT, 4, {"group_id": "nope", "generation_id": 1, "member_id": "m",
                                       "group_instance_id": None})
    assert hb.error_code == E.UNKNOWN_MEMBER_ID
    od = node.call(apis.OFFSET_DELETE, 0, {"group_id": "nope", "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0}]}]})
    assert od.error_code == E.GROUP_ID_NOT_FOUND


def test_reading_requests_do_not_create_the_internal_topic(node: Node) -> None:
    assert node.call(apis.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []}).groups == ()
    assert node.call(apis.DESCRIBE_GROUPS, 5, {"groups": ["g"]}).groups[0].group_state == "Dead"
    hb = node.call(apis.HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": "m",
                                       "group_instance_id": None})
    assert hb.error_code == E.UNKNOWN_MEMBER_ID
    assert fetch(node, ["g"]) == {"g": (E.NONE, {})}
    assert node.broker.registry.get(OFFSETS_TOPIC) is None
