"""Transactions with real clients: commit, abort, fencing, timeouts, restarts, and exactly-once loops.

confluent-kafka's transactional API drives most scenarios; kafka-python's and aiokafka's transactional
producers are checked for the basic commit/abort contract. Consumers read with
``isolation.level=read_committed`` (aborted and open transactions invisible) and ``read_uncommitted``.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.conftest import REPO, BrokerProcess, create_topic, running_broker

pytestmark = pytest.mark.slow  # a real broker process and real clients

TXN_OVERRIDES = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("txn-broker"), TXN_OVERRIDES) as b:
        yield b


@pytest.fixture
def own_txn_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path, TXN_OVERRIDES) as b:
        yield b


# -- confluent-kafka helpers ----------------------------------------------------------------------


def _producer(b: BrokerProcess, transactional_id: str, **extra: object) -> object:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": transactional_id, "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


def _read(b: BrokerProcess, topic: str, partitions: int, isolation: str, *, expect: int | None = None,
          settle: float = 1.5, timeout: float = 30.0) -> list[bytes]:
    """Every value a consumer with ``isolation`` reads from the start: ``expect`` values, or whatever has come
    once nothing new arrived for ``settle`` seconds."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(500, timeout=0.2)
            got = [m.value() for m in msgs if m.error() is None]
            if got:
                out += got
                quiet_since = time.monotonic()
            if expect is not None and len(out) >= expect:
                break
            if expect is None and time.monotonic() - quiet_since > settle:
                break
    finally:
        c.close()
    return out


def _watermarks(b: BrokerProcess, topic: str, isolation: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "wm", "isolation.level": isolation})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        c.close()


def _open_txn(p: object, topic: str, values: list[bytes], partitions: int = 1) -> None:
    """Begin a transaction and write ``values`` in it, delivered to the broker (left open)."""
    p.begin_transaction()  # type: ignore[attr-defined]
    for i, v in enumerate(values):
        p.produce(topic, value=v, key=v, partition=i % partitions)  # type: ignore[attr-defined]
    p.flush(30)  # type: ignore[attr-defined]  # so aborted records reach the log (abort purges unsent ones)


def _produce_in_txn(p: object, topic: str, values: list[bytes], commit: bool, partitions: int = 1) -> None:
    _open_txn(p, topic, values, partitions)
    if commit:
        p.commit_transaction(30)  # type: ignore[attr-defined]
    else:
        p.abort_transaction(30)  # type: ignore[attr-defined]


# -- commit / abort ---------------------------------------------------------------------------------


def test_committed_data_is_visible_and_aborted_data_only_to_read_uncommitted(txn_broker: BrokerProcess,
                                                                             topic_name: str) -> None:
    create_topic(txn_broker, topic_name, partitions=2)
    p = _producer(txn_broker, f"tx-{topic_name}")
    first = [b"c1-%d" % i for i in range(50)]
    aborted = [b"a-%d" % i for i in range(50)]
    second = [b"c2-%d" % i for i in range(50)]
    _produce_in_txn(p, topic_name, first, True, 2)
    _produce_in_txn(p, topic_name, aborted, False, 2)
    _produce_in_txn(p, topic_name, second, True, 2)
    p.flush(10)  # type: ignore[attr-defined]
    committed = _read(txn_broker, topic_name, 2, "read_committed", expect=100)
    assert sorted(committed) == sorted(first + second)
    everything = _read(txn_broker, topic_name, 2, "read_uncommitted", expect=150)
    assert sorted(everything) == sorted(first + aborted + second)
    # Nothing beyond: the aborted records never reach read_committed, whatever the wait.
    assert sorted(_read(txn_broker, topic_name, 2, "read_committed", settle=1.0)) == sorted(first + second)


