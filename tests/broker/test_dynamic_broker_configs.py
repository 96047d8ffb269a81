"""Dynamic broker configs: AlterConfigs/IncrementalAlterConfigs on BROKER resources ("" and "1").

The keys that set topic defaults can change at runtime, per broker or as the cluster-wide default;
precedence is topic override > per-broker > cluster default > server.properties > built-in default.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.cluster.metadata import METADATA_FILE
from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from odradek.storage.config import HOURS
from tests.broker.test_admin_handlers import Node, alter_configs, describe_configs, incremental, versions

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
BROKER, TOPIC = 4, 2
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def node(data: Path) -> Iterator[Node]:
    n = Node(data, **{"log.retention.hours": "24"})
    try:
        yield n
    finally:
        n.broker.stop()


def ok(r: Any) -> None:
    assert [(x.error_code, x.error_message) for x in r.responses] == [(ErrorCode.NONE, None)] * len(r.responses)


def topic_config(node: Node, topic: str, key: str) -> Any:
    r = describe_configs(node, 4, (TOPIC, topic, [key]), synonyms=True)
    (c,) = r.results[0].configs
    return c


def broker_config(node: Node, name: str, key: str) -> Any:
    r = describe_configs(node, 4, (BROKER, name, [key]), synonyms=True)
    assert r.results[0].error_code == ErrorCode.NONE
    configs = r.results[0].configs
    return configs[0] if configs else None


@pytest.mark.parametrize("version", versions(apis.INCREMENTAL_ALTER_CONFIGS))
def test_set_and_delete_at_both_levels_with_precedence(node: Node, version: int) -> None:
    node.create("plain")
    node.create("tuned", retention_ms="1000")
    log = node.broker.get_log("plain", 0)
    assert log.config.retention_ms == 24 * HOURS  # server.properties

    ok(incremental(node, version, (BROKER, "", [("log.retention.ms", SET, "5000")])))
    assert node.broker.dynamic_broker_configs("") == {"log.retention.ms": "5000"}
    assert log.config.retention_ms == 5000
    c = topic_config(node, "plain", "retention.ms")
    assert (c.value, c.config_source) == ("5000", DYNAMIC_DEFAULT)
    assert [(s.name, s.value, s.source) for s in c.synonyms] == [
        ("log.retention.ms", "5000", DYNAMIC_DEFAULT), ("log.retention.hours", "24", STATIC),
        ("log.retention.hours", "168", DEFAULT)]

    ok(incremental(node, version, (BROKER, "1", [("log.retention.ms", SET, "7000")])))
    assert log.config.retention_ms == 7000
    c = topic_config(node, "plain", "retention.ms")
    assert (c.value, c.config_source) == ("7000", DYNAMIC_BROKER)
    assert [(s.value, s.source) for s in c.synonyms][:2] == [("7000", DYNAMIC_BROKER), ("5000", DYNAMIC_DEFAULT)]

    # a topic override wins over both
    assert node.broker.get_log("tuned", 0).config.retention_ms == 1000
    c = topic_config(node, "tuned", "retention.ms")
    assert (c.value, c.config_source) == ("1000", DYNAMIC_TOPIC)
    assert [s.source for s in c.synonyms] == [DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT]

    # broker describe: per-broker level first; "" lists the cluster defaults only
    b = broker_config(node, "1", "log.retention.ms")
    assert (b.value, b.config_source, b.read_only) == ("7000", DYNAMIC_BROKER, False)
    assert [(s.value, s.source) for s in b.synonyms] == [("7000", DYNAMIC_BROKER), ("5000", DYNAMIC_DEFAULT)]
    r = describe_configs(node, 4, (BROKER, "", None), synonyms=True)
    assert [(c.name, c.value, c.config_source, c.read_only) for c in r.results[0].configs] == [
        ("log.retention.ms", "5000", DYNAMIC_DEFAULT, False)]
    assert [s.source for s in r.results[0].configs[0].synonyms] == [DYNAMIC_DEFAULT]

    ok(incremental(node, version, (BROKER, "1", [("log.retention.ms", DELETE, None)])))
    assert log.config.retention_ms == 5000
    ok(incremental(node, version, (BROKER, "", [("log.retention.ms", DELETE, None)])))
    assert log.config.retention_ms == 24 * HOURS
    assert node.broker.dynamic_broker_configs("") == node.broker.dynamic_broker_configs("1") == {}
    c = topic_config(node, "plain", "retention.ms")
    assert (c.value, c.config_source) == (str(24 * HOURS), STATIC)
    assert broker_config(node, "", "log.retention.ms") is None


def test_minutes_and_hours_keys_follow_kafka_precedence(node: Node) -> None:
    node.create("t")
    ok(incremental(node, 0, (BROKER, "", [("log.retention.minutes", SET, "3")])))
    assert node.broker.get_log("t", 0).config.retention_ms == 3 * 60_000  # minutes beat the static hours
    ok(incremental(node, 0, (BROKER, "1", [("log.roll.hours", SET, "2")])))
    assert node.broker.get_log("t", 0).config.segment_ms == 2 * HOURS
    c = topic_config(node, "t", "segment.ms")
    assert (c.value, c.config_source) == (str(2 * HOURS), DYNAMIC_BROKER)


@pytest.mark.parametrize("version", versions(apis.ALTER_CONFIGS))
def test_alter_configs_replaces_the_dynamic_set(node: Node, version: int) -> None:
    node.create("t")
    ok(alter_configs(node, version, (BROKER, "1", {"log.segment.bytes": "200000", "message.max.bytes": "5000"})))
    lg = node.broker.get_log("t", 0)
    assert (lg.config.segment_bytes, lg.config.max_message_bytes) == (200000, 5000)
    ok(alter_configs(node, version, (BROKER, "1", {"log.segment.bytes": "300000"})))
    assert node.broker.dynamic_broker_configs("1") == {"log.segment.bytes": "300000"}
    assert (lg.config.segment_bytes, lg.config.max_message_bytes) == (300000, 1024 * 1024 + 12)
    ok(alter_configs(node, version, (BROKER, "1", {})))
    assert node.broker.dynamic_broker_configs("1") == {}
    assert lg.config.segment_bytes == 1024**3


def test_list_key_append_and_subtract(node: Node) -> None:
    # APPEND of a value already there is a no-op; SUBTRACT of the only one empties the list, which is invalid
    ok(incremental(node, 1, (BROKER, "", [("log.cleanup.policy", APPEND, "delete")])))
    assert node.broker.dynamic_broker_configs("") == {"log.cleanup.policy": "delete"}
    r = incremental(node, 1, (BROKER, "", [("log.cleanup.policy", SUBTRACT, "delete")]))
    assert r.responses[0].error_code == ErrorCode.INVALID_CONFIG
    ok(incremental(node, 1, (BROKER, "", [("log.cleanup.policy", APPEND, "compact")])))
    assert node.broker.dynamic_broker_configs("") == {"log.cleanup.policy": "delete,compact"}
    ok(incremental(node, 1, (BROKER, "", [("log.cleanup.policy", SUBTRACT, "delete")])))
    assert node.broker.dynamic_broker_configs("") == {"log.cleanup.policy": "compact"}
    r = incremental(node, 1, (BROKER, "", [("log.segment.bytes", APPEND, "5")]))
    assert r.responses[0].error_code == ErrorCode.INVALID_CONFIG and "not LIST" in r.responses[0].error_message
    assert node.broker.dynamic_broker_configs("") == {"log.cleanup.policy": "compact"}


def test_new_topics_get_the_dynamic_defaults(node: Node) -> None:
    ok(incremental(node, 0, (BROKER, "", [("log.segment.bytes", SET, "100000")])))
    node.create("later", 2)
    assert node.broker.get_log("later", 1).config.segment_bytes == 100000
    r = node.call(apis.CREATE_TOPICS, 5, {"topics": [{
        "name": "described", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout": 5000, "validate_only": False})
    configs = {c.name: c for c in r.topics[0].configs}
    assert (configs["segment.bytes"].value, configs["segment.bytes"].config_source) == ("100000", DYNAMIC_DEFAULT)


def test_dynamic_segment_bytes_rolls_the_live_log(node: Node) -> None:
    node.create("t")
    node.fill("t", 0, 10)
    lg = node.broker.get_log("t", 0)
    assert len(lg.segments) == 1
    ok(incremental(node, 1, (BROKER, "1", [("log.segment.bytes", SET, "200")])))
    node.fill("t", 0, 3)
    assert len(lg.segments) >= 3
    assert lg.next_offset == 26


def test_persisted_and_reloaded(data: Path) -> None:
    n = Node(data, **{"log.retention.hours": "24"})
    n.create("t")
    ok(incremental(n, 1, (BROKER, "", [("log.retention.ms", SET, "5000")]),
                   (BROKER, "1", [("log.segment.bytes", SET, "300000")])))
    n.broker.stop()
    doc = json.loads((data / METADATA_FILE).read_text())
    assert doc["broker_configs"] == {"": {"log.retention.ms": "5000"}, "1": {"log.segment.bytes": "300000"}}

    again = Node(data, **{"log.retention.hours": "24"})
    try:
        assert again.broker.dynamic_broker_configs("") == {"log.retention.ms": "5000"}
        lg = again.broker.get_log("t", 0)
        assert (lg.config.retention_ms, lg.config.segment_bytes) == (5000, 300000)
        c = topic_config(again, "t", "segment.bytes")
        assert (c.value, c.config_source) == ("300000", DYNAMIC_BROKER)
    finally:
        again.broker.stop()


def test_metadata_file_without_broker_configs_still_loads(data: Path) -> None:
    n = Node(data)
    n.create("t")
    n.broker.stop()
    path = data / METADATA_FILE
    doc = json.loads(path.read_text())
    del doc["broker_configs"]
    path.write_text(json.dumps(doc))
    again = Node(data)
    try:
        assert again.broker.registry.broker_configs == {}
        assert again.broker.get_log("t", 0).config.segment_bytes == 1024**3
    finally:
        again.broker.stop()


@pytest.mark.parametrize("version", versions(apis.INCREMENTAL_ALTER_CONFIGS))
def test_errors_change_nothing(node: Node, version: int) -> None:
    node.create("t")
    r = incremental(
        node, version,
        (BROKER, "", [("listeners", SET, "PLAINTEXT://0.0.0.0:1")]),
        (BROKER, "1", [("log.dirs", DELETE, None)]),
        (BROKER, "7", [("log.segment.bytes", SET, "100000")]),
        (BROKER, "x", [("log.segment.bytes", SET, "100000")]),
    )
    got = [(x.resource_name, x.error_code) for x in r.responses]
    assert got == [("", ErrorCode.INVALID_REQUEST), ("1", ErrorCode.INVALID_REQUEST),
                   ("7", ErrorCode.INVALID_REQUEST), ("x", ErrorCode.INVALID_REQUEST)]
    assert "listeners" in r.responses[0].error_message and "server.properties" in r.responses[0].error_message
    assert "log.dirs" in r.responses[1].error_message
    for key, value in (("log.segment.bytes", "1"), ("log.retention.ms", "soon"),
                       ("log.message.timestamp.type", "Whenever"), ("node.id", "2")):
        r = incremental(node, version, (BROKER, "1", [(key, SET, value)]))
        code = ErrorCode.INVALID_REQUEST if key == "node.id" else ErrorCode.INVALID_CONFIG
        assert r.responses[0].error_code == code, key
        assert key.split(".")[-1] in r.responses[0].error_message or value in r.responses[0].error_message
    r = alter_configs(node, 1, (BROKER, "", {"log.segment.bytes": None}))
    assert r.responses[0].error_code == ErrorCode.INVALID_CONFIG
    r = alter_configs(node, 1, (BROKER, "1", {"log.segment.bytes": "100000", "num.partitions": "4"}))
    assert r.responses[0].error_code == ErrorCode.INVALID_REQUEST
    assert node.broker.registry.broker_configs == {}
    assert node.broker.get_log("t", 0).config.segment_bytes == 1024**3


@pytest.mark.parametrize("version", versions(apis.INCREMENTAL_ALTER_CONFIGS))
def test_validate_only(node: Node, version: int) -> None:
    node.create("t")
    r = incremental(node, version, (BROKER, "", [("log.segment.bytes", SET, "100000")]), validate_only=True)
    ok(r)
    r = incremental(node, version, (BROKER, "1", [("log.segment.bytes", SET, "1")]), validate_only=True)
    assert r.responses[0].error_code == ErrorCode.INVALID_CONFIG
    r = alter_configs(node, 0, (BROKER, "1", {"log.segment.bytes": "100000"}), validate_only=True)
    ok(r)
    assert node.broker.registry.broker_configs == {}
    assert node.broker.get_log("t", 0).config.segment_bytes == 1024**3
