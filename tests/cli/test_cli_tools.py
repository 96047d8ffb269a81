"""``odradek --version``, ``get-offsets``, ``delete-records``, ``perf produce|consume``, ``configs --entity-default``
for brokers, and a closed stdout, against a real broker process.

One broker serves the module; each test uses its own topics. The verbs run as subprocesses, as a user runs them;
what they change is read back with confluent-kafka.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker.process import REPO_ROOT, BrokerProcess, serving
from tests.cli.test_cli import Cli

BASE_TS = 1577836800000  # 2020-01-01T00:00:00Z


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serving(tmp_path_factory.mktemp("tools-broker"), ["group.initial.rebalance.delay.ms=0"])


@pytest.fixture(scope="module")
def cli(broker: BrokerProcess) -> Cli:
    return Cli(broker.bootstrap)


def _topic(cli: Cli, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cli.ok("topics", "create", "--topic", name, "--partitions", str(partitions))
    return name


def _produce(bootstrap: str, topic: str, partition: int, count: int, ts0: int = BASE_TS) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        p.produce(topic, f"v{i}".encode(), partition=partition, timestamp=ts0 + i * 1000)
    assert p.flush(20) == 0


def _offsets(out: str) -> dict[tuple[str, int], int]:
    found = {}
    for line in out.splitlines():
        topic, partition, offset = line.rsplit(":", 2)
        found[(topic, int(partition))] = int(offset)
    return found


def test_version(cli: Cli) -> None:
    out = cli.ok("--version")
    assert re.fullmatch(r"odradek \S+\n", out)


# -- get-offsets ------------------------------------------------------------------------------------------------


def test_get_offsets_latest_earliest_and_by_timestamp(cli: Cli, broker: BrokerProcess) -> None:
    topic = _topic(cli, partitions=2)
    _produce(broker.bootstrap, topic, 0, 5)
    _produce(broker.bootstrap, topic, 1, 3)
    assert _offsets(cli.ok("get-offsets", "--topic", topic)) == {(topic, 0): 5, (topic, 1): 3}
    assert _offsets(cli.ok("get-offsets", "--topic", topic, "--time", "-1")) == {(topic, 0): 5, (topic, 1): 3}
    assert _offsets(cli.ok("get-offsets", "--topic", topic, "--time", "-2")) == {(topic, 0): 0, (topic, 1): 0}
    assert _offsets(cli.ok("get-offsets", "--topic", topic, "--time", "earliest")) == {(topic, 0): 0, (topic, 1): 0}
    # the record with the largest timestamp (the last one written here)
    assert _offsets(cli.ok("get-offsets", "--topic", topic, "--time", "-3")) == {(topic, 0): 4, (topic, 1): 2}
    # the first record at or after the timestamp; partition 1 has none after BASE_TS + 3 s: left out
    at = str(BASE_TS + 3000)
    assert _offsets(cli.ok("get-offsets", "--topic", topic, "--time", at)) == {(topic, 0): 3}
    # --partitions and --topic-partitions
    assert _offsets(cli.ok("get-offsets", "--topic", topic, "--partitions", "1")) == {(topic, 1): 3}
    assert _offsets(cli.ok("get-offsets", "--topic-partitions", f"{topic}:1-")) == {(topic, 1): 3}
    assert _offsets(cli.ok("get-offsets", "--topic-partitions", f"{topic}:-1")) == {(topic, 0): 5}


def test_get_offsets_of_nothing_is_an_error(cli: Cli) -> None:
    r = cli("get-offsets", "--topic", "no-such-topic-.*")
    assert r.returncode == 1
    assert "no partition matches the filters" in r.stderr
    assert r.stdout == ""


# -- delete-records ---------------------------------------------------------------------------------------------


def _first_offset_read(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, partition)])  # no offset given: the reset policy, i.e. the log start
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                return int(msg.offset())
        raise AssertionError("no record read within 20 s")
    finally:
        c.close()


def test_delete_records_with_kafkas_json_file(cli: Cli, broker: BrokerProcess, tmp_path: Path) -> None:
    topic = _topic(cli, partitions=2)
    _produce(broker.bootstrap, topic, 0, 6)
    _produce(broker.bootstrap, topic, 1, 4)
    plan = tmp_path / "offsets.json"
    plan.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": topic, "partition": 0, "offset": 3},
                    {"topic": topic, "partition": 1, "offset": -1},
                ],
                "version": 1,
            }
        )
    )
    out = cli.ok("delete-records", "--offset-json-file", str(plan))
    assert out.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 3",
        f"partition: {topic}-1\tlow_watermark: 4",
    ]
    assert _offsets(cli.ok("get-offsets", "--topic", topic, "--time", "-2")) == {(topic, 0): 3, (topic, 1): 4}
    assert _first_offset_read(broker.bootstrap, topic, 0) == 3


def test_delete_records_simple_form(cli: Cli, broker: BrokerProcess) -> None:
    topic = _topic(cli)
    _produce(broker.bootstrap, topic, 0, 5)
    out = cli.ok("delete-records", "--topic", topic, "--partition", "0", "--offset", "2")
    assert f"partition: {topic}-0\tlow_watermark: 2" in out
    assert _first_offset_read(broker.bootstrap, topic, 0) == 2
    r = cli("delete-records", "--topic", topic, "--partition", "0", "--offset", "99")
    assert r.returncode == 1
    assert f"partition: {topic}-0\terror: " in r.stdout and "OFFSET_OUT_OF_RANGE" in r.stdout


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"version": 1}, 'has no "partitions" list'),
        ({"partitions": [{"topic": "t", "partition": 0}]}, 'has no "offset"'),
        (
            {"partitions": [{"topic": "t", "partition": 0, "offset": 1}, {"topic": "t", "partition": 0, "offset": 2}]},
            "names a partition more than once: t-0",
        ),
    ],
)
def test_delete_records_bad_files_are_usage_errors(cli: Cli, tmp_path: Path, doc: object, needle: str) -> None:
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps(doc))
    r = cli("delete-records", "--offset-json-file", str(plan))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr


# -- perf -------------------------------------------------------------------------------------------------------

PRODUCER_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max "
    r"latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\."
)


def test_perf_produce_then_consume(cli: Cli, broker: BrokerProcess) -> None:
    topic = _topic(cli)
    r = cli(
        "perf",
        "produce",
        "--topic",
        topic,
        "--num-records",
        "500",
        "--record-size",
        "100",
        "--throughput",
        "1000",
        "--producer-props",
        "acks=all",
        "linger.ms=1",
        "--reporting-interval",
        "100",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    m = PRODUCER_SUMMARY.fullmatch(lines[-1])
    assert m is not None, r.stdout
    count, rate, _, avg, mx, p50, p95, p99, p999 = (float(g) for g in m.groups())
    assert count == 500
    assert rate <= 1000 * 1.1  # held to --throughput
    assert 0 <= p50 <= p95 <= p99 <= p999 <= mx and avg <= mx
    assert any(re.fullmatch(r"\d+ records sent, [\d.]+ records/sec .*max latency\.", line) for line in lines[:-1])
    assert _offsets(cli.ok("get-offsets", "--topic", topic)) == {(topic, 0): 500}

    r = cli("perf", "consume", "--topic", topic, "--num-records", "500", "--timeout", "15000")
    assert r.returncode == 0, r.stderr
    header, values = r.stdout.splitlines()
    columns = [c.strip() for c in header.split(",")]
    assert columns[:10] == [
        "start.time",
        "end.time",
        "data.consumed.in.MB",
        "MB.sec",
        "data.consumed.in.nMsg",
        "nMsg.sec",
        "rebalance.time.ms",
        "fetch.time.ms",
        "fetch.MB.sec",
        "fetch.nMsg.sec",
    ]
    row = dict(zip(columns, (v.strip() for v in values.split(",")), strict=True))
    assert int(row["data.consumed.in.nMsg"]) == 500
    assert float(row["data.consumed.in.MB"]) == pytest.approx(500 * 100 / 1024 / 1024, abs=1e-4)
    assert float(row["e2e.latency.p50.ms"]) <= float(row["e2e.latency.max.ms"])


def test_perf_produce_from_a_payload_file(cli: Cli, tmp_path: Path) -> None:
    topic = _topic(cli)
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha\nbeta\ngamma\n")
    r = cli("perf", "produce", "--topic", topic, "--num-records", "30", "--payload-file", str(payloads))
    assert r.returncode == 0, r.stderr
    assert PRODUCER_SUMMARY.fullmatch(r.stdout.splitlines()[-1]).group(1) == "30"  # type: ignore[union-attr]


def test_perf_consume_gives_up_after_the_timeout(cli: Cli) -> None:
    topic = _topic(cli)
    r = cli("perf", "consume", "--topic", topic, "--num-records", "10", "--timeout", "1000", "--hide-header")
    assert r.returncode == 1
    assert "exiting after 0 of 10 records" in r.stderr
    assert len(r.stdout.splitlines()) == 1  # the summary line, no header


# -- configs --entity-default for brokers ----------------------------------------------------------------------------


def test_configs_entity_default_for_brokers(cli: Cli) -> None:
    base = ("configs", "alter", "--entity-type", "brokers", "--entity-default")
    assert "Completed updating default config for brokers in the cluster." in cli.ok(
        *base, "--add-config", "log.retention.ms=7200000"
    )
    try:
        out = cli.ok("configs", "describe", "--entity-type", "brokers", "--entity-default")
        assert out.splitlines()[0] == "Default configs for brokers in the cluster are:"
        assert "  log.retention.ms=7200000 source=DYNAMIC_DEFAULT_BROKER_CONFIG" in out
        broker = cli.ok("configs", "describe", "--entity-type", "brokers", "--entity-name", "1")
        assert "log.retention.ms=7200000 source=DYNAMIC_DEFAULT_BROKER_CONFIG" in broker
        r = cli(*base, "--add-config", "num.io.threads=3")
        assert r.returncode == 1 and "num.io.threads is read-only" in r.stderr
    finally:
        cli.ok(*base, "--delete-config", "log.retention.ms")
    assert "log.retention.ms" not in cli.ok("configs", "describe", "--entity-type", "brokers", "--entity-default")


# -- a closed stdout ----------------------------------------------------------------------------------------------


def _env(bootstrap: str) -> dict[str, str]:
    env = dict(os.environ, ODRADEK_BOOTSTRAP_SERVER=bootstrap)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def test_closed_stdout_ends_quietly(broker: BrokerProcess) -> None:
    """The reader of stdout is gone before the verb writes (what ``| head -1`` does to long output)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek.cli.main", "configs", "describe", "--entity-type", "brokers"],
        cwd=REPO_ROOT,
        env=_env(broker.bootstrap),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()


