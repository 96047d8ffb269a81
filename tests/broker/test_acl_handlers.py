"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) against real single-node broker processes
(odradek/broker/handlers/acls.py): Kafka's errors (SECURITY_DISABLED without an authorizer,
CLUSTER_AUTHORIZATION_FAILED for a caller without CLUSTER ALTER/DESCRIBE, INVALID_REQUEST for bindings and filters
Kafka refuses), describe filters (MATCH, ANY, prefixed), deletion results, ACLs kept across a restart in the
metadata file; and confluent-kafka's and kafka-python's admin ACL calls.

Requests are kio-built frames over raw sockets (``tests/broker/wire.py``); the connections are unauthenticated
(User:ANONYMOUS), made a super user where a test needs to change ACLs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka.admin import AclBinding as CkBinding
from confluent_kafka.admin import AclBindingFilter as CkFilter
from confluent_kafka.admin import AclOperation as CkOp
from confluent_kafka.admin import AclPermissionType as CkPerm
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import ResourcePatternType as CkPattern
from confluent_kafka.admin import ResourceType as CkType

from odradek.cluster.metadata import METADATA_FILE
from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from tests.broker.conftest import BrokerFactory
from tests.broker.wire import Conn

AUTHORIZER = "authorizer.class.name=kafka.security.authorizer.AclAuthorizer"
ADMIN = "super.users=User:ANONYMOUS"
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
ALL, READ, WRITE, DESCRIBE, ALTER = 2, 3, 4, 8, 7
DENY, ALLOW = 2, 3


def creation(rtype: int, name: str, principal: str = "User:alice", op: int = READ, perm: int = ALLOW,
             pattern: int = LITERAL, host: str = "*") -> dict[str, Any]:
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": pattern, "principal": principal,
            "host": host, "operation": op, "permission_type": perm}


def selector(rtype: int = ANY, name: str | None = None, pattern: int = ANY, principal: str | None = None,
             host: str | None = None, op: int = ANY, perm: int = ANY) -> dict[str, Any]:
    return {"resource_type_filter": rtype, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": principal, "host_filter": host, "operation": op, "permission_type": perm}


def create(conn: Conn, *creations: dict[str, Any], version: int = 3) -> list[tuple[int, str | None]]:
    response = conn.request(apis.CREATE_ACLS, version, {"creations": list(creations)})
    return [(int(r.error_code), r.error_message) for r in response.results]


def describe_raw(conn: Conn, version: int = 3, **kw: Any) -> Any:
    return conn.request(apis.DESCRIBE_ACLS, version, selector(**kw))


def describe(conn: Conn, **kw: Any) -> set[tuple[Any, ...]]:
    """Every (resource type, name, pattern type, principal, host, operation, permission) described."""
    response = describe_raw(conn, **kw)
    assert (int(response.error_code), response.error_message) == (0, None)
    return {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation, a.permission_type)
            for r in response.resources for a in r.acls}


def delete(conn: Conn, *filters: dict[str, Any], version: int = 3) -> list[tuple[int, set[tuple[Any, ...]]]]:
    response = conn.request(apis.DELETE_ACLS, version, {"filters": list(filters)})
    out = []
    for r in response.filter_results:
        assert all(int(m.error_code) == 0 for m in r.matching_acls)
        out.append((int(r.error_code), {(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                                         m.operation, m.permission_type) for m in r.matching_acls}))
    return out


