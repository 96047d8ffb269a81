"""Frames a well-behaved client would never send, against a real broker process.

For every kind of bad input the broker must answer as Kafka does (ApiVersions falls back to v0
with UNSUPPORTED_VERSION; anything else it cannot answer closes the connection), log the client's
address and the reason, never hang the connection, and keep serving other clients with the data
it already holds unchanged.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaProducer

from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from tests.broker import wire
from tests.broker.process import BrokerProcess
from tests.broker.wire import Conn

SUPPORTED_RANGES = {(r.key, r.min_version, r.max_version) for r in apis.SUPPORTED.values()}


def assert_healthy(broker: BrokerProcess) -> None:
    """A new connection gets ApiVersions answered."""
    with Conn(broker.address) as c:
        response = wire.api_versions(c)
        assert int(response.error_code) == 0


def stored_snapshot(broker: BrokerProcess, topic: str, partitions: int) -> dict[int, bytes]:
    with Conn(broker.address) as c:
        return {p: wire.fetch_all(c, topic, p) for p in range(partitions)}


@pytest.fixture
def seeded(broker: BrokerProcess) -> dict[int, bytes]:
    """The broker holds a topic 'seed' with two batches in partition 0; returns the stored bytes."""
    with Conn(broker.address) as c:
        wire.ensure_topic(c, "seed")
        assert wire.produce(c, "seed", 0, wire.batch(b"first", b"second")).error_code == 0
        assert wire.produce(c, "seed", 0, wire.batch(b"third", key=b"k")).error_code == 0
    snap = stored_snapshot(broker, "seed", 1)
    assert [r.value for r in wire.records_of(snap[0])] == [b"first", b"second", b"third"]
    return snap


def assert_unchanged(broker: BrokerProcess, before: dict[int, bytes]) -> None:
    assert_healthy(broker)
    assert stored_snapshot(broker, "seed", len(before)) == before


# -- 1. ApiVersions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(5))
def test_api_versions_every_version_lists_exactly_the_supported_table(broker: BrokerProcess, version: int) -> None:
    with Conn(broker.address) as c:
        response = wire.api_versions(c, version)
    assert int(response.error_code) == 0
    got = {(k.api_key, k.min_version, k.max_version) for k in response.api_keys}
    assert got == SUPPORTED_RANGES
    assert len(response.api_keys) == len(apis.SUPPORTED)


def test_api_versions_unknown_version_answers_v0_with_unsupported_version(broker: BrokerProcess) -> None:
    # What a newer client sends (KIP-511): its highest ApiVersions version, header v2, v3-style body.
    body = wire.encode_body(apis.API_VERSIONS, 3, {"client_software_name": "future", "client_software_version": "9"})
    header = wire.request_header(apis.API_VERSIONS, 99, 4242, flexible=True)
    with Conn(broker.address) as c:
        c.send_raw(wire.frame(header + body))
        correlation_id, response = c.recv_response(apis.API_VERSIONS, 0)
        assert correlation_id == 4242
        assert int(response.error_code) == ErrorCode.UNSUPPORTED_VERSION == 35
        assert {(k.api_key, k.min_version, k.max_version) for k in response.api_keys} == SUPPORTED_RANGES
        # The client then retries with a version the broker supports, on the same connection.
        assert int(wire.api_versions(c, 3).error_code) == 0


# -- 2. Unknown API key, unsupported version --------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version", "reason"),
    [
        (999, 0, "unknown or unsupported api key 999"),
        (apis.PRODUCE, 1, "Produce v1 is not supported"),
        (apis.FETCH, 99, "Fetch v99 is not supported"),
        (apis.METADATA, -1, "Metadata v-1 is not supported"),
    ],
)
def test_unknown_api_or_version_closes_the_connection_and_logs(
    broker: BrokerProcess, api_key: int, version: int, reason: str
) -> None:
    header = wire.request_header(api_key, version, 7, flexible=False)
    with Conn(broker.address) as c:
        client = c.local_address
        c.send_raw(wire.frame(header + b"\x00\x00\x00\x00"))
        assert c.is_closed_by_peer(timeout=5), "the broker neither answered nor closed the connection"
    line = broker.wait_for_log("closing connection from " + client, reason)
    assert "WARNING" in line
    assert_healthy(broker)


# -- 3. socket.request.max.bytes --------------------------------------------------------------------


@pytest.mark.parametrize("size", [2000, 2**31 - 1])
def test_size_prefix_over_the_limit_closes_at_once(broker_factory, size: int) -> None:
    broker = broker_factory("socket.request.max.bytes=1000")
    rss_before = broker.rss_kib()
    with Conn(broker.address) as c:
        client = c.local_address
        c.send_raw(struct.pack(">i", size))  # and no body: the broker must not wait for one
        assert c.is_closed_by_peer(timeout=2), "an oversized size prefix did not close the connection"
    broker.wait_for_log("closing connection from " + client, f"request size {size}",
                        "exceeds socket.request.max.bytes=1000")
    assert_healthy(broker)
    assert broker.rss_kib() - rss_before < 20 * 1024, "the broker allocated memory for an oversized frame"


def test_request_just_under_the_limit_is_served(broker_factory) -> None:
    broker = broker_factory("socket.request.max.bytes=1000")
    long_name = "n" * 900
    with Conn(broker.address) as c:
        response = wire.api_versions(c)  # a small request
        assert int(response.error_code) == 0
        body = wire.encode_body(apis.API_VERSIONS, 3, {"client_software_name": long_name,
                                                        "client_software_version": "1"})
        payload = wire.request_header(apis.API_VERSIONS, 3, 9, flexible=True) + body
        assert len(payload) <= 1000
        c.send_raw(wire.frame(payload))
        cid, response = c.recv_response(apis.API_VERSIONS, 3)
        assert cid == 9


# -- 4. Truncated, malformed, negative, random ------------------------------------------------------


def test_truncated_frame_then_close(broker: BrokerProcess, seeded: dict[int, bytes]) -> None:
    full = wire.request_frame(apis.METADATA, wire.METADATA_V, 1, {"topics": None, "allow_auto_topic_creation": False})
    with Conn(broker.address) as c:
        client = c.local_address
        c.send_raw(struct.pack(">i", 100) + full[4:14])  # promises 100 bytes, sends 10, then goes away
    broker.wait_for_log("connection from " + client, "closed in the middle of a request")
    assert_unchanged(broker, seeded)


def test_truncated_frame_keeps_waiting_without_blocking_others(broker: BrokerProcess, seeded) -> None:
    with Conn(broker.address) as stalled:
        stalled.send_raw(struct.pack(">i", 500) + b"\x00\x03")
        assert_unchanged(broker, seeded)  # another client is served while this one stalls mid-frame
        assert not stalled.is_closed_by_peer(timeout=0.3)  # a slow sender is not cut off


@pytest.mark.parametrize("size", [0, -1, -(2**31)])
def test_zero_or_negative_size_closes_the_connection(broker: BrokerProcess, seeded, size: int) -> None:
    with Conn(broker.address) as c:
        client = c.local_address
        c.send_raw(struct.pack(">i", size) + b"\x00" * 16)
        assert c.is_closed_by_peer(timeout=2)
    broker.wait_for_log("closing connection from " + client, f"request size {size}", "is invalid")
    assert_unchanged(broker, seeded)


def _valid_bodies() -> dict[str, tuple[int, int, bytes]]:
    produce = wire.encode_body(apis.PRODUCE, wire.PRODUCE_V,
                               wire.produce_values("seed", 0, wire.batch(b"never stored"), acks=1))
    fetch = wire.encode_body(apis.FETCH, wire.FETCH_V, wire.fetch_values({("seed", 0): 0}))
    offsets = wire.encode_body(apis.LIST_OFFSETS, wire.LIST_OFFSETS_V, wire.list_offsets_values("seed", [0]))
    meta = wire.encode_body(apis.METADATA, wire.METADATA_V,
                            {"topics": [{"name": "seed", "topic_id": wire.ZERO_UUID}],
                             "allow_auto_topic_creation": False})
    return {
        "produce": (apis.PRODUCE, wire.PRODUCE_V, produce),
        "fetch": (apis.FETCH, wire.FETCH_V, fetch),
        "list_offsets": (apis.LIST_OFFSETS, wire.LIST_OFFSETS_V, offsets),
        "metadata": (apis.METADATA, wire.METADATA_V, meta),
    }


@pytest.mark.parametrize("which", ["produce", "fetch", "list_offsets", "metadata"])
@pytest.mark.parametrize("damage", ["cut_in_half", "garbage", "empty"])
def test_malformed_body_closes_the_connection(broker: BrokerProcess, seeded, which: str, damage: str) -> None:
    api_key, version, body = _valid_bodies()[which]
    if damage == "cut_in_half":
        body = body[: len(body) // 2]
    elif damage == "garbage":
        body = b"\xff" * 40
    else:
        body = b""
    header = wire.request_header(api_key, version, 11, flexible=apis.request_is_flexible(api_key, version))
    with Conn(broker.address) as c:
        client = c.local_address
        c.send_raw(wire.frame(header + body))
        assert c.is_closed_by_peer(timeout=5), "a malformed request was neither refused nor answered"
    broker.wait_for_log("closing connection from " + client, "malformed", apis.SUPPORTED[api_key].name)
    assert_unchanged(broker, seeded)


def test_header_cut_short_closes_the_connection(broker: BrokerProcess, seeded) -> None:
    with Conn(broker.address) as c:
        client = c.local_address
        c.send_raw(wire.frame(struct.pack(">hh", apis.METADATA, 12)))  # no correlation id
        assert c.is_closed_by_peer(timeout=5)
    broker.wait_for_log("closing connection from " + client, "too short")
    with Conn(broker.address) as c:
        client = c.local_address
        # client_id claims 200 bytes, 3 follow
        c.send_raw(wire.frame(struct.pack(">hhih", apis.METADATA, 12, 1, 200) + b"abc"))
        assert c.is_closed_by_peer(timeout=5)
    broker.wait_for_log("closing connection from " + client, "client_id")
    assert_unchanged(broker, seeded)


def _send_and_drain(broker: BrokerProcess, data: bytes) -> None:
    """Send ``data``, half-close, and require the broker to finish with the connection (bounded)."""
    with Conn(broker.address) as c:
        try:
            c.send_raw(data)
            c.sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            return  # closed by the broker while we were still sending: fine
        assert c.is_closed_by_peer(timeout=10), f"the broker hung on input {data[:64]!r}..."


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=0, max_size=300))
def test_random_bytes_never_hang_or_kill_the_broker(shared_broker: BrokerProcess, data: bytes) -> None:
    _send_and_drain(shared_broker, data)
    assert shared_broker.running
    assert_healthy(shared_broker)


_FUZZED_APIS = [apis.PRODUCE, apis.FETCH, apis.LIST_OFFSETS, apis.METADATA, apis.API_VERSIONS,
                apis.FIND_COORDINATOR, apis.JOIN_GROUP, apis.SYNC_GROUP, apis.HEARTBEAT, apis.LEAVE_GROUP,
                apis.OFFSET_COMMIT, apis.OFFSET_FETCH, apis.DESCRIBE_GROUPS, apis.LIST_GROUPS, apis.DELETE_GROUPS,
                apis.OFFSET_DELETE]


@st.composite
def framed_requests(draw: st.DrawFn) -> bytes:
    """A well-framed request of a supported API and version whose body is random."""
    api_key = draw(st.sampled_from(_FUZZED_APIS))
    r = apis.SUPPORTED[api_key]
    version = draw(st.integers(r.min_version, r.max_version))
    cid = draw(st.integers(0, 2**31 - 1))
    header = wire.request_header(api_key, version, cid, flexible=apis.request_is_flexible(api_key, version))
    return wire.frame(header + draw(st.binary(max_size=200)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=framed_requests())
def test_random_bodies_never_hang_or_kill_the_broker(shared_broker: BrokerProcess, data: bytes) -> None:
    _send_and_drain(shared_broker, data)
    assert shared_broker.running
    assert_healthy(shared_broker)


def test_real_clients_work_after_a_barrage_of_bad_input(broker: BrokerProcess, seeded) -> None:
    bad_inputs = [
        wire.frame(wire.request_header(999, 0, 1, flexible=False)),
        wire.frame(wire.request_header(apis.PRODUCE, 1, 2, flexible=False) + b"\x00" * 8),
        struct.pack(">i", -5),
        wire.frame(wire.request_header(apis.FETCH, wire.FETCH_V, 3, flexible=True) + b"\xff" * 40),
        struct.pack(">i", 1000) + b"\x00\x01\x00",
    ]
    for data in bad_inputs:
        _send_and_drain(broker, data)

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks="all",
                             request_timeout_ms=10_000, max_block_ms=10_000)
    try:
        for i in range(30):
            producer.send("seed", value=f"kp-{i}".encode(), partition=0)
        producer.flush(timeout=20)
    finally:
        producer.close(timeout=10)

    consumer = ConfluentConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([ConfluentTopicPartition("seed", 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 33 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"first", b"second", b"third"] + [f"kp-{i}".encode() for i in range(30)]
    with Conn(broker.address) as c:
        assert wire.fetch_all(c, "seed", 0).startswith(seeded[0])
