"""Consumer groups with real, unmodified clients against a real ``odradek serve`` process (issue 4).

Every scenario runs with each client library (the ``group_client`` fixture), and with each assignor
where that matters; combinations a library cannot do are skipped with the reason.

- Several members of one group split a topic's partitions with no overlap and no gap, and read
  every record exactly once between them (range, roundrobin, sticky, cooperative-sticky; and a
  group with one member of each library).
- A member killed with SIGKILL (a child process: no LeaveGroup) loses its partitions to the
  others once its session times out.
- A joining member triggers a rebalance (the eager protocol revokes everything) and gets
  partitions; it starts at the offsets the group committed.
- Committed offsets and their metadata survive a broker restart.
- A static member (``group.instance.id``) that restarts within its session timeout gets its
  partitions back and the other members see no rebalance (no callback at all).
- Cooperative-sticky: when a member joins, the others only give up the partitions that move;
  the partitions they keep are never revoked.
- An at-least-once loop (commit after processing) killed in the middle and restarted: every record
  is seen at least once, the restart begins at the last commit, and nothing before it is missing.
- ``auto.offset.reset`` earliest / latest / none (the client's own error without a committed
  offset, the committed offset when there is one).
- Commits with metadata for several partitions, read back by ``committed()``, also by another member.

Members are polled by threads of their own (``Member``), as applications do; the broker runs with
``GROUP_OVERRIDES`` (no initial rebalance delay, short session timeouts allowed) and members use
``SESSION_MS``. Every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.compat.clients import (
    ASSIGNORS,
    CLIENTS,
    OFFSET_RESETS,
    Client,
    Committed,
    Consumed,
    GroupConsumer,
    Rec,
    make_client,
)
from tests.compat.conftest import REPO, BrokerProcess, create_topic

pytestmark = pytest.mark.slow

SESSION_MS = 3000  # session.timeout.ms of every member (heartbeats every 300 ms)
SESSION = SESSION_MS / 1000
JOIN_TIMEOUT = 30.0  # a group forms or re-forms within this
# Tests about splitting (not liveness) give members a longer session: on a loaded machine a client's heartbeat
# thread was once starved past 3 s, and the member's removal and rejoin kept the group from settling in time.
SPLIT_SESSION_MS = 10_000
READ_TIMEOUT = 30.0

Key = tuple[int, int]  # (partition, offset)


def keys(records: Iterable[Consumed]) -> set[Key]:
    return {(r.partition, r.offset) for r in records}


def wait_until(cond: Callable[[], bool], timeout: float, what: Callable[[], str],
               watched: Sequence[Member | ChildMember] = ()) -> float:
    """Check ``cond`` every 50 ms until it holds; the seconds it took. Fails with ``what()`` when
    ``timeout`` expires, and at once if a watched member's thread or process failed."""
    start = time.monotonic()
    while not cond():
        for m in watched:
            m.check()
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout:.0f}s: {what()}")
        time.sleep(0.05)
    return time.monotonic() - start


class Member:
    """A group consumer polled by a thread of its own until paused or closed."""

    def __init__(self, name: str, consumer: GroupConsumer) -> None:
        self.name = name
        self.consumer = consumer
        self.records: list[Consumed] = []
        self.assignment: frozenset[int] = frozenset()
        self.error: BaseException | None = None
        self.closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.resume()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                got = self.consumer.poll(0.2)
                self.records.extend(got)
                self.assignment = self.consumer.assignment()
        except BaseException as e:  # reported by check()
            self.error = e

    @property
    def events(self) -> list[tuple[str, frozenset[int]]]:
        return list(self.consumer.events)

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"member {self.name} failed: {self.error!r}") from self.error

    def resume(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"member-{self.name}", daemon=True)
        self._thread.start()

    def pause(self) -> None:
        """Stop polling, so that this thread may use the consumer."""
        self.stop_polling()
        self.check()

    def stop_polling(self) -> BaseException | None:
        """Stop polling; the error that stopped it earlier, if one did."""
        assert self._thread is not None
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), f"member {self.name}: poll did not return"
        return self.error

    def close(self, leave: bool | None = None) -> None:
        self.stop_polling()
        self.closed = True
        self.consumer.close(leave)

    def shutdown(self) -> None:
        if not self.closed:
            self.close()

    def __repr__(self) -> str:
        return (f"<{self.name}: assigned {sorted(self.assignment)}, {len(self.records)} records, "
                f"callbacks {[(k, sorted(p)) for k, p in self.events]}>")