def test_an_open_transaction_holds_back_read_committed(txn_broker: BrokerProcess, topic_name: str) -> None:
    create_topic(txn_broker, topic_name)
    p = _producer(txn_broker, f"tx-{topic_name}")
    _produce_in_txn(p, topic_name, [b"before-%d" % i for i in range(10)], True)
    _open_txn(p, topic_name, [b"open-%d" % i for i in range(10)])
    # The open transaction's records are stored: read_uncommitted sees them, read_committed stops before them.
    assert len(_read(txn_broker, topic_name, 1, "read_uncommitted", expect=20)) == 20
    assert len(_read(txn_broker, topic_name, 1, "read_committed", settle=1.0)) == 10
    low, lso = _watermarks(txn_broker, topic_name, "read_committed")
    _, hw = _watermarks(txn_broker, topic_name, "read_uncommitted")
    assert (low, lso) == (0, 11)  # 10 records and the commit marker
    assert hw == 21
    p.commit_transaction(30)  # type: ignore[attr-defined]
    assert len(_read(txn_broker, topic_name, 1, "read_committed", expect=20)) == 20


# -- fencing and timeouts --------------------------------------------------------------------------


def test_a_second_producer_with_the_same_id_fences_the_first(txn_broker: BrokerProcess, topic_name: str) -> None:
    from confluent_kafka import KafkaException

    create_topic(txn_broker, topic_name)
    tid = f"tx-{topic_name}"
    old = _producer(txn_broker, tid)
    _open_txn(old, topic_name, [b"zombie"])
    new = _producer(txn_broker, tid)  # aborts the old instance's open transaction
    _produce_in_txn(new, topic_name, [b"new"], True)
    with pytest.raises(KafkaException) as err:
        old.produce(topic_name, value=b"zombie-2")  # type: ignore[attr-defined]
        old.commit_transaction(30)  # type: ignore[attr-defined]
    assert err.value.args[0].fatal() or err.value.args[0].txn_requires_abort()
    assert _read(txn_broker, topic_name, 1, "read_committed", settle=1.0) == [b"new"]


def test_an_abandoned_transaction_is_aborted_after_its_timeout(txn_broker: BrokerProcess, topic_name: str) -> None:
    create_topic(txn_broker, topic_name)
    p = _producer(txn_broker, f"tx-{topic_name}", **{"transaction.timeout.ms": 1000})
    _open_txn(p, topic_name, [b"abandoned-%d" % i for i in range(5)])
    deadline = time.monotonic() + 20
    lso = 0
    while time.monotonic() < deadline:  # the coordinator aborts it; the marker moves the LSO past it
        _, lso = _watermarks(txn_broker, topic_name, "read_committed")
        if lso == 6:
            break
        time.sleep(0.3)
    assert lso == 6
    assert _read(txn_broker, topic_name, 1, "read_committed", settle=1.0) == []
    assert len(_read(txn_broker, topic_name, 1, "read_uncommitted", expect=5)) == 5


# -- restarts ----------------------------------------------------------------------------------------


def test_a_transaction_survives_a_broker_restart(own_txn_broker: BrokerProcess, topic_name: str) -> None:
    b = own_txn_broker
    create_topic(b, topic_name)
    tid = f"tx-{topic_name}"
    p = _producer(b, tid)
    _open_txn(p, topic_name, [b"r-%d" % i for i in range(20)])
    b.restart()
    # The coordinator reloads the Ongoing transaction; the same producer commits it.
    p.commit_transaction(60)  # type: ignore[attr-defined]
    assert len(_read(b, topic_name, 1, "read_committed", expect=20)) == 20
    # A later instance aborts nothing committed and continues.
    p2 = _producer(b, tid)
    _produce_in_txn(p2, topic_name, [b"after"], True)
    assert len(_read(b, topic_name, 1, "read_committed", expect=21)) == 21


