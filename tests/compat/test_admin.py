"""Each client's own admin API: create/describe/delete topics, describe/alter configs, create partitions."""

from __future__ import annotations

import os
import time

import pytest

from tests.compat.clients import Ack, Client, ProduceError, Rec
from tests.compat.conftest import BrokerProcess

pytestmark = pytest.mark.slow  # a real broker process and real clients

DEFAULT_MAX_MESSAGE_BYTES = str(1024 * 1024 + 12)


def test_topic_lifecycle(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    client.create_topic(topic_name, 2, {"retention.ms": "3600000", "max.message.bytes": "300000"})
    assert topic_name in client.list_topics()
    assert client.describe_topic(topic_name) == 2

    with pytest.raises(Exception) as info:
        client.create_topic(topic_name, 2)
    assert client.is_topic_exists(info.value), repr(info.value)

    configs = client.describe_configs(topic_name)
    assert configs["retention.ms"] == "3600000"
    assert configs["max.message.bytes"] == "300000"
    assert configs["segment.bytes"] == str(64 * 1024)  # the broker's log.segment.bytes override
    assert configs["cleanup.policy"] == "delete"

    client.alter_configs(topic_name, {"retention.ms": "7200000"})
    configs = client.describe_configs(topic_name)
    assert configs["retention.ms"] == "7200000"
    # IncrementalAlterConfigs keeps the other overrides; AlterConfigs replaces the whole set.
    assert configs["max.message.bytes"] == ("300000" if client.incremental_alter else DEFAULT_MAX_MESSAGE_BYTES)

    client.create_partitions(topic_name, 5)
    assert client.describe_topic(topic_name) == 5
    acks = client.produce(topic_name, [Rec(value=b"to the new partition", partition=4)])
    assert [(a.partition, a.offset) for a in acks] == [(4, 0)]
    got = client.consume(topic_name, [4], count=1)
    assert [g.value for g in got] == [b"to the new partition"]

    client.delete_topic(topic_name)
    assert topic_name not in client.list_topics()


def test_create_topic_with_defaults_and_delete(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    names = [f"{topic_name}-{i}" for i in range(3)]
    for n in names:
        client.create_topic(n, 1)
    assert set(names) <= client.list_topics()
    client.delete_topic(names[1])
    remaining = client.list_topics()
    assert names[0] in remaining and names[2] in remaining and names[1] not in remaining
    # A re-created topic starts empty.
    client.produce(names[0], [Rec(value=b"old")])
    client.delete_topic(names[0])
    client.create_topic(names[0], 1)
    assert client.earliest_latest(names[0], [0]) == ({0: 0}, {0: 0})


def test_admin_errors(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    """Broker error codes surface as each client's own errors."""
    client.create_topic(topic_name, 2)

    def code_of(fn, *args) -> int | None:  # type: ignore[no-untyped-def]
        with pytest.raises(Exception) as info:
            fn(*args)
        return client.error_code(info.value)

    assert code_of(client.create_topic, topic_name, 3) == 36  # TOPIC_ALREADY_EXISTS
    assert code_of(client.create_topic, f"{topic_name}-x", 1, {"retention.ms": "soon"}) == 40  # INVALID_CONFIG
    assert code_of(client.create_topic, f"{topic_name}-y", 1, {"no.such.config": "1"}) == 40
    assert f"{topic_name}-x" not in client.list_topics()
    assert code_of(client.create_partitions, topic_name, 1) == 37  # INVALID_PARTITIONS
    assert code_of(client.delete_topic, f"{topic_name}-missing") == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert code_of(client.alter_configs, topic_name, {"retention.ms": "soon"}) == 40
    assert client.describe_configs(topic_name)["retention.ms"] == str(7 * 24 * 3600 * 1000)
    assert client.describe_topic(topic_name) == 2


def test_describe_cluster(client: Client, broker: BrokerProcess) -> None:
    cluster_id, brokers, controller = client.describe_cluster()
    assert cluster_id
    assert brokers == [(1, "127.0.0.1", broker.port)]
    assert controller == 1


def test_altered_configs_apply_to_the_live_topic(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    """A config change through the client's admin API governs the very next produce."""
    base = {"segment.bytes": str(1 << 20)}  # repeated in every change: AlterConfigs replaces the whole set
    client.create_topic(topic_name, 1, {**base, "max.message.bytes": "100000"})
    big = Rec(key=b"big", value=os.urandom(150_000))
    with pytest.raises(ProduceError) as info:
        client.produce(topic_name, [big])
    assert client.is_message_too_large(info.value.cause), repr(info.value.cause)

    client.alter_configs(topic_name, {**base, "max.message.bytes": "300000"})
    assert client.produce(topic_name, [big]) == [Ack(0, 0)]

    client.alter_configs(topic_name, {**base, "max.message.bytes": "300000", "message.timestamp.type": "LogAppendTime"})
    client.produce(topic_name, [Rec(value=b"stamped by the broker", timestamp=1_000_000_000_000)])
    got = client.consume(topic_name, [0], count=2)
    assert [g.value for g in got] == [big.value, b"stamped by the broker"]
    assert got[0].create_time and not got[1].create_time
    assert abs(got[1].timestamp - time.time() * 1000) < 60_000


def test_altered_segment_bytes_applies_to_the_active_segment(client: Client, broker: BrokerProcess,
                                                             topic_name: str) -> None:
    """As in Kafka, a lower segment.bytes rolls the active segment at the next append."""
    client.create_topic(topic_name, 1, {"segment.bytes": str(1 << 20)})
    for _ in range(20):
        client.produce(topic_name, [Rec(value=os.urandom(10_000))])
    client.alter_configs(topic_name, {"segment.bytes": "65536"})
    for _ in range(20):
        client.produce(topic_name, [Rec(value=os.urandom(10_000))])
    segments = sorted((broker.data_dir / f"{topic_name}-0").glob("*.log"), key=lambda p: int(p.stem))
    sizes = [p.stat().st_size for p in segments]
    assert sizes[0] > 150_000, sizes  # written under segment.bytes=1 MiB
    assert len(sizes) >= 4 and all(s <= 65536 for s in sizes[1:]), sizes
    _, latest = client.earliest_latest(topic_name, [0])
    assert latest == {0: 40}


def test_dynamic_broker_configs_with_confluent_admin(own_broker: BrokerProcess) -> None:
    """confluent-kafka's AdminClient changes topic defaults at runtime, per broker and cluster-wide."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        NewTopic,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})

    def alter(name: str, **configs: str) -> None:
        entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in configs.items()]
        for fut in admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, name,
                                                                   incremental_configs=entries)]).values():
            fut.result(timeout=30)

    def describe(resource_type: ResourceType, name: str) -> dict:  # type: ignore[type-arg]
        (fut,) = admin.describe_configs([ConfigResource(resource_type, name)]).values()
        return fut.result(timeout=30)

    # librdkafka refuses an empty resource name (the cluster default) client-side: per-broker only here
    alter("1", log_retention_ms="5000", log_segment_bytes="100000")
    broker_configs = describe(ResourceType.BROKER, "1")
    segment = broker_configs["log.segment.bytes"]
    assert (segment.value, segment.source, segment.is_read_only) == (
        "100000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert broker_configs["listeners"].is_read_only

    admin.create_topics([NewTopic("dyn", 1, 1)])["dyn"].result(timeout=30)
    topic_configs = describe(ResourceType.TOPIC, "dyn")
    assert (topic_configs["retention.ms"].value, topic_configs["retention.ms"].source) == (
        "5000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert topic_configs["segment.bytes"].value == "100000"

    with pytest.raises(KafkaException) as info:
        alter("1", listeners="PLAINTEXT://127.0.0.1:1")
    assert info.value.args[0].code() == 42  # INVALID_REQUEST: read-only, set it in server.properties
    with pytest.raises(KafkaException) as info:
        alter("1", log_segment_bytes="1")
    assert info.value.args[0].code() == 40  # INVALID_CONFIG

    own_broker.restart()  # persisted in the metadata document
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    assert describe(ResourceType.TOPIC, "dyn")["retention.ms"].value == "5000"
    assert describe(ResourceType.BROKER, "1")["log.segment.bytes"].value == "100000"
