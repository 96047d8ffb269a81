"""kafka-python's KafkaAdminClient against a real ``odradek serve`` process: every admin API the
broker implements (CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, DescribeCluster, DeleteRecords), their results and their error paths as
the client library surfaces them (exceptions, error strings)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as Errors
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from tests.compat.conftest import BrokerProcess, running_broker

TIMEOUT_MS = 15000


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT_MS)
    try:
        yield client
    finally:
        client.close()


def topic_configs(admin: KafkaAdminClient, topic: str, synonyms: bool = False) -> dict[str, dict[str, Any]]:
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all",
                                       include_synonyms=synonyms)
    return described["topic"][topic]


def partitions_of(admin: KafkaAdminClient, topic: str) -> int:
    (described,) = admin.describe_topics([topic])
    assert described["error_code"] == 0, described
    return len(described["partitions"])


def test_describe_cluster(admin: KafkaAdminClient, broker: BrokerProcess) -> None:
    cluster = admin.describe_cluster()
    assert cluster["controller_id"] == 1
    assert cluster["cluster_id"]
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(1, "127.0.0.1", broker.port)]


def test_topic_configs_lifecycle(admin: KafkaAdminClient, topic_name: str) -> None:
    result = admin.create_topics(
        {topic_name: {"num_partitions": 2, "replication_factor": 1,
                      "configs": {"retention.ms": "3600000", "max.message.bytes": "300000"}}},
        timeout_ms=TIMEOUT_MS)
    (created,) = result["topics"]
    assert (created["name"], created["error_code"]) == (topic_name, 0)
    assert partitions_of(admin, topic_name) == 2

    configs = topic_configs(admin, topic_name, synonyms=True)
    assert configs["retention.ms"]["value"] == "3600000"
    assert [(x["name"], x["source"]) for x in configs["retention.ms"]["synonyms"]] == [
        ("retention.ms", "DYNAMIC_TOPIC_CONFIG"), ("log.retention.hours", "DEFAULT_CONFIG")]
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["segment.bytes"]["config_source"] == "STATIC_BROKER_CONFIG"  # log.segment.bytes override
    assert configs["flush.ms"]["config_source"] == "DEFAULT_CONFIG"

    resource = ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": "7200000"})
    assert admin.alter_configs([resource], incremental=True) == {"topic": {topic_name: "OK"}}
    configs = topic_configs(admin, topic_name)
    assert configs["retention.ms"]["value"] == "7200000"
    assert configs["max.message.bytes"]["value"] == "300000"  # incremental: other overrides stay

    delete = ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": ("DELETE", None)})
    assert admin.alter_configs([delete], incremental=True) == {"topic": {topic_name: "OK"}}
    assert topic_configs(admin, topic_name)["retention.ms"]["config_source"] != "DYNAMIC_TOPIC_CONFIG"

    legacy = ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"segment.ms": "600000"})
    assert admin.alter_configs([legacy], incremental=False, raise_on_unknown=False) == {"topic": {topic_name: "OK"}}
    configs = topic_configs(admin, topic_name)
    assert configs["segment.ms"]["value"] == "600000"

    bad = ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": "soon"})
    outcome = admin.alter_configs([bad], incremental=True)["topic"][topic_name]
    assert "InvalidConfiguration" in outcome and "soon" in outcome
    assert topic_configs(admin, topic_name)["retention.ms"]["value"] != "soon"

    validate = ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"segment.ms": "700000"})
    assert admin.alter_configs([validate], validate_only=True, incremental=True) == {"topic": {topic_name: "OK"}}
    assert topic_configs(admin, topic_name)["segment.ms"]["value"] == "600000"

    admin.delete_topics([topic_name], timeout_ms=TIMEOUT_MS)
    assert topic_name not in admin.list_topics()


def test_create_topics_errors_and_validate_only(admin: KafkaAdminClient, topic_name: str) -> None:
    admin.create_topics({topic_name: {}}, timeout_ms=TIMEOUT_MS)  # broker defaults (-1, -1)
    assert partitions_of(admin, topic_name) == 1

    with pytest.raises(Errors.TopicAlreadyExistsError):
        admin.create_topics({topic_name: {"num_partitions": 1, "replication_factor": 1}}, timeout_ms=TIMEOUT_MS)
    with pytest.raises(Errors.InvalidReplicationFactorError):
        admin.create_topics({f"{topic_name}-rf": {"num_partitions": 1, "replication_factor": 3}})
    with pytest.raises(Errors.InvalidConfigurationError):
        admin.create_topics({f"{topic_name}-cfg": {"configs": {"retention.ms": "soon"}}})
    with pytest.raises(Errors.InvalidReplicationAssignmentError):
        admin.create_topics({f"{topic_name}-asg": {"assignments": {0: [7]}}})

    dry = f"{topic_name}-dry"
    result = admin.create_topics({dry: {"num_partitions": 3, "replication_factor": 1}}, validate_only=True)
    assert result["topics"][0]["error_code"] == 0
    assert dry not in admin.list_topics()

    manual = f"{topic_name}-manual"
    admin.create_topics({manual: {"assignments": {0: [1], 1: [1]}}})
    assert partitions_of(admin, manual) == 2

    admin.delete_topics([topic_name, manual])
    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        admin.delete_topics([topic_name])


def test_create_partitions(admin: KafkaAdminClient, topic_name: str) -> None:
    admin.create_topics({topic_name: {"num_partitions": 2, "replication_factor": 1}})
    admin.create_partitions({topic_name: 4}, timeout_ms=TIMEOUT_MS)
    assert partitions_of(admin, topic_name) == 4
    admin.create_partitions({topic_name: 6}, validate_only=True)
    assert partitions_of(admin, topic_name) == 4
    with pytest.raises(Errors.InvalidPartitionsError):
        admin.create_partitions({topic_name: 3})
    with pytest.raises(Errors.InvalidReplicationAssignmentError):
        admin.create_partitions({topic_name: {"count": 5, "assignments": [[9]]}})
    admin.create_partitions({topic_name: {"count": 5, "assignments": [[1]]}})
    assert partitions_of(admin, topic_name) == 5
    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        admin.create_partitions({f"{topic_name}-missing": 2})
    admin.delete_topics([topic_name])


def test_delete_records(admin: KafkaAdminClient, broker: BrokerProcess, topic_name: str) -> None:
    admin.create_topics({topic_name: {"num_partitions": 1, "replication_factor": 1}})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks=1,
                             request_timeout_ms=TIMEOUT_MS)
    try:
        for i in range(10):
            producer.send(topic_name, value=f"v{i}".encode(), partition=0)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    tp = TopicPartition(topic_name, 0)
    result = admin.delete_records({tp: 4}, timeout_ms=TIMEOUT_MS)
    assert result[tp]["low_watermark"] == 4 and result[tp]["error_code"] == 0
    result = admin.delete_records({tp: -1})  # up to the high watermark
    assert result[tp]["low_watermark"] == 10

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             request_timeout_ms=10000)
    try:
        assert consumer.beginning_offsets([tp], timeout_ms=10000) == {tp: 10}
    finally:
        consumer.close()
    with pytest.raises(Errors.OffsetOutOfRangeError):
        admin.delete_records({tp: 11})
    admin.delete_topics([topic_name])


def test_broker_configs_static_keys_are_read_only(admin: KafkaAdminClient) -> None:
    described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
    configs = described["broker"]["1"]
    assert configs["log.segment.bytes"]["value"] == str(64 * 1024)
    assert configs["log.segment.bytes"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert configs["log.segment.bytes"]["read_only"] is False  # a topic default: dynamic, as in Kafka
    assert configs["listeners"]["read_only"] is True  # the process's own layout: server.properties only
    assert configs["delete.topic.enable"]["config_source"] == "DEFAULT_CONFIG"

    change = ConfigResource(ConfigResourceType.BROKER, "1", configs={"listeners": "PLAINTEXT://127.0.0.1:1"})
    for incremental in (True, False):
        outcome = admin.alter_configs([change], incremental=incremental, raise_on_unknown=False)
        assert "InvalidRequest" in outcome["broker"]["1"] and "server.properties" in outcome["broker"]["1"]


def test_topic_deletion_disabled(tmp_path: Path, topic_name: str) -> None:
    with running_broker(tmp_path, {"delete.topic.enable": "false"}) as b:
        client = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=TIMEOUT_MS)
        try:
            client.create_topics({topic_name: {"num_partitions": 1, "replication_factor": 1}})
            with pytest.raises(Errors.TopicDeletionDisabledError):
                client.delete_topics([topic_name])
            assert topic_name in client.list_topics()
        finally:
            client.close()
