"""Partition reassignment and leader rebalance on a 4-broker cluster: how long moving a partition takes, with
and without a replication throttle, what it does to clients meanwhile, and how soon leadership is back in
balance after a broker restart; beside this machine's raw limits measured in the same run.

Run (from the repository root)::

    python -m bench.reassignment                    # full: 1 GiB partition (~5 min once the machine is free)
    python -m bench.reassignment --quick            # smoke test (~1.5 min): 128 MiB, throttle 10 MB/s
    python -m bench.reassignment --mb 512 --throttle 30 --rate 10000
    python -m bench.reassignment --only rebalance --rebalance-interval 2 --rebalance-reps 5

Set-up. One ZooKeeper (``odradek/cluster/zk/server.py``) for the run; each cluster is 4 fresh ``odradek
serve`` processes of this checkout (``bench/_cluster.Cluster``, ids 1..4, empty data directories, default
config unless said otherwise). Everything listens on 127.0.0.1. Times are ``time.monotonic()``.

What is measured:

1. **move** (twice, each on a fresh cluster: first without a throttle, then with ``--throttle`` MB/s):
   topic ``big`` (1 partition, replicas [1, 2], created with that assignment) is filled with ``--mb`` MiB of
   1 KiB records by ``rdkafka_performance -P`` (acks=1, linger.ms 5, as ``bench.cluster``'s catch-up fills
   its partition), until broker 2 holds every byte and is in the ISR; then it is moved to [3, 4] with
   ``python -m odradek.cli.main reassign-partitions --execute --reassignment-json-file F`` (``--throttle
   BYTES_PER_S`` for the throttled move: it sets ``leader/follower.replication.throttled.rate`` on brokers
   1-4 and the topic's ``*.replication.throttled.replicas``). **Duration** = from just before the CLI
   process starts to the first poll (every 0.25 s, kafka-python's KafkaAdminClient in this process) that
   finds ``list_partition_reassignments()`` without ``big-0`` and the metadata's replicas of ``big-0`` equal
   to [3, 4]. Rate = the partition's bytes (segment files of the source leader) / duration, per new replica;
   both new replicas fetch from the one leader, so the leader sends twice that (the "total" column; the
   leader's throttle caps that total; its rate is Kafka's windowed rate, ``replication.quota.window.num`` 11 x
   1 s by default, measured over at least 10 s, so about throttle x 10 s pass before it bites: --quick uses
   10 MB/s so that its 2 x 128 MiB exceed that). Beside it: raw ``sendfile`` into loopback TCP and raw loopback TCP ->
   file append of the same size (at most 1 GiB; ``bench/_raw_net.py``), measured once at the start.
   Also shown: the CLI's own run time, when both new replicas' segment files held every byte (polled every
   0.1 s), when the controller wrote the completed assignment to ZooKeeper (a watch on the topic znode),
   whether ``--verify`` then exits 0 and removes the throttle configs, and whether brokers 1 and 2 delete
   their old replica's files.
2. **clients during the move**: topic ``load`` (1 partition, replicas [1, 3, 4]: led by the broker the
   moving partition is copied from, followed by the two brokers it is copied to; ``min.insync.replicas=2``)
   carries ``rdkafka_performance -P -l -r --rate`` (100 B records, acks=-1, linger.ms ``--linger``,
   idempotent: no duplicates and no reordering, so the i-th record read is the i-th produced) and its
   consumer ``-C -l -A file`` (assigned partition, from the end offset read before it starts), which writes
   receipt time - produce stamp per record (wall clock, microseconds). The producer runs an open-loop
   schedule: record i is due at start + i / rate, so the records *due inside a window* are known by index.
   Windows: the baseline (each cluster, after the fill, no reassignment): ``--baseline-seconds`` starting
   2 s after the load starts; the move: the move's duration above (the load starts 2 s before the CLI and is
   stopped 1 s after completion). Per window: p50/p99/p99.9/max end-to-end latency of the records due in
   it, and the rate = those of them consumed (within 2 s of the producer's stop) / window seconds; also
   the brokers' CPU (all four) over the window and the two clients' CPU over the whole load run, in cores.
3. **rebalance**: a fresh cluster with ``--override leader.imbalance.check.interval.seconds=
   --rebalance-interval`` (auto.leader.rebalance.enable and leader.imbalance.per.broker.percentage at their
   defaults, true and 10), topic ``spread`` (8 partitions, RF 3, placed by the controller). Until every
   partition is led by its preferred (first) replica; then one broker that is not the controller and is the
   preferred replica of some partitions gets SIGTERM (controlled shutdown), which must leave it leading
   nothing; it is started again at once, and from its process start (``Popen``) we time (ZooKeeper polled
   every 0.05 s): registered, in the ISR of each of its partitions, and leading every partition it is the
   preferred replica of (the figure; also: every partition led by its preferred replica). Beside it: the
   configured interval (the controller checks every interval, so expect ISR time + up to one interval).
   If that does not happen within 3 intervals + 120 s, ``leader-election --election-type preferred
   --all-topic-partitions`` is run and its effect reported. ``--rebalance-reps`` restarts, victims rotate.

Before each timed window, ``os.sync()`` and ``_common.prewarm`` (this VM returns idle memory to its host;
see ``bench/_common.py``). Every wait is bounded (``--max-seconds``); every process this script starts is
stopped on every exit (SIGTERM included). Broker logs are scanned for ERROR/Traceback lines, which are
reported. A full run first waits (``--wait``) until no storage benchmark and no pytest runs, then for an
idle machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cluster import Cluster, admin, create_topic, wait_until
from bench._common import (
    DEFAULT_TMP_ROOT,
    REPO,
    CpuWatch,
    GiB,
    MiB,
    machine_facts,
    median,
    prewarm,
    print_facts,
    scratch_dir,
    settle,
)
from bench._common import guarded as _guarded
from bench._kafka import PerfTool, build_rdkafka_performance, cpu_seconds, run_perf
from bench.broker_throughput import (
    Latency,
    _percentiles,
    phase_raw_sendfile,
    phase_raw_tcp,
    wait_for_quiet_machine,
)

PHASES = ("move", "rebalance")
BIG, LOAD, SPREAD = "big", "load", "spread"
SOURCES, TARGETS = [1, 2], [3, 4]
LOAD_REPLICAS = [1, 3, 4]  # led by the source leader, followed by both targets
SPREAD_PARTITIONS = 8
QUOTA_WINDOWS = 11  # replication.quota.window.num (default; window size 1 s)
WARMUP_S = 2.0  # load running before a window opens (connections, producer id, first fetches)
PROBLEMS: list[str] = []  # what looked wrong in the product (reported at the end)
CLI = [sys.executable, "-m", "odradek.cli.main"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def note(msg: str) -> None:
    print(f"#   {msg}", flush=True)


def problem(msg: str) -> None:
    PROBLEMS.append(msg)
    note(f"PROBLEM: {msg}")


# -- clusters ---------------------------------------------------------------------------------------------------


@dataclass
class Env:
    tool: PerfTool
    zk_connect: str
    scratch: Path
    max_seconds: float
    n: int = 0

    def fresh(self, what: str) -> Path:
        self.n += 1
        return self.scratch / f"{what}-{self.n}"


def _log_problems(c: Cluster, what: str) -> None:
    """ERROR/CRITICAL/Traceback lines of every broker's log (a few each) go to PROBLEMS."""
    for b in c.brokers.values():
        try:
            lines = b.log_path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        bad = [x for x in lines if re.search(r"\b(ERROR|CRITICAL)\b|Traceback", x)]
        if bad:
            PROBLEMS.append(f"{what}: {b.label}'s log has {len(bad)} ERROR/Traceback lines, first: "
                            + " | ".join(x.strip()[:300] for x in bad[:3]))


