"""Helpers of ``bench/group_rebalance.py``: consumer-group members as child processes, an Odradek
broker started with config overrides, and this machine's raw loopback request/response limits.

Not a benchmark itself. Two roles run as child processes of the benchmark, never by hand:

- ``python -m bench._groups member CONFIG_JSON``: one confluent-kafka consumer in a group. It reads
  commands from stdin (``go``, ``run``, ``stop``; EOF means stop) and writes one JSON event per line
  to stdout, each stamped with ``time.monotonic()`` (CLOCK_MONOTONIC, one clock for every process on
  the machine, so the parent can order the events of all members).
- ``python -m bench._groups rpc-server REQ_BYTES RESP_BYTES MAX_SECONDS``: the server side of the raw
  limit. It prints its port, then answers every ``REQ_BYTES`` it receives on a connection with
  ``RESP_BYTES``, one ``send`` per response as a broker writes each response, until all its
  connections close or ``MAX_SECONDS`` pass.

Why members are processes and not threads of one process: each is then a separate client, as in a
deployment, with its own interpreter, so the Python side of ten consumers (rebalance callbacks,
poll loops) never waits for one GIL. librdkafka runs its own threads inside every member either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import REPO
from bench._kafka import Broker, free_port

# Sizes of the raw limit's messages: about an OffsetCommit v8 request for one partition (header,
# group id, generation, member id, one topic, one partition) and its response, framing included.
RPC_REQUEST_BYTES = 160
RPC_RESPONSE_BYTES = 40


# -- brokers -------------------------------------------------------------------------------------


@dataclass
class GroupBroker(Broker):
    """A :class:`bench._kafka.Broker` whose Odradek is started with ``--override`` settings."""

    overrides: list[str] = field(default_factory=list)
    python_args: list[str] = field(default_factory=list)  # e.g. ["-m", "cProfile", "-o", FILE]

    def start(self, timeout: float = 30) -> GroupBroker:
        if self.kind != "odradek":
            super().start(timeout)
            return self
        self.port = free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.odradek.log"
        extra = [arg for kv in self.overrides for arg in ("--override", kv)]
        argv = [sys.executable, *self.python_args, "-m", "odradek.cli.main", "--log-level", "WARNING", "serve",
                "--port", str(self.port), "--data-dir", str(self.data_dir / "data"), "--override", "http.listeners=",
                *extra]
        env = dict(os.environ, PYTHONPATH=str(REPO), **self.env)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO), env=env,
                                         start_new_session=True)
        give_up = time.monotonic() + timeout
        while not _listening(self.port):
            if self.proc.poll() is not None or time.monotonic() > give_up:
                self.stop()
                raise RuntimeError(f"odradek did not start listening on {self.port}:\n{self.log_tail()}")
            time.sleep(0.05)
        return self


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


# -- members (parent side) -----------------------------------------------------------------------


@dataclass
class Event:
    member: int
    ev: str
    t: float
    data: dict[str, Any]


class Members:
    """Child processes running :func:`member_main`, and one queue with the events of them all."""

    def __init__(self, stderr_path: Path) -> None:
        self.events: queue.Queue[Event] = queue.Queue()
        self.procs: list[subprocess.Popen[str]] = []
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "ab")  # closed in close()

    def spawn(self, config: dict[str, Any]) -> int:
        idx = len(self.procs)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        proc = subprocess.Popen([sys.executable, "-m", "bench._groups", "member", json.dumps(config)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                cwd=str(REPO), env=env)
        self.procs.append(proc)
        threading.Thread(target=self._read, args=(idx, proc), daemon=True).start()
        return idx

    def _read(self, idx: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with contextlib.suppress(ValueError):
                d = json.loads(line)
                self.events.put(Event(idx, d.pop("ev"), d.pop("t"), d))
        self.events.put(Event(idx, "exit", time.monotonic(), {"code": proc.wait()}))

    def send(self, idx: int, command: str) -> None:
        proc = self.procs[idx]
        if proc.poll() is None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.write(command + "\n")
                proc.stdin.flush()

    def next_event(self, until: float) -> Event | None:
        """The next event, or None once ``until`` (a monotonic time) has passed."""
        try:
            return self.events.get(timeout=max(0.0, until - time.monotonic()))
        except queue.Empty:
            return None

    def wait_all(self, idxs: list[int], ev: str, timeout: float,
                 sink: Callable[[Event], None] | None = None) -> dict[int, Event]:
        """Wait until every member in ``idxs`` has reported ``ev``; other events go to ``sink``."""
        got: dict[int, Event] = {}
        until = time.monotonic() + timeout
        while len(got) < len(idxs):
            e = self.next_event(until)
            if e is None:
                missing = sorted(set(idxs) - set(got))
                raise RuntimeError(f"members {missing} did not report {ev!r} within {timeout:.0f} s"
                                   f"{self.stderr_tail()}")
            if e.ev == "exit" and e.member in idxs and e.member not in got:
                raise RuntimeError(f"member {e.member} exited (code {e.data['code']}) before {ev!r}"
                                   f"{self.stderr_tail()}")
            if e.ev == ev and e.member in idxs:
                got[e.member] = e
            elif sink is not None:
                sink(e)
        return got

    def stderr_tail(self, n: int = 2500) -> str:
        self._stderr.flush()
        with contextlib.suppress(OSError):
            text = self.stderr_path.read_text(errors="replace")[-n:]
            return f"\n--- members' stderr (tail) ---\n{text}" if text.strip() else ""
        return ""

    def close(self, timeout: float = 20) -> None:
        """Stop every member (they close their consumer, i.e. leave the group), kill stragglers."""
        for i in range(len(self.procs)):
            self.send(i, "stop")
        until = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._stderr.close()

    def __enter__(self) -> Members:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- a member (child side) -----------------------------------------------------------------------


def member_main(cfg: dict[str, Any]) -> None:
    """One consumer: get ready, subscribe on ``go``, report every assignment change; in the commit
    modes, run the commit loop on ``run`` and report its result; close on ``stop``."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    lock = threading.Lock()

    def emit(ev: str, **kw: Any) -> None:
        line = json.dumps({"ev": ev, "t": time.monotonic(), **kw})
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    commands: queue.Queue[str] = queue.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("stop")

    threading.Thread(target=read_stdin, daemon=True).start()
    owned: set[int] = set()
    done = {"ok": 0, "err": 0, "last": 0.0}

    def on_assign(_c: Any, parts: list[Any]) -> None:
        t = time.monotonic()
        owned.update(p.partition for p in parts)
        emit("assign", at=t, parts=sorted(owned), delta=len(parts))

    def on_revoke(_c: Any, parts: list[Any]) -> None:
        t = time.monotonic()
        owned.difference_update(p.partition for p in parts)
        emit("revoke", at=t, parts=sorted(owned), delta=len(parts))

    def on_lost(_c: Any, parts: list[Any]) -> None:
        t = time.monotonic()
        owned.clear()
        emit("lost", at=t, parts=[], delta=len(parts))

    def on_commit(err: Any, parts: list[Any]) -> None:
        if err is None and not any(p.error for p in parts):
            done["ok"] += 1
        else:
            done["err"] += 1
        done["last"] = time.monotonic()

    topic = cfg["topic"]
    conf: dict[str, Any] = {
        "bootstrap.servers": cfg["bootstrap"],
        "group.id": cfg["group"],
        "partition.assignment.strategy": cfg["assignor"],
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "log_level": 4,
        "error_cb": lambda e: emit("error", msg=str(e)),
        **cfg.get("client", {}),
    }
    if cfg["mode"] == "async":
        conf["on_commit"] = on_commit
    consumer = Consumer(conf)
    deadline = time.monotonic() + cfg["max_seconds"]

    def serve(until: Callable[[], bool], step: float = 0.05) -> str:
        """poll() (rebalance callbacks run in it) until ``until()`` or a command; the command or ''."""
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                return commands.get_nowait()
            if until():
                return ""
            consumer.poll(step)
        return "stop"

    try:
        consumer.list_topics(topic, timeout=30)  # connected, metadata known: not part of the timing
        emit("ready")
        cmd = ""
        while cmd not in ("go", "stop") and time.monotonic() < deadline:
            # block on the command itself (not in poll): every member subscribes within a millisecond of its "go"
            with contextlib.suppress(queue.Empty):
                cmd = commands.get(timeout=1.0)
        if cmd == "go":
            t = time.monotonic()
            consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
            emit("subscribed", at=t)
            cmd = serve(lambda: False)
            if cmd == "run" and cfg["mode"] in ("sync", "async"):
                parts = sorted(owned)
                if not parts:
                    emit("result", error="no partitions assigned when the commit loop was to start")
                else:
                    run = commit_sync if cfg["mode"] == "sync" else commit_async
                    emit("result", **run(consumer, TopicPartition, KafkaException, topic, parts, cfg, done))
                cmd = serve(lambda: False)
    finally:
        t = time.monotonic()
        consumer.close()
        emit("closed", took=time.monotonic() - t)


