"""The replicated cluster: 3 brokers on ZooKeeper, each figure beside this machine's raw limit and beside the
single-node broker, all measured in one run.

Run (from the repository root)::

    python -m bench.cluster                       # full (~12 min once the machine is free)
    python -m bench.cluster --quick               # smoke test (~3 min, figures unreliable)
    python -m bench.cluster --catch-up-mb 256     # a smaller follower catch-up (256,1024: both)
    python -m bench.cluster --only failover,controlled --failover-reps 3 --session-timeouts 2000
    python -m bench.cluster --profile             # py-spy of every broker under the cluster's loads

Set-up. One ZooKeeper (``odradek/cluster/zk/server.py``: Debian's ZooKeeper 3.8, tickTime 500 ms) for the
whole run; each cluster is 3 fresh ``odradek serve`` processes of this checkout (``--override broker.id=N
--override zookeeper.connect=<zk>/<fresh chroot>``, empty data directories, otherwise default config), and
one topic ``bench`` of 1 partition, replication factor 3, ``min.insync.replicas=2``. A fresh cluster per
run, as the single-node benchmark uses a fresh broker per run. After each start every broker is asked for
Metadata (alone); one that disagrees with ZooKeeper about the live brokers or the controller for 5 s is
reported and restarted. Everything listens on 127.0.0.1.

What is measured (``bench/_cluster.py`` holds the helpers):

1. **produce**: ``rdkafka_performance -P`` exactly as ``bench.broker_throughput`` runs it (10 M x 100 B or
   1 M x 1 KiB, linger.ms 5, idempotence off), acks=-1 to the cluster, against the single-node broker with
   acks=1; ratio of records/s (goal >= 0.5), beside raw loopback TCP -> file append (``bench/_raw_net.py``),
   measured at the start of every round. Each round runs every variant once, in an order that rotates.
2. **latency**: ``rdkafka_performance -P -l -r 10000 -s 100 -a -1 -X linger.ms=0`` and ``-C -l`` on the
   cluster (acks=all, RF 3), as ``bench.broker_throughput`` measures the single node; p50/p99/p99.9/max
   after a 2 s warm-up (goal p99 <= 5 ms, judged at linger.ms 0; linger.ms 1 shown too), beside the
   single-node broker's figure from the same run and the raw loopback round trip (160-byte request, 40-byte
   answer, between two processes). A cluster that falls behind gets up to 15x the run's length to deliver,
   and is not run again in later rounds. Also the produce round trip with one 100 B record at a time
   (``bench._cluster rtt``: 3,000 requests, each waiting for its acknowledgement) on the cluster with acks=-1
   and acks=1 and on the single node: 1/p50 is the most requests/s one connection can carry, since a broker
   answers a connection's requests one by one.
3. **failover** at each ``zookeeper.session.timeout.ms`` (2000, 6000): three probe producers (acks=all,
   idempotent, linger 0, 500 records/s each: confluent-kafka with its defaults, the same with
   ``topic.metadata.refresh.interval.ms=100``, and kafka-python; see ``PROBES``) write to the partition; the
   leader gets SIGKILL; the figure is kill -> each client's first acknowledged write after the victim's
   registration vanished (only a successor can acknowledge one then). Also timed, from a ZooKeeper watch in
   this process and the survivors' segment files: kill -> registration gone (session expiry), -> new leader
   written by the controller, -> the new leader's log grew (a client's first write reached it), -> the other
   follower's log grew. The killed broker is restarted and rejoins the ISR before the next repetition.
   Goal: <= session timeout + 1 s (median and max reported).
   **controlled**: the same, with SIGTERM instead: per client, the longest gap between two acknowledged
   writes from the SIGTERM until 1 s after the broker exited and the new leader was written (goal <= 1 s).
4. **catch-up**: one follower stopped (SIGTERM), ``--catch-up-mb`` MiB written with acks=1 (1 KiB records),
   the page cache synced, the follower restarted; its rate = bytes it appended / time from its first to
   its last appended byte (its segment files' sizes, polled every 10 ms), beside raw ``sendfile`` into
   loopback TCP and raw loopback TCP -> file append of the same size (at most 1 GiB). ``--catch-up-mb 256,1024``
   runs each size. Also: restart -> caught up and
   restart -> back in the ISR.
5. **single node, this code vs the previous**: ``git worktree add`` of ``--previous`` (e3dde29, the commit
   before the cluster work) in a temporary directory, its ``odradek serve`` run from there (cwd and
   PYTHONPATH); produce (acks=1, the runs of 1.), consume (``rdkafka_performance -C`` of a filled topic,
   both brokers filled and read alternately) and latency (the runs of 2.) side by side; goal: within 5 %.
   The worktree is removed at the end, whatever happens.

Also per run: the brokers' CPU (cores = CPU seconds of all threads / the tool's seconds) and the client's.
Before each timed produce or catch-up, ``os.sync()`` and ``_common.prewarm`` (this VM returns idle memory
to its host, see ``bench/_common.py``), sized for three replicas in the cluster. Every loop ends at its
count or ``--max-seconds``; every process this script starts is stopped on every exit (SIGTERM included).
A full run first waits (``--wait``) until no storage benchmark and no pytest runs, then for an idle machine.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cluster import (
    Cluster,
    Probe,
    ServeProcess,
    ZkEvents,
    commit_of,
    create_topic,
    produce_round_trip,
    wait_until,
    worktree,
)
from bench._common import (
    DEFAULT_TMP_ROOT,
    REPO,
    CpuWatch,
    GiB,
    MiB,
    guarded,
    machine_facts,
    median,
    percentile,
    prewarm,
    print_facts,
    scratch_dir,
    settle,
)
from bench._kafka import PerfTool, build_rdkafka_performance
from bench.broker_throughput import (
    OUT,
    TOPIC,
    Latency,
    PySpy,
    Run,
    consume_once,
    count_for,
    latency_once_c,
    phase_raw_sendfile,
    phase_raw_tcp,
    produce_once,
    wait_for_quiet_machine,
)

PREVIOUS = "e3dde29"  # the commit before the cluster work
GOALS = {"produce_ratio": 0.5, "p99_ms": 5.0, "failover_slack_s": 1.0, "controlled_gap_s": 1.0,
         "same_as_before": 0.05}
TOPIC_CONFIG = {"min.insync.replicas": "2"}
PROBE_RATE = 500.0  # acks=all writes/s of each failover probe client
STALE_IMAGES: list[str] = []  # brokers found with a stale metadata image after a cluster start (reported)
CLUSTERS_STARTED = [0]
PHASES = ("produce", "consume", "latency", "failover", "controlled", "catchup")


# -- the brokers under test ---------------------------------------------------------------------------------


@dataclass
class Env:
    """What every phase needs: the load generator, the ZooKeeper, where the code versions live, scratch."""

    tool: PerfTool
    zk_connect: str
    scratch: Path
    previous_root: Path | None
    max_seconds: float
    n: int = 0

    def fresh(self, what: str) -> Path:
        self.n += 1
        return self.scratch / f"{what}-{self.n}"


def single(env: Env, code: str, log_level: str = "WARNING") -> ServeProcess:
    """A fresh single-node broker of this checkout (``code`` "now") or of the previous commit ("before")."""
    root = REPO if code == "now" else env.previous_root
    assert root is not None
    return ServeProcess(f"single ({code})", root, env.fresh(f"single-{code}"), log_level=log_level)


@contextlib.contextmanager
def running_single(env: Env, code: str) -> Iterator[ServeProcess]:
    b = single(env, code)
    try:
        b.start()
        create_topic(b.bootstrap, TOPIC)
        yield b
    finally:
        code_ = b.stop()
        if code_ != 0:
            print(f"#   note: {b.label} exited with {code_}:\n{b.log_tail(1500)}", flush=True)
        shutil.rmtree(b.data_dir, ignore_errors=True)


@contextlib.contextmanager
def running_cluster(env: Env, overrides: list[str] | None = None, log_level: str = "WARNING") -> Iterator[Cluster]:
    base = env.fresh("cluster")
    c = Cluster(env.zk_connect, base, list(overrides or []), log_level=log_level)
    CLUSTERS_STARTED[0] += 1
    try:
        try:
            c.start()
        except RuntimeError as e:  # reported, then one more try on a fresh chroot
            first = str(e).splitlines()
            print(f"#   note: a cluster did not start ({first[0]}; {first[-1] if len(first) > 1 else ''}); "
                  "starting another", flush=True)
            c.stop(5)
            shutil.rmtree(base, ignore_errors=True)
            c = Cluster(env.zk_connect, base, list(overrides or []), log_level=log_level)
            c.start()
        for note in c.notes:
            print(f"#   note: {note}", flush=True)
            STALE_IMAGES.append(note)
        with c:
            create_topic(c.bootstrap, TOPIC, replication_factor=3, config=TOPIC_CONFIG)
            c.wait_full_isr(TOPIC, 60)
            yield c
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- 1. produce, 5. single node before/after ---------------------------------------------------------------


@dataclass
class ClusterRun:
    run: Run
    leader_cores: float
    follower_cores: list[float]


def produce_cluster(env: Env, size: int, count: int) -> ClusterRun:
    with running_cluster(env) as c:
        leader = c.leader(TOPIC)
        settle()
        prewarm(env.scratch, 3 * int(count * (size + 40) * 1.1) + 64 * MiB)
        before = c.cpus()
        run = produce_once(env.tool, c, size, "-1", count, env.max_seconds, env.scratch)
        after = c.cpus()
        used = {i: after[i] - before[i] for i in before}
    cores = {i: u / run.seconds for i, u in used.items()}
    return ClusterRun(run, cores[leader], [v for i, v in cores.items() if i != leader])


def produce_single(env: Env, code: str, size: int, count: int) -> Run:
    with running_single(env, code) as b:
        return produce_once(env.tool, b, size, "1", count, env.max_seconds, env.scratch)


def phase_produce(a: argparse.Namespace, env: Env) -> tuple[dict[tuple[str, int], dict[int, Any]], list[float]]:
    """Per round: raw TCP -> file, then for each size every variant once (order rotating by round). Results by
    (variant, size) and round; a run that fails is reported and left out (ratios pair runs of one round)."""
    results: dict[tuple[str, int], dict[int, Any]] = collections.defaultdict(dict)
    raws: list[float] = []
    variants = ["cluster", "now"] + (["before"] if env.previous_root is not None else [])
    for r in range(a.rounds):
        raws.append(phase_raw_tcp(env.scratch, a.raw_bytes, a.max_seconds))
        print(f"#   round {r + 1}: raw tcp->file {raws[-1]:.0f} MB/s", flush=True)
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for size in a.sizes:
            count = count_for(size, a.quick)
            for v in order:
                try:
                    if v == "cluster":
                        cr = produce_cluster(env, size, count)
                        x = cr.run
                        extra = (f", leader {cr.leader_cores:.2f} cores, followers "
                                 f"{' '.join(f'{f:.2f}' for f in cr.follower_cores)}")
                        results[(v, size)][r] = cr
                    else:
                        x = produce_single(env, v, size, count)
                        results[(v, size)][r] = x
                        extra = ""
                except Exception as e:
                    print(f"#   round {r + 1}: produce {size} B {describe(v)} FAILED: {type(e).__name__}: "
                          f"{str(e)[:2000]}", flush=True)
                    continue
                print(f"#   round {r + 1}: produce {size} B {describe(v)}: {x.rps:,.0f} rec/s {x.mbps:.0f} MB/s, "
                      f"brokers {x.broker_cores:.2f} cores, client {x.client_cores:.2f}{extra}", flush=True)
    return results, raws


def paired(xs: dict[int, Any], ys: dict[int, Any], f: Callable[[Any, Any], float]) -> float:
    """Median over the rounds that have both of ``f(x, y)``."""
    return median([f(xs[r], ys[r]) for r in sorted(set(xs) & set(ys))])


def describe(variant: str) -> str:
    return {"cluster": "cluster, RF 3", "now": "single node, this code", "before": f"single node, {PREVIOUS}"}[variant]


def phase_consume(a: argparse.Namespace, env: Env) -> tuple[dict[tuple[str, int], list[Run]], list[float]]:
    """Both code versions filled with the same records, then read alternately 2 x ``rounds`` times each."""
    results: dict[tuple[str, int], list[Run]] = collections.defaultdict(list)
    raws: list[float] = []
    for _ in range(a.rounds):
        settle()
        prewarm(env.scratch, a.raw_bytes + 64 * MiB)
        raws.append(phase_raw_sendfile(env.scratch, a.raw_bytes, a.max_seconds))
        print(f"#   raw sendfile {raws[-1]:.0f} MB/s", flush=True)
    codes = ["now", "before"] if env.previous_root is not None else ["now"]
    for size in a.sizes:
        count = count_for(size, a.quick, "consume")
        with contextlib.ExitStack() as stack:
            brokers = {code: stack.enter_context(running_single(env, code)) for code in codes}
            for b in brokers.values():
                produce_once(env.tool, b, size, "1", count, env.max_seconds, env.scratch)
            settle()
            for r in range(2 * a.rounds):  # reads are short and noisy: twice the rounds
                for code in (codes if r % 2 == 0 else codes[::-1]):
                    run = consume_once(env.tool, brokers[code], count, env.max_seconds)
                    results[(code, size)].append(run)
                    print(f"#   round {r + 1}: consume {size} B {describe(code)}: {run.rps:,.0f} rec/s "
                          f"{run.mbps:.0f} MB/s, broker {run.broker_cores:.2f} cores, client "
                          f"{run.client_cores:.2f}", flush=True)
    return results, raws


# -- 2. latency -------------------------------------------------------------------------------------------------


def phase_latency(a: argparse.Namespace, env: Env) -> tuple[dict[tuple[str, float], list[Latency]], Any]:
    """The cluster at every ``--lingers`` value, the single node (both codes) at linger.ms 0; ``latency_rounds``
    rounds, order reversed every other round; a fresh cluster or broker per run."""
    from bench._groups import rpc_sync

    rtt = rpc_sync(5000, 20.0)
    print(f"#   raw loopback round trip: p50 {percentile(rtt.lat, 50) * 1e6:.0f} us, p99 "
          f"{percentile(rtt.lat, 99) * 1e6:.0f} us", flush=True)
    # One record at a time, each waiting for its acknowledgement: what one request costs in wall time, hence
    # the most requests/s one connection can carry (a broker answers a connection's requests one by one).
    rtts: dict[str, tuple[int, float, float]] = {}
    try:
        with running_cluster(env) as c:
            for acks in ("-1", "1"):
                rtts[f"cluster acks={acks}"] = produce_round_trip(c.bootstrap, TOPIC, acks, 3000, 30)
        with running_single(env, "now") as b:
            rtts["single node acks=-1"] = produce_round_trip(b.bootstrap, TOPIC, "-1", 3000, 30)
    except Exception as e:
        print(f"#   produce round trips FAILED: {type(e).__name__}: {str(e)[:1500]}", flush=True)
    for name, (n, p50, p99) in rtts.items():
        print(f"#   one record at a time, {name}: produce round trip p50 {p50:.0f} us, p99 {p99:.0f} us ({n} requests;"
              f" at most ~{1e6 / p50:,.0f} requests/s on one connection)", flush=True)
    a.rtts = rtts
    out: dict[tuple[str, float], list[Latency]] = collections.defaultdict(list)
    variants = [("cluster", linger) for linger in a.lingers] + [("now", 0.0)]
    if env.previous_root is not None:
        variants.append(("before", 0.0))
    collapsed: set[tuple[str, float]] = set()  # fell behind the rate: another round would only repeat that
    for r in range(a.latency_rounds):
        for v, linger in (variants if r % 2 == 0 else variants[::-1]):
            if (v, linger) in collapsed:
                continue
            ctx = running_cluster(env) if v == "cluster" else running_single(env, v)
            watch = CpuWatch()
            # A cluster that cannot keep up queues records in the producer, which then needs far longer than the
            # run to deliver them all: it gets more time (still bounded) to drain.
            bound = a.latency_seconds + 60 if v != "cluster" else a.latency_seconds * 15 + 60
            try:
                with ctx as b:
                    settle()
                    lat = latency_once_c(env.tool, b, a.rate, a.latency_seconds, 2.0, bound, linger, env.scratch)
            except Exception as e:
                print(f"#   latency {describe(v)}, linger.ms={linger:g} FAILED: {type(e).__name__}: {str(e)[:2000]}",
                      flush=True)
                continue
            lat.other_cpu = watch.other_share()  # after the brokers are reaped, so their CPU counts as ours
            out[(v, linger)].append(lat)
            if lat.rate < 0.9 * a.rate:
                collapsed.add((v, linger))
            print(f"#   latency {describe(v)}, linger.ms={linger:g}: p50 {lat.p50 / 1e3:.2f} ms p99 "
                  f"{lat.p99 / 1e3:.2f} ms p99.9 {lat.p999 / 1e3:.2f} ms max {lat.max / 1e3:.2f} ms ({lat.n} records "
                  f"at {lat.rate:,.0f}/s), brokers {lat.broker_cores:.2f} cores, clients {lat.client_cores:.2f}, "
                  f"other CPU {lat.other_cpu:.0%}", flush=True)
    return out, rtt


# -- 3. failover ------------------------------------------------------------------------------------------------


@dataclass
class Failover:
    victim: int
    was_controller: bool
    to_first_ack: dict[str, float]  # per probe client: kill -> its first acknowledged write after the kill (s)
    to_deregistered: float | None  # kill -> the victim's registration gone from ZooKeeper (its session expired)
    to_new_leader: float | None  # kill -> the controller wrote the new leader
    new_leader: int
    failed_records: int
    to_leader_append: float | None  # the new leader's log grew (a client's first write reached it)
    to_follower_append: float | None  # the other survivor's log grew (it fetched that write from the new leader)


@dataclass
class Controlled:
    victim: int
    was_controller: bool
    longest_gap: dict[str, float]  # per probe client
    gap_at: dict[str, float]  # the gap's start, seconds after the SIGTERM
    to_exit: float
    to_new_leader: float | None
    new_leader: int
    failed_records: int
    exit_code: int | None  # None: did not exit within 60 s and was killed


@dataclass
class FailoverResult:
    session_ms: int
    kills: list[Failover] = field(default_factory=list)
    terms: list[Controlled] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# The probe clients of the failover phase, each acks=all and idempotent at PROBE_RATE writes/s, on one clock:
# - "librdkafka": confluent-kafka 2.16 with its defaults. While its partition has no reachable leader it asks
#   for metadata once a second (its 1 s timer), whatever retry.backoff.ms says;
# - "librdkafka-100ms": the same with topic.metadata.refresh.interval.ms=100: it re-reads metadata every
#   100 ms anyway, so its figure is the brokers' part plus at most ~0.1-0.2 s of client;
# - "kafka-python": kafka-python 3.0 with its defaults, a second client implementation.
PROBES: dict[str, tuple[str, list[str]]] = {
    "librdkafka": ("confluent-kafka", []),
    "librdkafka-100ms": ("confluent-kafka", ["topic.metadata.refresh.interval.ms=100"]),
    "kafka-python": ("kafka-python", []),
}


def _steady(probes: dict[str, Probe], timeout_s: float) -> None:
    """Acknowledged writes are flowing from every probe: two each within the last 0.5 s."""
    def ok() -> bool:
        now = time.monotonic()
        return all(sum(1 for x in p.acks()[-50:] if x.offset >= 0 and x.t > now - 0.5) >= 2 for p in probes.values())
    wait_until(ok, timeout_s=timeout_s, what="acknowledged writes from the probe producers", poll_s=0.05)


def _failed_between(probes: dict[str, Probe], t0: float, t1: float) -> int:
    return sum(1 for p in probes.values() for x in p.acks() if x.offset < 0 and t0 <= x.t <= t1)


def kill_once(c: Cluster, probes: dict[str, Probe], events: ZkEvents, session_s: float) -> Failover:
    """SIGKILL the partition's leader; time each probe's first acknowledged write after it, and on the way the
    first growth of each survivor's log after the election."""
    victim = c.leader(TOPIC)
    was_controller = c.controller() == victim
    survivors = [i for i in c.brokers if i != victim]
    size0 = {i: c.brokers[i].partition_bytes(TOPIC) for i in survivors}
    grew: dict[int, float] = {}
    first: dict[str, float] = {}
    t0 = time.monotonic()
    c.brokers[victim].kill()
    deadline = t0 + session_s + 60
    while len(first) < len(probes):
        now = time.monotonic()
        t_lead = events.first_after(t0, "state", lambda s: s is not None and s[0] not in (victim, -1))
        for i in survivors:  # growth after the election (before it, a follower may still append the victim's tail)
            if t_lead is not None and i not in grew and c.brokers[i].partition_bytes(TOPIC) > size0[i]:
                grew[i] = now - t0
        # Only writes acknowledged after the victim's registration vanished count: a successor is elected only
        # then, and the victim's own last answers (sent before the kill, read by a client just after) come
        # earlier.
        t_gone = events.first_after(t0, "brokers", lambda ids: victim not in ids)
        if t_gone is not None:
            for name, p in probes.items():
                ack = p.ok_after(t_gone) if name not in first else None
                if ack is not None:
                    first[name] = ack.t - t0
        if now > deadline:
            raise RuntimeError(f"not every probe had a write acknowledged within {deadline - t0:.0f} s of kill -9 "
                               f"of broker {victim} ({first})")
        time.sleep(0.005)
    t_gone = events.first_after(t0, "brokers", lambda ids: victim not in ids)
    t_lead = events.first_after(t0, "state", lambda s: s is not None and s[0] not in (victim, -1))
    new = c.leader(TOPIC)
    other = next((i for i in survivors if i != new), -1)
    return Failover(victim, was_controller, first, _rel(t_gone, t0), _rel(t_lead, t0), new,
                    _failed_between(probes, t0, t0 + max(first.values())), grew.get(new), grew.get(other))


