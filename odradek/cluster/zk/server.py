"""A standalone ZooKeeper server run as a child process: for tests, benchmarks and local clusters.

Runs Debian's ZooKeeper 3.8 (package ``zookeeper``, jars in ``/usr/share/java``) with
``java -cp ... org.apache.zookeeper.server.quorum.QuorumPeerMain <zoo.cfg>`` and a generated ``zoo.cfg``.
A ``ZOOKEEPER_HOME`` with the official tarball layout (``lib/*.jar``) is used instead when set.

Invariants:
- Everything the server writes lives under ``data_dir``: ``zoo.cfg``, ``data/`` (snapshots and
  transaction logs), ``zookeeper.log`` (the server's log, via slf4j-simple) and ``zookeeper.out`` (the
  JVM's own stdout/stderr). Nothing goes to the console.
- The server listens on ``127.0.0.1`` only; ``srvr``, ``stat`` and ``mntr`` are the only four-letter
  commands it answers; its admin HTTP server is off.
- ``tickTime`` defaults to 500 ms and the accepted session timeouts are ``[2 * tickTime, 60 s]``, so
  clients may ask for short sessions (1.5 s) as tests like to, and Kafka's default 18 s.
- ``start()`` returns only once ``srvr`` reports a serving mode; readiness never uses ``ruok``
  (which answers ``imok`` before the server serves requests).
- ``stop()`` and ``kill()`` are idempotent; ``pause()``/``resume()`` freeze and thaw the JVM
  (SIGSTOP/SIGCONT), which is how tests make a ZooKeeper that accepts connections but answers nothing.
- Transaction logs are not fsynced by default (``force_sync=False``): this server is for tests, where
  a crash of the machine loses nothing worth keeping and fsync per write only makes tests slow.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
DEBIAN_JAR_DIR = Path("/usr/share/java")
# zookeeper.jar's manifest names its dependencies (jute, netty, slf4j-api, ...); slf4j-simple is the logging
# backend we add so that the server's log goes to a file we choose.
DEBIAN_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar")
JVM_FLAGS = (
    "-Xmx256m",
    "-Xms32m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-Djava.awt.headless=true",
    "-Dzookeeper.admin.enableServer=false",
    "-Dzookeeper.jmx.log4j.disable=true",
)
SERVING_MODES = ("Mode: standalone", "Mode: leader", "Mode: follower", "Mode: observer")
MAX_SESSION_TIMEOUT_MS = 60_000
LOG_TAIL_LINES = 40


class ZooKeeperError(Exception):
    """The ZooKeeper server harness could not do what was asked."""


class ZooKeeperNotInstalledError(ZooKeeperError):
    """No java or no ZooKeeper jars on this machine."""


class ZooKeeperStartError(ZooKeeperError):
    """The server did not come up; the message carries the tail of its log."""


def java_command() -> list[str]:
    """``[java, -cp, <classpath>]`` for running ZooKeeper's classes; raises if java or the jars are missing."""
    java = _java_binary()
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(str(p) for p in (Path(home) / "lib").glob("*.jar"))
        if not any(Path(j).name.startswith("zookeeper-") for j in jars):
            raise ZooKeeperNotInstalledError(
                f"ZOOKEEPER_HOME={home} has no lib/zookeeper-*.jar: point it at an unpacked ZooKeeper release, "
                "or unset it to use Debian's package (apt-get install -y zookeeper)"
            )
        return [java, "-cp", os.pathsep.join(jars)]
    missing = [name for name in DEBIAN_JARS if not (DEBIAN_JAR_DIR / name).is_file()]
    if missing:
        raise ZooKeeperNotInstalledError(
            f"ZooKeeper's jars are missing from {DEBIAN_JAR_DIR} ({', '.join(missing)}): "
            "install them with `apt-get install -y zookeeper` (or set ZOOKEEPER_HOME to an unpacked release)"
        )
    return [java, "-cp", os.pathsep.join(str(DEBIAN_JAR_DIR / name) for name in DEBIAN_JARS)]


