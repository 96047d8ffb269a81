"""Consumer groups (issue 4): rebalance time and offset commits per second, Odradek beside Tansu and
beside this machine's raw loopback request/response limit, all measured in the same run.

Run (from the repository root)::

    python -m bench.group_rebalance                    # full (~20 min once the machine is free)
    python -m bench.group_rebalance --quick            # smoke test (~2 min, figures unreliable)
    python -m bench.group_rebalance --broker tansu     # one broker only (--broker odradek|tansu|both)
    python -m bench.group_rebalance --profile cprofile # where Odradek's time goes under the commit loads
    python -m bench.group_rebalance --profile py-spy   # the same with py-spy (biased on 2 cores: see docs)

Brokers, each on 127.0.0.1 with one topic of 100 partitions (``--partitions``):

- **Odradek**: ``odradek serve`` with an empty data directory under ``--tmp`` and
  ``--override group.initial.rebalance.delay.ms=0``: Kafka's default of 3000 ms holds the first
  rebalance of a new group for 3 s to gather its members, which would be the whole figure.
- **Tansu** (``bench/_kafka.py`` fetches it): ``memory://`` storage. It has no such setting: it
  answers the JoinGroup of a new group after about half the session timeout (observed: 23-24 s
  with librdkafka's default session.timeout.ms of 45 s, 3-4 s with 6 s).

Clients are confluent-kafka consumers (librdkafka), **one child process per member**
(``bench/_groups.py``), so that every member is a separate client as in a deployment and the
Python side of ten members never queues for one GIL; librdkafka's own threads run inside each.
A member connects and fetches the topic's metadata before the clock starts.

1. **Rebalance**. ``--members`` (10) consumers in a new group are told to subscribe at the same
   moment; the time runs from the first ``subscribe()`` call until every member holds partitions
   and together they hold every partition exactly once, as seen in their own on_assign/on_revoke
   callbacks (no overlap, no gap: checked; the moment is the start of the final stretch in which
   that holds, after a quiet period of no further callbacks). DescribeGroups is then asked
   whether the broker agrees (state Stable, the same members, the same partitions). Then one more
   member subscribes to the stable group, at a random point of the others' heartbeat cycle (they
   learn of it from their next heartbeat), timed from its ``subscribe()`` until the group, now
   11 members, covers all partitions again in the same way. Both for the ``range`` assignor
   (eager) and ``cooperative-sticky`` (incremental: two rebalances), each ``--repeats`` times
   (median and range; with librdkafka's default timers ``--repeats-defaults`` times, as Tansu
   takes 20 s and more per trial there), under two client settings:
   - ``defaults``: librdkafka's, session.timeout.ms 45000, heartbeat.interval.ms 3000;
   - ``short``: session.timeout.ms 6000 (Kafka's group.min.session.timeout.ms) and
     heartbeat.interval.ms 500 (``--short-heartbeat-ms``). Members already in a group learn of a
     rebalance from their next heartbeat, so this interval bounds every rebalance but the first.
   Beside it: the protocol's own floor, 4 sequential round trips (FindCoordinator, JoinGroup,
   JoinGroup again with the member id the broker assigned, SyncGroup) at the raw round-trip time.
2. **Commits**. A new group per run, members with the ``short`` settings, timed once the group
   is stable:
   - *sync*: one consumer, ``commit(offsets=[...], asynchronous=False)`` in a loop, 1 partition
     per request and all 100, for ``--commit-seconds`` or ``--commit-count`` calls; offsets rise by
     one each call; ``committed()`` must return the last ones afterwards.
   - *async*: ``--async-consumers`` (4) consumers in one group, each keeping ``--window`` (32)
     ``commit(asynchronous=True)`` calls outstanding (completions counted in ``on_commit``, served
     by ``poll``), 1 partition per request and each consumer's whole assignment.
   Commits/s and partitions/s, p50/p99 of the sync calls, and the broker's CPU (cores = CPU
   seconds of the broker process, all threads, / the run's seconds; CPU per commit = cores /
   commits/s).
   Beside them, the raw limit (``bench/_groups.py``): a Python client and server over loopback TCP
   exchanging 160-byte requests and 40-byte responses (an OffsetCommit of one partition is about
   that), one outstanding (for sync commits) and ``--async-consumers`` connections x ``--window``
   outstanding (for async ones), each request and each response in a ``send`` of its own.

Everything is repeated ``--rounds`` times in alternation (raw, Odradek, Tansu) and reported as
medians. Every loop is bounded in count and time; members and brokers are always stopped, and
scratch directories removed. A full run first waits (``--wait``, at most 20 min) until no pytest
and no other benchmark runs, then for an idle machine, and prints the CPU share other processes
took during the run.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import re
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    DEFAULT_TMP_ROOT,
    CpuWatch,
    machine_facts,
    median,
    percentile,
    print_facts,
    scratch_dir,
    wait_for_idle,
)
from bench._groups import (
    RPC_REQUEST_BYTES,
    RPC_RESPONSE_BYTES,
    Event,
    GroupBroker,
    Members,
    RpcResult,
    rpc_pipelined,
    rpc_sync,
)
from bench._kafka import TANSU_PACKAGE, cpu_split, ensure_tansu
from bench.broker_throughput import OUT, PySpy

TOPIC = "bench-groups"
ODRADEK_OVERRIDES = ["group.initial.rebalance.delay.ms=0"]
ASSIGNORS = ("range", "cooperative-sticky")
PHASE = random.Random(4)  # the newcomer's start within the heartbeat cycle: random, the same each run
ROUND_TRIPS_TO_JOIN = 4  # FindCoordinator, JoinGroup (MEMBER_ID_REQUIRED), JoinGroup, SyncGroup


def client_profiles(short_heartbeat_ms: int) -> dict[str, dict[str, Any]]:
    return {
        "defaults": {},
        "short": {"session.timeout.ms": 6000, "heartbeat.interval.ms": short_heartbeat_ms},
    }


def heartbeat_s(client: dict[str, Any]) -> float:
    return client.get("heartbeat.interval.ms", 3000) / 1000


# -- rebalance -----------------------------------------------------------------------------------


@dataclass
class Coverage:
    """The partitions each member holds, replayed from the members' callbacks in time order."""

    partitions: int
    history: list[Event] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, e: Event) -> None:
        if e.ev in ("assign", "revoke", "lost"):
            self.history.append(e)
        elif e.ev == "error":
            self.errors.append(f"member {e.member}: {e.data.get('msg')}")
        elif e.ev == "exit":
            raise RuntimeError(f"member {e.member} exited (code {e.data.get('code')}) during the rebalance")

    def exact(self, held: dict[int, list[int]], members: Sequence[int]) -> bool:
        lists = [held.get(m, []) for m in members]
        if not all(lists):
            return False
        flat = [p for ps in lists for p in ps]
        return len(flat) == self.partitions and set(flat) == set(range(self.partitions))

    def stable_since(self, members: Sequence[int]) -> tuple[float | None, dict[int, list[int]]]:
        """When the members last began to cover every partition exactly once (None if they do not
        now), and who holds what now."""
        held: dict[int, list[int]] = {}
        since: float | None = None
        for e in sorted(self.history, key=lambda x: x.data["at"]):
            held[e.member] = e.data["parts"]
            ok = self.exact(held, members)
            if ok and since is None:
                since = e.data["at"]
            elif not ok:
                since = None
        return since, held

    def callbacks(self, member: int, after: float) -> int:
        return sum(1 for e in self.history if e.member == member and e.ev == "assign" and e.data["at"] >= after)