def term_once(c: Cluster, probes: dict[str, Probe], events: ZkEvents, session_s: float) -> Controlled:
    """SIGTERM the partition's leader; per probe, the longest gap between acknowledged writes from then until
    1 s after the broker exited and a new leader was written."""
    victim = c.leader(TOPIC)
    was_controller = c.controller() == victim
    b = c.brokers[victim]
    t0 = time.monotonic()
    b.signal(signal.SIGTERM)
    code = b.wait_exit(60)
    if code is None:
        b.kill()
    t_exit = time.monotonic()
    t_lead = wait_until(lambda: events.first_after(t0, "state", lambda s: s is not None and s[0] not in (victim, -1)),
                        timeout_s=session_s + 60, what=f"a new leader after SIGTERM of broker {victim}")
    end = max(t_exit, t_lead) + 1.0
    gaps: dict[str, float] = {}
    at: dict[str, float] = {}
    for name, p in probes.items():
        p.wait_ok_after(end, 60, f"acknowledged writes of the {name} probe after the controlled shutdown")
        oks = [x.t for x in p.acks() if x.offset >= 0 and t0 - 0.5 <= x.t <= end]
        gap, start = max(((y - x, x) for x, y in itertools.pairwise(oks)), default=(float("nan"), t0))
        gaps[name], at[name] = gap, start - t0
    return Controlled(victim, was_controller, gaps, at, t_exit - t0, t_lead - t0, c.leader(TOPIC),
                      _failed_between(probes, t0, end), code)


