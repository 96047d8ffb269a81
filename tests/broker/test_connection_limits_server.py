"""Connection limits over real sockets (odradek/broker/connection_limits.py wired into server.py).

The broker runs its real server on an event loop in a background thread (as in test_read_committed.py), so
the tests can read its counts and capture its log lines. Connections over a limit must be closed by the broker
at once (the client reads EOF), while the admitted ones, and a real client that was connected before, go on
being served. Every wait is a bounded poll.
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import KafkaError, Producer

from odradek.broker.connection_limits import ConnectionLimits
from tests.broker import inprocess, wire
from tests.broker.wire import Conn

T = TypeVar("T")
LOOPBACK = "127.0.0.1"
POLL_S = 5.0  # the most any condition below is waited for


class InProcessBroker(inprocess.InProcessBroker):
    @property
    def limits(self) -> ConnectionLimits:
        return self.server.limits

    def total(self) -> int:
        return self.on_loop(lambda: self.limits.total)

    def count(self, ip: str) -> int:
        return self.on_loop(lambda: self.limits.count(ip))


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., InProcessBroker]]:
    started: list[InProcessBroker] = []

    def start(**props: str) -> InProcessBroker:
        b = InProcessBroker(tmp_path / f"data{len(started)}", {k.replace("_", "."): v for k, v in props.items()})
        started.append(b)
        return b

    try:
        yield start
    finally:
        for b in started:
            b.close()
        for b in started:  # every admitted connection was released, by its client or by the shutdown
            assert (b.limits.total, b.limits.count(LOOPBACK)) == (0, 0)


@pytest.fixture
def conns() -> Iterator[list[Conn]]:
    """Raw connections a test opens; all closed at its end."""
    opened: list[Conn] = []
    try:
        yield opened
    finally:
        for c in opened:
            c.close()


def open_conns(broker: InProcessBroker, n: int, into: list[Conn]) -> list[Conn]:
    new = [Conn(broker.address, timeout=POLL_S) for _ in range(n)]
    into.extend(new)
    return new


def closed_by_broker(conns: list[Conn], until: Callable[[list[Conn]], bool]) -> list[Conn]:
    """The connections the broker closes (EOF or reset, nothing else read) while polling for ``until(closed)``,
    for at most ``POLL_S``."""
    closed: list[Conn] = []
    waiting = {c.sock: c for c in conns}
    deadline = time.monotonic() + POLL_S
    while waiting and not until(closed) and (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select(list(waiting), [], [], min(remaining, 0.05))
        for sock in readable:
            try:
                data = sock.recv(1)
            except ConnectionResetError:
                data = b""
            assert data == b"", f"the broker sent {data!r} on a connection that asked nothing"
            closed.append(waiting.pop(sock))
    return closed


def answers(conn: Conn) -> bool:
    try:
        return int(wire.api_versions(conn).error_code) == 0
    except (wire.Closed, ConnectionError):
        return False


class Delivered:
    def __init__(self) -> None:
        self.ok = 0
        self.errors: list[KafkaError] = []

    def __call__(self, err: KafkaError | None, _msg: Any) -> None:
        if err is None:
            self.ok += 1
        else:
            self.errors.append(err)


def connected_producer(broker: InProcessBroker, delivered: Delivered) -> Producer:
    """A confluent-kafka producer that has produced once (so its connections are all open)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all",
                         "reconnect.backoff.ms": 10})
    produce_some(producer, delivered, 1)
    return producer


def produce_some(producer: Producer, delivered: Delivered, n: int) -> None:
    before = delivered.ok
    for i in range(n):
        producer.produce("limited", value=b"v%d" % i, on_delivery=delivered)
    assert producer.flush(POLL_S) == 0, "the producer could not deliver in time"
    assert delivered.errors == [] and delivered.ok == before + n


