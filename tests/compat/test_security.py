"""Real clients (confluent-kafka, kafka-python, aiokafka) over every security protocol of one broker: SSL (server
certificate only), mTLS (client certificates required, their DN mapped to a user), SASL_PLAINTEXT and SASL_SSL with
PLAIN; wrong passwords and wrong certificates refused, the broker serving the others meanwhile.

The broker runs in this process (``tests/broker/inprocess.py``), so the test reads the principal each connection
authenticated as from the broker's log. Certificates are made by ``tests/security/certs.py``.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography import x509

from tests.broker import inprocess
from tests.compat.secure_clients import CLIENTS, Security, consume, produce, roundtrip
from tests.security import certs

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
LISTENERS = ("PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")


class Setup:
    def __init__(self, root: Path) -> None:
        self.ca = certs.make_ca()
        self.cafile = certs.write_cert_pem(root / "ca.pem", self.ca)
        server = certs.issue(self.ca, "localhost")
        self.keystore = certs.write_pkcs12(root / "server.p12", server, b"store-pw")
        alice = certs.issue(self.ca, "alice", client=True, subject=[("OU", "eng"), ("O", "Acme")])
        self.alice_cert = certs.write_cert_pem(root / "alice-chain.pem", alice)
        self.alice_key = certs.write_key_pem(root / "alice-key.pem", alice, b"key-pw")
        stranger_ca = certs.make_ca("Somebody Else's CA")
        mallory = certs.issue(stranger_ca, "mallory", client=True)
        self.mallory_cert = certs.write_cert_pem(root / "mallory-chain.pem", mallory)
        self.mallory_key = certs.write_key_pem(root / "mallory-key.pem", mallory)
        self.props = {
            "listeners": ",".join(f"{n}://127.0.0.1:0" for n in LISTENERS),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                              "SASL_SSL:SASL_SSL",
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.password": "store-pw",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.cafile),
            "listener.name.mtls.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),O=Acme,OU=eng$/$1/,DEFAULT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
            "connection.failed.authentication.delay.ms": "50",
        }

    def security(self, listener: str) -> Security:
        tls = {"cafile": self.cafile}
        return {
            "PLAINTEXT": Security(),
            "SSL": Security("SSL", **tls),
            "MTLS": Security("SSL", certfile=self.alice_cert, keyfile=self.alice_key, key_password="key-pw", **tls),
            "SASL_PLAINTEXT": Security("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"),
            "SASL_SSL": Security("SASL_SSL", "PLAIN", "alice", "alice-secret", **tls),
        }[listener]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return Setup(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(setup: Setup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[inprocess.InProcessBroker]:
    yield from inprocess.serving(tmp_path_factory, "secure", setup.props)


def bootstrap(node: inprocess.InProcessBroker, listener: str) -> str:
    # "localhost": the broker's certificate names it, so host name verification is on for TLS clients
    return f"localhost:{node.server.ports[listener]}"


@pytest.mark.parametrize("listener", LISTENERS[1:])
@pytest.mark.parametrize("client", CLIENTS)
def test_clients_produce_and_consume_over_each_protocol(node: inprocess.InProcessBroker, setup: Setup,
                                                        client: str, listener: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="odradek.broker")
    topic = f"secure-{listener.lower()}-{client}"
    values = [b"%s over %s #%d" % (client.encode(), listener.encode(), i) for i in range(5)]
    assert roundtrip(client, bootstrap(node, listener), setup.security(listener), topic, values) == values
    principals = {r.getMessage().split("authenticated as ")[1].split(" ")[0] for r in caplog.records
                  if f"on listener {listener} authenticated as" in r.getMessage()}  # (not an earlier test's client)
    expected = {"SSL": set(), "MTLS": {"User:alice"}}.get(listener, {"User:alice"})
    assert principals == expected


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("client", CLIENTS)
def test_a_wrong_password_is_refused(node: inprocess.InProcessBroker, setup: Setup, client: str,
                                     listener: str, caplog: pytest.LogCaptureFixture) -> None:
    wrong = replace(setup.security(listener), password="not-her-password")
    refused(lambda: roundtrip(client, bootstrap(node, listener), wrong, f"refused-{client}", [b"x"], timeout=4))
    assert any("failed authentication" in r.getMessage() and "Invalid username or password" in r.getMessage()
               for r in caplog.records)
    assert not any("not-her-password" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("client", CLIENTS)
def test_mtls_refuses_a_client_without_a_certificate_or_with_a_strangers(node: inprocess.InProcessBroker,
                                                                         setup: Setup, client: str) -> None:
    for who in (Security("SSL", cafile=setup.cafile),
                Security("SSL", cafile=setup.cafile, certfile=setup.mallory_cert, keyfile=setup.mallory_key)):
        refused(lambda who=who: roundtrip(client, bootstrap(node, "MTLS"), who, f"mtls-refused-{client}", [b"x"],
                                          timeout=4))
    # the listener still serves a client with a good certificate
    good = setup.security("MTLS")
    assert roundtrip(client, bootstrap(node, "MTLS"), good, f"mtls-after-{client}", [b"ok"]) == [b"ok"]


def test_a_plaintext_client_on_a_tls_port_and_junk_after_a_client_hello_close_only_that_connection(
        node: inprocess.InProcessBroker, setup: Setup) -> None:
    port = node.server.ports["SSL"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x03\x00\x00\x00\x01\x00\x00")  # a Kafka ApiVersions frame
        assert _closed(s)  # after a TLS alert, or none
    ctx = ssl.create_default_context(cafile=str(setup.cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"\xff" * 64)  # not a Kafka frame: a negative size
            assert _closed(tls)
    values = [b"still serving"]
    assert roundtrip("confluent", bootstrap(node, "SSL"), setup.security("SSL"), "after-junk", values) == values


def refused(attempt: Callable[[], object]) -> None:
    """``attempt`` fails the way a refused client fails (each library raises its own kind), not by a mistake of
    the test's own (a wrong argument)."""
    with pytest.raises(Exception) as e:
        attempt()
    assert not isinstance(e.value, TypeError | ValueError | AttributeError), e.value


