"""``odradek transactions list|describe|describe-producers|find-hanging|abort`` against a real broker process.

One broker serves the module; each test uses its own topics and transactional ids (and looks only
at its own rows, since the ids of other tests are listed too). Transactions are made by real
confluent-kafka transactional producers and left open, committed or aborted; the verbs run as
subprocesses, as a user runs them. Every wait is bounded. The pure parts (option parsing, the
hanging-transaction rule, row formatting, client config translation) are tested without a broker.
"""

from __future__ import annotations

import argparse
import re
import time
import uuid
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition

from odradek.cli import transactions as tx
from odradek.cli._client import CliError
from odradek.cli._kafka_python import client_config
from tests.broker.process import BrokerProcess, free_port, serving
from tests.cli.test_cli import Cli

TXN_OVERRIDES = ["transaction.state.log.num.partitions=1", "offsets.topic.num.partitions=1"]
TXN_TIMEOUT_MS = 45_000
STATE_WAIT_S = 15.0


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serving(tmp_path_factory.mktemp("txn-broker"), TXN_OVERRIDES)


@pytest.fixture(scope="module")
def cli(txn_broker: BrokerProcess) -> Cli:
    return Cli(txn_broker.bootstrap)


@pytest.fixture
def producers(txn_broker: BrokerProcess) -> Iterator[Callable[[str], Producer]]:
    """Transactional producers with ``init_transactions`` done; each is flushed at the end of the test."""
    made: list[Producer] = []

    def make(tid: str) -> Producer:
        p = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": tid,
                      "transaction.timeout.ms": TXN_TIMEOUT_MS, "linger.ms": 0})
        p.init_transactions(30)
        made.append(p)
        return p

    yield make
    for p in made:
        p.flush(5)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def make_topic(bootstrap: str, partitions: int) -> str:
    topic = unique("txt")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=15)
    return topic


def produce_open(p: Producer, topic: str, per_partition: dict[int, int]) -> None:
    """Begin a transaction and write ``per_partition[p]`` records to each partition, all acknowledged."""
    p.begin_transaction()
    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, value=f"{part}-{i}".encode(), partition=part)
    assert p.flush(15) == 0


def table(out: str) -> list[dict[str, str]]:
    """The rows of the (single) table the verb printed, as dicts keyed by its header."""
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines, "no output"
    cols = re.split(r"\s{2,}", lines[0].strip())
    return [dict(zip(cols, re.split(r"\s{2,}", line.strip()), strict=True)) for line in lines[1:]]


def listed(cli: Cli, *args: str) -> dict[str, dict[str, str]]:
    return {r["TransactionalId"]: r for r in table(cli.ok("transactions", "list", *args))}


def described(cli: Cli, tid: str) -> dict[str, str]:
    rows = table(cli.ok("transactions", "describe", "--transactional-id", tid))
    assert len(rows) == 1
    return rows[0]


def wait_for_state(cli: Cli, tid: str, state: str) -> dict[str, str]:
    """describe until the id reaches ``state`` (after EndTxn it passes through Prepare*), bounded."""
    deadline = time.monotonic() + STATE_WAIT_S
    while True:
        row = described(cli, tid)
        if row["TransactionState"] == state:
            return row
        assert time.monotonic() < deadline, f"{tid} stayed {row['TransactionState']}, expected {state}"
        time.sleep(0.1)


def producers_of(cli: Cli, topic: str, partition: int) -> dict[str, dict[str, str]]:
    out = cli.ok("transactions", "describe-producers", "--topic", topic, "--partition", str(partition))
    return {r["ProducerId"]: r for r in table(out)}


# -- against a broker --------------------------------------------------------------------------------


