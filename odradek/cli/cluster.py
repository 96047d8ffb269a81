"""``odradek cluster up``: a local ZooKeeper and N brokers as child processes, stopped together.

Layout under ``--data-dir`` (default ``./cluster-data``), reused by the next ``cluster up`` so a local
cluster keeps its topics between runs::

    zookeeper/          ZooKeeper's data, zoo.cfg and logs (zookeeper.log, zookeeper.out)
    broker-<i>/         broker i's log.dirs
    broker-<i>.log      broker i's output (its log)

Invariants:
- Broker ``i`` (1..N) has ``broker.id=i``, listens on ``127.0.0.1:<base-port + i - 1>`` (its HTTP listener,
  ``/metrics`` and the console, on ``127.0.0.1:<http-base-port + i - 1>``; ``--http-base-port 0``: a free port each,
  logged by the broker) and connects to
  ``<zookeeper>/odradek``; ``--override`` keys apply to every broker and win over the cluster's defaults
  (replication factors sized to N: ``min(3, N)``, ``transaction.state.log.min.isr=min(2, N)``). The keys
  that must differ per broker (ids, listeners, log dirs, ZooKeeper) cannot be overridden.
- ZooKeeper's ``/odradek`` exists before any broker starts (created if missing).
- Nothing is started until the arguments, every broker's configuration and every port have been
  checked; a broker is ready when its port accepts TCP connections; "ready" is printed only then.
- If anything fails to start, everything already started is stopped and the exit code is 1.
- Stopping (Ctrl-C or SIGTERM): every broker gets SIGTERM at once, each has up to ``--stop-timeout``
  seconds (60) to finish before SIGKILL, then ZooKeeper is stopped (last, so brokers can still use it
  while they shut down). A second Ctrl-C kills whatever is still running. The exit code is then 0.
- Brokers run in their own sessions, as ZooKeeper does, so a terminal's Ctrl-C reaches only this
  command, which stops them in the order above.
- A broker that dies while the cluster runs is reported (with its log's path) and the rest keep
  running, so a local cluster can be used to watch a broker fail.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.config_sources import environment_properties
from odradek.cli import cluster_describe

HOST = "127.0.0.1"
CHROOT = "/odradek"
LOG_TAIL_LINES = 40
POLL_S = 0.05

# Keys `cluster up` sets per broker; an --override of one would make the brokers collide.
PER_BROKER_KEYS = frozenset({
    "broker.id", "node.id", "listeners", "advertised.listeners", "log.dirs", "log.dir", "zookeeper.connect",
    "http.listeners",
})


class ClusterError(Exception):
    """The cluster could not be started; the message says what went wrong and what to do."""


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "cluster",
        help="run a local cluster (ZooKeeper and several brokers), or describe a running one",
        description="Run a local Odradek cluster on this machine, or describe a running cluster.",
    )
    verbs = p.add_subparsers(dest="cluster_command", required=True, metavar="VERB")
    up = verbs.add_parser(
        "up",
        help="start ZooKeeper and N brokers; Ctrl-C stops them all",
        description=(
            "Start a local ZooKeeper and N brokers as child processes, print the bootstrap servers and wait; "
            "Ctrl-C (or SIGTERM) stops every broker gracefully, then ZooKeeper. Broker i has broker.id=i and "
            "listens on 127.0.0.1:BASE_PORT+i-1; its data is in DATA_DIR/broker-i and its log in "
            "DATA_DIR/broker-i.log."
        ),
    )
    up.add_argument("--brokers", type=int, default=3, metavar="N", help="number of brokers (default 3)")
    up.add_argument("--data-dir", type=Path, default=Path("cluster-data"), metavar="DIR",
                    help="where ZooKeeper's and the brokers' data and logs go (default ./cluster-data)")
    up.add_argument("--base-port", type=int, default=9092, metavar="PORT",
                    help="port of broker 1; broker i listens on PORT+i-1 (default 9092)")
    up.add_argument("--http-base-port", type=int, default=9644, metavar="PORT",
                    help="HTTP port (/metrics, console) of broker 1; broker i serves on PORT+i-1 (default 9644; "
                         "0: a free port each, in its log)")
    up.add_argument("--zookeeper-port", type=int, default=2181, metavar="PORT",
                    help="ZooKeeper's client port (default 2181)")
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="set a broker config key on every broker (repeatable), e.g. --override num.partitions=3")
    up.add_argument("--start-timeout", type=float, default=60.0, metavar="SECONDS",
                    help="how long ZooKeeper and each broker may take to start (default 60)")
    up.add_argument("--stop-timeout", type=float, default=60.0, metavar="SECONDS",
                    help="how long each broker may take to stop before it is killed (default 60)")
    up.set_defaults(func=run_up)
    describe = verbs.add_parser(
        "describe", help="brokers, controller and unhealthy partitions of a running cluster",
        description="Describe a running cluster: its brokers (with racks), its controller, and the partitions "
                    "that are under-replicated, under min.insync.replicas or offline.")
    cluster_describe.add_arguments(describe)


# -- the plan: pure ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerPlan:
    """How broker ``broker_id`` is run: its port, data directory, log file and config keys."""

    broker_id: int
    port: int
    data_dir: Path
    log_path: Path
    properties: dict[str, str] = field(default_factory=dict)
    http_port: int = 0  # its HTTP listener's port (0: a free one)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"


def cluster_defaults(brokers: int) -> dict[str, str]:
    """Replication settings sized to a cluster of ``brokers`` (Kafka's defaults need three)."""
    return {
        "default.replication.factor": str(min(3, brokers)),
        "offsets.topic.replication.factor": str(min(3, brokers)),
        "transaction.state.log.replication.factor": str(min(3, brokers)),
        "transaction.state.log.min.isr": str(min(2, brokers)),
    }


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` options as a dict; ``ClusterError`` for a malformed one or a per-broker key."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ClusterError(f"--override {item!r} is not KEY=VALUE (e.g. --override num.partitions=3)")
        if key in PER_BROKER_KEYS:
            raise ClusterError(
                f"--override {key} is set per broker by `cluster up` and cannot be overridden "
                "(use --base-port, --data-dir or --zookeeper-port instead)"
            )
        out[key] = value.strip()
    return out


def plan_brokers(brokers: int, data_dir: Path, base_port: int, zookeeper_connect: str,
                 overrides: dict[str, str], environ: Mapping[str, str] | None = None,
                 http_base_port: int = 9644) -> list[BrokerPlan]:
    """Every broker's plan; its properties are validated as a broker would (``ClusterError`` if not), with the
    ``ODRADEK_CFG_*`` variables of ``environ`` (which each broker's ``odradek serve`` applies below its
    ``--override`` options) under them."""
    env_props, origins = environment_properties(environ or {})
    if brokers < 1:
        raise ClusterError(f"--brokers {brokers} is invalid: a cluster needs at least 1 broker")
    last = base_port + brokers - 1
    if base_port < 1 or last > 65535:
        raise ClusterError(
            f"--base-port {base_port} with {brokers} brokers needs ports {base_port}..{last}, "
            "which are not all between 1 and 65535: pick another --base-port"
        )
    if http_base_port < 0 or (http_base_port and http_base_port + brokers - 1 > 65535):
        raise ClusterError(f"--http-base-port {http_base_port} with {brokers} brokers needs ports that are not all "
                           "between 1 and 65535: pick another --http-base-port (0: a free port for each)")
    plans = []
    for i in range(1, brokers + 1):
        port = base_port + i - 1
        http_port = http_base_port + i - 1 if http_base_port else 0
        broker_dir = data_dir / f"broker-{i}"
        props = {
            "broker.id": str(i),
            "listeners": f"PLAINTEXT://{HOST}:{port}",
            "http.listeners": f"http://{HOST}:{http_port}",
            "log.dirs": str(broker_dir),
            "zookeeper.connect": f"{zookeeper_connect}{CHROOT}",
            **cluster_defaults(brokers),
            **overrides,
        }
        try:
            BrokerConfig.from_properties({**env_props, **props}, {k: v for k, v in origins.items() if k not in props})
        except ConfigError as e:
            raise ClusterError(f"invalid broker configuration: {e}") from None
        plans.append(BrokerPlan(i, port, broker_dir, data_dir / f"broker-{i}.log", props, http_port))
    return plans


def broker_command(plan: BrokerPlan, log_level: str = "INFO") -> list[str]:
    """The ``odradek serve`` command line of one broker."""
    cmd = [sys.executable, "-m", "odradek.cli.main", "--log-level", log_level, "serve"]
    for key, value in plan.properties.items():
        cmd += ["--override", f"{key}={value}"]
    return cmd


# -- processes ---------------------------------------------------------------------------------------------


def port_in_use(port: int, host: str = HOST) -> bool:
    """True if ``host:port`` cannot be bound right now (someone listens there, or it is reserved)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is no obstacle
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def check_ports(zookeeper_port: int, plans: Sequence[BrokerPlan]) -> None:
    """``ClusterError`` naming every port that is already in use, and what to do."""
    wanted = [(zookeeper_port, "ZooKeeper (--zookeeper-port)")]
    wanted += [(p.port, f"broker {p.broker_id} (--base-port)") for p in plans]
    wanted += [(p.http_port, f"broker {p.broker_id}'s HTTP (--http-base-port)") for p in plans if p.http_port]
    clashes = [f"{port} for {what}" for port, what in wanted if port_in_use(port)]
    if zookeeper_port in {p.port for p in plans}:
        clashes.insert(0, f"{zookeeper_port} is both ZooKeeper's and a broker's")
    if clashes:
        raise ClusterError(
            f"port in use on {HOST}: {'; '.join(clashes)}. Stop what listens there (another `odradek cluster up`?) "
            "or choose other ports with --base-port / --zookeeper-port / --http-base-port"
        )


def accepts_connections(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def ensure_chroot(connect_string: str, chroot: str, timeout_s: float) -> None:
    """Create ``chroot`` in ZooKeeper if it is missing, so the brokers' chrooted sessions find it."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    quiet = logging.getLogger("odradek.cluster.up.zookeeper")  # kazoo's connection chatter is not progress
    quiet.setLevel(logging.WARNING)
    client = KazooClient(hosts=connect_string, timeout=min(timeout_s, 10.0), logger=quiet)
    try:
        client.start(timeout=timeout_s)
        client.ensure_path_async(chroot).get(timeout=timeout_s)
    except KazooTimeoutError:
        raise ClusterError(f"ZooKeeper on {connect_string} did not answer within {timeout_s:g}s") from None
    except KazooException as e:
        raise ClusterError(f"could not create {chroot} in ZooKeeper on {connect_string}: {e!r}") from None
    finally:
        client.stop()
        client.close()


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        return f"(cannot read {path}: {e})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class BrokerProcess:
    """One ``odradek serve`` child, its output appended to its log file."""

    def __init__(self, plan: BrokerPlan, log_level: str) -> None:
        self.plan = plan
        self.log_level = log_level
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.exit_reported = False

    def start(self) -> None:
        self.plan.data_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.plan.log_path, "ab")  # closed in close()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        try:
            self.proc = subprocess.Popen(
                broker_command(self.plan, self.log_level), stdin=subprocess.DEVNULL, stdout=self._log,
                stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        except OSError:
            self.close()
            raise

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.running:
            assert self.proc is not None
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def stop_brokers(brokers: Sequence[BrokerProcess], timeout_s: float, force: threading.Event,
                 say: Callable[[str], None]) -> None:
    """SIGTERM every running broker at once; SIGKILL those still running after ``timeout_s`` (or on ``force``)."""
    running = [b for b in brokers if b.running]
    if running:
        say(f"stopping {len(running)} broker(s) (SIGTERM; up to {timeout_s:g}s each)...")
    began = time.monotonic()
    for b in running:
        b.signal(signal.SIGTERM)
    deadline = began + timeout_s
    pending = list(running)
    while pending:
        for b in [b for b in pending if not b.running]:
            pending.remove(b)
            say(f"broker {b.plan.broker_id} stopped (exit code {b.returncode}) after {time.monotonic() - began:.1f}s")
        if not pending:
            break
        if time.monotonic() >= deadline or force.is_set():
            why = "on a second interrupt" if force.is_set() else f"still running after {timeout_s:g}s"
            for b in pending:
                b.signal(signal.SIGKILL)
                assert b.proc is not None
                try:
                    b.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                say(f"broker {b.plan.broker_id} killed ({why})")
            break
        time.sleep(POLL_S)
    for b in brokers:
        b.close()


class _Interrupted(Exception):
    """Ctrl-C or SIGTERM arrived while the cluster was starting."""


class _Signals:
    """SIGINT/SIGTERM -> ``stop`` (first) and ``force`` (second); restores the old handlers on exit."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.force = threading.Event()
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.stop.is_set():
            self.force.set()
        self.stop.set()

    def check(self) -> None:
        if self.stop.is_set():
            raise _Interrupted


def _say(text: str) -> None:
    print(text, flush=True)


def _wait_ready(brokers: Sequence[BrokerProcess], timeout_s: float, signals: _Signals) -> None:
    """Return once every broker's port accepts connections; ``ClusterError`` if one exits or is too slow."""
    deadline = time.monotonic() + timeout_s
    waiting = list(brokers)
    while waiting:
        signals.check()
        for b in list(waiting):
            if not b.running:
                raise ClusterError(
                    f"broker {b.plan.broker_id} exited with code {b.returncode} while starting; "
                    f"last lines of {b.plan.log_path}:\n{log_tail(b.plan.log_path)}"
                )
            if accepts_connections(b.plan.port):
                waiting.remove(b)
                _say(f"broker {b.plan.broker_id} ready on {b.plan.address}")
        if waiting and time.monotonic() >= deadline:
            slow = ", ".join(str(b.plan.broker_id) for b in waiting)
            tails = "\n".join(f"--- {b.plan.log_path}\n{log_tail(b.plan.log_path)}" for b in waiting)
            raise ClusterError(f"broker(s) {slow} did not accept connections within {timeout_s:g}s:\n{tails}")
        if waiting:
            time.sleep(POLL_S)


def run_up(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir.resolve()
    try:
        overrides = parse_overrides(args.override)
        plans = plan_brokers(args.brokers, data_dir, args.base_port, f"{HOST}:{args.zookeeper_port}", overrides,
                             os.environ, args.http_base_port)
        if not 0 < args.zookeeper_port < 65536:
            raise ClusterError(f"--zookeeper-port {args.zookeeper_port} is not between 1 and 65535")
        check_ports(args.zookeeper_port, plans)
    except ClusterError as e:
        print(f"odradek cluster up: {e}", file=sys.stderr)
        return 2
    from odradek.cluster.zk.server import ZooKeeperError, ZooKeeperServer

    log_level = getattr(args, "log_level", "INFO")
    zk = ZooKeeperServer(data_dir / "zookeeper", port=args.zookeeper_port)
    brokers = [BrokerProcess(plan, log_level) for plan in plans]
    code = 0
    with _Signals() as signals:
        try:
            _say(f"starting zookeeper on {HOST}:{args.zookeeper_port} (data in {zk.data_dir})...")
            zk.start(timeout_s=args.start_timeout)
            _say(f"zookeeper ready on {zk.connect_string}")
            ensure_chroot(zk.connect_string, CHROOT, args.start_timeout)
            signals.check()
            _say(f"starting {len(brokers)} broker(s)...")
            for b in brokers:
                b.start()
            _wait_ready(brokers, args.start_timeout, signals)
            _say(f"bootstrap.servers={','.join(p.address for p in plans)}")
            _say(f"logs: {', '.join(str(p.log_path) for p in plans)}, {zk.log_path}")
            _say("cluster up; press Ctrl-C to stop it")
            _watch(brokers, zk, signals)
            _say("stopping the cluster...")
        except _Interrupted:
            _say("interrupted while starting: stopping what was started...")
        except (ClusterError, ZooKeeperError, OSError) as e:
            print(f"odradek cluster up: {e}", file=sys.stderr, flush=True)
            print("odradek cluster up: stopping what was started...", file=sys.stderr, flush=True)
            code = 1
        finally:
            stop_brokers(brokers, args.stop_timeout, signals.force, _say)
            if zk.running:
                zk.stop(timeout_s=0 if signals.force.is_set() else 10)
                _say("zookeeper stopped")
    _say("cluster stopped" if code == 0 else "cluster stopped after a failed start")
    return code


def _watch(brokers: Sequence[BrokerProcess], zk: Any, signals: _Signals) -> None:
    """Wait for Ctrl-C/SIGTERM, reporting (once each) a broker or ZooKeeper that dies meanwhile."""
    zk_reported = False
    while not signals.stop.wait(0.5):
        for b in brokers:
            if not b.running and not b.exit_reported:
                b.exit_reported = True
                print(f"broker {b.plan.broker_id} exited with code {b.returncode}; see {b.plan.log_path}",
                      file=sys.stderr, flush=True)
        if not zk.running and not zk_reported:
            zk_reported = True
            print(f"zookeeper exited; see {zk.log_path}", file=sys.stderr, flush=True)
