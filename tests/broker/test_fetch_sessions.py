"""Incremental fetch sessions (KIP-227) with raw Fetch requests, then with kafka-python's consumer."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from odradek.protocol.errors import ErrorCode
from tests.broker import wire
from tests.broker.process import BrokerProcess
from tests.broker.wire import Conn

T = "sess"


@pytest.fixture
def broker3(broker_factory) -> BrokerProcess:
    return broker_factory("num.partitions=3")


def _values(response, key):
    return [r.value for r in wire.records_of(wire.fetched(response)[key].records)]


def test_fetch_session_lifecycle(broker3: BrokerProcess) -> None:
    p0, p1, p2 = (T, 0), (T, 1), (T, 2)
    with Conn(broker3.address) as c, Conn(broker3.address) as producer:
        wire.ensure_topic(c, T, partitions=3)
        assert wire.produce(producer, T, 0, wire.batch(b"a")).error_code == 0

        # Epoch 0: a full fetch that opens a session and lists every partition.
        r = wire.fetch(c, {p0: 0, p1: 0, p2: 0}, session_id=0, session_epoch=0)
        assert int(r.error_code) == 0
        sid = r.session_id
        assert sid != 0, "epoch 0 did not create a session"
        assert set(wire.fetched(r)) == {p0, p1, p2}
        assert _values(r, p0) == [b"a"]

        # Epoch 1: p0's fetch offset moved; nothing new anywhere, so no partition comes back.
        r = wire.fetch(c, {p0: 1}, session_id=sid, session_epoch=1)
        assert int(r.error_code) == 0 and r.session_id == sid
        assert wire.fetched(r) == {}

        # Epoch 2: only the partition with new data is returned, although the request lists none.
        assert wire.produce(producer, T, 2, wire.batch(b"b")).error_code == 0
        r = wire.fetch(c, {}, session_id=sid, session_epoch=2)
        assert int(r.error_code) == 0
        assert set(wire.fetched(r)) == {p2}
        assert _values(r, p2) == [b"b"]
        assert wire.fetched(r)[p2].high_watermark == 1

        r = wire.fetch(c, {p2: 1}, session_id=sid, session_epoch=3)
        assert wire.fetched(r) == {}

        # A wrong epoch is refused and leaves the session as it was.
        for wrong in (3, 5, 0x7FFFFFFF):
            r = wire.fetch(c, {}, session_id=sid, session_epoch=wrong)
            assert int(r.error_code) == ErrorCode.INVALID_FETCH_SESSION_EPOCH == 71
            assert wire.fetched(r) == {}
        assert wire.produce(producer, T, 1, wire.batch(b"c")).error_code == 0
        r = wire.fetch(c, {}, session_id=sid, session_epoch=4)
        assert int(r.error_code) == 0
        assert set(wire.fetched(r)) == {p1} and _values(r, p1) == [b"c"]

        # An unknown session id.
        r = wire.fetch(c, {}, session_id=sid + 1 if sid < 2**31 - 1 else 1, session_epoch=1)
        assert int(r.error_code) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND == 70

        # Forgotten partitions leave the session: new data there is no longer returned.
        r = wire.fetch(c, {p1: 1}, session_id=sid, session_epoch=5, forgotten={T: [0]})
        assert wire.fetched(r) == {}
        assert wire.produce(producer, T, 0, wire.batch(b"d")).error_code == 0
        r = wire.fetch(c, {}, session_id=sid, session_epoch=6)
        assert int(r.error_code) == 0 and wire.fetched(r) == {}

        # An incremental fetch long-polls on the session's partitions.
        start = time.monotonic()
        r = wire.fetch(c, {}, session_id=sid, session_epoch=7, max_wait_ms=600, min_bytes=1)
        assert 0.4 <= time.monotonic() - start < 5
        assert wire.fetched(r) == {}

        # Epoch -1 closes the session: a sessionless full fetch.
        r = wire.fetch(c, {p0: 0, p1: 0, p2: 0}, session_id=sid, session_epoch=-1)
        assert int(r.error_code) == 0 and r.session_id == 0
        assert set(wire.fetched(r)) == {p0, p1, p2}
        assert _values(r, p0) == [b"a", b"d"]
        r = wire.fetch(c, {}, session_id=sid, session_epoch=8)
        assert int(r.error_code) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND

        # Epoch 0 with nothing remembered opens a new, different session.
        r = wire.fetch(c, {p0: 2}, session_id=0, session_epoch=0)
        assert r.session_id not in (0, sid)


def test_sessions_are_shared_by_id_not_by_connection(broker3: BrokerProcess) -> None:
    """Kafka keys sessions by id: a consumer may reconnect and carry on with its session."""
    with Conn(broker3.address) as c:
        wire.ensure_topic(c, T, partitions=3)
        sid = wire.fetch(c, {(T, 0): 0}, session_id=0, session_epoch=0).session_id
        assert sid != 0
    with Conn(broker3.address) as c2:
        assert wire.produce(c2, T, 0, wire.batch(b"x")).error_code == 0
        r = wire.fetch(c2, {}, session_id=sid, session_epoch=1)
        assert int(r.error_code) == 0
        assert _values(r, (T, 0)) == [b"x"]


def test_kafka_python_consumer_reads_a_multi_partition_topic_across_polls(broker3: BrokerProcess) -> None:
    topic = "kp-multi"
    with Conn(broker3.address) as c:
        wire.ensure_topic(c, topic, partitions=3)
    expected: dict[int, list[bytes]] = defaultdict(list)

    def produce(start: int, count: int) -> None:
        producer = KafkaProducer(bootstrap_servers=broker3.bootstrap, enable_idempotence=False, acks=1,
                                 linger_ms=0, request_timeout_ms=10_000, max_block_ms=10_000)
        try:
            for i in range(start, start + count):
                value = f"value-{i}".encode()
                producer.send(topic, key=str(i).encode(), value=value, partition=i % 3)
                expected[i % 3].append(value)
            producer.flush(timeout=20)
        finally:
            producer.close(timeout=10)

    produce(0, 60)
    consumer = KafkaConsumer(bootstrap_servers=broker3.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100, request_timeout_ms=15_000,
                             max_partition_fetch_bytes=300)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        polls = 0
        produced_more = False
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < 120 and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=500, max_records=7)
            polls += 1
            for tp, messages in batch.items():
                got[tp.partition].extend((m.offset, m.value) for m in messages)
            if not produced_more and sum(len(v) for v in got.values()) >= 30:
                produce(60, 60)  # more data arrives while the session is open
                produced_more = True
        assert polls >= 5
        for p in range(3):
            assert [o for o, _ in got[p]] == list(range(40)), f"partition {p}: offsets {got[p]}"
            assert [v for _, v in got[p]] == expected[p]
        # The consumer really used incremental fetch sessions with this broker.
        handlers = consumer._fetcher._session_handlers
        assert handlers, "kafka-python did not create a fetch session handler"
        assert any(h.next_metadata.session_id != 0 and h.next_metadata.epoch > 1 for h in handlers.values()), (
            "kafka-python's fetches never got an incremental session from the broker"
        )
    finally:
        consumer.close()