@contextlib.contextmanager
def four_brokers(env: Env, what: str, overrides: list[str] | None = None,
                 log_level: str = "WARNING") -> Iterator[Cluster]:
    """A fresh 4-broker cluster (one more try on a fresh chroot if it does not start); stopped, its logs
    scanned and its files removed on exit."""
    base = env.fresh(what)
    c = Cluster(env.zk_connect, base, list(overrides or []), size=4, log_level=log_level)
    try:
        try:
            c.start()
        except RuntimeError as e:
            note(f"a cluster did not start ({str(e).splitlines()[0]}); starting another")
            c.stop(5)
            shutil.rmtree(base, ignore_errors=True)
            c = Cluster(env.zk_connect, base, list(overrides or []), size=4, log_level=log_level)
            c.start()
        for n in c.notes:
            problem(f"{what}: {n}")
        with c:
            yield c
    finally:
        c.stop()
        _log_problems(c, what)
        shutil.rmtree(base, ignore_errors=True)


def create_assigned(c: Cluster, name: str, replicas: list[int], config: dict[str, str] | None = None,
                    timeout_s: float = 60.0) -> None:
    """CreateTopics of one partition on exactly ``replicas`` (the first leads), then wait until ZooKeeper shows
    that leader and the full ISR."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    a = admin(c.bootstrap)
    for attempt in range(3):  # a client that has not learnt the controller yet times out: ask again (bounded)
        fut = a.create_topics([NewTopic(name, 1, replica_assignment=[replicas], config=config or {})],
                              operation_timeout=timeout_s, request_timeout=30)[name]
        try:
            fut.result(timeout=timeout_s)
            break
        except KafkaException as e:
            if attempt > 0 and "already exists" in str(e).lower():
                break  # an earlier attempt did create it
            if attempt == 2:
                raise
            note(f"creating topic {name} failed ({e}); asking again")
    wait_until(lambda: c.leader(name) == replicas[0] and c.isr(name) == tuple(sorted(replicas)),
               timeout_s=timeout_s, what=f"{name}-0 led by {replicas[0]} with the ISR {sorted(replicas)}")


def high_watermark(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-reassignment-hw", "log_level": 3,
                     "enable.auto.commit": False})
    try:
        _lo, hi = cons.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        cons.close()
    return int(hi)


def cli(args: list[str], timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=str(REPO), env=ENV, timeout=timeout_s)


# -- the client load ----------------------------------------------------------------------------------------------


@dataclass
class Window:
    """Figures of the load's records due inside one window."""

    lat: Latency  # p50.. in us; rate = records due in the window and consumed / window seconds
    seconds: float
    due: int
    consumed: int
    failed: int  # the producer's failed deliveries (whole run)
    behind: bool  # the producer fell behind its schedule (index -> due time no longer exact)


