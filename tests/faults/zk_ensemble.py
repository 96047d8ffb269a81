"""A ZooKeeper ensemble whose servers each run in their own network namespace (a ``Host`` of ``netns.py``).

Runs the same ZooKeeper as ``odradek/cluster/zk/server.py`` (its command line and base ``zoo.cfg``), one
``QuorumPeerMain`` per host, so that ``Network`` can partition the servers from each other.

Invariants:
- Server ``i`` (0-based; its ``myid`` is ``i + 1``) listens on its host's ip only: clients on 2181, the
  quorum on 2888, leader election on 3888. Each namespace has its own ports, so the numbers are fixed.
- Everything server ``i`` writes lives in ``base_dir/zk<i+1>``: ``zoo.cfg``, ``data/`` (``myid``, snapshots,
  transaction logs), ``zookeeper.log`` (the server's log) and ``zookeeper.out`` (the JVM's stdout/stderr).
- One host runs standalone; more run a quorum with ``tickTime`` 500 ms, ``initLimit`` 10 and ``syncLimit``
  4 ticks, and 1 s election connect timeouts, so a leader cut from its quorum steps down, and the majority
  elects another, within a few seconds.
- Readiness and roles come from ``srvr`` sent from the root namespace (which every host can always reach
  unless a test cuts it with ``cut_from_clients``); a server that answers "not currently serving requests",
  or nothing, has no mode (``None``).
- Every wait is bounded and polls; ``stop()`` and ``kill()`` are idempotent.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterable
from pathlib import Path

from odradek.cluster.zk.server import ZooKeeperProcess, ZooKeeperStartError, config_lines, srvr
from tests.faults.netns import Host

CLIENT_PORT = 2181
QUORUM_PORT = 2888
ELECTION_PORT = 3888
MODES = ("leader", "follower", "standalone", "observer")


class _Member(ZooKeeperProcess):
    """One server of the ensemble: its process and files, on its host."""

    def __init__(self, myid: int, host: Host, data_dir: Path) -> None:
        super().__init__(data_dir, label=f"server {myid} ({host.ip}) ")
        self.myid = myid
        self.host = host


class ZooKeeperEnsemble:
    """``len(hosts)`` ZooKeeper servers, server ``i`` on ``hosts[i]``."""

    def __init__(
        self,
        base_dir: Path,
        hosts: list[Host],
        *,
        tick_time_ms: int = 500,
        init_limit: int = 10,
        sync_limit: int = 4,
        election_connect_timeout_ms: int = 1000,
    ) -> None:
        if not hosts:
            raise ValueError("an ensemble needs at least one host")
        self.base_dir = Path(base_dir)
        self.hosts = list(hosts)
        self.tick_time_ms = tick_time_ms
        self.init_limit = init_limit
        self.sync_limit = sync_limit
        self.election_connect_timeout_ms = election_connect_timeout_ms
        self._members = [_Member(i + 1, host, self.base_dir / f"zk{i + 1}") for i, host in enumerate(self.hosts)]

    def __len__(self) -> int:
        return len(self._members)

    @property
    def connect_string(self) -> str:
        return self.connect_string_of(range(len(self._members)))

    def connect_string_of(self, indices: Iterable[int]) -> str:
        """The connect string naming only the servers ``indices`` (e.g. the majority side of a partition)."""
        return ",".join(f"{self._members[i].host.ip}:{CLIENT_PORT}" for i in indices)

    # -- files ---------------------------------------------------------------------------------------------

    def _write_files(self, member: _Member) -> None:
        data = member.data_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = config_lines(data, member.host.ip, CLIENT_PORT, tick_time_ms=self.tick_time_ms, force_sync=False)
        if len(self._members) > 1:
            (data / "myid").write_text(f"{member.myid}\n", encoding="ascii")
            lines += [
                f"initLimit={self.init_limit}",
                f"syncLimit={self.sync_limit}",
                # Unknown keys become `zookeeper.<key>` system properties: QuorumCnxManager's connect timeout,
                # which bounds how long an election waits on a peer that a partition makes unreachable.
                f"cnxTimeout={self.election_connect_timeout_ms}",
            ]
            lines += [f"server.{m.myid}={m.host.ip}:{QUORUM_PORT}:{ELECTION_PORT}" for m in self._members]
        member.config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> ZooKeeperEnsemble:
        """Start every server not running and wait until all of them serve; on failure kill all and raise."""
        for i in range(len(self._members)):
            self.start_server(i)
        try:
            self.wait_serving(timeout_s=timeout_s)
        except ZooKeeperStartError:
            self.stop()
            raise
        return self

    def start_server(self, i: int) -> None:
        """Launch server ``i`` (if not running) without waiting: a quorum member serves only once it has joined."""
        member = self._members[i]
        if member.running:
            return
        member.reap()
        member.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_files(member)
        member.launch(member.host.wrap)

    def wait_serving(self, indices: Iterable[int] | None = None, *, timeout_s: float = 60.0) -> None:
        """Wait until servers ``indices`` (default all) report a serving mode; ``ZooKeeperStartError`` otherwise."""
        wanted = list(range(len(self._members))) if indices is None else list(indices)
        deadline = time.monotonic() + timeout_s
        delay = 0.01
        while True:
            exited = [i for i in wanted if not self._members[i].running]
            if exited:
                raise ZooKeeperStartError(self._failure(f"servers {exited} are not running", wanted))
            if all(self.mode(i) is not None for i in wanted):
                return
            if time.monotonic() >= deadline:
                modes = {i: self.mode(i) for i in wanted}
                raise ZooKeeperStartError(self._failure(f"not all serving after {timeout_s:.0f}s: {modes}", wanted))
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _failure(self, reason: str, indices: list[int]) -> str:
        tails = "\n".join(self._members[i].log_tail() for i in indices)
        return f"ZooKeeper ensemble {self.connect_string} (under {self.base_dir}): {reason}; last log lines:\n{tails}"

    def stop_server(self, i: int, timeout_s: float = 10.0) -> None:
        """SIGTERM server ``i``, SIGKILL after ``timeout_s``; does nothing if it is not running."""
        self._members[i].stop(timeout_s)

    def kill(self, i: int) -> None:
        """SIGKILL server ``i``; does nothing if it is not running."""
        self._members[i].kill()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop every server (SIGTERM to all at once, then SIGKILL what is left after ``timeout_s``). Idempotent."""
        for member in self._members:
            if member.running:
                member.signal(signal.SIGCONT)
                member.signal(signal.SIGTERM)
        for i in range(len(self._members)):
            self.stop_server(i, timeout_s=timeout_s)

    # -- state ---------------------------------------------------------------------------------------------

    def running(self, i: int) -> bool:
        return self._members[i].running

    def pid(self, i: int) -> int | None:
        return self._members[i].pid

    def mode(self, i: int, timeout_s: float = 1.0) -> str | None:
        """Server ``i``'s role per ``srvr`` (leader, follower, standalone, observer), or None when not serving."""
        answer = srvr(self._members[i].host.ip, CLIENT_PORT, timeout_s=timeout_s)
        if answer is None:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode: "):
                mode = line.removeprefix("Mode: ").strip()
                return mode if mode in MODES else None
        return None

    def modes(self) -> list[str | None]:
        return [self.mode(i) for i in range(len(self._members))]

    def leader_index(self) -> int | None:
        """The one server that says it leads (or runs standalone); None if none or several do."""
        leaders = [i for i, mode in enumerate(self.modes()) if mode in ("leader", "standalone")]
        return leaders[0] if len(leaders) == 1 else None

    def log_tail(self, i: int) -> str:
        return self._members[i].log_tail()

    def __enter__(self) -> ZooKeeperEnsemble:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ZooKeeperEnsemble({self.connect_string}, base_dir={self.base_dir})"
