"""Shared helpers of the replicated-cluster benchmark (``bench/cluster.py``): ``odradek serve`` processes
run from any source tree (this checkout, or a ``git worktree`` of an older commit), a 3-broker cluster on
one ZooKeeper, a time-stamped ZooKeeper watch, the acks=all probe producer, and the previous code's worktree.

Not a benchmark itself. Invariants:
- Every process listens on 127.0.0.1 only and is started in a session of its own; ``stop()`` of a broker or
  a cluster sends SIGTERM, waits a bounded time, then SIGKILLs: nothing outlives its ``with`` block.
- A broker keeps its port across restarts (clients' bootstrap lists stay valid), as ``tests/cluster`` does.
- Every wait polls and is bounded; the probe producer stops by itself after ``--max-seconds``.
- Times are ``time.monotonic()`` (CLOCK_MONOTONIC), which every process on the machine shares, so the probe's
  acknowledgement times and the benchmark's kill times are on one clock.

Run as ``python -m bench._cluster probe --bootstrap B --topic T --rate R --max-seconds S --out FILE``: the
probe producer (confluent-kafka, or kafka-python with ``--client kafka-python``; acks=all, idempotent, linger
0, partition 0) writes one line per delivery report to FILE: ``<monotonic s> <offset>`` for an acknowledged
record, ``E <monotonic s> <error>`` for a failed one. ``python -m bench._cluster rtt --bootstrap B --topic T
--acks A --count N``: N produce requests of one 100-byte record, each sent once the previous one was
acknowledged; prints ``n p50_us p99_us``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import REPO
from bench._kafka import cpu_seconds, cpu_split, free_port

T = TypeVar("T")

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def wait_until(condition: Callable[[], T], *, timeout_s: float, what: str, poll_s: float = 0.05) -> T:
    """Poll ``condition`` until it returns something truthy (returned); RuntimeError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


# -- one broker process -----------------------------------------------------------------------------------


@dataclass
class ServeProcess:
    """``odradek serve`` from the source tree ``root`` (imported from there: cwd and PYTHONPATH are ``root``)."""

    label: str
    root: Path
    data_dir: Path
    overrides: list[str] = field(default_factory=list)
    log_level: str = "WARNING"
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    kind: str = "odradek"  # what bench.broker_throughput's helpers print

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.label} is not running"
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> ServeProcess:
        """Start the process (the port is chosen once and kept across restarts); returns at once."""
        assert not self.running, f"{self.label} is already running"
        if not self.port:
            self.port = free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "odradek.cli.main", "--log-level", self.log_level, "serve", "--host",
               "127.0.0.1", "--port", str(self.port), "--data-dir", str(self.data_dir), "--override", "http.listeners="]
        for item in self.overrides:
            cmd += ["--override", item]
        env = {**os.environ, "PYTHONPATH": str(self.root), "PYTHONUNBUFFERED": "1"}
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(cmd, cwd=str(self.root), env=env, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_listening(self, timeout_s: float = START_TIMEOUT_S) -> ServeProcess:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self.proc.returncode} at start:\n{self.log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return self
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.label} did not listen within {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(0.02)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ServeProcess:
        return self.launch().wait_listening(timeout_s)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid) if self.running and self.proc is not None else float("nan")

    def cpu_split(self) -> tuple[float, float]:
        return cpu_split(self.pid)

    def signal(self, sig: signal.Signals) -> None:
        if self.running and self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL and reap (the broker dies without closing its ZooKeeper session)."""
        if self.proc is not None:
            self.signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def wait_exit(self, timeout_s: float) -> int | None:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL; the exit code (-9 when it had to be killed)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            code = self.wait_exit(timeout_s)
            if code is None:
                self.kill()
                return -9
            return code
        return self.proc.returncode

    def log_tail(self, n: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-n:]
        return ""

    def partition_bytes(self, topic: str, partition: int = 0) -> int:
        """Bytes in the partition's segment files (``*.log``) in this broker's data directory."""
        d = self.data_dir / f"{topic}-{partition}"
        total = 0
        with contextlib.suppress(OSError):
            for f in d.iterdir():
                if f.suffix == ".log":
                    with contextlib.suppress(OSError):
                        total += f.stat().st_size
        return total


# -- a cluster --------------------------------------------------------------------------------------------


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000, "log_level": 3})


def create_topic(bootstrap: str, name: str, *, partitions: int = 1, replication_factor: int = 1,
                 config: dict[str, str] | None = None, timeout_s: float = 60.0) -> None:
    """CreateTopics, then wait until the metadata shows every partition with a leader and a full ISR."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    a = admin(bootstrap)
    for attempt in range(3):  # a client that has not learnt the controller yet times out: ask again (bounded)
        fut = a.create_topics([NewTopic(name, partitions, replication_factor, config=config or {})],
                              operation_timeout=timeout_s, request_timeout=30)[name]
        try:
            fut.result(timeout=timeout_s)
            break
        except KafkaException as e:
            err = e.args[0] if e.args else None
            code = err.code() if hasattr(err, "code") else None
            if code == getattr(err, "TOPIC_ALREADY_EXISTS", -1) and attempt > 0:
                break  # an earlier attempt did create it
            if attempt == 2 or not (getattr(err, "retriable", lambda: False)() or "Timed out" in str(e)):
                raise
            print(f"#   note: creating topic {name} failed ({e}); asking again", flush=True)

    def ready() -> bool:
        md = a.list_topics(name, timeout=10)
        t = md.topics.get(name)
        return (t is not None and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 and len(p.isrs) == replication_factor for p in t.partitions.values()))

    wait_until(ready, timeout_s=timeout_s, what=f"topic {name} with leaders and full ISRs", poll_s=0.1)


