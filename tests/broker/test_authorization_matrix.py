"""Every supported API under Kafka's ACL authorizer (odradek/broker/authorization.py and the handlers): one
in-process broker with ``authorizer.class.name``, ``super.users=User:admin`` and SASL PLAIN users admin, alice
and bob. Per API, in raw-wire requests (``tests/broker/wire.py``):

1. alice, with none of the ACLs Kafka requires, is refused with Kafka's error in Kafka's place, and the request
   changes nothing (where it could change something);
2. the ACLs are granted one at a time (by admin, through CreateAcls): until the last, the next check refuses
   (e.g. OffsetCommit: GROUP_AUTHORIZATION_FAILED, then TOPIC_AUTHORIZATION_FAILED);
3. with exactly those ACLs alice is allowed, while bob (no ACL) is still refused.

The cases are keyed by API key and the test is parametrized over ``apis.SUPPORTED``: a new API without a case
fails. APIs whose refusal Kafka shows only by leaving things out (ListGroups, ListTransactions, all-topics
Metadata, DescribeCluster's operations) report ``HIDDEN`` (or 0 operations) while refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from tests.broker import inprocess, wire
from tests.broker.wire import Conn

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')
PROPS = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
    "inter.broker.listener.name": "SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:admin",
    "group.initial.rebalance.delay.ms": "0",
}
# resource types and operations (Kafka's codes)
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
LITERAL, ALLOW, ANY = 3, 3, 1
E = ErrorCode
T29, G30, C31, X53 = (E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED,
                      E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
AUTH_ERRORS = {T29, G30, C31, X53}
HIDDEN = -1  # refused by leaving the resource out of the answer
ZERO_UUID = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[inprocess.InProcessBroker]:
    yield from inprocess.serving(tmp_path_factory, "authz", PROPS)


def port(node: inprocess.InProcessBroker) -> tuple[str, int]:
    return ("127.0.0.1", node.server.ports["SASL_PLAINTEXT"])


def login(node: inprocess.InProcessBroker, user: str) -> Conn:
    c = Conn(port(node))
    assert int(c.request(apis.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code) == 0
    token = b"\0" + user.encode() + b"\0" + f"{user}-secret".encode()
    assert int(c.request(apis.SASL_AUTHENTICATE, 2, {"auth_bytes": token}).error_code) == 0
    return c


Acl = tuple[int, str, int]  # resource type, name, operation (LITERAL, ALLOW, any host)


def grant(admin: Conn, principal: str, acl: Acl) -> None:
    rtype, name, op = acl
    response = admin.request(apis.CREATE_ACLS, 3, {"creations": [{
        "resource_type": rtype, "resource_name": name, "resource_pattern_type": LITERAL, "principal": principal,
        "host": "*", "operation": op, "permission_type": ALLOW}]})
    assert [int(r.error_code) for r in response.results] == [0]


def revoke_all(admin: Conn, principal: str) -> None:
    admin.request(apis.DELETE_ACLS, 3, {"filters": [{
        "resource_type_filter": ANY, "resource_name_filter": None, "pattern_type_filter": ANY,
        "principal_filter": principal, "host_filter": None, "operation": ANY, "permission_type": ANY}]})


@dataclass
class Names:
    """The resources of one case: its own topic (2 records), group (with a committed offset) and transactional
    id (with a producer id), made by admin."""

    topic: str
    group: str
    txn: str
    pid: int = -1
    broker: str = "0"  # this broker's id, the name of its config resource


@dataclass
class Case:
    version: int
    body: Callable[[Names], dict[str, Any]]
    code: Callable[[Any, Names], int]  # the error this API answers where Kafka puts its authorization error
    acls: list[Callable[[Names], Acl]] = field(default_factory=list)
    denials: list[int] = field(default_factory=list)  # the error with the first i ACLs granted
    ok: set[int] | None = None  # the codes an allowed request may answer (None: any but an authorization error)
    state: Callable[[Conn, Names], Any] | None = None  # what a refused request must not change
    fresh: bool = False  # sent on an unauthenticated connection (SASL)


def topic_acl(op: int) -> Callable[[Names], Acl]:
    return lambda n: (TOPIC, n.topic, op)


def group_acl(op: int) -> Callable[[Names], Acl]:
    return lambda n: (GROUP, n.group, op)


def txn_acl(op: int) -> Callable[[Names], Acl]:
    return lambda n: (TXN, n.txn, op)


def cluster_acl(op: int) -> Callable[[Names], Acl]:
    return lambda n: (CLUSTER, "kafka-cluster", op)


def top(r: Any, n: Names) -> int:
    return int(r.error_code)


def first_error(*codes: int) -> int:
    return next((c for c in codes if c), 0)


def partition_code(topics: str = "topics", partitions: str = "partitions", error: str = "error_code",
                   ) -> Callable[[Any, Names], int]:
    def code(r: Any, n: Names) -> int:
        return first_error(*(int(getattr(p, error)) for t in getattr(r, topics) for p in getattr(t, partitions)))
    return code


def group_or_partition(r: Any, n: Names) -> int:
    return first_error(int(r.error_code), partition_code()(r, n))


def latest(admin: Conn, n: Names) -> int:
    return wire.list_offsets(admin, n.topic, [0])[0]


def earliest(admin: Conn, n: Names) -> int:
    return wire.list_offsets(admin, n.topic, [0], wire.EARLIEST)[0]


def partition_count(admin: Conn, n: Names) -> int:
    (t,) = wire.metadata(admin, [n.topic], auto_create=False).topics
    return len(t.partitions) if int(t.error_code) == 0 else -1


def committed(admin: Conn, n: Names) -> Any:
    r = admin.request(apis.OFFSET_FETCH, 8, {"groups": [{"group_id": n.group, "topics": None}]})
    return [(t.name, p.partition_index, p.committed_offset) for g in r.groups for t in g.topics for p in t.partitions]


def groups_listed(admin: Conn, n: Names) -> bool:
    return n.group in {g.group_id for g in admin.request(apis.LIST_GROUPS, 4, {"states_filter": []}).groups}


def topic_config(admin: Conn, n: Names) -> Any:
    r = admin.request(apis.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": n.topic, "configuration_keys": ["retention.ms"]}]})
    return [(c.name, c.value) for res in r.results for c in res.configs]


def acl_count(admin: Conn, n: Names) -> int:
    r = admin.request(apis.DESCRIBE_ACLS, 3, {
        "resource_type_filter": ANY, "resource_name_filter": None, "pattern_type_filter": ANY,
        "principal_filter": "User:carl", "host_filter": None, "operation": ANY, "permission_type": ANY})
    return sum(len(res.acls) for res in r.resources)


def one_partition(n: Names, **fields: Any) -> list[dict[str, Any]]:
    return [{"name": n.topic, "partitions": [{"partition_index": 0, **fields}]}]


def offset_for_leader_epoch(r: Any, n: Names) -> int:
    return partition_code(partitions="partitions")(r, n)


def config_resources(n: Names, **kw: Any) -> list[dict[str, Any]]:
    return [{"resource_type": 2, "resource_name": n.topic, **kw}, {"resource_type": 4, "resource_name": n.broker, **kw}]


def results_code(attr: str) -> Callable[[Any, Names], int]:
    return lambda r, n: first_error(*(int(x.error_code) for x in getattr(r, attr)))


CARL_ACL = {"resource_type": TOPIC, "resource_name": "zz", "resource_pattern_type": LITERAL,
            "principal": "User:carl", "host": "*", "operation": READ, "permission_type": ALLOW}
CARL_FILTER = {"resource_type_filter": ANY, "resource_name_filter": None, "pattern_type_filter": ANY,
               "principal_filter": "User:carl", "host_filter": None, "operation": ANY, "permission_type": ANY}
CARL = {"entity_type": "user", "entity_name": "carl"}
TXN_OFFSET = {"committed_offset": 0, "committed_leader_epoch": -1, "committed_metadata": ""}

CASES: dict[int, Case] = {
    apis.PRODUCE: Case(9, lambda n: wire.produce_values(n.topic, 0, wire.batch(b"x")),
                       partition_code("responses", "partition_responses"), [topic_acl(WRITE)], [T29], {0}, latest),
    apis.FETCH: Case(12, lambda n: wire.fetch_values({(n.topic, 0): 0}), partition_code("responses"),
                     [topic_acl(READ)], [T29], {0}),
    apis.LIST_OFFSETS: Case(7, lambda n: wire.list_offsets_values(n.topic, [0]), partition_code(),
                            [topic_acl(DESCRIBE)], [T29], {0}),
    apis.METADATA: Case(12, lambda n: {"topics": [{"name": n.topic}], "allow_auto_topic_creation": False},
                        lambda r, n: int(r.topics[0].error_code), [topic_acl(DESCRIBE)], [T29], {0}),
    apis.OFFSET_COMMIT: Case(8, lambda n: {"group_id": n.group, "generation_id_or_member_epoch": -1, "member_id": "",
                                           "topics": one_partition(n, committed_offset=1, committed_metadata="")},
                             partition_code(), [group_acl(READ), topic_acl(READ)], [G30, T29], {0}, committed),
    apis.OFFSET_FETCH: Case(8, lambda n: {"groups": [{"group_id": n.group, "topics": [
                                {"name": n.topic, "partition_indexes": [0]}]}]},
                            lambda r, n: first_error(*(int(g.error_code) for g in r.groups), *(
                                int(p.error_code) for g in r.groups for t in g.topics for p in t.partitions)),
                            [group_acl(DESCRIBE), topic_acl(DESCRIBE)], [G30, T29], {0}),
    apis.FIND_COORDINATOR: Case(4, lambda n: {"key_type": 0, "coordinator_keys": [n.group]},
                                results_code("coordinators"), [group_acl(DESCRIBE)], [G30], {0}),
    apis.JOIN_GROUP: Case(5, lambda n: {"group_id": n.group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
                                        "member_id": "", "protocol_type": "consumer",
                                        "protocols": [{"name": "range", "metadata": b""}]},
                          top, [group_acl(READ)], [G30], {E.MEMBER_ID_REQUIRED}),
    apis.HEARTBEAT: Case(4, lambda n: {"group_id": n.group, "generation_id": 1, "member_id": "m"}, top,
                         [group_acl(READ)], [G30]),
    apis.LEAVE_GROUP: Case(5, lambda n: {"group_id": n.group, "members": [{"member_id": "m"}]}, top,
                           [group_acl(READ)], [G30]),
    apis.SYNC_GROUP: Case(5, lambda n: {"group_id": n.group, "generation_id": 1, "member_id": "m",
                                        "assignments": []}, top, [group_acl(READ)], [G30]),
    apis.DESCRIBE_GROUPS: Case(5, lambda n: {"groups": [n.group], "include_authorized_operations": True},
                               results_code("groups"), [group_acl(DESCRIBE)], [G30], {0}),
    apis.LIST_GROUPS: Case(4, lambda n: {"states_filter": []},
                           lambda r, n: 0 if n.group in {g.group_id for g in r.groups} else HIDDEN,
                           [group_acl(DESCRIBE)], [HIDDEN], {0}),
    apis.DELETE_GROUPS: Case(2, lambda n: {"groups_names": [n.group]}, results_code("results"),
                             [group_acl(DELETE)], [G30], {0}, groups_listed),
    apis.OFFSET_DELETE: Case(0, lambda n: {"group_id": n.group, "topics": one_partition(n)}, group_or_partition,
                             [group_acl(DELETE), topic_acl(READ)], [G30, T29], {0}, committed),
    apis.API_VERSIONS: Case(3, lambda n: {"client_software_name": "t", "client_software_version": "1"}, top, ok={0}),
    apis.SASL_HANDSHAKE: Case(1, lambda n: {"mechanism": "PLAIN"}, top, ok={0}, fresh=True),
    apis.SASL_AUTHENTICATE: Case(2, lambda n: {"auth_bytes": b"\0bob\0bob-secret"}, top, ok={0}, fresh=True),
    apis.CREATE_TOPICS: Case(7, lambda n: {"topics": [{"name": n.topic + "-new", "num_partitions": 1,
                                                      "replication_factor": 1, "assignments": [], "configs": []}],
                                           "timeout": 5000, "validate_only": False},
                             results_code("topics"), [lambda n: (TOPIC, n.topic + "-new", CREATE)], [T29], {0},
                             lambda a, n: partition_count(a, Names(n.topic + "-new", "", ""))),
    apis.DELETE_TOPICS: Case(6, lambda n: {"topics": [{"name": n.topic, "topic_id": ZERO_UUID}], "timeout": 5000},
                             results_code("responses"), [topic_acl(DELETE)], [T29], {0}, partition_count),
    apis.DELETE_RECORDS: Case(2, lambda n: {"topics": one_partition(n, offset=1), "timeout": 5000},
                              partition_code(), [topic_acl(DELETE)], [T29], {0}, earliest),
    apis.OFFSET_FOR_LEADER_EPOCH: Case(4, lambda n: {"replica_id": -1, "topics": [{"topic": n.topic, "partitions": [
                                           {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
                                       offset_for_leader_epoch, [topic_acl(DESCRIBE)], [T29], {0}),
    apis.DESCRIBE_CONFIGS: Case(4, lambda n: {"resources": config_resources(n, configuration_keys=None)},
                                results_code("results"), [topic_acl(DESCRIBE_CONFIGS), cluster_acl(DESCRIBE_CONFIGS)],
                                [T29, C31], {0}),
    apis.ALTER_CONFIGS: Case(2, lambda n: {"resources": [
                                 {"resource_type": 2, "resource_name": n.topic,
                                  "configs": [{"name": "retention.ms", "value": "100000"}]},
                                 {"resource_type": 4, "resource_name": n.broker, "configs": []}]},
                             results_code("responses"), [topic_acl(ALTER_CONFIGS), cluster_acl(ALTER_CONFIGS)],
                             [T29, C31], {0}, topic_config),
    apis.INCREMENTAL_ALTER_CONFIGS: Case(
        1, lambda n: {"resources": [
            {"resource_type": 2, "resource_name": n.topic,
             "configs": [{"name": "retention.ms", "config_operation": 0, "value": "100000"}]},
            {"resource_type": 4, "resource_name": n.broker, "configs": []}], "validate_only": False},
        results_code("responses"), [topic_acl(ALTER_CONFIGS), cluster_acl(ALTER_CONFIGS)], [T29, C31], {0},
        topic_config),
    apis.CREATE_PARTITIONS: Case(3, lambda n: {"topics": [{"name": n.topic, "count": 2, "assignments": None}],
                                               "timeout": 5000, "validate_only": False},
                                 results_code("results"), [topic_acl(ALTER)], [T29], {0}, partition_count),
    apis.DESCRIBE_LOG_DIRS: Case(4, lambda n: {"topics": None}, top, [cluster_acl(DESCRIBE)], [C31], {0}),
    apis.ELECT_LEADERS: Case(2, lambda n: {"election_type": 0, "topic_partitions": [
                                 {"topic": n.topic, "partitions": [0]}], "timeout": 5000},
                             lambda r, n: first_error(int(r.error_code), partition_code(
                                 "replica_election_results", "partition_result")(r, n)),
                             [cluster_acl(ALTER)], [C31], {E.ELECTION_NOT_NEEDED}),
    apis.ALTER_PARTITION_REASSIGNMENTS: Case(
        1, lambda n: {"timeout": 5000, "topics": [{"name": n.topic, "partitions": [
            {"partition_index": 0, "replicas": [0]}]}]}, top, [cluster_acl(ALTER)], [C31], {0}),
    apis.LIST_PARTITION_REASSIGNMENTS: Case(0, lambda n: {"timeout": 5000, "topics": None}, top,
                                            [cluster_acl(DESCRIBE)], [C31], {0}),
    apis.DESCRIBE_CLUSTER: Case(2, lambda n: {"include_cluster_authorized_operations": True, "endpoint_type": 1},
                                lambda r, n: int(r.error_code) or (C31 if r.cluster_authorized_operations == 0 else 0),
                                [cluster_acl(DESCRIBE)], [C31], {0}),
    apis.DESCRIBE_PRODUCERS: Case(0, lambda n: {"topics": [{"name": n.topic, "partition_indexes": [0]}]},
                                  partition_code(), [topic_acl(READ)], [T29], {0}),
    apis.WRITE_TXN_MARKERS: Case(1, lambda n: {"markers": [{"producer_id": 4321, "producer_epoch": 0,
                                                           "transaction_result": False, "coordinator_epoch": 0,
                                                           "topics": [{"name": n.topic, "partition_indexes": [0]}]}]},
                                 lambda r, n: first_error(*(int(p.error_code) for m in r.markers for t in m.topics
                                                            for p in t.partitions)),
                                 [cluster_acl(CLUSTER_ACTION)], [C31], {0}, latest),
    apis.INIT_PRODUCER_ID: Case(5, lambda n: {"transactional_id": n.txn, "transaction_timeout": 60_000,
                                              "producer_id": -1, "producer_epoch": -1},
                                top, [txn_acl(WRITE)], [X53], {0}),
    apis.ADD_PARTITIONS_TO_TXN: Case(
        3, lambda n: {"v3_and_below_transactional_id": n.txn, "v3_and_below_producer_id": n.pid,
                      "v3_and_below_producer_epoch": 0,
                      "v3_and_below_topics": [{"name": n.topic, "partitions": [0]}]},
        lambda r, n: first_error(*(int(p.partition_error_code) for t in r.results_by_topic_v3_and_below
                                   for p in t.results_by_partition)),
        [txn_acl(WRITE), topic_acl(WRITE)], [X53, T29], {0}),
    apis.ADD_OFFSETS_TO_TXN: Case(4, lambda n: {"transactional_id": n.txn, "producer_id": n.pid,
                                                "producer_epoch": 0, "group_id": n.group},
                                  top, [txn_acl(WRITE), group_acl(READ)], [X53, G30], {0}),
    apis.END_TXN: Case(4, lambda n: {"transactional_id": n.txn, "producer_id": n.pid, "producer_epoch": 0,
                                     "committed": False}, top, [txn_acl(WRITE)], [X53]),
    apis.TXN_OFFSET_COMMIT: Case(3, lambda n: {"transactional_id": n.txn, "group_id": n.group, "producer_id": n.pid,
                                               "producer_epoch": 0, "generation_id": -1, "member_id": "",
                                               "topics": one_partition(n, **TXN_OFFSET)},
                                 partition_code(), [txn_acl(WRITE), group_acl(READ), topic_acl(READ)],
                                 [X53, G30, T29], state=committed),
    apis.DESCRIBE_TRANSACTIONS: Case(0, lambda n: {"transactional_ids": [n.txn]}, results_code("transaction_states"),
                                     [txn_acl(DESCRIBE)], [X53], {0}),
    apis.LIST_TRANSACTIONS: Case(1, lambda n: {"state_filters": [], "producer_id_filters": [], "duration_filter": -1},
                                 lambda r, n: int(r.error_code) or (
                                     0 if n.txn in {t.transactional_id for t in r.transaction_states} else HIDDEN),
                                 [txn_acl(DESCRIBE)], [HIDDEN], {0}),
    apis.DESCRIBE_CLIENT_QUOTAS: Case(1, lambda n: {"components": [], "strict": False}, top,
                                      [cluster_acl(DESCRIBE_CONFIGS)], [C31], {0}),
    apis.ALTER_CLIENT_QUOTAS: Case(1, lambda n: {"entries": [{"entity": [CARL],
                                                              "ops": [{"key": "producer_byte_rate", "value": 1024.0,
                                                                       "remove": False}]}], "validate_only": True},
                                   results_code("entries"), [cluster_acl(ALTER_CONFIGS)], [C31], {0}),
    apis.DESCRIBE_USER_SCRAM_CREDENTIALS: Case(0, lambda n: {"users": None}, top, [cluster_acl(DESCRIBE)], [C31], {0}),
    apis.ALTER_USER_SCRAM_CREDENTIALS: Case(0, lambda n: {"deletions": [{"name": "carl", "mechanism": 1}],
                                                          "upsertions": []},
                                            results_code("results"), [cluster_acl(ALTER)], [C31],
                                            {91}),  # RESOURCE_NOT_FOUND
    apis.DESCRIBE_ACLS: Case(3, lambda n: CARL_FILTER, top, [cluster_acl(DESCRIBE)], [C31], {0}),
    apis.CREATE_ACLS: Case(3, lambda n: {"creations": [CARL_ACL]}, results_code("results"), [cluster_acl(ALTER)],
                           [C31], {0}, acl_count),
    apis.DELETE_ACLS: Case(3, lambda n: {"filters": [CARL_FILTER]}, results_code("filter_results"),
                           [cluster_acl(ALTER)], [C31], {0}),
}


def prepare(node: inprocess.InProcessBroker, admin: Conn, api: int) -> Names:
    n = Names(f"t{api}", f"g{api}", f"x{api}", broker=str(node.broker.node_id))
    created = admin.request(apis.CREATE_TOPICS, 7, {"topics": [{"name": n.topic, "num_partitions": 1,
                                                                "replication_factor": 1, "assignments": [],
                                                                "configs": []}], "timeout": 5000})
    assert int(created.topics[0].error_code) == 0
    assert wire.produce(admin, n.topic, 0, wire.batch(b"a", b"b")).error_code == 0
    committed = admin.request(apis.OFFSET_COMMIT, 8, {
        "group_id": n.group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": one_partition(n, committed_offset=1, committed_metadata="")})
    assert partition_code()(committed, n) == 0
    init = admin.request(apis.INIT_PRODUCER_ID, 5, {"transactional_id": n.txn, "transaction_timeout": 60_000,
                                                    "producer_id": -1, "producer_epoch": -1})
    assert int(init.error_code) == 0
    n.pid = int(init.producer_id)
    return n


@pytest.mark.parametrize("api", sorted(apis.SUPPORTED), ids=lambda k: apis.SUPPORTED[k].name)
def test_each_api_checks_what_kafka_checks(node: inprocess.InProcessBroker, api: int) -> None:
    case = CASES.get(api)
    assert case is not None, f"{apis.SUPPORTED[api].name} has no authorization case: add one (and its checks)"
    assert len(case.acls) == len(case.denials)
    with login(node, "admin") as admin, login(node, "alice") as alice, login(node, "bob") as bob:
        n = prepare(node, admin, api)
        if case.fresh:
            alice = Conn(port(node))
            if api == apis.SASL_AUTHENTICATE:
                assert int(alice.request(apis.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code) == 0
        try:
            before = case.state(admin, n) if case.state is not None else None
            for i, (acl, denial) in enumerate(zip(case.acls, case.denials, strict=True)):
                got = case.code(alice.request(api, case.version, case.body(n)), n)
                assert got == denial, f"with {i} of the ACLs: {got}, expected {denial}"
                if case.state is not None and i == 0:  # (later, resources already allowed may change)
                    assert case.state(admin, n) == before, "a refused request changed something"
                grant(admin, "User:alice", acl(n))
            if case.denials:
                assert case.code(bob.request(api, case.version, case.body(n)), n) == case.denials[0]
            got = case.code(alice.request(api, case.version, case.body(n)), n)
            assert got not in AUTH_ERRORS and got != HIDDEN, f"allowed request refused: {got}"
            assert case.ok is None or got in case.ok, f"allowed request answered {got}"
        finally:
            revoke_all(admin, "User:alice")
            if case.fresh:
                alice.close()


# -- the variants one case per API does not show ---------------------------------------------------------------


@pytest.fixture
def users(node: inprocess.InProcessBroker) -> Iterator[tuple[Conn, Conn]]:
    with login(node, "admin") as admin, login(node, "alice") as alice:
        try:
            yield admin, alice
        finally:
            revoke_all(admin, "User:alice")


def test_metadata_leaves_out_what_it_may_not_describe_and_auto_creates_only_with_create(
        node: inprocess.InProcessBroker, users: tuple[Conn, Conn]) -> None:
    admin, alice = users
    n = prepare(node, admin, 1003)
    grant(admin, "User:alice", (TOPIC, n.topic, DESCRIBE))
    listed = alice.request(apis.METADATA, 12, {"topics": None})
    assert {t.name for t in listed.topics} == {n.topic}  # the other topics are left out, not refused
    wanted = {"topics": [{"name": "auto-made"}], "allow_auto_topic_creation": True}
    assert int(alice.request(apis.METADATA, 12, wanted).topics[0].error_code) == T29  # no DESCRIBE
    grant(admin, "User:alice", (TOPIC, "auto-made", DESCRIBE))
    assert int(alice.request(apis.METADATA, 12, wanted).topics[0].error_code) == T29  # no CREATE
    assert partition_count(admin, Names("auto-made", "", "")) == -1  # not created
    grant(admin, "User:alice", (TOPIC, "auto-made", CREATE))
    assert int(alice.request(apis.METADATA, 12, wanted).topics[0].error_code) == 0
    with_ops = alice.request(apis.METADATA, 10, {"topics": [{"name": n.topic}], "allow_auto_topic_creation": False,
                                                 "include_cluster_authorized_operations": True,
                                                 "include_topic_authorized_operations": True})
    assert with_ops.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
    assert with_ops.topics[0].topic_authorized_operations == 1 << DESCRIBE


def test_transactional_produce_needs_write_on_its_transactional_id(node: inprocess.InProcessBroker,
                                                                    users: tuple[Conn, Conn]) -> None:
    from odradek.protocol.records import build_batch

    admin, alice = users
    n = prepare(node, admin, 1000)
    grant(admin, "User:alice", (TOPIC, n.topic, WRITE))
    records = build_batch([(None, b"t")], producer_id=n.pid, producer_epoch=0, base_sequence=0,
                          is_transactional=True)
    values = {**wire.produce_values(n.topic, 0, records), "transactional_id": n.txn}
    r = alice.request(apis.PRODUCE, 9, values)
    assert partition_code("responses", "partition_responses")(r, n) == X53
    assert latest(admin, n) == 2  # nothing appended


def test_followers_need_cluster_action(node: inprocess.InProcessBroker, users: tuple[Conn, Conn]) -> None:
    admin, alice = users
    n = prepare(node, admin, 1001)
    grant(admin, "User:alice", (TOPIC, n.topic, READ))  # a consumer's ACL does not make a follower
    follower = {**wire.fetch_values({(n.topic, 0): 0}), "replica_id": 7}
    assert partition_code("responses")(alice.request(apis.FETCH, 12, follower), n) == T29
    assert partition_code("responses")(admin.request(apis.FETCH, 12, follower), n) == E.NOT_LEADER_OR_FOLLOWER
    epochs = {"replica_id": 7, "topics": [{"topic": "t-none", "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}
    assert offset_for_leader_epoch(alice.request(apis.OFFSET_FOR_LEADER_EPOCH, 4, epochs), n) == T29
    grant(admin, "User:alice", (CLUSTER, "kafka-cluster", CLUSTER_ACTION))  # any topic then, as Kafka
    assert offset_for_leader_epoch(alice.request(apis.OFFSET_FOR_LEADER_EPOCH, 4, epochs), n) \
        == E.UNKNOWN_TOPIC_OR_PARTITION
    assert int(alice.request(apis.ADD_PARTITIONS_TO_TXN, 4, {"transactions": []}).error_code) == 0


def test_idempotent_producers_and_transaction_coordinators(node: inprocess.InProcessBroker,
                                                           users: tuple[Conn, Conn]) -> None:
    admin, alice = users
    n = prepare(node, admin, 1002)
    idempotent = {"transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}
    assert int(alice.request(apis.INIT_PRODUCER_ID, 5, idempotent).error_code) == C31
    grant(admin, "User:alice", (TOPIC, n.topic, WRITE))  # KIP-679: WRITE on any topic is enough
    assert int(alice.request(apis.INIT_PRODUCER_ID, 5, idempotent).error_code) == 0
    find = {"key_type": 1, "coordinator_keys": [n.txn]}
    assert results_code("coordinators")(alice.request(apis.FIND_COORDINATOR, 4, find), n) == X53
    grant(admin, "User:alice", (TXN, n.txn, DESCRIBE))
    assert results_code("coordinators")(alice.request(apis.FIND_COORDINATOR, 4, find), n) == 0
    brokers_only = alice.request(apis.ADD_PARTITIONS_TO_TXN, 4, {"transactions": []})
    assert int(brokers_only.error_code) == C31
