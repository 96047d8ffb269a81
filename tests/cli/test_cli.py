"""The client verbs (topics, produce, consume, configs) against a real broker subprocess.

One broker serves the module; each test uses its own topics. The verbs run as subprocesses, exactly
as a user runs them, with ``ODRADEK_BOOTSTRAP_SERVER`` pointing at the broker.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cli.consume import TextFormat
from odradek.cli.produce import LineError, LineReader

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(bootstrap: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if bootstrap is not None:
        env["ODRADEK_BOOTSTRAP_SERVER"] = bootstrap
    return env


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("broker-data")
    log_path = data.parent / "broker.log"
    port = _free_port()
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "odradek.cli.main", "serve", "--port", str(port), "--data-dir", str(data),
             "--override", "http.listeners="],
            cwd=ROOT, env=_env(), stdout=log_file, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"broker exited with {proc.returncode}:\n{log_path.read_text()}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        pytest.fail(f"broker did not listen on {port} within 20s:\n{log_path.read_text()}")
                    time.sleep(0.05)
            yield f"127.0.0.1:{port}"
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    assert proc.returncode == 0, f"broker exited with {proc.returncode}:\n{log_path.read_text()}"


class Cli:
    def __init__(self, bootstrap: str) -> None:
        self.env = _env(bootstrap)

    def __call__(self, *args: str, input: bytes | str | None = None,
                 timeout: float = 30) -> subprocess.CompletedProcess[str]:
        data = input.encode() if isinstance(input, str) else input
        proc = subprocess.run(
            [sys.executable, "-m", "odradek.cli.main", *args], cwd=ROOT, env=self.env, input=data,
            capture_output=True, timeout=timeout,
        )
        return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode("utf-8", "replace"),
                                           proc.stderr.decode("utf-8", "replace"))

    def ok(self, *args: str, input: bytes | str | None = None) -> str:
        r = self(*args, input=input)
        assert r.returncode == 0, f"odradek {' '.join(args)} failed ({r.returncode}):\n{r.stderr}"
        return r.stdout


@pytest.fixture(scope="module")
def cli(broker: str) -> Cli:
    return Cli(broker)


def _describe(cli: Cli, topic: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    lines = cli.ok("topics", "describe", "--topic", topic).splitlines()

    def fields(line: str) -> dict[str, str]:
        return dict(f.split(": ", 1) for f in line.strip("\t").split("\t"))

    return fields(lines[0]), [fields(line) for line in lines[1:]]


# -- topics --------------------------------------------------------------------------------------------


def test_topics_create_list_describe_alter_delete(cli: Cli) -> None:
    out = cli.ok("topics", "create", "--topic", "orders", "--partitions", "3", "--replication-factor", "1",
                 "--config", "retention.ms=86400000", "--config", "segment.bytes=1048576")
    assert "Created topic orders." in out
    assert "orders" in cli.ok("topics", "list").split()

    head, parts = _describe(cli, "orders")
    assert head["Topic"] == "orders"
    assert head["PartitionCount"] == "3"
    assert head["ReplicationFactor"] == "1"
    assert set(head["Configs"].split(",")) == {"retention.ms=86400000", "segment.bytes=1048576"}
    assert len(head["TopicId"]) == 22 and not set(head["TopicId"]) & set("+/=")  # Kafka's URL-safe base64
    assert [(p["Partition"], p["Leader"], p["Replicas"], p["Isr"]) for p in parts] == [
        (str(i), "1", "1", "1") for i in range(3)
    ]

    r = cli("topics", "create", "--topic", "orders")
    assert r.returncode == 1
    assert "already exists" in r.stderr and "--if-not-exists" in r.stderr
    cli.ok("topics", "create", "--topic", "orders", "--if-not-exists")

    assert "now has 5 partitions" in cli.ok("topics", "alter", "--topic", "orders", "--partitions", "5")
    head, parts = _describe(cli, "orders")
    assert head["PartitionCount"] == "5" and len(parts) == 5
    assert head["TopicId"] == _describe(cli, "orders")[0]["TopicId"]

    r = cli("topics", "alter", "--topic", "orders", "--partitions", "2")
    assert r.returncode == 1 and "INVALID_PARTITIONS" in r.stderr

    assert "Deleted topic orders." in cli.ok("topics", "delete", "--topic", "orders")
    assert "orders" not in cli.ok("topics", "list").split()
    r = cli("topics", "delete", "--topic", "orders")
    assert r.returncode == 1 and "does not exist" in r.stderr
    cli.ok("topics", "delete", "--topic", "orders", "--if-exists")


def test_topics_describe_unknown_topic(cli: Cli) -> None:
    r = cli("topics", "describe", "--topic", "no-such-topic")
    assert r.returncode == 1
    assert "topic 'no-such-topic' does not exist" in r.stderr
    assert "hint:" in r.stderr
    assert cli("topics", "describe", "--topic", "no-such-topic", "--if-exists").returncode == 0


def test_topics_list_regex_and_usage_errors(cli: Cli) -> None:
    for name in ("rx.a", "rx.b", "other-rx"):
        cli.ok("topics", "create", "--topic", name, "--partitions", "1")
    assert cli.ok("topics", "list", "--topic", r"rx\..*").split() == ["rx.a", "rx.b"]
    r = cli("topics", "create")
    assert r.returncode == 2 and "needs --topic" in r.stderr
    r = cli("topics", "create", "--topic", "bad name!")
    assert r.returncode == 1 and "TOPIC_EXCEPTION" in r.stderr
    r = cli("topics", "create", "--topic", "rf3", "--replication-factor", "3")
    assert r.returncode == 1 and "INVALID_REPLICATION_FACTOR" in r.stderr


# -- produce and consume ---------------------------------------------------------------------------


def test_produce_keys_and_headers_then_consume_in_several_formats(cli: Cli) -> None:
    cli.ok("topics", "create", "--topic", "fmt", "--partitions", "1")
    lines = "h1:a,h2:b\tk1:v1\n\tk2:v2\nh3:NULL\tNULL:v3\n"
    cli.ok("produce", "--topic", "fmt", "--property", "parse.headers=true", "--property", "parse.key=true",
           "--property", "key.separator=:", "--property", "null.marker=NULL", "--header", "src=test", input=lines)
    cli.ok("produce", "--topic", "fmt", "--key-separator", "=", input=b"bin=\xff\xfe\n")

    consume = ("consume", "--topic", "fmt", "--from-beginning", "--max-messages", "4")
    assert cli.ok(*consume).splitlines() == ["v1", "v2", "v3", "\ufffd\ufffd"]
    out = cli.ok(*consume, "--print-key", "--print-headers", "--print-partition", "--print-offset",
                 "--key-separator", "|")
    assert out.splitlines() == [
        "Partition:0|Offset:0|src:test,h1:a,h2:b|k1|v1",
        "Partition:0|Offset:1|src:test|k2|v2",
        "Partition:0|Offset:2|src:test,h3:null|null|v3",
        "Partition:0|Offset:3|NO_HEADERS|bin|\ufffd\ufffd",
    ]
    stamped = cli.ok(*consume, "--print-timestamp").splitlines()
    assert all(line.startswith("CreateTime:") for line in stamped)
    now_ms = time.time() * 1000
    assert all(abs(int(line.split("\t")[0].split(":")[1]) - now_ms) < 60_000 for line in stamped)

    records = [json.loads(line) for line in cli.ok(*consume, "--format", "json").splitlines()]
    assert [r["offset"] for r in records] == [0, 1, 2, 3]
    assert records[0]["key"] == "k1" and records[0]["value"] == "v1" and records[0]["key_encoding"] == "utf8"
    assert records[0]["headers"] == [
        {"key": "src", "value": "test", "value_encoding": "utf8"},
        {"key": "h1", "value": "a", "value_encoding": "utf8"},
        {"key": "h2", "value": "b", "value_encoding": "utf8"},
    ]
    assert records[2]["key"] is None and records[2]["headers"][1] == {"key": "h3", "value": None,
                                                                      "value_encoding": "utf8"}
    assert records[3]["value_encoding"] == "base64" and records[3]["value"] == "//4="
    assert records[0]["timestamp_type"] == "CreateTime" and records[0]["topic"] == "fmt"


def test_consume_from_offset_and_timestamp(cli: Cli) -> None:
    cli.ok("topics", "create", "--topic", "pos", "--partitions", "2")
    cli.ok("produce", "--topic", "pos", "--partition", "0", input="a0\na1\na2\n")
    cli.ok("produce", "--topic", "pos", "--partition", "1", input="c0\n")
    time.sleep(0.02)
    boundary = int(time.time() * 1000)
    time.sleep(0.02)
    cli.ok("produce", "--topic", "pos", "--partition", "0", input="b3\nb4\n")

    def read(*args: str) -> list[str]:
        return cli.ok("consume", "--topic", "pos", "--exit-at-end", *args).splitlines()

    assert read("--partition", "0", "--offset", "2") == ["a2", "b3", "b4"]
    assert read("--partition", "0", "--offset", "-1") == ["b4"]
    assert read("--partition", "0", "--offset", "99") == []  # clamped to the end
    assert read("--partition", "0", "--offset", "earliest") == ["a0", "a1", "a2", "b3", "b4"]
    assert read("--partition", "0", "--timestamp", str(boundary)) == ["b3", "b4"]
    assert read("--partition", "1", "--partition", "0", "--timestamp", str(boundary)) == ["b3", "b4"]
    assert sorted(read("--from-beginning")) == ["a0", "a1", "a2", "b3", "b4", "c0"]
    assert read("--partition", "1", "--offset", "latest") == []

    r = cli("consume", "--topic", "pos", "--from-beginning", "--partition", "1", "--timeout-ms", "300")
    assert r.returncode == 0 and r.stdout.splitlines() == ["c0"]
    assert "Processed a total of 1 messages" in r.stderr


def test_consume_errors(cli: Cli) -> None:
    r = cli("consume", "--topic", "never-created", "--exit-at-end")
    assert r.returncode == 1 and "UNKNOWN_TOPIC_OR_PART" in r.stderr and "topics create" in r.stderr
    cli.ok("topics", "create", "--topic", "two", "--partitions", "2")
    r = cli("consume", "--topic", "two", "--partition", "5", "--exit-at-end")
    assert r.returncode == 1 and "has no partition 5" in r.stderr
    r = cli("consume", "--topic", "two", "--from-beginning", "--offset", "3")
    assert r.returncode == 2  # mutually exclusive start positions


def test_produce_reports_bad_lines_and_failed_deliveries(cli: Cli) -> None:
    cli.ok("topics", "create", "--topic", "errs", "--partitions", "1", "--config", "max.message.bytes=1000")
    r = cli("produce", "--topic", "errs", "--key-separator", ":", input="k:v\nno separator\nk2:v2\n")
    assert r.returncode == 1
    assert "line 2: no key separator ':' found" in r.stderr
    assert cli.ok("consume", "--topic", "errs", "--from-beginning", "--max-messages", "2").splitlines() == ["v", "v2"]

    r = cli("produce", "--topic", "errs", "--linger-ms", "0", input="x" * 5000 + "\n")
    assert r.returncode == 1
    assert "line 1: not delivered" in r.stderr and "MSG_SIZE_TOO_LARGE" in r.stderr

    r = cli("produce", "--topic", "errs", "--partition", "3", input="x\n")
    assert r.returncode == 1 and "has no partition 3" in r.stderr


def test_produce_progress_compression_and_acks(cli: Cli) -> None:
    cli.ok("topics", "create", "--topic", "bulk", "--partitions", "3")
    lines = "".join(f"{i}\n" for i in range(2000))
    r = cli("produce", "--topic", "bulk", "--compression-type", "zstd", "--acks", "1", "--progress-every", "500",
            input=lines)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("lines read") >= 4
    r = cli("produce", "--topic", "bulk", "--compression-type", "gzip", "--quiet", input=lines)
    assert r.returncode == 0 and r.stderr == ""
    out = cli.ok("consume", "--topic", "bulk", "--from-beginning", "--max-messages", "4000")
    assert sorted(map(int, out.split())) == sorted(list(range(2000)) * 2)


# -- configs -----------------------------------------------------------------------------------------


def _configs(cli: Cli, topic: str, *extra: str) -> dict[str, dict[str, str]]:
    out = cli.ok("configs", "describe", "--entity-type", "topics", "--entity-name", topic, *extra)
    lines = out.splitlines()
    assert lines[0].endswith(f"for topic {topic} are:")
    result = {}
    for line in lines[1:]:
        name_value, *attrs = line.strip().split(" ")
        name, value = name_value.split("=", 1)
        result[name] = {"value": value, **dict(a.split("=", 1) for a in attrs)}
    return result


def test_configs_describe_alter_round_trip(cli: Cli) -> None:
    cli.ok("topics", "create", "--topic", "cfg", "--partitions", "1")
    before = _configs(cli, "cfg")
    assert before["retention.ms"]["source"] == "DEFAULT_CONFIG" and before["retention.ms"]["default"] == "true"
    assert {"value", "source", "default", "sensitive", "read-only"} <= set(before["retention.ms"])
    assert _configs(cli, "cfg", "--overrides-only") == {}

    out = cli.ok("configs", "alter", "--entity-type", "topics", "--entity-name", "cfg",
                 "--add-config", "retention.ms=1234,segment.bytes=1048576")
    assert "Completed updating config for topic cfg." in out
    after = _configs(cli, "cfg", "--overrides-only")
    assert {k: v["value"] for k, v in after.items()} == {"retention.ms": "1234", "segment.bytes": "1048576"}
    assert after["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG" and after["retention.ms"]["default"] == "false"
    assert "retention.ms=1234" in _describe(cli, "cfg")[0]["Configs"]

    cli.ok("configs", "alter", "--entity-type", "topics", "--entity-name", "cfg", "--delete-config", "retention.ms")
    final = _configs(cli, "cfg")
    assert final["retention.ms"] == before["retention.ms"]
    assert final["segment.bytes"]["value"] == "1048576"  # incremental: the other override stays

    r = cli("configs", "alter", "--entity-type", "topics", "--entity-name", "cfg", "--add-config", "no.such.key=1")
    assert r.returncode == 1 and "INVALID_CONFIG" in r.stderr
    r = cli("configs", "describe", "--entity-type", "topics", "--entity-name", "missing-topic")
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = cli("configs", "alter", "--entity-type", "topics", "--entity-name", "cfg")
    assert r.returncode == 2

    broker_out = cli.ok("configs", "describe", "--entity-type", "brokers", "--entity-name", "1")
    assert broker_out.startswith("Configs for broker 1 are:")
    assert any(line.strip().startswith("log.dirs=") for line in broker_out.splitlines())


# -- an unreachable broker -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "stdin"),
    [
        (("topics", "list"), None),
        (("topics", "create", "--topic", "x"), None),
        (("produce", "--topic", "x"), "line\n"),
        (("consume", "--topic", "x", "--from-beginning"), None),
        (("configs", "describe", "--entity-type", "topics", "--entity-name", "x"), None),
    ],
)
def test_unreachable_broker_fails_within_the_timeout(verb: tuple[str, ...], stdin: str | None) -> None:
    cli = Cli(f"127.0.0.1:{_free_port()}")  # nothing listens there
    started = time.monotonic()
    r = cli(*verb, "--request-timeout-ms", "800", input=stdin, timeout=20)
    assert time.monotonic() - started < 10
    assert r.returncode == 1
    assert "cannot reach a broker at 127.0.0.1:" in r.stderr and "odradek serve" in r.stderr


# -- pure parts ----------------------------------------------------------------------------------------


def test_line_reader_follows_kafka_console_producer() -> None:
    r = LineReader.from_properties({"parse.key": "true", "parse.headers": "true"}, [("f", b"1")])
    assert r.parse(b"a:1,b:2\tk\tv\tw", 1) == (b"k", b"v\tw", [("f", b"1"), ("a", b"1"), ("b", b"2")])
    assert r.parse(b"\tk\t", 2) == (b"k", b"", [("f", b"1")])
    with pytest.raises(LineError, match="line 3: no headers delimiter"):
        r.parse(b"no delimiter", 3)
    with pytest.raises(LineError, match="line 4: no header key separator"):
        r.parse(b"a\tk\tv", 4)
    lenient = LineReader.from_properties({"parse.key": "true", "ignore.error": "true"}, [])
    assert lenient.parse(b"just a value", 5) == (None, b"just a value", [])
    plain = LineReader()
    assert plain.parse(b"k\tv", 6) == (None, b"k\tv", [])


def test_text_format_matches_kafka_default_formatter() -> None:
    class Msg:
        def timestamp(self) -> tuple[int, int]:
            return (1, 1700000000000)

        def partition(self) -> int:
            return 2

        def offset(self) -> int:
            return 7

        def headers(self) -> list[tuple[str, bytes | None]]:
            return [("a", b"1"), ("n", None)]

        def key(self) -> bytes | None:
            return None

        def value(self) -> bytes:
            return b"v"

    fmt = TextFormat(print_key=True, print_timestamp=True, print_partition=True, print_offset=True,
                     print_headers=True)
    assert fmt.format(Msg()) == b"CreateTime:1700000000000\tPartition:2\tOffset:7\ta:1,n:null\tnull\tv\n"
    assert TextFormat().format(Msg()) == b"v\n"
