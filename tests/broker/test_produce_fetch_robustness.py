"""Produce and Fetch under awkward conditions, against a real broker process: corrupt batches,
pipelined requests, acks=0, long polls, and a consumer that stops reading its socket."""

from __future__ import annotations

import struct
import threading
import time

import pytest

from odradek.protocol import apis
from odradek.protocol.batch import CRC_AT, HEADER_SIZE
from odradek.protocol.errors import ErrorCode
from tests.broker import wire
from tests.broker.process import BrokerProcess
from tests.broker.wire import Conn

# -- 4. A corrupt record batch in a Produce ---------------------------------------------------------


def _flip(data: bytes, at: int) -> bytes:
    buf = bytearray(data)
    buf[at] ^= 0x40
    return bytes(buf)


@pytest.mark.parametrize(
    "damage",
    ["payload_byte", "crc_field", "length_too_long", "length_too_short", "trailing_garbage", "second_batch_bad"],
)
def test_corrupt_batch_is_refused_and_nothing_is_stored(broker: BrokerProcess, damage: str) -> None:
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "crc", partitions=1)
        assert wire.produce(c, "crc", 0, wire.batch(b"good-1", b"good-2")).error_code == 0
        before = wire.fetch_all(c, "crc", 0)
        assert wire.list_offsets(c, "crc", [0]) == {0: 2}

        good = wire.batch(b"bad-1", b"bad-2", b"bad-3")
        if damage == "payload_byte":
            bad = _flip(good, HEADER_SIZE + 3)
        elif damage == "crc_field":
            bad = _flip(good, CRC_AT + 1)
        elif damage == "length_too_long":
            bad = good[:8] + struct.pack(">i", len(good) - 12 + 5) + good[12:]
        elif damage == "length_too_short":
            bad = good[:8] + struct.pack(">i", len(good) - 12 - 5) + good[12:]
        elif damage == "trailing_garbage":
            bad = good + b"\x00\x01\x02"
        else:
            bad = good + _flip(wire.batch(b"bad-4"), HEADER_SIZE + 2)
        result = wire.produce(c, "crc", 0, bad)
        assert result.error_code == ErrorCode.CORRUPT_MESSAGE == 2
        assert result.base_offset == -1

        assert wire.list_offsets(c, "crc", [0]) == {0: 2}
        assert wire.fetch_all(c, "crc", 0) == before
        # The connection is still usable and the next good batch takes the next offset.
        assert wire.produce(c, "crc", 0, wire.batch(b"good-3")) == wire.ProduceResult(0, 2)
    with Conn(broker.address) as other:
        records = wire.records_of(wire.fetch_all(other, "crc", 0))
        assert [(r.offset, r.value) for r in records] == [(0, b"good-1"), (1, b"good-2"), (2, b"good-3")]


@pytest.mark.parametrize(
    ("records", "acks", "error"),
    [
        (b"", 1, ErrorCode.INVALID_RECORD),
        (None, 1, ErrorCode.CORRUPT_MESSAGE),
        (b"\x00" * 11, 1, ErrorCode.CORRUPT_MESSAGE),
        (b"\x00" * 61, 1, ErrorCode.CORRUPT_MESSAGE),
        (wire.batch(b"ok"), 2, ErrorCode.INVALID_REQUIRED_ACKS),
        (wire.batch(b"ok"), -2, ErrorCode.INVALID_REQUIRED_ACKS),
    ],
    ids=["empty", "null", "short_prefix", "zero_length", "acks_2", "acks_minus_2"],
)
def test_invalid_produce_is_refused_per_partition(broker: BrokerProcess, records, acks: int, error: int) -> None:
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "bad", partitions=1)
        assert wire.produce(c, "bad", 0, wire.batch(b"kept")).error_code == 0
        before = wire.fetch_all(c, "bad", 0)
        response = c.request(apis.PRODUCE, wire.PRODUCE_V, wire.produce_values("bad", 0, records, acks))
        (p,) = response.responses[0].partition_responses
        assert int(p.error_code) == error
        assert wire.list_offsets(c, "bad", [0]) == {0: 1}
        assert wire.fetch_all(c, "bad", 0) == before