@pytest.mark.slow
def test_open_transaction_is_listed_described_and_seen_by_its_partitions_until_committed(
        cli: Cli, txn_broker: BrokerProcess, producers: Callable[[str], Producer]) -> None:
    topic = make_topic(txn_broker.bootstrap, 2)
    open_id, empty_id = unique("tx-open"), unique("tx-empty")
    p = producers(open_id)
    producers(empty_id)  # initialized, never begins a transaction: Empty
    produce_open(p, topic, {0: 3, 1: 1})

    rows = listed(cli)
    assert rows[open_id]["TransactionState"] == "Ongoing"
    assert rows[empty_id]["TransactionState"] == "Empty"
    assert rows[open_id]["Coordinator"] == "1"
    pid = rows[open_id]["ProducerId"]
    assert pid != rows[empty_id]["ProducerId"]

    # filters, each answered by the broker
    ongoing = listed(cli, "--state", "ongoing")
    assert open_id in ongoing and empty_id not in ongoing
    assert {r["TransactionState"] for r in ongoing.values()} == {"Ongoing"}
    empty = listed(cli, "--state", "Empty,CompleteAbort", "--state", "Dead")
    assert empty_id in empty and open_id not in empty
    assert listed(cli, "--producer-id", pid).keys() == {open_id}
    assert listed(cli, "--transactional-id-pattern", re.escape(empty_id)).keys() == {empty_id}
    assert listed(cli, "--transactional-id-pattern", "tx-open-.*").keys() >= {open_id}

    d = described(cli, open_id)
    assert (d["CoordinatorId"], d["ProducerId"], d["ProducerEpoch"], d["TransactionState"]) == ("1", pid, "0",
                                                                                                 "Ongoing")
    assert d["TransactionTimeoutMs"] == str(TXN_TIMEOUT_MS)
    assert d["TopicPartitions"] == f"{topic}-0,{topic}-1"
    start = int(d["CurrentTransactionStartTimeMs"])
    assert abs(start - time.time() * 1000) < 60_000
    assert 0 <= int(d["TransactionDurationMs"]) < 60_000
    e = described(cli, empty_id)
    assert (e["TransactionState"], e["CurrentTransactionStartTimeMs"], e["TransactionDurationMs"],
            e["TopicPartitions"]) == ("Empty", "None", "None", "-")

    # the partitions hold the open transaction from its first offset
    p0 = producers_of(cli, topic, 0)[pid]
    assert (p0["ProducerEpoch"], p0["LastSequence"], p0["CurrentTransactionStartOffset"]) == ("0", "2", "0")
    assert abs(int(p0["LastTimestamp"]) - time.time() * 1000) < 60_000
    assert int(p0["LatestCoordinatorEpoch"]) >= -1
    assert producers_of(cli, topic, 1)[pid]["CurrentTransactionStartOffset"] == "0"

    # a coordinator that knows the transaction in its partitions makes it not hanging, however old
    hanging = cli.ok("transactions", "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert table(hanging) == []
    assert hanging.split() == list(tx.HANGING_HEADERS)

    p.commit_transaction(30)
    c = wait_for_state(cli, open_id, "CompleteCommit")
    assert c["TransactionDurationMs"] == "None" and c["TopicPartitions"] == "-"
    assert open_id in listed(cli, "--state", "CompleteCommit")
    for part in (0, 1):  # the marker closed the transaction on both partitions
        assert producers_of(cli, topic, part)[pid]["CurrentTransactionStartOffset"] == "None"

    # the next transaction starts after the first one's records and its commit marker
    produce_open(p, topic, {0: 1})
    assert producers_of(cli, topic, 0)[pid]["CurrentTransactionStartOffset"] == "4"
    p.abort_transaction(30)
    wait_for_state(cli, open_id, "CompleteAbort")
    assert producers_of(cli, topic, 0)[pid]["CurrentTransactionStartOffset"] == "None"


@pytest.mark.slow
def test_describe_unknown_transactional_id_fails_with_what_to_do(cli: Cli) -> None:
    tid = unique("never-used")
    r = cli("transactions", "describe", "--transactional-id", tid)
    assert r.returncode == 1 and r.stdout == ""
    assert f"transactional id '{tid}' does not exist" in r.stderr
    assert "odradek transactions list" in r.stderr


@pytest.mark.slow
def test_describe_producers_of_an_unknown_partition_and_an_empty_one(cli: Cli, txn_broker: BrokerProcess) -> None:
    topic = make_topic(txn_broker.bootstrap, 1)
    out = cli.ok("transactions", "describe-producers", "--topic", topic, "--partition", "0")
    assert out.split() == list(tx.PRODUCER_HEADERS) and table(out) == []
    for t, part in ((topic, "5"), (unique("missing"), "0")):
        r = cli("transactions", "describe-producers", "--topic", t, "--partition", part)
        assert r.returncode == 1
        assert "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr and "odradek topics describe" in r.stderr


@pytest.mark.slow
def test_find_hanging_over_a_brokers_partitions(cli: Cli, txn_broker: BrokerProcess,
                                                producers: Callable[[str], Producer]) -> None:
    topic = make_topic(txn_broker.bootstrap, 2)
    p = producers(unique("tx-fh"))
    produce_open(p, topic, {1: 2})
    out = cli.ok("transactions", "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0")
    assert table(out) == []
    out = cli.ok("transactions", "find-hanging", "--topic", topic, "--partition", "1")
    assert table(out) == []
    p.abort_transaction(30)


@pytest.mark.slow
def test_abort_ends_an_open_transaction_in_one_partition(cli: Cli, txn_broker: BrokerProcess,
                                                         producers: Callable[[str], Producer]) -> None:
    topic = make_topic(txn_broker.bootstrap, 2)
    tid = unique("tx-abort")
    p = producers(tid)
    produce_open(p, topic, {0: 2, 1: 1})
    [pid] = producers_of(cli, topic, 0)

    r = cli("transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "1")
    assert r.returncode == 1 and r.stdout == ""
    assert f"no open transaction starts at offset 1 in {topic}-0" in r.stderr and "describe-producers" in r.stderr

    out = cli.ok("transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert out.strip() == f"Aborted the transaction of producer {pid} (epoch 0) in {topic}-0 that started at offset 0"
    assert producers_of(cli, topic, 0)[pid]["CurrentTransactionStartOffset"] == "None"
    assert producers_of(cli, topic, 1)[pid]["CurrentTransactionStartOffset"] == "0"  # only the one partition

    # a newer instance fences the producer (a newer epoch): an abort naming epoch 0 is refused by the leader
    p2 = producers(tid)
    produce_open(p2, topic, {1: 1})
    state = producers_of(cli, topic, 1)[pid]
    epoch = state["ProducerEpoch"]
    assert int(epoch) > 0
    r = cli("transactions", "abort", "--topic", topic, "--partition", "1", "--producer-id", pid,
            "--producer-epoch", "0", "--coordinator-epoch", "0")
    assert r.returncode == 1 and f"cannot abort the transaction of producer {pid} (epoch 0) in {topic}-1" in r.stderr
    assert "INVALID_PRODUCER_EPOCH" in r.stderr and "describe-producers" in r.stderr
    out = cli.ok("transactions", "abort", "--topic", topic, "--partition", "1", "--producer-id", pid,
                 "--producer-epoch", epoch, "--coordinator-epoch", state["LatestCoordinatorEpoch"])
    assert out.strip() == f"Aborted the transaction of producer {pid} (epoch {epoch}) in {topic}-1"
    assert producers_of(cli, topic, 1)[pid]["CurrentTransactionStartOffset"] == "None"
    p2.abort_transaction(30)  # the coordinator's own markers still go out: harmless


@pytest.mark.parametrize("verb", [
    ("list",),
    ("describe", "--transactional-id", "x"),
    ("describe-producers", "--topic", "x", "--partition", "0"),
    ("find-hanging", "--broker-id", "1"),
    ("abort", "--topic", "x", "--partition", "0", "--start-offset", "0"),
])
def test_unreachable_broker_fails_within_the_timeout(verb: tuple[str, ...]) -> None:
    cli = Cli(f"127.0.0.1:{free_port()}")  # nothing listens there
    started = time.monotonic()
    r = cli("transactions", *verb, "--request-timeout-ms", "800", timeout=30)
    assert time.monotonic() - started < 15
    assert r.returncode == 1, r.stderr
    assert "cannot reach a broker at 127.0.0.1:" in r.stderr and "odradek serve" in r.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("list", "--state", "Stable"), "'Stable' is not a transaction state"),
    (("list", "--producer-id", "-3"), "is not a producer id"),
    (("list", "--transactional-id-pattern", "a("), "is not a valid regular expression"),
    (("find-hanging",), "needs --topic or --broker-id"),
    (("find-hanging", "--broker-id", "1", "--partition", "0"), "--partition needs --topic"),
    (("describe", "--transactional-id", " "), "must not be empty"),
    (("abort", "--topic", "t", "--partition", "0"), "abort needs --start-offset, or all of"),
    (("abort", "--topic", "t", "--partition", "0", "--producer-id", "3", "--producer-epoch", "0"),
     "abort needs --start-offset, or all of"),
    (("abort", "--topic", "t", "--partition", "0", "--start-offset", "1", "--producer-id", "3"), "not both"),
])
def test_usage_errors_exit_2_before_connecting(args: tuple[str, ...], message: str) -> None:
    cli = Cli(f"127.0.0.1:{free_port()}")
    r = cli("transactions", *args, timeout=30)
    assert r.returncode == 2 and message in r.stderr, r.stderr


