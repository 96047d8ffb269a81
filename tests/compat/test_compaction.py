"""Compacted topics with real clients: a reader from the beginning rebuilds the latest value of every key, at the
offsets the producer was given; tombstones delete; keyless records are refused; a topic switched to compaction live
is cleaned; transactions; a compacted ``__consumer_offsets`` keeps every group's offsets across a restart.

The broker runs its cleaner every 200 ms with a small offset map; topics use tiny segments so that a few hundred
records span several. Cleaning is observed in the broker's own log (its ``cleaned up to offset`` line), never
waited for by sleeping.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.compat.clients import CLIENTS, CODECS, Client, Consumed, ProduceError, Rec, make_client
from tests.compat.conftest import BrokerProcess, _client_fixture, create_topic, running_broker

pytestmark = pytest.mark.slow  # a real broker process and real clients

CLEANER_OVERRIDES = {
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.dedupe.buffer.size": str(4 << 20),
    "offsets.topic.num.partitions": "2",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.state.log.num.partitions": "2",
}
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01",
             "delete.retention.ms": "100"}
INVALID_RECORD = 87
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def cleaner_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("cleaner-broker"), CLEANER_OVERRIDES) as b:
        yield b


@pytest.fixture(params=CLIENTS)
def cclient(request: pytest.FixtureRequest, cleaner_broker: BrokerProcess) -> Iterator[Client]:
    yield from _client_fixture(request, cleaner_broker)


def _cleaned_up_to(b: BrokerProcess, topic: str, partition: int = 0) -> int:
    """How far the cleaner has cleaned the partition, by the broker's own log (-1: not yet)."""
    found = re.findall(rf"{re.escape(topic)}-{partition}: cleaned up to offset (\d+)",
                       b.log_path.read_text(errors="replace"))
    return max(map(int, found), default=-1)


def _cleaned_all(b: BrokerProcess, topic: str, partition: int = 0) -> bool:
    """Whether the cleaner has cleaned everything below the active segment (nothing is being produced)."""
    bases = [int(f.name[:-4]) for f in (b.data_dir / f"{topic}-{partition}").glob("*.log")]
    return len(bases) > 1 and _cleaned_up_to(b, topic, partition) >= max(bases)


def _wait(cond: Callable[[], Any], what: str, timeout: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.1)


def _read_to(client: Client, topic: str, last_offset: int) -> list[Consumed]:
    """Every record from the beginning up to ``last_offset`` (which a compacted log always keeps: it is in the
    active segment)."""
    c = client.consumer(topic, [0])
    got: list[Consumed] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not got or got[-1].offset < last_offset:
            assert time.monotonic() < deadline, f"read {len(got)} records, up to {got[-1].offset if got else None}"
            got += c.read(1000, timeout=0.5)
    finally:
        c.close()
    return got