def _closed(s: socket.socket, timeout: float = 10.0) -> bool:
    """True if the peer closes the connection within ``timeout`` (whatever it sends first is read and dropped),
    False if it is still open then."""
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        s.settimeout(remaining)
        try:
            if not s.recv(4096):
                return True
        except TimeoutError:
            return False
        except (ConnectionError, ssl.SSLError):
            return True
    return False


def test_clients_re_authenticate_before_their_session_ends(setup: Setup, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """KIP-368 with librdkafka: with connections.max.reauth.ms set, the client re-authenticates on its open
    connections and goes on producing; no connection is closed for an expired session."""
    caplog.set_level(logging.DEBUG, logger="odradek.broker")
    props = {**setup.props, "connections.max.reauth.ms": "1000"}
    b = inprocess.InProcessBroker(tmp_path, props)
    try:
        s = setup.security("SASL_PLAINTEXT")
        from confluent_kafka import Producer

        from tests.compat.secure_clients import confluent_config

        p = Producer({**confluent_config(bootstrap(b, "SASL_PLAINTEXT"), s), "acks": "all", "linger.ms": 0})
        failed: list[object] = []
        for i in range(12):  # ~3.6 s: more than three sessions
            p.produce("reauth", b"%d" % i, on_delivery=lambda err, _m: failed.append(err) if err else None)
            p.flush(10)
            time.sleep(0.3)
        assert p.flush(10) == 0 and not failed
    finally:
        b.close()
    logins: dict[str, int] = {}
    for r in caplog.records:
        if "authenticated as User:alice" in r.getMessage():
            peer = r.getMessage().split("connection from ")[1].split(" ")[0]
            logins[peer] = logins.get(peer, 0) + 1
    assert max(logins.values()) >= 3, logins  # one connection authenticated again and again
    assert not any("session expired" in r.getMessage() for r in caplog.records)


def test_tls_consumers_read_the_same_bytes_as_plaintext_ones_from_any_offset(node: inprocess.InProcessBroker,
                                                                              setup: Setup) -> None:
    """Over TLS the broker cannot sendfile: it reads each region at its own position (a plaintext consumer's
    sendfile moves the segment file's shared position; reading through it sent nothing or other bytes)."""
    topic = "tls-reads-like-plaintext"
    values = [b"%06d:" % i + bytes([65 + i % 26]) * 1000 for i in range(3000)]  # ~3 MB: past small responses
    plain, tls = setup.security("PLAINTEXT"), setup.security("SSL")
    produce("confluent", bootstrap(node, "PLAINTEXT"), plain, topic, values)
    for client in CLIENTS:
        for start in (0, 1234):
            assert consume(client, bootstrap(node, "PLAINTEXT"), plain, topic, 3000 - start, start=start) == \
                values[start:]  # moves the segment's file position
            assert consume(client, bootstrap(node, "SSL"), tls, topic, 3000 - start, start=start) == values[start:]


def test_a_replaced_key_store_is_served_to_new_connections_without_a_restart(setup: Setup, tmp_path: Path) -> None:
    """Certificate rotation: the broker's PEM key store file is replaced by one from another CA; new connections
    get the new certificate within a few ticks (log.flush.scheduler.interval.ms), a client trusting only the new
    CA produces and consumes, and a connection opened before goes on being served."""
    old = setup.ca
    new_ca = certs.make_ca("Renewed CA")
    keystore = certs.write_keystore_pem(tmp_path / "server.pem", certs.issue(old, "localhost"), b"pw")
    both = certs.write_cert_pem(tmp_path / "both.pem", old, new_ca)
    props = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
             "ssl.keystore.location": str(keystore), "ssl.key.password": "pw", "log.flush.scheduler.interval.ms": "200"}
    b = inprocess.InProcessBroker(tmp_path / "data", props)
    try:
        port = b.server.ports["SSL"]
        to_both = ssl.create_default_context(cafile=str(both))

        def served() -> x509.Certificate:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                    to_both.wrap_socket(raw, server_hostname="localhost") as s:
                return x509.load_der_x509_certificate(s.getpeercert(binary_form=True))

        assert served().issuer == old.cert.subject
        before = to_both.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                     server_hostname="localhost")
        fresh = tmp_path / "server.pem.new"
        certs.write_keystore_pem(fresh, certs.issue(new_ca, "localhost"), b"pw")
        os.replace(fresh, keystore)
        deadline = time.monotonic() + 15
        while served().issuer != new_ca.cert.subject:
            assert time.monotonic() < deadline, "the broker still serves the replaced certificate"
            time.sleep(0.1)
        only_new = Security("SSL", cafile=certs.write_cert_pem(tmp_path / "new-ca.pem", new_ca))
        values = [b"after the rotation"]
        assert roundtrip("confluent", f"localhost:{port}", only_new, "rotated", values) == values
        before.sendall(API_VERSIONS_V0)  # the connection from before the rotation is still served
        size = int.from_bytes(_read_exactly(before, 4), "big")
        assert int.from_bytes(_read_exactly(before, size)[:4], "big") == 7  # its correlation id
        before.close()
    finally:
        b.close()


API_VERSIONS_V0 = b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x07\xff\xff"  # ApiVersions v0, correlation id 7


def _read_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, "the connection was closed"
        data += chunk
    return data
