"""The network-partition infrastructure itself: hosts in network namespaces, nftables cuts, a partitioned
ZooKeeper ensemble.

Traffic is made by tiny Python processes run inside the hosts' namespaces (``host.wrap``): a TCP echo
server, one-shot and long-lived echo clients, and a UDP receiver. Clients in the test process itself stand
for the root namespace. Every connect and read has a 1 s timeout, every wait polls with a bound, and every
process and network is torn down in a ``finally``.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from odradek.cluster.zk.server import srvr
from tests.cluster.zk_process import wait_until
from tests.faults.netns import ANY_NETWORK_NETNS_RE, IP_FORWARD, Host, Network, cleanup_stale
from tests.faults.zk_ensemble import CLIENT_PORT, ZooKeeperEnsemble

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
ECHO_PORT = 7000
UDP_PORT = 7001
IO_TIMEOUT_S = 1.0

ECHO_SERVER = """
import socket, sys, threading
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
def serve(conn):
    with conn:
        while data := conn.recv(4096):
            conn.sendall(data)
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

# One connection, one round trip: prints ok, timeout or the error.
ECHO_ONCE = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as conn:
        conn.sendall(b"ping")
        got = b""
        while len(got) < 4 and (chunk := conn.recv(4 - len(got))):
            got += chunk
        print("ok" if got == b"ping" else f"wrong {got!r}")
except TimeoutError:
    print("timeout")
except OSError as exc:
    print(f"error {exc!r}")
"""

# One long-lived connection: for each token on stdin, send it and wait (bounded) for its echo.
ECHO_SESSION = """
import socket, sys, time
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
print("connected", flush=True)
buffer = b""
for line in sys.stdin:
    token = line.strip().encode()
    conn.sendall(token + b"\\n")
    deadline = time.monotonic() + float(sys.argv[3])
    outcome = "timeout"
    while outcome == "timeout" and time.monotonic() < deadline:
        if b"\\n" in buffer:
            echoed, buffer = buffer.split(b"\\n", 1)
            if echoed == token:
                outcome = "ok"
            continue
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            buffer += conn.recv(4096)
        except TimeoutError:
            break
    print(outcome, flush=True)
"""

UDP_RECEIVER = """
import socket, sys
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((sys.argv[1], int(sys.argv[2])))
sock.settimeout(float(sys.argv[3]))
print("bound", flush=True)
try:
    data, _ = sock.recvfrom(100)
    print(data.decode(), flush=True)
except TimeoutError:
    print("timeout", flush=True)
