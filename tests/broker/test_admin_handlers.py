"""The admin handlers (topics, configs, cluster, records) against a real in-process broker.

Every request is built with kio's classes for one version, encoded to bytes and decoded again the
way the server decodes it; the handler's answer is built into that version's response class,
encoded, and decoded again, so each test proves the answer is valid on the wire for every
supported version, then checks the fields that matter.
"""

from __future__ import annotations

import asyncio
import io
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer

from odradek.broker import dispatch
from odradek.broker.broker import Broker
from odradek.broker.config import DYNAMIC_KEYS, BrokerConfig
from odradek.broker.config import KEYS as BROKER_KEYS
from odradek.broker.context import RequestContext
from odradek.broker.handlers import cluster
from odradek.protocol import apis, entities
from odradek.protocol.errors import ErrorCode
from odradek.protocol.frame import RequestHeader
from odradek.storage.config import TOPIC_KEYS
from tests.storage.helpers import batch

ZERO_UUID = uuid.UUID(int=0)


def versions(api_key: int) -> list[int]:
    r = apis.SUPPORTED[api_key]
    return list(range(r.min_version, r.max_version + 1))


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


class Node:
    """A started broker plus a ``call`` that goes through request and response encoding."""

    def __init__(self, data: Path, **props: str) -> None:
        self.broker = Broker(BrokerConfig.from_properties({"log.dirs": str(data), **props}))
        self.broker.start()
        self.correlation = 0

    def call(self, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        request = entities.build(apis.request_class(api_key, version), fields)
        decoded = apis.decode_request(api_key, version, encode(request), 0)
        self.correlation += 1
        ctx = RequestContext(self.broker, RequestHeader(api_key, version, self.correlation, "test", 0), "test")
        result = asyncio.run(dispatch.HANDLERS[api_key](ctx, decoded))
        assert isinstance(result, dict)
        response_cls = apis.response_class(api_key, version)
        body = apis.encode_body(entities.build(response_cls, result))
        response, size = entity_reader(response_cls)(body, 0)
        assert size == len(body)
        return response

    # -- shortcuts -------------------------------------------------------------------------------

    def create(self, name: str, partitions: int = 1, **configs: str) -> None:
        self.broker.create_topic(name, partitions, 1, {k.replace("_", "."): v for k, v in configs.items()})

    def fill(self, topic: str, partition: int, batches: int, per_batch: int = 2) -> None:
        for _ in range(batches):
            self.broker.append(topic, partition, batch(per_batch))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path / "data", **{"num.partitions": "3", "log.retention.hours": "24"})
    try:
        yield n
    finally:
        n.broker.stop()


@pytest.fixture
def no_delete_node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path / "data", **{"delete.topic.enable": "false"})
    try:
        yield n
    finally:
        n.broker.stop()


def has(response_entity: Any, field: str) -> bool:
    return field in entities.field_names(type(response_entity))


# -- CreateTopics ------------------------------------------------------------------------------------


