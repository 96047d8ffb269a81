"""The HTTP listener itself: /healthz and /readyz, disabled, misconfigured, a taken port, HTTPS with the broker's TLS
settings, and Basic authentication with the broker's SASL users (PLAIN from the JAAS line, SCRAM from the store)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.broker.broker import Broker
from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.server import Server
from odradek.http.auth import parse_basic
from odradek.security.credentials import alteration
from odradek.security.scram import ScramCredential
from tests.broker import inprocess
from tests.http.scrape import get, metrics, value
from tests.security import certs

HTTP = {"http.listeners": "http://127.0.0.1:0"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[inprocess.InProcessBroker]:
    yield from inprocess.serving(tmp_path_factory, "http-health", HTTP)


def test_healthz_and_readyz_of_a_serving_broker(node: inprocess.InProcessBroker) -> None:
    [url] = node.broker.http_urls
    assert get(url + "/healthz")[::2] == (200, "ok\n")
    assert get(url + "/readyz")[::2] == (200, "ready\n")
    assert get(url + "/nothing-here")[0] == 404


def test_readyz_is_503_with_the_reason_while_not_serving(node: inprocess.InProcessBroker) -> None:
    [url] = node.broker.http_urls
    node.on_loop(lambda: setattr(node.broker, "serving", False))
    try:
        status, _, body = get(url + "/readyz")
        assert status == 503
        assert body == "not ready: not serving: the broker is starting or shutting down\n"
        assert get(url + "/healthz")[0] == 200  # alive all the same
    finally:
        node.on_loop(lambda: setattr(node.broker, "serving", True))
    assert get(url + "/readyz")[0] == 200


def test_the_http_listener_stops_with_the_broker(tmp_path: Path) -> None:
    b = inprocess.InProcessBroker(tmp_path, HTTP)
    [url] = b.broker.http_urls
    assert get(url + "/healthz")[0] == 200
    b.close()
    port = int(url.rsplit(":", 1)[1])
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_an_empty_http_listeners_serves_no_http(tmp_path: Path) -> None:
    b = inprocess.InProcessBroker(tmp_path, {"http.listeners": ""})
    try:
        assert b.server.http is None
        assert b.broker.http_urls == []
    finally:
        b.close()


def test_http_is_served_by_default_on_9644() -> None:
    [default] = BrokerConfig.from_properties({}).http_listeners
    assert default.url == "http://127.0.0.1:9644"


@pytest.mark.parametrize(
    "value",
    ["ftp://127.0.0.1:21", "127.0.0.1:9644", "http://127.0.0.1", "http://127.0.0.1:http", "http://h:70000"],
)
def test_a_bad_http_listener_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError, match=r"http\.listeners: .* is not http://HOST:PORT or https://HOST:PORT"):
        BrokerConfig.from_properties({"http.listeners": value})


def test_https_without_a_key_store_is_a_config_error(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), "http.listeners": "https://127.0.0.1:0"})
    with pytest.raises(ConfigError, match=r"http\.listeners has an https listener.*ssl\.keystore\.location"):
        Server(Broker(config))


def test_a_taken_http_port_stops_the_start_and_frees_the_kafka_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = BrokerConfig.from_properties(
            {
                "log.dirs": str(tmp_path),
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "http.listeners": f"http://127.0.0.1:{port}",
            }
        )

        servers: list[Server] = []

        async def start() -> None:
            server = Server(Broker(config))
            servers.append(server)
            try:
                await server.start()
            finally:
                server.broker.stop()

        with pytest.raises(OSError, match=rf"http\.listeners: cannot listen on http://127\.0\.0\.1:{port}: "):
            asyncio.run(start())
    [kafka_port] = servers[0].ports.values()
    with socket.socket() as again:  # the Kafka listener bound before the HTTP one was closed
        again.bind(("127.0.0.1", kafka_port))


# -- HTTPS -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[inprocess.InProcessBroker, Path]]:
    d = tmp_path_factory.mktemp("http-tls")
    ca = certs.make_ca()
    cafile = certs.write_cert_pem(d / "ca.pem", ca)
    keystore = certs.write_keystore_pem(d / "server.pem", certs.issue(ca, "localhost"))
    props = {
        "http.listeners": "https://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
    }
    for b in inprocess.serving(tmp_path_factory, "http-tls-data", props):
        yield b, cafile


def test_https_serves_with_the_brokers_certificate(tls_node: tuple[inprocess.InProcessBroker, Path]) -> None:
    b, cafile = tls_node
    [url] = b.broker.http_urls
    assert url.startswith("https://127.0.0.1:")
    context = ssl.create_default_context(cafile=str(cafile))
    status, _, body = get(url + "/healthz", context=context)
    assert (status, body) == (200, "ok\n")
    assert value(metrics(url, context=context), "odradek_active_controller") == 1
    with pytest.raises(OSError):  # not plain HTTP
        get(url.replace("https://", "http://") + "/healthz")
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):  # a client that does not trust the broker's CA
        get(url + "/healthz", context=ssl.create_default_context())


# -- Basic authentication -----------------------------------------------------------------------------------------

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)


@pytest.fixture(scope="module")
def secure_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[inprocess.InProcessBroker]:
    props = {
        **HTTP,
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "10",
    }
    for b in inprocess.serving(tmp_path_factory, "http-auth", props):
        upsert = alteration({"SCRAM-SHA-256": ScramCredential.from_password("SCRAM-SHA-256", "bob-secret")}, [])
        b._run(b.broker.alter_scram_credentials("bob", upsert))
        yield b


@pytest.mark.parametrize("path", ["/metrics", "/healthz", "/readyz"])
def test_security_on_refuses_requests_without_credentials(secure_node: inprocess.InProcessBroker, path: str) -> None:
    [url] = secure_node.broker.http_urls
    status, headers, _ = get(url + path)
    assert status == 401
    assert headers["WWW-Authenticate"].startswith('Basic realm="odradek"')


@pytest.mark.parametrize(
    "credentials",
    [("alice", "wrong"), ("nobody", "alice-secret"), ("bob", "alice-secret"), ("alice", ""), ("", "")],
)
def test_wrong_credentials_are_refused(secure_node: inprocess.InProcessBroker, credentials: tuple[str, str]) -> None:
    [url] = secure_node.broker.http_urls
    assert get(url + "/healthz", auth=credentials)[0] == 401


@pytest.mark.parametrize("credentials", [("alice", "alice-secret"), ("admin", "admin-secret"), ("bob", "bob-secret")])
def test_plain_and_scram_users_are_let_in(secure_node: inprocess.InProcessBroker, credentials: tuple[str, str]) -> None:
    [url] = secure_node.broker.http_urls
    assert get(url + "/healthz", auth=credentials)[::2] == (200, "ok\n")
    assert value(metrics(url, auth=credentials), "odradek_active_controller") == 1


def test_connections_are_counted_per_listener(secure_node: inprocess.InProcessBroker) -> None:
    [url] = secure_node.broker.http_urls
    with socket.create_connection(secure_node.address):
        s = metrics(url, auth=("alice", "alice-secret"))
        deadline_open = value(s, "odradek_connections", listener="PLAINTEXT")
    assert deadline_open is not None and deadline_open >= 1
    assert value(s, "odradek_connections_created_total", listener="PLAINTEXT") >= 1


def test_parse_basic() -> None:
    assert parse_basic("Basic YWxpY2U6c2VjcmV0OjE=") == ("alice", "secret:1")
    assert parse_basic("basic YWxpY2U6") == ("alice", "")
    for bad in (None, "", "Bearer x", "Basic !!!", "Basic YWxpY2U="):  # the last has no colon
        assert parse_basic(bad) is None
