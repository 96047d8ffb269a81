"""SCRAM credentials in a 3-broker ZooKeeper cluster: a credential created through one broker is stored in
``/config/users/<user>`` beside the user's quota configs (Kafka's layout) and every broker takes it from the change
notification, so the user logs in on every broker's SASL_PLAINTEXT listener; deleting it on another broker refuses
the login everywhere, and the quota stays.

One module-scoped cluster; every wait is bounded and polls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient

from odradek.cluster.zk.server import ZooKeeperServer
from tests.broker.scram_listeners import scram_wrap
from tests.broker.test_scram_credential_handlers import quotas, set_quota
from tests.broker.wire import Conn
from tests.cluster.brokers import Cluster, ClusterBroker, serving_with_listener, wait_until
from tests.cluster.zk_process import unique_chroot
from tests.compat.secure_clients import Security, roundtrip

SASL_PORTS: dict[int, int] = {}


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from serving_with_listener(Cluster(tmp_path_factory.mktemp("scram-cluster"), unique_chroot(zookeeper)),
                                     SASL_PORTS, scram_wrap)


def alter(b: ClusterBroker, *alterations: UserScramCredentialAlteration) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 10000})
    for f in admin.alter_user_scram_credentials(list(alterations)).values():
        f.result(timeout=15)


def logs_in(broker_id: int, security: Security, topic: str) -> bool:
    try:
        return roundtrip("kafka-python", f"127.0.0.1:{SASL_PORTS[broker_id]}", security, topic, [b"v"],
                         timeout=6) == [b"v"]
    except Exception:  # refused logins raise each library's own error
        return False


def stored(c: Cluster, user: str) -> dict[str, Any]:
    zk = KazooClient(hosts=c.zk_connect)
    zk.start(timeout=10)
    try:
        data, _ = zk.get(f"/config/users/{user}")
        return json.loads(data)  # type: ignore[no-any-return]
    finally:
        zk.stop()
        zk.close()


def test_a_credential_made_on_one_broker_logs_in_on_every_broker(cluster: Cluster) -> None:
    first, second = cluster.brokers[1], cluster.brokers[2]
    with Conn(first.address) as conn:
        set_quota(conn, "alice", "producer_byte_rate", 4096.0)
    alter(first, UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"alice-secret"))
    doc = stored(cluster, "alice")
    assert doc["version"] == 1 and doc["config"]["producer_byte_rate"] == "4096"
    assert doc["config"]["SCRAM-SHA-256"].startswith("salt=") and doc["config"]["SCRAM-SHA-256"].endswith(
        ",iterations=8192")
    assert "secret" not in json.dumps(doc)
    alice = Security("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "alice-secret")
    for broker_id in cluster.brokers:
        wait_until(lambda b=broker_id: logs_in(b, alice, f"alice-{b}"), timeout_s=40,
                   what=f"alice to log in on broker {broker_id}")
    assert not logs_in(3, Security("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "wrong"), "alice-wrong")
    alter(second, UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256))
    for broker_id in cluster.brokers:
        wait_until(lambda b=broker_id: not logs_in(b, alice, f"alice-{b}"), timeout_s=40,
                   what=f"broker {broker_id} to refuse alice once her credential is deleted")
        with Conn(cluster.brokers[broker_id].address) as conn:  # the quota stayed, on every broker
            assert quotas(conn) == {"alice": {"producer_byte_rate": 4096.0}}
    assert stored(cluster, "alice")["config"] == {"producer_byte_rate": "4096"}