def creatable(name: str, partitions: int = -1, rf: int = -1, configs: dict[str, str | None] | None = None,
              assignments: list[tuple[int, list[int]]] | None = None) -> dict[str, Any]:
    return {
        "name": name, "num_partitions": partitions, "replication_factor": rf,
        "assignments": [{"partition_index": p, "broker_ids": ids} for p, ids in assignments or []],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


def create_topics(node: Node, version: int, *topics: dict[str, Any], validate_only: bool = False) -> Any:
    return node.call(apis.CREATE_TOPICS, version,
                     {"topics": list(topics), "timeout": 5000, "validate_only": validate_only})


@pytest.mark.parametrize("version", versions(apis.CREATE_TOPICS))
def test_create_topics_with_defaults_and_configs(node: Node, version: int) -> None:
    r = create_topics(node, version, creatable("plain"), creatable("tuned", 2, 1, {"retention.ms": "1000"}))
    plain, tuned = r.topics
    assert (plain.name, plain.error_code, plain.error_message) == ("plain", ErrorCode.NONE, None)
    assert tuned.error_code == ErrorCode.NONE
    reg = node.broker.registry
    assert reg.get("plain").partitions == 3  # num.partitions
    assert reg.get("tuned").partitions == 2 and reg.get("tuned").configs == {"retention.ms": "1000"}
    assert node.broker.get_log("tuned", 1).config.retention_ms == 1000
    if version >= 5:
        assert (plain.num_partitions, plain.replication_factor) == (3, 1)
        assert (tuned.num_partitions, tuned.replication_factor) == (2, 1)
        configs = {c.name: c for c in tuned.configs}
        assert set(configs) == TOPIC_KEYS
        assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("1000", 1)
        assert (configs["segment.bytes"].config_source, configs["segment.bytes"].read_only) == (5, False)
        # log.retention.hours=24 in server.properties: a static broker default
        plain_configs = {c.name: c for c in plain.configs}
        assert (plain_configs["retention.ms"].value, plain_configs["retention.ms"].config_source) == (
            str(24 * 3600 * 1000), 4)
    if version >= 7:
        assert plain.topic_id == reg.get("plain").topic_id
        assert tuned.topic_id == reg.get("tuned").topic_id


@pytest.mark.parametrize("version", versions(apis.CREATE_TOPICS))
def test_create_topics_validate_only_changes_nothing(node: Node, version: int) -> None:
    r = create_topics(node, version, creatable("dry", 4, 1, {"segment.bytes": "100000"}), validate_only=True)
    (t,) = r.topics
    assert t.error_code == ErrorCode.NONE
    assert node.broker.registry.get("dry") is None
    assert node.broker.log_manager.get_log("dry", 0) is None
    if version >= 5:
        assert (t.num_partitions, t.replication_factor) == (4, 1)
        assert {c.name: c.value for c in t.configs}["segment.bytes"] == "100000"
    if version >= 7:
        assert t.topic_id in (None, ZERO_UUID)  # kio decodes the all-zero id as None


@pytest.mark.parametrize("version", versions(apis.CREATE_TOPICS))
def test_create_topics_errors(node: Node, version: int) -> None:
    node.create("exists")
    r = create_topics(
        node, version,
        creatable("exists"),
        creatable("bad/name"),
        creatable("zero", 0),
        creatable("rf2", 1, 2),
        creatable("badcfg", 1, 1, {"retention.ms": "soon"}),
        creatable("unknowncfg", 1, 1, {"no.such.key": "1"}),
        creatable("nullcfg", 1, 1, {"retention.ms": None}),
        creatable("twice"),
        creatable("twice", 2),
        creatable("foreign", assignments=[(0, [2])]),
        creatable("tworeplicas", assignments=[(0, [1, 1])]),
        creatable("gap", assignments=[(0, [1]), (2, [1])]),
        creatable("empty", assignments=[(0, [])]),
        creatable("both", 2, -1, assignments=[(0, [1])]),
    )
    got = {t.name: (t.error_code, t.error_message) for t in r.topics}
    assert len(r.topics) == len(got) == 13  # "twice" answered once
    expected = {
        "exists": ErrorCode.TOPIC_ALREADY_EXISTS,
        "bad/name": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "zero": ErrorCode.INVALID_PARTITIONS,
        "rf2": ErrorCode.INVALID_REPLICATION_FACTOR,
        "badcfg": ErrorCode.INVALID_CONFIG,
        "unknowncfg": ErrorCode.INVALID_CONFIG,
        "nullcfg": ErrorCode.INVALID_CONFIG,
        "twice": ErrorCode.INVALID_REQUEST,
        "foreign": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "tworeplicas": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "gap": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "empty": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "both": ErrorCode.INVALID_REQUEST,
    }
    assert {name: code for name, (code, _) in got.items()} == expected
    assert all(message for _, message in got.values())
    assert "soon" in got["badcfg"][1] and "no.such.key" in got["unknowncfg"][1]
    assert "broker 2" in got["foreign"][1]
    assert got["twice"][1] == "Duplicate topic name."
    assert set(node.broker.registry.topics) == {"exists"}
    if version >= 5:
        assert all((t.num_partitions, t.replication_factor) == (-1, -1) for t in r.topics)


@pytest.mark.parametrize("version", versions(apis.CREATE_TOPICS))
def test_create_topics_manual_assignment_on_this_broker(node: Node, version: int) -> None:
    r = create_topics(node, version, creatable("manual", assignments=[(1, [1]), (0, [1])]))
    assert r.topics[0].error_code == ErrorCode.NONE
    assert node.broker.registry.get("manual").partitions == 2
    if version >= 5:
        assert (r.topics[0].num_partitions, r.topics[0].replication_factor) == (2, 1)


# -- DeleteTopics ------------------------------------------------------------------------------------


def delete_topics(node: Node, version: int, *names: str | None, ids: tuple[uuid.UUID, ...] = ()) -> Any:
    if version >= 6:
        topics = [{"name": n, "topic_id": ZERO_UUID} for n in names] + [{"name": None, "topic_id": i} for i in ids]
        return node.call(apis.DELETE_TOPICS, version, {"topics": topics, "timeout": 5000})
    assert not ids
    return node.call(apis.DELETE_TOPICS, version, {"topic_names": list(names), "timeout": 5000})


@pytest.mark.parametrize("version", versions(apis.DELETE_TOPICS))
def test_delete_topics(node: Node, version: int) -> None:
    node.create("gone", 2)
    node.create("also.gone")
    node.fill("gone", 1, 2)
    data_dir = node.broker.get_log("gone", 1).directory
    topic_id = node.broker.registry.get("also.gone").topic_id
    if version >= 6:
        r = delete_topics(node, version, "gone", "missing", ids=(topic_id, uuid.uuid4()))
    else:
        r = delete_topics(node, version, "gone", "missing", "also.gone")
    by_name = {t.name: t for t in r.responses}
    assert by_name["gone"].error_code == ErrorCode.NONE
    assert by_name["missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_name["also.gone"].error_code == ErrorCode.NONE
    assert node.broker.registry.topics == {}
    assert node.broker.log_manager.get_log("gone", 1) is None
    assert not data_dir.exists() or not any(data_dir.glob("*.log"))
    if version >= 5:
        assert by_name["missing"].error_message
        assert by_name["gone"].error_message is None
    if version >= 6:
        assert by_name["also.gone"].topic_id == topic_id
        (unknown,) = [t for t in r.responses if t.name is None]
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_ID


@pytest.mark.parametrize("version", versions(apis.DELETE_TOPICS))
def test_delete_topics_duplicates_are_refused(node: Node, version: int) -> None:
    node.create("dup")
    r = delete_topics(node, version, "dup", "dup")
    assert [(t.name, t.error_code) for t in r.responses] == [("dup", ErrorCode.INVALID_REQUEST)]
    assert node.broker.registry.get("dup") is not None


def test_delete_topics_v6_name_and_id_together_is_invalid(node: Node) -> None:
    node.create("both")
    topic_id = node.broker.registry.get("both").topic_id
    r = node.call(apis.DELETE_TOPICS, 6, {"topics": [{"name": "both", "topic_id": topic_id}], "timeout": 1000})
    assert r.responses[0].error_code == ErrorCode.INVALID_REQUEST
    assert node.broker.registry.get("both") is not None


@pytest.mark.parametrize("version", versions(apis.DELETE_TOPICS))
def test_delete_topics_disabled(no_delete_node: Node, version: int) -> None:
    no_delete_node.create("kept")
    r = delete_topics(no_delete_node, version, "kept")
    expected = ErrorCode.INVALID_REQUEST if version < 3 else ErrorCode.TOPIC_DELETION_DISABLED
    assert [t.error_code for t in r.responses] == [expected]
    assert no_delete_node.broker.registry.get("kept") is not None


# -- CreatePartitions --------------------------------------------------------------------------------


def create_partitions(node: Node, version: int, *topics: tuple[str, int, list[list[int]] | None],
                      validate_only: bool = False) -> Any:
    return node.call(apis.CREATE_PARTITIONS, version, {
        "topics": [
            {"name": n, "count": c, "assignments": None if a is None else [{"broker_ids": ids} for ids in a]}
            for n, c, a in topics
        ],
        "timeout": 5000, "validate_only": validate_only,
    })


@pytest.mark.parametrize("version", versions(apis.CREATE_PARTITIONS))
def test_create_partitions(node: Node, version: int) -> None:
    node.create("grow")
    node.create("assigned")
    node.create("dry")
    r = create_partitions(node, version, ("grow", 3, None), ("assigned", 3, [[1], [1]]), ("dry", 5, None),
                          validate_only=False)
    assert [(t.name, t.error_code, t.error_message) for t in r.results] == [
        ("grow", ErrorCode.NONE, None), ("assigned", ErrorCode.NONE, None), ("dry", ErrorCode.NONE, None)]
    assert node.broker.registry.get("grow").partitions == 3
    assert node.broker.get_log("assigned", 2) is not None
    r = create_partitions(node, version, ("grow", 6, None), validate_only=True)
    assert r.results[0].error_code == ErrorCode.NONE
    assert node.broker.registry.get("grow").partitions == 3
    assert node.broker.log_manager.get_log("grow", 3) is None


@pytest.mark.parametrize("version", versions(apis.CREATE_PARTITIONS))
def test_create_partitions_errors(node: Node, version: int) -> None:
    for name in ("same", "fewer", "foreign", "short", "dup"):
        node.create(name, 2)
    r = create_partitions(
        node, version,
        ("same", 2, None), ("fewer", 1, None), ("missing", 4, None),
        ("foreign", 3, [[2]]), ("short", 4, [[1]]), ("dup", 3, None), ("dup", 4, None),
    )
    got = {t.name: (t.error_code, t.error_message) for t in r.results}
    assert len(r.results) == 6
    assert {n: c for n, (c, _) in got.items()} == {
        "same": ErrorCode.INVALID_PARTITIONS,
        "fewer": ErrorCode.INVALID_PARTITIONS,
        "missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "foreign": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "short": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "dup": ErrorCode.INVALID_REQUEST,
    }
    assert "2 partitions" in got["same"][1]
    assert all(message for _, message in got.values())
    assert all(node.broker.registry.get(n).partitions == 2 for n in ("same", "fewer", "foreign", "short", "dup"))


# -- DescribeConfigs ---------------------------------------------------------------------------------


def describe_configs(node: Node, version: int, *resources: tuple[int, str, list[str] | None],
                     synonyms: bool = False, documentation: bool = False) -> Any:
    return node.call(apis.DESCRIBE_CONFIGS, version, {
        "resources": [{"resource_type": t, "resource_name": n, "configuration_keys": k} for t, n, k in resources],
        "include_synonyms": synonyms, "include_documentation": documentation,
    })


@pytest.mark.parametrize("version", versions(apis.DESCRIBE_CONFIGS))
def test_describe_topic_configs(node: Node, version: int) -> None:
    node.create("t", retention_ms="1000")
    r = describe_configs(node, version, (2, "t", None), (2, "t", ["retention.ms", "cleanup.policy", "nope"]),
                         synonyms=True, documentation=True)
    everything, some = r.results
    assert (everything.error_code, everything.resource_type, everything.resource_name) == (ErrorCode.NONE, 2, "t")
    configs = {c.name: c for c in everything.configs}
    assert set(configs) == TOPIC_KEYS
    assert [c.name for c in some.configs] == ["cleanup.policy", "retention.ms"]
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source, retention.read_only, retention.is_sensitive) == (
        "1000", 1, False, False)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "1000", 1), ("log.retention.hours", "24", 4), ("log.retention.hours", "168", 5)]
    segment = configs["segment.bytes"]
    assert (segment.value, segment.config_source) == (str(1024**3), 5)
    assert [(s.name, s.source) for s in segment.synonyms] == [("log.segment.bytes", 5)]
    if version >= 3:
        assert (retention.config_type, segment.config_type, configs["cleanup.policy"].config_type) == (5, 3, 7)
        assert configs["message.timestamp.type"].config_type == 2
        assert retention.documentation
    # an empty key list means every key, as in Kafka's ConfigHelper
    r = describe_configs(node, version, (2, "t", []))
    assert {c.name for c in r.results[0].configs} == TOPIC_KEYS
    # without synonyms or documentation
    r = describe_configs(node, version, (2, "t", ["retention.ms"]))
    (c,) = r.results[0].configs
    assert c.synonyms == ()
    if version >= 3:
        assert c.documentation is None