def _batches(topic: str, parts: list[int], batch: int, tp: Any) -> Iterator[list[Any]]:
    """Endless commit requests: ``batch`` partitions each (cycling over ``parts``), offsets rising."""
    n = min(batch, len(parts))
    i = 0
    offset = 1
    while True:
        yield [tp(topic, parts[(i + k) % len(parts)], offset) for k in range(n)]
        i += n
        offset += 1


def commit_sync(consumer: Any, tp: Any, kafka_exc: type[Exception], topic: str, parts: list[int],
                cfg: dict[str, Any], _done: dict[str, Any]) -> dict[str, Any]:
    """``commit(offsets=..., asynchronous=False)`` in a loop: ``count`` calls or ``seconds``."""
    batches = _batches(topic, parts, cfg["batch"], tp)
    for _ in range(cfg["warmup"]):
        consumer.commit(offsets=next(batches), asynchronous=False)
    lat: list[float] = []
    errors = 0
    first_error = ""
    last: list[Any] = []
    t0 = time.monotonic()
    stop = t0 + cfg["seconds"]
    while len(lat) < cfg["count"] and time.monotonic() < stop:
        last = next(batches)
        t = time.perf_counter()
        try:
            res = consumer.commit(offsets=last, asynchronous=False)
            bad = [r for r in res if r.error]
        except kafka_exc as e:
            bad = [e]
        lat.append(time.perf_counter() - t)
        if bad:
            errors += 1
            first_error = first_error or str(bad[0])
            if errors > 100:
                break
    t1 = time.monotonic()
    check = consumer.committed([tp(topic, p.partition) for p in last], timeout=10) if last else []
    verified = bool(last) and all(c.offset == s.offset for c, s in zip(check, last, strict=True))
    return {"calls": len(lat), "errors": errors, "first_error": first_error, "t0": t0, "t1": t1,
            "batch": len(last), "lat": sorted(lat), "verified": verified}