def test_head_of_a_pipeline_gets_its_line(broker: BrokerProcess) -> None:
    """``odradek configs describe ... | head -1`` as a shell runs it: one line out, nothing on stderr."""
    cmd = (
        f"{sys.executable} -m odradek.cli.main configs describe --entity-type brokers | head -1; "
        "exit ${PIPESTATUS[0]}"
    )
    r = subprocess.run(["bash", "-c", cmd], cwd=REPO_ROOT, env=_env(broker.bootstrap), capture_output=True, timeout=60)
    assert r.stdout.decode().splitlines() == ["Configs for broker 1 are:"]
    assert r.stderr == b"", r.stderr.decode()
    assert r.returncode in (0, 141)


# -- reassign-partitions --verify --wait ------------------------------------------------------------------------------


def test_verify_wait_polls_until_no_reassignment_runs() -> None:
    from odradek.cli.reassign import COMPLETED, RUNNING, wait_for

    now = [0.0]
    answers = iter(
        [
            {"a": (RUNNING, None), "b": (RUNNING, None)},
            {"a": (COMPLETED, [1]), "b": (RUNNING, None)},
            {"a": (COMPLETED, [1]), "b": (COMPLETED, [2])},
        ]
    )
    seen: list[int] = []

    def sleep(s: float) -> None:
        now[0] += s

    found = wait_for(lambda: next(answers), 60, clock=lambda: now[0], sleep=sleep, progress=seen.append)
    assert found == {"a": (COMPLETED, [1]), "b": (COMPLETED, [2])}
    assert seen == [0, 1, 2] and now[0] == 2.0

    stuck = wait_for(lambda: {"a": (RUNNING, None)}, 3, clock=lambda: now[0], sleep=sleep)
    assert stuck == {"a": (RUNNING, None)} and now[0] == 5.0  # gave up after the timeout


def test_verify_wait_against_a_broker(cli: Cli, tmp_path: Path) -> None:
    topic = _topic(cli)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1]}]}))
    cli.env["ODRADEK_PROGRESS"] = "1"  # draw the bar although stderr is a pipe
    try:
        r = cli("reassign-partitions", "--verify", "--reassignment-json-file", str(plan), "--wait", "10")
    finally:
        del cli.env["ODRADEK_PROGRESS"]
    assert r.returncode == 0, r.stderr
    assert f"Reassignment of partition {topic}-0 is completed." in r.stdout
    assert "reassignments completed" in r.stderr and "reassignments completed" not in r.stdout
