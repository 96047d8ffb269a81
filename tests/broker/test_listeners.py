"""Several listeners on one broker: each is served, and each answers Metadata, FindCoordinator and DescribeCluster
with the broker's address *on that listener* (Kafka's answer: a client only ever learns addresses of the listener
it came in on). Real clients (confluent-kafka) bootstrap through either listener."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from odradek.protocol import apis
from tests.broker import inprocess, wire
from tests.broker.wire import Conn

PROPS = {
    "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0,REPORTED://127.0.0.1:0",
    "advertised.listeners": "REPORTED://reported.example:19092",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,REPORTED:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[inprocess.InProcessBroker]:
    yield from inprocess.serving(tmp_path_factory, "listeners", PROPS)


def _address(node: inprocess.InProcessBroker, name: str) -> tuple[str, int]:
    return ("127.0.0.1", node.server.ports[name])


@pytest.mark.parametrize(("name", "expected"), [
    ("INTERNAL", None), ("EXTERNAL", None), ("REPORTED", ("reported.example", 19092)),
])
def test_each_listener_answers_with_its_own_address(node: inprocess.InProcessBroker, name: str,
                                                    expected: tuple[str, int] | None) -> None:
    host, port = expected or _address(node, name)
    with Conn(_address(node, name)) as c:
        (b,) = wire.metadata(c, None).brokers
        assert (b.host, b.port) == (host, port)
        coordinator = c.request(apis.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert (coordinator.host, coordinator.port) == (host, port)
        (described,) = c.request(apis.DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False}).brokers
        assert (described.host, described.port) == (host, port)


def test_the_listeners_are_bound_to_distinct_ports_and_the_first_is_the_servers_port(
        node: inprocess.InProcessBroker) -> None:
    ports = node.server.ports
    assert list(ports) == ["INTERNAL", "EXTERNAL", "REPORTED"]
    assert len(set(ports.values())) == 3
    assert node.server.port == ports["INTERNAL"]


def test_clients_bootstrap_through_either_listener(node: inprocess.InProcessBroker, tmp_path: Path) -> None:
    topic = "through-listeners"
    for i, name in enumerate(("INTERNAL", "EXTERNAL")):
        bootstrap = f"127.0.0.1:{node.server.ports[name]}"
        p = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
        p.produce(topic, key=name.encode(), value=b"via %s" % name.encode())
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{name}", "auto.offset.reset": "earliest",
                      "log_level": 3})
        c.subscribe([topic])
        got: list[bytes] = []
        for _ in range(100):  # bounded: up to ~30 s
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) == i + 1:
                break
        c.close()
        assert got == [b"via INTERNAL", b"via EXTERNAL"][: i + 1]