def commit_async(consumer: Any, tp: Any, kafka_exc: type[Exception], topic: str, parts: list[int],
                 cfg: dict[str, Any], done: dict[str, Any]) -> dict[str, Any]:
    """``commit(offsets=..., asynchronous=True)`` keeping ``window`` commits outstanding; completions
    arrive through ``on_commit`` served by ``poll``. Runs ``seconds``, then waits for the last ones."""
    batches = _batches(topic, parts, cfg["batch"], tp)
    window = cfg["window"]
    issued = 0
    t0 = time.monotonic()
    stop = t0 + cfg["seconds"]
    first_error = ""
    while time.monotonic() < stop and issued < cfg["count"]:
        while issued - done["ok"] - done["err"] < window and issued < cfg["count"]:
            try:
                consumer.commit(offsets=next(batches), asynchronous=True)
                issued += 1
            except kafka_exc as e:
                first_error = first_error or str(e)
                done["err"] += 1
                issued += 1
        consumer.poll(0.001)
    drain = time.monotonic() + 10
    while done["ok"] + done["err"] < issued and time.monotonic() < drain:
        consumer.poll(0.001)
    return {"calls": done["ok"], "errors": done["err"], "issued": issued, "first_error": first_error, "t0": t0,
            "t1": done["last"] or time.monotonic(), "batch": min(cfg["batch"], len(parts)), "lat": [],
            "verified": done["ok"] + done["err"] == issued}


