"""Produce and consume with real clients: codecs, record fields, sizes, partitions, acks.

Each scenario runs once per client (the ``client`` fixture is parametrized over every library).
Records are read back with the same client and compared field by field with what was produced and
with the offsets the broker acknowledged.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.compat.clients import CODECS, Ack, Client, Consumed, ProduceError, Rec
from tests.compat.conftest import BrokerProcess, create_topic, stored_batch_attributes

pytestmark = pytest.mark.slow  # a real broker process and real clients

T0 = (int(time.time()) - 3600) * 1000  # an hour ago, whole seconds: clearly not the broker's clock


def _assert_read_back(got: list[Consumed], records: list[Rec], acks: list[Ack]) -> None:
    assert len(got) == len(records), f"read {len(got)} records, produced {len(records)}"
    for g, r, a in zip(got, records, acks, strict=True):
        assert (g.partition, g.offset) == (a.partition, a.offset)
        assert g.key == r.key
        assert g.value == r.value
        assert g.headers == r.headers
        if r.timestamp is not None:
            assert g.timestamp == r.timestamp
            assert g.create_time


def _contiguous(acks: list[Ack], partition: int = 0, start: int = 0) -> list[Ack]:
    return [Ack(partition, start + i) for i in range(len(acks))]


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips(client: Client, broker: BrokerProcess, topic_name: str, codec: str) -> None:
    create_topic(broker, topic_name)
    # Compressible values (repeated text) and a few incompressible ones, in several batches.
    records = [Rec(value=(f"value-{i:04d}-" * 20).encode() if i % 5 else os.urandom(300),
                   key=f"key-{i}".encode(), timestamp=T0 + i) for i in range(200)]
    acks = client.produce(topic_name, records[:100], compression=codec)
    acks += client.produce(topic_name, records[100:], compression=codec)
    assert acks == _contiguous(acks)
    got = client.consume(topic_name, [0], count=len(records))
    _assert_read_back(got, records, acks)
    # Starting inside a (compressed) batch: the client skips the batch's earlier records.
    got = client.consume(topic_name, [0], start=133, count=len(records) - 133)
    _assert_read_back(got, records[133:], acks[133:])


@pytest.mark.parametrize("codec", CODECS)
def test_batches_are_stored_with_the_requested_codec(client: Client, broker: BrokerProcess, topic_name: str,
                                                     codec: str) -> None:
    # (librdkafka enables LZ4 only when the broker advertises FindCoordinator, an API of the same Kafka release.)
    create_topic(broker, topic_name)
    client.produce(topic_name, [Rec(value=b"compress me please " * 30, key=b"%d" % i) for i in range(50)],
                   compression=codec)
    assert {a & 0x07 for a in stored_batch_attributes(broker, topic_name, 0)} == {CODECS.index(codec)}


def test_keys_tombstones_headers_timestamps(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name)
    records = [
        Rec(key=b"k1", value=b"v1", timestamp=T0),
        Rec(key=b"k1", value=None, timestamp=T0 + 1),  # tombstone
        Rec(key=None, value=b"no key", timestamp=T0 + 2),
        Rec(key=b"k2", value=b"", timestamp=T0 + 3),  # empty, not null
        Rec(key=b"\x00\xffbinary", value=bytes(range(256)), timestamp=T0 - 86_400_000),  # out of order
        Rec(key=b"h", value=b"with headers", timestamp=T0 + 5,
            headers=(("trace", b"abc"), ("trace", b"second, same key"), ("empty", b""), ("utf8-ключ", b"\x01"))),
        Rec(key=b"k3", value=b"x" * 5000, timestamp=T0 + 6, headers=(("big", b"y" * 3000),)),
    ]
    acks = client.produce(topic_name, records)
    assert acks == _contiguous(acks)
    got = client.consume(topic_name, [0], count=len(records))
    _assert_read_back(got, records, acks)
    assert got[1].value is None and got[3].value == b""


def test_null_header_value(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    if not client.null_header_values:
        pytest.skip(f"{client.name} cannot send a header with a null value")
    create_topic(broker, topic_name)
    records = [Rec(key=b"k", value=b"v", headers=(("null", None), ("empty", b""), ("x", b"y")))]
    acks = client.produce(topic_name, records)
    _assert_read_back(client.consume(topic_name, [0], count=1), records, acks)


def test_small_fetch_limits(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    """Fetch limits far below the batch size: every fetch still returns one whole batch (KIP-74)."""
    create_topic(broker, topic_name, partitions=2)
    records = [Rec(value=os.urandom(700), partition=i % 2) for i in range(120)]
    acks = []
    for i in range(0, len(records), 40):  # batches of ~14 KB per partition
        acks += client.produce(topic_name, records[i:i + 40])
    c = client.consumer(topic_name, [0, 1], max_bytes=1024)
    try:
        got = c.read(len(records), timeout=30)
    finally:
        c.close()
    assert len(got) == len(records)
    for p in (0, 1):
        mine = [(r, a) for r, a in zip(records, acks, strict=True) if a.partition == p]
        _assert_read_back([g for g in got if g.partition == p], [r for r, _ in mine], [a for _, a in mine])


def test_consume_from_an_offset_in_the_middle(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name)
    # ~200 KiB: several 64 KiB segments, so the start offset lies in an older segment.
    records = [Rec(value=os.urandom(1000), key=str(i).encode()) for i in range(200)]
    acks = []
    for chunk in range(0, 200, 50):
        acks += client.produce(topic_name, records[chunk:chunk + 50])
    assert acks == _contiguous(acks)
    for start in (37, 120):
        got = client.consume(topic_name, [0], start=start, count=200 - start)
        _assert_read_back(got, records[start:], acks[start:])


def test_message_near_max_message_bytes(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name, configs={"max.message.bytes": "200000", "segment.bytes": str(1 << 20)})
    near = Rec(key=b"big", value=os.urandom(190_000))
    (ack,) = client.produce(topic_name, [near])
    assert ack == Ack(0, 0)
    with pytest.raises(ProduceError) as info:
        client.produce(topic_name, [Rec(key=b"too big", value=os.urandom(210_000))])
    assert client.is_message_too_large(info.value.cause), repr(info.value.cause)
    after = Rec(key=b"after", value=b"small")
    assert client.produce(topic_name, [after]) == [Ack(0, 1)]
    got = client.consume(topic_name, [0], count=2)
    _assert_read_back(got, [near, after], [Ack(0, 0), Ack(0, 1)])


def test_compressed_batch_is_measured_compressed(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    """max.message.bytes applies to the batch as stored (compressed), as in Kafka."""
    create_topic(broker, topic_name, configs={"max.message.bytes": "200000", "segment.bytes": str(1 << 20)})
    rec = Rec(key=b"zeros", value=bytes(600_000))  # ~600 KB that gzip turns into ~1 KB
    assert client.produce(topic_name, [rec], compression="gzip") == [Ack(0, 0)]
    got = client.consume(topic_name, [0], count=1)
    _assert_read_back(got, [rec], [Ack(0, 0)])


def test_log_append_time(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name, configs={"message.timestamp.type": "LogAppendTime"})
    records = [Rec(key=b"k", value=b"v%d" % i, timestamp=T0 + i) for i in range(20)]
    before = int(time.time() * 1000)
    acks = client.produce(topic_name, records[:10], compression="none")
    acks += client.produce(topic_name, records[10:], compression="lz4")
    after = int(time.time() * 1000)
    assert acks == _contiguous(acks)
    got = client.consume(topic_name, [0], count=len(records))
    expected = [(a.offset, r.key, r.value) for r, a in zip(records, acks, strict=True)]
    assert [(g.offset, g.key, g.value) for g in got] == expected
    for g, a in zip(got, acks, strict=True):
        assert not g.create_time, "LogAppendTime topic: records must carry the broker's timestamp type"
        assert before - 1000 <= g.timestamp <= after + 1000, (g.timestamp, before, after)
        if a.timestamp is not None:  # clients that report the produce response's log_append_time
            assert a.timestamp == g.timestamp


def test_auto_created_on_produce(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    """A topic that does not exist is created (num.partitions=1) when a producer asks for it."""
    acks = client.produce(topic_name, [Rec(value=b"first"), Rec(value=b"second")])
    assert acks == [Ack(0, 0), Ack(0, 1)]
    got = client.consume(topic_name, [0], count=2)
    assert [g.value for g in got] == [b"first", b"second"]


def test_consumer_wakes_up_for_new_records(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    """A consumer long-polling an empty partition gets records produced while it waits."""
    create_topic(broker, topic_name, partitions=2)
    c = client.consumer(topic_name, [0, 1])
    try:
        assert c.read(1, timeout=1.0) == []
        records = [Rec(value=b"late %d" % i, partition=i % 2) for i in range(10)]
        acks = client.produce(topic_name, records)
        got = c.read(10, timeout=15.0)
        more = client.produce(topic_name, [Rec(value=b"later", partition=1)])
        got += c.read(1, timeout=15.0)
    finally:
        c.close()
    assert sorted((g.partition, g.offset, g.value) for g in got) == sorted(
        (a.partition, a.offset, r.value) for r, a in zip([*records, Rec(value=b"later")], acks + more, strict=True))


def test_explicit_partitions(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name, partitions=4)
    records = [Rec(value=f"p{i % 4}-{i}".encode(), key=f"k{i}".encode(), partition=i % 4) for i in range(80)]
    acks = client.produce(topic_name, records)
    for r, a in zip(records, acks, strict=True):
        assert a.partition == r.partition
    for p in range(4):
        mine = [(r, a) for r, a in zip(records, acks, strict=True) if a.partition == p]
        assert [a.offset for _, a in mine] == list(range(len(mine)))
        got = client.consume(topic_name, [p], count=len(mine))
        _assert_read_back(got, [r for r, _ in mine], [a for _, a in mine])


def test_keyed_partitioning(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name, partitions=4)
    records = [Rec(value=f"event {i}".encode(), key=f"user-{i % 12}".encode()) for i in range(96)]
    acks = client.produce(topic_name, records)
    by_key: dict[bytes | None, set[int]] = {}
    for r, a in zip(records, acks, strict=True):
        by_key.setdefault(r.key, set()).add(a.partition)
    assert all(len(parts) == 1 for parts in by_key.values()), by_key
    used = {a.partition for a in acks}
    assert len(used) > 1, f"12 keys all hashed to partition {used}"
    got = client.consume(topic_name, [0, 1, 2, 3], count=len(records))
    assert len(got) == len(records)
    for p in range(4):
        mine = [(r, a) for r, a in zip(records, acks, strict=True) if a.partition == p]
        assert [a.offset for _, a in mine] == list(range(len(mine)))
        _assert_read_back([g for g in got if g.partition == p], [r for r, _ in mine], [a for _, a in mine])


@pytest.mark.parametrize("acks", [0, 1, -1], ids=["acks0", "acks1", "acks_all"])
def test_acks(client: Client, broker: BrokerProcess, topic_name: str, acks: int) -> None:
    create_topic(broker, topic_name)
    records = [Rec(value=f"acks={acks} #{i}".encode(), key=b"k", timestamp=T0 + i) for i in range(50)]
    got_acks = client.produce(topic_name, records, acks=acks)
    if acks == 0:
        # No response, so no offsets: confluent and aiokafka report none (-1), kafka-python 3.x makes
        # up 0..n-1 for every request. Where the records landed is checked by reading them back.
        assert len(got_acks) == len(records)
        got_acks = _contiguous(got_acks)
    else:
        assert got_acks == _contiguous(got_acks)
    got = client.consume(topic_name, [0], count=len(records))
    _assert_read_back(got, records, got_acks)
