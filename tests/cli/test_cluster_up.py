"""``odradek cluster up``: the plan and the argument checks in-process; the whole cluster as a subprocess (slow).

Every wait is bounded; everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import fcntl
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from odradek.cli import cluster
from odradek.cli.main import main
from tests.broker.process import REPO_ROOT, free_port

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 90.0


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports that are free right now, below the kernel's ephemeral range (from
    32768): a port chosen there could be taken by any outgoing connection before the broker binds it (seen once,
    with other tests' clients running)."""
    rng = random.Random()
    for _ in range(100):
        base = rng.randrange(20000, 32768 - count)
        if not any(cluster.port_in_use(p) for p in range(base, base + count)):
            return base
    raise RuntimeError(f"found no {count} consecutive free ports in 100 tries")


# -- the plan, in-process --------------------------------------------------------------------------------------


def test_plan_gives_each_broker_its_id_port_dir_and_the_chrooted_zookeeper(tmp_path: Path) -> None:
    plans = cluster.plan_brokers(3, tmp_path, 19092, "127.0.0.1:12181", {})
    assert [(p.broker_id, p.port, p.data_dir, p.log_path) for p in plans] == [
        (i, 19091 + i, tmp_path / f"broker-{i}", tmp_path / f"broker-{i}.log") for i in (1, 2, 3)
    ]
    first = plans[0].properties
    assert first["broker.id"] == "1"
    assert first["listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert first["log.dirs"] == str(tmp_path / "broker-1")
    assert first["zookeeper.connect"] == "127.0.0.1:12181/odradek"
    cmd = cluster.broker_command(plans[1], "DEBUG")
    assert cmd[:6] == [sys.executable, "-m", "odradek.cli.main", "--log-level", "DEBUG", "serve"]
    assert "listeners=PLAINTEXT://127.0.0.1:19093" in cmd and "broker.id=2" in cmd
    assert [p.properties["http.listeners"] for p in plans] == [f"http://127.0.0.1:{9643 + i}" for i in (1, 2, 3)]
    assert cluster.plan_brokers(2, tmp_path, 19092, "127.0.0.1:12181", {}, http_base_port=0)[1].properties[
        "http.listeners"] == "http://127.0.0.1:0"


@pytest.mark.parametrize(("brokers", "rf", "min_isr"), [(1, "1", "1"), (2, "2", "2"), (3, "3", "2"), (5, "3", "2")])
def test_replication_defaults_fit_the_cluster_size(tmp_path: Path, brokers: int, rf: str, min_isr: str) -> None:
    props = cluster.plan_brokers(brokers, tmp_path, 19092, "127.0.0.1:12181", {})[0].properties
    assert props["default.replication.factor"] == rf
    assert props["offsets.topic.replication.factor"] == rf
    assert props["transaction.state.log.replication.factor"] == rf
    assert props["transaction.state.log.min.isr"] == min_isr


def test_overrides_win_over_the_cluster_defaults(tmp_path: Path) -> None:
    overrides = cluster.parse_overrides(["default.replication.factor=1", "num.partitions = 6"])
    props = cluster.plan_brokers(3, tmp_path, 19092, "127.0.0.1:12181", overrides)[2].properties
    assert props["default.replication.factor"] == "1"
    assert props["num.partitions"] == "6"
    assert props["offsets.topic.replication.factor"] == "3"


def run_in_process(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["cluster", "up", "--http-base-port", "0", *argv])  # 0: no fixed HTTP ports to collide
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("argv", "message"), [
    (["--override", "broker.id=7"], "broker.id is set per broker"),
    (["--override", "listeners=PLAINTEXT://127.0.0.1:1"], "listeners is set per broker"),
    (["--override", "nonsense"], "is not KEY=VALUE"),
    (["--override", "no.such.key=1"], "unknown config key 'no.such.key'"),
    (["--override", "replica.fetch.wait.max.ms=40000"], "replica.fetch.wait.max.ms=40000 is larger than"),
    (["--brokers", "0"], "at least 1 broker"),
    (["--base-port", "65535", "--brokers", "2"], "pick another --base-port"),
])
def test_bad_arguments_start_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                     message: str) -> None:
    data = tmp_path / "cluster"
    code, _, err = run_in_process(capsys, "--data-dir", str(data), "--base-port", str(free_ports(3)),
                                  "--zookeeper-port", str(free_port()), *argv)
    assert code == 2
    assert message in err
    assert not data.exists()


@pytest.mark.parametrize("taken", ["zookeeper", "broker"])
def test_a_port_in_use_is_named_and_nothing_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   taken: str) -> None:
    base, zk_port = free_ports(2), free_port()
    busy = zk_port if taken == "zookeeper" else base + 1
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", busy))
        listener.listen()
        code, _, err = run_in_process(capsys, "--brokers", "2", "--data-dir", str(tmp_path / "c"),
                                      "--base-port", str(base), "--zookeeper-port", str(zk_port))
    assert code == 2
    what = "ZooKeeper" if taken == "zookeeper" else "broker 2"
    assert f"port in use on 127.0.0.1: {busy} for {what}" in err
    assert not (tmp_path / "c").exists()


