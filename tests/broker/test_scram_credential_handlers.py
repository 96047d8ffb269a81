"""DescribeUserScramCredentials (api 50) and AlterUserScramCredentials (api 51) against a real single-node broker
process (odradek/broker/handlers/scram_credentials.py): Kafka's results and errors, credentials kept across a
restart in the metadata file (as credential strings, never a password), beside the same user's client quotas
without either side touching the other; and confluent-kafka's AdminClient driving both APIs.

Requests are kio-built frames over raw sockets (``tests/broker/wire.py``); each test starts its own broker.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from odradek.cluster.metadata import METADATA_FILE
from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from odradek.security.scram import salted_password
from tests.broker.process import BrokerProcess
from tests.broker.wire import Conn

SHA256, SHA512 = 1, 2
NAMES = {SHA256: "SCRAM-SHA-256", SHA512: "SCRAM-SHA-512"}
RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 91, 92, 93
SALT = b"a-salt-of-24-bytes-long!"


def upsertion(user: str, mechanism: int, password: str = "secret", iterations: int = 4096,
              salt: bytes = SALT) -> dict[str, Any]:
    salted = salted_password(NAMES[mechanism], password, salt, iterations) if mechanism in NAMES and \
        4096 <= iterations <= 16384 else b"x" * 32
    return {"name": user, "mechanism": mechanism, "iterations": iterations, "salt": salt, "salted_password": salted}


def deletion(user: str, mechanism: int) -> dict[str, Any]:
    return {"name": user, "mechanism": mechanism}


def alter(conn: Conn, *, upsertions: Sequence[dict[str, Any]] = (),
          deletions: Sequence[dict[str, Any]] = ()) -> dict[str, tuple[int, str | None]]:
    """user -> (error code, message); one result per user."""
    response = conn.request(apis.ALTER_USER_SCRAM_CREDENTIALS, 0,
                            {"upsertions": list(upsertions), "deletions": list(deletions)})
    assert response.throttle_time == timedelta(0)
    users = [r.user for r in response.results]
    assert len(users) == len(set(users)), f"a user answered twice: {users}"
    return {r.user: (int(r.error_code), r.error_message) for r in response.results}


def describe_raw(conn: Conn, users: list[str] | None) -> Any:
    response = conn.request(apis.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                            {"users": None if users is None else [{"name": u} for u in users]})
    assert (int(response.error_code), response.error_message) == (ErrorCode.NONE, None)
    return response


def describe(conn: Conn, users: list[str] | None = None) -> list[tuple[str, Any]]:
    """(user, {mechanism: iterations} or its error code) per result, in the broker's order."""
    out: list[tuple[str, Any]] = []
    for r in describe_raw(conn, users).results:
        if int(r.error_code):
            assert not r.credential_infos
            out.append((r.user, int(r.error_code)))
        else:
            out.append((r.user, {i.mechanism: i.iterations for i in r.credential_infos}))
    return out


def set_quota(conn: Conn, user: str, key: str, value: float | None) -> None:
    response = conn.request(apis.ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [{
        "entity": [{"entity_type": "user", "entity_name": user}],
        "ops": [{"key": key, "value": value or 0.0, "remove": value is None}]}]})
    assert [int(e.error_code) for e in response.entries] == [ErrorCode.NONE]


def quotas(conn: Conn) -> dict[str, dict[str, float]]:
    response = conn.request(apis.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False})
    assert int(response.error_code) == ErrorCode.NONE
    return {e.entity[0].entity_name: {v.key: v.value for v in e.values} for e in response.entries}


OK = (ErrorCode.NONE, None)


def test_upsert_then_describe_all_and_named_users(broker: BrokerProcess) -> None:
    with Conn(broker.address) as conn:
        assert describe(conn) == []
        assert alter(conn, upsertions=[upsertion("alice", SHA256, iterations=8192), upsertion("alice", SHA512),
                                       upsertion("bob", SHA512, iterations=16384)]) == {"alice": OK, "bob": OK}
        assert describe(conn) == [("alice", {SHA256: 8192, SHA512: 4096}), ("bob", {SHA512: 16384})]
        assert describe_raw(conn, []).results == describe_raw(conn, None).results  # empty means every user
        assert describe(conn, ["bob", "alice"]) == [("bob", {SHA512: 16384}), ("alice", {SHA256: 8192, SHA512: 4096})]
        # an upsertion replaces the mechanism's credential; the other mechanism stays
        assert alter(conn, upsertions=[upsertion("alice", SHA256, iterations=4096)]) == {"alice": OK}
        assert describe(conn, ["alice"]) == [("alice", {SHA256: 4096, SHA512: 4096})]


def test_describe_errors_per_user(broker: BrokerProcess) -> None:
    with Conn(broker.address) as conn:
        assert alter(conn, upsertions=[upsertion("alice", SHA256)]) == {"alice": OK}
        response = describe_raw(conn, ["", "nobody", "alice", "bob", "bob"])
        assert [(r.user, int(r.error_code)) for r in response.results] == [
            ("", RESOURCE_NOT_FOUND), ("nobody", RESOURCE_NOT_FOUND), ("alice", ErrorCode.NONE),
            ("bob", DUPLICATE_RESOURCE)]
        assert response.results[1].error_message == "Attempt to describe a user credential that does not exist: nobody"
        assert response.results[0].error_message == "Username must not be empty"


