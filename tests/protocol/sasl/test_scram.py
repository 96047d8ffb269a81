"""SASL/SCRAM: client against server, RFC 7677's exchange byte for byte, Kafka's refusals, garbage tokens."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import ErrorCode
from odradek.protocol.sasl import (
    SaslAuthenticationError,
    ScramClient,
    ScramServer,
    UnsupportedSaslMechanismError,
    create_server,
)
from odradek.security.scram import ScramCredential
from tests.protocol.sasl.exchange import run_exchange

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
CREDENTIALS = {m: {"alice": ScramCredential.from_password(m, "alice-secret")} for m in MECHANISMS}


def generic(mechanism: str) -> str:
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


def server(mechanism: str, nonce: str | None = None) -> ScramServer:
    return ScramServer(mechanism, CREDENTIALS[mechanism].get, nonce=nonce)


def refused(srv: ScramServer, token: bytes) -> SaslAuthenticationError:
    with pytest.raises(SaslAuthenticationError) as info:
        srv.respond(token)
    assert not srv.complete
    return info.value


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_client_and_server_agree(mechanism: str) -> None:
    srv, client = server(mechanism), ScramClient(mechanism, "alice", "alice-secret")
    tokens = run_exchange(client, srv)
    assert len(tokens) == 4 and tokens[0].startswith(b"n,,n=alice,r=") and tokens[3].startswith(b"v=")
    assert srv.complete and client.complete and srv.authorization_id == "alice"


def test_rfc_7677_exchange_byte_for_byte() -> None:
    credential = ScramCredential.from_password(
        "SCRAM-SHA-256", "pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    )
    srv = ScramServer("SCRAM-SHA-256", {"user": credential}.get, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert run_exchange(client, srv) == [
        b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
    ]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_and_unknown_user_get_the_same_words(mechanism: str) -> None:
    srv, client = server(mechanism), ScramClient(mechanism, "alice", "Tr0ub4dor")
    final = client.respond(srv.respond(client.first()))
    wrong = refused(srv, final)
    assert str(wrong) == generic(mechanism) and "proof" in wrong.reason
    unknown = refused(server(mechanism), ScramClient(mechanism, "bob", "alice-secret").first())
    assert str(unknown) == generic(mechanism) and unknown.reason.endswith("unknown user")
    for error in (wrong, unknown):
        assert error.code is ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "secret" not in str(error) + error.reason and "Tr0ub4dor" not in str(error) + error.reason


def test_mechanisms_do_not_mix() -> None:
    srv = ScramServer("SCRAM-SHA-512", CREDENTIALS["SCRAM-SHA-256"].get)
    with pytest.raises(SaslAuthenticationError):
        run_exchange(ScramClient("SCRAM-SHA-512", "alice", "alice-secret"), srv)


def client_final(srv: ScramServer, client: ScramClient) -> bytes:
    return client.respond(srv.respond(client.first()))


def test_nonce_mismatch() -> None:
    srv, client = server("SCRAM-SHA-256"), ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    final = client_final(srv, client).decode()
    parts = final.split(",")
    parts[1] = parts[1][:-1] + ("A" if parts[1][-1] != "A" else "B")
    error = refused(srv, ",".join(parts).encode())
    assert "nonce" in error.reason


@pytest.mark.parametrize(
    "token",
    [
        b"",
        b"n,,",
        b"garbage",
        b"n,,n=alice",
        b"n,,r=abc,n=alice",
        b"\xff\xfe",
        b"c=biws,r=abc,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",  # a client-final, out of order
        b"p=tls-unique,,n=alice,r=abc",
    ],
)
def test_malformed_or_out_of_order_client_first(token: bytes) -> None:
    assert str(refused(server("SCRAM-SHA-256"), token)) == generic("SCRAM-SHA-256")


@pytest.mark.parametrize("token", [b"", b"c=biws", b"n,,n=alice,r=abc", b"c=biws,r=x,p=!!!", b"\x80"])
def test_malformed_or_out_of_order_client_final(token: bytes) -> None:
    srv = server("SCRAM-SHA-256")
    srv.respond(ScramClient("SCRAM-SHA-256", "alice", "alice-secret").first())
    assert str(refused(srv, token)) == generic("SCRAM-SHA-256")


def test_nothing_is_accepted_after_completion_or_failure() -> None:
    srv, client = server("SCRAM-SHA-256"), ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    tokens = run_exchange(client, srv)
    assert refused_code(srv, tokens[2]) is ErrorCode.ILLEGAL_SASL_STATE
    srv = server("SCRAM-SHA-256")
    refused(srv, b"garbage")
    assert refused_code(srv, tokens[0]) is ErrorCode.ILLEGAL_SASL_STATE


def refused_code(srv: ScramServer, token: bytes) -> ErrorCode:
    with pytest.raises(SaslAuthenticationError) as info:
        srv.respond(token)
    return info.value.code


def test_delegation_tokens_and_other_extensions_are_refused() -> None:
    error = refused(server("SCRAM-SHA-256"), b"n,,n=alice,r=abc,tokenauth=true")
    assert str(error) == generic("SCRAM-SHA-256") and "tokenauth" in error.reason
    error = refused(server("SCRAM-SHA-256"), b"n,,n=alice,r=abc,color=blue")
    assert "extensions" in error.reason


def test_authorization_ids() -> None:
    error = refused(server("SCRAM-SHA-256"), b"n,a=admin,n=alice,r=abc")
    assert str(error) == (
        "Authentication failed: Client requested an authorization id that is different from username"
    )
    error = refused(server("SCRAM-SHA-256"), b"n,a=alice,n=alice,r=abc")
    assert "authorization id" in error.reason


def test_user_names_are_unescaped() -> None:
    credential = CREDENTIALS["SCRAM-SHA-256"]["alice"]
    srv = ScramServer("SCRAM-SHA-256", {"a=b,c": credential}.get)
    run_exchange(ScramClient("SCRAM-SHA-256", "a=b,c", "alice-secret"), srv)
    assert srv.authorization_id == "a=b,c"


def test_client_verifies_the_server() -> None:
    srv, client = server("SCRAM-SHA-256"), ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
    srv.respond(client_final(srv, client))
    with pytest.raises(SaslAuthenticationError, match="Invalid server signature"):
        client.respond(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert not client.complete


def test_client_refuses_a_foreign_nonce_and_too_many_iterations() -> None:
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret", nonce="abc")
    client.first()
    with pytest.raises(SaslAuthenticationError):
        client.respond(b"r=xyz123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret", nonce="abc")
    client.first()
    with pytest.raises(SaslAuthenticationError) as info:
        client.respond(b"r=abc123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=9999999")
    assert "9999999" in info.value.reason


def test_factory() -> None:
    lookups = {m: CREDENTIALS[m].get for m in MECHANISMS}
    for mechanism in MECHANISMS:
        srv = create_server(mechanism, scram_credentials=lookups)
        assert isinstance(srv, ScramServer) and srv.mechanism == mechanism
    for mechanism in ("GSSAPI", "OAUTHBEARER", "SCRAM-SHA-1", "PLAIN"):
        with pytest.raises(UnsupportedSaslMechanismError, match=f"Unsupported SASL mechanism {mechanism}"):
            create_server(mechanism, scram_credentials=lookups)
    with pytest.raises(UnsupportedSaslMechanismError):
        ScramServer("SCRAM-SHA-1", CREDENTIALS["SCRAM-SHA-256"].get)


# Cheap credentials would be nice for speed, but 4096 is the floor; one exchange costs a few ms.
@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(MECHANISMS))
def test_garbage_client_first_is_refused(token: bytes, mechanism: str) -> None:
    srv = server(mechanism)
    try:
        challenge = srv.respond(token)
    except SaslAuthenticationError:
        return
    assert not srv.complete and challenge.startswith(b"r=")  # a well-formed first message for a known user


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=120).map(str.encode))
def test_garbage_client_final_never_authenticates(token: bytes) -> None:
    srv = server("SCRAM-SHA-256")
    srv.respond(ScramClient("SCRAM-SHA-256", "alice", "alice-secret").first())
    refused(srv, token)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_garbage_server_messages_never_complete_the_client(first: bytes, final: bytes) -> None:
    client = ScramClient("SCRAM-SHA-256", "alice", "alice-secret", nonce="abc")
    client.first()
    try:
        client.respond(first)
        client.respond(final)
    except SaslAuthenticationError:
        assert not client.complete
        return
    raise AssertionError("a client accepted a random server")
