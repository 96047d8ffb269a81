"""ZkClient against a real ZooKeeper: registration, election, fencing, watches, topics, configs, producer ids.

One ZooKeeper per module (``zookeeper`` fixture); every test works in its own chroot (``zk_chroot``).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from odradek.cluster.model import BrokerRegistration, Endpoint, LeaderAndIsr, TopicAssignment
from odradek.cluster.zk import layout
from odradek.cluster.zk.acl_client import ZkAcls
from odradek.cluster.zk.client import (
    CLOSED,
    CONNECTED,
    EXPIRED,
    BadVersionError,
    BrokerIdInUseError,
    ControllerFence,
    ControllerMovedError,
    TopicExistsInZkError,
    ZkClient,
    ZkUnavailableError,
)
from odradek.cluster.zk.server import ZooKeeperServer, free_port, srvr
from odradek.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tests.cluster.conftest import ZkClientFactory
from tests.cluster.zk_process import expire_session, start_zookeeper, wait_until


class Recorder:
    """Collects watch callbacks (from any thread) and waits, bounded, for one that matches."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.threads: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, value: Any = None) -> None:
        with self._lock:
            self.values.append(value)
            self.threads.append(threading.current_thread().name)

    def wait_for(self, predicate: Callable[[Any], bool], what: str, timeout_s: float = 10.0) -> Any:
        def found() -> tuple[Any] | None:
            with self._lock:
                return next(((v,) for v in self.values if predicate(v)), None)

        return wait_until(found, timeout_s=timeout_s, what=f"{what}; got {self.values}")[0]


def registration(broker_id: int, port: int = 9092, **kwargs: Any) -> BrokerRegistration:
    return BrokerRegistration(broker_id, (Endpoint("PLAINTEXT", "127.0.0.1", port + broker_id),), **kwargs)


def raw(zk_chroot: str) -> KazooClient:
    """A plain kazoo client on the same chroot, for looking at what ZkClient wrote."""
    kz = KazooClient(hosts=zk_chroot, timeout=6.0)
    kz.start(timeout=10.0)
    return kz


# -- the server harness --------------------------------------------------------------------------------------


def test_server_answers_srvr_and_pauses(zookeeper: ZooKeeperServer) -> None:
    assert zookeeper.running
    assert zookeeper.start_seconds is not None and zookeeper.start_seconds < 20
    answer = srvr("127.0.0.1", zookeeper.port)
    assert answer is not None and "Mode: standalone" in answer
    assert "tickTime=500" in zookeeper.config_path.read_text()
    zookeeper.pause()
    try:
        assert srvr("127.0.0.1", zookeeper.port, timeout_s=0.3) is None
    finally:
        zookeeper.resume()
    assert wait_until(lambda: srvr("127.0.0.1", zookeeper.port), what="srvr after resume")


def test_server_stop_is_idempotent(tmp_path: Path) -> None:
    server = start_zookeeper(tmp_path)
    port = server.port
    server.stop()
    server.stop()
    assert not server.running
    assert srvr("127.0.0.1", port, timeout_s=0.3) is None
    assert (tmp_path / "zookeeper.log").stat().st_size > 0


# -- connecting ----------------------------------------------------------------------------------------------


def test_start_creates_the_chroot_and_kafkas_paths(zk_client: ZkClientFactory, zookeeper: ZooKeeperServer) -> None:
    chroot = f"/odradek-{uuid.uuid4().hex[:8]}/cluster-a"
    client = zk_client(f"{zookeeper.connect_string}{chroot}")
    client.ensure_paths()
    client.ensure_paths()  # idempotent
    kz = raw(zookeeper.connect_string)
    try:
        assert kz.exists(chroot) is not None
        for path in layout.PERSISTENT_PATHS:
            assert kz.exists(chroot + path) is not None, path
    finally:
        kz.stop()
        kz.close()