# -- pure parts --------------------------------------------------------------------------------------


def _producer(pid: int, start: int, last_ts: int, coordinator_epoch: int = 3) -> Any:
    return SimpleNamespace(producer_id=pid, producer_epoch=1, last_sequence=9, last_timestamp=last_ts,
                           coordinator_epoch=coordinator_epoch, current_transaction_start_offset=start)


def test_hanging_follows_kafkas_rule() -> None:
    now = 10_000_000
    old, recent = now - 20 * 60_000, now - 60_000
    states = {
        TopicPartition("t", 0): [_producer(1, 5, old), _producer(2, -1, old), _producer(3, 7, recent)],
        TopicPartition("t", 1): [_producer(1, 8, old), _producer(4, 2, old), _producer(5, 0, old)],
    }
    candidates = tx.open_candidates(states, now_ms=now, max_timeout_ms=15 * 60_000)
    # pid 2 has no open transaction; pid 3 wrote within the timeout
    assert [(c.partition, c.producer_id) for c in candidates] == [(0, 1), (1, 1), (1, 4), (1, 5)]

    tids = {1: "a", 4: "b"}  # pid 5: no transactional id known to any coordinator
    descriptions = {"a": SimpleNamespace(topic_partitions={TopicPartition("t", 0)}), "b": None}
    found = tx.hanging(candidates, tids, descriptions)
    # pid 1 is open in t-0 as the coordinator knows, but not in t-1; "b" is unknown; pid 5 has no id
    assert [(c.partition, c.producer_id) for c in found] == [(1, 1), (1, 4), (1, 5)]
    assert tx.hanging_row(found[0], now) == ("t", 1, 1, 1, 3, 8, old, 20)