@pytest.mark.parametrize(
    ("topic", "partition", "offset", "error"),
    [
        ("known", 0, 5, ErrorCode.OFFSET_OUT_OF_RANGE),
        ("known", 0, -3, ErrorCode.OFFSET_OUT_OF_RANGE),
        ("known", 9, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("known", -1, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("unknown", 0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ],
)
def test_fetch_errors_answer_at_once_despite_max_wait(
    broker: BrokerProcess, topic: str, partition: int, offset: int, error: int
) -> None:
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "known", partitions=1)
        assert wire.produce(c, "known", 0, wire.batch(b"x")).error_code == 0
        start = time.monotonic()
        response = wire.fetch(c, {(topic, partition): offset}, max_wait_ms=3000, min_bytes=1)
        assert time.monotonic() - start < 1.5
        assert int(wire.fetched(response)[(topic, partition)].error_code) == error


# -- 5. Pipelining --------------------------------------------------------------------------------


def test_fifty_pipelined_requests_are_answered_in_order(broker: BrokerProcess) -> None:
    with Conn(broker.address) as setup:
        wire.ensure_topic(setup, "pipe", partitions=1)
    kinds = [
        (apis.API_VERSIONS, wire.API_VERSIONS_V,
         {"client_software_name": "pipe", "client_software_version": "1"}),
        (apis.METADATA, wire.METADATA_V,
         {"topics": [{"name": "pipe", "topic_id": wire.ZERO_UUID}], "allow_auto_topic_creation": False}),
        (apis.PRODUCE, wire.PRODUCE_V, None),
        (apis.LIST_OFFSETS, wire.LIST_OFFSETS_V, wire.list_offsets_values("pipe", [0])),
        (apis.FETCH, wire.FETCH_V, wire.fetch_values({("pipe", 0): 0}, max_wait_ms=0, min_bytes=0)),
    ]
    sent: list[tuple[int, int, int]] = []
    data = bytearray()
    for i in range(50):
        api_key, version, values = kinds[i % len(kinds)]
        if values is None:
            values = wire.produce_values("pipe", 0, wire.batch(f"m{i}".encode()), acks=1)
        cid = 1000 + i
        data += wire.request_frame(api_key, version, cid, values)
        sent.append((cid, api_key, version))
    with Conn(broker.address) as c:
        c.send_raw(bytes(data))  # all 50 before reading anything
        produced_offsets = []
        for cid, api_key, version in sent:
            got, response = c.recv_response(api_key, version, timeout=20)
            assert got == cid, f"response {got} arrived where {cid} was due"
            if api_key == apis.PRODUCE:
                (p,) = response.responses[0].partition_responses
                assert int(p.error_code) == 0
                produced_offsets.append(p.base_offset)
            elif api_key in (apis.API_VERSIONS,):
                assert int(response.error_code) == 0
        assert produced_offsets == list(range(10))
        assert not c.is_closed_by_peer(timeout=0.2)
        assert [r.value for r in wire.records_of(wire.fetch_all(c, "pipe", 0))] == [
            f"m{i}".encode() for i in range(2, 50, 5)
        ]


# -- 6. acks=0 ------------------------------------------------------------------------------------


def test_acks_zero_gets_no_response_but_is_stored(broker: BrokerProcess) -> None:
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "fire", partitions=1)
        c.send(apis.PRODUCE, wire.PRODUCE_V, wire.produce_values("fire", 0, wire.batch(b"a0", b"a1"), acks=0))
        c.send(apis.PRODUCE, wire.PRODUCE_V, wire.produce_values("fire", 0, wire.batch(b"a2"), acks=0))
        # The next response on the connection is the ApiVersions one: nothing came for the produces.
        assert int(wire.api_versions(c).error_code) == 0
        assert wire.list_offsets(c, "fire", [0]) == {0: 3}
        assert [r.value for r in wire.records_of(wire.fetch_all(c, "fire", 0))] == [b"a0", b"a1", b"a2"]


@pytest.mark.parametrize(("topic", "partition"), [("fire", 7), ("no-such-topic", 0)])
def test_acks_zero_to_an_unknown_partition_closes_the_connection(
    broker: BrokerProcess, topic: str, partition: int
) -> None:
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "fire", partitions=1)
        client = c.local_address
        c.send(apis.PRODUCE, wire.PRODUCE_V, wire.produce_values(topic, partition, wire.batch(b"lost"), acks=0))
        assert c.is_closed_by_peer(timeout=5)
    broker.wait_for_log("closing connection from " + client, "acks=0 produce failed", f"{topic}-{partition}")
    with Conn(broker.address) as c:
        assert wire.list_offsets(c, "fire", [0]) == {0: 0}


def test_acks_zero_corrupt_batch_closes_the_connection(broker: BrokerProcess) -> None:
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "fire", partitions=1)
        client = c.local_address
        bad = _flip(wire.batch(b"x"), HEADER_SIZE + 1)
        c.send(apis.PRODUCE, wire.PRODUCE_V, wire.produce_values("fire", 0, bad, acks=0))
        assert c.is_closed_by_peer(timeout=5)
    broker.wait_for_log("closing connection from " + client, "acks=0 produce failed")
    with Conn(broker.address) as c:
        assert wire.list_offsets(c, "fire", [0]) == {0: 0}