# -- raw limit: loopback request/response --------------------------------------------------------


def rpc_server(req: int, resp: int, max_seconds: float) -> None:
    """Answer each ``req`` bytes received with ``resp`` bytes, on every connection, until all close."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(128)
    print(lst.getsockname()[1], flush=True)
    sel = selectors.DefaultSelector()
    sel.register(lst, selectors.EVENT_READ)
    partial: dict[socket.socket, int] = {}
    seen = False
    reply = bytes(resp)
    stop = time.monotonic() + max_seconds
    while time.monotonic() < stop and (partial or not seen):
        for key, _ in sel.select(timeout=0.5):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock is lst:
                conn, _ = lst.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sel.register(conn, selectors.EVENT_READ)
                partial[conn] = 0
                seen = True
                continue
            data = sock.recv(1 << 18)
            if not data:
                sel.unregister(sock)
                sock.close()
                del partial[sock]
                continue
            whole, partial[sock] = divmod(partial[sock] + len(data), req)
            for _ in range(whole):
                sock.sendall(reply)


class _RpcServer:
    def __init__(self, max_seconds: float) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        argv = [sys.executable, "-m", "bench._groups", "rpc-server", str(RPC_REQUEST_BYTES), str(RPC_RESPONSE_BYTES),
                str(max_seconds)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=str(REPO), env=env)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def finish(self) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@dataclass
class RpcResult:
    calls: int
    seconds: float
    lat: list[float]  # seconds per round trip, sorted (sync only)

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds > 0 else float("nan")


def rpc_sync(count: int, max_seconds: float) -> RpcResult:
    """One connection, one request outstanding: send, wait for the whole response, repeat."""
    srv = _RpcServer(max_seconds + 30)
    sock = srv.connect()
    request = bytes(RPC_REQUEST_BYTES)
    buf = bytearray(RPC_RESPONSE_BYTES)
    view = memoryview(buf)
    lat: list[float] = []
    try:
        stop = time.perf_counter() + max_seconds
        t0 = time.perf_counter()
        while len(lat) < count and time.perf_counter() < stop:
            t = time.perf_counter()
            sock.sendall(request)
            got = 0
            while got < RPC_RESPONSE_BYTES:
                n = sock.recv_into(view[got:])
                if not n:
                    raise RuntimeError("raw rpc server closed the connection")
                got += n
            lat.append(time.perf_counter() - t)
        secs = time.perf_counter() - t0
    finally:
        sock.close()
        srv.finish()
    return RpcResult(len(lat), secs, sorted(lat))


def rpc_pipelined(connections: int, window: int, seconds: float) -> RpcResult:
    """``connections`` connections, each keeping ``window`` requests outstanding, for ``seconds``;
    responses counted as they arrive and each answered by a new request in its own ``send``, as a
    client issues one commit per call (one client thread for all connections)."""
    srv = _RpcServer(seconds + 30)
    socks = [srv.connect() for _ in range(connections)]
    sel = selectors.DefaultSelector()
    request = bytes(RPC_REQUEST_BYTES)
    partial = dict.fromkeys(socks, 0)
    outstanding = dict.fromkeys(socks, window)
    done = 0
    try:
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
            for _ in range(window):
                s.sendall(request)
        t0 = time.perf_counter()
        stop = t0 + seconds
        t_last = t0
        while any(outstanding.values()) and time.perf_counter() < stop + 10:
            for key, _ in sel.select(timeout=0.5):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                data = s.recv(1 << 18)
                if not data:
                    raise RuntimeError("raw rpc server closed the connection")
                whole, partial[s] = divmod(partial[s] + len(data), RPC_RESPONSE_BYTES)
                done += whole
                outstanding[s] -= whole
                t_last = time.perf_counter()
                if t_last < stop:
                    for _ in range(whole):
                        s.sendall(request)
                    outstanding[s] += whole
    finally:
        for s in socks:
            s.close()
        srv.finish()
    return RpcResult(done, t_last - t0, [])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "member":
        member_main(json.loads(sys.argv[2]))
    elif len(sys.argv) == 5 and sys.argv[1] == "rpc-server":
        rpc_server(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        raise SystemExit(__doc__)
