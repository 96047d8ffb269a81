"""A secured 3-broker ZooKeeper cluster with the ACL authorizer on: brokers speak SASL_PLAINTEXT to each other as
``User:broker``, listed in ``super.users`` as Kafka requires (followers' fetches need CLUSTER_ACTION, coordinators'
requests too). Followers still replicate (acks=all fills every ISR); a client without ACLs is refused and, once an
ACL is created through one broker, allowed on every broker.

One module-scoped cluster; every wait is bounded and polls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType
from confluent_kafka.admin import ResourceType as CkType

from odradek.cluster.zk.server import ZooKeeperServer
from tests.broker.scram_listeners import scram_wrap
from tests.cluster.brokers import Cluster, serving_with_listener
from tests.cluster.zk_process import unique_chroot
from tests.compat.secure_clients import Security, confluent_config, roundtrip

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')
SASL_PORTS: dict[int, int] = {}
ALICE = Security("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")


def authorized_wrap(port: int) -> Callable[[list[str]], list[str]]:
    """The SCRAM tests' two listeners (PLAINTEXT for the fixtures: ANONYMOUS, a super user here; SASL_PLAINTEXT on
    ``port``), with PLAIN logins, SASL_PLAINTEXT between brokers and the authorizer on (later overrides win)."""
    props = {
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker;User:ANONYMOUS",
    }
    extra = [arg for k, v in props.items() for arg in ("--override", f"{k}={v}")]
    return lambda cmd: scram_wrap(port)(cmd) + extra


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from serving_with_listener(Cluster(tmp_path_factory.mktemp("authorized-cluster"), unique_chroot(zookeeper)),
                                     SASL_PORTS, authorized_wrap)


def test_followers_replicate_as_super_users_with_the_authorizer_on(cluster: Cluster) -> None:
    cluster.create_topic("guarded", partitions=3, replication_factor=3)  # waits for full ISRs
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 3})
    for i in range(300):
        p.produce("guarded", b"v%d" % i, partition=i % 3)
    assert p.flush(30) == 0  # acks=all: every follower fetched them (CLUSTER_ACTION as User:broker)
    for partition in range(3):
        assert cluster.isr("guarded", partition) == [1, 2, 3]


def test_a_client_is_refused_until_an_acl_made_on_one_broker_reaches_every_broker(cluster: Cluster) -> None:
    topic = "for-alice"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    errors: list[KafkaError] = []
    p = Producer({**confluent_config(f"127.0.0.1:{SASL_PORTS[1]}", ALICE), "message.timeout.ms": 10_000})
    p.produce(topic, b"x", on_delivery=lambda err, _m: errors.append(err) if err else None)
    p.flush(30)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    bindings = [AclBinding(CkType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
    for f in admin.create_acls(bindings).values():
        f.result(timeout=30)
    deadline = time.monotonic() + 30
    for broker_id, port in SASL_PORTS.items():  # every broker follows the ACL change notification
        while True:
            try:
                assert roundtrip("confluent", f"127.0.0.1:{port}", ALICE, topic, [b"a"], timeout=10)[-1:] == [b"a"]
                break
            except (AssertionError, RuntimeError):
                if time.monotonic() > deadline:
                    raise AssertionError(f"broker {broker_id} still refuses alice") from None
                time.sleep(0.5)
