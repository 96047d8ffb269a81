"""Partition reassignment on a 4-broker cluster, driven by kafka-python's admin client (a real Kafka client):
AlterPartitionReassignments, ListPartitionReassignments, cancellation, and the errors Kafka gives."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)

from odradek.cluster.zk.server import ZooKeeperServer
from odradek.protocol import apis
from tests.broker.wire import Conn
from tests.cli.test_cli import Cli
from tests.cluster.brokers import Cluster, serving, wait_until
from tests.cluster.test_replication import _consume_all
from tests.cluster.zk_process import unique_chroot


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from serving(Cluster(tmp_path_factory.mktemp("cluster4"), unique_chroot(zookeeper), size=4,
                               overrides=["replication.quota.window.num=2"]))  # throttles measured over 2 s


@pytest.fixture
def admin(cluster: Cluster) -> Iterator[Any]:
    a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20000)
    try:
        yield a
    finally:
        a.close()


def _topic() -> str:
    return f"r-{uuid.uuid4().hex[:10]}"


def _produce(cluster: Cluster, topic: str, values: list[bytes]) -> list[tuple[int, int, bytes]]:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 60000})
    acked: list[tuple[int, int, bytes]] = []

    def on_ack(err: object, msg: Any) -> None:
        assert err is None, err
        acked.append((msg.partition(), msg.offset(), msg.value()))

    for v in values:
        p.produce(topic, value=v, on_delivery=on_ack)
        p.poll(0)
    assert p.flush(30) == 0
    return acked


def _replicas(cluster: Cluster, topic: str, partition: int = 0) -> list[int]:
    return list(cluster.partitions(topic)[partition].replicas)


def _settled(cluster: Cluster, admin: Any, topic: str, target: list[int]) -> bool:
    if admin.list_partition_reassignments([KTopicPartition(topic, 0)]):
        return False
    p = cluster.partitions(topic)[0]
    return list(p.replicas) == target and sorted(p.isrs) == sorted(target) and p.leader in target


def _has_log(cluster: Cluster, broker: int, topic: str) -> bool:
    return (cluster.brokers[broker].data_dir / f"{topic}-0").exists()


def test_a_reassignment_moves_replicas_and_leadership_and_loses_nothing(cluster: Cluster, admin: Any) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    before = _replicas(cluster, topic)
    leader = cluster.leader(topic)
    acked = _produce(cluster, topic, [f"a{i}".encode() for i in range(3000)])
    target = [b for b in (1, 2, 3, 4) if b not in before]  # two brokers that host nothing of it yet
    tp = KTopicPartition(topic, 0)
    assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
    acked += _produce(cluster, topic, [f"b{i}".encode() for i in range(1000)])  # while it moves
    wait_until(lambda: _settled(cluster, admin, topic, target), timeout_s=40, what="the reassignment done")
    assert cluster.leader(topic) != leader and cluster.leader(topic) in target
    for b in before:  # the old replicas deleted their logs, as Kafka's StopReplica does
        wait_until(lambda b=b: not _has_log(cluster, b, topic), what=f"broker {b} deleting its log")
    for b in target:
        assert _has_log(cluster, b, topic)
    got = _consume_all(cluster, topic, 1, len(acked))
    assert sorted(got) == sorted(acked), "every acknowledged record once, at its offset"


def test_growing_and_reordering_the_replicas(cluster: Cluster, admin: Any) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    (only,) = _replicas(cluster, topic)
    acked = _produce(cluster, topic, [f"g{i}".encode() for i in range(500)])
    others = [b for b in (1, 2, 3, 4) if b != only]
    target = [others[0], only, others[1]]
    tp = KTopicPartition(topic, 0)
    assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
    wait_until(lambda: _settled(cluster, admin, topic, target), timeout_s=40, what="the replication factor grown")
    assert cluster.leader(topic) == only, "the leader stays when it is in the target (rebalancing is separate)"
    assert sorted(_consume_all(cluster, topic, 1, len(acked))) == sorted(acked)


def test_list_and_cancel_a_running_reassignment(cluster: Cluster, admin: Any) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    before = _replicas(cluster, topic)
    _produce(cluster, topic, [b"x"] * 100)
    controller = cluster.metadata().controller_id
    newcomer = next(b for b in (1, 2, 3, 4) if b not in before and b != controller)  # stopped below
    tp = KTopicPartition(topic, 0)
    stopped = cluster.brokers[newcomer]
    # Requests by hand to the controller while the newcomer is stopped: an admin client may pick the stopped
    # broker for its metadata and wait out its timeout.
    with Conn(cluster.brokers[controller].address) as conn:
        def call(api: int, body: dict[str, Any]) -> Any:
            return conn.request(api, 0, {"timeout": 5000, **body})

        os.kill(stopped.pid, signal.SIGSTOP)  # registered but not fetching: the reassignment cannot finish
        try:
            r = call(apis.ALTER_PARTITION_REASSIGNMENTS, {"topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "replicas": [newcomer, before[0]]}]}]})
            assert int(r.responses[0].partitions[0].error_code) == 0
            r = call(apis.LIST_PARTITION_REASSIGNMENTS, {"topics": None})
            (ongoing,) = [p for t in r.topics if t.name == topic for p in t.partitions]
            assert (list(ongoing.replicas), list(ongoing.adding_replicas), list(ongoing.removing_replicas)) == (
                [newcomer, before[0], before[1]], [newcomer], [before[1]])
            r = call(apis.LIST_PARTITION_REASSIGNMENTS,
                     {"topics": [{"name": "no-such-topic", "partition_indexes": [0]}]})
            assert r.topics == ()
            r = call(apis.ALTER_PARTITION_REASSIGNMENTS, {"topics": [  # cancel
                {"name": topic, "partitions": [{"partition_index": 0, "replicas": None}]}]})
            assert int(r.responses[0].partitions[0].error_code) == 0
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
    assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    wait_until(lambda: _settled(cluster, admin, topic, before), timeout_s=30, what="back to the original replicas")
    wait_until(lambda: not _has_log(cluster, newcomer, topic), what="the cancelled replica's log deleted")


def test_invalid_reassignments_get_kafkas_errors(cluster: Cluster, admin: Any) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    before = _replicas(cluster, topic)
    tp = KTopicPartition(topic, 0)
    out = admin.alter_partition_reassignments({
        tp: [before[0], before[0]],
        KTopicPartition(topic, 7): [1],
        KTopicPartition("no-such-topic", 0): [1],
    })
    assert out[tp] is InvalidReplicationAssignmentError
    assert out[KTopicPartition(topic, 7)] is UnknownTopicOrPartitionError
    assert out[KTopicPartition("no-such-topic", 0)] is UnknownTopicOrPartitionError
    assert admin.alter_partition_reassignments({tp: [99]}) == {tp: InvalidReplicationAssignmentError}
    controller = cluster.brokers[cluster.metadata().controller_id]
    with Conn(controller.address) as conn:  # kafka-python refuses an empty list itself: send it by hand
        r = conn.request(apis.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 1000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "replicas": []}]}]})
        (p,) = r.responses[0].partitions
        assert int(p.error_code) == 39 and "empty" in p.error_message  # INVALID_REPLICA_ASSIGNMENT
    assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    assert _replicas(cluster, topic) == before, "nothing changed"


def test_a_broker_that_is_not_the_controller_answers_not_controller(cluster: Cluster) -> None:
    controller = cluster.metadata().controller_id
    other = next(b for i, b in cluster.brokers.items() if i != controller)
    with Conn(other.address) as conn:
        r = conn.request(apis.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 1000, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}]})
        assert int(r.error_code) == 41 and "controller" in r.error_message  # NOT_CONTROLLER
        r = conn.request(apis.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 1000, "topics": None})
        assert int(r.error_code) == 41


# -- leader elections ------------------------------------------------------------------------------------


def _reorder(cluster: Cluster, admin: Any, topic: str, *, leader_stays: bool = True) -> tuple[int, int]:
    """Swap the two replicas of ``topic``-0 (a reassignment without data movement): the leader stays, the
    preferred replica changes. Returns (leader, new preferred)."""
    a, b = _replicas(cluster, topic)
    leader = cluster.leader(topic)
    tp = KTopicPartition(topic, 0)
    assert admin.alter_partition_reassignments({tp: [b, a]}) == {tp: None}
    wait_until(lambda: _replicas(cluster, topic) == [b, a], what="the replicas reordered")
    if leader_stays:  # (an auto leader rebalance may already have moved it)
        assert cluster.leader(topic) == leader == a
    return a, b


def test_preferred_leader_election_moves_leadership_back(cluster: Cluster, admin: Any) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    _, preferred = _reorder(cluster, admin, topic)
    c = cluster.admin()
    tp = TopicPartition(topic, 0)
    assert c.elect_leaders(ElectionType.PREFERRED, [tp]).result(timeout=20) == {tp: None}
    # (the broker answering Metadata may learn of the election a moment after the controller made it)
    wait_until(lambda: cluster.leader(topic) == preferred, what=f"broker {preferred} leading {topic}-0")
    again = c.elect_leaders(ElectionType.PREFERRED, [tp]).result(timeout=20)[tp]
    assert again is not None and again.code() == KafkaError.ELECTION_NOT_NEEDED
    unclean = c.elect_leaders(ElectionType.UNCLEAN, [tp]).result(timeout=20)[tp]
    assert unclean is not None and unclean.code() == KafkaError.ELECTION_NOT_NEEDED  # it has a leader
    missing = TopicPartition(topic, 5)
    err = c.elect_leaders(ElectionType.PREFERRED, [missing]).result(timeout=20)[missing]
    assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_leader_election_and_reassign_partitions_cli(cluster: Cluster, admin: Any, tmp_path: Path) -> None:
    cli = Cli(cluster.bootstrap)
    topic = _topic()
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    _, preferred = _reorder(cluster, admin, topic)
    out = cli.ok("leader-election", "--election-type", "preferred", "--topic", topic, "--partition", "0")
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in out
    wait_until(lambda: cluster.leader(topic) == preferred, what=f"broker {preferred} leading {topic}-0")
    out = cli.ok("leader-election", "--election-type", "preferred", "--topic", topic)
    assert f"Valid replica already elected for partitions {topic}-0, {topic}-1" in out

    move = tmp_path / "move.json"
    move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    out = cli.ok("reassign-partitions", "--generate", "--topics-to-move-json-file", str(move), "--broker-list", "3,4")
    proposed = json.loads(out.split("Proposed partition reassignment configuration\n")[1])
    assert {(p["topic"], p["partition"]) for p in proposed["partitions"]} == {(topic, 0), (topic, 1)}
    assert all(sorted(p["replicas"]) == [3, 4] for p in proposed["partitions"])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(proposed))
    out = cli.ok("reassign-partitions", "--execute", "--reassignment-json-file", str(plan))
    assert "Save this to use as the --reassignment-json-file option during rollback" in out
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in out
    def verified() -> bool:
        r = cli("reassign-partitions", "--verify", "--reassignment-json-file", str(plan))
        assert r.returncode in (0, 1), r.stderr
        assert r.returncode == 0 or "still in progress" in r.stdout, r.stdout + r.stderr
        return r.returncode == 0

    wait_until(verified, timeout_s=40, what="--verify to report completion")
    out = cli.ok("reassign-partitions", "--verify", "--reassignment-json-file", str(plan))
    assert f"Reassignment of partition {topic}-0 is completed." in out
    assert "No partition reassignments found." in cli.ok("reassign-partitions", "--list")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3, 3]}]}))
    r = cli("reassign-partitions", "--execute", "--reassignment-json-file", str(bad))
    assert r.returncode == 2 and "must be distinct broker ids" in r.stderr
    r = cli("reassign-partitions", "--generate", "--topics-to-move-json-file", str(move), "--broker-list", "3,9")
    assert r.returncode == 2 and "not in the cluster" in r.stderr


def test_auto_leader_rebalance(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    c = Cluster(tmp_path, unique_chroot(zookeeper), size=2,
                overrides=["leader.imbalance.check.interval.seconds=1"]).start()
    try:
        a = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=20000)
        try:
            topic = _topic()
            c.create_topic(topic, partitions=1, replication_factor=2)
            _, preferred = _reorder(c, a, topic, leader_stays=False)
            wait_until(lambda: c.leader(topic) == preferred, timeout_s=15,
                       what="the controller to move leadership to the preferred replica by itself")
        finally:
            a.close()
    finally:
        failures = c.stop()
    assert not failures, "\n".join(failures)


# -- visibility -------------------------------------------------------------------------------------------


def test_unhealthy_partitions_are_shown_by_topics_describe_and_cluster_describe(cluster: Cluster) -> None:
    cli = Cli(cluster.bootstrap)
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
    assert cli.ok("topics", "describe", "--topic", topic, "--under-replicated-partitions") == ""
    out = cli.ok("cluster", "describe")
    assert f"Controller: {cluster.metadata().controller_id}" in out
    assert all(f"Broker: {b}  Host: 127.0.0.1:" in out for b in (1, 2, 3, 4))
    leader = cluster.leader(topic)
    victim = next(b for b in _replicas(cluster, topic) if b != leader and b != cluster.metadata().controller_id)
    cluster.brokers[victim].kill()
    try:
        wait_until(lambda: victim not in cluster.isr(topic), what="the dead follower out of the ISR")
        for flag in ("--under-replicated-partitions", "--under-min-isr-partitions"):
            out = cli.ok("topics", "describe", "--topic", topic, flag)
            assert out.startswith(f"\tTopic: {topic}\tPartition: 0\tLeader: {leader}") and "PartitionCount" not in out
        assert cli.ok("topics", "describe", "--topic", topic, "--unavailable-partitions") == ""
        assert cli.ok("topics", "describe", "--topic", topic, "--at-min-isr-partitions") == ""
        out = cli.ok("cluster", "describe")
        assert f"Topic: {topic}\tPartition: 0" in out and "Status: under-min-isr,under-replicated" in out
        assert f"Broker: {victim} " not in out
    finally:
        cluster.brokers[victim].start()
        wait_until(lambda: len(cluster.isr(topic)) == 3, timeout_s=40, what="the follower back in the ISR")
    assert cli.ok("topics", "describe", "--topic", topic, "--at-min-isr-partitions") != ""


# -- replication throttles ---------------------------------------------------------------------------------


def _topic_configs(cluster: Cluster, topic: str) -> dict[str, str]:
    res = ConfigResource("topic", topic)
    a = cluster.admin()  # kept alive until the future is answered
    entries = a.describe_configs([res])[res].result(timeout=20)
    return {k: e.value for k, e in entries.items() if e.value}


def test_a_throttled_reassignment_moves_at_the_throttle_rate_and_verify_clears_it(
        cluster: Cluster, admin: Any, tmp_path: Path) -> None:
    cli = Cli(cluster.bootstrap)
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    (source,) = _replicas(cluster, topic)
    # batches under the test cluster's 256 KiB segments (a larger batch is refused: RECORD_LIST_TOO_LARGE)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 100_000})
    chunk = b"z" * 1000
    for _ in range(5000):  # 5 MB
        p.produce(topic, value=chunk)
        p.poll(0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "w"})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 5000)
    c.close()
    target = [source, next(b for b in (1, 2, 3, 4) if b != source)]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]}))
    started = time.monotonic()
    out = cli.ok("reassign-partitions", "--execute", "--reassignment-json-file", str(plan), "--throttle", "1000000")
    assert "The inter-broker throttle limit was set to 1000000 B/s" in out
    configs = _topic_configs(cluster, topic)
    assert configs["leader.replication.throttled.replicas"] == f"0:{source}"
    assert configs["follower.replication.throttled.replicas"] == f"0:{target[1]}"
    r = cli("reassign-partitions", "--verify", "--reassignment-json-file", str(plan))
    assert r.returncode == 1 and "is still in progress" in r.stdout, "5 MB at 1 MB/s take seconds"
    wait_until(lambda: _settled(cluster, admin, topic, target), timeout_s=60, what="the throttled move done")
    took = time.monotonic() - started
    # the module's brokers measure over 2 windows of 1 s, so about 1 MB passes at once, the rest at 1 MB/s
    assert took >= 3.0, f"the throttled copy of 5 MB took only {took:.1f} s"
    out = cli.ok("reassign-partitions", "--verify", "--reassignment-json-file", str(plan))
    assert f"Clearing topic-level throttles on topic {topic}" in out and "Clearing broker-level throttles" in out
    configs = _topic_configs(cluster, topic)
    assert "leader.replication.throttled.replicas" not in configs
    assert "follower.replication.throttled.replicas" not in configs


def test_the_last_replica_in_controlled_shutdown_keeps_its_leadership_until_it_stops(
        cluster: Cluster, admin: Any) -> None:
    """With no other in-sync replica to move to, a leader in controlled shutdown keeps leading until it exits;
    the controller must not take the partition offline while the broker still runs and give it back at the next
    reconcile (a leader epoch flapping every few milliseconds)."""
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    controller = cluster.metadata().controller_id
    a, b = [x for x in (1, 2, 3, 4) if x != controller][:2]
    tp = KTopicPartition(topic, 0)
    assert admin.alter_partition_reassignments({tp: [a, b]}) == {tp: None}
    wait_until(lambda: _settled(cluster, admin, topic, [a, b]), timeout_s=30, what="the partition on a and b")
    if cluster.leader(topic) != a:
        c = cluster.admin()
        c.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(timeout=20)
        wait_until(lambda: cluster.leader(topic) == a, what="a leading")

    def epoch() -> int:
        (t,) = admin.describe_topics([topic])
        return int(t["partitions"][0]["leader_epoch"])

    before = epoch()
    try:
        assert cluster.brokers[b].stop() == 0
        wait_until(lambda: cluster.isr(topic) == [a], what="the follower out of the ISR")
        assert cluster.brokers[a].stop() == 0  # nowhere to move: it leads until it exits
    finally:
        for x in (a, b):
            if not cluster.brokers[x].running:
                cluster.brokers[x].start()
    wait_until(lambda: cluster.leader(topic) == a and len(cluster.isr(topic)) == 2, timeout_s=40,
               what="the partition back")
    # ISR shrink, offline when a stopped, a leading again: a handful of epochs, not hundreds
    assert epoch() - before <= 5, f"the leader epoch moved from {before} to {epoch()}"


def test_log_dirs_list_each_brokers_partitions(cluster: Cluster, admin: Any) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    replicas = _replicas(cluster, topic)
    _produce(cluster, topic, [b"d" * 100] * 50)
    wait_until(lambda: len(cluster.isr(topic)) == 2, what="both replicas in sync")
    described = admin.describe_log_dirs(topic_partitions={topic: [0]})
    sizes = {b["broker"]: [p["partition_size"] for d in b["log_dirs"] for t in d["topics"] for p in t["partitions"]]
             for b in described}
    assert sorted(sizes) == [1, 2, 3, 4]
    for b, found in sizes.items():
        assert (len(found) == 1 and found[0] > 5000) if b in replicas else found == [], (b, found)
    out = Cli(cluster.bootstrap).ok("log-dirs", "--describe", "--topic-list", topic, "--broker-list",
                                    ",".join(map(str, replicas)))
    head, received, body = out.splitlines()
    assert head == "Querying brokers for log directories information"
    assert received == f"Received log directory information from brokers {','.join(map(str, sorted(replicas)))}"
    doc = json.loads(body)
    assert doc["version"] == 1 and [b["broker"] for b in doc["brokers"]] == sorted(replicas)
    (d,) = doc["brokers"][0]["logDirs"]
    assert d["error"] is None and d["totalBytes"] > 0 and d["partitions"][0]["partition"] == f"{topic}-0"