def wait_stable(members: Members, cov: Coverage, idxs: list[int], quiet: float, timeout: float) -> float:
    """Feed events into ``cov`` until ``idxs`` have covered every partition exactly once for
    ``quiet`` seconds with no further callback; return when that stretch began."""
    give_up = time.monotonic() + timeout
    while True:
        e = members.next_event(min(give_up, time.monotonic() + 0.1))
        if e is not None:
            cov.add(e)
            continue
        since, held = cov.stable_since(idxs)
        last = max((x.data["at"] for x in cov.history), default=0.0)
        if since is not None and time.monotonic() - max(since, last) >= quiet:
            return since
        if time.monotonic() >= give_up:
            counts = [len(held.get(m, [])) for m in idxs]
            flat = [p for m in idxs for p in held.get(m, [])]
            raise NotStable(f"not stable within {timeout:g} s: partitions held per member {counts}, "
                            f"{len(set(flat))} of {cov.partitions} held, {len(flat) - len(set(flat))} twice; "
                            f"client errors: {cov.errors[:3]}")


def describe_check(bootstrap: str, group: str, n_members: int, partitions: int) -> str:
    """'ok' when DescribeGroups says Stable with ``n_members`` covering all partitions once."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    except Exception as e:  # any failure is reported, not fatal
        return f"DescribeGroups failed: {e}"
    held = sorted(tp.partition for m in d.members for tp in m.assignment.topic_partitions)
    problems = []
    if d.state.name != "STABLE":
        problems.append(f"state {d.state.name}")
    if len(d.members) != n_members:
        problems.append(f"{len(d.members)} members")
    if held != list(range(partitions)):
        problems.append(f"{len(held)} partitions held, {len(set(held))} distinct")
    return "ok" if not problems else "DescribeGroups disagrees: " + ", ".join(problems)


class NotStable(RuntimeError):
    """The group did not become stable in time: a result of the trial, not a broken broker."""


@dataclass
class Trial:
    join_s: float | None  # None: not stable within --max-seconds (see notes)
    extra_s: float | None
    join_rounds: int  # on_assign callbacks the first member saw while the group formed
    extra_rounds: int  # ... and while the extra member joined
    checks: list[str]
    errors: list[str]
    notes: list[str]
    spread_s: float = 0.0  # from the first member's subscribe() to the last one's


def rebalance_trial(broker: GroupBroker, assignor: str, client: dict[str, Any], n: int, partitions: int,
                    timeout: float, scratch: Path) -> Trial:
    group = f"rebalance-{assignor}-{uuid.uuid4().hex[:8]}"
    cfg = {"bootstrap": broker.bootstrap, "group": group, "topic": TOPIC, "assignor": assignor, "client": client,
           "mode": "member", "max_seconds": 3 * timeout + 120}
    quiet = max(2.0, 1.5 * heartbeat_s(client))
    cov = Coverage(partitions)
    tr = Trial(None, None, 0, 0, [], cov.errors, [])
    with Members(scratch / "members.stderr") as members:
        idxs = [members.spawn(cfg) for _ in range(n + 1)]
        members.wait_all(idxs, "ready", 60)
        first, extra = idxs[:n], idxs[n]
        for i in first:
            members.send(i, "go")
        subs = members.wait_all(first, "subscribed", 30, sink=cov.add)
        t0 = min(e.data["at"] for e in subs.values())
        tr.spread_s = max(e.data["at"] for e in subs.values()) - t0
        try:
            tr.join_s = wait_stable(members, cov, first, quiet, timeout) - t0
        except NotStable as e:
            tr.notes.append(f"{n} joining: {e}")
            return tr
        finally:
            tr.join_rounds = cov.callbacks(first[0], t0)
        tr.checks.append(describe_check(broker.bootstrap, group, n, partitions))
        # The others learn of the newcomer from their next heartbeat: start it at a random phase of
        # their heartbeat cycle, or the fixed quiet period above would always pick the same phase.
        time.sleep(PHASE.uniform(0, heartbeat_s(client)))
        members.send(extra, "go")
        t1 = members.wait_all([extra], "subscribed", 30, sink=cov.add)[extra].data["at"]
        try:
            tr.extra_s = wait_stable(members, cov, idxs, quiet, timeout) - t1
        except NotStable as e:
            tr.notes.append(f"1 joining {n}: {e}")
            return tr
        finally:
            tr.extra_rounds = cov.callbacks(first[0], t1)
        tr.checks.append(describe_check(broker.bootstrap, group, n + 1, partitions))
    return tr


# -- commits -------------------------------------------------------------------------------------


@dataclass
class CommitRun:
    calls: int
    seconds: float
    batch: int
    errors: int
    lat: list[float]
    broker_cores: float
    broker_sys: float  # share of the broker's CPU spent in the kernel
    verified: bool
    first_error: str
    profile: str = ""

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds > 0 else float("nan")


def commit_run(broker: GroupBroker, mode: str, consumers: int, batch: int, a: argparse.Namespace,
               scratch: Path, spy_out: Path | None = None) -> CommitRun:
    """One commit load on a new group; with ``spy_out``, py-spy records the broker while it runs."""
    group = f"commits-{mode}-{uuid.uuid4().hex[:8]}"
    client = client_profiles(a.short_heartbeat_ms)["short"]
    cfg = {"bootstrap": broker.bootstrap, "group": group, "topic": TOPIC, "assignor": "range", "client": client,
           "mode": mode, "batch": batch, "count": a.commit_count, "seconds": a.commit_seconds, "window": a.window,
           "warmup": 20, "max_seconds": a.commit_seconds + a.max_seconds + 120}
    cov = Coverage(a.partitions)
    with Members(scratch / "members.stderr") as members:
        idxs = [members.spawn(cfg) for _ in range(consumers)]
        members.wait_all(idxs, "ready", 60)
        for i in idxs:
            members.send(i, "go")
        members.wait_all(idxs, "subscribed", 30, sink=cov.add)
        wait_stable(members, cov, idxs, 1.0, a.max_seconds)
        spy = PySpy(broker.proc.pid, spy_out, a.commit_seconds + 60) if spy_out and broker.proc else None
        pid = broker.proc.pid if broker.proc else -1
        u0, s0 = cpu_split(pid)
        w0 = time.monotonic()
        for i in idxs:
            members.send(i, "run")
        results = [e.data for e in members.wait_all(idxs, "result", a.commit_seconds + 60).values()]
        u1, s1 = cpu_split(pid)
        w1 = time.monotonic()
        profile = spy.stop(a.commit_seconds) if spy else ""
    bad = [r["error"] for r in results if "error" in r]
    if bad:
        raise RuntimeError(bad[0])
    secs = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    first_error = next((r["first_error"] for r in results if r["first_error"]), "")
    cpu = u1 + s1 - u0 - s0  # over the wall-clock window w0..w1 (the loop plus its warm-up and check)
    return CommitRun(sum(r["calls"] for r in results), secs, results[0]["batch"], sum(r["errors"] for r in results),
                     sorted(x for r in results for x in r["lat"]), cpu / (w1 - w0),
                     (s1 - s0) / cpu if cpu > 0 else float("nan"), all(r["verified"] for r in results), first_error,
                     profile)


# -- waiting for a free machine ------------------------------------------------------------------


def busy_processes() -> list[str]:
    """Command lines of pytest runs and other benchmarks now running (not this one or its children)."""
    mine = {os.getpid()}
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) in mine:
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid in mine or "bench.group_rebalance" in cmd or "bench._groups" in cmd:
            continue
        if re.search(r"\bpytest\b|-m bench\.\w+|bench/\w+\.py|rdkafka_performance", cmd):
            found.append(cmd)
    return found


def wait_for_machine(max_wait: float) -> list[str]:
    t0 = time.monotonic()
    notes = []
    while (busy := busy_processes()) and time.monotonic() - t0 < max_wait:
        print(f"# waiting: {len(busy)} pytest/benchmark process(es) running, e.g. {busy[0][:100]}", flush=True)
        time.sleep(30)
    notes.append(f"other benchmarks/pytest: {'none' if not busy else 'STILL RUNNING: ' + busy[0][:100]} "
                 f"(waited {time.monotonic() - t0:.0f} s)")
    notes.append(wait_for_idle(max(30.0, max_wait - (time.monotonic() - t0))))
    return notes


# -- report --------------------------------------------------------------------------------------


def secs(x: float | None) -> str:
    return f"{x:6.3f} s" if x is not None else "NOT STABLE"


def fmt_s(xs: Sequence[float | None], timeout: float) -> str:
    ok = [x for x in xs if x is not None]
    cell = f"{median(ok):.2f} s ({min(ok):.2f}-{max(ok):.2f})" if ok else "-"
    if len(ok) < len(xs):
        cell += f", {len(xs) - len(ok)} of {len(xs)} not stable in {timeout:.0f} s"
    return cell


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if a == a and b == b and b > 0 else "-"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    print(line)
    print("-" * len(line))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    sys.stdout.flush()


def guarded(kind: str, failed: dict[str, str], fn: Callable[[], Any], log_tail: Callable[[], str] = str) -> Any:
    """Run ``fn``; on failure mark broker ``kind`` failed (it is skipped from then on) and say why."""
    try:
        return fn()
    except Exception as e:  # the broker is skipped with its reason
        tail = log_tail()
        failed[kind] = f"{type(e).__name__}: {e}" + (f"\n--- {kind} log (tail) ---\n{tail}" if tail.strip() and
                                                     "log (tail)" not in str(e) else "")
        print(f"# {kind} FAILED, skipping it from now on: {failed[kind][:3000]}", flush=True)
        return None


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", choices=["odradek", "tansu", "both"], default="both")
    ap.add_argument("--quick", action="store_true", help="1 repeat, short profile only, 2 s commit runs, no waiting")
    ap.add_argument("--only", default="rebalance,commits", help="phases: rebalance,commits (default both)")
    ap.add_argument("--members", type=int, default=10, help="members that form the group (default 10; one more joins)")
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--assignors", default=",".join(ASSIGNORS))
    ap.add_argument("--profiles", default="short,defaults", help="client settings for the rebalance: short,defaults")
    ap.add_argument("--short-heartbeat-ms", type=int, default=500)
    ap.add_argument("--repeats", type=int, help="rebalance trials per case (default 5, quick 1)")
    ap.add_argument("--repeats-defaults", type=int, default=3,
                    help="rebalance trials per case with librdkafka's default timers (slow on Tansu; default 3)")
    ap.add_argument("--rounds", type=int, help="rounds of every commit run and raw limit (default 3, quick 1)")
    ap.add_argument("--commit-seconds", type=float, help="length of one commit run (default 5, quick 2)")
    ap.add_argument("--commit-count", type=int, default=200_000, help="at most this many commits per consumer and run")
    ap.add_argument("--commit-batches", default="1,100", help="partitions per commit request (default 1,100)")
    ap.add_argument("--async-consumers", type=int, default=4)
    ap.add_argument("--window", type=int, default=32, help="async commits outstanding per consumer")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="bound of any one wait for a stable group")
    ap.add_argument("--wait", type=float, help="wait up to this many s for pytest/benchmarks to end and an idle "
                    "machine (default 1200, quick 0)")
    ap.add_argument("--profile", choices=["cprofile", "py-spy"],
                    help="only profiles of Odradek under the commit loads (files in bench/out/)")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help="scratch root (deleted after)")
    a = ap.parse_args()
    a.repeats = a.repeats or (1 if a.quick else 5)
    a.rounds = a.rounds or (1 if a.quick else 3)
    a.commit_seconds = a.commit_seconds or (2.0 if a.quick else 5.0)
    profiles_all = client_profiles(a.short_heartbeat_ms)
    profiles = ["short"] if a.quick else [p for p in a.profiles.split(",") if p]
    for p in profiles:
        if p not in profiles_all:
            ap.error(f"unknown profile {p!r}")
    assignors = a.assignors.split(",")
    batches = [int(b) for b in a.commit_batches.split(",")]
    phases = set(a.only.split(","))
    kinds = ["odradek", "tansu"] if a.broker == "both" else [a.broker]

    tansu_exe, tansu_version = ensure_tansu() if "tansu" in kinds else (None, "-")
    a.tmp.mkdir(parents=True, exist_ok=True)
    facts = machine_facts(a.tmp)
    facts["confluent"] = f"confluent-kafka {__import__('confluent_kafka').version()}, librdkafka " \
                         f"{__import__('confluent_kafka').libversion()[0]}"
    overrides = " ".join(f"--override {kv}" for kv in ODRADEK_OVERRIDES)
    facts["odradek"] = f"odradek serve {overrides}" if "odradek" in kinds else "-"
    facts["peer"] = f"{tansu_version} (memory:// storage; PyPI {TANSU_PACKAGE})" if tansu_exe else "-"
    print_facts(facts)
    wait = a.wait if a.wait is not None else (0 if a.quick else 1200)
    if wait > 0:
        for note in wait_for_machine(wait):
            print("# " + note, flush=True)
    watch = CpuWatch()
    t_start = time.monotonic()
    failed: dict[str, str] = {}
    trials: dict[tuple[str, str, str], list[Trial]] = {}
    commits: dict[tuple[str, str, int], list[CommitRun]] = {}
    raw_sync: list[RpcResult] = []
    raw_pipe: list[RpcResult] = []
    raw_floor: list[RpcResult] = []  # round trips timed before the rebalance phase, for its floor

    with scratch_dir(a.tmp, "group_rebalance", 1 << 30) as scratch, contextlib.ExitStack() as stack:
        brokers: dict[str, GroupBroker] = {}
        for kind in kinds:
            b = GroupBroker(kind, scratch / kind, tansu_exe=tansu_exe,
                            overrides=ODRADEK_OVERRIDES if kind == "odradek" else [])

            def up(b: GroupBroker = b) -> GroupBroker:
                stack.enter_context(b)
                b.create_topic(TOPIC, a.partitions)
                t = time.monotonic()  # warm-up: first group (creates __consumer_offsets where there is one)
                w = rebalance_trial(b, "range", profiles_all["short"], 1, a.partitions, a.max_seconds, scratch)
                if w.notes:
                    raise RuntimeError(f"warm-up group (1 member, then 2) not stable: {'; '.join(w.notes)}"
                                       f"\n--- {b.kind} log (tail) ---\n{b.log_tail(2000)}")
                print(f"# {b.kind}: up on {b.bootstrap}; warm-up group of 1 (+1) took {time.monotonic() - t:.1f} s "
                      f"(joins {w.join_s:.2f} s / {w.extra_s:.2f} s; checks: {', '.join(w.checks)})", flush=True)
                return b

            if guarded(kind, failed, up) is not None:
                brokers[kind] = b

        if a.profile == "py-spy":
            profile_commits(a, brokers, batches, scratch)
            return
        if a.profile == "cprofile":
            cprofile_commits(a, batches, scratch)
            return

        def live() -> list[str]:
            return [k for k in kinds if k in brokers and k not in failed]

        if "rebalance" in phases and live():
            raw_floor.append(rpc_sync(5000, 2.0))
            print(f"# rebalance: {a.members} members + 1, {a.partitions} partitions, {a.repeats} repeat(s) "
                  f"({a.repeats_defaults} with librdkafka's defaults)", flush=True)
            for prof, assignor in itertools.product(profiles, assignors):
                for rep in range(a.repeats if prof != "defaults" else a.repeats_defaults):
                    for kind in live():
                        done = trials.setdefault((kind, prof, assignor), [])
                        if any(t.notes for t in done):
                            continue  # not stable once: the other repeats would only wait as long again

                        def one(kind: str = kind, assignor: str = assignor, prof: str = prof) -> Trial:
                            return rebalance_trial(brokers[kind], assignor, profiles_all[prof], a.members,
                                                   a.partitions, a.max_seconds, scratch)

                        tr = guarded(kind, failed, one, brokers[kind].log_tail)
                        if tr is None:
                            continue
                        done.append(tr)
                        notes = [c for c in tr.checks if c != "ok"] + tr.errors[:3] + tr.notes
                        print(f"  {prof:<8} {assignor:<18} #{rep + 1} {kind:<8} {a.members} join: {secs(tr.join_s)} "
                              f"({tr.join_rounds} assignment(s), subscribes spread {tr.spread_s * 1e3:.1f} ms)   "
                              f"+1 join: {secs(tr.extra_s)} ({tr.extra_rounds})"
                              f"{'   ' + '; '.join(notes) if notes else ''}", flush=True)
        if "commits" in phases and live():
            print(f"# commits: {a.rounds} round(s) of {a.commit_seconds:g} s", flush=True)
            for rnd in range(a.rounds):
                raw_sync.append(rpc_sync(a.commit_count, a.commit_seconds))
                raw_pipe.append(rpc_pipelined(a.async_consumers, a.window, a.commit_seconds))
                print(f"  round {rnd + 1} raw: {raw_sync[-1].rate:,.0f} round trips/s (1 outstanding), "
                      f"{raw_pipe[-1].rate:,.0f}/s ({a.async_consumers} x {a.window} outstanding)", flush=True)
                for mode, batch, kind in itertools.product(("sync", "async"), batches, kinds):
                    if kind not in live():
                        continue
                    n = 1 if mode == "sync" else a.async_consumers

                    def crun(kind: str = kind, mode: str = mode, n: int = n, batch: int = batch) -> CommitRun:
                        return commit_run(brokers[kind], mode, n, batch, a, scratch)

                    r = guarded(kind, failed, crun, brokers[kind].log_tail)
                    if r is None:
                        continue
                    commits.setdefault((kind, mode, batch), []).append(r)
                    print(f"  round {rnd + 1} {kind:<8} {mode:<5} x{n} {r.batch:>3} partition(s)/commit: "
                          f"{r.rate:9,.0f} commits/s, broker {r.broker_cores:.2f} cores ({r.broker_sys:.0%} sys)"
                          f"{'' if r.verified else ', NOT VERIFIED'}"
                          f"{f', {r.errors} errors: {r.first_error}' if r.errors else ''}", flush=True)
        logs = {k: b.log_tail(1500) for k, b in brokers.items()}
    other = watch.other_share()

    report(a, kinds, profiles, assignors, batches, trials, commits, raw_floor, raw_sync, raw_pipe, failed)
    for k, tail in logs.items():
        if tail.strip():
            print(f"\n# {k} log (tail):\n{tail}")
    print(f"\nother CPU use during the run (not this process nor its children): {other:.0%} of {os.cpu_count()} CPUs; "
          f"run took {time.monotonic() - t_start:.0f} s")


def profile_commits(a: argparse.Namespace, brokers: dict[str, GroupBroker], batches: list[int], scratch: Path) -> None:
    """Odradek under each commit load with py-spy attached (its figures are disturbed by py-spy)."""
    if "odradek" not in brokers:
        raise SystemExit("--profile needs the odradek broker")
    OUT.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for mode, batch in itertools.product(("sync", "async"), batches):
        out = OUT / f"pyspy-groups-{stamp}-{mode}-{batch}.txt"
        r = commit_run(brokers["odradek"], mode, 1 if mode == "sync" else a.async_consumers, batch, a, scratch, out)
        print(f"\n{mode} commits, {r.batch} partition(s) each: {r.rate:,.0f}/s under py-spy, broker "
              f"{r.broker_cores:.2f} cores; {out}\n{r.profile}", flush=True)


def cprofile_commits(a: argparse.Namespace, batches: list[int], scratch: Path, top: int = 14) -> None:
    """A fresh Odradek under cProfile for each commit load (cProfile slows Python calls, so the
    shares, not the rates, are the point): where the event loop's time goes per commit."""
    import pstats

    OUT.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for mode, batch in itertools.product(("sync", "async"), batches):
        out = OUT / f"cprofile-groups-{stamp}-{mode}-{batch}.prof"
        b = GroupBroker("odradek", scratch / f"cprofile-{mode}-{batch}", overrides=ODRADEK_OVERRIDES,
                        python_args=["-m", "cProfile", "-o", str(out)])
        with b:
            b.create_topic(TOPIC, a.partitions)
            r = commit_run(b, mode, 1 if mode == "sync" else a.async_consumers, batch, a, scratch)
        st = pstats.Stats(str(out))
        rows = st.stats  # type: ignore[attr-defined]
        idle = sum(v[2] for k, v in rows.items() if "'poll' of 'select.epoll'" in k[2])
        busy = sum(v[2] for v in rows.values()) - idle  # main thread (the event loop) not waiting in epoll

        def name(k: tuple[str, int, str]) -> str:
            return f"{k[2]} ({Path(k[0]).parent.name}/{Path(k[0]).name}:{k[1]})"

        load = sum(v[3] for k, v in rows.items() if k[2] == "handle_offset_commit")
        print(f"\n{mode} commits, {r.batch} partition(s) each: {r.calls:,} commits, {r.rate:,.0f}/s under cProfile; "
              f"event loop busy {busy:.2f} s over the broker's life (start-up and group joins included), "
              f"handle_offset_commit {load:.2f} s = {load / max(1, r.calls) * 1e6:.0f} µs per commit; {out}")
        print("  self time (tottime), share of the busy time:")
        own = [(k, v) for k, v in sorted(rows.items(), key=lambda kv: -kv[1][2]) if "'poll' of" not in k[2]]
        for k, v in own[:top]:
            print(f"    {v[2] / busy:6.1%}  {name(k)}")
        print("  inclusive (cumtime), share of the busy time:")
        skip = re.compile(r"run_forever|_run_once|_run \(|<module>|run \(|main \(|_serve|runctx|exec|run_module|"
                          r"_run_code|run_until_complete|'run' of|select|poll")
        inc = [(k, v) for k, v in sorted(rows.items(), key=lambda kv: -kv[1][3]) if not skip.search(name(k))]
        for k, v in inc[:top]:
            print(f"    {v[3] / busy:6.1%}  {name(k)}")