class Cluster:
    """``size`` brokers (ids 1..size) of this checkout on one ZooKeeper, under a fresh chroot.

    Quacks like ``bench._kafka.Broker`` where ``bench.broker_throughput``'s load helpers need it:
    ``bootstrap`` (every broker), ``cpu()`` (all brokers' CPU seconds), ``kind``.
    """

    kind = "cluster"

    def __init__(self, zk_connect: str, base: Path, overrides: list[str], *, size: int = 3,
                 log_level: str = "WARNING", root: Path = REPO) -> None:
        self.base = base
        self.connect = f"{zk_connect}/bench-{uuid.uuid4().hex[:10]}"
        self.overrides = list(overrides)
        self.brokers = {i: ServeProcess(f"broker {i}", root, base / f"broker-{i}",
                                        [f"broker.id={i}", f"zookeeper.connect={self.connect}", *overrides],
                                        log_level=log_level)
                        for i in range(1, size + 1)}
        self.zk: Any = None  # an odradek ZkClient on the chroot, for the benchmark's own questions
        self.notes: list[str] = []  # what went wrong on the way (reported by the benchmark)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def cpu(self) -> float:
        return sum(b.cpu() for b in self.brokers.values())

    def cpus(self) -> dict[int, float]:
        return {i: b.cpu() for i, b in self.brokers.items()}

    def start(self, timeout_s: float = START_TIMEOUT_S) -> Cluster:
        from odradek.cluster.zk.client import ZkClient

        try:
            self._start(timeout_s)
            self.zk = ZkClient(self.connect, session_timeout_ms=10_000)
            self.zk.start()
            wait_until(lambda: len(self.zk.live_brokers()) == len(self.brokers) and self.controller() >= 0,
                       timeout_s=timeout_s, what=f"{len(self.brokers)} brokers and a controller in ZooKeeper")
            self._check_images(timeout_s)
        except BaseException:
            self.stop(5)
            raise
        return self

    def stale_images(self) -> dict[int, str]:
        """Brokers whose Metadata answer (asked of that broker alone) disagrees with ZooKeeper about the live
        brokers or the controller: broker id -> what it said."""
        want_ctrl, want_ids = self.controller(), set(self.zk.live_brokers())
        stale = {}
        for i, b in self.brokers.items():
            try:
                md = admin(b.bootstrap).list_topics(timeout=10)
                ids, ctrl = set(md.brokers), md.controller_id
            except Exception as e:
                stale[i] = f"no metadata ({e})"
                continue
            if ids != want_ids or ctrl != want_ctrl:
                stale[i] = f"brokers {sorted(ids)} and controller {ctrl} (ZooKeeper: {sorted(want_ids)}, {want_ctrl})"
        return stale

    def _check_images(self, timeout_s: float) -> None:
        """Every broker's metadata agrees with ZooKeeper within 5 s; a broker that still disagrees then is
        noted (``notes``) and restarted, at most twice."""
        for _ in range(3):
            deadline = time.monotonic() + 5
            while (stale := self.stale_images()) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not stale:
                return
            for i, said in stale.items():
                self.notes.append(f"broker {i}'s metadata still said {said} 5 s after start: restarted it")
                self.brokers[i].stop(10)
                self.brokers[i].start(timeout_s)
            wait_until(lambda: len(self.zk.live_brokers()) == len(self.brokers), timeout_s=timeout_s,
                       what="the restarted brokers registered")
        raise RuntimeError(f"brokers' metadata disagrees with ZooKeeper after 2 restarts: {self.stale_images()}")

    def _start(self, timeout_s: float) -> None:
        for b in self.brokers.values():
            b.launch()
        for b in self.brokers.values():
            b.wait_listening(timeout_s)

    def controller(self) -> int:
        c = self.zk.controller()
        return c if c is not None else -1

    def state(self, topic: str, partition: int = 0) -> Any:
        """The partition's ``LeaderAndIsr`` in ZooKeeper (None before the controller wrote it)."""
        return self.zk.get_partition_state(topic, partition)

    def leader(self, topic: str, partition: int = 0) -> int:
        s = self.state(topic, partition)
        return s.leader if s is not None else -1

    def isr(self, topic: str, partition: int = 0) -> tuple[int, ...]:
        s = self.state(topic, partition)
        return tuple(sorted(s.isr)) if s is not None else ()

    def wait_full_isr(self, topic: str, timeout_s: float, partition: int = 0) -> None:
        want = tuple(sorted(self.brokers))
        wait_until(lambda: self.isr(topic, partition) == want and self.leader(topic, partition) >= 0,
                   timeout_s=timeout_s, what=f"{topic}-{partition} with a leader and the ISR {list(want)}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
        """SIGTERM every broker at once, SIGKILL what is left after ``timeout_s``; notes on unclean exits."""
        notes = []
        if self.zk is not None:
            with contextlib.suppress(Exception):
                self.zk.close()
            self.zk = None
        running = [b for b in self.brokers.values() if b.running]
        for b in running:
            b.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for b in running:
            code = b.wait_exit(max(0.1, deadline - time.monotonic()))
            if code is None:
                b.kill()
                notes.append(f"{b.label} did not stop within {timeout_s:.0f} s of SIGTERM: killed")
            elif code != 0:
                notes.append(f"{b.label} exited with {code}")
        for b in self.brokers.values():
            b.kill()
        return notes

    def __enter__(self) -> Cluster:
        return self if self.zk is not None else self.start()  # zk is set once started

    def __exit__(self, *exc: object) -> None:
        for note in self.stop():
            print(f"#   note: {note}", flush=True)


# -- time-stamped ZooKeeper events ------------------------------------------------------------------------


class ZkEvents:
    """Watches a cluster's live brokers, its controller and one partition's state, recording when each
    change arrived here (``time.monotonic()``): ``brokers`` -> set of ids, ``controller`` -> id,
    ``state`` -> (leader, leader epoch, ISR)."""

    def __init__(self, cluster: Cluster, topic: str, partition: int = 0) -> None:
        from odradek.cluster.zk.client import ZkClient

        self.events: list[tuple[float, str, Any]] = []
        self._lock = threading.Lock()
        self.zk = ZkClient(cluster.connect, session_timeout_ms=10_000)
        self.zk.start()
        self.zk.live_brokers(watch=lambda m: self._add("brokers", frozenset(m)))
        self.zk.controller(watch=lambda c: self._add("controller", c if c is not None else -1))
        self.zk.get_partition_state(topic, partition, watch=lambda s: self._add(
            "state", (s.leader, s.leader_epoch, tuple(sorted(s.isr))) if s is not None else None))

    def _add(self, kind: str, value: Any) -> None:
        with self._lock:
            self.events.append((time.monotonic(), kind, value))

    def first_after(self, t0: float, kind: str, test: Callable[[Any], bool]) -> float | None:
        with self._lock:
            for t, k, v in self.events:
                if t >= t0 and k == kind and test(v):
                    return t
        return None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.zk.close()


# -- the probe producer -----------------------------------------------------------------------------------


@dataclass
class Ack:
    t: float  # monotonic seconds when the delivery report was served
    offset: int  # -1 for a failed record
    error: str = ""


class Probe:
    """The probe producer as a child process; ``acks()`` reads what it has written so far."""

    def __init__(self, bootstrap: str, topic: str, out: Path, *, rate: float, max_seconds: float,
                 extra: list[str] | None = None) -> None:
        self.out = out
        self._pos = 0
        self._acks: list[Ack] = []
        self._partial = ""
        cmd = [sys.executable, "-m", "bench._cluster", "probe", "--bootstrap", bootstrap, "--topic", topic,
               "--rate", str(rate), "--max-seconds", str(max_seconds), "--out", str(out), *(extra or [])]
        self.err = out.with_suffix(".err")  # a file, not a pipe: a full pipe would stall librdkafka's logging
        with open(self.err, "wb") as errf:
            self.proc = subprocess.Popen(cmd, cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)},
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errf,
                                         start_new_session=True)

    def acks(self) -> list[Ack]:
        try:
            with open(self.out) as f:
                f.seek(self._pos)
                data = self._partial + f.read()
                self._pos = f.tell()
        except FileNotFoundError:  # the probe has not opened its file yet
            return self._acks
        if "\n" not in data:
            self._partial = data
            return self._acks
        lines, _, self._partial = data.rpartition("\n")
        for line in lines.split("\n"):
            parts = line.split(" ", 2)
            if parts[0] == "E" and len(parts) == 3:
                self._acks.append(Ack(float(parts[1]), -1, parts[2]))
            elif len(parts) == 2:
                self._acks.append(Ack(float(parts[0]), int(parts[1])))
        return self._acks

    def ok_after(self, t0: float) -> Ack | None:
        for a in self.acks():
            if a.t > t0 and a.offset >= 0:
                return a
        return None

    def wait_ok_after(self, t0: float, timeout_s: float, what: str) -> Ack:
        return wait_until(lambda: self.ok_after(t0), timeout_s=timeout_s, what=what, poll_s=0.02)

    def stop(self) -> str:
        """SIGTERM (it flushes what it has in flight for up to 10 s), bounded; its stderr."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.acks()
        try:
            return self.err.read_text(errors="replace")
        except OSError:
            return ""


def _probe_main(a: argparse.Namespace) -> None:
    if a.client == "kafka-python":
        _probe_kafka_python(a)
        return
    from confluent_kafka import Producer

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    conf: dict[str, Any] = {"bootstrap.servers": a.bootstrap, "acks": "all", "enable.idempotence": True,
                            "linger.ms": 0, "message.timeout.ms": 120_000, "log_level": 3}
    for item in a.conf:
        k, _, v = item.partition("=")
        conf[k] = v
    out = open(a.out, "w", buffering=1 << 16)
    last_flush = time.monotonic()

    def on_delivery(err: Any, msg: Any) -> None:
        now = time.monotonic()
        if err is not None:
            out.write(f"E {now:.6f} {str(err.name() if hasattr(err, 'name') else err).replace(' ', '_')}\n")
        else:
            out.write(f"{now:.6f} {msg.offset()}\n")

    p = Producer(conf)
    value = os.urandom(100)
    interval = 1.0 / a.rate
    t0 = time.monotonic()
    deadline = t0 + a.max_seconds
    nxt = t0
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            now = time.monotonic()
            if now >= nxt:
                try:
                    p.produce(a.topic, value=value, partition=0, on_delivery=on_delivery)
                except BufferError:
                    p.poll(0.01)
                nxt += interval
                if nxt < now - 1.0:  # fell behind by more than a second (a full queue): do not burst
                    nxt = now
            p.poll(max(0.0, min(nxt - time.monotonic(), 0.005)))
            if now - last_flush > 0.1:
                out.flush()
                last_flush = now
        p.flush(10)
    finally:
        out.flush()
        out.close()


def _probe_kafka_python(a: argparse.Namespace) -> None:
    """The same probe on kafka-python (its own metadata refresh: ``retry_backoff_ms`` after a leader is lost)."""
    from kafka import KafkaProducer

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    conf: dict[str, Any] = {"bootstrap_servers": a.bootstrap.split(","), "acks": "all", "linger_ms": 0,
                            "enable_idempotence": True, "retries": 1_000_000, "delivery_timeout_ms": 120_000,
                            "request_timeout_ms": 30_000}
    for item in a.conf:
        k, _, v = item.partition("=")
        conf[k] = int(v) if v.lstrip("-").isdigit() else v
    lock = threading.Lock()
    out = open(a.out, "w", buffering=1 << 16)

    def ok(md: Any) -> None:
        now = time.monotonic()
        with lock:
            out.write(f"{now:.6f} {md.offset}\n")

    def failed(e: Exception) -> None:
        now = time.monotonic()
        with lock:
            out.write(f"E {now:.6f} {type(e).__name__}\n")

    p = KafkaProducer(**conf)
    value = os.urandom(100)
    interval = 1.0 / a.rate
    t0 = time.monotonic()
    deadline = t0 + a.max_seconds
    nxt = t0
    last_flush = t0
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            now = time.monotonic()
            if now >= nxt:
                p.send(a.topic, value=value, partition=0).add_callback(ok).add_errback(failed)
                nxt = max(nxt + interval, now - 1.0)
            if now - last_flush > 0.1:
                with lock:
                    out.flush()
                last_flush = now
            time.sleep(max(0.0, min(nxt - time.monotonic(), 0.005)))
        p.flush(10)
        p.close(10)
    finally:
        with lock:
            out.flush()
            out.close()


def _rtt_main(a: argparse.Namespace) -> None:
    """One record at a time: produce, wait for its acknowledgement, repeat; prints ``n p50_us p99_us``."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": a.bootstrap, "acks": a.acks, "linger.ms": 0, "enable.idempotence": False,
                  "log_level": 3})
    done: list[float] = []
    value = os.urandom(100)
    for _ in range(20):  # connected, metadata known
        p.produce(a.topic, value=value, partition=0)
    p.flush(30)
    lat: list[float] = []
    deadline = time.monotonic() + a.max_seconds
    while len(lat) < a.count and time.monotonic() < deadline:
        t = time.perf_counter()
        p.produce(a.topic, value=value, partition=0, on_delivery=lambda err, msg: done.append(time.perf_counter()))
        while not done:
            p.poll(0.001)
            if time.monotonic() > deadline:
                break
        if done:
            lat.append(done.pop() - t)
    lat.sort()
    n = len(lat)
    print(n, f"{lat[n // 2] * 1e6:.0f}" if n else "nan", f"{lat[min(n - 1, int(n * 0.99))] * 1e6:.0f}" if n else "nan")