def test_help_describes_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["cluster", "up", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--brokers", "--data-dir", "--base-port", "--zookeeper-port", "--override"):
        assert option in out


# -- the whole cluster, as a subprocess --------------------------------------------------------------------------


def _require_zookeeper() -> None:
    from odradek.cluster.zk.server import ZooKeeperNotInstalledError, java_command

    try:
        java_command()
    except ZooKeeperNotInstalledError as e:
        pytest.skip(str(e))


def _children(pid: int) -> dict[int, str]:
    """Direct children of ``pid`` as {pid: start time} (from /proc; the start time tells a reused pid apart)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if int(fields[1]) == pid:
            out[int(entry.name)] = fields[19]
    return out


def _alive(pid: int, start_time: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[19] == start_time and fields[0] != "Z"


class ClusterUp:
    """``odradek cluster up`` as a subprocess whose output lines are read by a thread."""

    def __init__(self, data_dir: Path, brokers: int) -> None:
        self.brokers = brokers
        self.base_port = free_ports(brokers)
        self.zk_port = free_port()
        while self.base_port <= self.zk_port < self.base_port + brokers:
            self.zk_port = free_port()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "odradek.cli.main", "cluster", "up", "--brokers", str(brokers),
             "--data-dir", str(data_dir), "--base-port", str(self.base_port), "--zookeeper-port", str(self.zk_port),
             "--http-base-port", "0"],
            cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for_line(self, prefix: str, timeout_s: float, fail_on: str | None = None) -> str:
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if line.startswith(prefix):
                return line
            if fail_on is not None and line.startswith(fail_on):
                raise AssertionError(f"unexpected {line!r} before {prefix!r}; output so far:\n{self.output()}")
        raise AssertionError(f"no line starting with {prefix!r} within {timeout_s}s; output so far:\n{self.output()}")

    def drain(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                return
            if line is None:
                return
            self.lines.append(line)

    def output(self) -> str:
        return "\n".join(self.lines)

    def kill_all(self) -> None:
        """Last resort after a failed test: the command and whatever it started."""
        children = _children(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.slow
def test_cluster_up_starts_zookeeper_and_brokers_and_ctrl_c_stops_them_all(tmp_path: Path) -> None:
    from odradek.cluster.zk.server import srvr

    _require_zookeeper()
    up = ClusterUp(tmp_path / "cluster", brokers=3)
    try:
        ports = [up.base_port + i for i in range(3)]
        line = up.wait_for_line("bootstrap.servers=", START_TIMEOUT_S)
        assert line == "bootstrap.servers=" + ",".join(f"127.0.0.1:{p}" for p in ports)
        assert f"zookeeper ready on 127.0.0.1:{up.zk_port}" in up.lines
        for i, port in enumerate(ports, 1):
            assert f"broker {i} ready on 127.0.0.1:{port}" in up.lines
        up.wait_for_line("logs: ", 5)

        children = _children(up.proc.pid)
        assert len(children) == 4, f"expected ZooKeeper and 3 brokers, found {children}"
        answer = srvr("127.0.0.1", up.zk_port, timeout_s=5)
        assert answer is not None and "Mode: standalone" in answer
        for port in ports:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
        for i in (1, 2, 3):
            assert (tmp_path / "cluster" / f"broker-{i}.log").is_file()

        up.proc.send_signal(signal.SIGINT)
        assert up.proc.wait(timeout=STOP_TIMEOUT_S) == 0
        up.drain()
        for i in (1, 2, 3):
            assert any(line.startswith(f"broker {i} stopped (exit code 0)") for line in up.lines), up.output()
        assert "zookeeper stopped" in up.lines
        assert up.lines[-1] == "cluster stopped"
        left = [pid for pid, start in children.items() if _alive(pid, start)]
        assert left == [], f"child processes left running: {left}"
        for port in [*ports, up.zk_port]:
            assert not cluster.accepts_connections(port)
    finally:
        up.kill_all()


@pytest.mark.slow
def test_a_broker_that_fails_to_start_stops_the_cluster_with_its_log(tmp_path: Path) -> None:
    _require_zookeeper()
    data = tmp_path / "cluster"
    (data / "broker-2").mkdir(parents=True)
    # Another process owns broker 2's log directory, as a second broker on the same directory would.
    with open(data / "broker-2" / ".lock", "wb") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        up = ClusterUp(data, brokers=2)
        try:
            up.wait_for_line("odradek cluster up: broker 2 exited with code 1 while starting", START_TIMEOUT_S,
                             fail_on="bootstrap.servers=")
            assert up.proc.wait(timeout=STOP_TIMEOUT_S) == 1
            up.drain()
        finally:
            up.kill_all()
    out = up.output()
    assert "is in use by another broker" in out  # the tail of its log says why
    assert "bootstrap.servers=" not in out
    assert "zookeeper stopped" in out
    for port in (up.base_port, up.base_port + 1, up.zk_port):
        assert not cluster.accepts_connections(port)


@pytest.mark.slow
def test_every_broker_registers_under_the_chroot(tmp_path: Path) -> None:
    from kazoo.client import KazooClient

    _require_zookeeper()
    up = ClusterUp(tmp_path / "cluster", brokers=3)
    try:
        up.wait_for_line("bootstrap.servers=", START_TIMEOUT_S)
        zk = KazooClient(hosts=f"127.0.0.1:{up.zk_port}/odradek", timeout=10)
        zk.start(timeout=10)
        try:
            deadline = time.monotonic() + 20
            ids: list[str] = []
            while time.monotonic() < deadline:
                ids = sorted(zk.get_children("/brokers/ids")) if zk.exists("/brokers/ids") else []
                if ids == ["1", "2", "3"]:
                    break
                time.sleep(0.1)
            assert ids == ["1", "2", "3"]
        finally:
            zk.stop()
            zk.close()
        up.proc.send_signal(signal.SIGINT)
        assert up.proc.wait(timeout=STOP_TIMEOUT_S) == 0
    finally:
        up.kill_all()
