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

from dataclasses import dataclass

from odradek.coordinator.group.schema_io import SchemaReader, SchemaWriter

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


def _topic_partitions(r: SchemaReader, name: str) -> TopicPartitions:
    out = []
    for _ in range(r.array_count(False, name)):
        topic = r.string(False, f"topic in {name}")
        count = r.array_count(False, f"partitions of {topic!r}")
        partitions = tuple(r.i32(f"partition in {name}") for _ in range(count))
        out.append((topic, partitions))
    return tuple(out)


def _version(r: SchemaReader) -> int:
    version = r.i16("version")
    if version < 0:
        r.fail(f"negative version {version}")
    return version


def decode_subscription(data: bytes) -> Subscription:
    """Decode JoinGroup member metadata of protocol type "consumer"; raises ``ConsumerProtocolError``."""
    r = SchemaReader(data, "consumer subscription", ConsumerProtocolError)
    version = min(_version(r), HIGHEST_SUBSCRIPTION_VERSION)
    topics = tuple(r.string(False, "topic") for _ in range(r.array_count(False, "topics")))
    user_data = r.nullable_bytes(False, "user_data")
    owned = _topic_partitions(r, "owned_partitions") if version >= 1 else ()
    generation_id = r.i32("generation_id") if version >= 2 else -1
    rack_id = r.nullable_string(False, "rack_id") if version >= 3 else None
    return Subscription(topics, user_data, owned, generation_id, rack_id)


def decode_assignment(data: bytes) -> Assignment:
    """Decode a SyncGroup assignment of protocol type "consumer" (``b""``: no partitions)."""
    if not data:
        return Assignment(())
    r = SchemaReader(data, "consumer assignment", ConsumerProtocolError)
    _version(r)  # every known version has the same fields; later ones are read as v3
    partitions = _topic_partitions(r, "assigned_partitions")
    return Assignment(partitions, r.nullable_bytes(False, "user_data"))


# -- writing ------------------------------------------------------------------------------------------


def _write_topic_partitions(w: SchemaWriter, value: TopicPartitions, name: str) -> None:
    w.array_count(len(value), name)
    for topic, partitions in value:
        w.string(topic, f"topic in {name}")
        w.array_count(len(partitions), f"partitions of {topic!r}")
        for p in partitions:
            w.i32(p, f"partition of {topic!r}")


def _check_version(version: int, highest: int, what: str) -> None:
    if not 0 <= version <= highest:
        raise ValueError(f"cannot write {what} version {version} (known: 0-{highest})")


def encode_subscription(s: Subscription, version: int = HIGHEST_SUBSCRIPTION_VERSION) -> bytes:
    """Serialize ``s`` as subscription ``version``; fields that version lacks are dropped."""
    _check_version(version, HIGHEST_SUBSCRIPTION_VERSION, "subscription")
    w = SchemaWriter(ValueError)
    w.i16(version, "version")
    w.array_count(len(s.topics), "topics")
    for topic in s.topics:
        w.string(topic, "topic")
    w.bytes_(s.user_data, "user_data", nullable=True)
    if version >= 1:
        _write_topic_partitions(w, s.owned_partitions, "owned_partitions")
    if version >= 2:
        w.i32(s.generation_id, "generation_id")
    if version >= 3:
        w.string(s.rack_id, "rack_id", nullable=True)
    return w.getvalue()


def encode_assignment(a: Assignment, version: int = HIGHEST_ASSIGNMENT_VERSION) -> bytes:
    """Serialize ``a`` as assignment ``version`` (all known versions have the same fields)."""
    _check_version(version, HIGHEST_ASSIGNMENT_VERSION, "assignment")
    w = SchemaWriter(ValueError)
    w.i16(version, "version")
    _write_topic_partitions(w, a.partitions, "assigned_partitions")
    w.bytes_(a.user_data, "user_data", nullable=True)
    return w.getvalue()