def _state(records: list[Consumed] | list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for r in records:
        key, value = (r.key, r.value) if isinstance(r, Consumed) else r
        assert key is not None
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


Written = list[tuple[bytes, bytes | None]]


def _produce_rounds(client: Client, topic: str, *, rounds: int, keys: int, compression: str,
                    tombstones: int = 0) -> tuple[dict[tuple[bytes, bytes | None], int], Written]:
    """Keyed records in ``rounds`` rounds over ``keys`` keys (one produce call each: batches stay below
    segment.bytes), then ``tombstones`` deletions; (record -> offset, the records in order)."""
    calls: list[Written] = [[(b"key-%03d" % k, b"round %d of key %d " % (r, k) + os.urandom(60)) for k in range(keys)]
                            for r in range(rounds)]
    if tombstones:
        calls.append([(b"key-%03d" % k, None) for k in range(tombstones)])
    offsets: dict[tuple[bytes, bytes | None], int] = {}
    written: Written = []
    for recs in calls:
        acks = client.produce(topic, [Rec(key=k, value=v, partition=0) for k, v in recs], compression=compression)
        offsets.update({rec: a.offset for rec, a in zip(recs, acks, strict=True)})
        written += recs
    return offsets, written


@pytest.mark.parametrize("codec", CODECS)
def test_a_reader_from_the_beginning_gets_the_latest_value_of_every_key_at_its_offset(
        cclient: Client, cleaner_broker: BrokerProcess, codec: str) -> None:
    topic = f"compacted-{codec}-{cclient.name}-{uuid.uuid4().hex[:6]}"
    create_topic(cleaner_broker, topic, configs=COMPACTED)
    offsets, written = _produce_rounds(cclient, topic, rounds=6, keys=40, compression=codec, tombstones=5)
    # More rounds move the tombstones out of the active segment, into what the cleaner may clean.
    more, more_written = _produce_rounds(cclient, topic, rounds=6, keys=40, compression=codec)
    offsets.update(more)
    written += more_written
    _wait(lambda: _cleaned_all(cleaner_broker, topic), f"the cleaner to clean {topic}")
    last = max(offsets.values())
    got = _read_to(cclient, topic, last)
    assert len(got) < len(written), "nothing was compacted away"
    assert _state(got) == _state(written)
    for r in got:  # every survivor at the offset its producer was given
        assert offsets[(r.key, r.value)] == r.offset  # type: ignore[index]
    assert [r.offset for r in got] == sorted({r.offset for r in got})


def test_records_without_a_key_are_refused_and_nothing_is_stored(cclient: Client,
                                                                 cleaner_broker: BrokerProcess) -> None:
    topic = f"keyless-{cclient.name}-{uuid.uuid4().hex[:6]}"
    create_topic(cleaner_broker, topic, configs=COMPACTED)
    cclient.produce(topic, [Rec(key=b"k", value=b"v", partition=0)])
    with pytest.raises(ProduceError) as info:
        cclient.produce(topic, [Rec(key=None, value=b"no key", partition=0)])
    cause = info.value.cause
    code = cause.code() if callable(getattr(cause, "code", None)) else getattr(cause, "errno", None)
    if cclient.name == "aiokafka":  # aiokafka 0.14 has no class for error 87: it reports UnknownError (-1)
        import aiokafka.errors

        assert aiokafka.errors.for_code(INVALID_RECORD) is aiokafka.errors.UnknownError and code == -1, repr(cause)
    else:
        assert code == INVALID_RECORD, repr(cause)
    _, latest = cclient.earliest_latest(topic, [0])
    assert latest[0] == 1


def test_a_topic_switched_to_compaction_while_live_is_cleaned(cleaner_broker: BrokerProcess) -> None:
    client = make_client("confluent", cleaner_broker.bootstrap)
    try:
        topic = f"switched-{uuid.uuid4().hex[:6]}"
        create_topic(cleaner_broker, topic, configs={"segment.bytes": "16384"})
        offsets, written = _produce_rounds(client, topic, rounds=12, keys=30, compression="none")
        client.alter_configs(topic, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
        assert client.describe_configs(topic)["cleanup.policy"] == "compact"
        _wait(lambda: _cleaned_all(cleaner_broker, topic), f"the cleaner to clean {topic}")
        got = _read_to(client, topic, max(offsets.values()))
        assert len(got) < len(written) and _state(got) == _state(written)
    finally:
        client.close()


def _read_committed(b: BrokerProcess, topic: str) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of every record a read_committed confluent consumer reads from the beginning to the end."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"g-{topic}", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[bytes, bytes | None]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF: read up to the last stable offset
                    return got
                raise AssertionError(m.error())
            got.append((m.key(), m.value()))
    finally:
        c.close()
    raise AssertionError(f"did not reach the end of {topic}")


def _empty_batches(b: BrokerProcess, topic: str) -> int:
    """How many stored batches hold no record (read from the segment files: the v2 header's record count)."""
    from odradek.protocol.records import iter_batches

    return sum(1 for seg in (b.data_dir / f"{topic}-0").glob("*.log")
               for _, h in iter_batches(seg.read_bytes(), allow_partial_tail=True) if h.record_count == 0)


def _txn_rounds(t: int) -> tuple[list[tuple[bytes, bytes]], bool]:
    """The records of transaction ``t`` and whether it commits (every third one aborts)."""
    return [(b"key-%02d" % k, b"txn %d key %d " % (t, k) + os.urandom(80)) for k in range(20)], t % 3 != 2


def _confluent_txns(b: BrokerProcess, topic: str, n: int) -> list[tuple[bytes, bytes | None]]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"tx-{topic}", "linger.ms": 5})
    p.init_transactions(30)
    committed: list[tuple[bytes, bytes | None]] = []
    for t in range(n):
        recs, commit = _txn_rounds(t)
        p.begin_transaction()
        for k, v in recs:
            p.produce(topic, key=k, value=v, partition=0)
        assert p.flush(30) == 0  # written before an abort too (an abort purges what was not sent)
        if commit:
            p.commit_transaction(30)
            committed += recs
        else:
            p.abort_transaction(30)
    p.flush(30)
    return committed


def _kafka_python_txns(b: BrokerProcess, topic: str, n: int) -> list[tuple[bytes, bytes | None]]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id=f"kp-{topic}")
    committed: list[tuple[bytes, bytes | None]] = []
    try:
        p.init_transactions()
        for t in range(n):
            recs, commit = _txn_rounds(t)
            p.begin_transaction()
            for k, v in recs:
                p.send(topic, key=k, value=v, partition=0)
            p.flush(30)
            if commit:
                p.commit_transaction()
                committed += recs
            else:
                p.abort_transaction()
    finally:
        p.close(10)
    return committed


def _aiokafka_txns(b: BrokerProcess, topic: str, n: int) -> list[tuple[bytes, bytes | None]]:
    from aiokafka import AIOKafkaProducer

    committed: list[tuple[bytes, bytes | None]] = []

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=b.bootstrap, transactional_id=f"aio-{topic}")
        await p.start()
        try:
            for t in range(n):
                recs, commit = _txn_rounds(t)
                await p.begin_transaction()
                for k, v in recs:
                    await p.send_and_wait(topic, key=k, value=v, partition=0)
                if commit:
                    await p.commit_transaction()
                    committed.extend(recs)
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), 120))
    return committed


