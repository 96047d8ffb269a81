"""Tests of records.py: the ``__consumer_offsets`` record formats.

The exact-bytes examples were worked out by hand from Kafka's schemas (OffsetCommitKey.json,
OffsetCommitValue.json, GroupMetadataKey.json, GroupMetadataValue.json), field by field, so they
prove byte compatibility with what a Kafka broker writes and reads. The hash codes of
``partition_for`` are Java's ``String.hashCode`` values (several are well-known Java trivia).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.coordinator.group import records
from odradek.coordinator.group.records import (
    CoordinatorRecordError,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_record,
    encode_key,
    encode_value,
    partition_for,
)


def i16(v: int) -> bytes:
    return v.to_bytes(2, "big", signed=True)


def i32(v: int) -> bytes:
    return v.to_bytes(4, "big", signed=True)


def i64(v: int) -> bytes:
    return v.to_bytes(8, "big", signed=True)


# -- partition_for ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "java_hash"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),  # the classic collision with "BB"
        ("BB", 2112),
        ("é", 233),  # U+00E9: one UTF-16 unit
        ("日本", 26085 * 31 + 26412),  # U+65E5 U+672C
        ("😀", 0xD83D * 31 + 0xDE00),  # U+1F600 is the surrogate pair D83D DE00 in UTF-16
        ("hello world", 1794106052),  # overflows int32 on the way
        ("abcdefghijklmnopqrstuvwxyz", 958031277),
        ("my-group", -1906497762),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
    ],
)
def test_java_string_hash(group: str, java_hash: int) -> None:
    assert records._java_string_hash(group) == java_hash


def test_partition_for_follows_kafka_utils_abs() -> None:
    assert partition_for("", 50) == 0
    assert partition_for("a", 50) == 97 % 50
    assert partition_for("hello", 50) == 99162322 % 50 == 22
    # Negative hash: Kafka's Utils.abs is Math.abs (masking with 0x7fffffff would give 36).
    assert partition_for("my-group", 50) == 1906497762 % 50 == 12
    # Utils.abs(Integer.MIN_VALUE) is 0.
    assert partition_for("polygenelubricants", 7) == 0
    assert partition_for("anything", 1) == 0
    with pytest.raises(ValueError):
        partition_for("g", 0)


@given(st.text(), st.integers(1, 1000))
def test_partition_for_is_in_range(group: str, n: int) -> None:
    assert 0 <= partition_for(group, n) < n


# -- exact bytes, hand-worked -------------------------------------------------------------------------

OFFSET_KEY = OffsetKey("my-group", "orders", 3)
OFFSET_KEY_BYTES = (
    b"\x00\x01"  # key version 1
    + b"\x00\x08my-group"  # group: int16 length + UTF-8
    + b"\x00\x06orders"  # topic
    + b"\x00\x00\x00\x03"  # partition int32
)

GROUP_KEY = GroupKey("my-group")
GROUP_KEY_BYTES = b"\x00\x02" + b"\x00\x08my-group"  # key version 2, group

OFFSET_VALUE = OffsetValue(offset=42, leader_epoch=5, metadata="", commit_timestamp=1_700_000_000_000)
OFFSET_VALUE_V3 = (
    b"\x00\x03"  # value version 3
    + b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # offset int64 = 42
    + b"\x00\x00\x00\x05"  # leader_epoch int32 = 5
    + b"\x00\x00"  # metadata "" (int16 length 0)
    + b"\x00\x00\x01\x8b\xcf\xe5\x68\x00"  # commit_timestamp int64 = 1_700_000_000_000
)

MEMBER = MemberValue(
    member_id="m1",
    group_instance_id=None,
    client_id="c",
    client_host="/h",
    rebalance_timeout=300_000,
    session_timeout=45_000,
    subscription=b"\x00\x01",
    assignment=b"",
)
GROUP_VALUE = GroupValue(
    protocol_type="consumer",
    generation=1,
    protocol="range",
    leader="m1",
    current_state_timestamp=1000,
    members=(MEMBER,),
)
GROUP_VALUE_V3 = (
    b"\x00\x03"  # value version 3
    + b"\x00\x08consumer"  # protocol_type
    + b"\x00\x00\x00\x01"  # generation
    + b"\x00\x05range"  # protocol (nullable string)
    + b"\x00\x02m1"  # leader (nullable string)
    + b"\x00\x00\x00\x00\x00\x00\x03\xe8"  # current_state_timestamp int64 = 1000
    + b"\x00\x00\x00\x01"  # members: int32 count
    + b"\x00\x02m1"  # member_id
    + b"\xff\xff"  # group_instance_id: null
    + b"\x00\x01c"  # client_id
    + b"\x00\x02/h"  # client_host
    + b"\x00\x04\x93\xe0"  # rebalance_timeout int32 = 300000
    + b"\x00\x00\xaf\xc8"  # session_timeout int32 = 45000
    + b"\x00\x00\x00\x02\x00\x01"  # subscription: int32 length + bytes
    + b"\x00\x00\x00\x00"  # assignment: empty
)


def test_offset_key_bytes() -> None:
    assert encode_key(OFFSET_KEY) == OFFSET_KEY_BYTES
    assert decode_record(OFFSET_KEY_BYTES, None) == (OFFSET_KEY, None)


def test_offset_key_v0_reads_like_v1() -> None:
    assert decode_record(b"\x00\x00" + OFFSET_KEY_BYTES[2:], None) == (OFFSET_KEY, None)


def test_group_key_bytes() -> None:
    assert encode_key(GROUP_KEY) == GROUP_KEY_BYTES
    assert decode_record(GROUP_KEY_BYTES, None) == (GROUP_KEY, None)


def test_offset_value_v3_bytes() -> None:
    assert encode_value(OFFSET_VALUE) == OFFSET_VALUE_V3
    assert decode_record(OFFSET_KEY_BYTES, OFFSET_VALUE_V3) == (OFFSET_KEY, OFFSET_VALUE)


def test_offset_value_with_expiry_is_written_as_v1() -> None:
    value = OffsetValue(offset=7, leader_epoch=-1, metadata="m", commit_timestamp=1000, expire_timestamp=2000)
    v1 = b"\x00\x01" + i64(7) + b"\x00\x01m" + i64(1000) + i64(2000)
    assert encode_value(value) == v1
    assert decode_record(OFFSET_KEY_BYTES, v1) == (OFFSET_KEY, value)
    # v1 has no leader epoch, as in Kafka: it reads back as -1.
    with_epoch = OffsetValue(7, 3, "m", 1000, 2000)
    assert encode_value(with_epoch) == v1


def test_group_value_v3_bytes() -> None:
    assert encode_value(GROUP_VALUE) == GROUP_VALUE_V3
    assert decode_record(GROUP_KEY_BYTES, GROUP_VALUE_V3) == (GROUP_KEY, GROUP_VALUE)


def test_empty_group_value_bytes() -> None:
    # What Kafka writes for a group in state Empty: no protocol, no leader, no members.
    value = GroupValue("consumer", 2, None, None, 5, ())
    raw = b"\x00\x03" + b"\x00\x08consumer" + i32(2) + b"\xff\xff" + b"\xff\xff" + i64(5) + i32(0)
    assert encode_value(value) == raw
    assert decode_record(GROUP_KEY_BYTES, raw) == (GROUP_KEY, value)


def test_static_member_bytes() -> None:
    member = MemberValue("m", "i-1", "c", "h", 10, 20, b"", b"\x07")
    raw = (
        b"\x00\x03"
        + b"\x00\x08consumer"
        + i32(1)
        + b"\x00\x05range"
        + b"\x00\x01m"
        + i64(-1)
        + i32(1)
        + b"\x00\x01m"
        + b"\x00\x03i-1"  # group_instance_id
        + b"\x00\x01c"
        + b"\x00\x01h"
        + i32(10)
        + i32(20)
        + i32(0)
        + i32(1)
        + b"\x07"
    )
    value = GroupValue("consumer", 1, "range", "m", -1, (member,))
    assert encode_value(value) == raw
    assert decode_record(GROUP_KEY_BYTES, raw) == (GROUP_KEY, value)


def test_tombstones() -> None:
    assert encode_value(None) is None
    assert decode_record(OFFSET_KEY_BYTES, None) == (OFFSET_KEY, None)
    assert decode_record(GROUP_KEY_BYTES, None) == (GROUP_KEY, None)


# -- older and newer versions -------------------------------------------------------------------------


def test_offset_value_v0_and_v2() -> None:
    body = i64(42) + b"\x00\x04meta" + i64(1234)  # offset | metadata | commit_timestamp
    expected = OffsetValue(42, -1, "meta", 1234, -1)
    assert decode_record(OFFSET_KEY_BYTES, b"\x00\x00" + body) == (OFFSET_KEY, expected)
    assert decode_record(OFFSET_KEY_BYTES, b"\x00\x02" + body) == (OFFSET_KEY, expected)


def test_offset_value_v1() -> None:
    raw = b"\x00\x01" + i64(42) + b"\x00\x00" + i64(1234) + i64(99999)
    assert decode_record(OFFSET_KEY_BYTES, raw) == (OFFSET_KEY, OffsetValue(42, -1, "", 1234, 99999))


def test_offset_value_v4_flexible() -> None:
    raw = (
        b"\x00\x04"
        + i64(42)
        + i32(5)
        + b"\x05meta"  # compact string: uvarint length + 1
        + i64(1234)
        + b"\x00"  # no tagged fields
    )
    expected = OffsetValue(42, 5, "meta", 1234)
    assert decode_record(OFFSET_KEY_BYTES, raw) == (OFFSET_KEY, expected)
    assert records._encode_offset_value(expected, 4) == raw
    # Unknown tagged fields are skipped: 2 fields, tag 0 of 2 bytes, tag 300 (varint ac 02) of 1 byte.
    tagged = raw[:-1] + b"\x02" + b"\x00\x02\xab\xcd" + b"\xac\x02\x01\xff"
    assert decode_record(OFFSET_KEY_BYTES, tagged) == (OFFSET_KEY, expected)


def test_group_value_v0() -> None:
    raw = (
        b"\x00\x00"
        + b"\x00\x08consumer"
        + i32(3)
        + b"\x00\x05range"
        + b"\x00\x02m1"
        + i32(1)
        + b"\x00\x02m1"  # member_id
        + b"\x00\x01c"  # client_id
        + b"\x00\x02/h"  # client_host
        + i32(30_000)  # session_timeout (no rebalance_timeout in v0)
        + i32(1)
        + b"\x01"
        + i32(0)
    )
    member = MemberValue("m1", None, "c", "/h", 30_000, 30_000, b"\x01", b"")
    expected = GroupValue("consumer", 3, "range", "m1", -1, (member,))
    assert decode_record(GROUP_KEY_BYTES, raw) == (GROUP_KEY, expected)


def test_group_value_v1_and_v2() -> None:
    head = b"\x00\x08consumer" + i32(3) + b"\x00\x05range" + b"\x00\x02m1"
    member = b"\x00\x02m1" + b"\x00\x01c" + b"\x00\x02/h" + i32(60_000) + i32(30_000) + i32(0) + i32(0)
    v1 = b"\x00\x01" + head + i32(1) + member
    v2 = b"\x00\x02" + head + i64(777) + i32(1) + member
    m = MemberValue("m1", None, "c", "/h", 60_000, 30_000, b"", b"")
    assert decode_record(GROUP_KEY_BYTES, v1) == (GROUP_KEY, GroupValue("consumer", 3, "range", "m1", -1, (m,)))
    assert decode_record(GROUP_KEY_BYTES, v2) == (GROUP_KEY, GroupValue("consumer", 3, "range", "m1", 777, (m,)))


def test_group_value_v4_flexible() -> None:
    raw = (
        b"\x00\x04"
        + b"\x09consumer"  # compact string
        + i32(1)
        + b"\x06range"
        + b"\x03m1"
        + i64(1000)
        + b"\x02"  # compact array: 1 member
        + b"\x03m1"
        + b"\x00"  # group_instance_id: null
        + b"\x02c"
        + b"\x03/h"
        + i32(300_000)
        + i32(45_000)
        + b"\x03\x00\x01"  # compact bytes
        + b"\x01"  # empty compact bytes
        + b"\x00"  # member's tagged fields
        + b"\x00"  # value's tagged fields
    )
    assert decode_record(GROUP_KEY_BYTES, raw) == (GROUP_KEY, GROUP_VALUE)
    assert records._encode_group_value(GROUP_VALUE, 4) == raw


def test_newer_key_versions_are_skipped() -> None:
    # Key versions 3+ are KIP-848 consumer groups, share groups, streams groups...
    for version in (3, 4, 11, 32767):
        assert decode_record(i16(version) + b"\x00\x01g", b"anything") is None
        assert decode_record(i16(version), None) is None


# -- malformed input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (b"", None, "truncated"),
        (b"\x00", None, "truncated"),
        (b"\xff\xff", None, "negative key version"),
        (OFFSET_KEY_BYTES[:-1], None, "truncated"),
        (OFFSET_KEY_BYTES + b"\x00", None, "1 trailing bytes"),
        (b"\x00\x02\xff\xff", None, "null"),
        (b"\x00\x02\xff\xfe", None, "negative length -2"),
        (b"\x00\x02\x00\x02\xc3\x28", None, "UTF-8"),
        (OFFSET_KEY_BYTES, b"", "truncated"),
        (OFFSET_KEY_BYTES, OFFSET_VALUE_V3[:-1], "truncated"),
        (OFFSET_KEY_BYTES, OFFSET_VALUE_V3 + b"\x00", "trailing"),
        (OFFSET_KEY_BYTES, b"\x00\x05" + OFFSET_VALUE_V3[2:], "unknown version 5"),
        (OFFSET_KEY_BYTES, b"\xff\xff" + OFFSET_VALUE_V3[2:], "unknown version -1"),
        (GROUP_KEY_BYTES, GROUP_VALUE_V3[:-1], "truncated"),
        (GROUP_KEY_BYTES, GROUP_VALUE_V3 + b"\x00", "trailing"),
        (GROUP_KEY_BYTES, b"\x00\x03\xff\xff", "protocol_type is null"),
        (GROUP_KEY_BYTES, b"\x00\x04\x00", "protocol_type is null"),
        (GROUP_KEY_BYTES, b"\x00\x04\x80\x80\x80\x80\x80\x01", "longer than 5 bytes"),
        (GROUP_KEY_BYTES, b"\x00\x03\x00\x00" + i32(0) + b"\xff\xff" * 2 + i64(0) + i32(-5), "negative length -5"),
        (GROUP_KEY_BYTES, b"\x00\x03\x00\x00" + i32(0) + b"\xff\xff" * 2 + i64(0) + i32(2**31 - 1), "truncated"),
    ],
)
def test_malformed_records(key: bytes, value: bytes | None, message: str) -> None:
    with pytest.raises(CoordinatorRecordError, match=message):
        decode_record(key, value)


def test_error_is_a_value_error_naming_the_record() -> None:
    with pytest.raises(ValueError, match=r"offset commit value v3: truncated.*at byte"):
        decode_record(OFFSET_KEY_BYTES, OFFSET_VALUE_V3[:-3])


def test_unencodable_values() -> None:
    with pytest.raises(CoordinatorRecordError, match="partition"):
        encode_key(OffsetKey("g", "t", 2**31))
    with pytest.raises(CoordinatorRecordError, match="32767"):
        encode_key(GroupKey("x" * 40_000))
    with pytest.raises(CoordinatorRecordError, match="offset"):
        encode_value(OffsetValue(2**63, -1, "", 0))


# -- properties ---------------------------------------------------------------------------------------

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=20)

offset_keys = st.builds(OffsetKey, names, names, int32s)
group_keys = st.builds(GroupKey, names)
offset_values = st.builds(OffsetValue, int64s, int32s, names, int64s, st.just(-1))
members = st.builds(
    MemberValue,
    names,
    st.none() | names,
    names,
    names,
    int32s,
    int32s,
    st.binary(max_size=30),
    st.binary(max_size=30),
)
group_values = st.builds(
    GroupValue,
    names,
    int32s,
    st.none() | names,
    st.none() | names,
    int64s,
    st.lists(members, max_size=4).map(tuple),
)


@given(offset_keys | group_keys)
def test_key_round_trip(key: records.Key) -> None:
    assert decode_record(encode_key(key), None) == (key, None)


@given(offset_keys, offset_values)
def test_offset_round_trip(key: OffsetKey, value: OffsetValue) -> None:
    encoded = encode_value(value)
    assert encoded is not None
    assert decode_record(encode_key(key), encoded) == (key, value)


@given(offset_values, int64s)
def test_offset_with_expiry_round_trip(value: OffsetValue, expire: int) -> None:
    value = OffsetValue(value.offset, -1, value.metadata, value.commit_timestamp, expire)
    assert decode_record(OFFSET_KEY_BYTES, encode_value(value)) == (OFFSET_KEY, value)


@given(group_keys, group_values)
def test_group_round_trip(key: GroupKey, value: GroupValue) -> None:
    encoded = encode_value(value)
    assert encoded is not None
    assert decode_record(encode_key(key), encoded) == (key, value)


@given(group_values, st.integers(0, 4))
def test_group_round_trip_every_version(value: GroupValue, version: int) -> None:
    decoded = decode_record(GROUP_KEY_BYTES, records._encode_group_value(value, version))
    assert decoded is not None
    got = decoded[1]
    assert isinstance(got, GroupValue)
    # What each version cannot hold comes back as Kafka's default.
    want_members = tuple(
        MemberValue(
            m.member_id,
            m.group_instance_id if version >= 3 else None,
            m.client_id,
            m.client_host,
            m.rebalance_timeout if version >= 1 else m.session_timeout,
            m.session_timeout,
            m.subscription,
            m.assignment,
        )
        for m in value.members
    )
    want_ts = value.current_state_timestamp if version >= 2 else -1
    assert got == GroupValue(value.protocol_type, value.generation, value.protocol, value.leader, want_ts, want_members)


@given(offset_values, st.integers(0, 4))
def test_offset_round_trip_every_version(value: OffsetValue, version: int) -> None:
    decoded = decode_record(OFFSET_KEY_BYTES, records._encode_offset_value(value, version))
    assert decoded is not None
    epoch = value.leader_epoch if version >= 3 else -1
    expected = OffsetValue(value.offset, epoch, value.metadata, value.commit_timestamp, value.expire_timestamp)
    assert decoded[1] == expected


@given(st.binary(max_size=64), st.none() | st.binary(max_size=128))
def test_random_bytes_raise_only_coordinator_record_error(key: bytes, value: bytes | None) -> None:
    try:
        decode_record(key, value)
    except CoordinatorRecordError:
        pass


@given(st.sampled_from([OFFSET_KEY_BYTES, GROUP_KEY_BYTES]), st.binary(max_size=128), st.integers(0, 4))
def test_random_values_raise_only_coordinator_record_error(key: bytes, body: bytes, version: int) -> None:
    try:
        decode_record(key, i16(version) + body)
    except CoordinatorRecordError:
        pass


@given(group_values, st.data())
def test_damaged_group_values_raise_only_coordinator_record_error(value: GroupValue, data: st.DataObject) -> None:
    raw = bytearray(records._encode_group_value(value, data.draw(st.integers(0, 4))))
    cut = data.draw(st.integers(0, len(raw)))
    if data.draw(st.booleans()) and cut < len(raw):
        raw[cut] ^= data.draw(st.integers(1, 255))
    else:
        del raw[cut:]
    try:
        decode_record(GROUP_KEY_BYTES, bytes(raw))
    except CoordinatorRecordError:
        pass