def failover_run(a: argparse.Namespace, env: Env, session_ms: int, phases: set[str]) -> FailoverResult:
    """One cluster at this session timeout; ``failover_reps`` kills, then as many SIGTERMs, of the leader, with
    both probe clients writing throughout."""
    res = FailoverResult(session_ms)
    reps_kill = a.failover_reps if "failover" in phases else 0
    reps_term = a.failover_reps if "controlled" in phases else 0
    session_s = session_ms / 1000
    bound = (reps_kill + reps_term) * (session_s + 90) + 60
    with running_cluster(env, [f"zookeeper.session.timeout.ms={session_ms}"], log_level="INFO") as c:
        events = ZkEvents(c, TOPIC)
        probes = {name: Probe(c.bootstrap, TOPIC, env.scratch / f"probe-{session_ms}-{name}.txt", rate=PROBE_RATE,
                              max_seconds=bound, extra=["--client", client, *(f"--conf={x}" for x in conf)])
                  for name, (client, conf) in PROBES.items()}
        try:
            for i in range(reps_kill + reps_term):
                c.wait_full_isr(TOPIC, 90)
                _steady(probes, 30)
                if i < reps_kill:
                    f = kill_once(c, probes, events, session_s)
                    res.kills.append(f)
                    victim = f.victim
                    print(f"#   session {session_ms} ms, kill -9 of leader {f.victim}"
                          f"{' (the controller)' if f.was_controller else ''}: first acknowledged write after "
                          f"{_per_probe(f.to_first_ack)} (registration gone {_s(f.to_deregistered)}, new leader "
                          f"{f.new_leader} written {_s(f.to_new_leader)}, its log grew {_s(f.to_leader_append)}, "
                          f"the follower's {_s(f.to_follower_append)}), {f.failed_records} failed records",
                          flush=True)
                else:
                    t = term_once(c, probes, events, session_s)
                    res.terms.append(t)
                    victim = t.victim
                    print(f"#   session {session_ms} ms, SIGTERM of leader {t.victim}"
                          f"{' (the controller)' if t.was_controller else ''}: longest gap between acknowledged "
                          f"writes {_per_probe(t.longest_gap)} (from {_per_probe(t.gap_at, '+.3f')}), exited "
                          f"after {t.to_exit:.3f} s (code {t.exit_code}), new leader {t.new_leader} written "
                          f"{_s(t.to_new_leader)}, {t.failed_records} failed records", flush=True)
                c.brokers[victim].start()
        except Exception as e:  # keep what was measured; say what went wrong
            res.errors.append(f"{type(e).__name__}: {e}")
            print(f"#   session {session_ms} ms: stopped early: {e}", flush=True)
            for b in c.brokers.values():
                tail = b.log_tail(1500)
                if tail.strip():
                    print(f"#   --- last lines of {b.label}'s log:\n{tail}", flush=True)
        finally:
            events.close()
            for name, p in probes.items():
                err = p.stop()
                bad = [line for line in err.splitlines() if "Traceback" in line or "Error" in line]
                if bad:
                    print(f"#   {name} probe stderr: {err.strip()[-1000:]}", flush=True)
    return res