def produce_round_trip(bootstrap: str, topic: str, acks: str, count: int,
                       max_seconds: float) -> tuple[int, float, float]:
    """(n, p50 us, p99 us) of ``count`` produce requests of one 100-byte record each, sent one after another."""
    r = subprocess.run([sys.executable, "-m", "bench._cluster", "rtt", "--bootstrap", bootstrap, "--topic", topic,
                        "--acks", acks, "--count", str(count), "--max-seconds", str(max_seconds)],
                       capture_output=True, text=True, cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)},
                       timeout=max_seconds + 60)
    try:
        n, p50, p99 = r.stdout.split()
        return int(n), float(p50), float(p99)
    except ValueError:
        raise RuntimeError(f"produce round trips: no result (exit {r.returncode}): {r.stderr[-1500:]}") from None


# -- the previous code ------------------------------------------------------------------------------------


@contextlib.contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """A detached ``git worktree`` of ``commit`` in a temporary directory, removed (and pruned) on exit."""
    parent = Path(tempfile.mkdtemp(prefix="odradek-prev-"))
    path = parent / "src"
    r = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), commit],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        shutil.rmtree(parent, ignore_errors=True)
        raise RuntimeError(f"git worktree add {commit} failed: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
                       capture_output=True, timeout=120)
        shutil.rmtree(parent, ignore_errors=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], capture_output=True, timeout=120)


def commit_of(ref: str, root: Path = REPO) -> str:
    r = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", ref], capture_output=True, text=True,
                       timeout=30)
    return r.stdout.strip() or "?"


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("probe", help="the acks=all probe producer")
    pr.add_argument("--bootstrap", required=True)
    pr.add_argument("--topic", required=True)
    pr.add_argument("--rate", type=float, default=1000.0)
    pr.add_argument("--max-seconds", type=float, required=True)
    pr.add_argument("--out", required=True)
    pr.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra producer config")
    pr.add_argument("--client", choices=["confluent-kafka", "kafka-python"], default="confluent-kafka")
    rt = sub.add_parser("rtt", help="produce round trips, one record at a time")
    rt.add_argument("--bootstrap", required=True)
    rt.add_argument("--topic", required=True)
    rt.add_argument("--acks", default="-1")
    rt.add_argument("--count", type=int, default=2000)
    rt.add_argument("--max-seconds", type=float, default=30.0)
    args = ap.parse_args()
    if args.cmd == "probe":
        _probe_main(args)
    else:
        _rtt_main(args)