def test_alter_errors_per_user_and_users_in_error_change_nothing(broker: BrokerProcess) -> None:
    with Conn(broker.address) as conn:
        assert alter(conn, upsertions=[upsertion("dave", SHA256)]) == {"dave": OK}
        results = alter(conn, upsertions=[
            upsertion("", SHA256),
            upsertion("alice", 3),
            upsertion("bob", SHA256, iterations=4095),
            upsertion("carol", SHA512),  # carol's other upsertion is refused: neither is stored
            upsertion("carol", SHA256, iterations=16385),
            upsertion("erin", SHA256), upsertion("erin", SHA256),
            upsertion("frank", SHA512),
            upsertion("gina", SHA256, salt=b"short"),
            upsertion("hank", SHA256), upsertion("hank", SHA512),
        ], deletions=[deletion("dave", SHA512), deletion("frank", SHA512), deletion("ivan", 0)])
        assert results == {
            "": (UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
            "alice": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
            "bob": (UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
            "carol": (UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
            "dave": (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist: SCRAM-SHA-512"),
            "erin": (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
            "frank": (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
            "gina": (UNACCEPTABLE_CREDENTIAL, results["gina"][1]),
            "hank": OK,  # two mechanisms of one user in one request, as kafka-configs sends them
            "ivan": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        }
        assert describe(conn) == [("dave", {SHA256: 4096}), ("hank", {SHA256: 4096, SHA512: 4096})]


def test_delete_a_mechanism_then_the_last_one(broker: BrokerProcess) -> None:
    with Conn(broker.address) as conn:
        assert alter(conn, upsertions=[upsertion("alice", SHA256), upsertion("alice", SHA512)]) == {"alice": OK}
        # a deletion and an upsertion of another mechanism of the same user go together
        assert alter(conn, deletions=[deletion("alice", SHA512)],
                     upsertions=[upsertion("alice", SHA256, iterations=5000)]) == {"alice": OK}
        assert describe(conn, ["alice"]) == [("alice", {SHA256: 5000})]
        assert alter(conn, deletions=[deletion("alice", SHA256)]) == {"alice": OK}
        assert describe(conn) == []
        assert describe(conn, ["alice"]) == [("alice", RESOURCE_NOT_FOUND)]


def test_credentials_and_quotas_of_a_user_coexist_and_persist_across_a_restart(broker: BrokerProcess) -> None:
    with Conn(broker.address) as conn:
        set_quota(conn, "alice", "producer_byte_rate", 1024.0)
        assert alter(conn, upsertions=[upsertion("alice", SHA256, password="alice-secret"),
                                       upsertion("alice", SHA512, password="alice-secret")]) == {"alice": OK}
        set_quota(conn, "alice", "consumer_byte_rate", 2048.0)  # a quota change keeps the credentials
        assert quotas(conn) == {"alice": {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}}
        assert alter(conn, deletions=[deletion("alice", SHA512)]) == {"alice": OK}  # and the other way round
        assert quotas(conn) == {"alice": {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}}
        assert alter(conn, upsertions=[upsertion("bob", SHA512, password="bob-secret")]) == {"bob": OK}
        assert quotas(conn) == {"alice": {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}}
    stored = (broker.data_dir / METADATA_FILE).read_text()
    assert "secret" not in stored
    assert base64.b64encode(salted_password("SCRAM-SHA-256", "alice-secret", SALT, 4096)).decode() not in stored
    assert "stored_key=" in stored
    assert broker.stop() == 0
    broker.start()
    with Conn(broker.address) as conn:
        assert describe(conn) == [("alice", {SHA256: 4096}), ("bob", {SHA512: 4096})]
        assert quotas(conn) == {"alice": {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}}
        set_quota(conn, "alice", "producer_byte_rate", None)
        set_quota(conn, "alice", "consumer_byte_rate", None)
        assert quotas(conn) == {}
        assert describe(conn, ["alice"]) == [("alice", {SHA256: 4096})]


def _wait(futures: dict[str, Any]) -> dict[str, Any]:
    return {user: f.result(timeout=15) for user, f in futures.items()}


def test_confluent_admin_client_alters_and_describes(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})
    info256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    info512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    _wait(admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("alice", info256, b"alice-secret"),
        UserScramCredentialUpsertion("alice", info512, b"alice-secret"),
        UserScramCredentialUpsertion("bob", info512, b"bob-secret", salt=b"bob-salt-bytes-16"),
    ]))
    described = admin.describe_user_scram_credentials().result(timeout=15)
    assert {u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for u, d in described.items()} == {
        "alice": [(ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)],
        "bob": [(ScramMechanism.SCRAM_SHA_512, 4096)]}
    named = _wait(admin.describe_user_scram_credentials(["bob"]))
    assert [(i.mechanism, i.iterations) for i in named["bob"].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 4096)]
    _wait(admin.alter_user_scram_credentials([UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)]))
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)])
    try:
        _wait(futures)
        raise AssertionError("deleting a missing credential succeeded")
    except KafkaException as e:
        assert e.args[0].name() == "RESOURCE_NOT_FOUND"
    try:
        _wait(admin.describe_user_scram_credentials(["nobody"]))
        raise AssertionError("describing a user without credentials succeeded")
    except KafkaException as e:
        assert e.args[0].name() == "RESOURCE_NOT_FOUND"
    named = _wait(admin.describe_user_scram_credentials(["alice"]))
    assert [(i.mechanism, i.iterations) for i in named["alice"].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