def test_per_ip_limit_closes_the_extra_connections_at_once(start_broker: Callable[..., InProcessBroker],
                                                           conns: list[Conn],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="odradek.broker.server")
    broker = start_broker(max_connections_per_ip="5")
    delivered = Delivered()
    producer = connected_producer(broker, delivered)
    held = broker.count(LOOPBACK)  # the producer's own connections, from the same address
    assert 1 <= held < 5
    room = 5 - held

    raw = open_conns(broker, 20, conns)
    closed = closed_by_broker(raw, lambda closed: len(closed) >= 20 - room)
    assert len(closed) == 20 - room, f"{len(closed)} of 20 closed by the broker, expected {20 - room}"
    admitted = [c for c in raw if c not in closed]
    assert all(answers(c) for c in admitted)  # the admitted ones are served
    assert broker.count(LOOPBACK) == 5
    refusals = [r.getMessage() for r in caplog.records if "max.connections.per.ip=5" in r.getMessage()]
    assert len(refusals) == 20 - room
    assert all(m.startswith(f"closing connection from {LOOPBACK}:") for m in refusals)

    produce_some(producer, delivered, 10)  # the client that was connected before goes on producing

    for c in admitted:  # room again once admitted connections close
        c.close()
    deadline = time.monotonic() + POLL_S
    while broker.count(LOOPBACK) > held and time.monotonic() < deadline:
        time.sleep(0.01)
    assert broker.count(LOOPBACK) == held
    assert all(answers(c) for c in open_conns(broker, room, conns))
    produce_some(producer, delivered, 1)


def test_an_override_of_zero_refuses_its_address(start_broker: Callable[..., InProcessBroker],
                                                 conns: list[Conn]) -> None:
    broker = start_broker(max_connections_per_ip_overrides=f"{LOOPBACK}:0,localhost:0")
    raw = open_conns(broker, 3, conns)
    assert len(closed_by_broker(raw, lambda closed: len(closed) == 3)) == 3
    assert broker.total() == 0


def test_max_connections_closes_the_extra_connections_at_once(start_broker: Callable[..., InProcessBroker],
                                                              conns: list[Conn],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="odradek.broker.server")
    broker = start_broker(max_connections="5")
    delivered = Delivered()
    producer = connected_producer(broker, delivered)
    held = broker.total()
    assert 1 <= held < 5
    room = 5 - held

    raw = open_conns(broker, 20, conns)
    closed = closed_by_broker(raw, lambda closed: len(closed) >= 20 - room)
    assert len(closed) == 20 - room
    admitted = [c for c in raw if c not in closed]
    assert all(answers(c) for c in admitted)
    assert broker.total() == 5
    assert len([r for r in caplog.records if "max.connections=5" in r.getMessage()]) == 20 - room

    produce_some(producer, delivered, 10)

    admitted[0].close()
    deadline = time.monotonic() + POLL_S
    while broker.total() > 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert answers(open_conns(broker, 1, conns)[0])


def test_creation_rate_refuses_a_burst_then_accepts_again(start_broker: Callable[..., InProcessBroker],
                                                          conns: list[Conn],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="odradek.broker.server")
    # Two samples of 1 s: the rate is measured over at least 1 s, so about 5 of a quick burst are accepted.
    broker = start_broker(max_connection_creation_rate="5", quota_window_num="2", quota_window_size_seconds="1")
    raw = open_conns(broker, 30, conns)
    closed = closed_by_broker(raw, lambda closed: len(closed) + broker.total() >= 30)
    admitted = [c for c in raw if c not in closed]
    assert len(closed) + broker.total() == 30, "every connection is either admitted or closed"
    assert 5 <= len(admitted) <= 10 and len(closed) >= 20
    assert all(answers(c) for c in admitted)
    refusals = [r.getMessage() for r in caplog.records if "max.connection.creation.rate=5" in r.getMessage()]
    assert len(refusals) == len(closed)

    # Once the windows pass, new connections are accepted again (the refused ones did not feed the rate).
    deadline = time.monotonic() + POLL_S
    accepted = False
    while not accepted and time.monotonic() < deadline:
        accepted = answers(open_conns(broker, 1, conns)[0])
        if not accepted:
            time.sleep(0.1)
    assert accepted, "no new connection accepted after the rate's windows passed"
