"""Consumer groups and transactions on a real 3-broker cluster, across a coordinator's failover.

``__consumer_offsets`` and ``__transaction_state`` are replicated (factor 3 here); their coordinators move
with the leadership of their partitions. One ZooKeeper and one cluster per module.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from odradek.coordinator.group.records import partition_for
from tests.cluster.brokers import Cluster, running_cluster, wait_until

pytestmark = pytest.mark.slow

OFFSETS_PARTITIONS = 5  # offsets.topic.num.partitions in tests/cluster/brokers.py


cluster = pytest.fixture(scope="module")(running_cluster)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _fill(cluster: Cluster, topic: str, count: int) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        p.produce(topic, value=f"m{i}".encode())
    assert p.flush(30) == 0


def _consumer(cluster: Cluster, group: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {"bootstrap.servers": cluster.bootstrap, "group.id": group,
                               "auto.offset.reset": "earliest", "enable.auto.commit": False,
                               "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    conf.update(extra)
    return Consumer(conf)


def _poll(c: Consumer, want: int, timeout_s: float = 30.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    return got


def _commit(c: Consumer, timeout_s: float = 30.0) -> None:
    """Commit synchronously, retrying the coordinator's retriable refusals (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            c.commit(asynchronous=False)
            return
        except KafkaException as e:
            if time.monotonic() > deadline or not e.args[0].retriable():
                raise
            time.sleep(0.2)


def test_group_offsets_survive_the_coordinator_broker(cluster: Cluster) -> None:
    topic, group = _name("g"), _name("group")
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    _fill(cluster, topic, 200)
    c = _consumer(cluster, group)
    c.subscribe([topic])
    assert len(_poll(c, 200)) == 200
    _commit(c)
    c.close()
    coordinator = cluster.leader("__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS))
    cluster.brokers[coordinator].kill()
    try:
        wait_until(lambda: cluster.leader("__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS))
                   not in (-1, coordinator), what="a new group coordinator")
        _fill(cluster, topic, 50)
        c2 = _consumer(cluster, group)
        c2.subscribe([topic])
        got = _poll(c2, 50)
        assert sorted(got) == sorted(f"m{i}".encode() for i in range(50)), "resumed from the committed offsets"
        committed = c2.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
        assert sum(tp.offset for tp in committed) == 200, \
            f"committed offsets after the failover: {[(tp.partition, tp.offset, tp.error) for tp in committed]}"
        c2.close()
    finally:
        cluster.brokers[coordinator].start()
        wait_until(lambda: len(cluster.isr("__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS))) == 3,
                   timeout_s=40, what="full ISR of the offsets partition")


def test_transactions_commit_and_abort_across_brokers(cluster: Cluster) -> None:
    topic = _name("tx")
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": _name("tid"),
                  "transaction.timeout.ms": 20000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, key=str(i).encode(), value=f"c{i}".encode())
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, key=str(i).encode(), value=f"a{i}".encode())
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"last")
    p.commit_transaction(30)
    c = _consumer(cluster, _name("rc"), **{"isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, q, 0) for q in range(3)])
    got = _poll(c, 31, timeout_s=20)
    c.close()
    assert sorted(got) == sorted([f"c{i}".encode() for i in range(30)] + [b"last"])


def test_transactions_continue_after_the_transaction_coordinator_dies(cluster: Cluster) -> None:
    from odradek.coordinator.txn.records import partition_for as txn_partition_for

    topic, tid = _name("txf"), _name("tid")
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "transaction.timeout.ms": 20000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"one")
    p.commit_transaction(30)
    coordinator = cluster.leader("__transaction_state", txn_partition_for(tid, 5))
    cluster.brokers[coordinator].kill()
    try:
        wait_until(lambda: cluster.leader("__transaction_state", txn_partition_for(tid, 5)) not in (-1, coordinator),
                   what="a new transaction coordinator")
        p.begin_transaction()
        p.produce(topic, value=b"two")
        p.commit_transaction(60)
        c = _consumer(cluster, _name("rc"), **{"isolation.level": "read_committed"})
        c.assign([TopicPartition(topic, 0, 0)])
        got = _poll(c, 2, timeout_s=20)
        c.close()
        assert got == [b"one", b"two"]
    finally:
        cluster.brokers[coordinator].start()
        cluster.wait_for_brokers(3)