@pytest.mark.parametrize("version", versions(apis.DESCRIBE_CONFIGS))
def test_describe_static_broker_default_of_a_topic(node: Node, version: int) -> None:
    node.create("t")
    r = describe_configs(node, version, (2, "t", ["retention.ms", "segment.ms"]), synonyms=True)
    configs = {c.name: c for c in r.results[0].configs}
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == (str(24 * 3600_000), 4)
    assert (configs["segment.ms"].value, configs["segment.ms"].config_source) == (str(7 * 24 * 3600_000), 5)
    assert [(s.name, s.source) for s in configs["retention.ms"].synonyms] == [
        ("log.retention.hours", 4), ("log.retention.hours", 5)]


@pytest.mark.parametrize("version", versions(apis.DESCRIBE_CONFIGS))
def test_describe_broker_configs(node: Node, version: int) -> None:
    r = describe_configs(node, version, (4, "1", None), (4, "1", ["log.retention.hours", "num.partitions"]),
                         (4, "", None), synonyms=True, documentation=True)
    everything, some, defaults = r.results
    assert everything.error_code == ErrorCode.NONE and everything.resource_name == "1"
    configs = {c.name: c for c in everything.configs}
    assert set(configs) == set(BROKER_KEYS)
    assert not any(c.is_sensitive for c in configs.values())
    # only the keys that set topic defaults can change at runtime, as in Kafka
    assert {n for n, c in configs.items() if not c.read_only} == set(DYNAMIC_KEYS)
    assert configs["listeners"].read_only and not configs["log.segment.bytes"].read_only
    assert (configs["log.retention.hours"].value, configs["log.retention.hours"].config_source) == ("24", 4)
    assert (configs["delete.topic.enable"].value, configs["delete.topic.enable"].config_source) == ("true", 5)
    assert configs["log.retention.ms"].value is None
    assert [(s.value, s.source) for s in configs["log.retention.hours"].synonyms] == [("24", 4), ("168", 5)]
    assert [c.name for c in some.configs] == ["log.retention.hours", "num.partitions"]
    assert (defaults.error_code, defaults.configs) == (ErrorCode.NONE, ())
    if version >= 3:
        assert configs["delete.topic.enable"].config_type == 1
        assert configs["num.partitions"].config_type == 3
        assert configs["log.retention.check.interval.ms"].config_type == 5
        assert configs["listeners"].config_type == 2
        assert configs["num.partitions"].documentation


