"""Fixtures for the compatibility suite: a real broker process and one adapter per real client.

``broker`` is one ``odradek serve`` process shared by the whole suite (every test uses its own
topics); ``own_broker`` is a fresh process for tests that restart it. Both run with small
segments and a dense index so a few hundred kilobytes span several segments. The broker's
stderr goes to a file whose tail is attached to the report of every failing test that used it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.clients import CLIENTS, Client, make_client

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0
STOP_TIMEOUT = 30.0

# Small, test-friendly settings: several segments per partition after ~100 KiB, a dense index.
OVERRIDES = {
    "log.segment.bytes": str(64 * 1024),
    "log.index.interval.bytes": "1024",
    "num.partitions": "1",
    "http.listeners": "",  # no HTTP listener: tests start many brokers, the default port would collide
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """An ``odradek serve`` child process on a fixed port and data directory."""

    def __init__(self, data_dir: Path, log_path: Path, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.overrides = dict(OVERRIDES, **(overrides or {}))
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self.proc is None, "already running"
        cmd = [sys.executable, "-m", "odradek.cli.main", "serve", "--port", str(self.port),
               "--data-dir", str(self.data_dir)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"----- start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                self.proc = None
                raise RuntimeError(f"broker exited with code {rc} during startup:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"broker did not accept connections within {START_TIMEOUT}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM and wait (bounded) for the exit code."""
        assert self.proc is not None, "not running"
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"broker did not exit within {STOP_TIMEOUT}s of SIGTERM:\n{self.log_tail()}") from None
        self.proc = None
        return rc

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            self.proc = None

    def restart(self) -> None:
        rc = self.stop()
        assert rc == 0, f"broker exited with code {rc} on SIGTERM:\n{self.log_tail()}"
        self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no broker log)"
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def running_broker(base: Path, overrides: dict[str, str] | None = None) -> Iterator[BrokerProcess]:
    b = BrokerProcess(base / "data", base / "broker.log", overrides)
    b.start()
    try:
        yield b
    except BaseException:
        b.kill()
        raise
    rc = b.stop()
    assert rc == 0, f"broker exited with code {rc} on SIGTERM:\n{b.log_tail()}"


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker")) as b:
        yield b


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path) as b:
        yield b


def _client_fixture(request: pytest.FixtureRequest, b: BrokerProcess) -> Iterator[Client]:
    c = make_client(request.param, b.bootstrap)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest, broker: BrokerProcess) -> Iterator[Client]:
    yield from _client_fixture(request, broker)


@pytest.fixture(params=CLIENTS)
def own_client(request: pytest.FixtureRequest, own_broker: BrokerProcess) -> Iterator[Client]:
    yield from _client_fixture(request, own_broker)


# Consumer groups that form and fail over fast: no initial rebalance delay, session timeouts down
# to 500 ms accepted, and a small __consumer_offsets topic.
GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "4",
}


@pytest.fixture(scope="session")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker shared by the consumer-group tests (each uses its own topics and group ids)."""
    with running_broker(tmp_path_factory.mktemp("group-broker"), GROUP_OVERRIDES) as b:
        yield b


@pytest.fixture
def own_group_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh broker with the consumer-group settings, for tests that restart it."""
    with running_broker(tmp_path, GROUP_OVERRIDES) as b:
        yield b


@pytest.fixture(params=CLIENTS)
def group_client(request: pytest.FixtureRequest, group_broker: BrokerProcess) -> Iterator[Client]:
    yield from _client_fixture(request, group_broker)


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test (readable in the broker log)."""
    base = "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:80].strip("-")
    return f"{base}-{uuid.uuid4().hex[:6]}"


def create_topic(b: BrokerProcess, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    """Create a topic through a neutral path (kafka-python's admin), independent of the client under test."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics(
            {name: {"num_partitions": partitions, "replication_factor": 1, "configs": dict(configs or {})}},
            timeout_ms=15000)
    finally:
        admin.close()


def stored_batch_attributes(b: BrokerProcess, topic: str, partition: int) -> list[int]:
    """The attributes of every batch in a partition's segment files (Kafka's on-disk log format:
    8-byte base offset, 4-byte length, then the v2 batch header with attributes at byte 21)."""
    out = []
    for seg in sorted((b.data_dir / f"{topic}-{partition}").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 23 <= len(data):
            length = int.from_bytes(data[pos + 8:pos + 12], "big")
            out.append(int.from_bytes(data[pos + 21:pos + 23], "big"))
            pos += 12 + length
    return out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        funcargs = getattr(item, "funcargs", {})
        for name in ("own_broker", "broker", "own_group_broker", "group_broker"):
            b = funcargs.get(name)
            if isinstance(b, BrokerProcess):
                report.sections.append((f"broker log tail ({b.log_path})", b.log_tail(60)))
                break
