"""Helpers for tests against a real ZooKeeper: start one, wait for conditions, expire a session.

Every wait is bounded and polls; nothing sleeps for a fixed time. All traffic goes to 127.0.0.1.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from kazoo.client import KazooClient

from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.server import ZooKeeperServer

T = TypeVar("T")


def start_zookeeper(directory: Path, *, tick_time_ms: int = 500) -> ZooKeeperServer:
    """A running ZooKeeper on a free port; fails (never skips) with the log's tail if it cannot start."""
    return ZooKeeperServer(directory, tick_time_ms=tick_time_ms).start(timeout_s=60.0)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One ZooKeeper server per test module, stopped at the end: the fixture of ``tests/cluster`` (its conftest
    imports it) and of any test module elsewhere that imports it (``import zookeeper as zookeeper``)."""
    server = start_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        yield server
    finally:
        server.stop()


def unique_chroot(server: ZooKeeperServer) -> str:
    """A connect string with a fresh chroot, so tests sharing one server never see each other's znodes."""
    return f"{server.connect_string}/test-{uuid.uuid4().hex[:12]}"


def wait_until(condition: Callable[[], T], *, timeout_s: float = 10.0, what: str = "condition") -> T:
    """Poll ``condition`` until it returns something truthy (which is returned); AssertionError after the timeout."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def expire_session(client: ZkClient, timeout_s: float = 10.0) -> None:
    """Make ZooKeeper expire ``client``'s session now.

    ZooKeeper's own test trick: a second connection resumes the same session (id and password) and closes
    it; the server ends the session and the first connection is told it has expired.
    """
    hosts = client.connect
    session = client._kz.client_id  # the session's id and password: only tests need them
    assert session is not None, "the client has no session to expire"
    twin = KazooClient(hosts=hosts, client_id=session, timeout=client.session_timeout_ms / 1000)
    twin.start(timeout=timeout_s)
    twin.stop()
    twin.close()
