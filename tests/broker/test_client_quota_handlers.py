"""DescribeClientQuotas (api 48) and AlterClientQuotas (api 49) against a real single-node broker process
(odradek/broker/handlers/client_quotas.py), over both request versions, plus the ``controller_mutation_rate``
quota they set as CreateTopics sees it.

Requests are kio-built frames sent over raw sockets (``tests/broker/wire.py``); every test starts its own
broker (``broker_factory``), so what one test stores is never seen by another.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from odradek.quota.entity import CLIENT_ID, IP, USER
from tests.broker import wire
from tests.broker.conftest import BrokerFactory
from tests.broker.process import BrokerProcess
from tests.broker.wire import Conn, metadata

VERSIONS = (0, 1)
EXACT, DEFAULT, ANY = 0, 1, 2

Components = tuple[tuple[str, str | None], ...]
Ops = list[tuple[str, float | None]]  # (key, value); a value of None removes the key

ALICE: Components = ((USER, "alice"),)
ALICE_APP: Components = ((USER, "alice"), (CLIENT_ID, "app"))
ALICE_DEFAULT_CLIENT: Components = ((USER, "alice"), (CLIENT_ID, None))
DEFAULT_USER: Components = ((USER, None),)
DEFAULT_USER_APP: Components = ((USER, None), (CLIENT_ID, "app"))
DEFAULT_USER_DEFAULT_CLIENT: Components = ((USER, None), (CLIENT_ID, None))
BOB: Components = ((USER, "bob"),)
APP: Components = ((CLIENT_ID, "app"),)
DEFAULT_CLIENT: Components = ((CLIENT_ID, None),)
AN_IP: Components = ((IP, "10.0.0.7"),)
DEFAULT_IP: Components = ((IP, None),)

EVERY: dict[Components, dict[str, float]] = {
    ALICE: {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
    ALICE_APP: {"consumer_byte_rate": 2000.0},
    ALICE_DEFAULT_CLIENT: {"request_percentage": 12.5},
    DEFAULT_USER: {"request_percentage": 400.0},
    DEFAULT_USER_APP: {"producer_byte_rate": 7.0},
    DEFAULT_USER_DEFAULT_CLIENT: {"consumer_byte_rate": 3000.0},
    BOB: {"producer_byte_rate": 5.0},
    APP: {"controller_mutation_rate": 2.5},
    DEFAULT_CLIENT: {"producer_byte_rate": 1048576.0},
    AN_IP: {"connection_creation_rate": 10.0},
    DEFAULT_IP: {"connection_creation_rate": 100000.0},
}


# -- helpers ----------------------------------------------------------------------------------------------


def entry(components: Components, ops: Ops) -> dict[str, Any]:
    return {
        "entity": [{"entity_type": t, "entity_name": n} for t, n in components],
        "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in ops],
    }


def alter(conn: Conn, version: int, *entries: dict[str, Any], validate_only: bool = False) -> list[Any]:
    """The result entries, one per request entry, in order."""
    response = conn.request(apis.ALTER_CLIENT_QUOTAS, version,
                            {"entries": list(entries), "validate_only": validate_only})
    assert response.throttle_time == timedelta(0)
    assert len(response.entries) == len(entries)
    for sent, got in zip(entries, response.entries, strict=True):  # each entity echoed as it was sent
        assert [(c.entity_type, c.entity_name) for c in got.entity] == [
            (c["entity_type"], c["entity_name"]) for c in sent["entity"]]
    return list(response.entries)


def alter_ok(conn: Conn, version: int, quotas: dict[Components, dict[str, float]]) -> None:
    results = alter(conn, version, *(entry(e, list(c.items())) for e, c in quotas.items()))
    assert [(int(r.error_code), r.error_message) for r in results] == [(ErrorCode.NONE, None)] * len(quotas)


def component(entity_type: str, match_type: int, match: str | None = None) -> dict[str, Any]:
    return {"entity_type": entity_type, "match_type": match_type, "match": match}


def describe_raw(conn: Conn, version: int, *components: dict[str, Any], strict: bool = False) -> Any:
    return conn.request(apis.DESCRIBE_CLIENT_QUOTAS, version, {"components": list(components), "strict": strict})


def describe(conn: Conn, version: int, *components: dict[str, Any],
             strict: bool = False) -> dict[Components, dict[str, float]]:
    response = describe_raw(conn, version, *components, strict=strict)
    assert (int(response.error_code), response.error_message) == (ErrorCode.NONE, None)
    assert response.throttle_time == timedelta(0)
    out: dict[Components, dict[str, float]] = {}
    for e in response.entries:
        key = tuple((c.entity_type, c.entity_name) for c in e.entity)
        assert key not in out, f"{key} described twice"
        keys = [v.key for v in e.values]
        assert keys == sorted(keys)
        out[key] = {v.key: v.value for v in e.values}
    return out


def only(quotas: dict[Components, dict[str, float]], *entities: Components) -> dict[Components, dict[str, float]]:
    return {e: quotas[e] for e in entities}


def describe_error(conn: Conn, version: int, *components: dict[str, Any], strict: bool = False) -> str:
    response = describe_raw(conn, version, *components, strict=strict)
    assert int(response.error_code) == ErrorCode.INVALID_REQUEST
    assert response.entries is None
    assert isinstance(response.error_message, str)
    return response.error_message


def connect(b: BrokerProcess) -> Conn:
    return Conn(b.address)


# -- alter then describe ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_alter_then_describe_with_every_kind_of_filter(broker: BrokerProcess, version: int) -> None:
    with connect(broker) as conn:
        assert describe(conn, version) == {}
        alter_ok(conn, version, EVERY)
        # no component: every entity, unless strict (then only an entity of no component, which none is)
        assert describe(conn, version) == EVERY
        assert describe(conn, version, strict=True) == {}
        # exact
        assert describe(conn, version, component(USER, EXACT, "alice")) == only(
            EVERY, ALICE, ALICE_APP, ALICE_DEFAULT_CLIENT)
        assert describe(conn, version, component(USER, EXACT, "alice"), strict=True) == only(EVERY, ALICE)
        assert describe(conn, version, component(CLIENT_ID, EXACT, "app")) == only(
            EVERY, ALICE_APP, DEFAULT_USER_APP, APP)
        assert describe(conn, version, component(USER, EXACT, "nobody")) == {}
        assert describe(conn, version, component(IP, EXACT, "10.0.0.7")) == only(EVERY, AN_IP)
        assert describe(conn, version, component(IP, EXACT, "10.0.0.8")) == {}
        # default
        assert describe(conn, version, component(USER, DEFAULT)) == only(
            EVERY, DEFAULT_USER, DEFAULT_USER_APP, DEFAULT_USER_DEFAULT_CLIENT)
        assert describe(conn, version, component(USER, DEFAULT), strict=True) == only(EVERY, DEFAULT_USER)
        assert describe(conn, version, component(CLIENT_ID, DEFAULT), strict=True) == only(EVERY, DEFAULT_CLIENT)
        assert describe(conn, version, component(IP, DEFAULT)) == only(EVERY, DEFAULT_IP)
        # any name, the default included
        assert describe(conn, version, component(USER, ANY), strict=True) == only(EVERY, ALICE, DEFAULT_USER, BOB)
        assert describe(conn, version, component(USER, ANY)) == only(
            EVERY, ALICE, ALICE_APP, ALICE_DEFAULT_CLIENT, DEFAULT_USER, DEFAULT_USER_APP,
            DEFAULT_USER_DEFAULT_CLIENT, BOB)
        assert describe(conn, version, component(CLIENT_ID, ANY)) == only(
            EVERY, ALICE_APP, ALICE_DEFAULT_CLIENT, DEFAULT_USER_APP, DEFAULT_USER_DEFAULT_CLIENT, APP,
            DEFAULT_CLIENT)
        assert describe(conn, version, component(CLIENT_ID, ANY), strict=True) == only(EVERY, APP, DEFAULT_CLIENT)
        assert describe(conn, version, component(IP, ANY)) == only(EVERY, AN_IP, DEFAULT_IP)
        # (user, client-id) entities, the filter's components in either order
        for strict in (False, True):
            assert describe(conn, version, component(USER, EXACT, "alice"), component(CLIENT_ID, EXACT, "app"),
                            strict=strict) == only(EVERY, ALICE_APP)
            assert describe(conn, version, component(CLIENT_ID, EXACT, "app"), component(USER, EXACT, "alice"),
                            strict=strict) == only(EVERY, ALICE_APP)
            assert describe(conn, version, component(USER, ANY), component(CLIENT_ID, DEFAULT),
                            strict=strict) == only(EVERY, ALICE_DEFAULT_CLIENT, DEFAULT_USER_DEFAULT_CLIENT)
            assert describe(conn, version, component(USER, DEFAULT), component(CLIENT_ID, ANY),
                            strict=strict) == only(EVERY, DEFAULT_USER_APP, DEFAULT_USER_DEFAULT_CLIENT)
            assert describe(conn, version, component(USER, ANY), component(CLIENT_ID, ANY),
                            strict=strict) == only(EVERY, ALICE_APP, ALICE_DEFAULT_CLIENT, DEFAULT_USER_APP,
                                                   DEFAULT_USER_DEFAULT_CLIENT)
            assert describe(conn, version, component(USER, EXACT, "bob"), component(CLIENT_ID, ANY),
                            strict=strict) == {}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_user_client_id_entity_given_client_id_first_is_one_entity(broker: BrokerProcess, version: int) -> None:
    with connect(broker) as conn:
        (result,) = alter(conn, version, entry(((CLIENT_ID, "app"), (USER, "alice")), [("consumer_byte_rate", 500)]))
        assert int(result.error_code) == ErrorCode.NONE
        (result,) = alter(conn, version, entry(ALICE_APP, [("producer_byte_rate", 600)]))
        assert int(result.error_code) == ErrorCode.NONE
        assert describe(conn, version) == {ALICE_APP: {"consumer_byte_rate": 500.0, "producer_byte_rate": 600.0}}


@pytest.mark.parametrize("version", VERSIONS)
def test_remove_a_key_then_the_last_key(broker: BrokerProcess, version: int) -> None:
    with connect(broker) as conn:
        alter_ok(conn, version, {ALICE: {"producer_byte_rate": 1000, "consumer_byte_rate": 2000},
                                 APP: {"request_percentage": 50}})

        def ok(components: Components, ops: Ops) -> None:
            (result,) = alter(conn, version, entry(components, ops))
            assert (int(result.error_code), result.error_message) == (ErrorCode.NONE, None)

        ok(ALICE, [("producer_byte_rate", None)])
        assert describe(conn, version, component(USER, EXACT, "alice")) == {ALICE: {"consumer_byte_rate": 2000.0}}
        ok(ALICE, [("producer_byte_rate", None)])  # removing a key that is not set changes nothing
        assert describe(conn, version, component(USER, EXACT, "alice")) == {ALICE: {"consumer_byte_rate": 2000.0}}
        ok(ALICE, [("producer_byte_rate", 3000), ("consumer_byte_rate", None)])  # set one, remove one
        assert describe(conn, version, component(USER, EXACT, "alice")) == {ALICE: {"producer_byte_rate": 3000.0}}
        ok(ALICE, [("producer_byte_rate", None)])  # the last key: the entity is gone
        assert describe(conn, version, component(USER, EXACT, "alice")) == {}
        assert describe(conn, version, component(USER, ANY)) == {}
        assert describe(conn, version) == {APP: {"request_percentage": 50.0}}
        ok(BOB, [("producer_byte_rate", None)])  # an entity that has nothing: stays absent
        ok(BOB, [])
        assert describe(conn, version) == {APP: {"request_percentage": 50.0}}


@pytest.mark.parametrize("version", VERSIONS)
def test_validate_only_changes_nothing(broker: BrokerProcess, version: int) -> None:
    with connect(broker) as conn:
        alter_ok(conn, version, {APP: {"producer_byte_rate": 1000}})
        results = alter(conn, version,
                        entry(ALICE, [("consumer_byte_rate", 5000)]),
                        entry(APP, [("producer_byte_rate", None)]),
                        entry(DEFAULT_CLIENT, [("request_percentage", 20)]),
                        entry(BOB, [("producer_byte_rate", 1.5)]),  # still validated
                        validate_only=True)
        assert [int(r.error_code) for r in results] == [ErrorCode.NONE] * 3 + [ErrorCode.INVALID_REQUEST]
        assert results[3].error_message == "producer_byte_rate must be a whole number, got 1.5"
        assert describe(conn, version) == {APP: {"producer_byte_rate": 1000.0}}


@pytest.mark.parametrize("version", VERSIONS)
def test_entries_in_error_change_nothing_and_the_others_apply(broker: BrokerProcess, version: int) -> None:
    client_keys = "producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate"
    cases: list[tuple[Components, Ops, str | None]] = [
        (((USER, "carol"),), [("producer_byte_rate", 100)], None),
        (((USER, "dave"),), [("foo", 1)], f"'foo' is not a quota config of user 'dave': use {client_keys}"),
        (((USER, "dave"),), [("producer_byte_rate", -1)], "producer_byte_rate must be a positive number, got -1.0"),
        (((USER, "dave"),), [("consumer_byte_rate", 0)], "consumer_byte_rate must be a positive number, got 0.0"),
        (((USER, "dave"),), [("request_percentage", float("nan"))],
         "request_percentage must be a positive number, got nan"),
        (((USER, "dave"),), [("request_percentage", float("inf"))],
         "request_percentage must be a positive number, got inf"),
        (((CLIENT_ID, "x"),), [("producer_byte_rate", 1.5)], "producer_byte_rate must be a whole number, got 1.5"),
        (((USER, "erin"),), [("producer_byte_rate", 100), ("producer_byte_rate", 200)],
         "producer_byte_rate is altered twice for user 'erin'"),
        (((USER, "erin"),), [("producer_byte_rate", 100), ("producer_byte_rate", None)],
         "producer_byte_rate is altered twice for user 'erin'"),
        (((USER, "frank"), (IP, "10.0.0.7")), [("producer_byte_rate", 100)],
         "a quota entity is a user, a client-id, a user with a client-id, or an ip; got user, ip"),
        ((), [("producer_byte_rate", 100)],
         "a quota entity is a user, a client-id, a user with a client-id, or an ip; got no component"),
        (((USER, "frank"), (USER, "gina")), [("producer_byte_rate", 100)],
         "quota entity type 'user' is named twice in one entity"),
        ((("group", "g"),), [("producer_byte_rate", 100)],
         "unknown quota entity type 'group': use user, client-id, ip"),
        (((USER, ""),), [("producer_byte_rate", 100)],
         "an empty user name is not allowed (a null name is the default user)"),
        (((IP, "not-an-ip"),), [("connection_creation_rate", 5)],
         "'not-an-ip' is not an IP address (an ip quota entity is named by its address)"),
        (((USER, "frank"),), [("connection_creation_rate", 5)],
         f"'connection_creation_rate' is not a quota config of user 'frank': use {client_keys}"),
        (AN_IP, [("producer_byte_rate", 5)],
         "'producer_byte_rate' is not a quota config of ip '10.0.0.7': use connection_creation_rate"),
        (AN_IP, [("connection_creation_rate", 2.5)], "connection_creation_rate must be a whole number, got 2.5"),
        (((USER, "carol"),), [("foo", None)], f"'foo' is not a quota config of user 'carol': use {client_keys}"),
        # a valid op with an invalid one: neither applies
        (((USER, "gina"),), [("consumer_byte_rate", 100), ("request_percentage", 0)],
         "request_percentage must be a positive number, got 0.0"),
        (((USER, "carol"),), [("consumer_byte_rate", 100), ("bar", 1)],
         f"'bar' is not a quota config of user 'carol': use {client_keys}"),
        (((CLIENT_ID, "app"), (USER, "hank")), [("consumer_byte_rate", 500)], None),
        (AN_IP, [("connection_creation_rate", 7)], None),
    ]
    with connect(broker) as conn:
        results = alter(conn, version, *(entry(e, ops) for e, ops, _ in cases))
        for (e, _, message), r in zip(cases, results, strict=True):
            code = ErrorCode.NONE if message is None else ErrorCode.INVALID_REQUEST
            assert (int(r.error_code), r.error_message) == (code, message), e
        assert describe(conn, version) == {
            ((USER, "carol"),): {"producer_byte_rate": 100.0},
            ((USER, "hank"), (CLIENT_ID, "app")): {"consumer_byte_rate": 500.0},
            AN_IP: {"connection_creation_rate": 7.0},
        }


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_errors_answer_invalid_request_for_the_whole_response(broker: BrokerProcess, version: int) -> None:
    with connect(broker) as conn:
        alter_ok(conn, version, {ALICE: {"producer_byte_rate": 1000}})
        assert describe_error(conn, version, component("group", ANY)) == (
            "unknown quota entity type 'group': use user, client-id, ip")
        assert describe_error(conn, version, component(USER, EXACT, "alice"), component("clients", ANY)) == (
            "unknown quota entity type 'clients': use user, client-id, ip")
        assert describe_error(conn, version, component(USER, ANY), component(USER, EXACT, "alice")) == (
            "quota entity type 'user' is filtered twice")
        assert describe_error(conn, version, component(USER, DEFAULT), component(USER, DEFAULT),
                              strict=True) == "quota entity type 'user' is filtered twice"
        assert describe_error(conn, version, component(USER, EXACT, None)) == (
            "an exact match of user needs a name")
        assert describe_error(conn, version, component(CLIENT_ID, EXACT, None), strict=True) == (
            "an exact match of client-id needs a name")
        assert describe_error(conn, version, component(USER, 3)) == "unknown match type 3 (0 exact, 1 default, 2 any)"
        assert describe_error(conn, version, component(USER, ANY), component(IP, ANY)) == (
            "ip quota entities have no other component: filter ips alone")
        # the connection is still served
        assert describe(conn, version, component(USER, EXACT, "alice")) == {ALICE: {"producer_byte_rate": 1000.0}}


@pytest.mark.parametrize("version", VERSIONS)
def test_quotas_persist_across_a_restart(broker: BrokerProcess, version: int) -> None:
    with connect(broker) as conn:
        alter_ok(conn, version, EVERY)
        assert describe(conn, version) == EVERY
    assert broker.stop() == 0
    broker.start()
    with connect(broker) as conn:
        assert describe(conn, version) == EVERY
        (result,) = alter(conn, version, entry(ALICE, [("producer_byte_rate", None)]))
        assert int(result.error_code) == ErrorCode.NONE
        (result,) = alter(conn, version, entry(BOB, [("producer_byte_rate", None)]))
        assert int(result.error_code) == ErrorCode.NONE
    assert broker.stop() == 0
    broker.start()
    expected = {e: dict(c) for e, c in EVERY.items() if e != BOB}
    del expected[ALICE]["producer_byte_rate"]
    with connect(broker) as conn:
        assert describe(conn, version) == expected


def test_versions_see_each_others_changes(broker: BrokerProcess) -> None:
    with connect(broker) as conn:
        alter_ok(conn, 0, {ALICE: {"producer_byte_rate": 1000}})
        alter_ok(conn, 1, {ALICE_DEFAULT_CLIENT: {"request_percentage": 12.5}})
        assert describe(conn, 1) == describe(conn, 0) == {
            ALICE: {"producer_byte_rate": 1000.0}, ALICE_DEFAULT_CLIENT: {"request_percentage": 12.5}}


# -- controller_mutation_rate as CreateTopics sees it -----------------------------------------------------


def create_topic(b: BrokerProcess, version: int, name: str, partitions: int, *,
                 validate_only: bool = False) -> Any:
    """CreateTopics of one topic on a connection of its own (a throttled connection is muted for a while)."""
    values = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                          "configs": []}], "timeout": 5000, "validate_only": validate_only}
    with connect(b) as conn:
        response = conn.request(apis.CREATE_TOPICS, version, values)
    (topic,) = response.topics
    return response.throttle_time, topic


def topic_exists(b: BrokerProcess, name: str) -> bool:
    with connect(b) as conn:
        (t,) = metadata(conn, [name], auto_create=False).topics
    return int(t.error_code) == ErrorCode.NONE


@pytest.fixture
def mutation_quota_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """A broker whose controller mutation bucket holds rate x 2 windows x 1 s, with a controller_mutation_rate
    of 1 partition per second on the default client-id (the burst: 2 partitions per client-id)."""
    b = broker_factory("controller.quota.window.num=2", "controller.quota.window.size.seconds=1")
    with connect(b) as conn:
        alter_ok(conn, 1, {DEFAULT_CLIENT: {"controller_mutation_rate": 1}})
    return b


def test_strict_create_topics_is_refused_once_the_mutation_burst_is_spent(
        mutation_quota_broker: BrokerProcess) -> None:
    b = mutation_quota_broker
    # validating a creation charges nothing
    throttle, t = create_topic(b, 7, "dry", 100, validate_only=True)
    assert (int(t.error_code), throttle) == (ErrorCode.NONE, timedelta(0))
    # the whole burst: accepted, and the bucket is at zero, not below it, so no throttle
    throttle, t = create_topic(b, 7, "first", 2)
    assert (int(t.error_code), t.error_message, throttle) == (ErrorCode.NONE, None, timedelta(0))
    # at zero a strict request is still accepted (Kafka refuses only below zero), and takes the bucket to
    # about -2 partitions: about 2 s to wait
    throttle, t = create_topic(b, 7, "second", 2)
    assert int(t.error_code) == ErrorCode.NONE
    assert timedelta(0) < throttle <= timedelta(seconds=2)
    # below zero: refused, with the time until the bucket is back at zero
    throttle, t = create_topic(b, 7, "third", 2)
    assert int(t.error_code) == ErrorCode.THROTTLING_QUOTA_EXCEEDED == 89
    assert t.error_message and "controller_mutation_rate" in t.error_message
    assert timedelta(0) < throttle <= timedelta(seconds=2)
    assert topic_exists(b, "first") and topic_exists(b, "second")
    assert not topic_exists(b, "third")
    # an old request version is not refused: accepted, and throttled
    throttle, t = create_topic(b, 5, "fourth", 2)
    assert int(t.error_code) == ErrorCode.NONE
    assert timedelta(seconds=2) < throttle <= timedelta(seconds=4)
    assert topic_exists(b, "fourth")


def test_non_strict_create_topics_is_accepted_but_throttled(mutation_quota_broker: BrokerProcess) -> None:
    b = mutation_quota_broker
    throttle, t = create_topic(b, 5, "first", 2)
    assert (int(t.error_code), throttle) == (ErrorCode.NONE, timedelta(0))
    throttle, t = create_topic(b, 5, "second", 2)
    assert int(t.error_code) == ErrorCode.NONE
    assert timedelta(0) < throttle <= timedelta(seconds=2)
    throttle, t = create_topic(b, 5, "third", 2)
    assert int(t.error_code) == ErrorCode.NONE
    assert timedelta(seconds=2) < throttle <= timedelta(seconds=4)
    assert all(topic_exists(b, n) for n in ("first", "second", "third"))


def test_the_mutation_quota_applies_after_a_restart(broker: BrokerProcess) -> None:
    with connect(broker) as conn:
        alter_ok(conn, 1, {DEFAULT_CLIENT: {"controller_mutation_rate": 1}})
    assert broker.stop() == 0
    broker.start()
    # the default windows: a burst of 1 x 11 x 1 s = 11 partitions
    throttle, t = create_topic(broker, 7, "big", 12)
    assert int(t.error_code) == ErrorCode.NONE
    assert timedelta(0) < throttle <= timedelta(seconds=1)
    throttle, t = create_topic(broker, 7, "refused", 1)
    assert int(t.error_code) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert throttle > timedelta(0)


def test_a_fetch_over_the_consumer_quota_gets_no_records_and_its_session_goes_on(broker: BrokerProcess) -> None:
    """A throttled fetch is answered empty with its throttle time; its incremental session moves to the next epoch
    having sent nothing, so the data comes back in the next fetch once the client is under its quota again."""
    p0 = ("quota-fetch", 0)
    with connect(broker) as conn:
        wire.ensure_topic(conn, p0[0], partitions=1)
        assert wire.produce(conn, *p0, wire.batch(b"v" * 30_000)).error_code == 0
        alter_ok(conn, 1, {((CLIENT_ID, "odradek-tests"),): {"consumer_byte_rate": 1000}})
        r = wire.fetch(conn, {p0: 1}, session_id=0, session_epoch=0)  # at the end: opens a session, no records
        assert int(r.error_code) == 0 and r.session_id != 0
        assert not wire.fetched(r)[p0].records
        sid = r.session_id
        r = wire.fetch(conn, {p0: 0}, session_id=sid, session_epoch=1)  # 30 KB would be 3 x the quota's 10 s
        assert r.throttle_time > timedelta(0)
        assert wire.fetched(r) == {}
    with connect(broker) as conn:  # the throttled connection is muted for its throttle time (20 s)
        (removed,) = alter(conn, 1, entry(((CLIENT_ID, "odradek-tests"),), [("consumer_byte_rate", None)]))
        assert int(removed.error_code) == ErrorCode.NONE
        r = wire.fetch(conn, {}, session_id=sid, session_epoch=2)  # sessions belong to no connection
        assert int(r.error_code) == 0 and r.throttle_time == timedelta(0)
        got = wire.fetched(r)[p0]
        assert [rec.value for rec in wire.records_of(got.records)] == [b"v" * 30_000]
        assert got.high_watermark == 1
