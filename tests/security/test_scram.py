"""SCRAM credentials: Kafka's storage string, derivation from passwords and salted passwords, and use."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.sasl import SaslAuthenticationError, ScramClient, ScramServer
from odradek.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISM_TYPES,
    ScramCredential,
    ScramCredentialError,
    salted_password,
)
from tests.protocol.sasl.exchange import run_exchange

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}

credentials = st.builds(
    ScramCredential,
    salt=st.binary(min_size=1, max_size=64),
    stored_key=st.binary(min_size=1, max_size=64),
    server_key=st.binary(min_size=1, max_size=64),
    iterations=st.integers(min_value=MIN_ITERATIONS, max_value=2**31 - 1),
)


@given(credentials)
def test_storage_string_round_trips(credential: ScramCredential) -> None:
    text = credential.format()
    assert ScramCredential.parse(text) == credential
    assert text.startswith("salt=") and f",iterations={credential.iterations}" in text


def test_storage_string_is_kafkas() -> None:
    credential = ScramCredential(b"salty-salt-1", b"\x01" * 32, b"\x02" * 32, 4096)
    assert credential.format() == (
        "salt=c2FsdHktc2FsdC0x,stored_key=AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=,"
        "server_key=AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=,iterations=4096"
    )
    # Kafka reads the fields by name, in any order.
    shuffled = "iterations=8192,server_key=Ag==,salt=c2FsdA==,stored_key=AQ=="
    assert ScramCredential.parse(shuffled) == ScramCredential(b"salt", b"\x01", b"\x02", 8192)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("", "not of the form"),
        ("salt=c2FsdA==,stored_key=AQ==,server_key=Ag==", "lacks iterations"),
        ("salt=c2FsdA==,stored_key=AQ==,server_key=Ag==,iterations=4096,extra=1", "unknown field 'extra'"),
        ("salt=c2FsdA==,salt=c2FsdA==,stored_key=AQ==,server_key=Ag==,iterations=4096", "'salt' twice"),
        ("salt=c2FsdA==,stored_key=AQ==,server_key=A!g==,iterations=4096", "server_key is not valid base64"),
        ("salt=c2FsdA==,stored_key=AQ==,server_key=Ag==,iterations=4k", "iterations is not a decimal"),
        ("salt=c2FsdA==,stored_key=AQ==,server_key=Ag==,iterations=-4096", "iterations is not a decimal"),
        ("salt=c2FsdA==,stored_key=AQ==,server_key=Ag==,iterations=100", "less than the minimum 4096"),
        ("salt=,stored_key=AQ==,server_key=Ag==,iterations=4096", "salt is empty"),
        ("salt=c2FsdA==,stored_key=AQ==,server_key=Ag==,=4096", "not of the form"),
    ],
)
def test_malformed_storage_strings_are_named(text: str, names: str) -> None:
    with pytest.raises(ScramCredentialError, match=names) as info:
        ScramCredential.parse(text)
    assert "AQ==" not in str(info.value) and "Ag==" not in str(info.value)


@settings(max_examples=200)
@given(st.text(max_size=80))
def test_any_text_parses_or_raises_the_named_error(text: str) -> None:
    try:
        ScramCredential.parse(text)
    except ScramCredentialError:
        pass


def test_repr_hides_the_keys() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-256", "pencil")
    for shown in (repr(credential), str(credential), f"{credential}"):
        for secret in (credential.stored_key, credential.server_key, credential.salt):
            assert base64.b64encode(secret).decode() not in shown and secret.hex() not in shown
        assert "4096" in shown


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_credential_from_a_password_authenticates_that_password_only(mechanism: str) -> None:
    credential = ScramCredential.from_password(mechanism, "alice-secret", iterations=8192)
    assert credential.iterations == 8192 and len(credential.salt) >= 12
    assert len(credential.stored_key) == len(credential.server_key) == hashlib.new(HASHES[mechanism]).digest_size
    srv = ScramServer(mechanism, {"alice": credential}.get)
    run_exchange(ScramClient(mechanism, "alice", "alice-secret"), srv)
    assert srv.authorization_id == "alice"
    with pytest.raises(SaslAuthenticationError):
        run_exchange(ScramClient(mechanism, "alice", "alice-secreT"), ScramServer(mechanism, {"alice": credential}.get))


def test_random_salts_differ() -> None:
    assert ScramCredential.from_password("SCRAM-SHA-256", "p") != ScramCredential.from_password("SCRAM-SHA-256", "p")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_credential_from_a_clients_salted_password(mechanism: str) -> None:
    # What an AlterUserScramCredentials client sends: salt, Hi(password, salt, i) and i (PBKDF2-HMAC).
    salt, iterations = b"kafka-admin-salt-0123", 4096
    salted = hashlib.pbkdf2_hmac(HASHES[mechanism], b"bob-secret", salt, iterations)
    assert salted_password(mechanism, "bob-secret", salt, iterations) == salted
    credential = ScramCredential.from_salted_password(mechanism, salted, salt, iterations)
    # The keys as RFC 5802 defines them, computed here independently of scramp.
    client_key = hmac.new(salted, b"Client Key", HASHES[mechanism]).digest()
    assert credential.stored_key == hashlib.new(HASHES[mechanism], client_key).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", HASHES[mechanism]).digest()
    assert credential == ScramCredential.from_password(mechanism, "bob-secret", salt=salt)
    lookup = {"bob": credential}.get
    run_exchange(ScramClient(mechanism, "bob", "bob-secret"), ScramServer(mechanism, lookup))
    with pytest.raises(SaslAuthenticationError):
        run_exchange(ScramClient(mechanism, "bob", "alice-secret"), ScramServer(mechanism, lookup))


def test_rfc_7677_credential() -> None:
    # RFC 7677's exchange verifies only with exactly these keys (the exchange itself: tests/protocol/sasl).
    credential = ScramCredential.from_password(
        "SCRAM-SHA-256", "pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    )
    srv = ScramServer("SCRAM-SHA-256", {"user": credential}.get, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    srv.respond(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    final = srv.respond(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (lambda: ScramCredential.from_password("SCRAM-SHA-1", "p"), "unknown SCRAM mechanism"),
        (lambda: ScramCredential.from_password("SCRAM-SHA-256", "p", iterations=4095), "less than the minimum"),
        (lambda: ScramCredential.from_password("SCRAM-SHA-256", "p", iterations=16385), "more than the maximum"),
        (lambda: ScramCredential.from_password("SCRAM-SHA-256", ""), "password is empty"),
        (lambda: ScramCredential.from_salted_password("SCRAM-SHA-256", b"", b"salt", 4096), "salted_password is"),
        (lambda: ScramCredential.from_salted_password("SCRAM-SHA-256", b"x" * 32, b"", 4096), "salt is 0 bytes"),
        (lambda: ScramCredential.from_password("SCRAM-SHA-256", "p", salt=b"x" * 11), "at least 12"),
        (lambda: ScramCredential(b"s", b"k", b"k", True), "must be an int"),
        (lambda: ScramCredential(b"s", "k", b"k", 4096), "stored_key must be bytes"),  # type: ignore[arg-type]
    ],
)
def test_refused_credentials(call: object, names: str) -> None:
    with pytest.raises(ScramCredentialError, match=names):
        call()  # type: ignore[operator]


def test_limits_and_types() -> None:
    assert (MIN_ITERATIONS, MAX_ITERATIONS) == (4096, 16384)
    assert SCRAM_MECHANISM_TYPES == {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
    assert ScramCredential.from_password("SCRAM-SHA-512", "p", iterations=MAX_ITERATIONS).iterations == 16384
