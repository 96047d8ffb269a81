"""``odradek groups list|describe|delete|reset-offsets`` against a real broker process.

One broker (``GROUP_OVERRIDES``: no initial rebalance delay, short sessions allowed) serves the
module; each test uses its own topics and groups. Groups are made by real confluent-kafka consumers
(subscribe, commit, close); the verbs run as subprocesses, as a user runs them; what they change is
read back with a consumer's ``committed()``. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cli import groups_reset
from odradek.cli._client import CliError
from odradek.cli.groups_reset import Target, parse_duration, parse_topic_specs, plan_offsets
from tests.broker.process import BrokerProcess, serving
from tests.cli.test_cli import Cli

GROUP_OVERRIDES = [
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=500",
    "offsets.topic.num.partitions=1",
    "num.partitions=3",
]
SESSION_MS = 6000
JOIN_TIMEOUT = 30.0
BASE_TS = 1577836800000  # 2020-01-01T00:00:00Z


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serving(tmp_path_factory.mktemp("groups-broker"), GROUP_OVERRIDES)


@pytest.fixture(scope="module")
def cli(group_broker: BrokerProcess) -> Cli:
    return Cli(group_broker.bootstrap)


@pytest.fixture(scope="module")
def admin(group_broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": group_broker.bootstrap})


@pytest.fixture
def consumers(group_broker: BrokerProcess) -> Iterator[Callable[..., Consumer]]:
    """Make consumers of groups; each is closed (LeaveGroup) at the end of the test if still open."""
    made: list[Consumer] = []

    def make(group: str, **conf: Any) -> Consumer:
        c = Consumer({
            "bootstrap.servers": group_broker.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300,
            "client.id": f"cli-test-{group}", **conf,
        })
        made.append(c)
        return c

    yield make
    for c in made:
        try:
            c.close()
        except RuntimeError:
            pass  # already closed


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def make_topic(admin: AdminClient, bootstrap: str, partitions: int, records: list[int],
               timestamps: Callable[[int], int] | None = None) -> str:
    """A topic whose partition p holds ``records[p]`` records (record i stamped ``timestamps(i)``)."""
    topic = unique("gt")
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=15)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False})
    for p, n in enumerate(records):
        for i in range(n):
            extra = {"timestamp": timestamps(i)} if timestamps else {}
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p, **extra)
    assert producer.flush(15) == 0
    return topic


def join(*members: Consumer, topics: list[str], parts: int) -> None:
    """Subscribe the members and poll them all until the group is stable with ``parts`` partitions assigned."""
    for m in members:
        m.subscribe(topics)
    deadline = time.monotonic() + JOIN_TIMEOUT
    while True:
        for m in members:
            m.poll(0.05)
        assigned = [len(m.assignment()) for m in members]
        if all(assigned) and sum(assigned) == parts:
            return
        assert time.monotonic() < deadline, f"group did not form within {JOIN_TIMEOUT}s: {assigned}"


def commit(c: Consumer, topic: str, offsets: dict[int, int]) -> None:
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets read back by a consumer that does not join (-1001: none)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}


def table(out: str, header: str) -> list[dict[str, str]]:
    """The rows of the table printed under ``header`` (its first column name), as dicts."""
    lines = out.splitlines()
    rows: list[dict[str, str]] = []
    cols: list[str] | None = None
    for line in lines:
        cells = re.split(r"\s{2,}", line.strip())
        if cells and cells[0] == header:
            cols = cells
        elif cols is not None and line.strip():
            rows.append(dict(zip(cols, cells, strict=True)))
        else:
            cols = None
    return rows


def empty_group(consumers: Callable[..., Consumer], topic: str, parts: int, offsets: dict[int, int]) -> str:
    """A group that had a member (protocol "consumer"), committed ``offsets`` and is now Empty."""
    group = unique("g")
    c = consumers(group)
    join(c, topics=[topic], parts=parts)
    commit(c, topic, offsets)
    c.close()
    return group


# -- list ------------------------------------------------------------------------------------------------


def test_list_with_state_filter(cli: Cli, admin: AdminClient, group_broker: BrokerProcess,
                                consumers: Callable[..., Consumer]) -> None:
    topic = make_topic(admin, group_broker.bootstrap, 2, [3, 3])
    idle = empty_group(consumers, topic, 2, {0: 1})
    busy = unique("g")
    join(consumers(busy), topics=[topic], parts=2)

    rows = {r["GROUP"]: r for r in table(cli.ok("groups", "list"), "GROUP")}
    assert rows[idle]["STATE"] == "Empty" and rows[idle]["PROTOCOL-TYPE"] == "consumer"
    assert rows[busy]["STATE"] == "Stable" and rows[busy]["PROTOCOL-TYPE"] == "consumer"

    stable = {r["GROUP"] for r in table(cli.ok("groups", "list", "--state", "Stable"), "GROUP")}
    assert busy in stable and idle not in stable
    empty = {r["GROUP"] for r in table(cli.ok("groups", "list", "--state", "empty,Dead"), "GROUP")}
    assert idle in empty and busy not in empty
    both = {r["GROUP"] for r in table(cli.ok("groups", "list", "--state", "stable", "--state", "EMPTY"), "GROUP")}
    assert {idle, busy} <= both


# -- describe --------------------------------------------------------------------------------------------


def test_describe_offsets_members_state(cli: Cli, admin: AdminClient, group_broker: BrokerProcess,
                                        consumers: Callable[..., Consumer]) -> None:
    topic = make_topic(admin, group_broker.bootstrap, 3, [10, 20, 30])
    group = unique("g")
    a, b = consumers(group, **{"client.id": "member-a"}), consumers(group, **{"client.id": "member-b"})
    join(a, b, topics=[topic], parts=3)
    owner = {tp.partition: m for m in (a, b) for tp in m.assignment()}
    commit(owner[0], topic, {0: 4})
    commit(owner[1], topic, {1: 20})
    member_ids = {m: m.memberid() for m in (a, b)}

    rows = table(cli.ok("groups", "describe", "--group", group), "GROUP")
    got = {int(r["PARTITION"]): r for r in rows}
    assert sorted(got) == [0, 1, 2] and {r["GROUP"] for r in rows} == {group} and {r["TOPIC"] for r in rows} == {topic}
    assert [(got[p]["CURRENT-OFFSET"], got[p]["LOG-END-OFFSET"], got[p]["LAG"]) for p in range(3)] == [
        ("4", "10", "6"), ("20", "20", "0"), ("-", "30", "-")]
    for p in range(3):
        assert got[p]["CONSUMER-ID"] == member_ids[owner[p]]
        assert got[p]["CLIENT-ID"] == ("member-a" if owner[p] is a else "member-b")
        assert got[p]["HOST"] != "-"

    members = table(cli.ok("groups", "describe", "--group", group, "--members"), "GROUP")
    assert {r["CONSUMER-ID"] for r in members} == set(member_ids.values())
    assigned: list[int] = []
    for r in members:
        m = a if r["CLIENT-ID"] == "member-a" else b
        parts = sorted(tp.partition for tp in m.assignment())
        assert r["#PARTITIONS"] == str(len(parts))
        assert r["ASSIGNMENT"] == f"{topic}({','.join(map(str, parts))})"
        assigned += parts
    assert sorted(assigned) == [0, 1, 2]

    [state] = table(cli.ok("groups", "describe", "--group", group, "--state"), "GROUP")
    assert state["STATE"] == "Stable" and state["#MEMBERS"] == "2" and state["ASSIGNMENT-STRATEGY"] == "range"
    assert state["COORDINATOR (ID)"] == f"{group_broker.bootstrap} (1)"

    a.close()
    b.close()
    out = cli.ok("groups", "describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in out
    rows = table(out, "GROUP")
    assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"], r["CONSUMER-ID"], r["HOST"],
             r["CLIENT-ID"]) for r in rows] == [("0", "4", "10", "6", "-", "-", "-"),
                                                ("1", "20", "20", "0", "-", "-", "-")]
    out = cli.ok("groups", "describe", "--group", group, "--members")
    assert f"Consumer group '{group}' has no active members." in out and not table(out, "GROUP")
    [state] = table(cli.ok("groups", "describe", "--group", group, "--state"), "GROUP")
    assert state["STATE"] == "Empty" and state["#MEMBERS"] == "0"


def test_describe_several_and_missing_groups(cli: Cli, admin: AdminClient, group_broker: BrokerProcess,
                                             consumers: Callable[..., Consumer]) -> None:
    topic = make_topic(admin, group_broker.bootstrap, 1, [5])
    g1 = empty_group(consumers, topic, 1, {0: 2})
    g2 = empty_group(consumers, topic, 1, {0: 5})
    missing = unique("missing")
    r = cli("groups", "describe", "--group", g1, "--group", missing, "--group", g2)
    assert r.returncode == 1
    assert f"Consumer group '{missing}' does not exist." in r.stderr
    lags = {row["GROUP"]: row["LAG"] for row in table(r.stdout, "GROUP")}
    assert lags == {g1: "3", g2: "0"}

    out = cli.ok("groups", "describe", "--all-groups")
    lags = {row["GROUP"]: row["LAG"] for row in table(out, "GROUP")}
    assert lags[g1] == "3" and lags[g2] == "0"


# -- delete ----------------------------------------------------------------------------------------------


def test_delete_empty_ok_non_empty_refused(cli: Cli, admin: AdminClient, group_broker: BrokerProcess,
                                           consumers: Callable[..., Consumer]) -> None:
    topic = make_topic(admin, group_broker.bootstrap, 1, [3])
    idle = empty_group(consumers, topic, 1, {0: 3})
    busy = unique("g")
    join(consumers(busy), topics=[topic], parts=1)

    r = cli("groups", "delete", "--group", busy, "--group", idle)
    assert r.returncode == 1
    assert f"Deleted consumer group '{idle}'." in r.stdout
    assert f"cannot delete group '{busy}': it has active members" in r.stderr and "stop its consumers" in r.stderr
    listed = {row["GROUP"] for row in table(cli.ok("groups", "list"), "GROUP")}
    assert busy in listed and idle not in listed
    assert committed(group_broker.bootstrap, idle, topic, 1) == {}

    r = cli("groups", "delete", "--group", idle)
    assert r.returncode == 1 and "does not exist" in r.stderr


# -- reset-offsets ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reset_topic(admin: AdminClient, group_broker: BrokerProcess) -> str:
    """3 partitions of 10 records each; records 0-4 stamped 2020-01-01T00:0i:00Z, 5-9 a minute ago;
    partition 0 starts at offset 2 (records before it deleted)."""
    recent = int(time.time() * 1000) - 60_000
    topic = make_topic(admin, group_broker.bootstrap, 3, [10, 10, 10],
                       lambda i: BASE_TS + i * 60_000 if i < 5 else recent + i)
    admin.delete_records([TopicPartition(topic, 0, 2)])[TopicPartition(topic, 0, 2)].result(timeout=15)
    return topic


BASELINE = {0: 6, 1: 3}  # committed before each reset; partition 2 has no committed offset

RESETS = [
    # (options, partitions option, new offsets, a WARN expected)
    (["--to-earliest"], None, {0: 2, 1: 0}, False),
    (["--to-latest"], None, {0: 10, 1: 10}, False),
    (["--to-offset", "1"], None, {0: 2, 1: 1}, True),
    (["--to-offset", "12"], None, {0: 10, 1: 10}, True),
    (["--shift-by", "-5"], "--all-topics", {0: 2, 1: 0}, True),
    (["--shift-by", "3"], "--all-topics", {0: 9, 1: 6}, False),
    (["--shift-by", "30"], "--all-topics", {0: 10, 1: 10}, True),
    (["--to-current"], "all", {0: 6, 1: 3, 2: 10}, False),
    (["--to-datetime", "2020-01-01T00:03:30Z"], "all", {0: 4, 1: 4, 2: 4}, False),
    (["--to-datetime", "2020-01-01T01:00:00+01:00"], None, {0: 2, 1: 0}, False),
    (["--to-datetime", "2100-01-01T00:00:00.000"], None, {0: 10, 1: 10}, False),
    (["--by-duration", "PT1H"], "all", {0: 5, 1: 5, 2: 5}, False),
    (["--by-duration", "P1DT2H"], None, {0: 5, 1: 5}, False),
]


@pytest.mark.parametrize(("mode", "which", "expected", "warns"), RESETS, ids=[" ".join(r[0]) for r in RESETS])
def test_reset_offsets_dry_run_then_execute(cli: Cli, group_broker: BrokerProcess, reset_topic: str,
                                            consumers: Callable[..., Consumer], mode: list[str],
                                            which: str | None, expected: dict[int, int], warns: bool) -> None:
    group = empty_group(consumers, reset_topic, 3, BASELINE)
    scope = {None: ["--topic", f"{reset_topic}:0,1"], "all": ["--topic", reset_topic],
             "--all-topics": ["--all-topics"]}[which]
    argv = ["groups", "reset-offsets", "--group", group, *scope, *mode]
    plan_rows = [{"GROUP": group, "TOPIC": reset_topic, "PARTITION": str(p), "NEW-OFFSET": str(o)}
                 for p, o in sorted(expected.items())]

    for dry in ([], ["--dry-run"]):
        r = cli(*argv, *dry)
        assert r.returncode == 0, r.stderr
        assert table(r.stdout, "GROUP") == plan_rows
        assert "Dry run: nothing was changed" in r.stderr and ("WARN: New offset" in r.stderr) == warns
        assert committed(group_broker.bootstrap, group, reset_topic, 3) == BASELINE

    r = cli(*argv, "--execute")
    assert r.returncode == 0, r.stderr
    assert table(r.stdout, "GROUP") == plan_rows and "Dry run" not in r.stderr
    assert committed(group_broker.bootstrap, group, reset_topic, 3) == {**BASELINE, **expected}


def test_reset_offsets_new_group_and_errors(cli: Cli, group_broker: BrokerProcess, reset_topic: str,
                                            consumers: Callable[..., Consumer]) -> None:
    fresh = unique("fresh")
    r = cli("groups", "reset-offsets", "--group", fresh, "--topic", f"{reset_topic}:1", "--to-offset", "7", "--execute")
    assert r.returncode == 0, r.stderr
    assert committed(group_broker.bootstrap, fresh, reset_topic, 3) == {1: 7}

    group = empty_group(consumers, reset_topic, 3, BASELINE)
    r = cli("groups", "reset-offsets", "--group", group, "--topic", reset_topic, "--shift-by", "1")
    assert r.returncode == 1 and f"cannot shift the offset of {reset_topic}-2" in r.stderr

    r = cli("groups", "reset-offsets", "--group", unique("none"), "--all-topics", "--to-earliest")
    assert r.returncode == 1 and "has no committed offsets" in r.stderr

    r = cli("groups", "reset-offsets", "--group", group, "--topic", "no-such-topic", "--to-earliest", "--execute")
    assert r.returncode == 1 and "topic 'no-such-topic' does not exist" in r.stderr

    r = cli("groups", "reset-offsets", "--group", group, "--topic", f"{reset_topic}:0,5", "--to-earliest")
    assert r.returncode == 1 and "has no partition 5" in r.stderr
    assert committed(group_broker.bootstrap, group, reset_topic, 3) == BASELINE


def test_reset_offsets_refused_for_active_group(cli: Cli, admin: AdminClient, group_broker: BrokerProcess,
                                                consumers: Callable[..., Consumer]) -> None:
    topic = make_topic(admin, group_broker.bootstrap, 2, [5, 5])
    group = unique("g")
    c = consumers(group)
    join(c, topics=[topic], parts=2)
    commit(c, topic, {0: 3, 1: 4})
    r = cli("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert r.returncode == 1
    assert (f"Assignments can only be reset if the group '{group}' is inactive, but the current state is Stable."
            in r.stderr)
    assert committed(group_broker.bootstrap, group, topic, 2) == {0: 3, 1: 4}
    # the group turning active between the state check and the commit: the broker refuses the commit
    args = argparse.Namespace(request_timeout_ms=10_000, bootstrap_server=group_broker.bootstrap)
    with pytest.raises(CliError, match="the group became active"):
        groups_reset._commit(admin, args, group, {(topic, 0): 1})
    c.close()
    cli.ok("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert committed(group_broker.bootstrap, group, topic, 2) == {0: 0, 1: 0}


# -- bad arguments ---------------------------------------------------------------------------------------

BAD = [
    (["describe"], "needs --group"),
    (["describe", "--group", "g", "--all-groups"], "either --group or --all-groups"),
    (["describe", "--group", "g", "--members", "--state"], "choose one view"),
    (["describe", "--group", "g", "--state", "Stable"], "takes no values"),
    (["list", "--state", "Sleeping"], "'Sleeping' is not a group state"),
    (["list", "--group", "g"], "takes no --group"),
    (["list", "--members"], "--members is only for describe"),
    (["delete", "--group", "g", "--state"], "--state is for list and describe"),
    (["delete", "--group", "g", "--to-earliest"], "--to-earliest is only for reset-offsets"),
    (["reset-offsets", "--group", "g", "--topic", "t"], "needs where to reset to"),
    (["reset-offsets", "--group", "g", "--to-latest"], "needs --topic"),
    (["reset-offsets", "--group", "g", "--topic", "t", "--all-topics", "--to-latest"], "not both"),
    (["reset-offsets", "--group", "g", "--topic", "t", "--to-latest", "--to-earliest"], "not allowed with"),
    (["reset-offsets", "--group", "g", "--topic", "t", "--to-latest", "--dry-run", "--execute"], "not allowed with"),
    (["reset-offsets", "--group", "g", "--topic", "t:x", "--to-latest"], "'x' is not a partition number"),
    (["reset-offsets", "--group", "g", "--topic", "t", "--to-offset", "-1"], "must not be negative"),
    (["reset-offsets", "--group", "g", "--topic", "t", "--shift-by", "two"], "is not an integer"),
    (["reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "yesterday"], "is not a date-time"),
    (["reset-offsets", "--group", "g", "--topic", "t", "--by-duration", "PT"], "is not a duration"),
    (["reset-offsets", "--group", "g", "--topic", "t", "--by-duration", "1 hour"], "is not a duration"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_arguments(argv: list[str], message: str) -> None:
    # no broker is needed: usage errors are found before connecting
    r = Cli("127.0.0.1:1")("groups", *argv, "--request-timeout-ms", "1000")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr


def test_unreachable_broker() -> None:
    r = Cli("127.0.0.1:1")("groups", "list", "--request-timeout-ms", "1000")
    assert r.returncode == 1 and "cannot reach a broker at 127.0.0.1:1" in r.stderr


# -- the pure parts --------------------------------------------------------------------------------------


def test_plan_offsets_rules() -> None:
    tps = [("t", 0), ("t", 1)]
    lo, hi = {("t", 0): 5, ("t", 1): 0}, {("t", 0): 50, ("t", 1): 8}
    plan = plan_offsets(Target("shift_by", -10), tps, {("t", 0): 12, ("t", 1): 4}, lo, hi)
    assert plan.offsets == {("t", 0): 5, ("t", 1): 0} and len(plan.notes) == 2
    plan = plan_offsets(Target("to_datetime", 0), tps, {}, lo, hi, {("t", 0): 7, ("t", 1): -1})
    assert plan.offsets == {("t", 0): 7, ("t", 1): 8} and not plan.notes
    assert parse_duration("P1DT2H3M4.5S").total_seconds() == 86400 + 7200 + 180 + 4.5
    assert parse_duration("1h30m").total_seconds() == 5400
    assert parse_topic_specs(["a", "b:2,0", "b:1", "a:3"]) == {"a": None, "b": [0, 1, 2]}
