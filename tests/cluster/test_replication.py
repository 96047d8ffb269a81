"""Replication across a real 3-broker cluster on a real ZooKeeper, with real clients.

One ZooKeeper and one cluster per module; every test uses its own topics. Records are unique values so
that loss and duplication are visible; every wait is bounded.
"""

from __future__ import annotations

import os
import select
import signal
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.protocol import apis
from odradek.protocol.records import build_batch
from tests.broker.wire import API_VERSIONS_V, PRODUCE_V, Conn, produce_values
from tests.cluster.brokers import Cluster, running_cluster, wait_until
from tests.compat.clients import CLIENTS, Rec, make_client

pytestmark = pytest.mark.slow


cluster = pytest.fixture(scope="module")(running_cluster)


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def _producer(cluster: Cluster, **extra: object) -> Producer:
    conf: dict[str, object] = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                               "enable.idempotence": True, "message.timeout.ms": 60000,
                               "retry.backoff.ms": 50}
    conf.update(extra)
    return Producer(conf)


def _consume_all(cluster: Cluster, topic: str, partitions: int, expected: int,
                 timeout_s: float = 30.0) -> list[tuple[int, int, bytes]]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            out.append((msg.partition(), msg.offset(), msg.value()))
        return out
    finally:
        c.close()


def test_metadata_shows_every_broker_replica_and_isr(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    md = cluster.metadata()
    assert sorted(md.brokers) == [1, 2, 3]
    assert md.controller_id in (1, 2, 3)
    parts = md.topics[topic].partitions
    assert sorted(parts) == [0, 1, 2]
    for p in parts.values():
        assert sorted(p.replicas) == [1, 2, 3]
        assert sorted(p.isrs) == [1, 2, 3]
        assert p.leader in (1, 2, 3)
    assert len({p.leader for p in parts.values()}) == 3, "leaders spread over the brokers"


def test_replication_factor_larger_than_the_cluster_is_refused(cluster: Cluster) -> None:
    from confluent_kafka.admin import NewTopic

    topic = _topic()
    admin = cluster.admin()
    futures = admin.create_topics([NewTopic(topic, 1, 4)], operation_timeout=10)
    with pytest.raises(Exception, match=r"(?i)replication factor"):
        futures[topic].result(timeout=20)


def test_acks_all_records_are_on_every_replica_and_readable(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    p = _producer(cluster)
    acked: list[tuple[int, int, bytes]] = []

    def on_ack(err: object, msg: object) -> None:
        assert err is None, err
        acked.append((msg.partition(), msg.offset(), msg.value()))  # type: ignore[attr-defined]

    for i in range(2000):
        p.produce(topic, key=str(i % 7).encode(), value=f"v{i}".encode(), on_delivery=on_ack)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert len(acked) == 2000
    got = _consume_all(cluster, topic, 2, 2000)
    assert sorted(got) == sorted(acked)
    # every replica's log end reaches the same point: followers caught up (the ISR stays full)
    wait_until(lambda: all(len(cluster.isr(topic, q)) == 3 for q in range(2)), what="full ISR")


def _kill_leader_under_load(cluster: Cluster, topic: str) -> tuple[list[tuple[int, int, bytes]], int]:
    p = _producer(cluster)
    acked: list[tuple[int, int, bytes]] = []
    errors: list[object] = []

    def on_ack(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))  # type: ignore[attr-defined]

    leader = cluster.leader(topic)
    killed_at = None
    for i in range(4000):
        p.produce(topic, value=f"r{i}".encode(), on_delivery=on_ack)
        p.poll(0)
        if i == 1500:
            cluster.brokers[leader].kill()
            killed_at = i
        time.sleep(0.0005)
    assert p.flush(60) == 0
    assert killed_at is not None
    assert not errors, errors[:3]
    return acked, leader


def test_kill_9_of_the_leader_loses_no_acknowledged_record(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    acked, old_leader = _kill_leader_under_load(cluster, topic)
    new_leader = wait_until(lambda: cluster.leader(topic) not in (-1, old_leader) and cluster.leader(topic),
                            what="a new leader")
    assert new_leader != old_leader
    got = _consume_all(cluster, topic, 1, len(acked))
    offsets = [o for _, o, _ in sorted(got)]
    assert offsets == list(range(len(offsets))), "offsets are dense"
    assert sorted(got) == sorted(acked), "every acknowledged record once, at its acknowledged offset"
    # the old leader comes back as a follower, catches up and re-enters the ISR
    cluster.brokers[old_leader].start()
    wait_until(lambda: len(cluster.isr(topic)) == 3, timeout_s=40, what="the returning broker back in the ISR")
    assert cluster.leader(topic) == new_leader


def test_a_follower_down_leaves_the_isr_and_comes_back(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    leader = cluster.leader(topic)
    follower = next(b for b in (1, 2, 3) if b != leader)
    cluster.brokers[follower].kill()
    wait_until(lambda: follower not in cluster.isr(topic), what="the dead follower out of the ISR")
    p = _producer(cluster)
    for i in range(500):
        p.produce(topic, value=f"w{i}".encode())
    assert p.flush(30) == 0
    cluster.brokers[follower].start()
    wait_until(lambda: len(cluster.isr(topic)) == 3, timeout_s=40, what="the follower back in the ISR")
    assert len(_consume_all(cluster, topic, 1, 500)) == 500


def test_not_enough_replicas_for_acks_all(cluster: Cluster, tmp_path: Path) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
    leader = cluster.leader(topic)
    follower = next(b for b in (1, 2, 3) if b != leader)
    cluster.brokers[follower].kill()
    try:
        wait_until(lambda: len(cluster.isr(topic)) == 2, what="a smaller ISR")
        p = _producer(cluster, **{"enable.idempotence": False, "message.timeout.ms": 3000, "retries": 0})
        errors: list[object] = []
        p.produce(topic, value=b"x", on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        assert errors and errors[0] is not None and "NOT_ENOUGH_REPLICAS" in str(errors[0])
        p1 = _producer(cluster, **{"acks": "1", "enable.idempotence": False})
        p1.produce(topic, value=b"y")
        assert p1.flush(10) == 0, "acks=1 still works"
    finally:
        cluster.brokers[follower].start()
        wait_until(lambda: len(cluster.isr(topic)) == 3, timeout_s=40, what="full ISR again")


@pytest.mark.parametrize("client_name", CLIENTS)
def test_every_client_produces_and_consumes_across_a_leader_change(cluster: Cluster, client_name: str) -> None:
    """The same scenario with confluent-kafka, kafka-python and aiokafka: acks=all writes before and after the
    leader is stopped are all read back, in order, once each."""
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    client = make_client(client_name, cluster.bootstrap)
    try:
        producer = client.producer(acks=-1, idempotent=True)
        try:
            before = producer.send(topic, [Rec(f"{client_name}-b{i}".encode()) for i in range(100)])
            leader = cluster.leader(topic)
            cluster.brokers[leader].kill()
            try:
                after = producer.send(topic, [Rec(f"{client_name}-a{i}".encode()) for i in range(100)], timeout=60)
            finally:
                cluster.brokers[leader].start()
        finally:
            producer.close()
        assert [a.offset for a in before + after] == list(range(200))
        consumed = client.consume(topic, [0], count=200, timeout=60)
        assert [c.value for c in consumed] == [f"{client_name}-b{i}".encode() for i in range(100)] + [
            f"{client_name}-a{i}".encode() for i in range(100)]
    finally:
        client.close()
    wait_until(lambda: len(cluster.isr(topic)) == 3, timeout_s=40, what="the stopped broker back in the ISR")


def test_requests_behind_an_acks_all_wait_go_on_and_are_answered_in_order(cluster: Cluster) -> None:
    """A connection's next requests are appended while an acks=all produce waits for a follower; the
    responses still come back in request order."""
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    leader = cluster.brokers[cluster.leader(topic)]
    follower = next(b for i, b in cluster.brokers.items() if i != leader.broker_id)
    idempotent = build_batch([(None, b"b"), (None, b"c")], producer_id=9001, producer_epoch=0, base_sequence=0)
    with Conn(leader.address) as a, Conn(leader.address) as b:
        os.kill(follower.pid, signal.SIGSTOP)  # the high watermark cannot pass the first batch meanwhile
        try:
            first = a.send(apis.PRODUCE, PRODUCE_V, produce_values(topic, 0, build_batch([(None, b"a")]), acks=-1))
            second = a.send(apis.PRODUCE, PRODUCE_V, produce_values(topic, 0, idempotent, acks=1))
            third = a.send(apis.API_VERSIONS, API_VERSIONS_V, {"client_software_name": "t",
                                                                "client_software_version": "1"})

            def second_appended() -> bool:
                r = b.request(apis.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
                return any(s.producer_id == 9001 and s.last_sequence == 1
                           for s in r.topics[0].partitions[0].active_producers)

            wait_until(second_appended, timeout_s=2.5, what="the second request appended")
            assert not select.select([a.sock], [], [], 0)[0], "nothing answered before the acks=all produce"
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        got = [a.recv_response(apis.PRODUCE, PRODUCE_V), a.recv_response(apis.PRODUCE, PRODUCE_V),
               a.recv_response(apis.API_VERSIONS, API_VERSIONS_V)]
    assert [cid for cid, _ in got] == [first, second, third]
    answers = [r.responses[0].partition_responses[0] for _, r in got[:2]]
    assert [(int(p.error_code), int(p.base_offset)) for p in answers] == [(0, 0), (0, 1)]
    assert int(got[2][1].error_code) == 0


def test_an_acks_all_retry_of_a_batch_not_yet_replicated_waits_for_the_replication(cluster: Cluster) -> None:
    """A producer's retry (same producer id and sequence, e.g. after its connection broke) of a batch the leader
    already has but its followers do not yet: the leader finds it a duplicate and must answer it like the
    original, once the batch is replicated. Answering at once acknowledged records that a leader change then
    removed (found by the partition-tolerance suite: a lost acknowledged batch behind an OUT_OF_ORDER_SEQUENCE)."""
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=2, config={"min.insync.replicas": "2"})
    leader = cluster.brokers[cluster.leader(topic)]
    follower = cluster.brokers[next(r for r in cluster.partitions(topic)[0].replicas if r != leader.broker_id)]
    batch = build_batch([(None, b"once")], producer_id=9002, producer_epoch=0, base_sequence=0)
    with Conn(leader.address) as a, Conn(leader.address) as b:
        os.kill(follower.pid, signal.SIGSTOP)
        try:
            first = a.send(apis.PRODUCE, PRODUCE_V, produce_values(topic, 0, batch, acks=-1))
            retry = b.send(apis.PRODUCE, PRODUCE_V, produce_values(topic, 0, batch, acks=-1))
            assert not select.select([b.sock], [], [], 1.0)[0], "the retry was acknowledged before replication"
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        got = [a.recv_response(apis.PRODUCE, PRODUCE_V), b.recv_response(apis.PRODUCE, PRODUCE_V)]
    assert [cid for cid, _ in got] == [first, retry]
    answers = [r.responses[0].partition_responses[0] for _, r in got]
    assert [(int(p.error_code), int(p.base_offset)) for p in answers] == [(0, 0), (0, 0)]
    with Conn(leader.address) as c:
        r = c.request(apis.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert r.topics[0].partitions[0].offset == 1, "the batch is in the log once"