# -- 7. Long polling ------------------------------------------------------------------------------


def test_long_poll_returns_early_when_data_arrives(broker: BrokerProcess) -> None:
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "poll", partitions=1)
        assert wire.produce(c, "poll", 0, wire.batch(b"old")).error_code == 0

    def produce_later() -> None:
        time.sleep(0.3)
        with Conn(broker.address) as p:
            assert wire.produce(p, "poll", 0, wire.batch(b"new")).error_code == 0

    producer = threading.Thread(target=produce_later)
    with Conn(broker.address) as consumer:
        start = time.monotonic()
        producer.start()
        try:
            response = wire.fetch(consumer, {("poll", 0): 1}, max_wait_ms=2000, min_bytes=1)
        finally:
            producer.join(timeout=10)
        elapsed = time.monotonic() - start
    assert elapsed < 1.5, f"the long poll was not woken by the produce ({elapsed:.2f}s)"
    part = wire.fetched(response)[("poll", 0)]
    assert [(r.offset, r.value) for r in wire.records_of(part.records)] == [(1, b"new")]


def test_long_poll_waits_max_wait_without_data(broker: BrokerProcess) -> None:
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "poll", partitions=1)
        assert wire.produce(c, "poll", 0, wire.batch(b"old")).error_code == 0
        start = time.monotonic()
        response = wire.fetch(c, {("poll", 0): 1}, max_wait_ms=2000, min_bytes=1)
        elapsed = time.monotonic() - start
    assert 1.5 <= elapsed < 5, f"a fetch with nothing to return took {elapsed:.2f}s, max_wait is 2s"
    part = wire.fetched(response)[("poll", 0)]
    assert int(part.error_code) == 0 and not part.records and part.high_watermark == 1


def test_long_poll_ignores_appends_to_other_partitions(broker: BrokerProcess) -> None:
    """A produce to a partition the fetch does not ask for does not end the long poll."""
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "poll", partitions=1)
        wire.ensure_topic(c, "elsewhere", partitions=1)

    def produce_elsewhere() -> None:
        time.sleep(0.2)
        with Conn(broker.address) as p:
            assert wire.produce(p, "elsewhere", 0, wire.batch(b"x")).error_code == 0

    t = threading.Thread(target=produce_elsewhere)
    with Conn(broker.address) as consumer:
        start = time.monotonic()
        t.start()
        try:
            response = wire.fetch(consumer, {("poll", 0): 0}, max_wait_ms=1500, min_bytes=1)
        finally:
            t.join(timeout=10)
        elapsed = time.monotonic() - start
    assert 1.2 <= elapsed < 5
    assert not wire.fetched(response)[("poll", 0)].records


# -- 8. A consumer that does not read its socket --------------------------------------------------


def test_slow_consumer_does_not_block_other_clients(broker: BrokerProcess) -> None:
    chunk = bytes(range(256)) * 1024  # 256 KiB per record
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "big", partitions=1)
        for i in range(64):  # 16 MiB in partition 0
            assert wire.produce(c, "big", 0, wire.batch(chunk, key=str(i).encode())).error_code == 0
        wire.ensure_topic(c, "small", partitions=1)

    # Asks for everything, with a tiny receive buffer, and then never reads.
    stuck = Conn(broker.address, rcvbuf=4096)
    try:
        stuck.send(apis.FETCH, wire.FETCH_V,
                   wire.fetch_values({("big", 0): 0}, max_bytes=64 << 20, partition_max_bytes=64 << 20))
        time.sleep(0.5)  # let the broker start writing and fill the socket buffers
        with Conn(broker.address) as other:
            for i in range(20):
                start = time.monotonic()
                result = wire.produce(other, "small", 0, wire.batch(f"s{i}".encode()))
                assert result == wire.ProduceResult(0, i)
                part = wire.fetched(wire.fetch(other, {("small", 0): i}))[("small", 0)]
                assert [r.value for r in wire.records_of(part.records)] == [f"s{i}".encode()]
                assert time.monotonic() - start < 5.0, "another client's round trip was held up"
            # Another reader of the big partition is not held up either.
            start = time.monotonic()
            part = wire.fetched(wire.fetch(other, {("big", 0): 63}))[("big", 0)]
            assert [r.key for r in wire.records_of(part.records)] == [b"63"]
            assert time.monotonic() - start < 5.0
        # When the slow consumer finally reads, it gets its whole, intact response.
        _cid, response = stuck.recv_response(apis.FETCH, wire.FETCH_V, timeout=60)
        part = wire.fetched(response)[("big", 0)]
        records = wire.records_of(part.records)
        assert [r.key for r in records] == [str(i).encode() for i in range(64)]
        assert all(r.value == chunk for r in records)
    finally:
        stuck.close()
