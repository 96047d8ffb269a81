"""SCRAM logins end to end: a credential created through the broker's PLAINTEXT listener (confluent-kafka's
AdminClient, which salts the password client-side) lets confluent-kafka, kafka-python and aiokafka produce and
consume over its SASL_PLAINTEXT listener with SCRAM-SHA-256 and SCRAM-SHA-512; a wrong password, a deleted
credential and a user without one are refused; and the credentials survive a restart of the broker process.

Uses the round trip of ``tests/compat/secure_clients.py`` (each library's own settings) and one broker process for
the module (``tests/broker/scram_listeners.py``). Topics are per test and client.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from tests.broker.process import BrokerProcess, free_port
from tests.broker.scram_listeners import MECHANISMS, scram_wrap
from tests.compat.secure_clients import CLIENTS, Security, roundtrip

PUBLIC = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}


class ScramBroker:
    def __init__(self, base: Path) -> None:
        self.sasl_port = free_port()
        self.process = BrokerProcess(base / "data", base / "broker.log", ["num.partitions=1"],
                                     wrap=scram_wrap(self.sasl_port))

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def alter(self, *alterations: UserScramCredentialAlteration) -> None:
        admin = AdminClient({"bootstrap.servers": self.process.bootstrap, "socket.timeout.ms": 10000})
        for f in admin.alter_user_scram_credentials(list(alterations)).values():
            f.result(timeout=15)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScramBroker]:
    b = ScramBroker(tmp_path_factory.mktemp("scram"))
    b.process.start()
    b.alter(UserScramCredentialUpsertion("alice", ScramCredentialInfo(PUBLIC["SCRAM-SHA-256"], 8192), b"alice-secret"),
            UserScramCredentialUpsertion("alice", ScramCredentialInfo(PUBLIC["SCRAM-SHA-512"], 4096), b"alice-secret"))
    try:
        yield b
    finally:
        assert b.process.stop() == 0, b.process.log()[-3000:]


def alice(mechanism: str, password: str = "alice-secret") -> Security:
    return Security("SASL_PLAINTEXT", mechanism, "alice", password)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", CLIENTS)
def test_clients_log_in_with_a_stored_credential(node: ScramBroker, client: str, mechanism: str) -> None:
    values = [b"one", b"two"]
    assert roundtrip(client, node.sasl_bootstrap, alice(mechanism), f"scram-{client}-{mechanism}", values) == values


@pytest.mark.parametrize("client", CLIENTS)
def test_a_wrong_password_is_refused(node: ScramBroker, client: str) -> None:
    with pytest.raises(Exception):  # noqa: B017 - each library raises its own kind
        roundtrip(client, node.sasl_bootstrap, alice("SCRAM-SHA-256", "not-her-password"), f"wrong-{client}", [b"x"],
                  timeout=8)
    assert "not-her-password" not in node.process.log()


def test_a_deleted_credential_and_an_unknown_user_are_refused_and_credentials_survive_a_restart(
        node: ScramBroker) -> None:
    node.alter(UserScramCredentialUpsertion("bob", ScramCredentialInfo(PUBLIC["SCRAM-SHA-512"], 4096), b"bob-secret"))
    bob = Security("SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", "bob-secret")
    assert roundtrip("confluent", node.sasl_bootstrap, bob, "bob-before", [b"x"]) == [b"x"]
    node.alter(UserScramCredentialDeletion("bob", PUBLIC["SCRAM-SHA-512"]))
    with pytest.raises(Exception):  # noqa: B017 - the credential is gone
        roundtrip("kafka-python", node.sasl_bootstrap, bob, "bob-after", [b"x"], timeout=8)
    with pytest.raises(Exception):  # noqa: B017 - carol has no credential at all
        roundtrip("kafka-python", node.sasl_bootstrap, Security("SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "c"),
                  "carol", [b"x"], timeout=8)
    assert node.process.stop() == 0
    node.process.start()
    assert roundtrip("aiokafka", node.sasl_bootstrap, alice("SCRAM-SHA-512"), "after-restart", [b"y"]) == [b"y"]
