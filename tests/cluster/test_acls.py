"""ACLs in a 3-broker ZooKeeper cluster: an ACL created through one broker is written to Kafka's znodes
(``/kafka-acl/Topic/<name>``, ``/kafka-acl-extended/prefixed/...``) with a change notification, and every broker
describes it; deleted through another broker, it is gone everywhere and its znode removed.

One module-scoped cluster (``super.users=User:ANONYMOUS`` so the test's plain connections may change ACLs); every
wait is bounded and polls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from odradek.cluster.zk.server import ZooKeeperServer
from tests.broker.test_acl_handlers import (
    ALLOW,
    DENY,
    LITERAL,
    MATCH,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    create,
    creation,
    delete,
    describe,
    selector,
)
from tests.broker.wire import Conn
from tests.cluster.brokers import Cluster, serving, wait_until
from tests.cluster.zk_process import unique_chroot


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from serving(Cluster(tmp_path_factory.mktemp("acl-cluster"), unique_chroot(zookeeper), overrides=[
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer", "super.users=User:ANONYMOUS"]))


def znode(c: Cluster, path: str) -> bytes | None:
    zk = KazooClient(hosts=c.zk_connect)
    zk.start(timeout=10)
    try:
        return zk.get(path)[0] if zk.exists(path) else None
    finally:
        zk.stop()
        zk.close()


def described_everywhere(c: Cluster, wanted: set[tuple[object, ...]]) -> None:
    for broker_id, b in c.brokers.items():
        def sees(b=b) -> bool:  # type: ignore[no-untyped-def]
            with Conn(b.address) as conn:
                return describe(conn, rtype=TOPIC, name="orders", pattern=MATCH) == wanted
        wait_until(sees, timeout_s=20, what=f"broker {broker_id} to describe {wanted}")


def test_an_acl_created_on_one_broker_is_described_by_all(cluster: Cluster) -> None:
    first, second = cluster.brokers[1], cluster.brokers[2]
    literal = (TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW)
    prefixed = (TOPIC, "ord", PREFIXED, "User:bob", "*", WRITE, DENY)
    with Conn(first.address) as conn:
        assert create(conn, creation(TOPIC, "orders"), creation(TOPIC, "ord", "User:bob", WRITE, DENY, PREFIXED)) \
            == [(0, None), (0, None)]
    assert json.loads(znode(cluster, "/kafka-acl/Topic/orders") or b"{}") == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    assert znode(cluster, "/kafka-acl-extended/prefixed/Topic/ord") is not None
    described_everywhere(cluster, {literal, prefixed})
    with Conn(second.address) as conn:  # a change made elsewhere, on top of what broker 1 wrote
        assert create(conn, creation(TOPIC, "orders", "User:carol")) == [(0, None)]
    described_everywhere(cluster, {literal, prefixed, (TOPIC, "orders", LITERAL, "User:carol", "*", READ, ALLOW)})
    with Conn(cluster.brokers[3].address) as conn:
        assert delete(conn, selector(TOPIC, "orders", MATCH)) == [
            (0, {literal, prefixed, (TOPIC, "orders", LITERAL, "User:carol", "*", READ, ALLOW)})]
    described_everywhere(cluster, set())
    assert znode(cluster, "/kafka-acl/Topic/orders") is None
    assert znode(cluster, "/kafka-acl-extended/prefixed/Topic/ord") is None