def test_without_an_authorizer_the_apis_answer_security_disabled(broker_factory: BrokerFactory) -> None:
    b = broker_factory()
    with Conn(b.address) as conn:
        response = describe_raw(conn)
        assert (int(response.error_code), response.error_message) == (ErrorCode.SECURITY_DISABLED,
                                                                      "No Authorizer is configured on the broker")
        assert create(conn, creation(TOPIC, "t"), creation(GROUP, "g")) == [
            (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")] * 2
        assert delete(conn, selector()) == [(ErrorCode.SECURITY_DISABLED, set())]


def test_a_caller_without_cluster_alter_or_describe_is_refused(broker_factory: BrokerFactory) -> None:
    b = broker_factory(AUTHORIZER, "super.users=User:admin")
    with Conn(b.address) as conn:
        assert int(describe_raw(conn).error_code) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert [c for c, _ in create(conn, creation(TOPIC, "t"))] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
        assert delete(conn, selector(), selector(TOPIC)) == [(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, set())] * 2
    # allow.everyone.if.no.acl.found opens the cluster while it has no ACL of its own
    b2 = broker_factory(AUTHORIZER, "allow.everyone.if.no.acl.found=true")
    with Conn(b2.address) as conn:
        assert create(conn, creation(CLUSTER, "kafka-cluster", "User:admin", ALTER)) == [(0, None)]
        assert [c for c, _ in create(conn, creation(TOPIC, "t"))] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
        assert int(describe_raw(conn).error_code) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # ALTER of another


def test_create_describe_delete_and_keep_across_a_restart(broker_factory: BrokerFactory, tmp_path: Any) -> None:
    data = tmp_path / "acl-data"
    b = broker_factory(AUTHORIZER, ADMIN, data_dir=data)
    orders = (TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW)
    prefixed = (TOPIC, "ord", PREFIXED, "User:bob", "10.0.0.1", WRITE, DENY)
    wildcard = (TOPIC, "*", LITERAL, "User:*", "*", DESCRIBE, ALLOW)
    group = (GROUP, "billing", LITERAL, "User:alice", "*", ALL, ALLOW)
    with Conn(b.address) as conn:
        results = create(conn, creation(TOPIC, "orders"), creation(TOPIC, "ord", "User:bob", WRITE, DENY, PREFIXED,
                                                                    "10.0.0.1"),
                         creation(TOPIC, "*", "User:*", DESCRIBE), creation(GROUP, "billing", op=ALL),
                         creation(TOPIC, "orders"),  # again: succeeds, changes nothing
                         creation(CLUSTER, "my-cluster", op=ALTER), creation(TOPIC, ""), creation(TOPIC, "a/b"),
                         creation(TOPIC, "x", pattern=MATCH), creation(TOPIC, "x", op=ANY),
                         creation(TOPIC, "x", principal="alice"), creation(99, "x"))
        assert [c for c, _ in results] == [0] * 5 + [ErrorCode.INVALID_REQUEST] * 7
        assert results[5][1] == "Failed to create ACL: The only valid name for the CLUSTER resource is kafka-cluster"
        everything = {orders, prefixed, wildcard, group}
        assert describe(conn) == everything
        assert describe(conn, rtype=TOPIC, name="orders", pattern=MATCH) == {orders, prefixed, wildcard}
        assert describe(conn, rtype=TOPIC, name="orders", pattern=ANY) == {orders}
        assert describe(conn, rtype=TOPIC, pattern=PREFIXED) == {prefixed}
        assert describe(conn, principal="User:alice", op=ALL) == {group}
        assert describe(conn, host="10.0.0.1", perm=DENY) == {prefixed}
        for version in (1, 2):
            assert {(r.resource_name, r.pattern_type) for r in describe_raw(conn, version).resources} == \
                {("orders", LITERAL), ("ord", PREFIXED), ("*", LITERAL), ("billing", LITERAL)}
        response = describe_raw(conn, rtype=0)
        assert int(response.error_code) == ErrorCode.INVALID_REQUEST and not response.resources
    assert b.stop() == 0
    stored = json.loads((data / METADATA_FILE).read_text())["acls"]
    assert {"resourceType": "Topic", "patternType": "PREFIXED", "name": "ord", "acls": [
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Write", "host": "10.0.0.1"}]} in stored
    b.start()
    with Conn(b.address) as conn:
        assert describe(conn) == everything
        # a binding two filters match is reported by the first; a filter matching nothing answers no ACLs
        assert delete(conn, selector(TOPIC, "orders", MATCH, principal="User:alice"), selector(TOPIC),
                      selector(GROUP, "nothing", LITERAL), selector(op=0), version=1) == [
            (0, {orders}), (0, {prefixed, wildcard}), (0, set()),
            (ErrorCode.INVALID_REQUEST, set())]
        assert describe(conn) == {group}
    assert b.stop() == 0
    b.start()
    with Conn(b.address) as conn:
        assert describe(conn) == {group}


def test_confluent_kafka_and_kafka_python_admin_acl_calls(broker_factory: BrokerFactory) -> None:
    b = broker_factory(AUTHORIZER, ADMIN)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    read = CkBinding(CkType.TOPIC, "orders", CkPattern.LITERAL, "User:alice", "*", CkOp.READ, CkPerm.ALLOW)
    deny = CkBinding(CkType.GROUP, "g-", CkPattern.PREFIXED, "User:*", "10.1.1.1", CkOp.ALL, CkPerm.DENY)
    for future in admin.create_acls([read, deny], request_timeout=10).values():
        assert future.result(timeout=15) is None
    everything = CkFilter(CkType.ANY, None, CkPattern.ANY, None, None, CkOp.ANY, CkPerm.ANY)
    assert set(admin.describe_acls(everything, request_timeout=10).result(timeout=15)) == {read, deny}
    matching = CkFilter(CkType.GROUP, "g-1", CkPattern.MATCH, None, None, CkOp.ANY, CkPerm.ANY)
    assert admin.describe_acls(matching, request_timeout=10).result(timeout=15) == [deny]

    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10_000)
    try:
        write = ACL("User:carol", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, "orders", ACLResourcePatternType.LITERAL))
        created = kp.create_acls([write])
        assert not created["failed"] and len(created["succeeded"]) == 1
        acls, error = kp.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                 ResourcePatternFilter(ResourceType.TOPIC, "orders",
                                                                       ACLResourcePatternType.LITERAL)))
        assert error.errno == 0
        assert {(a.principal, a.operation) for a in acls} == {("User:alice", ACLOperation.READ),
                                                              ("User:carol", ACLOperation.WRITE)}
        [(_filter, deleted, error)] = kp.delete_acls([ACLFilter(
            "User:carol", None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))])
        assert error.errno == 0 and [a.principal for a in deleted] == ["User:carol"]
    finally:
        kp.close()
    removed = admin.delete_acls([everything], request_timeout=10)[everything].result(timeout=15)
    assert set(removed) == {read, deny}
    assert admin.describe_acls(everything, request_timeout=10).result(timeout=15) == []


@pytest.mark.parametrize("value", ["com.example.Authorizer", "kafka.security.auth.SimpleAclAuthorizer"])
def test_an_unknown_authorizer_class_is_a_config_error(value: str) -> None:
    from odradek.broker.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match=r"AclAuthorizer and .*\.StandardAuthorizer"):
        BrokerConfig.from_properties({"authorizer.class.name": value})
