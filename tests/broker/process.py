"""A real ``odradek serve`` process for tests: free port, tmp data dir, bounded start and stop.

Every wait here is bounded; the broker listens on 127.0.0.1 (or on the address of the network namespace it
is started in). Its stderr (the broker's
log) goes to a file so tests can assert on what it logged.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 40.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """One broker subprocess. ``start()`` returns once the port accepts connections."""

    def __init__(self, data_dir: Path, log_path: Path, overrides: list[str] | None = None, *,
                 host: str = "127.0.0.1", port: int | None = None,
                 wrap: Callable[[list[str]], list[str]] | None = None) -> None:
        """``port`` None: a free one at every start. ``wrap``: turns the command into the one to run (e.g. in a
        network namespace, ``tests/faults/netns.py``); ``host`` is then that namespace's address."""
        self.data_dir = data_dir
        self.log_path = log_path
        self.overrides = list(overrides or [])
        self.host = host
        self.fixed_port = port
        self.wrap = wrap
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.fixed_port if self.fixed_port is not None else free_port()
        cmd = [sys.executable, "-m", "odradek.cli.main", "serve", "--host", self.host, "--port", str(self.port),
               "--override", "http.listeners="]  # no HTTP (tests start many brokers; an override may turn it on)
        if not any(item.startswith("log.dirs=") for item in self.overrides):  # else the override names them all
            cmd += ["--data-dir", str(self.data_dir)]
        for item in self.overrides:
            cmd += ["--override", item]
        if self.wrap is not None:
            cmd = self.wrap(cmd)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        self._log_file = open(self.log_path, "ab")  # closed in stop(), kill() or wait()
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode} during startup:\n{self.log()}")
            try:
                with socket.create_connection(self.address, timeout=1):
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"broker did not accept connections within {START_TIMEOUT_S}s:\n{self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_log(self, *needles: str, timeout: float = 5.0) -> str:
        """The first log line containing every one of ``needles`` (bounded wait), else AssertionError."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.log().splitlines():
                if all(n in line for n in needles):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"no broker log line contains {needles!r}; log:\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS in /proc status")

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = STOP_TIMEOUT_S) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._close_log()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait (bounded); returns the exit code (killed and -9 if it did not stop)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.terminate()
            try:
                return self.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return -9
        self._close_log()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def serving(base: Path, overrides: list[str] | None = None) -> Iterator[BrokerProcess]:
    """A broker with its data and log under ``base`` for the length of a (module-scoped) fixture; it must
    exit cleanly (code 0) when stopped."""
    b = BrokerProcess(base / "data", base / "broker.log", list(overrides or [])).start()
    try:
        yield b
    finally:
        code = b.stop()
    assert code == 0, f"broker exited with {code}:\n{b.log()[-4000:]}"