def _interrupt(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGINT (rdkafka_performance prints its totals and closes its files), then SIGKILL if it hangs."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


class LoadRun:
    """``rdkafka_performance`` latency mode on ``load``-0: the consumer from the current end offset, then (1.5 s
    later, connected) the producer at ``rate`` records/s on an open-loop schedule, until ``stop()``."""

    def __init__(self, env: Env, c: Cluster, rate: float, linger: float, tag: str) -> None:
        self.c, self.rate = c, rate
        self.lat_file = env.scratch / f"latency-{tag}.txt"
        self.out_c, self.out_p = env.scratch / f"load-consumer-{tag}.out", env.scratch / f"load-producer-{tag}.out"
        self.prod: subprocess.Popen[bytes] | None = None
        self.marks: dict[str, tuple[float, float]] = {}
        start = high_watermark(c.bootstrap, LOAD)
        tool = str(env.tool.path)
        with open(self.out_c, "wb") as f:
            self.cons = subprocess.Popen([tool, "-q", "-C", "-t", LOAD, "-p", "0", "-b", c.bootstrap, "-o", str(start),
                                          "-l", "-A", str(self.lat_file)],
                                         stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        try:
            time.sleep(1.5)  # let it connect and start fetching at ``start``
            if self.cons.poll() is not None:
                raise RuntimeError(f"the load's consumer exited: {self.out_c.read_text(errors='replace')[-2000:]}")
            count = int(rate * (env.max_seconds + 600))  # ends by itself at the latest after that
            self.t0 = time.monotonic()
            with open(self.out_p, "wb") as f:
                self.prod = subprocess.Popen([tool, "-q", "-P", "-t", LOAD, "-p", "0", "-b", c.bootstrap, "-s", "100",
                                              "-l", "-r", f"{rate:.0f}", "-c", str(count), "-a", "-1",
                                              "-X", f"linger.ms={linger:g}", "-X", "enable.idempotence=true"],
                                             stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        except BaseException:
            self.kill()
            raise

    def mark(self, name: str) -> float:
        """Remember now (monotonic) and the brokers' CPU seconds."""
        t = time.monotonic()
        self.marks[name] = (t, self.c.cpu())
        return t

    def kill(self) -> None:
        for p in (self.prod, self.cons):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=10)

    def stop(self) -> None:
        """Stop the producer, give the consumer 2 s to read what is still on its way, stop it; read the files."""
        try:
            self.wall = time.monotonic() - self.t0
            self.client_cpu = sum(cpu_seconds(p.pid) for p in (self.prod, self.cons) if p is not None)
            assert self.prod is not None
            _interrupt(self.prod, 20)
            time.sleep(2.0)
            _interrupt(self.cons, 20)
        finally:
            self.kill()
        out = self.out_p.read_text(errors="replace")
        m = re.findall(r"% (\d+) messages produced \(\d+ bytes\), (\d+) delivered \(offset -?\d+, (\d+) failed\) "
                       r"in (\d+)ms", out)
        if not m:
            raise RuntimeError(f"the load's producer printed no totals:\n{out[-2000:]}")
        produced, _delivered, failed, ms = (int(x) for x in m[-1])
        self.failed = failed
        # on schedule, the producer had produced about rate x its run time when it stopped
        self.behind = produced < 0.95 * self.rate * int(ms) / 1000
        try:
            self.lat = [float(x) for x in self.lat_file.read_text().split()]
        except OSError:
            self.lat = []
        self.lat_file.unlink(missing_ok=True)

    def window(self, start: str, end: str) -> Window:
        (t_a, cpu_a), (t_b, cpu_b) = self.marks[start], self.marks[end]
        i0 = max(0, math.ceil((t_a - self.t0) * self.rate))
        i1 = max(i0, math.floor((t_b - self.t0) * self.rate))
        got = self.lat[i0:i1]
        secs = t_b - t_a
        if not got:
            raise RuntimeError(f"no load record due in the window was consumed ({len(self.lat)} consumed in all; "
                               f"consumer output: {self.out_c.read_text(errors='replace')[-1000:]})")
        n, p50, p99, p999, mx = _percentiles(got)
        lat = Latency(n, p50, p99, p999, mx, n / secs, (cpu_b - cpu_a) / secs, self.client_cpu / self.wall)
        return Window(lat, secs, i1 - i0, n, self.failed, self.behind)


@contextlib.contextmanager
def load_running(env: Env, c: Cluster, a: argparse.Namespace, tag: str) -> Iterator[LoadRun]:
    load = LoadRun(env, c, a.rate, a.linger, tag)
    try:
        yield load
    except BaseException:
        load.kill()
        raise


def baseline(env: Env, c: Cluster, a: argparse.Namespace, tag: str) -> Window:
    settle()
    with load_running(env, c, a, tag) as load:
        time.sleep(WARMUP_S)
        load.mark("start")
        time.sleep(a.baseline_seconds)
        load.mark("end")
        time.sleep(0.5)
        load.stop()
    return load.window("start", "end")


# -- 1./2. the move --------------------------------------------------------------------------------------------------


@dataclass
class Move:
    label: str
    throttle_mbps: float | None
    nbytes: int  # the partition's segment bytes on the source leader
    fill_mbps: float
    base: Window | None = None
    during: Window | None = None
    duration: float = float("nan")  # --execute started -> the API shows it complete
    cli_s: float = float("nan")  # the --execute process's run time
    to_copied: float | None = None  # -> both new replicas' segment files hold every byte
    to_zk_done: float | None = None  # -> the controller wrote the completed assignment
    throttle_set: bool | None = None  # the throttle configs were in ZooKeeper after --execute
    verify_rc: int | None = None
    throttles_left: dict[str, dict[str, str]] = field(default_factory=dict)
    sources_cleaned_s: float | None = None  # completion -> brokers 1 and 2 hold no files of big-0

    @property
    def per_replica_mbps(self) -> float:
        return self.nbytes / self.duration / 1e6

    @property
    def total_mbps(self) -> float:
        return len(TARGETS) * self.per_replica_mbps


THROTTLE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                 "leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def throttle_configs(c: Cluster) -> dict[str, dict[str, str]]:
    """The throttle configs in ZooKeeper: entity -> {key: value}, only entities that have some."""
    out = {}
    for kind, name in [("brokers", str(i)) for i in c.brokers] + [("topics", BIG)]:
        got = {k: v for k, v in c.zk.get_config(kind, name).items() if k in THROTTLE_KEYS}
        if got:
            out[f"{kind}/{name}"] = got
    return out


def fill(env: Env, c: Cluster, mb: int) -> tuple[int, float]:
    """``mb`` MiB of 1 KiB records into big-0 (acks=1), then until broker 2 holds them all and is in the ISR.
    Returns (segment bytes on the leader, fill MB/s)."""
    count = mb * MiB // 1024
    settle()
    prewarm(env.scratch, 2 * int(count * 1100) + 64 * MiB)
    r = run_perf(env.tool, ["-P", "-t", BIG, "-p", "0", "-b", c.bootstrap, "-s", "1024", "-c", str(count), "-a", "1",
                            "-X", "enable.idempotence=false", "-X", "linger.ms=5"], env.max_seconds)
    if r.records < count:
        raise RuntimeError(f"filling {BIG}: {r.records} of {count} delivered:\n{r.output[-2000:]}")
    leader, follower = c.brokers[SOURCES[0]], c.brokers[SOURCES[1]]
    target = leader.partition_bytes(BIG)
    wait_until(lambda: follower.partition_bytes(BIG) >= target and c.isr(BIG) == tuple(sorted(SOURCES)),
               timeout_s=env.max_seconds, what=f"broker {SOURCES[1]} holding all of {BIG}-0 and in its ISR")
    return target, r.mbps


def _api_complete(client: Any) -> bool:
    """ListPartitionReassignments has no entry for big-0 and the metadata's replicas are the targets."""
    from kafka import TopicPartition

    from odradek.cli._kafka_python import bounded

    try:
        running = bounded(lambda: client.list_partition_reassignments(), 10)
        if TopicPartition(BIG, 0) in running:
            return False
        topics = bounded(lambda: client.describe_topics([BIG]), 10)
    except Exception as e:  # a moment without an answer: ask again at the next poll (the move's wait is bounded)
        note(f"the reassignment poll failed ({type(e).__name__}: {e}); asking again")
        return False
    for t in topics:
        for p in t.get("partitions") or ():
            if t.get("name") == BIG and p.get("partition_index") == 0:
                return list(p.get("replica_nodes") or ()) == TARGETS
    return False


def move_once(a: argparse.Namespace, env: Env, throttle_mbps: float | None) -> Move:
    from kafka import KafkaAdminClient

    from odradek.cli._kafka_python import bounded, quiet_kafka_python

    quiet_kafka_python()
    label = "unthrottled" if throttle_mbps is None else f"throttled {throttle_mbps:g} MB/s"
    with four_brokers(env, f"move-{'free' if throttle_mbps is None else 'throttled'}") as c:
        create_assigned(c, BIG, SOURCES)
        create_assigned(c, LOAD, LOAD_REPLICAS, {"min.insync.replicas": "2"})
        nbytes, fill_mbps = fill(env, c, a.mb)
        mv = Move(label, throttle_mbps, nbytes, fill_mbps)
        note(f"{label}: {BIG}-0 filled with {nbytes / MiB:.0f} MiB at {fill_mbps:.0f} MB/s; baseline load")
        mv.base = baseline(env, c, a, f"base-{env.n}")
        note(f"{label}: baseline {_window_line(mv.base)}")

        plan = env.scratch / f"plan-{env.n}.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": BIG, "partition": 0, "replicas": TARGETS, "log_dirs": ["any"] * len(TARGETS)}]}))
        cmd = ["reassign-partitions", "--execute", "--reassignment-json-file", str(plan),
               "--bootstrap-server", c.bootstrap]
        if throttle_mbps is not None:
            cmd += ["--throttle", str(int(throttle_mbps * 1e6))]
        client = bounded(lambda: KafkaAdminClient(bootstrap_servers=c.bootstrap.split(","),
                                                  client_id="bench-reassignment", request_timeout_ms=10_000,
                                                  reconnect_backoff_max_ms=1000), 30)
        zk_done: list[float] = []

        def on_topic(t: Any) -> None:
            if t is not None and not t.adding.get(0) and not t.removing.get(0) and \
                    list(t.replicas.get(0, ())) == TARGETS and not zk_done:
                zk_done.append(time.monotonic())

        c.zk.get_topic(BIG, watch=on_topic)
        targets = [c.brokers[i] for i in TARGETS]
        try:
            settle()
            prewarm(env.scratch, len(TARGETS) * nbytes + 64 * MiB)
            with load_running(env, c, a, f"move-{env.n}") as load:
                time.sleep(WARMUP_S)
                t0 = load.mark("start")
                r = cli(cmd)
                mv.cli_s = time.monotonic() - t0
                if r.returncode != 0:
                    raise RuntimeError(f"reassign-partitions --execute exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
                if throttle_mbps is not None:
                    mv.throttle_set = bool(throttle_configs(c))
                deadline = t0 + env.max_seconds
                next_api = 0.0
                while True:
                    now = time.monotonic()
                    if mv.to_copied is None and min(b.partition_bytes(BIG) for b in targets) >= nbytes:
                        mv.to_copied = now - t0
                    if now >= next_api:
                        next_api = now + 0.25
                        if _api_complete(client):
                            break
                    if now > deadline:
                        raise RuntimeError(f"the move did not complete within {env.max_seconds:.0f} s (targets hold "
                                           f"{[b.partition_bytes(BIG) for b in targets]} of {nbytes} bytes)")
                    for b in c.brokers.values():
                        if not b.running:
                            raise RuntimeError(f"{b.label} exited during the move:\n{b.log_tail(1500)}")
                    time.sleep(0.1)
                t_done = load.mark("done")
                mv.duration = t_done - t0
                time.sleep(1.0)
                load.stop()
            mv.during = load.window("start", "done")
            mv.to_zk_done = zk_done[0] - t0 if zk_done else None
        finally:
            with contextlib.suppress(Exception):
                bounded(client.close, 5)
        ver = cli(["reassign-partitions", "--verify", "--reassignment-json-file", str(plan),
                   "--bootstrap-server", c.bootstrap])
        mv.verify_rc = ver.returncode
        if ver.returncode != 0:
            problem(f"{label}: reassign-partitions --verify exited {ver.returncode} after completion: "
                    f"{(ver.stdout + ver.stderr).strip()[-600:]}")
        with contextlib.suppress(RuntimeError):  # the brokers apply config changes from ZooKeeper: may lag a bit
            wait_until(lambda: not throttle_configs(c), timeout_s=10, what="throttle configs removed")
        mv.throttles_left = throttle_configs(c)
        if mv.throttles_left:
            problem(f"{label}: throttle configs still set after --verify: {mv.throttles_left}")
        if mv.throttle_set is False:
            problem(f"{label}: no throttle config in ZooKeeper right after --execute --throttle")
        sources = [c.brokers[i] for i in SOURCES]

        def old_dirs() -> list[str]:  # big-0 itself, or a renamed big-0.*-delete waiting for deletion
            return [f"{b.label}: {d.name}" for b in sources if b.data_dir.is_dir()
                    for d in b.data_dir.iterdir() if d.name == f"{BIG}-0" or d.name.startswith(f"{BIG}-0.")]

        try:
            wait_until(lambda: not old_dirs(), timeout_s=30, what="the old replicas' files deleted")
            mv.sources_cleaned_s = time.monotonic() - t_done
        except RuntimeError:
            problem(f"{label}: brokers {SOURCES} still hold {BIG}-0's files 30 s after the move completed: "
                    f"{old_dirs()}")
        if mv.during.failed:
            problem(f"{label}: the load's producer had {mv.during.failed} failed deliveries")
    note(f"{label}: {nbytes / MiB:.0f} MiB moved in {mv.duration:.2f} s ({mv.per_replica_mbps:.0f} MB/s per new "
         f"replica, {mv.total_mbps:.0f} MB/s in all; CLI {mv.cli_s:.2f} s, copied {_s(mv.to_copied)}, ZooKeeper "
         f"complete {_s(mv.to_zk_done)}); load during it: {_window_line(mv.during)}")
    return mv


def phase_move(a: argparse.Namespace, env: Env) -> tuple[list[Move], float, float]:
    raw_total = min(a.mb * MiB, GiB)
    settle()
    prewarm(env.scratch, raw_total + 64 * MiB)
    raw_sf = phase_raw_sendfile(env.scratch, raw_total, env.max_seconds)
    settle()
    prewarm(env.scratch, raw_total + 64 * MiB)
    raw_tcp = phase_raw_tcp(env.scratch, raw_total, env.max_seconds)
    note(f"raw limits ({raw_total / MiB:.0f} MiB): sendfile -> loopback TCP {raw_sf:.0f} MB/s, loopback TCP -> "
         f"file {raw_tcp:.0f} MB/s")
    moves = []
    for throttle in (None, a.throttle):
        mv = guarded(f"move ({'unthrottled' if throttle is None else 'throttled'})",
                     lambda throttle=throttle: move_once(a, env, throttle), None)
        if mv is not None:
            moves.append(mv)
    return moves, raw_sf, raw_tcp


# -- 3. leader rebalance ------------------------------------------------------------------------------------------


@dataclass
class Rebalance:
    victim: int
    preferred: list[int]  # partitions it is the preferred replica of
    to_leads_nothing: float  # SIGTERM -> it leads no partition
    to_exit: float  # SIGTERM -> the process exited
    to_registered: float | None  # restart -> its registration is back in ZooKeeper
    to_in_isr: float | None  # restart -> in the ISR of each of its partitions
    to_first_back: float | None  # restart -> it leads one of its preferred partitions
    to_back: float | None  # restart -> it leads all of them (the figure)
    to_balanced: float | None  # restart -> every partition led by its preferred replica
    manual: str = ""  # what the manual preferred election did, when the automatic one did not come


def _leaders(c: Cluster) -> dict[int, int]:
    return {p: c.leader(SPREAD, p) for p in range(SPREAD_PARTITIONS)}


def rebalance_once(c: Cluster, replicas: dict[int, tuple[int, ...]], victim: int, interval: int,
                   max_seconds: float) -> Rebalance:
    mine = sorted(p for p, r in replicas.items() if victim in r)
    preferred = sorted(p for p, r in replicas.items() if r[0] == victim)
    b = c.brokers[victim]
    t0 = time.monotonic()
    b.signal(signal.SIGTERM)
    t_none = t_exit = None
    while time.monotonic() < t0 + 90:
        now = time.monotonic()
        if t_none is None and victim not in _leaders(c).values():
            t_none = now
        if t_exit is None and not b.running:
            t_exit = now
        if t_none is not None and t_exit is not None:
            break
        time.sleep(0.05)
    if t_exit is None:
        b.kill()
        problem(f"rebalance: broker {victim} did not exit within 90 s of SIGTERM: killed")
        t_exit = time.monotonic()
    if t_none is None:
        wait_until(lambda: victim not in _leaders(c).values(), timeout_s=max_seconds,
                   what=f"broker {victim} leading nothing after it stopped")
        problem(f"rebalance: broker {victim} still led partitions when its process exited (controlled shutdown "
                f"did not move them)")
        t_none = time.monotonic()
    ts = time.monotonic()
    b.launch()
    got: dict[str, float] = {}
    bound = ts + 3 * interval + 120
    while time.monotonic() < bound and "balanced" not in got:
        now = time.monotonic()
        leaders = _leaders(c)
        if "registered" not in got and victim in c.zk.live_brokers():
            got["registered"] = now
        if "isr" not in got and all(victim in c.isr(SPREAD, p) for p in mine):
            got["isr"] = now
        if "first" not in got and any(leaders[p] == victim for p in preferred):
            got["first"] = now
        if "back" not in got and all(leaders[p] == victim for p in preferred):
            got["back"] = now
        if "back" in got and all(leaders[p] == replicas[p][0] for p in replicas):
            got["balanced"] = now
        if not b.running:
            raise RuntimeError(f"broker {victim} exited after its restart:\n{b.log_tail(1500)}")
        time.sleep(0.05)
    manual = ""
    if "back" not in got:
        leaders = _leaders(c)
        problem(f"rebalance: broker {victim} did not lead its preferred partitions {preferred} within "
                f"{bound - ts:.0f} s of its restart (interval {interval} s); leaders {leaders}, ISRs "
                f"{ {p: c.isr(SPREAD, p) for p in mine} }")
        r = cli(["leader-election", "--election-type", "preferred", "--all-topic-partitions",
                 "--bootstrap-server", c.bootstrap])
        with contextlib.suppress(RuntimeError):
            wait_until(lambda: all(_leaders(c)[p] == victim for p in preferred), timeout_s=15,
                       what="the preferred leaders after a manual election")
        manual = (f"leader-election exited {r.returncode} ({(r.stdout + r.stderr).strip()[-300:]}); leaders then "
                  f"{_leaders(c)}")
        note(f"manual preferred election: {manual}")

    def rel(k: str) -> float | None:
        return got[k] - ts if k in got else None

    return Rebalance(victim, preferred, t_none - t0, t_exit - t0, rel("registered"), rel("isr"), rel("first"),
                     rel("back"), rel("balanced"), manual)


def phase_rebalance(a: argparse.Namespace, env: Env) -> list[Rebalance]:
    out: list[Rebalance] = []
    interval = a.rebalance_interval
    with four_brokers(env, "rebalance", [f"leader.imbalance.check.interval.seconds={interval}"],
                      log_level="INFO") as c:
        create_topic(c.bootstrap, SPREAD, partitions=SPREAD_PARTITIONS, replication_factor=3,
                     config={"min.insync.replicas": "2"})
        t = c.zk.get_topic(SPREAD)
        assert t is not None
        replicas = {p: tuple(r) for p, r in t.replicas.items()}
        note(f"{SPREAD}: replicas {replicas}")
        used: list[int] = []
        for rep in range(a.rebalance_reps):
            wait_until(lambda: all(c.leader(SPREAD, p) == r[0] for p, r in replicas.items())
                       and all(len(c.isr(SPREAD, p)) == 3 for p in replicas),
                       timeout_s=3 * interval + 120, what="every partition led by its preferred replica, full ISRs")
            ctrl = c.controller()
            candidates = [i for i in c.brokers if i != ctrl and any(r[0] == i for r in replicas.values())]
            if not candidates:
                raise RuntimeError(f"no broker other than the controller {ctrl} is a preferred replica")
            fresh = [i for i in candidates if i not in used] or candidates
            victim = fresh[0]
            used.append(victim)
            rb = rebalance_once(c, replicas, victim, interval, env.max_seconds)
            out.append(rb)
            note(f"rebalance {rep + 1}: broker {victim} (preferred for {rb.preferred}) led nothing "
                 f"{rb.to_leads_nothing:.2f} s after SIGTERM, exited after {rb.to_exit:.2f} s; after its restart: "
                 f"registered {_s(rb.to_registered)}, in the ISRs {_s(rb.to_in_isr)}, first preferred leadership "
                 f"{_s(rb.to_first_back)}, all {_s(rb.to_back)}, every partition balanced {_s(rb.to_balanced)} "
                 f"(interval {interval} s)")
    return out


# -- report -------------------------------------------------------------------------------------------------------


def _s(x: float | None) -> str:
    return "?" if x is None else f"{x:.2f} s"


def _window_line(w: Window | None) -> str:
    if w is None:
        return "-"
    x = w.lat
    return (f"{x.rate:,.0f} records/s ({w.consumed} of {w.due} due in {w.seconds:.1f} s), p50 {x.p50 / 1e3:.2f} ms "
            f"p99 {x.p99 / 1e3:.2f} ms p99.9 {x.p999 / 1e3:.2f} ms max {x.max / 1e3:.2f} ms, brokers "
            f"{x.broker_cores:.2f} cores, clients {x.client_cores:.2f}")


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "?" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def report(a: argparse.Namespace, moves: list[Move] | None, raw_sf: float, raw_tcp: float,
           rebalances: list[Rebalance] | None) -> None:
    print()
    if moves is not None:
        raw_mb = min(a.mb * MiB, GiB) / MiB
        print(f"raw limits (this run, {raw_mb:.0f} MiB, MB/s = 10^6 B/s): sendfile -> loopback TCP {raw_sf:.0f} MB/s; "
              f"loopback TCP -> file append {raw_tcp:.0f} MB/s")
        print(f"\n1. reassignment of {BIG}-0 ({a.mb} MiB of 1 KiB records) from {SOURCES} to {TARGETS}: --execute -> "
              f"complete (ListPartitionReassignments empty, metadata replicas {TARGETS})")
        hdr = (f"{'move':<22} | {'bytes':>9} | {'duration s':>10} | {'MB/s per replica':>16} {'total':>6} | "
               f"{'/ sendfile':>10} {'/ tcp->file':>11} | {'CLI s':>5} {'copied s':>8} {'ZK done s':>9} | "
               f"{'verify':>6} {'old files gone s':>16}")
        print(hdr)
        print("-" * len(hdr))
        for mv in moves:
            rate = mv.per_replica_mbps
            print(f"{mv.label:<22} | {mv.nbytes / MiB:>5.0f} MiB | {mv.duration:>10.2f} | {rate:>16.0f} "
                  f"{mv.total_mbps:>6.0f} | {rate / raw_sf:>10.2f} {rate / raw_tcp:>11.2f}"
                  f" | {mv.cli_s:>5.2f} {_f(mv.to_copied):>8} {_f(mv.to_zk_done):>9} | "
                  f"{'ok' if mv.verify_rc == 0 else str(mv.verify_rc):>6} {_f(mv.sources_cleaned_s):>16}")
            if mv.throttle_mbps is not None:
                thr = mv.throttle_mbps * 1e6
                total = len(TARGETS) * mv.nbytes
                burst = (QUOTA_WINDOWS - 1) * thr  # what the windowed rate lets through before it reads > thr
                if total <= burst:
                    expect = (f"the {total / 1e6:.0f} MB sent in all are within the ~{burst / 1e6:.0f} MB a rate "
                              f"measured over >= {QUOTA_WINDOWS - 1} s lets through: not expected to bite")
                else:
                    expect = (f"expected ~{(total - burst) / thr:.1f}-{total / thr:.1f} s (the first "
                              f"~{burst / 1e6:.0f} MB pass at once, the rest at the throttle)")
                print(f"{'':<22}   throttle {mv.throttle_mbps:g} MB/s on the leader's side for both new replicas: "
                      f"{expect}; sent {mv.total_mbps / mv.throttle_mbps:.2f}x the throttle on average")
                print(f"{'':<22}   throttle configs set by --execute: {mv.throttle_set}; left after --verify: "
                      f"{mv.throttles_left or 'none'}")
        print(f"   the fill (acks=1, RF 2): {median([m.fill_mbps for m in moves]):.0f} MB/s")
        print(f"\n2. client load on {LOAD}-0 (replicas {LOAD_REPLICAS}, min.insync.replicas 2): rdkafka_performance -l "
              f"at {a.rate:,.0f} records/s, 100 B, acks=-1, linger.ms {a.linger:g}, idempotent; records due in the "
              f"window")
        rows = [r for mv in moves for r in ((f"no reassignment, before the {mv.label} move", mv.base),
                                            (f"during the {mv.label} move", mv.during))]
        wid = max([len(name) for name, _ in rows] + [6])
        hdr = (f"{'window':<{wid}} | {'s':>5} | {'records/s':>9} {'consumed/due':>13} | {'p50 ms':>7} {'p99 ms':>7} "
               f"{'p99.9 ms':>8} {'max ms':>7} | {'cores brokers':>13} {'clients':>7}")
        print(hdr)
        print("-" * len(hdr))
        for name, w in rows:
            if w is None:
                print(f"{name:<{wid}} | no figures")
                continue
            x = w.lat
            flag = " (producer behind its schedule)" if w.behind else ""
            print(f"{name:<{wid}} | {w.seconds:>5.1f} | {x.rate:>9,.0f} {f'{w.consumed}/{w.due}':>13} | "
                  f"{x.p50 / 1e3:>7.2f} {x.p99 / 1e3:>7.2f} {x.p999 / 1e3:>8.2f} {x.max / 1e3:>7.2f} | "
                  f"{x.broker_cores:>13.2f} {x.client_cores:>7.2f}{flag}")
    if rebalances is not None:
        print(f"\n3. leader rebalance after a broker restart: {SPREAD} ({SPREAD_PARTITIONS} partitions, RF 3) on 4 "
              f"brokers, leader.imbalance.check.interval.seconds={a.rebalance_interval}, percentage 10 (default)")
        hdr = (f"{'rep':>3} | {'broker':>6} | {'preferred':<10} | {'SIGTERM->leads nothing':>22} {'->exit':>7} | "
               f"{'restart->registered':>19} {'->in ISRs':>9} {'->1st back':>10} {'->all back':>10} "
               f"{'->balanced':>10}")
        print(hdr)
        print("-" * len(hdr))
        for i, rb in enumerate(rebalances):
            print(f"{i + 1:>3} | {rb.victim:>6} | {','.join(map(str, rb.preferred)):<10} | "
                  f"{rb.to_leads_nothing:>22.2f} {rb.to_exit:>7.2f} | {_f(rb.to_registered):>19} {_f(rb.to_in_isr):>9} "
                  f"{_f(rb.to_first_back):>10} {_f(rb.to_back):>10} {_f(rb.to_balanced):>10}")
            if rb.manual:
                print(f"      manual election: {rb.manual}")
        backs = [rb.to_back for rb in rebalances if rb.to_back is not None]
        if backs:
            print(f"   restart -> leadership back: median {median(backs):.2f} s, max {max(backs):.2f} s, beside the "
                  f"check interval {a.rebalance_interval} s (expected: in the ISRs + at most one interval)")


def guarded(phase: str, fn: Callable[[], Any], instead: Any) -> Any:
    """``bench._common.guarded``, with a failed phase listed among the run's problems."""
    return _guarded(phase, fn, instead, PROBLEMS.append)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke test: --mb 128, 5 s baselines, 1 rebalance")
    ap.add_argument("--only", default=",".join(PHASES), help=f"phases (default all: {','.join(PHASES)})")
    ap.add_argument("--mb", type=int, help="MiB in the moved partition (default 1024, quick 128)")
    ap.add_argument("--throttle", type=float,
                    help="the throttled move's rate in MB/s (10^6 B/s; passed as --throttle BYTES_PER_S; default 50, "
                    "quick 10)")
    ap.add_argument("--rate", type=float, default=5000.0, help="the client load's records/s (default 5000)")
    ap.add_argument("--linger", type=float, default=1.0, help="the client load producer's linger.ms (default 1)")
    ap.add_argument("--baseline-seconds", type=float, help="the load's window without a move (default 15, quick 5)")
    ap.add_argument("--rebalance-interval", type=int, default=5,
                    help="leader.imbalance.check.interval.seconds of the rebalance cluster (default 5)")
    ap.add_argument("--rebalance-reps", type=int, help="broker restarts in the rebalance phase (default 3, quick 1)")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="time bound of any one fill, move or wait")
    ap.add_argument("--wait", type=float, help="wait up to this many s for storage benchmarks / pytest to end and "
                    "for an idle machine (default 1800, quick 0)")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help="scratch root (deleted after)")
    a = ap.parse_args()
    a.phases = set(a.only.split(","))
    unknown = a.phases - set(PHASES)
    if unknown:
        ap.error(f"unknown phases {sorted(unknown)}: choose from {','.join(PHASES)}")
    a.mb = a.mb or (128 if a.quick else 1024)
    a.throttle = a.throttle or (10.0 if a.quick else 50.0)
    a.baseline_seconds = a.baseline_seconds or (5.0 if a.quick else 15.0)
    a.rebalance_reps = a.rebalance_reps or (1 if a.quick else 3)
    if a.throttle <= 0 or a.rate <= 0 or a.mb <= 0 or a.rebalance_interval < 1:
        ap.error("--throttle, --rate, --mb must be positive, --rebalance-interval at least 1")

    from odradek.cluster.zk.server import ZooKeeperServer

    logging.getLogger("kazoo").setLevel(logging.ERROR)
    tool = build_rdkafka_performance()
    a.tmp.mkdir(parents=True, exist_ok=True)
    facts = machine_facts(a.tmp)
    facts["librdkafka"] = tool.librdkafka
    print_facts(facts)
    wait = a.wait if a.wait is not None else (0 if a.quick else 1800)
    wait_for_quiet_machine(wait)
    watch = CpuWatch()
    t_start = time.monotonic()
    moves: list[Move] | None = None
    rebalances: list[Rebalance] | None = None
    raw_sf = raw_tcp = float("nan")
    need = 6 * a.mb * MiB + 2 * GiB  # 2 source + 2 target replicas, raw file, prewarm, the load
    with scratch_dir(a.tmp, "reassignment", need) as scratch, contextlib.ExitStack() as stack:
        zk = ZooKeeperServer(scratch / "zookeeper")
        zk.start(timeout_s=60)
        stack.callback(zk.stop)
        env = Env(tool, zk.connect_string, scratch, a.max_seconds)
        if "move" in a.phases:
            print("# move", flush=True)
            moves, raw_sf, raw_tcp = guarded("move", lambda: phase_move(a, env), (None, raw_sf, raw_tcp))
        if "rebalance" in a.phases:
            print("# rebalance", flush=True)
            rebalances = guarded("rebalance", lambda: phase_rebalance(a, env), None)
    report(a, moves, raw_sf, raw_tcp, rebalances)
    print()
    if PROBLEMS:
        print("problems seen in the product or the run:")
        for p in PROBLEMS:
            print(f"  - {p}")
    else:
        print("problems seen in the product or the run: none (no ERROR/Traceback lines in the broker logs)")
    print(f"other CPU use during the run (not this process nor its children): {watch.other_share():.0%} of "
          f"{os.cpu_count()} CPUs; run took {time.monotonic() - t_start:.0f} s")


if __name__ == "__main__":
    main()