def _java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperNotInstalledError(
            "no `java` on PATH (and no JAVA_HOME): install a JRE, e.g. `apt-get install -y zookeeper` pulls one in"
        )
    return java


def srvr(host: str, port: int, timeout_s: float = 1.0) -> str | None:
    """The answer to the ``srvr`` four-letter command, or None if nothing answered within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(b"srvr")
            chunks: list[bytes] = []
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                sock.settimeout(remaining)
                chunk = sock.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:
        return None
    answer = b"".join(chunks).decode("utf-8", "replace")
    return answer or None


def config_lines(
    data_dir: Path, client_address: str, client_port: int, *, tick_time_ms: int, force_sync: bool
) -> list[str]:
    """The ``zoo.cfg`` lines every server started from this package has (an ensemble adds its own lines)."""
    return [
        f"tickTime={tick_time_ms}",
        f"dataDir={data_dir}",
        f"clientPort={client_port}",
        f"clientPortAddress={client_address}",
        f"minSessionTimeout={2 * tick_time_ms}",
        f"maxSessionTimeout={max(MAX_SESSION_TIMEOUT_MS, 2 * tick_time_ms)}",
        "maxClientCnxns=0",
        "4lw.commands.whitelist=srvr,stat,mntr",
        "admin.enableServer=false",
        "preAllocSize=1024",
        f"forceSync={'yes' if force_sync else 'no'}",
        "autopurge.purgeInterval=0",
    ]


def server_command(config_path: Path, log_path: Path) -> list[str]:
    """The command line running ``QuorumPeerMain`` on ``config_path``, logging to ``log_path``."""
    logging_flags = [
        f"-Dorg.slf4j.simpleLogger.logFile={log_path}",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS",
    ]
    java, cp, classpath = java_command()
    return [java, *JVM_FLAGS, *logging_flags, cp, classpath, MAIN_CLASS, str(config_path)]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (another process may still take it before we do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ZooKeeperProcess:
    """One ``QuorumPeerMain`` child process and its files under ``data_dir`` (``zoo.cfg``, ``zookeeper.log``,
    ``zookeeper.out``): launch, signals, stop, kill, the log's tail. A standalone server and every member of a
    test ensemble (``tests/faults/zk_ensemble.py``) are one each. ``label`` names it in log tails."""

    def __init__(self, data_dir: Path, label: str = "") -> None:
        self.data_dir = Path(data_dir)
        self.label = label
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def out_path(self) -> Path:
        return self.data_dir / "zookeeper.out"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def launch(self, wrap: Callable[[list[str]], list[str]] | None = None) -> None:
        """Start the server on ``config_path`` (written by the caller); ``wrap`` turns the command into the one to
        run (e.g. inside a network namespace). Its stdout and stderr go to ``out_path``."""
        command = server_command(self.config_path, self.log_path)
        out = open(self.out_path, "ab")  # closed in reap()
        try:
            self.proc = subprocess.Popen(
                wrap(command) if wrap is not None else command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,  # a Ctrl-C in the terminal goes to pytest, which then stops us cleanly
            )
        except BaseException:
            out.close()
            raise
        self._out = out

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is None:
            return
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; does nothing if it is not running."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            self.signal(signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
            self.signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                proc.wait(timeout=10.0)
        self.reap()

    def kill(self) -> None:
        """SIGKILL: the server dies without closing sessions (clients see a connection loss)."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            self.signal(signal.SIGKILL)
            proc.wait(timeout=10.0)
        self.reap()

    def reap(self) -> None:
        self.proc = None
        out, self._out = self._out, None
        if out is not None:
            out.close()

    def log_tail(self) -> str:
        lines: list[str] = []
        for path in (self.out_path, self.log_path):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            tail = text.splitlines()[-LOG_TAIL_LINES:]
            if tail:
                lines.append(f"--- {self.label}{path.name}")
                lines.extend(tail)
        return "\n".join(lines) if lines else f"({self.label}no log output)"


