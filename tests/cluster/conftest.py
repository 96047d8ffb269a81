"""Fixtures for tests against a real ZooKeeper (Debian's ``zookeeper`` package; CI installs it).

- ``zookeeper``: one ZooKeeper server per test module, in a temporary directory, stopped at the end.
  If ZooKeeper is not installed the tests fail with the reason; they are never skipped.
- ``zk_chroot``: a connect string with a fresh chroot (``127.0.0.1:<port>/test-<uuid>``) per test.
- ``zk_client``: a factory of started ``ZkClient``s on that chroot; all are closed after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.server import ZooKeeperServer
from tests.cluster.zk_process import unique_chroot
from tests.cluster.zk_process import zookeeper as zookeeper

ZkClientFactory = Callable[..., ZkClient]


@pytest.fixture
def zk_chroot(zookeeper: ZooKeeperServer) -> str:
    return unique_chroot(zookeeper)


@pytest.fixture
def zk_client(zk_chroot: str) -> Iterator[ZkClientFactory]:
    clients: list[ZkClient] = []

    def make(connect: str | None = None, **kwargs: Any) -> ZkClient:
        kwargs.setdefault("session_timeout_ms", 6000)
        client = ZkClient(connect or zk_chroot, **kwargs)
        clients.append(client)
        client.start()
        return client

    try:
        yield make
    finally:
        for client in clients:
            client.close()