def _per_probe(xs: dict[str, float], fmt: str = ".3f") -> str:
    return ", ".join(f"{format(v, fmt)} s ({k})" for k, v in xs.items())


def _rel(t: float | None, t0: float) -> float | None:
    return None if t is None else t - t0


def _s(x: float | None) -> str:
    return "?" if x is None else f"{x:.3f} s"


# -- 4. follower catch-up ---------------------------------------------------------------------------------------


@dataclass
class CatchUp:
    nbytes: int
    rate_mbps: float  # first to last appended byte
    restart_to_first_byte: float
    restart_to_caught_up: float
    restart_to_isr: float | None
    leader_cores: float
    follower_cores: float
    raw_sendfile: float
    raw_tcp: float


def catch_up_once(a: argparse.Namespace, env: Env, mb: int) -> CatchUp:
    total = mb * MiB
    raw_total = min(total, GiB) if not a.quick else min(total, 256 * MiB)
    raw_sf = phase_raw_sendfile(env.scratch, raw_total, a.max_seconds)
    settle()
    prewarm(env.scratch, raw_total + 64 * MiB)
    raw_tcp = phase_raw_tcp(env.scratch, raw_total, a.max_seconds)
    with running_cluster(env, log_level="INFO") as c:
        leader_id = c.leader(TOPIC)
        ctrl = c.controller()
        followers = [i for i in c.brokers if i != leader_id]
        fid = next((i for i in followers if i != ctrl), followers[0])
        other = next(i for i in followers if i != fid)
        f = c.brokers[fid]
        if f.stop() != 0:
            print(f"#   note: follower {fid} did not stop cleanly", flush=True)
        count = total // 1024
        settle()
        prewarm(env.scratch, 2 * int(count * 1100) + 64 * MiB)
        produce_once(env.tool, c, 1024, "1", count, env.max_seconds, env.scratch)
        target = c.brokers[leader_id].partition_bytes(TOPIC)
        wait_until(lambda: c.brokers[other].partition_bytes(TOPIC) >= target, timeout_s=a.max_seconds,
                   what=f"the other follower {other} caught up")
        start_bytes = f.partition_bytes(TOPIC)
        settle()
        prewarm(env.scratch, target + 64 * MiB)
        lcpu0 = c.brokers[leader_id].cpu()
        t0 = time.monotonic()
        f.launch()
        t_first = t_done = None
        deadline = t0 + a.max_seconds
        while time.monotonic() < deadline:
            n = f.partition_bytes(TOPIC)
            now = time.monotonic()
            if t_first is None and n > start_bytes:
                t_first = now
            if n >= target:
                t_done = now
                break
            if not f.running:
                raise RuntimeError(f"follower {fid} exited while catching up:\n{f.log_tail()}")
            time.sleep(0.01)
        if t_first is None or t_done is None:
            raise RuntimeError(f"follower {fid} did not catch up within {a.max_seconds:.0f} s "
                               f"({f.partition_bytes(TOPIC)} of {target} bytes)")
        fcpu, lcpu = f.cpu(), c.brokers[leader_id].cpu() - lcpu0
        try:
            c.wait_full_isr(TOPIC, 60)
            t_isr: float | None = time.monotonic() - t0
        except RuntimeError:
            t_isr = None
        span = max(t_done - t_first, 1e-3)
        return CatchUp(target - start_bytes, (target - start_bytes) / span / 1e6, t_first - t0, t_done - t0, t_isr,
                       lcpu / (t_done - t0), fcpu / (t_done - t0), raw_sf, raw_tcp)