def _kafka_python_read_committed(b: BrokerProcess, topic: str) -> list[tuple[bytes, bytes | None]]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=b.bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    end = c.end_offsets([tp])[tp]  # the last stable offset for a read_committed consumer
    got: list[tuple[bytes, bytes | None]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while c.position(tp) < end:
            assert time.monotonic() < deadline, f"kafka-python read up to {c.position(tp)} of {end}"
            for records in c.poll(timeout_ms=500).values():
                got += [(r.key, r.value) for r in records]
    finally:
        c.close()
    return got


def _aiokafka_read_committed(b: BrokerProcess, topic: str) -> list[tuple[bytes, bytes | None]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[tuple[bytes, bytes | None]]:
        c = AIOKafkaConsumer(bootstrap_servers=b.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
        await c.start()
        tp = TopicPartition(topic, 0)
        got: list[tuple[bytes, bytes | None]] = []
        try:
            c.assign([tp])
            c.seek(tp, 0)
            end = (await c.end_offsets([tp]))[tp]  # the last stable offset for a read_committed consumer
            while await c.position(tp) < end:
                for records in (await c.getmany(timeout_ms=500)).values():
                    got += [(r.key, r.value) for r in records]
        finally:
            await c.stop()
        return got

    return asyncio.run(asyncio.wait_for(run(), DEADLINE_S))


@pytest.mark.parametrize("library", ["confluent", "kafka-python", "aiokafka"])
def test_transactions_on_a_compacted_topic_read_committed(cleaner_broker: BrokerProcess, library: str) -> None:
    """Committed transactions compact like any records; aborted ones vanish for every reader; a read_committed
    reader from the beginning rebuilds exactly the committed state."""
    topic = f"txn-compacted-{library}-{uuid.uuid4().hex[:6]}"
    create_topic(cleaner_broker, topic, configs=COMPACTED)
    produce = {"confluent": _confluent_txns, "kafka-python": _kafka_python_txns, "aiokafka": _aiokafka_txns}[library]
    committed = produce(cleaner_broker, topic, 42)  # the last transaction aborts: its batch stays, emptied...
    other = make_client("confluent", cleaner_broker.bootstrap)
    try:  # ... once other writes roll its segment
        for _ in range(3):
            other.produce(topic, [Rec(key=b"other-%02d" % k, value=os.urandom(100), partition=0) for k in range(60)])
    finally:
        other.close()
    _wait(lambda: _cleaned_all(cleaner_broker, topic), f"the cleaner to clean {topic}")
    assert _empty_batches(cleaner_broker, topic), "the live producer's last batch was not kept emptied"
    # every library's reader too: the cleaner leaves empty batches (a live producer's last one) in the log
    readers = [_read_committed, {"confluent": _read_committed, "kafka-python": _kafka_python_read_committed,
                                 "aiokafka": _aiokafka_read_committed}[library]]
    for read in readers:
        got = read(cleaner_broker, topic)
        got = [(k, v) for k, v in got if not k.startswith(b"other-")]
        assert _state(got) == _state(committed)
        assert {v for _, v in got} <= {v for _, v in committed}, "an aborted record was read"
        assert len(got) < len(committed)


def test_a_compacted_consumer_offsets_keeps_every_group_s_offsets_across_a_restart(tmp_path: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition

    overrides = dict(CLEANER_OVERRIDES, **{"offsets.topic.segment.bytes": "8192",
                                           "log.cleaner.min.cleanable.ratio": "0.01"})
    with running_broker(tmp_path, overrides) as b:
        topic = "commits"
        create_topic(b, topic, partitions=4)
        groups = [f"group-{i}" for i in range(3)]
        consumers = {g: Consumer({"bootstrap.servers": b.bootstrap, "group.id": g, "enable.auto.commit": False})
                     for g in groups}
        final: dict[str, dict[int, int]] = {}
        try:
            for n in range(1, 151):  # 450 commits of 4 partitions each
                for i, g in enumerate(groups):
                    offs = [TopicPartition(topic, p, n * 10 + p + i) for p in range(4)]
                    consumers[g].commit(offsets=offs, asynchronous=False)
                    final[g] = {tp.partition: tp.offset for tp in offs}
        finally:
            for c in consumers.values():
                c.close()
        _wait(lambda: any(_cleaned_up_to(b, "__consumer_offsets", p) > 0 for p in range(2)),
              "the cleaner to clean __consumer_offsets")
        size = sum(f.stat().st_size for f in b.data_dir.glob("__consumer_offsets-*/*.log"))
        assert size < 450 * 4 * 60, f"__consumer_offsets holds {size} bytes after compaction"
        b.restart()
        for g in groups:
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": g, "enable.auto.commit": False})
            try:
                got = c.committed([TopicPartition(topic, p) for p in range(4)], timeout=30)
            finally:
                c.close()
            assert {tp.partition: tp.offset for tp in got} == final[g]