def report(a: argparse.Namespace, kinds: list[str], profiles: list[str], assignors: list[str], batches: list[int],
           trials: dict[tuple[str, str, str], list[Trial]], commits: dict[tuple[str, str, int], list[CommitRun]],
           raw_floor: list[RpcResult], raw_sync: list[RpcResult], raw_pipe: list[RpcResult],
           failed: dict[str, str]) -> None:
    both = kinds == ["odradek", "tansu"]
    floor_rtt = median([percentile(r.lat, 50) for r in raw_floor]) if raw_floor else float("nan")
    rtt = median([percentile(r.lat, 50) for r in raw_sync]) if raw_sync else float("nan")
    if trials:
        with_defaults = f" ({a.repeats_defaults} with the defaults)" if "defaults" in profiles else ""
        print(f"\nRebalance: seconds until the group is stable, median (range) of {a.repeats} trials{with_defaults}; "
              f"Odradek/Tansu < 1 means Odradek is faster")
        rows = []
        for prof, assignor in itertools.product(profiles, assignors):
            for what, pick, rounds in (
                (f"{a.members} join a new group", lambda t: t.join_s, lambda t: t.join_rounds),
                (f"1 joins {a.members} (stable)", lambda t: t.extra_s, lambda t: t.extra_rounds),
            ):
                cells = []
                meds = []
                for kind in kinds:
                    ts = trials.get((kind, prof, assignor), [])
                    xs = [pick(t) for t in ts]
                    ok = [x for x in xs if x is not None]
                    meds.append(median(ok) if ok else float("nan"))
                    cells.append(f"{fmt_s(xs, a.max_seconds)} [{'/'.join(str(rounds(t)) for t in ts)}]" if xs else "-")
                floor = f"{ROUND_TRIPS_TO_JOIN * floor_rtt * 1e3:.2f} ms" if raw_floor else "-"
                rows.append([prof, assignor, what, *cells, *([ratio(meds[0], meds[1])] if both else []), floor])
        table(["client", "assignor", "scenario", *[f"{k} [assignments seen]" for k in kinds],
               *(["Odradek/Tansu"] if both else []), f"raw floor ({ROUND_TRIPS_TO_JOIN} round trips)"], rows)
        bad = sorted({c for ts in trials.values() for t in ts for c in t.checks if c != "ok"})
        errs = sorted({e for ts in trials.values() for t in ts for e in t.errors})
        for (kind, prof, assignor), ts in trials.items():
            for t in ts:
                for note in t.notes:
                    print(f"{kind} {prof} {assignor}: {note}")
        print("trials (s):")
        for (kind, prof, assignor), ts in trials.items():
            print(f"  {kind:<8} {prof:<8} {assignor:<18} {a.members} join: "
                  f"{' '.join(f'{t.join_s:.3f}' if t.join_s is not None else 'x' for t in ts)}   +1 join: "
                  f"{' '.join(f'{t.extra_s:.3f}' if t.extra_s is not None else 'x' for t in ts)}")
        print(f"DescribeGroups checks: {'all ok' if not bad else '; '.join(bad)}")
        if errs:
            print(f"client errors reported: {'; '.join(errs[:8])}")
    if commits:
        print(f"\nOffset commits: medians of {a.rounds} run(s) of {a.commit_seconds:g} s; raw = Python client and "
              f"server over loopback TCP, {RPC_REQUEST_BYTES} B request / {RPC_RESPONSE_BYTES} B response")
        rows = []
        for mode, batch in itertools.product(("sync", "async"), batches):
            raw = raw_sync if mode == "sync" else raw_pipe
            raw_rate = median([r.rate for r in raw])
            cells = []
            rates = []
            for kind in kinds:
                runs = commits.get((kind, mode, batch), [])
                if not runs:
                    cells += ["-", "-"]
                    rates.append(float("nan"))
                    continue
                rate = median([r.rate for r in runs])
                rates.append(rate)
                nb = runs[0].batch
                lat = ""
                if mode == "sync":
                    lat = f", p50 {median([percentile(r.lat, 50) for r in runs]) * 1e6:.0f} / p99 " \
                          f"{median([percentile(r.lat, 99) for r in runs]) * 1e6:.0f} µs"
                part = f" = {rate * nb:,.0f} partitions/s" if nb > 1 else ""
                cores = median([r.broker_cores for r in runs])
                cells += [f"{rate:,.0f}/s{part}{lat}", f"{cores:.2f} ({median([r.broker_sys for r in runs]):.0%} sys), "
                          f"{cores / rate * 1e6:.0f} µs"]
            nb = next((rs[0].batch for (k, m, b), rs in commits.items() if m == mode and b == batch and rs), batch)
            how = f"sync, 1 consumer, {nb} p/commit" if mode == "sync" else \
                f"async, {a.async_consumers} x {a.window} in flight, {nb} p/commit"
            rawcell = f"{raw_rate:,.0f}/s" + (f" (p50 {rtt * 1e6:.0f} µs)" if mode == "sync" else "")
            rows.append([how, *cells, *([ratio(rates[0], rates[1])] if both else []), rawcell,
                         ratio(rates[0], raw_rate)])
        header = [x for k in kinds for x in (f"{k} commits/s", "broker cores, CPU per commit")]
        table(["load", *header, *(["Odradek/Tansu"] if both else []), "raw limit", f"{kinds[0]}/raw"], rows)
        notes = sorted({f"{k} {m} {b}: {r.errors} errors ({r.first_error})" for (k, m, b), rs in commits.items()
                        for r in rs if r.errors} | {f"{k} {m} {b}: committed offsets NOT verified"
                                                    for (k, m, b), rs in commits.items() for r in rs if not r.verified})
        for note in notes:
            print(note)
    for kind, why in failed.items():
        print(f"\n{kind}: FAILED, figures missing or partial: {why[:2000]}")
    print("\n(p/commit = partitions per OffsetCommit request; cores = broker CPU seconds (all threads) / run seconds; "
          "[assignments seen] = on_assign callbacks of the first member in each trial: rebalance rounds)")


if __name__ == "__main__":
    main()
