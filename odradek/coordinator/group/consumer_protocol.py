"""The embedded "consumer" protocol: what consumers put in JoinGroup metadata and SyncGroup assignments.

To the group coordinator these are opaque bytes of protocol type "consumer"; this module reads and
writes them for the places that look inside (assignment checks, DescribeGroups, tools). Layouts
follow Kafka's ``ConsumerProtocolSubscription.json`` and ``ConsumerProtocolAssignment.json``: an
int16 version, then non-flexible fields (big-endian integers, int16-length UTF-8 strings, int32-length
bytes, int32 array counts, -1 for null)::

    subscription v0  topics [string] | user_data bytes?
    subscription v1  + owned_partitions [topic string | partitions [int32]]
    subscription v2  + generation_id int32
    subscription v3  + rack_id string?
    assignment v0-3  assigned_partitions [topic string | partitions [int32]] | user_data bytes?

Invariants:
- Forward compatible as Kafka's consumer is: a version above 3 is read as version 3, and bytes
  after the fields read are ignored (Kafka's reader ignores them too, whatever the version).
- Fields a version lacks decode to their defaults (no owned partitions, generation -1, rack None);
  encoding to an older version drops them, as Kafka does for these ignorable fields.
- ``b""`` decodes as an empty assignment: the coordinator hands members that the leader left out
  an empty assignment, and clients send them too.
- Malformed input (negative version, truncation, a null or negative length where null is not
  allowed, invalid UTF-8) raises ``ConsumerProtocolError``, a ``ValueError``. Only ``user_data``
  and ``rack_id`` may be null, as -1.
- Pure functions of bytes; no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NoReturn

__all__ = [
    "Assignment",
    "ConsumerProtocolError",
    "Subscription",
    "TopicPartitions",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

HIGHEST_SUBSCRIPTION_VERSION = 3
HIGHEST_ASSIGNMENT_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]
"""``((topic, (partition, ...)), ...)`` in the order they are written."""


class ConsumerProtocolError(ValueError):
    """Bytes that are not a valid consumer-protocol subscription or assignment."""


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: TopicPartitions
    user_data: bytes | None = None


# -- reading ------------------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes, what: str) -> None:
        self._data = bytes(data)
        self._pos = 0
        self._what = what

    def fail(self, problem: str) -> NoReturn:
        raise ConsumerProtocolError(f"{self._what}: {problem} (at byte {self._pos} of {len(self._data)})")

    def _int(self, fmt: struct.Struct, name: str) -> int:
        if self._pos + fmt.size > len(self._data):
            self.fail(f"truncated: {name} needs {fmt.size} bytes, {len(self._data) - self._pos} left")
        (value,) = fmt.unpack_from(self._data, self._pos)
        self._pos += fmt.size
        return int(value)

    def i16(self, name: str) -> int:
        return self._int(_I16, name)

    def i32(self, name: str) -> int:
        return self._int(_I32, name)

    def _length(self, n: int, nullable: bool, name: str) -> int | None:
        if n == -1 and nullable:
            return None
        if n < 0:
            self.fail(f"{name} is null, which it may not be" if n == -1 else f"{name} has negative length {n}")
        return n

    def _take(self, n: int, name: str) -> bytes:
        if n > len(self._data) - self._pos:
            self.fail(f"truncated: {name} has length {n}, {len(self._data) - self._pos} bytes left")
        chunk = self._data[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def _utf8(self, raw: bytes, name: str) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(f"{name} is not valid UTF-8 ({e.reason})")

    def string(self, name: str) -> str:
        n = self._length(self.i16(f"length of {name}"), False, name)
        assert n is not None
        return self._utf8(self._take(n, name), name)

    def nullable_string(self, name: str) -> str | None:
        n = self._length(self.i16(f"length of {name}"), True, name)
        return None if n is None else self._utf8(self._take(n, name), name)

    def nullable_bytes(self, name: str) -> bytes | None:
        n = self._length(self.i32(f"length of {name}"), True, name)
        return None if n is None else self._take(n, name)

    def count(self, name: str) -> int:
        n = self._length(self.i32(f"count of {name}"), False, name)
        assert n is not None
        return n

    def topic_partitions(self, name: str) -> TopicPartitions:
        out = []
        for _ in range(self.count(name)):
            topic = self.string(f"topic in {name}")
            partitions = tuple(self.i32(f"partition in {name}") for _ in range(self.count(f"partitions of {topic!r}")))
            out.append((topic, partitions))
        return tuple(out)

    def version(self) -> int:
        version = self.i16("version")
        if version < 0:
            self.fail(f"negative version {version}")
        return version


def decode_subscription(data: bytes) -> Subscription:
    """Decode JoinGroup member metadata of protocol type "consumer"; raises ``ConsumerProtocolError``."""
    r = _Reader(data, "consumer subscription")
    version = min(r.version(), HIGHEST_SUBSCRIPTION_VERSION)
    topics = tuple(r.string("topic") for _ in range(r.count("topics")))
    user_data = r.nullable_bytes("user_data")
    owned = r.topic_partitions("owned_partitions") if version >= 1 else ()
    generation_id = r.i32("generation_id") if version >= 2 else -1
    rack_id = r.nullable_string("rack_id") if version >= 3 else None
    return Subscription(topics, user_data, owned, generation_id, rack_id)


def decode_assignment(data: bytes) -> Assignment:
    """Decode a SyncGroup assignment of protocol type "consumer" (``b""``: no partitions)."""
    if not data:
        return Assignment(())
    r = _Reader(data, "consumer assignment")
    r.version()  # every known version has the same fields; later ones are read as v3
    partitions = r.topic_partitions("assigned_partitions")
    return Assignment(partitions, r.nullable_bytes("user_data"))


# -- writing ------------------------------------------------------------------------------------------


class _Writer:
    __slots__ = ("_out",)

    def __init__(self) -> None:
        self._out = bytearray()

    def _int(self, fmt: struct.Struct, value: int, name: str) -> None:
        try:
            self._out += fmt.pack(value)
        except struct.error:
            raise ValueError(f"{name} {value!r} does not fit in {fmt.size * 8} bits") from None

    def i16(self, value: int, name: str) -> None:
        self._int(_I16, value, name)

    def i32(self, value: int, name: str) -> None:
        self._int(_I32, value, name)

    def string(self, value: str | None, name: str, nullable: bool = False) -> None:
        if value is None:
            if not nullable:
                raise ValueError(f"{name} may not be None")
            self.i16(-1, name)
            return
        raw = value.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise ValueError(f"{name} is {len(raw)} bytes of UTF-8, more than the 32767 a string holds")
        self.i16(len(raw), name)
        self._out += raw

    def nullable_bytes(self, value: bytes | None, name: str) -> None:
        if value is None:
            self.i32(-1, name)
            return
        self.i32(len(value), f"length of {name}")
        self._out += value

    def topic_partitions(self, value: TopicPartitions, name: str) -> None:
        self.i32(len(value), f"count of {name}")
        for topic, partitions in value:
            self.string(topic, f"topic in {name}")
            self.i32(len(partitions), f"count of partitions of {topic!r}")
            for p in partitions:
                self.i32(p, f"partition of {topic!r}")

    def getvalue(self) -> bytes:
        return bytes(self._out)


def _check_version(version: int, highest: int, what: str) -> None:
    if not 0 <= version <= highest:
        raise ValueError(f"cannot write {what} version {version} (known: 0-{highest})")


def encode_subscription(s: Subscription, version: int = HIGHEST_SUBSCRIPTION_VERSION) -> bytes:
    """Serialize ``s`` as subscription ``version``; fields that version lacks are dropped."""
    _check_version(version, HIGHEST_SUBSCRIPTION_VERSION, "subscription")
    w = _Writer()
    w.i16(version, "version")
    w.i32(len(s.topics), "count of topics")
    for topic in s.topics:
        w.string(topic, "topic")
    w.nullable_bytes(s.user_data, "user_data")
    if version >= 1:
        w.topic_partitions(s.owned_partitions, "owned_partitions")
    if version >= 2:
        w.i32(s.generation_id, "generation_id")
    if version >= 3:
        w.string(s.rack_id, "rack_id", nullable=True)
    return w.getvalue()


def encode_assignment(a: Assignment, version: int = HIGHEST_ASSIGNMENT_VERSION) -> bytes:
    """Serialize ``a`` as assignment ``version`` (all known versions have the same fields)."""
    _check_version(version, HIGHEST_ASSIGNMENT_VERSION, "assignment")
    w = _Writer()
    w.i16(version, "version")
    w.topic_partitions(a.partitions, "assigned_partitions")
    w.nullable_bytes(a.user_data, "user_data")
    return w.getvalue()
