"""Many idle connections, and a graceful shutdown with a long poll in flight, against a real broker."""

from __future__ import annotations

import resource
import socket
import threading
import time
from pathlib import Path

import pytest

from odradek.protocol import apis
from tests.broker import wire
from tests.broker.process import BrokerProcess
from tests.broker.wire import Conn

IDLE_CONNECTIONS = 1000


def _raise_nofile(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if target < wanted:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below the {wanted} descriptors needed")
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


@pytest.mark.slow
def test_a_thousand_idle_connections(broker_factory) -> None:
    # Both this process and the broker (which inherits the limit) need ~1,000 descriptors.
    _raise_nofile(IDLE_CONNECTIONS + 512)
    broker = broker_factory()
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "idle", partitions=1)
        assert wire.produce(c, "idle", 0, wire.batch(b"before")).error_code == 0
    rss_before = broker.rss_kib()

    idle: list[socket.socket] = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            idle.append(socket.create_connection(broker.address, timeout=10))
        deadline = time.monotonic() + 20
        while _open_sockets(broker) < IDLE_CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _open_sockets(broker) >= IDLE_CONNECTIONS, "the broker did not accept every connection"
        # Every one of them can still be served (spot-check a few).
        for s in idle[:: IDLE_CONNECTIONS // 10]:
            s.sendall(wire.request_frame(apis.API_VERSIONS, 0, 77, {}))
        for s in idle[:: IDLE_CONNECTIONS // 10]:
            s.settimeout(10)
            head = s.recv(8)
            assert len(head) == 8 and int.from_bytes(head[4:8], "big") == 77
        start = time.monotonic()
        with Conn(broker.address) as c:
            assert wire.produce(c, "idle", 0, wire.batch(b"during")).error_code == 0
            assert [r.value for r in wire.records_of(wire.fetch_all(c, "idle", 0))] == [b"before", b"during"]
        assert time.monotonic() - start < 5
        growth_mib = (broker.rss_kib() - rss_before) / 1024
        assert growth_mib < 200, f"1,000 idle connections grew the broker by {growth_mib:.0f} MiB"
    finally:
        for s in idle:
            s.close()

    with Conn(broker.address) as c:
        assert wire.produce(c, "idle", 0, wire.batch(b"after")).error_code == 0
        assert [r.value for r in wire.records_of(wire.fetch_all(c, "idle", 0))] == [b"before", b"during", b"after"]
    # All those connections are gone from the broker too (bounded wait for it to notice).
    deadline = time.monotonic() + 10
    while _open_sockets(broker) > 50 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _open_sockets(broker) <= 50


def _open_sockets(broker: BrokerProcess) -> int:
    fd_dir = Path(f"/proc/{broker.pid}/fd")
    count = 0
    for fd in fd_dir.iterdir():
        try:
            if fd.readlink().as_posix().startswith("socket:"):
                count += 1
        except OSError:
            pass
    return count


# -- 11. Graceful shutdown --------------------------------------------------------------------------


def test_sigterm_answers_the_long_poll_then_restarts_without_recovery(broker_factory, tmp_path: Path) -> None:
    data_dir = tmp_path / "kept"
    broker = broker_factory(data_dir=data_dir)
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "durable", partitions=1)
        for i in range(5):
            assert wire.produce(c, "durable", 0, wire.batch(f"r{i}".encode(), b"x" * i)).error_code == 0
        stored = wire.fetch_all(c, "durable", 0)

    result: dict[str, object] = {}

    def long_poll() -> None:
        try:
            with Conn(broker.address) as poller:
                result["response"] = wire.fetch(poller, {("durable", 0): 10}, timeout=25,
                                                max_wait_ms=20_000, min_bytes=1)
                result["done_at"] = time.monotonic()
        except Exception as e:  # reported below
            result["error"] = e

    poller = threading.Thread(target=long_poll)
    poller.start()
    time.sleep(0.5)  # the fetch is now parked in the broker
    sigterm_at = time.monotonic()
    broker.terminate()
    code = broker.wait(timeout=30)
    poller.join(timeout=30)
    assert not poller.is_alive()
    assert "error" not in result, f"the in-flight fetch got no response: {result.get('error')!r}"
    assert int(result["response"].error_code) == 0  # type: ignore[union-attr]
    assert float(result["done_at"]) - sigterm_at < 5, "shutdown waited for the long poll's max_wait"  # type: ignore[arg-type]
    assert code == 0, broker.log()[-3000:]
    assert (data_dir / ".kafka_cleanshutdown").exists()
    assert "shutdown complete" in broker.log()

    again = broker_factory(data_dir=data_dir)
    log = again.wait_for_log("loaded", "partition logs")
    assert "loaded 1 partition logs" in log
    assert "recovering" not in again.log()
    with Conn(again.address) as c:
        assert wire.fetch_all(c, "durable", 0) == stored
        assert wire.list_offsets(c, "durable", [0]) == {0: 10}
    assert not (data_dir / ".kafka_cleanshutdown").exists()  # removed while running