class ZooKeeperServer:
    """One standalone ZooKeeper process whose files live in ``data_dir``."""

    HOST = "127.0.0.1"

    def __init__(self, data_dir: Path, port: int = 0, *, tick_time_ms: int = 500, force_sync: bool = False) -> None:
        if tick_time_ms <= 0:
            raise ValueError(f"tick_time_ms must be positive, got {tick_time_ms}")
        self.data_dir = Path(data_dir)
        self.tick_time_ms = tick_time_ms
        self.force_sync = force_sync
        self._requested_port = port
        self._port = port
        self._process = ZooKeeperProcess(self.data_dir)
        self.start_seconds: float | None = None  # how long the last start() took until `srvr` answered

    # -- files ---------------------------------------------------------------------------------------------

    @property
    def config_path(self) -> Path:
        return self._process.config_path

    @property
    def log_path(self) -> Path:
        return self._process.log_path

    @property
    def out_path(self) -> Path:
        return self._process.out_path

    def _write_config(self) -> None:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        lines = config_lines(
            self.data_dir / "data",
            self.HOST,
            self._port,
            tick_time_ms=self.tick_time_ms,
            force_sync=self.force_sync,
        )
        self.config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    # -- lifecycle -----------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def connect_string(self) -> str:
        if self._port == 0:
            raise ZooKeeperError("the server has no port yet: call start() first")
        return f"{self.HOST}:{self._port}"

    @property
    def running(self) -> bool:
        return self._process.running

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def start(self, timeout_s: float = 30.0) -> ZooKeeperServer:
        """Start the process and wait until ``srvr`` answers with a serving mode.

        With ``port=0`` a free port is chosen; if another process takes it first the start is retried on
        another port (a few times). Raises ``ZooKeeperStartError`` with the log's tail otherwise.
        """
        if self.running:
            return self
        attempts = 3 if self._requested_port == 0 else 1
        began = time.monotonic()
        deadline = began + timeout_s
        for attempt in range(attempts):
            if self._requested_port == 0:
                self._port = free_port(self.HOST)
            self._launch()
            outcome = self._wait_serving(deadline)
            if outcome == "serving":
                self.start_seconds = time.monotonic() - began
                return self
            port_taken = outcome == "exited" and "Address already in use" in self._process.log_tail()
            if not (port_taken and attempt + 1 < attempts):
                reason = "exited" if outcome == "exited" else f"did not answer `srvr` within {timeout_s:.1f}s"
                tail = self._process.log_tail()
                self.kill()
                raise ZooKeeperStartError(
                    f"ZooKeeper on {self.HOST}:{self._port} {reason} (data dir {self.data_dir}); "
                    f"last lines of its logs:\n{tail}"
                )
            self.kill()
        raise AssertionError("unreachable")  # pragma: no cover

    def _launch(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        self._process.launch()

    def _wait_serving(self, deadline: float) -> str:
        proc = self._process.proc
        assert proc is not None
        delay = 0.01
        while True:
            if proc.poll() is not None:
                return "exited"
            answer = srvr(self.HOST, self._port, timeout_s=1.0)
            if answer is not None and any(mode in answer for mode in SERVING_MODES):
                return "serving"
            if time.monotonic() >= deadline:
                return "timeout"
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; does nothing if the server is not running."""
        self._process.stop(timeout_s)

    def kill(self) -> None:
        """SIGKILL: the server dies without closing sessions (clients see a connection loss)."""
        self._process.kill()

    def pause(self) -> None:
        """SIGSTOP: connections stay open but nothing is answered, not even pings."""
        self._require_running("pause")
        self._process.signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after ``pause()``."""
        self._require_running("resume")
        self._process.signal(signal.SIGCONT)

    def _require_running(self, what: str) -> None:
        if not self.running:
            raise ZooKeeperError(f"cannot {what} ZooKeeper on port {self._port}: it is not running")

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"ZooKeeperServer({self.HOST}:{self._port}, {state}, data_dir={self.data_dir})"
