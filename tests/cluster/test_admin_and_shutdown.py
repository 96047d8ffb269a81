"""Topic administration through any broker of a real cluster, and controlled shutdown.

CreatePartitions, DeleteTopics and config changes go through ZooKeeper and the controller and reach every
broker; a broker stopped with SIGTERM first has the controller move its leaderships away.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

from odradek.protocol import apis
from tests.broker.wire import Conn, batch, ensure_topic, request_frame
from tests.cluster.brokers import Cluster, running_cluster, wait_until
from tests.compat.test_quotas import configs

pytestmark = pytest.mark.slow


cluster = pytest.fixture(scope="module")(running_cluster)


def _topic() -> str:
    return f"a-{uuid.uuid4().hex[:10]}"


def test_create_partitions_and_delete_topic_reach_every_broker(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    admin = cluster.admin()
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(timeout=30)
    wait_until(
        lambda: len(cluster.partitions(topic)) == 5 and all(p.leader >= 0 for p in cluster.partitions(topic).values()),
        what="5 partitions with leaders",
    )
    for p in cluster.partitions(topic).values():
        assert len(p.replicas) == 2
    dirs = lambda: [d for b in cluster.each() for d in b.data_dir.glob(f"{topic}-*")]  # noqa: E731
    wait_until(lambda: len(dirs()) == 10, what="10 replica logs on disk")
    admin.delete_topics([topic], operation_timeout=20)[topic].result(timeout=30)
    wait_until(lambda: topic not in cluster.metadata().topics, what="the topic gone from the metadata")
    wait_until(lambda: not dirs(), what="every replica's log deleted")


def test_topic_config_change_reaches_every_broker(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    admin = cluster.admin()
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=30)
    for b in cluster.each():
        single = type(admin)({"bootstrap.servers": f"127.0.0.1:{b.fixed_port}"})

        def value(single: object = single) -> bool:
            r = ConfigResource(ConfigResource.Type.TOPIC, topic)
            got = single.describe_configs([r])[r].result(timeout=10)  # type: ignore[attr-defined]
            return got["retention.ms"].value == "123456"

        wait_until(value, what=f"broker {b.broker_id} to see retention.ms=123456")


def test_a_topic_config_altered_through_one_broker_is_described_at_once_by_every_broker(cluster: Cluster) -> None:
    """Kafka's DescribeConfigs reads a topic's overrides from ZooKeeper: no broker answers with the value it had
    before its change notification arrived (what ``kafka-reassign-partitions --verify`` and scripts rely on)."""
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    brokers = list(cluster.each())
    admin = cluster.admin()
    for i in range(6):
        value = str(100_000 + i)
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(timeout=30)
        for b in brokers:  # each asked on its own connection, at once
            with Conn(b.address) as conn:
                response = conn.request(apis.DESCRIBE_CONFIGS, 1, {"resources": [
                    {"resource_type": 2, "resource_name": topic, "configuration_keys": ["retention.ms"]}],
                    "include_synonyms": False})
            (got,) = [c.value for c in response.results[0].configs]
            assert got == value, f"broker {b.broker_id} described retention.ms={got} right after it was set to {value}"


def test_client_quota_set_on_one_broker_applies_on_every_broker(cluster: Cluster) -> None:
    """AlterClientQuotas on one broker lands in ZooKeeper (/config/clients) and every broker applies it: each
    describes it and throttles the client."""
    client_id = f"q-{uuid.uuid4().hex[:6]}"
    brokers = list(cluster.each())
    configs(brokers[0], "alter", "--entity-type", "clients", "--entity-name", client_id,
            "--add-config", "producer_byte_rate=1024")
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    leader = cluster.leader(topic)
    for b in brokers:
        wait_until(lambda b=b: _quotas_on(b.fixed_port, client_id) == {"producer_byte_rate": 1024.0},
                   what=f"broker {b.broker_id} to describe the quota")
    (lead,) = [b for b in brokers if b.broker_id == leader]
    with Conn(("127.0.0.1", lead.fixed_port)) as c:
        ensure_topic(c, topic)
        values = {"transactional_id": None, "acks": 1, "timeout": 10_000,
                  "topic_data": [{"name": topic, "partition_data": [{"index": 0,
                                                                     "records": batch(*[b"z" * 1000] * 64)}]}]}
        c.send_raw(request_frame(0, 9, c.next_id(), values, client_id=client_id))
        _, r = c.recv_response(0, 9)
    assert r.throttle_time.total_seconds() > 0
    configs(brokers[1], "alter", "--entity-type", "clients", "--entity-name", client_id,
            "--delete-config", "producer_byte_rate")
    for b in brokers:
        wait_until(lambda b=b: _quotas_on(b.fixed_port, client_id) == {}, what=f"broker {b.broker_id} to drop it")


def _quotas_on(port: int, client_id: str) -> dict[str, float]:
    """What DescribeClientQuotas answers on one broker for a client-id."""
    with Conn(("127.0.0.1", port)) as c:
        r = c.request(48, 1, {"components": [{"entity_type": "client-id", "match_type": 0, "match": client_id}],
                              "strict": True})
    assert r.error_code == 0
    return {v.key: v.value for e in r.entries or () for v in e.values}


def test_controlled_shutdown_moves_leadership_before_stopping(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    leader = cluster.leader(topic)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 1})
    acks: list[float] = []
    errors: list[object] = []
    stop = threading.Event()

    def on_ack(err: object, _msg: object) -> None:
        if err is None:
            acks.append(time.monotonic())
        else:
            errors.append(err)

    def produce() -> None:
        i = 0
        while not stop.is_set() and i < 20000:
            p.produce(topic, value=f"c{i}".encode(), on_delivery=on_ack)
            p.poll(0.002)
            i += 1

    t = threading.Thread(target=produce)
    t.start()
    try:
        wait_until(lambda: len(acks) > 200, what="writes flowing")
        assert cluster.brokers[leader].stop() == 0
        wait_until(lambda: cluster.leader(topic) not in (-1, leader), what="a new leader")
        n = len(acks)
        wait_until(lambda: len(acks) > n + 200, what="writes flowing again")
    finally:
        stop.set()
        t.join(30)
        p.flush(30)
    assert not errors, errors[:3]
    log = cluster.brokers[leader].log()
    assert "controlled shutdown" in log
    gaps = [b - a for a, b in itertools.pairwise(acks)]
    assert max(gaps) < 5.0, f"longest gap between acknowledged writes: {max(gaps):.2f} s"
    cluster.brokers[leader].start()
    wait_until(lambda: len(cluster.isr(topic)) == 3, timeout_s=40, what="the broker back in the ISR")


def test_manual_replica_assignment(cluster: Cluster) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    topic = _topic()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([KpNewTopic(topic, -1, -1, replica_assignments={0: [2, 3], 1: [3, 1]})])
        wait_until(lambda: len(cluster.partitions(topic)) == 2 and all(p.leader >= 0 for p in
                                                                      cluster.partitions(topic).values()),
                   what="leaders for the manually assigned partitions")
        parts = cluster.partitions(topic)
        assert list(parts[0].replicas) == [2, 3] and parts[0].leader == 2
        assert list(parts[1].replicas) == [3, 1] and parts[1].leader == 3
        with pytest.raises(Exception, match=r"(?i)invalid.*replica.*assignment"):
            admin.create_topics([KpNewTopic(_topic(), -1, -1, replica_assignments={0: [1, 9]})])
    finally:
        admin.close()


def _alter_cluster_default(cluster: Cluster, configs: dict[str, str]) -> None:
    """AlterConfigs on the BROKER resource "" (the cluster default) sent with the broker's own protocol client:
    librdkafka and kafka-python both refuse an empty broker name client-side."""
    import asyncio

    from odradek.client.connection import BrokerConnection
    from odradek.protocol import apis

    async def send() -> int:
        conn = BrokerConnection("127.0.0.1", cluster.brokers[1].fixed_port)
        await conn.connect()
        try:
            request = {"resources": [{"resource_type": 4, "resource_name": "",
                                      "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                       "validate_only": False}
            response = await conn.send(apis.ALTER_CONFIGS, request)
            return int(response.responses[0].error_code)
        finally:
            await conn.close()
    assert asyncio.run(send()) == 0


def test_dynamic_cluster_default_reaches_every_broker(cluster: Cluster) -> None:
    """A cluster-wide dynamic broker config (``/config/brokers/<default>``) becomes every topic's default."""
    topic = _topic()
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    _alter_cluster_default(cluster, {"log.retention.ms": "7654321"})
    try:
        for b in cluster.each():
            single = cluster.admin().__class__({"bootstrap.servers": f"127.0.0.1:{b.fixed_port}"})

            def value(single: object = single) -> bool:
                r = ConfigResource(ConfigResource.Type.TOPIC, topic)
                got = single.describe_configs([r])[r].result(timeout=10)  # type: ignore[attr-defined]
                return got["retention.ms"].value == "7654321"
            wait_until(value, what=f"broker {b.broker_id} to apply the cluster default")
    finally:
        _alter_cluster_default(cluster, {})