class ChildMember:
    """A group member in a child process (``python -m tests.compat.clients member``), to kill."""

    def __init__(self, name: str, client: str, bootstrap: str, topic: str, group: str, log: Path,
                 *options: str) -> None:
        self.name = name
        self.log = log
        self.assignment: frozenset[int] = frozenset()
        self.records: list[Key] = []
        self.committed: dict[int, int] = {}  # the last commit the child saw acknowledged, per partition
        cmd = [sys.executable, "-m", "tests.compat.clients", "member", client, bootstrap, topic, group,
               "--session-timeout-ms", str(SESSION_MS), *options]
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        self._reader = threading.Thread(target=self._read, name=f"child-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            if "assigned" in msg:
                self.assignment = frozenset(msg["assigned"])
            elif "records" in msg:
                self.records.extend((p, o) for p, o in msg["records"])
            elif "committed" in msg:
                for p, o in msg["committed"].items():
                    self.committed[int(p)] = max(self.committed.get(int(p), 0), o)

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"child member {self.name} exited with {self.proc.returncode}:\n{self.stderr()}")

    def stderr(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
        return ""

    def kill(self) -> None:
        """SIGKILL: the member vanishes without LeaveGroup or any other goodbye."""
        self.check()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(10)

    def shutdown(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __repr__(self) -> str:
        return f"<child {self.name}: assigned {sorted(self.assignment)}, {len(self.records)} records>"


@pytest.fixture
def started() -> Iterator[list[Member | ChildMember]]:
    """Members a test starts (in order); teardown stops those still running, newest first."""
    items: list[Member | ChildMember] = []
    yield items
    for m in reversed(items):
        with contextlib.suppress(Exception):
            m.shutdown()


def start(started: list[Member | ChildMember], client: Client, topic: str, group: str, name: str,
          **config: Any) -> Member:
    config.setdefault("session_timeout_ms", SESSION_MS)
    m = Member(name, client.group_consumer(topic, group, **config))
    started.append(m)
    return m


def start_child(started: list[Member | ChildMember], tmp_path: Path, client: Client, topic: str, group: str,
                name: str, *options: str) -> ChildMember:
    m = ChildMember(name, client.name, client.bootstrap, topic, group, tmp_path / f"{name}.log", *options)
    started.append(m)
    return m


def split(members: Sequence[Member | ChildMember], partitions: int) -> bool:
    """Every member has partitions, none has another's, and together they have them all."""
    sets = [m.assignment for m in members]
    return all(sets) and sum(map(len, sets)) == partitions and frozenset().union(*sets) == frozenset(range(partitions))


def spread(n: int, partitions: int, tag: str) -> list[Rec]:
    return [Rec(value=f"{tag}-{i}".encode(), key=b"%d" % i, partition=i % partitions) for i in range(n)]


def poll_until(c: GroupConsumer, cond: Callable[[list[Consumed]], bool], timeout: float,
               what: Callable[[list[Consumed]], str]) -> list[Consumed]:
    """Poll ``c`` (from this thread) until ``cond`` holds for what it returned so far."""
    got: list[Consumed] = []
    deadline = time.monotonic() + timeout
    while not cond(got):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what(got)}")
        got += c.poll(0.2)
    return got


def skip_without(client: Client, assignor: str) -> None:
    if assignor not in client.assignors:
        reason = {"aiokafka": "aiokafka has no cooperative rebalance protocol (no cooperative-sticky)",
                  "confluent": "librdkafka has no eager sticky assignor (only range, roundrobin, cooperative-sticky)"}
        pytest.skip(reason.get(client.name, f"{client.name} has no {assignor} assignor"))


# -- several members split the partitions ------------------------------------------------------------


def _split_and_read_once(members: Sequence[Member], producer: Client, topic: str, partitions: int) -> None:
    wait_until(lambda: split(members, partitions), JOIN_TIMEOUT,
               lambda: f"{len(members)} members did not split {partitions} partitions: {members}", members)
    assigned = [m.assignment for m in members]
    sizes = sorted(len(a) for a in assigned)
    assert sizes[-1] - sizes[0] <= 1, f"unbalanced assignment: {members}"
    acks = producer.produce(topic, spread(300, partitions, "split"))
    expected = {(a.partition, a.offset) for a in acks}
    wait_until(lambda: sum(len(m.records) for m in members) >= len(expected), READ_TIMEOUT,
               lambda: f"read {sum(len(m.records) for m in members)} of {len(expected)}: {members}", members)
    time.sleep(0.5)  # a duplicate would arrive now
    seen = [(r.partition, r.offset) for m in members for r in m.records]
    assert len(seen) == len(set(seen)), f"records read twice: {sorted(k for k in seen if seen.count(k) > 1)[:10]}"
    assert set(seen) == expected
    for m, a in zip(members, assigned, strict=True):
        assert m.assignment == a, f"assignment changed while reading: {members}"
        assert {r.partition for r in m.records} <= a, f"{m.name} read partitions it was not assigned: {members}"


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_members_split_partitions_and_read_each_record_once(group_client: Client, group_broker: BrokerProcess,
                                                            started: list[Member | ChildMember], topic_name: str,
                                                            assignor: str) -> None:
    client = group_client
    skip_without(client, assignor)
    create_topic(group_broker, topic_name, partitions=6)
    members = [start(started, client, topic_name, topic_name, f"m{i}", assignor=assignor,
                     session_timeout_ms=SPLIT_SESSION_MS) for i in range(3)]
    _split_and_read_once(members, client, topic_name, 6)


def test_members_of_every_client_share_one_group(group_broker: BrokerProcess, started: list[Member | ChildMember],
                                                 topic_name: str) -> None:
    """One member per library in the same group (range): the leader's assignment, computed by
    whichever library leads, reaches the others through the broker."""
    create_topic(group_broker, topic_name, partitions=6)
    clients = [make_client(name, group_broker.bootstrap) for name in CLIENTS]
    try:
        members = [start(started, c, topic_name, topic_name, c.name, session_timeout_ms=SPLIT_SESSION_MS)
                   for c in clients]
        try:
            _split_and_read_once(members, clients[0], topic_name, 6)
        finally:
            for m in members:
                m.shutdown()
    finally:
        for c in clients:
            c.close()


# -- liveness: a killed member, a joining member --------------------------------------------------------


def test_killed_member_loses_its_partitions_after_the_session_timeout(
        group_client: Client, group_broker: BrokerProcess, started: list[Member | ChildMember], topic_name: str,
        tmp_path: Path) -> None:
    client, topic = group_client, topic_name
    create_topic(group_broker, topic, partitions=4)
    doomed = start_child(started, tmp_path, client, topic, topic, "doomed")
    wait_until(lambda: doomed.assignment == frozenset(range(4)), JOIN_TIMEOUT,
               lambda: f"the first member did not get every partition: {doomed}\n{doomed.stderr()}", [doomed])
    survivor = start(started, client, topic, topic, "survivor")
    wait_until(lambda: split([doomed, survivor], 4), JOIN_TIMEOUT,
               lambda: f"two members did not split the partitions: {doomed} {survivor}", [doomed, survivor])
    survivor_had, mark = survivor.assignment, len(survivor.events)

    doomed.kill()
    took = wait_until(lambda: survivor.assignment == frozenset(range(4)), SESSION + JOIN_TIMEOUT,
                      lambda: f"the killed member's partitions were not reassigned: {survivor}", [survivor])
    assert ("revoked", survivor_had) in survivor.events[mark:], f"range is eager: a rebalance revokes all: {survivor}"
    # Its last heartbeat was at most a heartbeat interval (300 ms) before the kill.
    assert took > SESSION - 1, f"partitions reassigned {took:.1f}s after the kill, session timeout {SESSION}s"
    acks = client.produce(topic, spread(40, 4, "after-kill"))
    expected = {(a.partition, a.offset) for a in acks}
    wait_until(lambda: expected <= keys(survivor.records), READ_TIMEOUT,
               lambda: f"survivor read {len(keys(survivor.records) & expected)} of {len(expected)} "
                       f"(took over after {took:.1f}s): {survivor}", [survivor])


def test_joining_member_triggers_a_rebalance_and_gets_partitions(
        group_client: Client, group_broker: BrokerProcess, started: list[Member | ChildMember],
        topic_name: str) -> None:
    client, topic = group_client, topic_name
    create_topic(group_broker, topic, partitions=4)
    first = start(started, client, topic, topic, "first")
    wait_until(lambda: first.assignment == frozenset(range(4)), JOIN_TIMEOUT,
               lambda: f"a lone member did not get every partition: {first}", [first])
    before = {(a.partition, a.offset) for a in client.produce(topic, spread(40, 4, "before"))}
    wait_until(lambda: keys(first.records) == before, READ_TIMEOUT, lambda: f"{first}", [first])
    first.pause()
    first.consumer.commit()  # positions after the 40 records
    first.resume()
    mark = len(first.events)

    second = start(started, client, topic, topic, "second")
    wait_until(lambda: split([first, second], 4), JOIN_TIMEOUT,
               lambda: f"the newcomer did not get partitions: {first} {second}", [first, second])
    new_events = first.events[mark:]
    assert ("revoked", frozenset(range(4))) in new_events, f"range is eager: everything is revoked first: {first}"
    assert new_events[-1] == ("assigned", first.assignment), first
    assert ("assigned", second.assignment) in second.events, second

    after = {(a.partition, a.offset) for a in client.produce(topic, spread(40, 4, "after"))}
    wait_until(lambda: keys(first.records) | keys(second.records) >= before | after, READ_TIMEOUT,
               lambda: f"{first} {second}", [first, second])
    assert not keys(second.records) & before, "the newcomer re-read records the group had committed"
    seen = [(r.partition, r.offset) for m in (first, second) for r in m.records]
    assert len(seen) == len(set(seen)), "records read twice"


# -- committed offsets across a broker restart ------------------------------------------------------------


@pytest.mark.parametrize("client_name", CLIENTS)
def test_committed_offsets_survive_a_broker_restart(client_name: str, own_group_broker: BrokerProcess) -> None:
    broker, topic, group = own_group_broker, "commits", "survivors"
    create_topic(broker, topic, partitions=3)
    expected = {0: Committed(4, "zero"), 1: Committed(10, ""), 2: Committed(7, "two ☃")}
    client = make_client(client_name, broker.bootstrap)
    try:
        client.produce(topic, spread(30, 3, "r"))  # offsets 0..9 in each partition
        c = client.group_consumer(topic, group, session_timeout_ms=SESSION_MS)
        try:
            poll_until(c, lambda _: c.assignment() == frozenset(range(3)), JOIN_TIMEOUT,
                       lambda _: f"assigned {sorted(c.assignment())}")
            c.commit({0: (4, "zero"), 1: 10, 2: (7, "two ☃")})
            assert c.committed([0, 1, 2]) == expected
        finally:
            c.close()
    finally:
        client.close()

    broker.restart()

    client = make_client(client_name, broker.bootstrap)  # a new client: see test_restart.py
    try:
        # auto.offset.reset=none: without the committed offsets the client would fail.
        c = client.group_consumer(topic, group, offset_reset="none", session_timeout_ms=SESSION_MS)
        try:
            assert c.committed([0, 1, 2]) == expected
            want = {(0, o) for o in range(4, 10)} | {(2, o) for o in range(7, 10)}
            got = poll_until(c, lambda got: len(got) >= len(want), JOIN_TIMEOUT + READ_TIMEOUT,
                             lambda got: f"read {sorted(keys(got))}, want {sorted(want)}")
            got += c.poll(0.5)
            assert sorted(keys(got)) == sorted(want)
        finally:
            c.close()
    finally:
        client.close()


# -- static membership ---------------------------------------------------------------------------------


@pytest.mark.parametrize("restarting", ["follower", "leader"])
def test_static_member_restarts_without_a_rebalance(group_client: Client, group_broker: BrokerProcess,
                                                    started: list[Member | ChildMember], topic_name: str,
                                                    restarting: str) -> None:
    """The leader's case is the delicate one: its JoinGroup names it leader again, and what it then
    assigns in SyncGroup must not change the stable group's assignment."""
    client, topic = group_client, topic_name
    create_topic(group_broker, topic, partitions=4)
    leader = start(started, client, topic, topic, "leader", instance_id=f"{topic}-leader")
    wait_until(lambda: leader.assignment == frozenset(range(4)), JOIN_TIMEOUT, lambda: f"{leader}", [leader])
    follower = start(started, client, topic, topic, "follower", instance_id=f"{topic}-follower")
    wait_until(lambda: split([leader, follower], 4), JOIN_TIMEOUT, lambda: f"{leader} {follower}", [leader, follower])
    a, b = (leader, follower) if restarting == "follower" else (follower, leader)
    a_events, a_had, b_had = a.events, a.assignment, b.assignment

    b.close(leave=False)  # a static member never sends LeaveGroup
    restarted = time.monotonic()
    b2 = start(started, client, topic, topic, f"{b.name}-again", instance_id=f"{topic}-{b.name}")
    wait_until(lambda: b2.assignment == b_had, JOIN_TIMEOUT,
               lambda: f"the restarted static member did not get its partitions back: {b2}, before {sorted(b_had)}",
               [a, b2])
    back = time.monotonic() - restarted
    assert back < SESSION, f"took {back:.1f}s, longer than the session timeout"
    time.sleep(SESSION + 0.5)  # past the old session's expiry too
    assert a.events == a_events, f"the other member saw a rebalance: {a}"
    assert (a.assignment, b2.assignment) == (a_had, b_had), f"{a} {b2}"
    # (kafka-python and aiokafka report an empty revocation before a member's first join)
    assert [(kind, p) for kind, p in b2.events if kind != "assigned" and p] == [], b2

    acks = client.produce(topic, spread(40, 4, "static"))
    expected = {(k.partition, k.offset) for k in acks}
    wait_until(lambda: keys(a.records) | keys(b2.records) >= expected, READ_TIMEOUT, lambda: f"{a} {b2}", [a, b2])
    assert {p for p, _ in keys(b2.records)} == b_had


def test_second_instance_with_the_same_instance_id_fences_the_first(
        group_client: Client, group_broker: BrokerProcess, started: list[Member | ChildMember],
        topic_name: str) -> None:
    client, topic = group_client, topic_name
    if client.name == "aiokafka":
        pytest.skip("aiokafka rejoins on FENCED_INSTANCE_ID instead of failing, so two live instances with one "
                    "group.instance.id take the partitions from each other in turn")
    create_topic(group_broker, topic, partitions=4)
    other = start(started, client, topic, topic, "other", instance_id=f"{topic}-other")
    wait_until(lambda: other.assignment == frozenset(range(4)), JOIN_TIMEOUT, lambda: f"{other}", [other])
    first = start(started, client, topic, topic, "first", instance_id=f"{topic}-twin")
    wait_until(lambda: split([other, first], 4), JOIN_TIMEOUT, lambda: f"{other} {first}", [other, first])
    other_events, other_had, first_had = other.events, other.assignment, first.assignment

    second = start(started, client, topic, topic, "second", instance_id=f"{topic}-twin")  # the first still runs
    wait_until(lambda: second.assignment == first_had, JOIN_TIMEOUT,
               lambda: f"the second instance did not take the first one's partitions: {first} {second}",
               [other, second])
    # The first instance's next heartbeat is fenced: librdkafka makes that a fatal error of its poll.
    with contextlib.suppress(AssertionError):
        wait_until(lambda: first.error is not None, 2, lambda: "")
    error = first.stop_polling()
    if error is None:
        try:
            first.consumer.commit(dict.fromkeys(first_had, 0))  # kafka-python: its next commit fails
        except Exception as e:
            error = e
    assert error is not None, f"the fenced instance was told nothing: {first}"
    assert client.is_fenced_error(error), f"not FENCED_INSTANCE_ID: {error!r}"
    assert other.events == other_events and other.assignment == other_had, f"the other member saw a rebalance: {other}"


# -- cooperative-sticky --------------------------------------------------------------------------------


def test_cooperative_sticky_keeps_unaffected_partitions_assigned(
        group_client: Client, group_broker: BrokerProcess, started: list[Member | ChildMember],
        topic_name: str) -> None:
    client, topic = group_client, topic_name
    skip_without(client, "cooperative-sticky")
    create_topic(group_broker, topic, partitions=6)
    old = [start(started, client, topic, topic, name, assignor="cooperative-sticky") for name in ("a", "b")]
    wait_until(lambda: split(old, 6), JOIN_TIMEOUT, lambda: f"{old}", old)
    had = {m.name: m.assignment for m in old}
    marks = {m.name: len(m.events) for m in old}

    c = start(started, client, topic, topic, "c", assignor="cooperative-sticky")
    members = [*old, c]
    wait_until(lambda: split(members, 6) and all(len(m.assignment) == 2 for m in members), JOIN_TIMEOUT,
               lambda: f"{members}", members)
    for m in old:
        events = m.events[marks[m.name]:]
        revoked = frozenset().union(*(p for kind, p in events if kind in ("revoked", "lost")))
        assert not [e for e in events if e[0] == "lost"], m
        assert m.assignment <= had[m.name], f"{m.name} got partitions it did not have: {m}"
        assert revoked == had[m.name] - m.assignment, \
            f"{m.name} had {sorted(had[m.name])}, kept {sorted(m.assignment)}, revoked {sorted(revoked)}"


# -- at-least-once across a crash ----------------------------------------------------------------------


def test_at_least_once_with_manual_commits_across_a_consumer_crash(
        group_client: Client, group_broker: BrokerProcess, started: list[Member | ChildMember], topic_name: str,
        tmp_path: Path) -> None:
    client, topic, per_partition = group_client, topic_name, 200
    create_topic(group_broker, topic, partitions=3)
    produced = {(a.partition, a.offset) for a in client.produce(topic, spread(3 * per_partition, 3, "alo"))}
    # Polls of 20 records, 50 ms of "processing" each, then a synchronous commit of what was processed.
    first = start_child(started, tmp_path, client, topic, topic, "crashing", "--commit", "--max-records", "20",
                        "--delay", "0.05")
    wait_until(lambda: sum(first.committed.values()) >= 150, JOIN_TIMEOUT + READ_TIMEOUT,
               lambda: f"commits so far {first.committed}: {first}\n{first.stderr()}", [first])
    first.kill()
    last_commit = dict(first.committed)
    assert sum(last_commit.values()) < len(produced), "the consumer finished before the crash: make it slower"
    seen_first = set(first.records)

    second = start(started, client, topic, topic, "restarted")
    wait_until(lambda: seen_first | keys(second.records) >= produced, SESSION + JOIN_TIMEOUT + READ_TIMEOUT,
               lambda: f"missing {sorted(produced - seen_first - keys(second.records))[:10]}...: {second}", [second])
    for p in range(3):
        committed = last_commit.get(p, 0)
        read_before = {o for q, o in seen_first if q == p}
        assert set(range(committed)) <= read_before, f"partition {p}: records before the last commit not read"
        mine = sorted(o for q, o in keys(second.records) if q == p)
        begin = mine[0] if mine else per_partition
        # The restart begins at the last commit the crashed consumer saw acknowledged, or at a later
        # one it made but did not live to report; never past what it read.
        assert committed <= begin <= max(read_before, default=-1) + 1, \
            f"partition {p}: restarted at {begin}, last commit {committed}, read up to {max(read_before, default=-1)}"
        assert mine == list(range(begin, per_partition)), f"partition {p}: restarted consumer skipped records"


# -- automatic commits ---------------------------------------------------------------------------------


def test_auto_commit_resumes_where_the_last_member_left(group_client: Client, group_broker: BrokerProcess,
                                                         topic_name: str) -> None:
    client, topic = group_client, topic_name
    create_topic(group_broker, topic, partitions=2)
    client.produce(topic, spread(20, 2, "auto"))  # offsets 0..9 in each partition
    c = client.group_consumer(topic, topic, auto_commit=True, auto_commit_interval_ms=200,
                              session_timeout_ms=SESSION_MS)
    try:
        got = poll_until(c, lambda got: len(got) >= 20, JOIN_TIMEOUT + READ_TIMEOUT, lambda got: f"read {len(got)}")
        assert len(got) == 20
        everything = {0: Committed(10, ""), 1: Committed(10, "")}
        poll_until(c, lambda _: c.committed([0, 1]) == everything, 10,
                   lambda _: f"auto commit did not reach the positions: {c.committed([0, 1])}")
    finally:
        c.close()
    new = {(a.partition, a.offset) for a in client.produce(topic, spread(6, 2, "more"))}
    c = client.group_consumer(topic, topic, offset_reset="none", session_timeout_ms=SESSION_MS)
    try:
        got = poll_until(c, lambda got: len(got) >= 6, JOIN_TIMEOUT + READ_TIMEOUT,
                         lambda got: f"read {sorted(keys(got))}")
        got += c.poll(0.3)
        assert keys(got) == new
    finally:
        c.close()


# -- auto.offset.reset ---------------------------------------------------------------------------------


def _poll_for_error(c: GroupConsumer, timeout: float) -> Exception:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = c.poll(0.2)
        except Exception as e:
            return e
        assert got == [], f"none: read {sorted(keys(got))} without a committed offset"
    raise AssertionError(f"none: no error within {timeout:.0f}s for partitions without a committed offset")


@pytest.mark.parametrize("reset", OFFSET_RESETS)
def test_auto_offset_reset(group_client: Client, group_broker: BrokerProcess, topic_name: str, reset: str) -> None:
    client, topic = group_client, topic_name
    create_topic(group_broker, topic, partitions=2)
    old = {(a.partition, a.offset) for a in client.produce(topic, spread(10, 2, "old"))}  # offsets 0..4
    c = client.group_consumer(topic, topic, offset_reset=reset, session_timeout_ms=SESSION_MS)
    try:
        if reset == "earliest":
            got = poll_until(c, lambda got: len(got) >= 10, JOIN_TIMEOUT + READ_TIMEOUT,
                             lambda got: f"read {sorted(keys(got))}")
            assert keys(got) == old
        elif reset == "latest":
            got = poll_until(c, lambda _: c.assignment() == {0, 1}, JOIN_TIMEOUT, lambda _: "not assigned")
            quiet = time.monotonic() + 1.5
            while time.monotonic() < quiet:
                got += c.poll(0.2)
            assert got == [], "latest: records from before the member joined"
            new = {(a.partition, a.offset) for a in client.produce(topic, spread(6, 2, "new"))}
            got = poll_until(c, lambda got: len(got) >= 6, READ_TIMEOUT, lambda got: f"read {sorted(keys(got))}")
            assert keys(got) == new == {(p, o) for p in (0, 1) for o in range(5, 8)}
        else:
            error = _poll_for_error(c, JOIN_TIMEOUT)
            assert client.is_no_offset_error(error), f"not the client's no-offset error: {error!r}"
    finally:
        c.close()
    if reset != "none":
        return
    # With committed offsets, none starts there.
    setter = client.group_consumer(topic, topic, session_timeout_ms=SESSION_MS)
    try:
        poll_until(setter, lambda _: setter.assignment() == {0, 1}, JOIN_TIMEOUT, lambda _: "not assigned")
        setter.commit({0: 2, 1: 3})
    finally:
        setter.close()
    c = client.group_consumer(topic, topic, offset_reset="none", session_timeout_ms=SESSION_MS)
    try:
        got = poll_until(c, lambda got: len(got) >= 5, JOIN_TIMEOUT + READ_TIMEOUT,
                         lambda got: f"read {sorted(keys(got))}")
        assert keys(got) == {(0, 2), (0, 3), (0, 4), (1, 3), (1, 4)}
    finally:
        c.close()


# -- commit metadata -----------------------------------------------------------------------------------


def test_commit_metadata_for_several_partitions(group_client: Client, group_broker: BrokerProcess,
                                                topic_name: str) -> None:
    client, topic = group_client, topic_name
    create_topic(group_broker, topic, partitions=4)
    client.produce(topic, spread(40, 4, "meta"))  # offsets 0..9 in each partition
    c = client.group_consumer(topic, topic, session_timeout_ms=SESSION_MS)
    try:
        assert c.committed(range(4)) == dict.fromkeys(range(4))
        got = poll_until(c, lambda got: len(got) >= 40, JOIN_TIMEOUT + READ_TIMEOUT, lambda got: f"read {len(got)}")
        assert c.assignment() == {0, 1, 2, 3}
        assert len(got) == 40
        c.commit()  # the positions after what poll returned
        assert c.committed(range(4)) == {p: Committed(10, "") for p in range(4)}
        c.commit({0: (3, "alpha"), 1: (7, "ünïcødé ☃ metadata"), 2: (10, "x" * 300)})
        expected = {0: Committed(3, "alpha"), 1: Committed(7, "ünïcødé ☃ metadata"), 2: Committed(10, "x" * 300),
                    3: Committed(10, "")}
        assert c.committed(range(4)) == expected
    finally:
        c.close()
    # Another member reads the same, and starts there.
    c = client.group_consumer(topic, topic, offset_reset="none", session_timeout_ms=SESSION_MS)
    try:
        assert c.committed(range(4)) == expected
        got = poll_until(c, lambda got: len(got) >= 10, JOIN_TIMEOUT + READ_TIMEOUT,
                         lambda got: f"read {sorted(keys(got))}")
        got += c.poll(0.3)
        assert keys(got) == {(0, o) for o in range(3, 10)} | {(1, o) for o in range(7, 10)}
    finally:
        c.close()