def test_rows_print_none_where_kafka_has_no_value() -> None:
    assert tx.producer_row(_producer(7, -1, 123, coordinator_epoch=-1)) == (7, 1, -1, 9, 123, "None")
    assert tx.producer_row(_producer(7, 42, 123))[-1] == 42
    d = SimpleNamespace(coordinator_id=1, state=SimpleNamespace(value="PrepareCommit"), producer_id=4,
                        producer_epoch=2, transaction_timeout_ms=60000, transaction_start_time_ms=1000,
                        topic_partitions={TopicPartition("b", 1), TopicPartition("a", 10), TopicPartition("a", 2)})
    assert tx.describe_row("x", d, now_ms=1500) == (1, "x", 4, 2, "PrepareCommit", 60000, "1000", "500",
                                                    "a-2,a-10,b-1")
    done = SimpleNamespace(**{**vars(d), "state": "CompleteCommit", "topic_partitions": set()})
    assert tx.describe_row("x", done, now_ms=1500)[6:] == ("1000", "None", "-")
    never = SimpleNamespace(**{**vars(d), "state": "Empty", "transaction_start_time_ms": -1})
    assert tx.describe_row("x", never, now_ms=1500)[6:8] == ("None", "None")


def test_states_and_producer_ids_parse_like_kafka_names() -> None:
    assert tx.parse_states(["ongoing,PREPARECOMMIT", "Ongoing", "prepareepochfence"]) == [
        "Ongoing", "PrepareCommit", "PrepareEpochFence"]
    assert tx.parse_producer_ids(["1,2", "2", " 30 "]) == [1, 2, 30]
    with pytest.raises(CliError) as e:
        tx.parse_producer_ids(["x"])
    assert e.value.exit_code == 2


def test_client_config_translates_librdkafka_names(tmp_path: Any) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SSL\nssl.ca.location=/ca.pem\nssl.endpoint.identification.algorithm=\n"
                     "socket.keepalive.enable=true\n", encoding="utf-8")
    args = argparse.Namespace(bootstrap_server="h1:9092, h2:9092", request_timeout_ms=2500, command_config=props,
                              client_properties=["reconnect.backoff.ms=7", "sasl.mechanisms=PLAIN"])
    conf = client_config(args, "transactions")
    assert conf["bootstrap_servers"] == ["h1:9092", "h2:9092"] and conf["client_id"] == "odradek-transactions"
    assert (conf["request_timeout_ms"], conf["bootstrap_timeout_ms"]) == (2500, 2500)
    assert (conf["security_protocol"], conf["ssl_cafile"], conf["ssl_check_hostname"]) == ("SSL", "/ca.pem", False)
    assert (conf["reconnect_backoff_ms"], conf["sasl_mechanism"]) == (7, "PLAIN")
    assert "socket_keepalive_enable" not in conf  # librdkafka-only: ignored with a warning
    bad = argparse.Namespace(**{**vars(args), "command_config": None, "client_properties": ["request.timeout.ms=x"]})
    with pytest.raises(CliError) as e:
        client_config(bad, "transactions")
    assert e.value.exit_code == 2
