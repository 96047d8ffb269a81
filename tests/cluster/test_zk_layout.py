"""Golden tests of Kafka's ZooKeeper formats: the bytes below are what Kafka 3.x brokers write.

The Kafka-written samples (broker registrations, topics, partition states, the controller) are as
``zookeeper-shell get`` prints them from real clusters; decoding them and encoding the result must give
the same bytes back.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.cluster.model import BrokerRegistration, Endpoint, LeaderAndIsr, TopicAssignment
from odradek.cluster.zk import layout
from odradek.cluster.zk.layout import ProducerIdBlock, ZkDataError

NOW_MS = 1_700_000_000_000


# -- paths ---------------------------------------------------------------------------------------------------


def test_paths() -> None:
    assert layout.broker_path(3) == "/brokers/ids/3"
    assert layout.topic_path("orders") == "/brokers/topics/orders"
    assert layout.partition_state_path("orders", 7) == "/brokers/topics/orders/partitions/7/state"
    assert layout.config_path("topics", "orders") == "/config/topics/orders"
    assert layout.config_path("brokers", "<default>") == "/config/brokers/<default>"
    assert layout.config_entity_path("brokers", "1") == "brokers/1"
    assert layout.delete_topic_path("orders") == "/admin/delete_topics/orders"
    assert layout.config_change_sequence("config_change_0000000042") == 42
    with pytest.raises(ValueError, match="unknown config entity type"):
        layout.config_path("groups", "g")
    with pytest.raises(ZkDataError, match="/config/changes/other"):
        layout.config_change_sequence("other")


def test_persistent_paths_are_kafkas() -> None:
    assert layout.PERSISTENT_PATHS == (
        "/consumers",
        "/brokers/ids",
        "/brokers/topics",
        "/config/changes",
        "/admin/delete_topics",
        "/brokers/seqid",
        "/isr_change_notification",
        "/latest_producer_id_block",
        "/log_dir_event_notification",
        "/config/topics",
        "/config/clients",
        "/config/users",
        "/config/brokers",
        "/config/ips",
    )


# -- /cluster/id ---------------------------------------------------------------------------------------------


def test_cluster_id_golden() -> None:
    golden = b'{"version":"1","id":"eQzK4lYlQ9y8P21IScOl_g"}'
    assert layout.encode_cluster_id("eQzK4lYlQ9y8P21IScOl_g") == golden
    assert layout.decode_cluster_id(golden) == "eQzK4lYlQ9y8P21IScOl_g"


@pytest.mark.parametrize("data", [b"", b"not json", b'["x"]', b'{"version":"1"}', b'{"version":"1","id":""}'])
def test_cluster_id_errors_name_the_path(data: bytes) -> None:
    with pytest.raises(ZkDataError, match="znode /cluster/id"):
        layout.decode_cluster_id(data)


# -- /brokers/ids/<id> ---------------------------------------------------------------------------------------

KAFKA_BROKER = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://kafka:9092"],"jmx_port":-1,"port":9092,"host":"kafka","version":5,'
    b'"timestamp":"1647406227247"}'
)


def test_broker_written_by_kafka_decodes() -> None:
    reg = layout.decode_broker(0, KAFKA_BROKER, epoch=42)
    assert reg == BrokerRegistration(0, (Endpoint("PLAINTEXT", "kafka", 9092, "PLAINTEXT"),), None, 42, False)


def test_broker_encodes_as_kafka_plus_shutting_down() -> None:
    reg = BrokerRegistration(0, (Endpoint("PLAINTEXT", "kafka", 9092),))
    assert layout.encode_broker(reg, 1647406227247) == KAFKA_BROKER[:-1] + b',"odradek.shutting_down":false}'


def test_broker_with_listeners_rack_and_shutdown_golden() -> None:
    reg = BrokerRegistration(
        7,
        (Endpoint("CLIENT", "h1", 9093, "SASL_SSL"), Endpoint("REPLICATION", "h1", 9092, "PLAINTEXT")),
        rack="r1",
        shutting_down=True,
    )
    golden = (
        b'{"features":{},"listener_security_protocol_map":{"CLIENT":"SASL_SSL","REPLICATION":"PLAINTEXT"},'
        b'"endpoints":["CLIENT://h1:9093","REPLICATION://h1:9092"],"jmx_port":-1,"port":9092,"host":"h1",'
        b'"version":5,"timestamp":"1700000000000","rack":"r1","odradek.shutting_down":true}'
    )
    assert layout.encode_broker(reg, NOW_MS) == golden
    assert layout.decode_broker(7, golden, epoch=5) == replace_epoch(reg, 5)


def replace_epoch(reg: BrokerRegistration, epoch: int) -> BrokerRegistration:
    return BrokerRegistration(reg.broker_id, reg.endpoints, reg.rack, epoch, reg.shutting_down)


def test_broker_offline_replicas_are_listed_by_topic_only_while_there_are_any() -> None:
    reg = BrokerRegistration(1, (Endpoint("PLAINTEXT", "h", 1),), offline_replicas=frozenset({("b", 2), ("a", 0),
                                                                                              ("b", 0)}))
    data = layout.encode_broker(reg, NOW_MS)
    assert data.endswith(b'"odradek.shutting_down":false,"odradek.offline_replicas":{"a":[0],"b":[0,2]}}')
    assert layout.decode_broker(1, data) == reg
    assert b"offline" not in layout.encode_broker(BrokerRegistration(1, reg.endpoints), NOW_MS)


def test_broker_without_plaintext_and_ipv6() -> None:
    reg = BrokerRegistration(1, (Endpoint("SSL", "::1", 9093, "SSL"),))
    data = layout.encode_broker(reg, NOW_MS)
    assert data == (
        b'{"features":{},"listener_security_protocol_map":{"SSL":"SSL"},"endpoints":["SSL://[::1]:9093"],'
        b'"jmx_port":-1,"port":-1,"host":null,"version":5,"timestamp":"1700000000000",'
        b'"odradek.shutting_down":false}'
    )
    assert layout.decode_broker(1, data) == reg


def test_broker_older_versions_decode() -> None:
    v1 = b'{"version":1,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666"}'
    assert layout.decode_broker(1, v1).endpoints == (Endpoint("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),)
    v3 = (
        b'{"jmx_port":-1,"timestamp":"1571666399659","endpoints":["PLAINTEXT://c1198-node4:6667"],'
        b'"host":"c1198-node4","version":3,"port":6667,"rack":"/default-rack"}'
    )
    reg = layout.decode_broker(1003, v3)
    assert reg.endpoints == (Endpoint("PLAINTEXT", "c1198-node4", 6667, "PLAINTEXT"),)
    assert reg.rack == "/default-rack"
    v4 = (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://zjj101:9092"],'
        b'"jmx_port":-1,"host":"zjj101","timestamp":"1614570663881","port":9092,"version":4}'
    )
    assert layout.decode_broker(101, v4).endpoint().host == "zjj101"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'{"version":0,"endpoints":[]}', "unsupported broker registration version 0"),
        (b'{"version":5,"endpoints":[]}', "'endpoints' must be a non-empty list"),
        (b'{"version":5,"endpoints":["nonsense"]}', "is not LISTENER://host:port"),
        (b'{"version":5,"endpoints":["INTERNAL://h:1"]}', "listener 'INTERNAL' has no entry"),
        (b'{"version":true,"endpoints":["PLAINTEXT://h:1"]}', "'version' must be an integer"),
        (b'{"version":5,"endpoints":["PLAINTEXT://h:1"],"rack":3}', "'rack' must be a string or null"),
        (b'{"version":5,"endpoints":["PLAINTEXT://h:1"],"odradek.shutting_down":"yes"}', "must be true or false"),
        (b'{"version":5,"endpoints":["PLAINTEXT://h:1"],"odradek.offline_replicas":[1]}', "must map topic names"),
        (b'{"version":5,"endpoints":["PLAINTEXT://h:1"],"odradek.offline_replicas":{"t":["0"]}}',
         "must be a list of integers"),
    ],
)
def test_broker_errors_name_path_and_problem(data: bytes, problem: str) -> None:
    with pytest.raises(ZkDataError, match="/brokers/ids/4") as info:
        layout.decode_broker(4, data)
    assert problem in str(info.value)


# -- /controller, /controller_epoch --------------------------------------------------------------------------


def test_controller_golden() -> None:
    golden = b'{"version":2,"brokerid":0,"timestamp":"1719917952299","kraftControllerEpoch":-1}'
    assert layout.encode_controller(0, 1719917952299) == golden
    assert layout.decode_controller(golden) == 0
    assert layout.decode_controller(b'{"version":1,"brokerid":1001,"timestamp":"1571666282268"}') == 1001
    with pytest.raises(ZkDataError, match="/controller: field 'brokerid'"):
        layout.decode_controller(b'{"version":2}')


def test_controller_epoch_golden() -> None:
    assert layout.encode_controller_epoch(17) == b"17"
    assert layout.decode_controller_epoch(b"17") == 17
    with pytest.raises(ZkDataError, match="/controller_epoch"):
        layout.decode_controller_epoch(b"x")


# -- /brokers/topics/<t> -------------------------------------------------------------------------------------

KAFKA_TOPIC = (
    b'{"removing_replicas":{},"partitions":{"0":[0]},"topic_id":"ZOLr9CLNQjSW70hyIHx6BQ",'
    b'"adding_replicas":{},"version":3}'
)


def test_topic_written_by_kafka_round_trips() -> None:
    t = layout.decode_topic("test", KAFKA_TOPIC, zk_version=4)
    assert t.replicas == {0: (0,)}
    assert t.zk_version == 4
    assert layout.topic_id_to_string(t.topic_id) == "ZOLr9CLNQjSW70hyIHx6BQ"
    assert layout.encode_topic(t) == KAFKA_TOPIC


def test_topic_golden_with_partitions_in_order() -> None:
    topic_id = uuid.UUID("64e2ebf4-22cd-4234-96ef-4872207c7a05")
    t = TopicAssignment("orders", topic_id, {1: (2, 3, 1), 0: (1, 2, 3)})
    assert layout.encode_topic(t) == (
        b'{"removing_replicas":{},"partitions":{"0":[1,2,3],"1":[2,3,1]},"topic_id":"ZOLr9CLNQjSW70hyIHx6BQ",'
        b'"adding_replicas":{},"version":3}'
    )
    assert list(layout.decode_topic("orders", layout.encode_topic(t)).replicas) == [0, 1]


def test_topic_id_is_kafkas_uuid_string() -> None:
    # Kafka's Uuid.toString: URL-safe base64 of the big-endian 16 bytes, no padding.
    assert layout.topic_id_to_string(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert layout.topic_id_to_string(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"  # Kafka's new Uuid(0L, 1L)
    assert layout.topic_id_to_string(uuid.UUID(int=2**128 - 1)) == "_____________________w"
    assert layout.topic_id_from_string("_____________________w") == uuid.UUID(int=2**128 - 1)
    with pytest.raises(ValueError, match="22 base64url characters"):
        layout.topic_id_from_string("abc")


def test_topic_without_id_decodes_with_zero_id() -> None:
    v1 = b'{"version":1,"partitions":{"1":[101,103],"0":[103,102]}}'
    t = layout.decode_topic("old", v1)
    assert t.topic_id == layout.ZERO_TOPIC_ID
    assert t.replicas == {0: (103, 102), 1: (101, 103)}
    v2 = b'{"version":2,"partitions":{"0":[2,1]},"adding_replicas":{"0":[2]},"removing_replicas":{}}'
    assert layout.decode_topic("old", v2).topic_id == layout.ZERO_TOPIC_ID


def test_topic_with_a_reassignment_golden_and_round_trip() -> None:
    golden = (b'{"removing_replicas":{"0":[1]},"partitions":{"0":[3,2,1],"1":[2,3]},'
              b'"topic_id":"ZOLr9CLNQjSW70hyIHx6BQ","adding_replicas":{"0":[3]},"version":3}')
    t = layout.decode_topic("t", golden, 4)
    assert (t.replicas, t.adding, t.removing, t.zk_version) == ({0: (3, 2, 1), 1: (2, 3)}, {0: (3,)}, {0: (1,)}, 4)
    assert layout.encode_topic(t) == golden


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'{"version":3,"partitions":{"0":[1]},"topic_id":"short"}', "22 base64url characters"),
        (b'{"version":3,"partitions":{"x":[1]}}', "partition 'x' is not a non-negative number"),
        (b'{"version":3,"partitions":{"0":[1,"2"]}}', "must be a list of integers"),
        (b'{"version":3,"partitions":[]}', "'partitions' must map"),
        (b'{"version":3,"partitions":{},"adding_replicas":{"0":"1"}}', "adding_replicas of partition 0"),
        (b'{"version":3,"partitions":{"0":[1]},"adding_replicas":{"1":[1]}}', "which the topic does not have"),
        (b'{"version":3,"partitions":{"0":[1]},"removing_replicas":{"0":[2]}}', "are not all among its replicas"),
    ],
)
def test_topic_errors(data: bytes, problem: str) -> None:
    with pytest.raises(ZkDataError, match="/brokers/topics/t") as info:
        layout.decode_topic("t", data)
    assert problem in str(info.value)


# -- partition state -----------------------------------------------------------------------------------------


def test_partition_state_golden() -> None:
    golden = b'{"controller_epoch":33,"leader":102,"version":1,"leader_epoch":8,"isr":[102,103]}'
    state = LeaderAndIsr(leader=102, leader_epoch=8, isr=(102, 103), controller_epoch=33)
    assert layout.encode_partition_state(state) == golden
    assert layout.decode_partition_state("t", 0, golden, zk_version=9) == LeaderAndIsr(102, 8, (102, 103), 33, 9)


def test_partition_state_offline_and_recovery_state() -> None:
    offline = LeaderAndIsr(leader=-1, leader_epoch=3, isr=(), controller_epoch=2)
    assert layout.encode_partition_state(offline) == (
        b'{"controller_epoch":2,"leader":-1,"version":1,"leader_epoch":3,"isr":[]}'
    )
    with_recovery = (
        b'{"controller_epoch":2,"leader":1,"version":1,"leader_epoch":4,"isr":[1],"leader_recovery_state":1}'
    )
    assert layout.decode_partition_state("t", 0, with_recovery).isr == (1,)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'{"controller_epoch":2,"leader":1,"version":1,"leader_epoch":4}', "'isr' must be a list"),
        (b'{"controller_epoch":2,"leader":1,"version":1,"leader_epoch":4,"isr":[1,1]}', "has duplicates"),
        (b'{"controller_epoch":2,"leader":"1","version":1,"leader_epoch":4,"isr":[1]}', "'leader' must be"),
        (b"{", "not valid JSON"),
    ],
)
def test_partition_state_errors(data: bytes, problem: str) -> None:
    with pytest.raises(ZkDataError, match="/brokers/topics/t/partitions/3/state") as info:
        layout.decode_partition_state("t", 3, data)
    assert problem in str(info.value)


# -- configs -------------------------------------------------------------------------------------------------


def test_config_golden() -> None:
    golden = b'{"version":1,"config":{"retention.ms":"100000"}}'
    assert layout.encode_config({"retention.ms": "100000"}) == golden
    assert layout.decode_config("topics", "my-topic", golden) == {"retention.ms": "100000"}
    assert layout.decode_config("brokers", "<default>", None) == {}
    assert layout.decode_config("brokers", "<default>", b"") == {}
    with pytest.raises(ZkDataError, match="/config/topics/t: config values must be strings"):
        layout.decode_config("topics", "t", b'{"version":1,"config":{"retention.ms":100000}}')
    with pytest.raises(ValueError, match="must be strings"):
        layout.encode_config({"retention.ms": 1})  # type: ignore[dict-item]


def test_config_change_golden() -> None:
    golden = b'{"version":2,"entity_path":"topics/orders"}'
    assert layout.encode_config_change("topics/orders") == golden
    assert layout.decode_config_change("config_change_0000000000", golden) == "topics/orders"
    v1 = b'{"version":1,"entity_type":"brokers","entity_name":"<default>"}'
    assert layout.decode_config_change("config_change_0000000001", v1) == "brokers/<default>"
    with pytest.raises(ZkDataError, match="/config/changes/config_change_0000000002"):
        layout.decode_config_change("config_change_0000000002", b'{"version":3,"entity_path":"topics/x"}')


# -- producer ids --------------------------------------------------------------------------------------------


def test_producer_id_block_golden() -> None:
    golden = b'{"version":1,"broker":0,"block_start":"8000","block_end":"8999"}'
    assert layout.encode_producer_id_block(ProducerIdBlock(0, 8000, 9000)) == golden
    assert layout.decode_producer_id_block(golden) == ProducerIdBlock(0, 8000, 9000)
    assert layout.decode_producer_id_block(b"") is None
    assert layout.decode_producer_id_block(None) is None
    with pytest.raises(ZkDataError, match="/latest_producer_id_block: field 'block_start'"):
        layout.decode_producer_id_block(b'{"version":1,"broker":0,"block_start":8000,"block_end":"8999"}')
    with pytest.raises(ZkDataError, match="do not form a block"):
        layout.decode_producer_id_block(b'{"version":1,"broker":0,"block_start":"9","block_end":"8"}')


# -- round trips ---------------------------------------------------------------------------------------------

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=12)
hosts = st.one_of(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", min_size=1, max_size=20),
    st.just("::1"),
    st.just("fe80::1%eth0"),
)
endpoints = st.builds(
    Endpoint,
    listener=names.map(str.upper),
    host=hosts,
    port=st.integers(0, 65535),
    security_protocol=st.sampled_from(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
)


@settings(max_examples=200, deadline=None)
@given(
    broker_id=st.integers(0, 2**31 - 1),
    eps=st.lists(endpoints, min_size=1, max_size=3, unique_by=lambda e: e.listener),
    rack=st.none() | names,
    shutting_down=st.booleans(),
    epoch=st.integers(0, 2**62),
    offline=st.frozensets(st.tuples(names, st.integers(0, 1000)), max_size=4),
)
def test_broker_round_trip(
    broker_id: int, eps: list[Endpoint], rack: str | None, shutting_down: bool, epoch: int,
    offline: frozenset[tuple[str, int]],
) -> None:
    reg = BrokerRegistration(broker_id, tuple(eps), rack, epoch, shutting_down, offline)
    assert layout.decode_broker(broker_id, layout.encode_broker(reg, NOW_MS), epoch=epoch) == reg


@settings(max_examples=200, deadline=None)
@given(
    leader=st.integers(-1, 1000),
    leader_epoch=st.integers(0, 2**31 - 1),
    isr=st.lists(st.integers(0, 1000), unique=True, max_size=5),
    controller_epoch=st.integers(0, 2**31 - 1),
)
def test_partition_state_round_trip(leader: int, leader_epoch: int, isr: list[int], controller_epoch: int) -> None:
    state = LeaderAndIsr(leader, leader_epoch, tuple(isr), controller_epoch, 3)
    assert layout.decode_partition_state("t", 0, layout.encode_partition_state(state), 3) == state


@settings(max_examples=200, deadline=None)
@given(
    topic_id=st.uuids(),
    replicas=st.lists(st.lists(st.integers(0, 100), min_size=1, max_size=4, unique=True), max_size=20),
)
def test_topic_round_trip(topic_id: uuid.UUID, replicas: list[list[int]]) -> None:
    t = TopicAssignment("t", topic_id, {p: tuple(r) for p, r in enumerate(replicas)}, 2)
    decoded = layout.decode_topic("t", layout.encode_topic(t), 2)
    assert decoded == t
    assert len(layout.topic_id_to_string(topic_id)) == 22
