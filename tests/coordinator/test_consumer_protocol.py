"""Tests of consumer_protocol.py: the subscription and assignment bytes consumers exchange.

The exact-bytes examples were worked out by hand from Kafka's ConsumerProtocolSubscription.json and
ConsumerProtocolAssignment.json; the property tests also check every version against kio's
serializer (generated from the same schemas), which writes the body that follows the int16 version.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.consumer_protocol_assignment.v3 import data as kio_assignment
from kio.schema.consumer_protocol_subscription.v3 import data as kio_subscription
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32 as kio_i32

from odradek.coordinator.group.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)


def i16(v: int) -> bytes:
    return v.to_bytes(2, "big", signed=True)


def i32(v: int) -> bytes:
    return v.to_bytes(4, "big", signed=True)


# -- exact bytes, hand-worked -------------------------------------------------------------------------

SUBSCRIPTION = Subscription(
    topics=("orders", "audit"),
    user_data=None,
    owned_partitions=(("orders", (0, 2)),),
    generation_id=7,
    rack_id="r1",
)
SUBSCRIPTION_V3 = (
    b"\x00\x03"  # version 3
    + b"\x00\x00\x00\x02"  # topics: int32 count
    + b"\x00\x06orders"
    + b"\x00\x05audit"
    + b"\xff\xff\xff\xff"  # user_data: null
    + b"\x00\x00\x00\x01"  # owned_partitions: 1 topic
    + b"\x00\x06orders"
    + b"\x00\x00\x00\x02"  # 2 partitions
    + b"\x00\x00\x00\x00"
    + b"\x00\x00\x00\x02"
    + b"\x00\x00\x00\x07"  # generation_id
    + b"\x00\x02r1"  # rack_id (nullable string)
)

ASSIGNMENT = Assignment(partitions=(("orders", (0, 1)), ("audit", ())), user_data=b"\xca\xfe")
ASSIGNMENT_V0 = (
    b"\x00\x00"  # version 0
    + b"\x00\x00\x00\x02"  # assigned_partitions: 2 topics
    + b"\x00\x06orders"
    + b"\x00\x00\x00\x02"
    + b"\x00\x00\x00\x00"
    + b"\x00\x00\x00\x01"
    + b"\x00\x05audit"
    + b"\x00\x00\x00\x00"  # no partitions
    + b"\x00\x00\x00\x02\xca\xfe"  # user_data
)


def test_subscription_v3_bytes() -> None:
    assert encode_subscription(SUBSCRIPTION) == SUBSCRIPTION_V3
    assert decode_subscription(SUBSCRIPTION_V3) == SUBSCRIPTION


def test_subscription_v0_bytes() -> None:
    # As kafka-python and older Java clients send it: topics and an empty (not null) user_data.
    raw = b"\x00\x00" + i32(1) + b"\x00\x06orders" + i32(0)
    assert decode_subscription(raw) == Subscription(("orders",), b"")
    assert encode_subscription(Subscription(("orders",), b"", (("orders", (1,)),), 4, "r"), version=0) == raw


def test_subscription_v1_and_v2() -> None:
    v1 = b"\x00\x01" + i32(1) + b"\x00\x01t" + i32(-1) + i32(1) + b"\x00\x01t" + i32(1) + i32(9)
    assert decode_subscription(v1) == Subscription(("t",), None, (("t", (9,)),))
    v2 = b"\x00\x02" + v1[2:] + i32(12)
    assert decode_subscription(v2) == Subscription(("t",), None, (("t", (9,)),), 12)
    assert encode_subscription(decode_subscription(v2), version=2) == v2


def test_assignment_bytes_every_version() -> None:
    for version in range(4):
        raw = i16(version) + ASSIGNMENT_V0[2:]
        assert encode_assignment(ASSIGNMENT, version=version) == raw
        assert decode_assignment(raw) == ASSIGNMENT
    assert encode_assignment(ASSIGNMENT) == b"\x00\x03" + ASSIGNMENT_V0[2:]


def test_empty_assignment() -> None:
    assert decode_assignment(b"") == Assignment(())
    assert decode_assignment(b"\x00\x01" + i32(0) + i32(-1)) == Assignment((), None)


def test_newer_versions_read_the_known_fields() -> None:
    future = b"\x00\x09" + SUBSCRIPTION_V3[2:] + b"\x00\x00\x00\x2a new fields"
    assert decode_subscription(future) == SUBSCRIPTION
    future = b"\x7f\xff" + ASSIGNMENT_V0[2:] + b"\x01\x02\x03"
    assert decode_assignment(future) == ASSIGNMENT


def test_trailing_bytes_are_ignored_as_kafka_does() -> None:
    raw = b"\x00\x00" + i32(1) + b"\x00\x01t" + i32(-1)
    assert decode_subscription(raw + b"\x00") == Subscription(("t",))


# -- malformed input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "truncated"),
        (b"\x00", "truncated"),
        (b"\xff\xff" + i32(0) + i32(-1), "negative version -1"),
        (b"\x00\x00" + i32(-1) + i32(-1), "topics is null"),
        (b"\x00\x00" + i32(-2) + i32(-1), "negative length -2"),
        (b"\x00\x00" + i32(1) + b"\xff\xff" + i32(-1), "topic is null"),
        (b"\x00\x00" + i32(1) + b"\x00\x05ab", "truncated"),
        (b"\x00\x00" + i32(1) + b"\x00\x02\xc3\x28" + i32(-1), "UTF-8"),
        (b"\x00\x00" + i32(0) + i32(-2), "user_data has negative length -2"),
        (b"\x00\x00" + i32(0) + i32(5) + b"ab", "truncated"),
        (b"\x00\x00" + i32(0), "truncated"),
        (b"\x00\x01" + i32(0) + i32(-1) + i32(1) + b"\x00\x01t" + i32(-1), "partitions of 't' is null"),
        (b"\x00\x01" + i32(0) + i32(-1) + i32(2**31 - 1), "truncated"),
        (b"\x00\x03" + i32(0) + i32(-1) + i32(0) + i32(1) + b"\xff\xfe", "rack_id has negative length -2"),
    ],
)
def test_malformed_subscriptions(raw: bytes, message: str) -> None:
    with pytest.raises(ConsumerProtocolError, match=message):
        decode_subscription(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x00", "truncated"),
        (b"\x80\x00", "negative version"),
        (b"\x00\x00" + i32(-1) + i32(-1), "assigned_partitions is null"),
        (b"\x00\x00" + i32(1) + b"\x00\x01t" + i32(3) + i32(0), "truncated"),
        (b"\x00\x00" + i32(0), "truncated"),
        (b"\x00\x00" + i32(0) + i32(-3), "negative length -3"),
    ],
)
def test_malformed_assignments(raw: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_assignment(raw)


def test_unencodable() -> None:
    with pytest.raises(ValueError, match="version 4"):
        encode_subscription(SUBSCRIPTION, version=4)
    with pytest.raises(ValueError, match="version -1"):
        encode_assignment(ASSIGNMENT, version=-1)
    with pytest.raises(ValueError, match="partition"):
        encode_assignment(Assignment((("t", (2**31,)),)))


# -- properties, and agreement with kio ---------------------------------------------------------------

int32s = st.integers(-(2**31), 2**31 - 1)
names = st.text(max_size=12)
topic_partitions = st.lists(st.tuples(names, st.lists(int32s, max_size=5).map(tuple)), max_size=4).map(tuple)
user_datas = st.none() | st.binary(max_size=20)
subscriptions = st.builds(
    Subscription,
    st.lists(names, max_size=5).map(tuple),
    user_datas,
    topic_partitions,
    int32s,
    st.none() | names,
)
assignments = st.builds(Assignment, topic_partitions, user_datas)


def kio_bytes(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def as_kio_subscription(s: Subscription) -> Any:
    return kio_subscription.ConsumerProtocolSubscription(
        topics=s.topics,
        user_data=s.user_data,
        owned_partitions=tuple(
            kio_subscription.TopicPartition(topic=t, partitions=tuple(kio_i32(p) for p in ps))
            for t, ps in s.owned_partitions
        ),
        generation_id=kio_i32(s.generation_id),
        rack_id=s.rack_id,
    )


@given(subscriptions)
def test_subscription_round_trip_and_kio_agrees(s: Subscription) -> None:
    raw = encode_subscription(s)
    assert decode_subscription(raw) == s
    assert raw[2:] == kio_bytes(as_kio_subscription(s))


@given(subscriptions, st.integers(0, 3))
def test_subscription_every_version(s: Subscription, version: int) -> None:
    expected = Subscription(
        s.topics,
        s.user_data,
        s.owned_partitions if version >= 1 else (),
        s.generation_id if version >= 2 else -1,
        s.rack_id if version >= 3 else None,
    )
    assert decode_subscription(encode_subscription(s, version)) == expected


@given(assignments)
def test_assignment_round_trip_and_kio_agrees(a: Assignment) -> None:
    raw = encode_assignment(a)
    assert decode_assignment(raw) == a
    theirs = kio_assignment.ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            kio_assignment.TopicPartition(topic=t, partitions=tuple(kio_i32(p) for p in ps)) for t, ps in a.partitions
        ),
        user_data=a.user_data,
    )
    assert raw[2:] == kio_bytes(theirs)
    decoded, _size = entity_reader(type(theirs))(raw[2:], 0)
    assert decoded == theirs


@given(st.binary(max_size=96))
def test_random_bytes_raise_only_consumer_protocol_error(raw: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(raw)
        except ConsumerProtocolError:
            pass


@given(subscriptions, st.data())
def test_truncated_subscriptions_raise(s: Subscription, data: st.DataObject) -> None:
    raw = encode_subscription(s)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(raw[:cut])