def test_unreachable_zookeeper_fails_within_the_connection_timeout() -> None:
    client = ZkClient(f"127.0.0.1:{free_port()}/x", session_timeout_ms=6000, connection_timeout_ms=800)
    began = time.monotonic()
    with pytest.raises(
        ZkUnavailableError, match=r"cannot reach ZooKeeper at 127\.0\.0\.1:\d+ within 800 ms: is it running"
    ):
        client.start()
    assert time.monotonic() - began < 5.0
    client.close()


def test_requests_fail_when_zookeeper_dies(tmp_path: Path) -> None:
    server = start_zookeeper(tmp_path)
    client = ZkClient(server.connect_string, session_timeout_ms=2000, connection_timeout_ms=1000)
    try:
        client.start()
        client.ensure_paths()
        server.kill()
        began = time.monotonic()
        with pytest.raises(ZkUnavailableError, match="did not answer within 2000 ms"):
            client.get_config("topics", "t")
        assert time.monotonic() - began < 8.0
    finally:
        client.close()
        server.stop()


def test_cluster_id_first_proposal_wins(zk_client: ZkClientFactory) -> None:
    a, b = zk_client(), zk_client()
    assert a.get_or_create_cluster_id("first") == "first"
    assert b.get_or_create_cluster_id("second") == "first"


# -- brokers -------------------------------------------------------------------------------------------------