@pytest.mark.parametrize("version", versions(apis.DESCRIBE_CONFIGS))
def test_describe_configs_errors(node: Node, version: int) -> None:
    r = describe_configs(node, version, (2, "missing", None), (2, "bad/name", None), (4, "7", None),
                         (4, "one", None), (8, "1", None), (99, "x", None))
    codes = [(x.resource_type, x.resource_name, x.error_code) for x in r.results]
    assert codes == [
        (2, "missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (2, "bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION),
        (4, "7", ErrorCode.INVALID_REQUEST),
        (4, "one", ErrorCode.INVALID_REQUEST),
        (8, "1", ErrorCode.INVALID_REQUEST),
        (99, "x", ErrorCode.INVALID_REQUEST),
    ]
    assert all(x.error_message and x.configs == () for x in r.results)
    assert "missing" in r.results[0].error_message


# -- AlterConfigs ------------------------------------------------------------------------------------


def alter_configs(node: Node, version: int, *resources: tuple[int, str, dict[str, str | None]],
                  validate_only: bool = False) -> Any:
    return node.call(apis.ALTER_CONFIGS, version, {
        "resources": [
            {"resource_type": t, "resource_name": n, "configs": [{"name": k, "value": v} for k, v in c.items()]}
            for t, n, c in resources
        ],
        "validate_only": validate_only,
    })


