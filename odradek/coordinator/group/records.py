"""The records of the internal topic ``__consumer_offsets``, byte-compatible with Apache Kafka's.

A record's key and its value each start with an int16 version. The key version says what the record
is (Kafka's ``OffsetCommitKey.json``, ``GroupMetadataKey.json``)::

    key v0, v1  committed offset   group string | topic string | partition int32
    key v2      group metadata     group string
    key v3+     records of the newer group types (KIP-848 consumer, share and streams groups)

The value version picks its layout (Kafka's ``OffsetCommitValue.json``, ``GroupMetadataValue.json``)::

    offset v0, v2  offset int64 | metadata string | commit_timestamp int64
    offset v1      offset int64 | metadata string | commit_timestamp int64 | expire_timestamp int64
    offset v3      offset int64 | leader_epoch int32 | metadata string | commit_timestamp int64
    offset v4      as v3, flexible
    group v0       protocol_type string | generation int32 | protocol string? | leader string? | [member]
    group v2+      current_state_timestamp int64 is inserted before the members
    group v4       as v3, flexible
    member         member_id string | group_instance_id string? (v3+) | client_id string |
                   client_host string | rebalance_timeout int32 (v1+) | session_timeout int32 |
                   subscription bytes | assignment bytes

Non-flexible versions use big-endian integers, int16-length strings, int32-length bytes and int32
array counts, with -1 for null (``?`` above). Flexible versions use unsigned varints of length + 1
(0 for null) and end the value and each member with tagged fields (a varint count, then tag, size,
data), which the reader skips. Strings are UTF-8.

Invariants:
- Written: key v1 for offsets, key v2 for groups, group values v3, offset values v3 -- or v1 when
  ``expire_timestamp`` is set, since only v1 holds it (then the leader epoch is not stored and reads
  back as -1). These are the versions a Kafka broker writes, so the topic reads the same in Kafka.
- Read: every version Kafka has written (offset and group values v0-v4). Fields a version lacks take
  Kafka's defaults: leader_epoch -1, expire_timestamp -1, current_state_timestamp -1,
  group_instance_id None, and in group v0 the rebalance timeout is the session timeout (as Kafka's
  loader did).
- A null value is a tombstone: the committed offset or the group is deleted.
- Decoding is strict: truncated input, trailing bytes, a null or negative length where none is
  allowed, invalid UTF-8 and unknown value versions raise ``CoordinatorRecordError``. Keys of
  version 3 and above decode to ``None`` so that replay skips records this broker does not use.
- Pure functions of bytes; no I/O, no state.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.coordinator.group.schema_io import SchemaReader, SchemaWriter

__all__ = [
    "CoordinatorRecordError",
    "GroupKey",
    "GroupValue",
    "Key",
    "MemberValue",
    "OffsetKey",
    "OffsetValue",
    "Value",
    "decode_record",
    "encode_key",
    "encode_value",
    "partition_for",
]

OFFSETS_TOPIC = "__consumer_offsets"  # the internal topic these records live in
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3
HIGHEST_VALUE_VERSION = 4  # of both value types; 4 is the first (and only) flexible version

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16_UNITS = struct.Struct(">H")


class CoordinatorRecordError(ValueError):
    """Bytes that are not a valid ``__consumer_offsets`` record, or a value that cannot be written as one."""


# -- partitioning -----------------------------------------------------------------------------------


def _java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: h = 31 * h + unit over the UTF-16 code units, in int32 arithmetic."""
    h = 0
    for (unit,) in _U16_UNITS.iter_unpack(s.encode("utf-16-be", "surrogatepass")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition that holds ``group_id``, as Kafka computes it.

    Kafka: ``Utils.abs(groupId.hashCode()) % numPartitions``, where ``Utils.abs`` maps
    Integer.MIN_VALUE to 0 and is ``Math.abs`` otherwise. (Masking with 0x7fffffff instead would
    disagree with Kafka for every group whose hash code is negative.)
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    h = _java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# -- record types -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetKey:
    """Key of a committed offset (key version 1; version 0 has the same layout)."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetValue:
    """A committed offset. ``leader_epoch`` -1: unknown; ``expire_timestamp`` -1: none (the usual case)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class GroupKey:
    """Key of a group's metadata (key version 2)."""

    group: str


@dataclass(frozen=True, slots=True)
class MemberValue:
    """One member of a classic group, as stored in its group's metadata record."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    """A classic group's metadata. ``current_state_timestamp`` -1: unknown (values before v2)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...]


Key = OffsetKey | GroupKey
Value = OffsetValue | GroupValue


def _reader(data: bytes, what: str) -> SchemaReader:
    return SchemaReader(data, what, CoordinatorRecordError)


def _writer(*, flexible: bool = False) -> SchemaWriter:
    return SchemaWriter(CoordinatorRecordError, flexible=flexible)


# -- keys ---------------------------------------------------------------------------------------------


_OFFSET_KEY_PREFIX = struct.pack(">h", 1)
_OFFSET_V3_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch


def _str16(value: str, name: str) -> bytes:
    raw = value.encode()
    if len(raw) > 0x7FFF:
        raise CoordinatorRecordError(f"{name} is {len(raw)} bytes long; at most 32767 fit")
    return len(raw).to_bytes(2, "big") + raw


def encode_key(key: Key) -> bytes:
    """Serialize a key: offsets as key version 1, groups as key version 2."""
    if type(key) is OffsetKey:  # the hot path (every committed partition): one concatenation
        try:
            return b"".join((_OFFSET_KEY_PREFIX, _str16(key.group, "group"), _str16(key.topic, "topic"),
                             _I32.pack(key.partition)))
        except struct.error as e:
            raise CoordinatorRecordError(f"partition {key.partition} does not fit an int32: {e}") from None
    w = _writer()
    if isinstance(key, OffsetKey):
        w.i16(OFFSET_KEY_VERSION, "key version")
        w.string(key.group, "group")
        w.string(key.topic, "topic")
        w.i32(key.partition, "partition")
    elif isinstance(key, GroupKey):
        w.i16(GROUP_KEY_VERSION, "key version")
        w.string(key.group, "group")
    else:
        raise TypeError(f"not a __consumer_offsets key: {key!r}")
    return w.getvalue()


def _decode_key(data: bytes) -> Key | None:
    r = _reader(data, "__consumer_offsets key")
    version = r.i16("key version")
    if version < 0:
        r.fail(f"negative key version {version}")
    if version > GROUP_KEY_VERSION:
        return None
    key: Key
    if version == GROUP_KEY_VERSION:
        r.what = f"group metadata key v{version}"
        key = GroupKey(r.string(False, "group"))
    else:
        r.what = f"offset commit key v{version}"
        key = OffsetKey(r.string(False, "group"), r.string(False, "topic"), r.i32("partition"))
    r.end()
    return key


# -- values ---------------------------------------------------------------------------------------


def _check_value_version(version: int, what: str) -> None:
    if not 0 <= version <= HIGHEST_VALUE_VERSION:
        raise CoordinatorRecordError(f"{what}: unknown version {version} (known: 0-{HIGHEST_VALUE_VERSION})")


def _encode_offset_value(value: OffsetValue, version: int) -> bytes:
    """``value`` as offset commit value ``version``; fields the version lacks are left out."""
    _check_value_version(version, "offset commit value")
    w = _writer(flexible=version >= 4)
    w.i16(version, "value version")
    w.i64(value.offset, "offset")
    if version >= 3:
        w.i32(value.leader_epoch, "leader_epoch")
    w.string(value.metadata, "metadata")
    w.i64(value.commit_timestamp, "commit_timestamp")
    if version == 1:
        w.i64(value.expire_timestamp, "expire_timestamp")
    w.tagged_fields()
    return w.getvalue()


def _decode_offset_value(data: bytes) -> OffsetValue:
    r = _reader(data, "offset commit value")
    version = r.i16("value version")
    _check_value_version(version, "offset commit value")
    r.what = f"offset commit value v{version}"
    flexible = version >= 4
    offset = r.i64("offset")
    leader_epoch = r.i32("leader_epoch") if version >= 3 else -1
    metadata = r.string(flexible, "metadata")
    commit_timestamp = r.i64("commit_timestamp")
    expire_timestamp = r.i64("expire_timestamp") if version == 1 else -1
    if flexible:
        r.tagged_fields("offset commit value")
    r.end()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def _encode_group_value(value: GroupValue, version: int) -> bytes:
    """``value`` as group metadata value ``version``; fields the version lacks are left out."""
    _check_value_version(version, "group metadata value")
    w = _writer(flexible=version >= 4)
    w.i16(version, "value version")
    w.string(value.protocol_type, "protocol_type")
    w.i32(value.generation, "generation")
    w.string(value.protocol, "protocol", nullable=True)
    w.string(value.leader, "leader", nullable=True)
    if version >= 2:
        w.i64(value.current_state_timestamp, "current_state_timestamp")
    w.array_count(len(value.members), "members")
    for m in value.members:
        w.string(m.member_id, "member_id")
        if version >= 3:
            w.string(m.group_instance_id, "group_instance_id", nullable=True)
        w.string(m.client_id, "client_id")
        w.string(m.client_host, "client_host")
        if version >= 1:
            w.i32(m.rebalance_timeout, "rebalance_timeout")
        w.i32(m.session_timeout, "session_timeout")
        w.bytes_(m.subscription, "subscription")
        w.bytes_(m.assignment, "assignment")
        w.tagged_fields()
    w.tagged_fields()
    return w.getvalue()


def _decode_group_value(data: bytes) -> GroupValue:
    r = _reader(data, "group metadata value")
    version = r.i16("value version")
    _check_value_version(version, "group metadata value")
    r.what = f"group metadata value v{version}"
    flexible = version >= 4
    protocol_type = r.string(flexible, "protocol_type")
    generation = r.i32("generation")
    protocol = r.nullable_string(flexible, "protocol")
    leader = r.nullable_string(flexible, "leader")
    current_state_timestamp = r.i64("current_state_timestamp") if version >= 2 else -1
    members = []
    for _ in range(r.array_count(flexible, "members")):
        member_id = r.string(flexible, "member_id")
        group_instance_id = r.nullable_string(flexible, "group_instance_id") if version >= 3 else None
        client_id = r.string(flexible, "client_id")
        client_host = r.string(flexible, "client_host")
        rebalance_timeout = r.i32("rebalance_timeout") if version >= 1 else None
        session_timeout = r.i32("session_timeout")
        subscription = r.bytes_(flexible, "subscription")
        assignment = r.bytes_(flexible, "assignment")
        if flexible:
            r.tagged_fields("member")
        members.append(
            MemberValue(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout if rebalance_timeout is None else rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    if flexible:
        r.tagged_fields("group metadata value")
    r.end()
    return GroupValue(protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members))


def encode_value(value: Value | None) -> bytes | None:
    """Serialize a value; ``None`` (a tombstone) stays ``None``.

    Offsets are written as value v3, or v1 when ``expire_timestamp`` is not -1 (v1 is the only
    version holding it; it has no leader epoch), which is Kafka's choice too. Groups: value v3.
    """
    if value is None:
        return None
    if isinstance(value, OffsetValue):
        if value.expire_timestamp == -1 and OFFSET_VALUE_VERSION == 3:  # the hot path: struct, no writer
            try:
                return b"".join((_OFFSET_V3_HEAD.pack(3, value.offset, value.leader_epoch),
                                 _str16(value.metadata, "metadata"), _I64.pack(value.commit_timestamp)))
            except struct.error as e:
                raise CoordinatorRecordError(f"offset value does not fit its fields: {e}") from None
        version = OFFSET_VALUE_VERSION if value.expire_timestamp == -1 else OFFSET_VALUE_VERSION_WITH_EXPIRY
        return _encode_offset_value(value, version)
    if isinstance(value, GroupValue):
        return _encode_group_value(value, GROUP_VALUE_VERSION)
    raise TypeError(f"not a __consumer_offsets value: {value!r}")


def decode_record(key: bytes, value: bytes | None) -> tuple[Key, Value | None] | None:
    """Decode one record of ``__consumer_offsets``.

    Returns ``None`` for key versions 3 and above (newer group types this broker does not use), the
    key and ``None`` for a tombstone, else the key and its value. Raises ``CoordinatorRecordError``
    on malformed bytes.
    """
    k = _decode_key(key)
    if k is None:
        return None
    if value is None:
        return k, None
    if isinstance(k, OffsetKey):
        return k, _decode_offset_value(value)
    return k, _decode_group_value(value)