def test_register_broker_returns_the_epoch(zk_client: ZkClientFactory, zk_chroot: str) -> None:
    a, b = zk_client(), zk_client()
    a.ensure_paths()
    epoch_a = a.register_broker(registration(1, rack="r1"))
    epoch_b = b.register_broker(registration(2))
    assert 0 < epoch_a < epoch_b
    brokers = a.live_brokers()
    assert brokers == {1: registration(1, rack="r1", epoch=epoch_a), 2: registration(2, epoch=epoch_b)}
    kz = raw(zk_chroot)
    try:
        data, stat = kz.get("/brokers/ids/1")
        assert stat.ephemeralOwner == a.session_id
        assert data.startswith(b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"}')
    finally:
        kz.stop()
        kz.close()


def test_duplicate_broker_id_is_refused(zk_client: ZkClientFactory) -> None:
    a, b = zk_client(), zk_client()
    epoch = a.register_broker(registration(1))
    with pytest.raises(BrokerIdInUseError, match="broker id 1 is registered in ZooKeeper by another session"):
        b.register_broker(registration(1))
    assert a.register_broker(registration(1)) == epoch  # the same session may register again
    with pytest.raises(BrokerIdInUseError):
        b.update_broker(registration(1, shutting_down=True))


def test_closing_removes_the_registration(zk_client: ZkClientFactory) -> None:
    a, b = zk_client(), zk_client()
    a.register_broker(registration(1))
    a.close()
    assert b.live_brokers() == {}
    assert b.register_broker(registration(1)) > 0


def test_session_expiry_removes_the_registration_and_is_reported(zk_client: ZkClientFactory) -> None:
    expired = Recorder()
    states = Recorder()
    a = zk_client(on_session_expired=expired, on_connection_change=states)
    observer = zk_client()
    first_epoch = a.register_broker(registration(1))
    old_session = a.session_id
    expire_session(a)
    expired.wait_for(lambda v: True, "on_session_expired")
    assert a.session_id != old_session
    states.wait_for(lambda v: v == EXPIRED, "the 'expired' state")
    assert states.values[-1] == CONNECTED  # the new session is up when on_session_expired runs
    assert observer.live_brokers() == {}
    assert a.register_broker(registration(1)) > first_epoch  # a new epoch for the new session
    a.close()
    states.wait_for(lambda v: v == CLOSED, "the 'closed' state")


def test_live_brokers_watch_sees_joins_updates_and_leaves(zk_client: ZkClientFactory) -> None:
    observer = zk_client()
    seen = Recorder()
    assert observer.live_brokers(watch=seen) == {}
    a = zk_client()
    epoch = a.register_broker(registration(1))
    seen.wait_for(lambda m: m == {1: registration(1, epoch=epoch)}, "broker 1 joining")
    a.update_broker(registration(1, shutting_down=True))
    seen.wait_for(lambda m: 1 in m and m[1].shutting_down and m[1].epoch == epoch, "broker 1 shutting down")
    b = zk_client()
    epoch_b = b.register_broker(registration(2))
    seen.wait_for(lambda m: set(m) == {1, 2} and m[2].epoch == epoch_b, "broker 2 joining")
    a.close()
    seen.wait_for(lambda m: set(m) == {2}, "broker 1 leaving")
    c = zk_client()
    epoch_c = c.register_broker(registration(1))
    seen.wait_for(lambda m: set(m) == {1, 2} and m[1].epoch == epoch_c, "broker 1 back with a new epoch")
    assert all(name == "odradek-zk-events" for name in seen.threads)  # never on kazoo's threads


def test_watches_go_through_dispatch(zk_client: ZkClientFactory) -> None:
    handed: list[str] = []

    def dispatch(callback: Callable[[], None]) -> None:
        handed.append(threading.current_thread().name)
        callback()

    observer = zk_client(dispatch=dispatch)
    seen = Recorder()
    observer.topic_names(watch=seen)
    zk_client().create_topic(TopicAssignment("t", uuid.uuid4(), {0: (1,)}), {})
    seen.wait_for(lambda names: names == ["t"], "topic t")
    assert handed and set(handed) == {"odradek-zk-events"}


# -- controller ----------------------------------------------------------------------------------------------


def test_controller_election_and_epoch_bump(zk_client: ZkClientFactory) -> None:
    a, b = zk_client(), zk_client()
    assert a.controller() is None
    assert a.elect_controller(1) == (1, 1)
    assert a.elect_controller(1) == (1, 1)  # already ours: no second bump
    assert b.elect_controller(2) is None
    assert b.controller() == 1
    changes = Recorder()
    assert b.controller(watch=changes) == 1
    a.close()
    changes.wait_for(lambda v: v is None, "the controller going away")
    assert b.elect_controller(2) == (2, 2)
    changes.wait_for(lambda v: v == 2, "broker 2 becoming controller")
    assert b.controller_epoch() == (2, 2)
    b.resign_controller(1)  # not ours: nothing happens
    assert b.controller() == 2
    b.resign_controller(2)
    assert b.controller() is None


def test_concurrent_elections_have_one_winner(zk_client: ZkClientFactory) -> None:
    clients = [zk_client() for _ in range(4)]
    results: dict[int, tuple[int, int] | None] = {}
    barrier = threading.Barrier(len(clients))

    def elect(i: int) -> None:
        barrier.wait(timeout=10)
        results[i] = clients[i].elect_controller(i)

    threads = [threading.Thread(target=elect, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    winners = [i for i, r in results.items() if r is not None]
    assert len(results) == len(clients) and len(winners) == 1
    assert results[winners[0]] == (1, 1)
    assert clients[0].controller() == winners[0]


def make_states(topic: str, n: int, controller_epoch: int) -> dict[tuple[str, int], LeaderAndIsr]:
    return {(topic, p): LeaderAndIsr(1, 0, (1, 2), controller_epoch) for p in range(n)}


def test_fenced_writes_fail_after_another_controller_took_over(zk_client: ZkClientFactory) -> None:
    a, b = zk_client(), zk_client()
    a.ensure_paths()
    a.create_topic(TopicAssignment("t", uuid.uuid4(), {0: (1, 2), 1: (2, 1)}), {})
    epoch, version = a.elect_controller(1) or pytest.fail("a should win")
    fence_a = ControllerFence(epoch, version)
    created = a.create_partition_states(make_states("t", 2, epoch), fence_a)
    assert {tp: s.zk_version for tp, s in created.items()} == {("t", 0): 0, ("t", 1): 0}
    a.resign_controller(1)
    epoch_b, version_b = b.elect_controller(2) or pytest.fail("b should win")
    assert epoch_b == epoch + 1
    moved = {tp: s.new_leader(2, (2,), epoch) for tp, s in created.items()}
    with pytest.raises(ControllerMovedError, match=f"controller epoch {epoch} is over"):
        a.update_partition_states(moved, fence_a)
    with pytest.raises(ControllerMovedError):
        a.create_partition_states(make_states("t", 3, epoch), fence_a)
    with pytest.raises(ControllerMovedError):
        a.delete_topic_znodes("t", fence_a)
    assert a.get_partition_state("t", 0) == created[("t", 0)]  # nothing of a's writes landed
    assert a.get_partition_state("t", 2) is None
    fence_b = ControllerFence(epoch_b, version_b)
    updated = b.update_partition_states({tp: s.new_leader(2, (2,), epoch_b) for tp, s in created.items()}, fence_b)
    assert all(s is not None and s.leader == 2 and s.zk_version == 1 for s in updated.values())


def test_conditional_partition_state_updates(zk_client: ZkClientFactory) -> None:
    controller, leader = zk_client(), zk_client()
    controller.ensure_paths()
    controller.create_topic(TopicAssignment("t", uuid.uuid4(), {0: (1, 2), 1: (1, 2)}), {})
    epoch, version = controller.elect_controller(1) or pytest.fail("should win")
    fence = ControllerFence(epoch, version)
    created = controller.create_partition_states(make_states("t", 2, epoch), fence)
    # The leader shrinks the ISR of partition 0 (Kafka's pre-2.7 path): a conditional write.
    shrunk = leader.update_isr("t", 0, created[("t", 0)].with_isr((1,)))
    assert shrunk is not None and shrunk.isr == (1,) and shrunk.zk_version == 1
    # Writing the same state again from the old version: our write already landed, so it is accepted.
    assert leader.update_isr("t", 0, created[("t", 0)].with_isr((1,))) == shrunk
    # A different write from the stale version is refused.
    assert leader.update_isr("t", 0, created[("t", 0)].with_isr((2, 1))) is None
    # The controller's multi-op: partition 0's version is stale, partition 1's is current.
    result = controller.update_partition_states({tp: s.new_leader(2, (2,), epoch) for tp, s in created.items()}, fence)
    assert result[("t", 0)] is None
    assert result[("t", 1)] == LeaderAndIsr(2, 1, (2,), epoch, 1)
    assert controller.get_partition_state("t", 0) == shrunk
    assert controller.update_isr("t", 9, created[("t", 0)]) is None  # no such partition
    # Creating existing states: the same contents count as created (a retried write), others are left out.
    again = controller.create_partition_states({("t", 1): result[("t", 1)], ("t", 0): created[("t", 0)]}, fence)  # type: ignore[dict-item]
    assert again == {("t", 1): result[("t", 1)]}


def test_partition_state_and_topic_watches_fire(zk_client: ZkClientFactory) -> None:
    controller, observer = zk_client(), zk_client()
    controller.ensure_paths()
    states, topics = Recorder(), Recorder()
    assert observer.get_partition_state("t", 0, watch=states) is None
    assert observer.get_topic("t", watch=topics) is None
    t = TopicAssignment("t", uuid.uuid4(), {0: (1, 2)})
    controller.create_topic(t, {"retention.ms": "1000"})
    created_topic = topics.wait_for(lambda v: v is not None, "the topic appearing")
    assert created_topic == TopicAssignment("t", t.topic_id, {0: (1, 2)}, 0)
    epoch, version = controller.elect_controller(1) or pytest.fail("should win")
    fence = ControllerFence(epoch, version)
    created = controller.create_partition_states(make_states("t", 1, epoch), fence)
    states.wait_for(lambda v: v == created[("t", 0)], "the state appearing")
    for leader in (2, 1, 2):  # a watch keeps firing, not once
        current = controller.get_partition_state("t", 0)
        assert current is not None
        controller.update_partition_states({("t", 0): current.new_leader(leader, (leader,), epoch)}, fence)
    states.wait_for(lambda v: v is not None and v.leader_epoch == 3, "the third leader change")
    wider = controller.set_topic_assignment(replace_replicas(created_topic, {0: (1, 2), 1: (2, 1)}))
    assert wider.zk_version == 1
    topics.wait_for(lambda v: v is not None and v.partition_count == 2, "the new partition")
    with pytest.raises(BadVersionError, match="no longer at version 0"):
        controller.set_topic_assignment(created_topic)


def replace_replicas(t: TopicAssignment, replicas: dict[int, tuple[int, ...]]) -> TopicAssignment:
    return TopicAssignment(t.name, t.topic_id, replicas, t.zk_version)


# -- topics --------------------------------------------------------------------------------------------------


def test_topic_creation_and_deletion(zk_client: ZkClientFactory, zk_chroot: str) -> None:
    admin, controller = zk_client(), zk_client()
    controller.ensure_paths()
    names, doomed = Recorder(), Recorder()
    assert controller.topic_names(watch=names) == []
    assert controller.topics_to_delete(watch=doomed) == []
    t = TopicAssignment("orders", uuid.uuid4(), {0: (1, 2), 1: (2, 1)})
    admin.create_topic(t, {"cleanup.policy": "compact"})
    names.wait_for(lambda v: v == ["orders"], "orders created")
    assert admin.get_config("topics", "orders") == {"cleanup.policy": "compact"}
    with pytest.raises(TopicExistsInZkError, match="already exists"):
        admin.create_topic(t, {})
    kz = raw(zk_chroot)
    try:
        assert kz.get("/brokers/topics/orders")[0] == layout.encode_topic(t)
    finally:
        kz.stop()
        kz.close()
    epoch, version = controller.elect_controller(1) or pytest.fail("should win")
    fence = ControllerFence(epoch, version)
    controller.create_partition_states(make_states("orders", 2, epoch), fence)

    admin.mark_topic_for_deletion("orders")
    admin.mark_topic_for_deletion("orders")  # idempotent
    doomed.wait_for(lambda v: v == ["orders"], "orders marked for deletion")
    with pytest.raises(TopicExistsInZkError, match="marked for deletion"):
        admin.create_topic(TopicAssignment("orders", uuid.uuid4(), {0: (1,)}), {})
    controller.delete_topic_znodes("orders", fence)
    names.wait_for(lambda v: v == [], "orders deleted")
    doomed.wait_for(lambda v: v == [], "the deletion marker gone")
    assert controller.get_topic("orders") is None
    assert controller.get_partition_state("orders", 0) is None
    assert controller.get_config("topics", "orders") == {}
    controller.delete_topic_znodes("orders", fence)  # nothing left: still fine
    admin.create_topic(TopicAssignment("orders", uuid.uuid4(), {0: (1,)}), {})  # the name is free again


# -- configs -------------------------------------------------------------------------------------------------


def test_configs_and_change_notifications(zk_client: ZkClientFactory, zk_chroot: str) -> None:
    admin, broker = zk_client(), zk_client()
    admin.ensure_paths()
    changes = Recorder()
    assert broker.config_changes(watch=changes) == []
    admin.set_config("topics", "orders", {"retention.ms": "1000"})
    changes.wait_for(lambda v: v == ["topics/orders"], "the topic config change")
    admin.set_config("brokers", "<default>", {"log.retention.ms": "5"})
    admin.set_config("brokers", "1", {"log.cleaner.threads": "2"})
    changes.wait_for(lambda v: v == ["brokers/1"], "the broker config change")
    assert ["brokers/<default>"] in changes.values
    assert broker.get_config("brokers", "<default>") == {"log.retention.ms": "5"}
    assert broker.get_config("brokers", "2") == {}
    admin.set_config("topics", "orders", {})
    assert broker.get_config("topics", "orders") == {}
    late = zk_client()  # a client that starts later sees the existing notifications as its first value
    assert late.config_changes(watch=Recorder()) == [
        "topics/orders",
        "brokers/<default>",
        "brokers/1",
        "topics/orders",
    ]
    kz = raw(zk_chroot)
    try:
        first = sorted(kz.get_children("/config/changes"))[0]
        assert first == "config_change_0000000000"
        assert kz.get(f"/config/changes/{first}")[0] == b'{"version":2,"entity_path":"topics/orders"}'
    finally:
        kz.stop()
        kz.close()
    assert admin.purge_config_changes(older_than_ms=0, now_ms=int(time.time() * 1000) + 60_000) == 4


# -- producer ids --------------------------------------------------------------------------------------------


def test_producer_id_blocks_never_overlap(zk_client: ZkClientFactory, zk_chroot: str) -> None:
    clients = [zk_client(), zk_client()]
    clients[0].ensure_paths()  # Kafka's /latest_producer_id_block starts out empty
    blocks: list[tuple[int, tuple[int, int]]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(clients))

    def claim(broker_id: int) -> None:
        barrier.wait(timeout=10)
        for _ in range(15):
            block = clients[broker_id].claim_producer_id_block(broker_id, block_size=100)
            with lock:
                blocks.append((broker_id, block))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    ranges = sorted(block for _, block in blocks)
    assert len(ranges) == 30
    assert ranges[0][0] == 0
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert start == end  # contiguous, never overlapping
    assert ranges[-1][1] == 3000
    kz = raw(zk_chroot)
    try:
        stored = layout.decode_producer_id_block(kz.get("/latest_producer_id_block")[0])
        assert stored is not None and (stored.start, stored.end) == (2900, 3000)
    finally:
        kz.stop()
        kz.close()


class _MovableClock:
    """ZooKeeper's clock, moved ahead by ``ahead_ms`` (20 minutes: every notification already there is past Kafka's
    15 minutes)."""

    def __init__(self) -> None:
        self.ahead_ms = 0

    def milliseconds(self) -> int:
        return int(time.time() * 1000) + self.ahead_ms


LATER_MS = 20 * 60 * 1000


def test_read_config_change_notifications_are_purged_once_expired(zk_client: ZkClientFactory,
                                                                   zk_chroot: str) -> None:
    admin = zk_client()
    admin.ensure_paths()
    admin.set_config("topics", "a", {"retention.ms": "1"})
    kz = raw(zk_chroot)
    try:
        clock, changes = _MovableClock(), Recorder()
        broker = zk_client(clock=clock)
        assert broker.config_changes(watch=changes) == ["topics/a"]  # read, young: kept
        assert len(kz.get_children("/config/changes")) == 1
        clock.ahead_ms = LATER_MS
        admin.set_config("topics", "b", {"retention.ms": "2"})
        changes.wait_for(lambda v: v == ["topics/b"], "the next change")
        # with that batch, every notification read so far and now expired goes: the earlier batch's one too
        wait_until(lambda: kz.get_children("/config/changes") == [], what="the read notifications purged")
        assert admin.get_config("topics", "b") == {"retention.ms": "2"}  # the configs themselves stay
    finally:
        kz.stop()
        kz.close()


def test_read_acl_change_notifications_are_purged_once_expired(zk_client: ZkClientFactory, zk_chroot: str) -> None:
    admin = ZkAcls(zk_client())
    admin.ensure_paths()
    orders = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
    alice = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    bob = AccessControlEntry("User:bob", "*", AclOperation.READ, AclPermissionType.ALLOW)
    carol = AccessControlEntry("User:carol", "*", AclOperation.READ, AclPermissionType.ALLOW)
    admin.update(orders, lambda entries: entries | {alice})
    kz = raw(zk_chroot)
    try:
        clock, changes = _MovableClock(), Recorder()
        ZkAcls(zk_client(clock=clock)).watch_changes(lambda p, e: changes((p, e)))
        assert len(kz.get_children("/kafka-acl-changes")) == 1  # present at the start, young: kept
        admin.update(orders, lambda entries: entries | {bob})
        changes.wait_for(lambda v: v == (orders, frozenset({alice, bob})), "the change reported")
        assert len(kz.get_children("/kafka-acl-changes")) == 2  # read, young: kept
        clock.ahead_ms = LATER_MS
        admin.update(orders, lambda entries: entries | {carol})
        changes.wait_for(lambda v: v == (orders, frozenset({alice, bob, carol})), "the next change reported")
        # with that batch, every notification read so far and now expired goes: the earlier ones too
        wait_until(lambda: kz.get_children("/kafka-acl-changes") == [], what="the read notifications purged")
        assert admin.read(orders) == {alice, bob, carol}  # the ACLs themselves stay
    finally:
        kz.stop()
        kz.close()
