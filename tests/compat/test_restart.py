"""Graceful broker restarts (SIGTERM, exit code 0, same port and data directory) under real clients.

- N acknowledged records, a restart, M more through the same producer: every one of the N+M records
  is read back exactly once, in order, at its acknowledged offset, by a consumer that was reading
  before the restart and by a fresh one.
- A producer sending all through a restart: acknowledged records are in the log exactly once.
- Topic config overrides and added partitions still apply after a restart.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pytest

from tests.compat.clients import Ack, Client, ProduceError, Rec, make_client
from tests.compat.conftest import BrokerProcess, create_topic

pytestmark = pytest.mark.slow

N = 150
M = 150


def test_restart_in_the_middle(own_client: Client, own_broker: BrokerProcess) -> None:
    client, broker = own_client, own_broker
    topic = "restart"
    create_topic(broker, topic, partitions=2)
    # ~1 KB values: each partition spans a few 64 KiB segments by the end.
    records = [Rec(value=os.urandom(1000), key=f"k{i}".encode(), partition=i % 2) for i in range(N + M)]

    producer = client.producer(compression="lz4")
    live = client.consumer(topic, [0, 1])
    try:
        # Chunks of 50 (~25 KB per partition): librdkafka would otherwise put up to 1 MB in one batch,
        # which a 64 KiB segment.bytes refuses (RECORD_LIST_TOO_LARGE, as Kafka does).
        acks = []
        for i in range(0, N, 50):
            acks += producer.send(topic, records[i:i + 50])
        before = live.read(N)
        assert len(before) == N

        broker.restart()

        for i in range(N, N + M, 50):
            acks += producer.send(topic, records[i:i + 50])
        after = live.read(M)
    finally:
        producer.close()
        live.close()

    for p in (0, 1):
        offsets = [a.offset for a in acks if a.partition == p]
        assert offsets == list(range(len(offsets))), f"partition {p}: acknowledged offsets {offsets}"
    expected = {(a.partition, a.offset): r.value for r, a in zip(records, acks, strict=True)}
    assert {a.partition for a in acks} == {0, 1}

    def check(got: list, what: str) -> None:
        seen = [(g.partition, g.offset) for g in got]
        assert len(seen) == len(set(seen)), f"{what}: duplicates"
        assert sorted(seen) == sorted(expected), f"{what}: missing {set(expected) - set(seen)}"
        for p in (0, 1):
            mine = [g.offset for g in got if g.partition == p]
            assert mine == sorted(mine), f"{what}: partition {p} out of order"
        for g in got:
            assert g.value == expected[(g.partition, g.offset)]

    check(before + after, "consumer alive across the restart")
    check(client.consume(topic, [0, 1], count=N + M), "fresh consumer")
    assert client.earliest_latest(topic, [0, 1]) == ({0: 0, 1: 0}, {0: (N + M) // 2, 1: (N + M) // 2})
    assert acks[:N] == [Ack(i % 2, i // 2) for i in range(N)]
    for p in (0, 1):  # the data really spans several segments, written before and after the restart
        segments = list((broker.data_dir / f"{topic}-{p}").glob("*.log"))
        assert len(segments) >= 2, segments


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_restart_while_producing(own_client: Client, own_broker: BrokerProcess, idempotent: bool) -> None:
    """A producer keeps sending while the broker restarts: sends may fail while it is down, but every
    acknowledged record is in the log at its acknowledged offset, and exactly once if the producer is
    idempotent (the broker recovers the producer state and answers a resent batch with its first offset).
    A plain producer gets at-least-once only, as with Kafka: a client that loses a response resends the
    batch (kafka-python 3.0 drops a response that arrives together with the close)."""
    client, broker = own_client, own_broker
    topic = "busy"
    create_topic(broker, topic)
    producer = client.producer(idempotent=idempotent)
    acked: dict[bytes, int] = {}
    failed: list[bytes] = []
    stop = threading.Event()

    def produce_until_stopped() -> None:
        i = 0
        while not stop.is_set():
            batch = [Rec(value=b"%08d" % (i + j)) for j in range(20)]
            i += len(batch)
            try:
                for r, a in zip(batch, producer.send(topic, batch, timeout=20), strict=True):
                    acked[r.value] = a.offset  # type: ignore[index]
            except (ProduceError, TimeoutError):
                failed.extend(r.value for r in batch if r.value is not None)
            time.sleep(0.01)

    # The producer is used from this one thread only (aiokafka's loop is not shared meanwhile).
    def wait_for_acks(n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(acked) < n and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(acked) >= n, f"{len(acked)} records acknowledged after {timeout}s, expected {n}"

    thread = threading.Thread(target=produce_until_stopped, daemon=True)
    thread.start()
    try:
        wait_for_acks(100)
        broker.restart()
        wait_for_acks(len(acked) + 100)  # and more after the restart
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    producer.close()
    _, latest = client.earliest_latest(topic, [0])
    got = client.consume(topic, [0], count=latest[0])
    assert [g.offset for g in got] == list(range(latest[0]))
    in_log = [g.value for g in got]
    copies = Counter(in_log)
    for value, offset in acked.items():
        assert in_log[offset] == value, f"acknowledged {value!r} at {offset}, log has {in_log[offset]!r}"
        if idempotent:
            assert copies[value] == 1, f"acknowledged {value!r} is in the log {copies[value]} times"
    assert set(in_log) <= set(acked) | set(failed), "records in the log that were never sent"


def test_topic_configs_survive_a_restart(own_client: Client, own_broker: BrokerProcess) -> None:
    """Overrides set through the client's admin API govern every partition after a restart,
    including partitions added later."""
    client, broker = own_client, own_broker
    topic = "configured"
    client.create_topic(topic, 2, {"max.message.bytes": "100000", "message.timestamp.type": "LogAppendTime",
                                   "segment.bytes": str(1 << 20)})
    client.create_partitions(topic, 3)
    broker.restart()
    # A new client: kafka-python's admin fails its first call after a restart (NodeNotReadyError)
    # instead of reconnecting; surviving restarts is the point of the other tests here.
    client.close()
    client = make_client(client.name, broker.bootstrap)
    try:
        _check_configured_topic(client, topic)
    finally:
        client.close()


def _check_configured_topic(client: Client, topic: str) -> None:
    assert client.describe_topic(topic) == 3
    configs = client.describe_configs(topic)
    assert (configs["max.message.bytes"], configs["message.timestamp.type"]) == ("100000", "LogAppendTime")
    for p in range(3):
        with pytest.raises(ProduceError) as info:
            client.produce(topic, [Rec(value=os.urandom(150_000), partition=p)])
        assert client.is_message_too_large(info.value.cause), f"partition {p}: {info.value.cause!r}"
        assert client.produce(topic, [Rec(value=b"v", partition=p, timestamp=1_000_000_000_000)]) == [Ack(p, 0)]
        (got,) = client.consume(topic, [p], count=1)
        assert not got.create_time, f"partition {p}: CreateTime after the restart, topic has LogAppendTime"
        assert abs(got.timestamp - time.time() * 1000) < 60_000
