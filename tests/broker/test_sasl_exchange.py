"""The SASL exchange over raw sockets (``broker/authentication.py``, ``handlers/sasl.py``): what is answered before
authentication, SaslHandshake v0's bare tokens, KIP-152 failures, KIP-368 sessions and re-authentication, and the
bad input that must close only its own connection.

SCRAM exchanges are driven by the project's own client state machine (``protocol/sasl``), PLAIN tokens are written
by hand; real client libraries are in tests/compat/test_security.py and test_scram_login.py.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from odradek.protocol.sasl import ScramClient
from odradek.security.scram import ScramCredential
from tests.broker import inprocess, wire
from tests.broker.wire import Conn

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret";')
REAUTH_MS = 1500


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[inprocess.InProcessBroker]:
    b = inprocess.InProcessBroker(tmp_path_factory.mktemp("sasl"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connections.max.reauth.ms": str(REAUTH_MS),
        "connection.failed.authentication.delay.ms": "200",
        "sasl.server.max.receive.size": "4096",
    })
    credential = ScramCredential.from_password("SCRAM-SHA-512", "carol-secret")
    b.on_loop(lambda: b.broker.credentials.replace_user("carol", {"SCRAM-SHA-512": credential.format()}))
    try:
        yield b
    finally:
        b.close()


def sasl(node: inprocess.InProcessBroker) -> Conn:
    return Conn(("127.0.0.1", node.server.ports["SASL_PLAINTEXT"]))


def plain(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


def recv_exactly(c: Conn, n: int) -> bytes:
    c.sock.settimeout(10)
    data = b""
    while len(data) < n:
        chunk = c.sock.recv(n - len(data))
        assert chunk, "closed"
        data += chunk
    return data


def handshake(c: Conn, mechanism: str, version: int = 1) -> object:
    return c.request(apis.SASL_HANDSHAKE, version, {"mechanism": mechanism})


def authenticate(c: Conn, token: bytes, version: int = 2) -> object:
    return c.request(apis.SASL_AUTHENTICATE, version, {"auth_bytes": token})


def login(c: Conn, user: str = "alice", password: str = "alice-secret") -> object:
    assert int(handshake(c, "PLAIN").error_code) == ErrorCode.NONE  # type: ignore[attr-defined]
    return authenticate(c, plain(user, password))


def test_only_api_versions_and_the_handshake_come_before_authentication(node: inprocess.InProcessBroker) -> None:
    with sasl(node) as c:
        assert int(wire.api_versions(c).error_code) == 0
        c.send(apis.METADATA, 12, {"topics": None,
                                                                          "allow_auto_topic_creation": False})
        assert c.is_closed_by_peer()


def test_an_unknown_mechanism_is_answered_with_the_enabled_ones_then_closed(node: inprocess.InProcessBroker) -> None:
    with sasl(node) as c:
        started = time.monotonic()
        r = handshake(c, "GSSAPI")
        assert int(r.error_code) == ErrorCode.UNSUPPORTED_SASL_MECHANISM  # type: ignore[attr-defined]
        assert list(r.mechanisms) == ["PLAIN", "SCRAM-SHA-512"]  # type: ignore[attr-defined]
        assert time.monotonic() - started >= 0.2  # connection.failed.authentication.delay.ms
        assert c.is_closed_by_peer()


def test_plain_with_saslauthenticate_then_requests_are_served(node: inprocess.InProcessBroker) -> None:
    with sasl(node) as c:
        r = login(c)
        assert int(r.error_code) == ErrorCode.NONE and r.error_message is None  # type: ignore[attr-defined]
        assert r.session_lifetime == timedelta(milliseconds=REAUTH_MS)  # type: ignore[attr-defined]
        assert wire.metadata(c, None).brokers


def test_a_handshake_v0_is_followed_by_bare_tokens(node: inprocess.InProcessBroker) -> None:
    with sasl(node) as c:
        assert int(handshake(c, "PLAIN", version=0).error_code) == ErrorCode.NONE  # type: ignore[attr-defined]
        token = plain("bob", "bob-secret")
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert recv_exactly(c, 4) == b"\0\0\0\0"  # PLAIN's empty answer, size-prefixed, no response header
        assert wire.metadata(c, None).brokers
    with sasl(node) as c:  # a wrong password after v0 just closes (v0 cannot report it)
        handshake(c, "PLAIN", version=0)
        token = plain("bob", "nope")
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert c.is_closed_by_peer()


def test_scram_through_saslauthenticate(node: inprocess.InProcessBroker) -> None:
    with sasl(node) as c:
        assert int(handshake(c, "SCRAM-SHA-512").error_code) == ErrorCode.NONE  # type: ignore[attr-defined]
        client = ScramClient("SCRAM-SHA-512", "carol", "carol-secret")
        token = client.first()
        for _ in range(3):
            r = authenticate(c, token)
            assert int(r.error_code) == ErrorCode.NONE, r.error_message  # type: ignore[attr-defined]
            token = client.respond(bytes(r.auth_bytes))  # type: ignore[attr-defined]
            if client.complete:
                break
        assert client.complete  # the server's signature checked by the client
        assert wire.metadata(c, None).brokers


@pytest.mark.parametrize(("token", "message"), [
    (plain("alice", "wrong"), "Authentication failed: Invalid username or password"),
    (plain("mallory", "x"), "Authentication failed: Invalid username or password"),
    (b"\xff" * 300, "Authentication failed"),
    (b"", "Authentication failed"),
])
def test_failures_are_reported_kip_152_then_the_connection_closes(node: inprocess.InProcessBroker, token: bytes,
                                                                  message: str) -> None:
    with sasl(node) as c:
        handshake(c, "PLAIN")
        r = authenticate(c, token)
        assert int(r.error_code) == ErrorCode.SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]
        assert r.error_message.startswith(message)  # type: ignore[attr-defined]
        assert "wrong" not in r.error_message  # type: ignore[attr-defined]
        assert c.is_closed_by_peer()
    with sasl(node) as c:  # others are still served
        assert int(login(c).error_code) == ErrorCode.NONE  # type: ignore[attr-defined]


def test_an_oversized_frame_before_authentication_closes_the_connection(node: inprocess.InProcessBroker) -> None:
    with sasl(node) as c:
        c.send_raw(struct.pack(">i", 4097) + b"\0" * 64)  # above sasl.server.max.receive.size
        assert c.is_closed_by_peer()
    with sasl(node) as c:  # after authentication, socket.request.max.bytes applies again
        login(c)
        wire.ensure_topic(c, "big-after-auth")
        assert wire.produce(c, "big-after-auth", 0, wire.batch(b"x" * 8000)).error_code == 0


def test_a_session_re_authenticates_and_an_expired_one_is_closed(node: inprocess.InProcessBroker) -> None:
    with sasl(node) as c:
        login(c)
        time.sleep(REAUTH_MS / 1000 * 0.6)
        r = login(c)  # KIP-368: SaslHandshake + SaslAuthenticate on the authenticated connection
        assert int(r.error_code) == ErrorCode.NONE  # type: ignore[attr-defined]
        time.sleep(REAUTH_MS / 1000 * 0.6)  # past the first session's end, inside the second's
        assert wire.metadata(c, None).brokers
        time.sleep(REAUTH_MS / 1000 * 0.6)  # past the second's end
        c.send(apis.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
        assert c.is_closed_by_peer()


def test_re_authentication_as_someone_else_is_refused(node: inprocess.InProcessBroker) -> None:
    with sasl(node) as c:
        login(c)
        r = login(c, "bob", "bob-secret")
        assert int(r.error_code) == ErrorCode.SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]
        assert "Cannot change principals" in r.error_message  # type: ignore[attr-defined]
        assert c.is_closed_by_peer()


def test_sasl_requests_on_a_plaintext_listener_are_illegal_but_harmless(node: inprocess.InProcessBroker) -> None:
    with Conn(node.address) as c:
        assert int(handshake(c, "PLAIN").error_code) == ErrorCode.ILLEGAL_SASL_STATE  # type: ignore[attr-defined]
        r = authenticate(c, plain("alice", "alice-secret"))
        assert int(r.error_code) == ErrorCode.ILLEGAL_SASL_STATE  # type: ignore[attr-defined]
        assert wire.metadata(c, None).brokers  # still served


def test_the_broker_never_logs_a_password(node: inprocess.InProcessBroker, caplog: pytest.LogCaptureFixture,
                                          tmp_path: Path) -> None:
    with sasl(node) as c:
        handshake(c, "PLAIN")
        authenticate(c, plain("alice", "hunter2-password"))
        c.is_closed_by_peer()
    assert not any("hunter2" in r.getMessage() for r in caplog.records)
    assert any("failed authentication" in r.getMessage() for r in caplog.records)


def test_user_quotas_apply_to_the_authenticated_user(node: inprocess.InProcessBroker) -> None:
    """A ``producer_byte_rate`` quota of user alice throttles her SASL connections, not bob's (KIP-55's user quotas:
    the principal is the quota's user)."""
    with Conn(node.address) as admin:
        r = admin.request(apis.ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [{
            "entity": [{"entity_type": "user", "entity_name": "alice"}],
            "ops": [{"key": "producer_byte_rate", "value": 1000.0, "remove": False}]}]})
        assert [int(e.error_code) for e in r.entries] == [0]
        wire.ensure_topic(admin, "quota-by-user")
    records = wire.batch(b"q" * 30_000)
    try:
        throttles = {}
        for user in ("alice", "bob"):
            with sasl(node) as c:
                login(c, user, f"{user}-secret")
                response = c.request(apis.PRODUCE, wire.PRODUCE_V, wire.produce_values("quota-by-user", 0, records))
                assert int(response.responses[0].partition_responses[0].error_code) == 0
                throttles[user] = response.throttle_time
        assert throttles["alice"] > timedelta(0)
        assert throttles["bob"] == timedelta(0)
    finally:
        with Conn(node.address) as admin:
            admin.request(apis.ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [{
                "entity": [{"entity_type": "user", "entity_name": "alice"}],
                "ops": [{"key": "producer_byte_rate", "value": 0.0, "remove": True}]}]})
