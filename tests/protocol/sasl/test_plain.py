"""SASL/PLAIN: Kafka's PlainSaslServer behaviour, its messages, and garbage tokens."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import ErrorCode
from odradek.protocol.sasl import PlainClient, PlainServer, SaslAuthenticationError, create_server
from tests.protocol.sasl.exchange import run_exchange

USERS = {"admin": "admin-secret", "alice": "alice-secret", "ünï": "pässwörd"}


def server() -> PlainServer:
    return PlainServer(USERS.get)


@pytest.mark.parametrize("user", sorted(USERS))
def test_client_and_server_agree(user: str) -> None:
    srv, client = server(), PlainClient(user, USERS[user])
    assert run_exchange(client, srv) == [f"\x00{user}\x00{USERS[user]}".encode(), b""]
    assert srv.complete and client.complete
    assert srv.authorization_id == user


def test_authorization_id_equal_to_user_is_accepted() -> None:
    srv = server()
    assert srv.respond(b"alice\x00alice\x00alice-secret") == b""
    assert srv.authorization_id == "alice"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\x00admin\x00wrong", "Authentication failed: Invalid username or password"),
        (b"\x00nobody\x00admin-secret", "Authentication failed: Invalid username or password"),
        (b"\x00\x00admin-secret", "Authentication failed: username not specified"),
        (b"\x00admin\x00", "Authentication failed: password not specified"),
        (b"admin-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"\x00admin", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\x00admin\x00admin-secret\x00", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\x00a\x00b\x00c\x00d\x00", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\x00\xff\xfe\x00admin-secret", "Authentication failed: Invalid username or password"),
        (
            b"alice\x00admin\x00admin-secret",
            "Authentication failed: Client requested an authorization id that is different from username",
        ),
    ],
)
def test_refusals_in_kafkas_words(token: bytes, message: str) -> None:
    srv = server()
    with pytest.raises(SaslAuthenticationError) as info:
        srv.respond(token)
    assert str(info.value) == message
    assert info.value.code is ErrorCode.SASL_AUTHENTICATION_FAILED
    assert not srv.complete
    assert b"secret" not in (str(info.value) + info.value.reason).encode()


def test_unknown_user_and_wrong_password_differ_only_in_the_reason() -> None:
    errors = []
    for token in (b"\x00admin\x00nope", b"\x00nobody\x00nope"):
        with pytest.raises(SaslAuthenticationError) as info:
            server().respond(token)
        errors.append(info.value)
    assert str(errors[0]) == str(errors[1])
    assert errors[0].reason != errors[1].reason


def test_a_lookup_that_fails_is_reported_without_its_detail() -> None:
    def broken(user: str) -> str | None:
        raise OSError("store down: secret detail")

    with pytest.raises(SaslAuthenticationError, match="credentials for user could not be verified") as info:
        PlainServer(broken).respond(b"\x00admin\x00admin-secret")
    assert "secret" not in info.value.reason


def test_nothing_is_accepted_after_failure_or_completion() -> None:
    srv = server()
    with pytest.raises(SaslAuthenticationError):
        srv.respond(b"\x00admin\x00wrong")
    with pytest.raises(SaslAuthenticationError) as info:
        srv.respond(b"\x00admin\x00admin-secret")
    assert info.value.code is ErrorCode.ILLEGAL_SASL_STATE and not srv.complete

    srv = server()
    srv.respond(b"\x00admin\x00admin-secret")
    with pytest.raises(SaslAuthenticationError) as info:
        srv.respond(b"\x00admin\x00admin-secret")
    assert info.value.code is ErrorCode.ILLEGAL_SASL_STATE


def test_authorization_id_is_unreadable_before_completion() -> None:
    with pytest.raises(RuntimeError):
        _ = server().authorization_id


def test_client_refuses_a_challenge_and_bad_credentials() -> None:
    client = PlainClient("admin", "admin-secret")
    client.first()
    with pytest.raises(SaslAuthenticationError):
        client.respond(b"unexpected")
    with pytest.raises(ValueError):
        PlainClient("", "x")
    with pytest.raises(ValueError):
        PlainClient("a\x00b", "x")


def test_factory_makes_plain_servers() -> None:
    srv = create_server("PLAIN", plain_passwords=USERS.get)
    assert isinstance(srv, PlainServer)
    assert srv.respond(b"\x00admin\x00admin-secret") == b"" and srv.authorization_id == "admin"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | st.lists(st.binary(max_size=12), max_size=5).map(b"\x00".join))
def test_garbage_never_authenticates_nor_raises_anything_else(token: bytes) -> None:
    srv = PlainServer({"a": "b"}.get)
    try:
        srv.respond(token)
    except SaslAuthenticationError:
        assert not srv.complete
        return
    assert token in (b"\x00a\x00b", b"a\x00a\x00b") and srv.authorization_id == "a"