"""

UDP_SEND = """
import socket, sys
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"datagram", (sys.argv[1], int(sys.argv[2])))
"""


# -- helpers -------------------------------------------------------------------------------------------------


class Child:
    """A process whose stdout lines arrive in a queue, so that reading them has a timeout."""

    def __init__(self, cmd: Sequence[str], *, stdin: bool = False, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            list(cmd),
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def line(self, timeout_s: float = 5.0) -> str:
        try:
            return self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"{self.proc.args} printed nothing within {timeout_s}s") from None

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        # A grandchild may still hold the pipe open: then the reader never sees EOF, and closing stdout under
        # it would block on its lock. Leave the pipe to the (daemon) reader in that case.
        self._reader.join(timeout=5)
        if not self._reader.is_alive() and self.proc.stdout is not None:
            self.proc.stdout.close()


@contextmanager
def child(cmd: Sequence[str], *, stdin: bool = False, env: dict[str, str] | None = None) -> Iterator[Child]:
    proc = Child(cmd, stdin=stdin, env=env)
    try:
        yield proc
    finally:
        proc.close()


def python(*args: str) -> list[str]:
    return [sys.executable, "-c", *args]


@contextmanager
def echo_server(host: Host) -> Iterator[Child]:
    """A TCP echo server on ``host.ip:ECHO_PORT``, running inside ``host``; ready when yielded."""
    with child(host.wrap(python(ECHO_SERVER, host.ip, str(ECHO_PORT)))) as server:
        wait_until(lambda: echo_from_root(host) == "ok", timeout_s=10, what=f"the echo server on {host.name}")
        yield server


def echo_from(client: Host, server: Host) -> str:
    """One round trip from a process in ``client``'s namespace to ``server``'s echo server."""
    cmd = client.wrap(python(ECHO_ONCE, server.ip, str(ECHO_PORT), str(IO_TIMEOUT_S)))
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    return (result.stdout.strip() or result.stderr.strip()).splitlines()[-1]


def echo_from_root(server: Host) -> str:
    """One round trip from the root namespace (where the test's clients live) to ``server``'s echo server."""
    try:
        with socket.create_connection((server.ip, ECHO_PORT), timeout=IO_TIMEOUT_S) as conn:
            conn.sendall(b"ping")
            return "ok" if conn.recv(4) == b"ping" else "wrong"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return f"error {exc!r}"


def udp_reaches(src: Host, dst: Host) -> bool:
    """Whether a datagram ``src`` sends to ``dst`` arrives (the receiver waits ``IO_TIMEOUT_S``)."""
    with child(dst.wrap(python(UDP_RECEIVER, dst.ip, str(UDP_PORT), str(IO_TIMEOUT_S)))) as receiver:
        assert receiver.line() == "bound"
        subprocess.run(src.wrap(python(UDP_SEND, dst.ip, str(UDP_PORT))), check=True, timeout=10)
        answer = receiver.line()
    assert answer in ("datagram", "timeout"), answer
    return answer == "datagram"


@pytest.fixture
def network() -> Iterator[Network]:
    net = Network()
    try:
        yield net
    finally:
        net.close()


# -- the network ------------------------------------------------------------------------------------------


def test_cut_blocks_both_ways_and_heal_restores(network: Network) -> None:
    a, b = network.add_host("a"), network.add_host("b")
    assert a.ip != b.ip and a.netns != b.netns
    with echo_server(a), echo_server(b):
        assert echo_from(b, a) == "ok"
        assert echo_from(a, b) == "ok"

        network.cut(a, b)
        assert network.cuts() == {(a.ip, b.ip), (b.ip, a.ip)}
        assert echo_from(b, a) == "timeout"
        assert echo_from(a, b) == "timeout"
        # The root namespace is not part of the cut: the test's clients still reach both hosts.
        assert echo_from_root(a) == "ok"
        assert echo_from_root(b) == "ok"

        network.heal()
        assert network.cuts() == frozenset()
        assert echo_from(b, a) == "ok"
        assert echo_from(a, b) == "ok"


def test_one_way_cut_drops_one_direction_but_blocks_tcp_handshakes_both_ways(network: Network) -> None:
    a, b = network.add_host("a"), network.add_host("b")
    with echo_server(a), echo_server(b):
        network.cut_one_way(a, b)
        assert network.cuts() == {(a.ip, b.ip)}
        # Datagrams show the cut is one-way: b's reach a, a's are dropped.
        assert udp_reaches(b, a)
        assert not udp_reaches(a, b)
        # TCP needs both directions. a -> b: a's SYN is dropped. b -> a: b's SYN arrives, a's SYN-ACK is dropped.
        assert echo_from(a, b) == "timeout"
        assert echo_from(b, a) == "timeout"
        assert echo_from_root(a) == "ok"

        network.heal()
        assert udp_reaches(a, b)
        assert echo_from(a, b) == "ok"


def test_established_connections_are_cut_and_resume_after_heal(network: Network) -> None:
    """The drop rules match every packet, not only new connections: conntrack lets nothing through."""
    a, b = network.add_host("a"), network.add_host("b")
    with echo_server(a):
        cmd = b.wrap(python(ECHO_SESSION, a.ip, str(ECHO_PORT), str(IO_TIMEOUT_S)))
        with child(cmd, stdin=True) as session:
            assert session.line() == "connected"
            session.send("before")
            assert session.line() == "ok"

            network.cut(a, b)
            session.send("during")
            assert session.line() == "timeout"

            network.heal()
            # TCP retransmits with a backoff, so the first echo after the heal may take a few seconds.
            rounds = iter(range(1_000))

            def echoed() -> bool:
                session.send(f"after{next(rounds)}")
                return session.line() == "ok"

            wait_until(echoed, timeout_s=15, what="an echo on the old connection after the heal")


def test_partition_isolate_and_cut_from_clients(network: Network) -> None:
    a, b, c = network.add_host("a"), network.add_host("b"), network.add_host("c")
    with echo_server(a), echo_server(b), echo_server(c):
        network.partition([a], [b, c])
        assert network.cuts() == {(a.ip, b.ip), (b.ip, a.ip), (a.ip, c.ip), (c.ip, a.ip)}
        assert echo_from(b, a) == "timeout"
        assert echo_from(c, b) == "ok"

        network.heal()
        network.isolate(c, [a, b, c])
        assert network.cuts() == {(c.ip, a.ip), (a.ip, c.ip), (c.ip, b.ip), (b.ip, c.ip)}
        assert echo_from(a, c) == "timeout"
        assert echo_from(a, b) == "ok"

        network.heal()
        network.cut_from_clients(a)
        assert network.clients_cut() == {a.ip}
        assert echo_from_root(a) == "timeout"
        assert echo_from_root(b) == "ok"
        assert echo_from(b, a) == "ok"

        network.heal()
        assert network.clients_cut() == frozenset()
        assert echo_from_root(a) == "ok"
        with pytest.raises(ValueError, match="more than one group"):
            network.partition([a], [a, b])


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True, timeout=10).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _leftovers(tag: str) -> list[str]:
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True, timeout=10).stdout
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True, timeout=10).stdout
    return (
        [n for n in _namespaces() if n.startswith(tag)]
        + [line for line in links.splitlines() if f" {tag}" in line]
        + [line for line in tables.splitlines() if line.split()[-1] == tag]
    )


def _ip_forward_restored(before: str) -> bool:
    if any(ANY_NETWORK_NETNS_RE.fullmatch(name) for name in _namespaces()):
        return True  # another network (another test run) still needs forwarding: it stays on
    with open(IP_FORWARD, encoding="ascii") as f:
        return f.read().strip() == before


def test_close_removes_everything_and_stale_runs_are_cleaned_up() -> None:
    with open(IP_FORWARD, encoding="ascii") as f:
        forwarding_before = f.read().strip()
    net = Network("odrt")
    try:
        host = net.add_host("x")
        net.cut_from_clients(host)
        sleeper = subprocess.Popen(host.wrap(["sleep", "600"]))
    finally:
        net.close()
    assert sleeper.wait(timeout=10) != 0  # close() killed what still ran inside the namespace
    net.close()  # idempotent
    assert _leftovers(net.tag) == []
    assert _ip_forward_restored(forwarding_before)

    # A run killed with SIGKILL leaves its namespace, veth, table and processes behind: the next cleans up.
    script = (
        "import subprocess\n"
        "from tests.faults.netns import Network\n"
        "net = Network('odrt')\n"
        "host = net.add_host('x')\n"
        "quiet = subprocess.DEVNULL  # the sleeper must not hold our pipe open\n"
        "sleeper = subprocess.Popen(host.wrap(['sleep', '600']), stdout=quiet, stderr=quiet)\n"
        "print(net.tag, sleeper.pid, flush=True)\n"
        "input()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    try:
        with child(python(script), stdin=True, env=env) as run:
            line = run.line(timeout_s=20)
            tag, sleeper_pid = line.split()[0], int(line.split()[1])
            run.proc.kill()
            run.proc.wait(timeout=10)
        assert _leftovers(tag), "the killed run should have left its namespace behind"
        removed = cleanup_stale("odrt")
        assert any(item.startswith("netns") for item in removed), removed
        assert any(item.startswith("nft table") for item in removed), removed
        assert _leftovers(tag) == []
        assert _ip_forward_restored(forwarding_before)  # from the value the stale table recorded
        wait_until(lambda: not Path(f"/proc/{sleeper_pid}").exists(), timeout_s=10, what="the stale sleeper to die")
    finally:
        cleanup_stale("odrt")


# -- ZooKeeper --------------------------------------------------------------------------------------------


def test_zookeeper_leader_cut_from_the_majority_is_replaced(tmp_path: Path, network: Network) -> None:
    hosts = [network.add_host(f"zk{i}") for i in (1, 2, 3)]
    ensemble = ZooKeeperEnsemble(tmp_path / "zk", hosts)
    clients: list[KazooClient] = []

    def connect(indices: list[int]) -> KazooClient:
        client = KazooClient(hosts=ensemble.connect_string_of(indices), timeout=10.0)
        clients.append(client)
        client.start(timeout=15)
        return client

    try:
        ensemble.start(timeout_s=60)
        assert ensemble.connect_string == ",".join(f"{h.ip}:{CLIENT_PORT}" for h in hosts)
        modes = ensemble.modes()
        assert sorted(m or "" for m in modes) == ["follower", "follower", "leader"], modes
        old = ensemble.leader_index()
        assert old is not None
        majority = [i for i in range(3) if i != old]

        network.partition([hosts[old]], [hosts[i] for i in majority])

        def replaced() -> bool:
            new = [i for i in majority if ensemble.mode(i) == "leader"]
            return len(new) == 1 and ensemble.mode(old) is None

        wait_until(replaced, timeout_s=30, what="a new leader among the majority and the old one not serving")
        answer = srvr(hosts[old].ip, CLIENT_PORT)
        assert answer is not None and "not currently serving requests" in answer, answer

        writer = connect(majority)
        writer.create("/partition-probe", b"written by the majority")
        assert writer.get("/partition-probe")[0] == b"written by the majority"
        assert ensemble.mode(old) is None  # still cut off: it has not rejoined behind our back

        network.heal()

        def whole() -> bool:
            modes = ensemble.modes()
            return sorted(m or "" for m in modes) == ["follower", "follower", "leader"]

        wait_until(whole, timeout_s=30, what="all three serving again with one leader")
        reader = connect([old])
        assert reader.get("/partition-probe")[0] == b"written by the majority"

        # A killed server restarts and rejoins.
        follower = next(i for i, mode in enumerate(ensemble.modes()) if mode == "follower")
        ensemble.kill(follower)
        assert not ensemble.running(follower) and ensemble.mode(follower) is None
        ensemble.start_server(follower)
        ensemble.wait_serving([follower], timeout_s=30)
        assert ensemble.mode(follower) == "follower"
    finally:
        for client in clients:
            client.stop()
            client.close()
        ensemble.stop()


def test_a_one_host_ensemble_runs_standalone(tmp_path: Path, network: Network) -> None:
    host = network.add_host("zk")
    ensemble = ZooKeeperEnsemble(tmp_path / "zk", [host])
    try:
        ensemble.start(timeout_s=60)
        assert ensemble.modes() == ["standalone"]
        assert ensemble.leader_index() == 0
        assert ensemble.connect_string == f"{host.ip}:{CLIENT_PORT}"
        ensemble.stop()
        assert ensemble.mode(0) is None
        ensemble.stop()  # idempotent
    finally:
        ensemble.stop()
