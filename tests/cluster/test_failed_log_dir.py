"""A failed log directory in a 3-broker cluster, on a real full disk (a small tmpfs), as Kafka handles it.

Broker 1 has two ``log.dirs``: a 1 MiB tmpfs first (so the first partition it creates, and every other one,
lands there) and an ordinary directory. Filling the tmpfs through a partition that broker 1 *follows* fails
the directory: every replica in it goes offline on broker 1 (the followed one and one it *led*), the
controller moves the leadership away and takes broker 1 out of their ISRs, and broker 1 keeps serving the
partition in its healthy directory. Clients see only retriable errors; nothing acknowledged is lost. After the
repair (the tmpfs grown, broker 1 restarted) the replicas catch up and rejoin the ISRs.

A single broker whose only directory fails stops with exit code 1 and says why.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from odradek.cluster.zk.server import ZooKeeperServer
from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from tests.broker.process import BrokerProcess
from tests.broker.wire import Conn
from tests.cluster.brokers import Cluster, serving, wait_until
from tests.cluster.test_replication import _consume_all
from tests.cluster.zk_process import unique_chroot
from tests.storage.helpers import grow_tmpfs, tmpfs

pytestmark = pytest.mark.slow

MIN_ISR = {"min.insync.replicas": "2"}


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with tmpfs(tmp_path_factory.mktemp("disk") / "tiny", "1m") as mount:
        yield mount


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, disk: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("failed-dir")
    c = Cluster(base, unique_chroot(zookeeper))
    c.brokers[1].overrides.append(f"log.dirs={disk},{base / 'broker-1'}")
    yield from serving(c)


def _create(cluster: Cluster, name: str, replicas: list[int]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, -1, -1, replica_assignments={0: replicas}, topic_configs=MIN_ISR)])
    finally:
        admin.close()
    wait_until(lambda: cluster.partitions(name) and cluster.leader(name) == replicas[0]
               and len(cluster.isr(name)) == 3, what=f"{name} led by {replicas[0]} with a full ISR")


def _produce(cluster: Cluster, topic: str, values: list[bytes]) -> list[tuple[int, int, bytes]]:
    """Every value acknowledged (acks=all, idempotent): retriable errors on the way are the client's business."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 60000, "batch.size": 65536})
    acked: list[tuple[int, int, bytes]] = []
    errors: list[Any] = []

    def on_ack(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for v in values:
        p.produce(topic, value=v, on_delivery=on_ack)
        p.poll(0)
    assert p.flush(90) == 0
    assert not errors, errors
    return acked


def _dirs(broker_address: tuple[str, int], topics: list[str]) -> dict[str, tuple[int, list[str]]]:
    """DescribeLogDirs of one broker: log dir -> (error code, topics it holds of ``topics``)."""
    with Conn(broker_address) as conn:
        r = conn.request(apis.DESCRIBE_LOG_DIRS, 1, {"topics": None})
    return {d.log_dir: (d.error_code, sorted(t.name for t in d.topics if t.name in topics)) for d in r.results}


def _offline_replicas(cluster: Cluster, topic: str) -> list[int]:
    with Conn(cluster.brokers[2].address) as conn:
        r = conn.request(apis.METADATA, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                            "include_cluster_authorized_operations": False,
                                            "include_topic_authorized_operations": False})
    return sorted(r.topics[0].partitions[0].offline_replicas)


def test_a_full_log_directory_takes_only_its_replicas_offline(cluster: Cluster, disk: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    followed, led, healthy = f"followed-{tag}", f"led-{tag}", f"healthy-{tag}"
    _create(cluster, followed, [2, 1, 3])  # broker 1 follows it, in the tmpfs (its first log)
    _create(cluster, healthy, [1, 2, 3])  # broker 1 leads it, in the ordinary directory (then fewer logs)
    _create(cluster, led, [1, 3, 2])  # broker 1 leads it, in the tmpfs again
    b1 = cluster.brokers[1]
    placed = _dirs(b1.address, [followed, led, healthy])
    assert placed[str(disk)] == (ErrorCode.NONE, sorted([followed, led])), placed
    before_led = _produce(cluster, led, [f"led-{i}".encode() for i in range(20)])

    # fill the tmpfs through the partition broker 1 follows: its replica fetches hit ENOSPC
    values = [f"f-{i:05d}-".encode() + b"x" * 10_000 for i in range(200)]  # 2 MB, twice the disk
    acked = _produce(cluster, followed, values)
    assert len(acked) == len(values)
    b1.wait_for_log("log directory", "failed", "No space left on device", timeout=30)

    # the controller: broker 1 out of both ISRs, the leadership it had in the directory moved away
    wait_until(lambda: 1 not in cluster.isr(followed) and 1 not in cluster.isr(led)
               and cluster.leader(led) in (2, 3), timeout_s=30, what="broker 1 out of the failed replicas' ISRs")
    assert cluster.leader(followed) == 2
    assert _offline_replicas(cluster, led) == [1] and _offline_replicas(cluster, followed) == [1]
    # broker 1 keeps running and serving its healthy directory
    assert b1.running and cluster.leader(healthy) == 1 and 1 in cluster.isr(healthy)
    assert _dirs(b1.address, [healthy])[str(disk)][0] == ErrorCode.KAFKA_STORAGE_ERROR
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20000)
    try:  # Kafka's admin client sees the failed directory too
        described = {b["broker"]: b for b in admin.describe_log_dirs()}
        assert {d["log_dir"]: d["error_code"] for d in described[1]["log_dirs"]}[str(disk)] == \
            ErrorCode.KAFKA_STORAGE_ERROR
    finally:
        admin.close()
    more_led = _produce(cluster, led, [f"led-more-{i}".encode() for i in range(20)])
    more_healthy = _produce(cluster, healthy, [f"h-{i}".encode() for i in range(20)])
    assert {p for p, _, _ in more_healthy} == {0}

    # repaired: broker 1 restarts with a bigger disk; its replicas catch up and rejoin
    assert b1.stop() == 0
    grow_tmpfs(disk, "64m")
    b1.start()
    wait_until(lambda: 1 in cluster.isr(followed) and 1 in cluster.isr(led), timeout_s=60,
               what="broker 1's repaired replicas back in the ISRs")
    assert _dirs(b1.address, [followed, led])[str(disk)] == (ErrorCode.NONE, sorted([followed, led]))
    for topic, expected in ((followed, acked), (led, before_led + more_led)):
        read = _consume_all(cluster, topic, 1, len(expected))
        assert sorted(read) == sorted(expected), f"{topic}: acknowledged records lost or duplicated"


def test_a_broker_whose_every_log_directory_failed_stops(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "only", "512k") as only:
        broker = BrokerProcess(tmp_path / "unused", tmp_path / "broker.log", [f"log.dirs={only}"]).start()
        try:
            p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "message.timeout.ms": 10000,
                          "batch.size": 65536})
            for i in range(100):  # 1 MB, twice the disk
                p.produce("fills", value=f"{i}-".encode() + b"y" * 10_000)
                p.poll(0)
            p.flush(15)
            assert broker.wait(timeout=30) == 1
            assert "every log directory failed" in broker.log()
        finally:
            broker.kill()
