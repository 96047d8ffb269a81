"""Fetching from the closest replica (KIP-392) on a 3-broker cluster with racks r1, r2, r3 and Kafka's
RackAwareReplicaSelector: the leader names a follower in the client's rack, the follower serves consumers up to
its high watermark, and a real client with ``client.rack`` reads everything."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.cluster.zk.server import ZooKeeperServer
from odradek.protocol import apis
from tests.broker.wire import Conn
from tests.cluster.brokers import Cluster, serving, wait_until
from tests.cluster.zk_process import unique_chroot

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
FETCH_V = 12


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("racks"), unique_chroot(zookeeper),
                overrides=[f"replica.selector.class={SELECTOR}"])
    for i, b in c.brokers.items():
        b.overrides.append(f"broker.rack=r{i}")
    yield from serving(c)


def _fetch(conn: Conn, topic: str, rack: str, offset: int = 0) -> object:
    r = conn.request(apis.FETCH, FETCH_V, {
        "replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": rack, "forgotten_topics_data": [],
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                    "fetch_offset": offset, "log_start_offset": -1,
                                                    "partition_max_bytes": 1 << 20}]}]})
    return r.responses[0].partitions[0]


def test_the_leader_sends_a_client_to_a_follower_in_its_rack(cluster: Cluster) -> None:
    topic = f"rack-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        p.produce(topic, value=f"v{i}".encode())
    assert p.flush(20) == 0
    leader = cluster.leader(topic)
    follower = next(b for b in (1, 2, 3) if b != leader)
    with Conn(cluster.brokers[leader].address) as conn:
        same = _fetch(conn, topic, f"r{leader}")
        assert same.preferred_read_replica == -1 and same.records  # the client is in the leader's rack
        other = _fetch(conn, topic, f"r{follower}")
        assert other.preferred_read_replica == follower and not other.records
        assert _fetch(conn, topic, "elsewhere").records, "no replica in that rack: the leader serves"
    with Conn(cluster.brokers[follower].address) as conn:
        def served() -> object:
            pd = _fetch(conn, topic, f"r{follower}")
            return pd if pd.high_watermark == 100 and pd.records else None
        pd = wait_until(served, what="the follower serving up to its high watermark")
        assert int(pd.error_code) == 0
    with Conn(cluster.brokers[follower].address) as conn:  # before v11 a follower refuses consumers
        r = conn.request(apis.FETCH, 10, {
            "replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]})
        assert int(r.responses[0].partitions[0].error_code) == 6  # NOT_LEADER_OR_FOLLOWER


def test_a_consumer_with_client_rack_reads_everything(cluster: Cluster) -> None:
    topic = f"rack-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(1000):
        p.produce(topic, value=f"c{i}".encode())
    assert p.flush(20) == 0
    leader = cluster.leader(topic)
    rack = f"r{next(b for b in (1, 2, 3) if b != leader)}"
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "client.rack": rack, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 1000 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert got == [f"c{i}".encode() for i in range(1000)]
    finally:
        c.close()
