"""The credential store (odradek/security/credentials.py) and the split of a user's stored configs into quotas and
SCRAM credentials (odradek/cluster/zk/layout.py): pure, no broker."""

from __future__ import annotations

import logging

import pytest

from odradek.cluster.zk.layout import split_credentials, user_entity_path
from odradek.security.credentials import CredentialNotFound, CredentialStore, alteration
from odradek.security.scram import ScramCredential

SALT = b"0123456789abcdef"
A256 = ScramCredential.from_password("SCRAM-SHA-256", "alice-secret", salt=SALT, iterations=8192)
A512 = ScramCredential.from_password("SCRAM-SHA-512", "alice-secret", salt=SALT)


def test_lookup_by_user_and_mechanism_and_replacement_of_a_whole_user() -> None:
    store = CredentialStore()
    store.replace_all({"alice": {"SCRAM-SHA-512": A512.format(), "SCRAM-SHA-256": A256.format()},
                       "bob": {"SCRAM-SHA-512": A512.format()}})
    assert store.lookup("SCRAM-SHA-256", "alice") == A256
    assert store.lookup("SCRAM-SHA-256", "bob") is None
    assert list(store.credentials("alice")) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert store.users() == ["alice", "bob"]
    store.replace_user("alice", {"SCRAM-SHA-512": A512.format()})
    assert store.lookup("SCRAM-SHA-256", "alice") is None and store.lookup("SCRAM-SHA-512", "alice") == A512
    store.replace_user("bob", {})
    assert store.users() == ["alice"] and store.credentials("bob") == {}
    store.replace_all({})
    assert store.users() == [] and store.lookup("SCRAM-SHA-512", "alice") is None


def test_bad_stored_strings_are_left_out_without_showing_them(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    store = CredentialStore()
    garbage = "salt=AAAA,stored_key=!!!,server_key=BBBB,iterations=4096"
    store.replace_user("alice", {"SCRAM-SHA-256": garbage, "SCRAM-SHA-512": A512.format(), "PLAIN": "x"})
    assert list(store.credentials("alice")) == ["SCRAM-SHA-512"]
    assert "!!!" not in caplog.text and "alice" in caplog.text


def test_alteration_sets_deletes_and_refuses_a_missing_deletion() -> None:
    current = {"SCRAM-SHA-256": A256.format()}
    assert alteration({"SCRAM-SHA-512": A512}, ["SCRAM-SHA-256"])(dict(current)) == {"SCRAM-SHA-512": A512.format()}
    assert alteration({"SCRAM-SHA-512": A512}, [])(dict(current)) == {**current, "SCRAM-SHA-512": A512.format()}
    with pytest.raises(CredentialNotFound, match="SCRAM-SHA-512"):
        alteration({}, ["SCRAM-SHA-512"])(dict(current))


def test_a_users_configs_split_into_quotas_and_credentials() -> None:
    configs = {"producer_byte_rate": "1024", "SCRAM-SHA-256": A256.format(), "consumer_byte_rate": "5"}
    assert split_credentials(configs) == ({"producer_byte_rate": "1024", "consumer_byte_rate": "5"},
                                          {"SCRAM-SHA-256": A256.format()})
    assert user_entity_path("User:a b/c") == "users/User%3Aa%20b%2Fc"
    with pytest.raises(ValueError):
        user_entity_path("")
