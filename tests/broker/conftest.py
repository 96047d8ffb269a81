"""Fixtures that run a real broker process (``odradek serve``) on a free 127.0.0.1 port.

- ``broker``: a broker with default settings and a fresh data directory, for one test.
- ``broker_factory``: start brokers with ``--override`` settings (or on a given data dir); each is
  stopped at the end of the test.
- ``shared_broker``: one broker per test module (``num.partitions=3``), for tests that only need a
  healthy broker and create their own topics.

Every broker is stopped with SIGTERM, and the test fails unless it exits with code 0 within a
bounded time (a clean shutdown is part of every test).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.broker.process import BrokerProcess

BrokerFactory = Callable[..., BrokerProcess]


class _Brokers:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.started: list[BrokerProcess] = []

    def __call__(self, *overrides: str, data_dir: Path | None = None) -> BrokerProcess:
        n = len(self.started)
        data = data_dir if data_dir is not None else self.base / f"data{n}"
        b = BrokerProcess(data, self.base / f"broker{n}.log", list(overrides))
        self.started.append(b)
        return b.start()

    def stop_all(self) -> None:
        failures = []
        for b in self.started:
            if b.proc is None:
                continue
            was_running = b.running
            code = b.stop()
            if was_running and code != 0:
                failures.append(f"broker on port {b.port} exited with {code}:\n{b.log()[-4000:]}")
        assert not failures, "\n".join(failures)


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    brokers = _Brokers(tmp_path)
    try:
        yield brokers
    finally:
        brokers.stop_all()


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    brokers = _Brokers(tmp_path_factory.mktemp("shared_broker"))
    try:
        yield brokers("num.partitions=3")
    finally:
        brokers.stop_all()