@pytest.mark.parametrize("version", versions(apis.ALTER_CONFIGS))
def test_alter_configs_replaces_the_overrides(node: Node, version: int) -> None:
    node.create("t", 2, retention_ms="1000")
    r = alter_configs(node, version, (2, "t", {"segment.bytes": "200000"}))
    assert [(x.resource_name, x.error_code, x.error_message) for x in r.responses] == [("t", ErrorCode.NONE, None)]
    assert node.broker.registry.get("t").configs == {"segment.bytes": "200000"}
    lg = node.broker.get_log("t", 1)
    assert (lg.config.segment_bytes, lg.config.retention_ms) == (200000, 24 * 3600_000)
    r = alter_configs(node, version, (2, "t", {"retention.ms": "5"}), validate_only=True)
    assert r.responses[0].error_code == ErrorCode.NONE
    assert node.broker.registry.get("t").configs == {"segment.bytes": "200000"}
    r = alter_configs(node, version, (2, "t", {}))
    assert r.responses[0].error_code == ErrorCode.NONE
    assert node.broker.registry.get("t").configs == {}


@pytest.mark.parametrize("version", versions(apis.ALTER_CONFIGS))
def test_alter_configs_errors(node: Node, version: int) -> None:
    node.create("t", retention_ms="1000")
    node.create("d")
    r = alter_configs(
        node, version,
        (2, "t", {"retention.ms": "-7"}),
        (2, "missing", {"retention.ms": "1"}),
        (4, "1", {"num.partitions": "5"}),
        (4, "", {"num.partitions": "5"}),
        (4, "9", {"num.partitions": "5"}),
        (8, "1", {"root": "DEBUG"}),
        (2, "d", {"retention.ms": "1"}),
        (2, "d", {"retention.ms": "2"}),
    )
    got = [(x.resource_type, x.resource_name, x.error_code) for x in r.responses]
    assert got == [
        (2, "t", ErrorCode.INVALID_CONFIG),
        (2, "missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (4, "1", ErrorCode.INVALID_REQUEST),
        (4, "", ErrorCode.INVALID_REQUEST),
        (4, "9", ErrorCode.INVALID_REQUEST),
        (8, "1", ErrorCode.INVALID_REQUEST),
        (2, "d", ErrorCode.INVALID_REQUEST),
    ]
    assert all(x.error_message for x in r.responses)
    assert "retention.ms" in r.responses[0].error_message
    assert "num.partitions" in r.responses[2].error_message and "server.properties" in r.responses[2].error_message
    assert r.responses[-1].error_message == "Duplicate resource."
    assert node.broker.registry.get("t").configs == {"retention.ms": "1000"}
    assert node.broker.registry.get("d").configs == {}
    assert node.broker.config.num_partitions == 3


# -- IncrementalAlterConfigs -------------------------------------------------------------------------

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def incremental(node: Node, version: int, *resources: tuple[int, str, list[tuple[str, int, str | None]]],
                validate_only: bool = False) -> Any:
    return node.call(apis.INCREMENTAL_ALTER_CONFIGS, version, {
        "resources": [
            {"resource_type": t, "resource_name": n,
             "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}
            for t, n, ops in resources
        ],
        "validate_only": validate_only,
    })


@pytest.mark.parametrize("version", versions(apis.INCREMENTAL_ALTER_CONFIGS))
def test_incremental_alter_configs(node: Node, version: int) -> None:
    node.create("t", retention_ms="1000", segment_bytes="300000")
    r = incremental(node, version, (2, "t", [("max.message.bytes", SET, "5000"), ("retention.ms", DELETE, None),
                                             ("cleanup.policy", APPEND, "delete"), ("flush.ms", DELETE, None)]))
    assert [(x.resource_name, x.error_code, x.error_message) for x in r.responses] == [("t", ErrorCode.NONE, None)]
    assert node.broker.registry.get("t").configs == {
        "segment.bytes": "300000", "max.message.bytes": "5000", "cleanup.policy": "delete"}
    assert node.broker.get_log("t", 0).config.max_message_bytes == 5000
    r = incremental(node, version, (2, "t", [("segment.bytes", SET, "400000")]), validate_only=True)
    assert r.responses[0].error_code == ErrorCode.NONE
    assert node.broker.registry.get("t").configs["segment.bytes"] == "300000"


@pytest.mark.parametrize("version", versions(apis.INCREMENTAL_ALTER_CONFIGS))
def test_incremental_alter_configs_errors(node: Node, version: int) -> None:
    node.create("t", retention_ms="1000")
    for name in ("a", "b", "c", "d", "e", "f", "g", "h"):
        node.create(name)
    r = incremental(
        node, version,
        (2, "a", [("cleanup.policy", APPEND, "compact")]),
        (2, "b", [("cleanup.policy", SUBTRACT, "delete")]),
        (2, "c", [("retention.ms", APPEND, "5")]),
        (2, "d", [("retention.ms", SET, "forever")]),
        (2, "e", [("retention.ms", SET, None)]),
        (2, "f", [("retention.ms", 9, "1")]),
        (2, "g", [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)]),
        (2, "h", [("no.such.key", SET, "1")]),
        (2, "missing", [("retention.ms", SET, "1")]),
        (4, "1", [("num.partitions", SET, "5")]),
        (8, "1", [("root", SET, "DEBUG")]),
        (2, "t", [("retention.ms", SET, "1")]),
        (2, "t", [("retention.ms", SET, "2")]),
    )
    got = {(x.resource_type, x.resource_name): (x.error_code, x.error_message) for x in r.responses}
    assert len(r.responses) == 12
    assert {k: code for k, (code, _) in got.items()} == {
        (2, "a"): ErrorCode.NONE,  # cleanup.policy is a list: APPEND compact gives delete,compact
        (2, "b"): ErrorCode.INVALID_CONFIG,
        (2, "c"): ErrorCode.INVALID_CONFIG,
        (2, "d"): ErrorCode.INVALID_CONFIG,
        (2, "e"): ErrorCode.INVALID_REQUEST,
        (2, "f"): ErrorCode.INVALID_REQUEST,
        (2, "g"): ErrorCode.INVALID_REQUEST,
        (2, "h"): ErrorCode.INVALID_CONFIG,
        (2, "missing"): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        (4, "1"): ErrorCode.INVALID_REQUEST,
        (8, "1"): ErrorCode.INVALID_REQUEST,
        (2, "t"): ErrorCode.INVALID_REQUEST,
    }
    assert all(message for k, (_, message) in got.items() if k != (2, "a"))
    assert "cleanup.policy" in got[2, "b"][1]
    assert "not LIST" in got[2, "c"][1]
    assert "forever" in got[2, "d"][1]
    assert "no.such.key" in got[2, "h"][1]
    assert node.broker.registry.get("t").configs == {"retention.ms": "1000"}
    assert node.broker.registry.get("a").configs == {"cleanup.policy": "delete,compact"}
    assert all(node.broker.registry.get(n).configs == {} for n in "bcdefgh")


# -- DescribeCluster ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(apis.DESCRIBE_CLUSTER))
def test_describe_cluster(node: Node, version: int) -> None:
    fields = {"include_cluster_authorized_operations": False, "endpoint_type": 1, "include_fenced_brokers": True}
    r = node.call(apis.DESCRIBE_CLUSTER, version, fields)
    assert (r.error_code, r.error_message) == (ErrorCode.NONE, None)
    assert r.cluster_id == node.broker.registry.cluster_id
    assert r.controller_id == node.broker.node_id == 1
    assert [(b.broker_id, b.host, b.port, b.rack) for b in r.brokers] == [(1, "127.0.0.1", 9092, None)]
    assert r.cluster_authorized_operations == -(2**31)
    if version >= 1:
        assert r.endpoint_type == 1
    if version >= 2:
        assert r.brokers[0].is_fenced is False
    r = node.call(apis.DESCRIBE_CLUSTER, version, {**fields, "include_cluster_authorized_operations": True})
    assert r.cluster_authorized_operations == cluster.ALL_CLUSTER_OPERATIONS > 0


@pytest.mark.parametrize("version", [v for v in versions(apis.DESCRIBE_CLUSTER) if v >= 1])
def test_describe_cluster_other_endpoint_types(node: Node, version: int) -> None:
    r = node.call(apis.DESCRIBE_CLUSTER, version, {"include_cluster_authorized_operations": False, "endpoint_type": 2})
    assert r.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE and "CONTROLLER" in r.error_message
    assert r.brokers == ()
    r = node.call(apis.DESCRIBE_CLUSTER, version, {"include_cluster_authorized_operations": False, "endpoint_type": 7})
    assert r.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE and "7" in r.error_message


# -- DeleteRecords -----------------------------------------------------------------------------------


def delete_records(node: Node, version: int, topic: str, *offsets: tuple[int, int]) -> dict[int, tuple[int, int]]:
    r = node.call(apis.DELETE_RECORDS, version, {
        "topics": [{"name": topic, "partitions": [{"partition_index": p, "offset": o} for p, o in offsets]}],
        "timeout": 5000,
    })
    (t,) = r.topics
    assert t.name == topic
    return {p.partition_index: (p.error_code, p.low_watermark) for p in t.partitions}


@pytest.mark.parametrize("version", versions(apis.DELETE_RECORDS))
def test_delete_records(node: Node, version: int) -> None:
    node.create("t", 3)
    for p in range(3):
        node.fill("t", p, 3)  # offsets 0..5
    got = delete_records(node, version, "t", (0, 4), (1, -1), (2, 0))
    assert got == {0: (ErrorCode.NONE, 4), 1: (ErrorCode.NONE, 6), 2: (ErrorCode.NONE, 0)}
    assert node.broker.get_log("t", 0).log_start_offset == 4
    assert node.broker.get_log("t", 1).log_start_offset == 6
    # below the current start: nothing changes, the current start is reported
    assert delete_records(node, version, "t", (0, 2)) == {0: (ErrorCode.NONE, 4)}
    assert node.broker.get_log("t", 0).log_start_offset == 4


@pytest.mark.parametrize("version", versions(apis.DELETE_RECORDS))
def test_delete_records_errors(node: Node, version: int) -> None:
    node.create("t", 2)
    node.fill("t", 0, 2)
    got = delete_records(node, version, "t", (0, 5), (1, -5), (7, 0))
    assert got == {
        0: (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
        1: (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
        7: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
    }
    assert delete_records(node, version, "missing", (0, 0)) == {0: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}
    assert node.broker.get_log("t", 0).log_start_offset == 0


# -- OffsetForLeaderEpoch ----------------------------------------------------------------------------


def epochs(node: Node, version: int, topic: str, *asks: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """(partition, current_leader_epoch, leader_epoch) -> (error, leader_epoch, end_offset) each."""
    r = node.call(apis.OFFSET_FOR_LEADER_EPOCH, version, {
        "replica_id": -1,
        "topics": [{"topic": topic, "partitions": [
            {"partition": p, "current_leader_epoch": cur, "leader_epoch": e} for p, cur, e in asks]}],
    })
    (t,) = r.topics
    assert t.topic == topic
    assert [p.partition for p in t.partitions] == [a[0] for a in asks]
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in t.partitions]


@pytest.mark.parametrize("version", versions(apis.OFFSET_FOR_LEADER_EPOCH))
def test_offset_for_leader_epoch_without_assigned_epochs(node: Node, version: int) -> None:
    node.create("t", 2)
    node.fill("t", 0, 3)
    assert node.broker.get_log("t", 0).leader_epochs.latest_epoch is None
    assert epochs(node, version, "t", (0, 0, 0), (0, -1, 0), (0, -1, 3), (0, 0, -1), (1, 0, 0), (0, 1, 0), (5, 0, 0)
                  ) == [
        (ErrorCode.NONE, 0, 6),
        (ErrorCode.NONE, 0, 6),
        (ErrorCode.NONE, 0, 6),
        (ErrorCode.NONE, -1, -1),
        (ErrorCode.NONE, 0, 0),
        (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]
    assert epochs(node, version, "missing", (0, -1, 0)) == [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]


@pytest.mark.parametrize("version", versions(apis.OFFSET_FOR_LEADER_EPOCH))
def test_offset_for_leader_epoch_with_a_cache(node: Node, version: int) -> None:
    node.create("t")
    node.fill("t", 0, 2)  # offsets 0..3
    lg = node.broker.get_log("t", 0)
    lg.leader_epochs.assign(0, 0)
    lg.leader_epochs.assign(2, 2)
    assert epochs(node, version, "t", (0, 2, 0), (0, 2, 1), (0, 2, 2), (0, -1, 3), (0, 1, 2), (0, 3, 2)) == [
        (ErrorCode.NONE, 0, 2),
        (ErrorCode.NONE, 0, 2),
        (ErrorCode.NONE, 2, 4),
        (ErrorCode.NONE, -1, -1),
        (ErrorCode.FENCED_LEADER_EPOCH, -1, -1),
        (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),
    ]


# -- through dispatch: a whole request frame in, a whole response frame out -----------------------------


def _frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    client_id = b"test"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    if apis.request_is_flexible(api_key, version):
        header += b"\x00"  # no tagged fields
    return header + body


@pytest.mark.parametrize("api_key,fields", [
    (apis.CREATE_TOPICS, {"topics": [creatable("via.dispatch")], "timeout": 1000}),
    (apis.DELETE_TOPICS, {"topics": [{"name": "nope", "topic_id": ZERO_UUID}], "topic_names": ["nope"]}),
    (apis.CREATE_PARTITIONS, {"topics": [{"name": "nope", "count": 2, "assignments": None}]}),
    (apis.DESCRIBE_CONFIGS, {"resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}]}),
    (apis.ALTER_CONFIGS, {"resources": [{"resource_type": 2, "resource_name": "nope", "configs": []}]}),
    (apis.INCREMENTAL_ALTER_CONFIGS, {"resources": [{"resource_type": 2, "resource_name": "nope", "configs": []}]}),
    (apis.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False}),
    (apis.DELETE_RECORDS, {"topics": [{"name": "nope", "partitions": [{"partition_index": 0, "offset": 0}]}]}),
    (apis.OFFSET_FOR_LEADER_EPOCH, {"topics": [{"topic": "nope", "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
])
def test_every_version_through_dispatch(node: Node, api_key: int, fields: dict[str, Any]) -> None:
    seen: list[RequestHeader] = []

    def ctx_factory(header: RequestHeader) -> RequestContext:
        seen.append(header)
        return RequestContext(node.broker, header, "test")

    for version in versions(api_key):
        request = entities.build(apis.request_class(api_key, version), fields)
        frame = _frame(api_key, version, 1000 + version, encode(request))
        chunks = asyncio.run(dispatch.dispatch(ctx_factory, frame))
        assert chunks is not None
        out = b"".join(c for c in chunks if isinstance(c, bytes))
        size, correlation_id = struct.unpack_from(">ii", out, 0)
        assert (size, correlation_id) == (len(out) - 4, 1000 + version)
        assert seen[-1].api_version == version
        body_at = 8 + (1 if apis.response_header_is_flexible(api_key, version) else 0)
        response_cls = apis.response_class(api_key, version)
        _, used = entity_reader(response_cls)(out, body_at)
        assert body_at + used == len(out)
    if api_key == apis.CREATE_TOPICS:
        assert node.broker.registry.get("via.dispatch") is not None
