"""The cluster keys of ``BrokerConfig`` (ZooKeeper, listeners, replication) and the two replication topic keys."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.broker.config import (
    DYNAMIC_KEYS,
    KEYS,
    BrokerConfig,
    ConfigError,
    Listener,
    default_log_config,
    merge_dynamic,
    parse_zookeeper_connect,
)
from odradek.cluster.model import Endpoint
from odradek.protocol.errors import InvalidConfigError
from odradek.storage.config import TOPIC_KEYS, TOPIC_TO_BROKER_KEY, LogConfig


def config(**props: str) -> BrokerConfig:
    return BrokerConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})


def test_defaults_are_kafkas_and_single_node() -> None:
    c = BrokerConfig.from_properties({})
    assert c.zookeeper_connect is None and not c.zk_mode
    assert (c.zk_session_timeout_ms, c.zk_connection_timeout_ms, c.zk_max_in_flight_requests) == (18000, 18000, 10)
    assert c.rack is None
    assert (c.default_replication_factor, c.min_insync_replicas, c.unclean_leader_election_enable) == (1, 1, False)
    assert (c.offsets_topic_replication_factor, c.transaction_state_log_replication_factor,
            c.transaction_state_log_min_isr) == (3, 3, 2)
    assert (c.replica_lag_time_max_ms, c.replica_fetch_max_bytes, c.replica_fetch_response_max_bytes,
            c.replica_fetch_wait_max_ms, c.replica_fetch_min_bytes, c.replica_fetch_backoff_ms,
            c.num_replica_fetchers, c.high_watermark_checkpoint_interval_ms,
            c.replica_socket_timeout_ms) == (30000, 1048576, 10485760, 500, 1, 1000, 1, 5000, 30000)
    assert (c.controlled_shutdown_enable, c.controlled_shutdown_max_retries, c.controlled_shutdown_retry_backoff_ms,
            c.controller_socket_timeout_ms, c.auto_leader_rebalance_enable) == (True, 3, 5000, 30000, True)
    assert c.log_config.min_insync_replicas == 1 and c.log_config.unclean_leader_election_enable is False


def test_every_cluster_key_is_declared_and_real() -> None:
    names = ["zookeeper.connect", "zookeeper.session.timeout.ms", "zookeeper.connection.timeout.ms", "broker.rack",
             "inter.broker.listener.name", "listener.security.protocol.map", "default.replication.factor",
             "min.insync.replicas", "offsets.topic.replication.factor", "transaction.state.log.replication.factor",
             "transaction.state.log.min.isr", "unclean.leader.election.enable", "replica.lag.time.max.ms",
             "replica.fetch.max.bytes", "replica.fetch.response.max.bytes", "replica.fetch.wait.max.ms",
             "replica.fetch.min.bytes", "replica.fetch.backoff.ms", "num.replica.fetchers",
             "replica.high.watermark.checkpoint.interval.ms", "replica.socket.timeout.ms",
             "controlled.shutdown.enable", "controlled.shutdown.max.retries", "controlled.shutdown.retry.backoff.ms",
             "controller.socket.timeout.ms"]
    assert [n for n in names if n not in KEYS or KEYS[n].ignored] == []
    assert KEYS["zookeeper.max.in.flight.requests"].ignored  # accepted: kazoo has no such limit
    for key in ("auto.leader.rebalance.enable", "leader.imbalance.per.broker.percentage",
                "leader.imbalance.check.interval.seconds"):
        assert not KEYS[key].ignored, key  # the controller's auto leader rebalance uses them


def test_cluster_keys_are_parsed_into_typed_attributes() -> None:
    c = BrokerConfig.from_properties({
        "broker.id": "2", "broker.rack": "rack-a", "zookeeper.connect": "zk1:2181,zk2:2182/kafka",
        "zookeeper.session.timeout.ms": "6000", "zookeeper.connection.timeout.ms": "3000",
        "replica.lag.time.max.ms": "10000", "replica.fetch.wait.max.ms": "100", "num.replica.fetchers": "2",
        "controlled.shutdown.enable": "false", "unclean.leader.election.enable": "true",
        "min.insync.replicas": "2", "offsets.topic.replication.factor": "1",
    })
    assert (c.node_id, c.rack, c.zookeeper_connect, c.zk_mode) == (2, "rack-a", "zk1:2181,zk2:2182/kafka", True)
    assert (c.zk_session_timeout_ms, c.zk_connection_timeout_ms) == (6000, 3000)
    assert (c.replica_lag_time_max_ms, c.replica_fetch_wait_max_ms, c.num_replica_fetchers) == (10000, 100, 2)
    assert c.controlled_shutdown_enable is False and c.unclean_leader_election_enable is True
    assert c.offsets_topic_replication_factor == 1
    # The two topic-level keys set the topic defaults.
    assert c.log_config.min_insync_replicas == 2 and c.log_config.unclean_leader_election_enable is True


def test_connection_timeout_defaults_to_the_session_timeout() -> None:
    assert config(zookeeper_session_timeout_ms="9000").zk_connection_timeout_ms == 9000


@pytest.mark.parametrize(("value", "hosts", "chroot"), [
    ("127.0.0.1:2181", [("127.0.0.1", 2181)], None),
    ("a:1,b.example.com:2,c-3:65535/kafka/prod", [("a", 1), ("b.example.com", 2), ("c-3", 65535)], "/kafka/prod"),
    ("[::1]:2181/odradek", [("::1", 2181)], "/odradek"),
    (" zk:2181 , zk2:2181/", [("zk", 2181), ("zk2", 2181)], None),
])
def test_zookeeper_connect_parses(value: str, hosts: list[tuple[str, int]], chroot: str | None) -> None:
    assert parse_zookeeper_connect(value) == (hosts, chroot)


@pytest.mark.parametrize(("value", "why"), [
    ("zk", "'zk' is not HOST:PORT"),
    ("zk:", "'zk:' is not HOST:PORT"),
    ("zk:abc", "is not HOST:PORT"),
    ("zk:0", "port 0"),
    ("zk:70000", "port 70000"),
    ("zk:2181,", "a server is missing"),
    ("/kafka", "a server is missing"),
    ("zk:2181/kafka/", "empty, '.' or '..'"),
    ("zk:2181//kafka", "empty, '.' or '..'"),
    ("zk:2181/kafka/../x", "empty, '.' or '..'"),
    ("zk:2181/ka fka", "space or control character"),
    ("http://zk:2181", "is not HOST:PORT"),
])
def test_a_bad_zookeeper_connect_is_refused_with_the_format(value: str, why: str) -> None:
    with pytest.raises(ConfigError) as e:
        config(zookeeper_connect=value)
    assert why in str(e.value)
    assert "zookeeper.connect=" in str(e.value) and "HOST:PORT[,HOST:PORT...][/CHROOT]" in str(e.value)


def test_an_empty_zookeeper_connect_is_single_node() -> None:
    assert config(zookeeper_connect="  ").zookeeper_connect is None


_hosts = st.lists(
    st.tuples(st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True), st.integers(1, 65535)), min_size=1, max_size=5
)
_chroots = st.none() | st.lists(st.from_regex(r"[a-z0-9_-]{1,8}", fullmatch=True), min_size=1, max_size=4).map(
    lambda parts: "/" + "/".join(parts)
)


@given(_hosts, _chroots)
def test_zookeeper_connect_round_trips(hosts: list[tuple[str, int]], chroot: str | None) -> None:
    text = ",".join(f"{h}:{p}" for h, p in hosts) + (chroot or "")
    assert parse_zookeeper_connect(text) == (hosts, chroot)


def test_advertised_listeners_cover_every_listener_and_follow_the_server_port() -> None:
    c = BrokerConfig.from_properties({
        "listeners": "INTERNAL://0.0.0.0:0,EXTERNAL://127.0.0.1:9093,CONTROLLER://:9094",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "advertised.listeners": "EXTERNAL://broker1.example.com:19093,CONTROLLER://c:9094",
        "inter.broker.listener.name": "internal",
    })
    assert c.listener == Listener("INTERNAL", "0.0.0.0", 0)
    assert c.advertised_listeners == [Listener("INTERNAL", "127.0.0.1", 0),
                                      Listener("EXTERNAL", "broker1.example.com", 19093)]
    assert (c.advertised_host, c.advertised_port) == ("127.0.0.1", 0)
    c.bound("INTERNAL", 40001)  # what the server does once it has bound port 0
    assert c.advertised_listeners[0] == Listener("INTERNAL", "127.0.0.1", 40001)
    assert c.inter_broker_listener_name == "INTERNAL"
    assert c.inter_broker_listener == Listener("INTERNAL", "127.0.0.1", 40001)
    assert c.endpoints() == (Endpoint("INTERNAL", "127.0.0.1", 40001),
                             Endpoint("EXTERNAL", "broker1.example.com", 19093))


def test_single_listener_behaviour_is_unchanged() -> None:
    c = config(listeners="PLAINTEXT://0.0.0.0:9092", advertised_listeners="PLAINTEXT://proxy:19092")
    assert c.listener == Listener("PLAINTEXT", "0.0.0.0", 9092)
    assert (c.advertised_host, c.advertised_port) == ("proxy", 19092)
    assert c.inter_broker_listener == Listener("PLAINTEXT", "proxy", 19092)
    d = BrokerConfig.from_properties({})
    assert (d.advertised_host, d.advertised_port) == ("127.0.0.1", 9092)


@pytest.mark.parametrize(("props", "message"), [
    ({"inter.broker.listener.name": "REPLICATION"},
     "inter.broker.listener.name='REPLICATION' does not name a listener"),
    ({"listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"}, "PLAINTEXT is used more than once"),
    ({"listeners": "INTERNAL://a:1"}, "no security protocol for INTERNAL: add INTERNAL:PLAINTEXT"),
    ({"listener.name.other.ssl.keystore.location": "k"}, "there is no listener named OTHER"),
    ({"listener.name.plaintext.ssl.keystore.where": "k"}, "unknown config key 'listener.name.plaintext.ssl.keys"),
    ({"listener.name.plaintext.gssapi.sasl.jaas.config": "x"}, "a listener override is listener.name.<listener>"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
     "are both set: set only one"),
    ({"security.inter.broker.protocol": "TLS"}, "security.inter.broker.protocol='TLS' is not one of"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "is not NAME:PROTOCOL"),
    ({"listener.security.protocol.map": "PLAINTEXT"}, "is not NAME:PROTOCOL"),
    ({"advertised.listeners": "OTHER://h:1"}, "OTHER is not one of the listeners (PLAINTEXT)"),
    ({"advertised.listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "PLAINTEXT is advertised twice"),
])
def test_listener_mistakes_are_config_errors(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig.from_properties(props)
    assert message in str(e.value)


def test_a_stock_kafka_listener_setup_is_accepted() -> None:
    c = BrokerConfig.from_properties({
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "advertised.listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map":
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    })
    assert c.advertised_listeners == [Listener("PLAINTEXT", "localhost", 9092)]


@pytest.mark.parametrize(("key", "value", "minimum"), [
    ("min.insync.replicas", "0", 1),
    ("default.replication.factor", "0", 1),
    ("offsets.topic.replication.factor", "0", 1),
    ("transaction.state.log.replication.factor", "0", 1),
    ("transaction.state.log.min.isr", "0", 1),
    ("zookeeper.session.timeout.ms", "0", 1),
    ("zookeeper.connection.timeout.ms", "0", 1),
    ("replica.lag.time.max.ms", "0", 1),
    ("replica.fetch.max.bytes", "-1", 0),
    ("replica.fetch.min.bytes", "0", 1),
    ("replica.fetch.backoff.ms", "-1", 0),
    ("num.replica.fetchers", "0", 1),
    ("replica.high.watermark.checkpoint.interval.ms", "0", 1),
    ("controlled.shutdown.max.retries", "-1", 0),
    ("controller.socket.timeout.ms", "0", 1),
])
def test_values_below_the_minimum_are_refused(key: str, value: str, minimum: int) -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig.from_properties({key: value})
    assert f"{key}={value} is invalid: it must be >= {minimum}" in str(e.value)


def test_replica_fetch_wait_must_fit_the_lag_time_and_the_socket_timeout() -> None:
    config(replica_fetch_wait_max_ms="30000")  # equal is fine, as in Kafka
    with pytest.raises(ConfigError) as e:
        config(replica_fetch_wait_max_ms="30001", replica_socket_timeout_ms="60000")
    assert "replica.fetch.wait.max.ms=30001 is larger than replica.lag.time.max.ms=30000" in str(e.value)
    with pytest.raises(ConfigError) as e:
        config(replica_socket_timeout_ms="499")
    assert "replica.fetch.wait.max.ms=500 is larger than replica.socket.timeout.ms=499" in str(e.value)


@pytest.mark.parametrize("key", ["controlled.shutdown.enable", "unclean.leader.election.enable"])
def test_booleans_must_be_true_or_false(key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key}='yes' is invalid"):
        BrokerConfig.from_properties({key: "yes"})


# -- the topic keys ------------------------------------------------------------------------------------------


def test_replication_topic_keys_are_topic_configs_with_broker_defaults() -> None:
    assert {"min.insync.replicas", "unclean.leader.election.enable"} <= TOPIC_KEYS
    assert TOPIC_TO_BROKER_KEY["min.insync.replicas"] == "min.insync.replicas"
    assert TOPIC_TO_BROKER_KEY["unclean.leader.election.enable"] == "unclean.leader.election.enable"
    assert {"min.insync.replicas", "unclean.leader.election.enable"} <= DYNAMIC_KEYS  # as in Kafka
    props = LogConfig().to_properties()
    assert (props["min.insync.replicas"], props["unclean.leader.election.enable"]) == ("1", "false")


def test_topic_overrides_parse_and_print_like_kafka() -> None:
    c = LogConfig().with_overrides({"min.insync.replicas": "2", "unclean.leader.election.enable": "TRUE"})
    assert (c.min_insync_replicas, c.unclean_leader_election_enable) == (2, True)
    assert c.to_properties()["unclean.leader.election.enable"] == "true"
    assert LogConfig().with_overrides({"unclean.leader.election.enable": False}).unclean_leader_election_enable is False


@pytest.mark.parametrize(("props", "message"), [
    ({"min.insync.replicas": "0"}, "min.insync.replicas=0 is invalid: it must be an integer >= 1"),
    ({"min.insync.replicas": "two"}, "min.insync.replicas='two' is not an integer"),
    ({"unclean.leader.election.enable": "1"}, "unclean.leader.election.enable='1' is invalid: use true or false"),
])
def test_bad_topic_values_are_refused(props: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError) as e:
        LogConfig().with_overrides(props)
    assert message in str(e.value)


def test_dynamic_broker_values_reach_the_topic_defaults() -> None:
    static = BrokerConfig.from_properties({}).values
    merged = merge_dynamic(static, {"min.insync.replicas": "2", "unclean.leader.election.enable": "true"})
    defaults = default_log_config(merged)
    assert (defaults.min_insync_replicas, defaults.unclean_leader_election_enable) == (2, True)