def test_an_open_transaction_is_aborted_when_a_new_instance_starts_after_a_crash(own_txn_broker: BrokerProcess,
                                                                                  topic_name: str) -> None:
    b = own_txn_broker
    create_topic(b, topic_name)
    tid = f"tx-{topic_name}"
    p = _producer(b, tid)
    _open_txn(p, topic_name, [b"lost-%d" % i for i in range(20)])
    b.kill()  # SIGKILL: nothing flushed or closed cleanly
    b.start()
    p2 = _producer(b, tid)
    _produce_in_txn(p2, topic_name, [b"fresh"], True)
    assert _read(b, topic_name, 1, "read_committed", settle=1.0) == [b"fresh"]
    assert len(_read(b, topic_name, 1, "read_uncommitted", expect=21)) == 21


# -- other clients' transactional producers ---------------------------------------------------------


def _kafka_python_txn(b: BrokerProcess, topic: str, commit_values: list[bytes], abort_values: list[bytes]) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id=f"kp-{topic}")
    try:
        p.init_transactions()
        for values, commit in ((commit_values, True), (abort_values, False)):
            p.begin_transaction()
            for v in values:
                p.send(topic, value=v, partition=0)
            p.flush(30)
            p.commit_transaction() if commit else p.abort_transaction()
    finally:
        p.close(10)


def _aiokafka_txn(b: BrokerProcess, topic: str, commit_values: list[bytes], abort_values: list[bytes]) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=b.bootstrap, transactional_id=f"aio-{topic}")
        await p.start()
        try:
            async with p.transaction():
                for v in commit_values:
                    await p.send(topic, value=v, partition=0)
            await p.begin_transaction()
            for v in abort_values:
                await p.send(topic, value=v, partition=0)
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), 60))


@pytest.mark.parametrize("library", ["kafka-python", "aiokafka"])
def test_other_clients_transactional_producers(txn_broker: BrokerProcess, topic_name: str, library: str) -> None:
    create_topic(txn_broker, topic_name)
    committed = [b"k-%d" % i for i in range(30)]
    aborted = [b"x-%d" % i for i in range(30)]
    (_kafka_python_txn if library == "kafka-python" else _aiokafka_txn)(txn_broker, topic_name, committed, aborted)
    assert sorted(_read(txn_broker, topic_name, 1, "read_committed", settle=1.0)) == sorted(committed)
    assert len(_read(txn_broker, topic_name, 1, "read_uncommitted", expect=60)) == 60


# -- exactly-once consume-transform-produce under kills ---------------------------------------------


def test_consume_transform_produce_is_exactly_once_across_kills(own_txn_broker: BrokerProcess,
                                                                 topic_name: str) -> None:
    b = own_txn_broker
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(b, source, partitions=2)
    create_topic(b, sink, partitions=2)
    from confluent_kafka import Producer

    inputs = [b"%05d" % i for i in range(3000)]
    feeder = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i, v in enumerate(inputs):
        feeder.produce(source, key=v, value=v, partition=i % 2)
    assert feeder.flush(30) == 0
    cmd = [sys.executable, "-m", "tests.compat.eos_job", b.bootstrap, source, sink, f"g-{topic_name}",
           f"eos-{topic_name}"]
    rng = random.Random(topic_name)
    kills = 0
    for _ in range(8):  # kill the job at random points inside its run, then restart it
        job = subprocess.Popen([*cmd, "30"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(1.5, 4.0))
        if job.poll() is not None:
            break
        job.send_signal(signal.SIGKILL)
        job.wait(10)
        kills += 1
    final = subprocess.run([*cmd, "4"], cwd=REPO, capture_output=True, timeout=280)
    assert final.returncode == 0, final.stderr.decode(errors="replace")[-3000:]
    assert kills >= 3, "the job finished before it could be killed often enough: make the input larger"
    out = _read(b, sink, 2, "read_committed", expect=len(inputs), timeout=60)
    assert sorted(out) == sorted(b"out-" + v for v in inputs), (
        f"{len(out)} outputs for {len(inputs)} inputs, {len(out) - len(set(out))} duplicates")
    # The killed instances' open transactions left aborted data, which only read_uncommitted sees.
    assert len(_read(b, sink, 2, "read_uncommitted", settle=1.0)) >= len(inputs)
