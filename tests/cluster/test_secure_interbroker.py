"""Brokers that speak to each other over SASL_SSL: a 3-broker ZooKeeper cluster whose inter-broker listener is
SASL_SSL (TLS with host name verification, SASL/PLAIN with the broker's own login from its JAAS line). Followers
fetch, the controller's decisions travel and the ISR fills through that listener only; clients use a PLAINTEXT
listener of their own and a SASL_SSL one.

One module-scoped cluster; every wait is bounded and polls.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient

from odradek.cluster.zk.server import ZooKeeperServer
from tests.broker.scram_listeners import listeners_wrap
from tests.cluster.brokers import Cluster, serving_with_listener
from tests.cluster.zk_process import unique_chroot
from tests.compat.secure_clients import Security, roundtrip
from tests.security import certs

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')
SECURE_PORTS: dict[int, int] = {}


def secure_wrap(port: int, keystore: Path, truststore: Path) -> Callable[[list[str]], list[str]]:
    """The broker's command with a PLAINTEXT listener for clients (where the fixtures wait) and SASL_SSL between
    brokers."""
    return listeners_wrap(lambda host, plain: {
        "listeners": f"PLAINTEXT://{host}:{plain},SASL_SSL://{host}:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.password": "store-pw",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(truststore),
    })


@pytest.fixture(scope="module")
def cafile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("interbroker-certs")
    ca = certs.make_ca()
    yield certs.write_cert_pem(root / "ca.pem", ca), certs.write_pkcs12(root / "broker.p12",
                                                                         certs.issue(ca, "localhost"), b"store-pw")


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, cafile: tuple[Path, Path],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    truststore, keystore = cafile
    yield from serving_with_listener(Cluster(tmp_path_factory.mktemp("secure-cluster"), unique_chroot(zookeeper)),
                                     SECURE_PORTS, lambda port: secure_wrap(port, keystore, truststore))


def test_every_broker_registers_its_sasl_ssl_listener_as_the_inter_broker_one(zookeeper: ZooKeeperServer,
                                                                               cluster: Cluster) -> None:
    zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
    zk.start(timeout=10)
    try:
        for broker_id, port in SECURE_PORTS.items():
            data, _ = zk.get(f"/brokers/ids/{broker_id}")
            reg = json.loads(data)
            assert f"SASL_SSL://127.0.0.1:{port}" in reg["endpoints"]
            assert reg["listener_security_protocol_map"]["SASL_SSL"] == "SASL_SSL"
    finally:
        zk.stop()


def test_replication_and_the_isr_go_through_the_sasl_ssl_listener(cluster: Cluster, cafile: tuple[Path, Path]) -> None:
    cluster.create_topic("replicated-securely", partitions=3, replication_factor=3)  # waits for full ISRs
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 3})
    for i in range(300):
        p.produce("replicated-securely", b"v%d" % i, partition=i % 3)
    assert p.flush(30) == 0  # acks=all: every follower fetched them through SASL_SSL
    for partition in range(3):
        assert cluster.isr("replicated-securely", partition) == [1, 2, 3]
    # a client over SASL_SSL on any broker reads what the leader wrote
    truststore, _ = cafile
    alice = Security("SASL_SSL", "PLAIN", "alice", "alice-secret", cafile=truststore)
    for broker_id, port in SECURE_PORTS.items():
        topic = f"client-over-sasl-ssl-{broker_id}"
        assert roundtrip("confluent", f"localhost:{port}", alice, topic, [b"a", b"b"]) == [b"a", b"b"]