def phase_catch_up(a: argparse.Namespace, env: Env) -> list[CatchUp]:
    out = []
    for r, mb in ((r, mb) for mb in a.catch_up_mb for r in range(a.catch_up_rounds)):
        cu = catch_up_once(a, env, mb)
        out.append(cu)
        print(f"#   round {r + 1}: follower {cu.nbytes / MiB:.0f} MiB behind caught up at {cu.rate_mbps:.0f} MB/s "
              f"(first byte {cu.restart_to_first_byte:.2f} s after restart, caught up after "
              f"{cu.restart_to_caught_up:.2f} s, in the ISR after {_s(cu.restart_to_isr)}); leader "
              f"{cu.leader_cores:.2f} cores, follower {cu.follower_cores:.2f}; raw sendfile {cu.raw_sendfile:.0f} "
              f"MB/s, raw tcp->file {cu.raw_tcp:.0f} MB/s", flush=True)
    return out


# -- profile ----------------------------------------------------------------------------------------------------


def run_profiles(a: argparse.Namespace, env: Env) -> None:
    """py-spy on each broker of a fresh cluster under: produce 1 KiB acks=-1, the latency load, catch-up."""
    if not shutil.which("py-spy"):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True, timeout=600)
    OUT.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")

    def profiled(what: str, c: Cluster, load: Callable[[], float]) -> None:
        leader = c.leader(TOPIC)
        spies = {i: PySpy(b.pid, OUT / f"pyspy-cluster-{stamp}-{what}-b{i}.txt", a.max_seconds * 3 + 60)
                 for i, b in c.brokers.items() if b.running}
        cpu0 = {i: c.brokers[i].cpu_split() for i in spies}
        seconds = load()
        cpu1 = {i: c.brokers[i].cpu_split() for i in spies if c.brokers[i].running}
        for i, spy in spies.items():
            role = "leader" if i == leader else "follower"
            used = (f"user {cpu1[i][0] - cpu0[i][0]:.2f} s, system {cpu1[i][1] - cpu0[i][1]:.2f} s"
                    if i in cpu1 else "?")
            print(f"\n## {what}: broker {i} ({role}), CPU {used} over {seconds:.2f} s\n"
                  f"  collapsed stacks: {spy.out.relative_to(REPO)}\n{spy.stop(seconds)}", flush=True)

    if "produce" in a.phases:
        for size in a.sizes:
            with running_cluster(env) as c:
                def load(size: int = size, c: Cluster = c) -> float:
                    runs = [produce_once(env.tool, c, size, "-1", count_for(size, a.quick), env.max_seconds,
                                         env.scratch) for _ in range(2)]
                    print(f"# produce {size} B acks=-1 under py-spy: {median([r.mbps for r in runs]):.0f} MB/s")
                    return sum(r.seconds for r in runs)
                profiled(f"produce-{size}", c, load)
    if "latency" in a.phases:
        for linger in a.lingers:
            with running_cluster(env) as c:
                def lat_load(c: Cluster = c, linger: float = linger) -> float:
                    t = time.perf_counter()
                    lat = latency_once_c(env.tool, c, a.rate, a.latency_seconds, 2.0, a.latency_seconds * 15 + 60,
                                         linger, env.scratch)
                    print(f"# latency linger.ms={linger:g} under py-spy: {lat.rate:,.0f} records/s, p50 "
                          f"{lat.p50 / 1e3:.2f} ms p99 {lat.p99 / 1e3:.2f} ms")
                    return time.perf_counter() - t
                profiled(f"latency-linger{linger:g}", c, lat_load)
    if "catchup" in a.phases:
        with running_cluster(env) as c:
            leader = c.leader(TOPIC)
            fid = next(i for i in c.brokers if i not in (leader, c.controller()) or len(c.brokers) < 3)
            f = c.brokers[fid]
            f.stop()
            produce_once(env.tool, c, 1024, "1", max(a.catch_up_mb) * MiB // 1024, env.max_seconds, env.scratch)
            target = c.brokers[leader].partition_bytes(TOPIC)
            settle()
            prewarm(env.scratch, target + 64 * MiB)
            f.launch()
            spy = PySpy(f.pid, OUT / f"pyspy-cluster-{stamp}-catchup-b{fid}.txt", a.max_seconds + 60)
            t0 = time.perf_counter()
            wait_until(lambda: f.partition_bytes(TOPIC) >= target, timeout_s=a.max_seconds, what="the catch-up",
                       poll_s=0.01)
            seconds = time.perf_counter() - t0
            u, sy = f.cpu_split()
            print(f"\n## catch-up of {target / MiB:.0f} MiB: follower {fid} (py-spy attached ~1 s after its start, "
                  f"so start-up is in the samples), CPU since start user {u:.2f} s, system {sy:.2f} s; "
                  f"{seconds:.2f} s from attaching to caught up\n"
                  f"  collapsed stacks: {spy.out.relative_to(REPO)}\n{spy.stop(seconds)}", flush=True)


# -- report -----------------------------------------------------------------------------------------------------


def _ratio_ok(x: float, goal: float, higher: bool = True) -> str:
    ok = x >= goal if higher else x <= goal
    return f"{x:.2f} {'met' if ok else 'NOT met'}"


def report(a: argparse.Namespace, prod: Any, raw_tcp: list[float], cons: Any, raw_sf: list[float], lat: Any,
           rtt: Any, failovers: list[FailoverResult], catch: list[CatchUp]) -> None:
    have_prev = a.previous_root is not None
    print()
    if raw_tcp or raw_sf:
        parts = ([f"loopback TCP -> file append {median(raw_tcp):.0f} MB/s"] if raw_tcp else []) + \
            ([f"sendfile -> loopback TCP {median(raw_sf):.0f} MB/s"] if raw_sf else [])
        print(f"raw limits (median, MB/s = 10^6 B/s): {'; '.join(parts)}")
    if prod is not None:
        print("\n1. produce (median of rounds; cores: all brokers / client)")
        hdr = (f"{'size':>6} | {'cluster RF3 acks=-1':>28} | {'single acks=1':>28} | {'cluster/single (>=0.5)':>22} | "
               f"{'cluster/raw':>11}")
        print(hdr)
        print("-" * len(hdr))
        for size in a.sizes:
            crs = prod.get(("cluster", size), {})
            sn = prod.get(("now", size), {})
            if not crs or not sn:
                print(f"{size:>5}B | no complete runs")
                continue
            cl = {r: x.run for r, x in crs.items()}
            ratio = paired(cl, sn, lambda x, y: x.rps / y.rps)
            print(f"{size:>5}B | {_rate(list(cl.values())):>28} | {_rate(list(sn.values())):>28} | "
                  f"{_ratio_ok(ratio, GOALS['produce_ratio']):>22} | "
                  f"{median([x.mbps for x in cl.values()]) / median(raw_tcp):>11.2f}")
            print(f"{'':>6}   cluster: leader {median([x.leader_cores for x in crs.values()]):.2f} cores, followers "
                  f"{median([statistics.fmean(x.follower_cores) for x in crs.values()]):.2f} each; rounds: "
                  + ", ".join(f"{cl[r].rps / sn[r].rps:.2f}" for r in sorted(set(cl) & set(sn))))
    if lat is not None:
        print("\n2. end-to-end latency at "
              f"{a.rate:,.0f} records/s, 100 B, acks=-1 (median over rounds of each percentile; max of the maxima)")
        if rtt is not None:
            print(f"   raw loopback round trip: p50 {percentile(rtt.lat, 50) * 1e3:.3f} ms, "
                  f"p99 {percentile(rtt.lat, 99) * 1e3:.3f} ms")
        for name, (_n, p50, p99) in getattr(a, "rtts", {}).items():
            print(f"   one 100 B record at a time, {name}: produce round trip p50 {p50 / 1e3:.3f} ms, p99 "
                  f"{p99 / 1e3:.3f} ms: one connection carries at most ~{1e6 / p50:,.0f} requests/s")
        hdr = (f"{'broker':<34} | {'rate':>7} | {'p50 ms':>7} {'p99 ms':>7} {'p99.9 ms':>8} {'max ms':>7} | "
               f"{'cores brokers':>13} {'clients':>7} | {'p99 <= 5 ms':>11}")
        print(hdr)
        print("-" * len(hdr))
        for (v, linger), xs in sorted(lat.items(), key=lambda kv: (("cluster", "now", "before").index(kv[0][0]),
                                                                    kv[0][1])):
            p99 = median([x.p99 for x in xs]) / 1e3
            ok = "met" if p99 <= GOALS["p99_ms"] else "NOT met"
            ok = ok if v == "cluster" and linger == 0 else (f"({ok})" if v == "cluster" else "")
            p50 = median([x.p50 for x in xs]) / 1e3
            print(f"{describe(v) + f', linger {linger:g}':<34} | {median([x.rate for x in xs]):>7,.0f} | {p50:>7.2f} "
                  f"{p99:>7.2f} {median([x.p999 for x in xs]) / 1e3:>8.2f} {max(x.max for x in xs) / 1e3:>7.2f} | "
                  f"{median([x.broker_cores for x in xs]):>13.2f} {median([x.client_cores for x in xs]):>7.2f} | "
                  f"{ok:>11}")
    for fr in failovers:
        s = fr.session_ms / 1000
        goal = s + GOALS["failover_slack_s"]
        print(f"\n3. failover, zookeeper.session.timeout.ms={fr.session_ms} (ZooKeeper tickTime 500 ms); probe clients "
              f"at {PROBE_RATE:,.0f} acks=all writes/s each")
        if fr.kills:
            print(f"   kill -9 of the leader, {len(fr.kills)} times: kill -> first acknowledged write")
            for name in PROBES:
                firsts = [k.to_first_ack[name] for k in fr.kills]
                print(f"     {name:<17} median {median(firsts):.3f} s, max {max(firsts):.3f} s (goal <= "
                      f"{goal:.1f} s: {'met' if max(firsts) <= goal else 'NOT met'}); each: "
                      + ", ".join(f"{x:.2f}" for x in firsts))
            for label, xs in (("registration gone (session expired)", [k.to_deregistered for k in fr.kills]),
                              ("new leader written by the controller", [k.to_new_leader for k in fr.kills]),
                              ("new leader's log grew (a client's write)", [k.to_leader_append for k in fr.kills]),
                              ("other follower's log grew (fetched it)", [k.to_follower_append for k in fr.kills])):
                got = [x for x in xs if x is not None]
                top = max(got, default=float("nan"))
                print(f"     kill -> {label:<42} median {median(got):.3f} s, max {top:.3f} s")
            print(f"     the killed leader was also the controller in {sum(k.was_controller for k in fr.kills)} of "
                  f"{len(fr.kills)}; failed deliveries: {sum(k.failed_records for k in fr.kills)}")
        if fr.terms:
            print(f"   SIGTERM of the leader (controlled shutdown), {len(fr.terms)} times: longest gap between "
                  f"acknowledged writes")
            for name in PROBES:
                gaps = [t.longest_gap[name] for t in fr.terms]
                print(f"     {name:<17} median {median(gaps):.3f} s, max {max(gaps):.3f} s (goal <= 1 s: "
                      f"{'met' if max(gaps) <= GOALS['controlled_gap_s'] else 'NOT met'}); each: "
                      + ", ".join(f"{x:.2f}" for x in gaps))
            print(f"     SIGTERM -> new leader written: median "
                  f"{median([t.to_new_leader for t in fr.terms if t.to_new_leader is not None]):.3f} s; -> broker "
                  f"exited: median {median([t.to_exit for t in fr.terms]):.3f} s; exit codes "
                  f"{sorted({t.exit_code for t in fr.terms}, key=str)}; failed deliveries: "
                  f"{sum(t.failed_records for t in fr.terms)}")
        for e in fr.errors:
            print(f"   problem: {e}")
    for mb in sorted({round(c.nbytes / MiB) for c in catch}):
        cs = [c for c in catch if round(c.nbytes / MiB) == mb]
        rate = median([c.rate_mbps for c in cs])
        sf = median([c.raw_sendfile for c in cs])
        print(f"\n4. follower catch-up ({mb} MiB behind): {rate:.0f} MB/s (rounds: "
              f"{', '.join(f'{c.rate_mbps:.0f}' for c in cs)}), beside raw sendfile {sf:.0f} MB/s "
              f"({median([c.rate_mbps / c.raw_sendfile for c in cs]):.2f} of it) and raw tcp->file "
              f"{median([c.raw_tcp for c in cs]):.0f} MB/s")
        print(f"   restart -> first byte {median([c.restart_to_first_byte for c in cs]):.2f} s, -> caught up "
              f"{median([c.restart_to_caught_up for c in cs]):.2f} s, -> in the ISR "
              f"{median([c.restart_to_isr for c in cs if c.restart_to_isr is not None]):.2f} s; leader "
              f"{median([c.leader_cores for c in cs]):.2f} cores, follower "
              f"{median([c.follower_cores for c in cs]):.2f}")
    if have_prev and (prod is not None or cons is not None or lat is not None):
        print(f"\n5. single node, this code / {PREVIOUS} (goal: within 5 %, i.e. rates >= 0.95, latency <= 1.05)")
        # (figure, this code's median, the previous code's median, paired ratios, higher is better)
        rows: list[tuple[str, float, float, list[float], bool]] = []

        def add(name: str, now: dict[int, Any], before: dict[int, Any], f: Callable[[Any], float],
                higher: bool) -> None:
            both = sorted(set(now) & set(before))
            if both:
                rows.append((name, median([f(x) for x in now.values()]), median([f(x) for x in before.values()]),
                             [f(now[r]) / f(before[r]) for r in both], higher))

        def cpu_per_mb(x: Run) -> float:  # broker CPU ms per MB of payload: steadier than a client-bound rate
            return x.broker_cores / x.mbps * 1e3

        for label, results in (("produce", prod), ("consume", cons)):
            if results is None:
                continue
            for size in a.sizes:
                now, before = results.get(("now", size), {}), results.get(("before", size), {})
                if not isinstance(now, dict):  # consume keeps lists, in alternating pairs
                    now, before = dict(enumerate(now)), dict(enumerate(before))
                add(f"{label} {size} B rec/s", now, before, lambda x: x.rps, True)
                add("  broker CPU ms per MB", now, before, cpu_per_mb, False)
        if lat is not None and lat.get(("before", 0.0)):
            now, before = dict(enumerate(lat[("now", 0.0)])), dict(enumerate(lat[("before", 0.0)]))
            add("latency p50 ms", now, before, lambda x: x.p50 / 1e3, False)
            add("latency p99 ms", now, before, lambda x: x.p99 / 1e3, False)
            add("  broker CPU ms per 1000 rec", now, before, lambda x: x.broker_cores / x.rate * 1e3, False)
        hdr = (f"{'figure (median)':<28} | {'this code':>10} | {PREVIOUS:>10} | {'ratio (median of pairs)':>23} | "
               f"paired ratios")
        print(hdr)
        print("-" * len(hdr))
        for name, x, y, ratios, higher in rows:
            goal = 1 - GOALS["same_as_before"] if higher else 1 + GOALS["same_as_before"]
            fmt = ",.0f" if x >= 100 else ".3f"
            print(f"{name:<28} | {format(x, fmt):>10} | {format(y, fmt):>10} | "
                  f"{_ratio_ok(median(ratios), goal, higher):>23} | {' '.join(f'{r:.2f}' for r in ratios)}")


def _rate(runs: list[Run]) -> str:
    return (f"{median([x.rps for x in runs]):,.0f}/s {median([x.mbps for x in runs]):.0f} MB/s "
            f"{median([x.broker_cores for x in runs]):.2f}/{median([x.client_cores for x in runs]):.2f}c")


# -- main -------------------------------------------------------------------------------------------------------


def main() -> None:
    global PREVIOUS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small runs, 1 round, 2 failovers, 256 MiB catch-up")
    ap.add_argument("--only", default=",".join(PHASES), help=f"phases (default all: {','.join(PHASES)})")
    ap.add_argument("--sizes", help="record sizes of produce and consume (default 100,1024)")
    ap.add_argument("--rounds", type=int, help="rounds of produce and consume (default 3, quick 1)")
    ap.add_argument("--latency-rounds", type=int, help="latency runs of each broker (default 2, quick 1)")
    ap.add_argument("--rate", type=float, default=10_000.0, help="latency: records/s")
    ap.add_argument("--lingers", default="0,1", help="latency: the cluster's producer linger.ms values (default 0,1)")
    ap.add_argument("--latency-seconds", type=float, help="latency run length (default 20, quick 5)")
    ap.add_argument("--session-timeouts", default="2000,6000", help="failover: zookeeper.session.timeout.ms values")
    ap.add_argument("--failover-reps", type=int, help="kills and SIGTERMs per session timeout (default 5, quick 2)")
    ap.add_argument("--catch-up-mb", help="MiB the follower is behind; a comma list runs each (default 1024, "
                    "quick 256)")
    ap.add_argument("--catch-up-rounds", type=int, help="catch-up repetitions (default 2, quick 1)")
    ap.add_argument("--previous", default=PREVIOUS, help="commit whose single-node broker is compared (5.)")
    ap.add_argument("--no-previous", action="store_true", help="skip the previous code's broker")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="time bound of any one transfer or wait")
    ap.add_argument("--wait", type=float, help="wait up to this many s for storage benchmarks / pytest to end and "
                    "for an idle machine (default 1800, quick 0)")
    ap.add_argument("--profile", action="store_true", help="only py-spy profiles of the cluster's brokers")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help="scratch root (deleted after)")
    a = ap.parse_args()
    PREVIOUS = a.previous
    a.phases = set(a.only.split(","))
    unknown = a.phases - set(PHASES)
    if unknown:
        ap.error(f"unknown phases {sorted(unknown)}: choose from {','.join(PHASES)}")
    a.sizes = tuple(int(s) for s in a.sizes.split(",")) if a.sizes else (100, 1024)
    a.rounds = a.rounds or (1 if a.quick else 3)
    a.latency_rounds = a.latency_rounds or (1 if a.quick else 2)
    a.lingers = tuple(float(x) for x in a.lingers.split(","))
    a.latency_seconds = a.latency_seconds or (5.0 if a.quick else 20.0)
    a.failover_reps = a.failover_reps or (2 if a.quick else 5)
    a.catch_up_mb = [int(x) for x in a.catch_up_mb.split(",")] if a.catch_up_mb else [256 if a.quick else 1024]
    a.catch_up_rounds = a.catch_up_rounds or (1 if a.quick else 2)
    a.raw_bytes = (256 if a.quick else 1024) * MiB

    from odradek.cluster.zk.server import ZooKeeperServer

    logging.getLogger("kazoo").setLevel(logging.ERROR)  # this process's own ZooKeeper clients: no chatter
    tool = build_rdkafka_performance()
    a.tmp.mkdir(parents=True, exist_ok=True)
    facts = machine_facts(a.tmp)
    facts["librdkafka"] = tool.librdkafka
    facts["previous"] = "-" if a.no_previous else f"{PREVIOUS} ({commit_of(PREVIOUS)}), single node only"
    print_facts(facts)
    wait = a.wait if a.wait is not None else (0 if a.quick else 1800)
    wait_for_quiet_machine(wait)
    watch = CpuWatch()
    t_start = time.monotonic()
    need = 3 * max(a.catch_up_mb) * MiB + 8 * GiB
    prod = cons = lat = rtt = None
    raw_tcp: list[float] = []
    raw_sf: list[float] = []
    failovers: list[FailoverResult] = []
    catch: list[CatchUp] = []
    with scratch_dir(a.tmp, "cluster", need) as scratch, contextlib.ExitStack() as stack:
        zk = ZooKeeperServer(scratch / "zookeeper")
        zk.start(timeout_s=60)
        stack.callback(zk.stop)
        want_prev = not a.no_previous and not a.profile and bool(a.phases & {"produce", "consume", "latency"})
        a.previous_root = stack.enter_context(worktree(PREVIOUS)) if want_prev else None
        env = Env(tool, zk.connect_string, scratch, a.previous_root, a.max_seconds)
        if a.profile:
            run_profiles(a, env)
            return
        if "produce" in a.phases:
            print("# produce", flush=True)
            prod, raw_tcp = guarded("produce", lambda: phase_produce(a, env), (None, []))
        if "consume" in a.phases:
            print("# consume (single node)", flush=True)
            cons, raw_sf = guarded("consume", lambda: phase_consume(a, env), (None, []))
        if "latency" in a.phases:
            print("# latency", flush=True)
            lat, rtt = guarded("latency", lambda: phase_latency(a, env), (None, None))
        if a.phases & {"failover", "controlled"}:
            print("# failover", flush=True)
            for ms in (int(x) for x in a.session_timeouts.split(",")):
                failovers.append(failover_run(a, env, ms, a.phases))
        if "catchup" in a.phases:
            print("# follower catch-up", flush=True)
            catch = guarded("catch-up", lambda: phase_catch_up(a, env), [])
    report(a, prod, raw_tcp, cons, raw_sf, lat, rtt, failovers, catch)
    print(f"\nclusters started: {CLUSTERS_STARTED[0]}; with a broker whose metadata disagreed with ZooKeeper 5 s after "
          f"start (restarted): {len(STALE_IMAGES)}" + "".join(f"\n  {n}" for n in STALE_IMAGES))
    print()
    print(f"other CPU use during the run (not this process nor its children): {watch.other_share():.0%} of "
          f"{os.cpu_count()} CPUs; run took {time.monotonic() - t_start:.0f} s")


if __name__ == "__main__":
    main()
