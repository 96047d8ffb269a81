"""The records of the internal topic ``__transaction_state``, byte-compatible with Apache Kafka's.

A key and a value each start with an int16 version. Key version 0 is the only one
(``TransactionLogKey.json``)::

    key v0     transactional_id string

Values (``TransactionLogValue.json``; v1 is the first and only flexible version)::

    value v0   producer_id int64 | producer_epoch int16 | transaction_timeout_ms int32 |
               transaction_status int8 | transaction_partitions [topic string | partition_ids [int32]]? |
               transaction_last_update_timestamp_ms int64 | transaction_start_timestamp_ms int64
    value v1   the same fields, flexible (compact strings and arrays, a tagged-field section after each
               partitions entry and after the value), with tagged fields
                 tag 0  previous_producer_id int64        (default -1)
                 tag 1  next_producer_id int64            (default -1)
                 tag 2  client_transaction_version int16  (default 0)

``?`` marks a nullable array: Kafka writes null for an Empty transaction and a (possibly empty) list
for every other status. Non-flexible versions use int16-length strings and int32 array counts (-1 for
null); flexible versions use unsigned varints of length + 1 (0 for null). A tagged field is written
as tag, size, data (all varints but the data) and only when it differs from its default.

Invariants:
- Written: key v0, value v1 -- what a Kafka 4.x broker at transaction.version 1 writes
  (``TransactionVersion.transactionLogValueVersion``). Partitions are grouped by topic, topics and
  partition ids sorted, so equal values encode to equal bytes. ``encode_value(v, version=0)`` exists
  for tests and tools; v0 cannot hold the tagged fields, which then read back as their defaults.
- Read: value v0 and v1; unknown tags are skipped, known tags must have their exact size. A key of
  another version decodes to ``None`` (Kafka's loader skips such records); a null value is a
  tombstone, which removes the transactional id.
- ``last_producer_epoch`` of ``TxnValue`` is not part of the bytes (Kafka keeps it in memory only):
  it travels with the record object the coordinator writes, reads back as -1, and takes no part in
  equality.
- Decoding is strict: truncated input, trailing bytes, bad lengths, invalid UTF-8, unknown value
  versions and unknown statuses raise ``TxnRecordError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.coordinator.group.records import partition_for as _offsets_partition_for
from odradek.coordinator.group.schema_io import SchemaReader, SchemaWriter
from odradek.coordinator.txn.model import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnState

__all__ = [
    "KEY_VERSION",
    "VALUE_VERSION",
    "TxnKey",
    "TxnRecordError",
    "TxnValue",
    "decode_record",
    "encode_key",
    "encode_value",
    "partition_for",
]

KEY_VERSION = 0
VALUE_VERSION = 1  # written: transaction.version 1 writes flexible values
HIGHEST_VALUE_VERSION = 1

TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2


class TxnRecordError(ValueError):
    """Bytes that are not a valid ``__transaction_state`` record, or a value that cannot be written as one."""


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition of ``transactional_id``: ``Utils.abs(hashCode) % partitions``.

    The same formula (and the same Java ``String.hashCode``) as group ids in ``__consumer_offsets``.
    """
    return _offsets_partition_for(transactional_id, num_partitions)


@dataclass(frozen=True, slots=True)
class TxnKey:
    transactional_id: str


Partitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class TxnValue:
    """One transactional id's metadata as stored. ``partitions`` None: the null array (Empty)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: TxnState
    partitions: Partitions | None
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    last_producer_epoch: int = field(default=NO_PRODUCER_EPOCH, compare=False)  # not in the bytes

    def partition_set(self) -> frozenset[tuple[str, int]]:
        """The topic-partitions; an Empty transaction has none, whatever the record holds (as Kafka)."""
        if self.status is TxnState.EMPTY or self.partitions is None:
            return frozenset()
        return frozenset((topic, p) for topic, ids in self.partitions for p in ids)


def group_partitions(partitions: frozenset[tuple[str, int]] | set[tuple[str, int]]) -> Partitions:
    """Topic-partitions in the record's shape: grouped by topic, topics and ids sorted."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    return tuple((topic, tuple(sorted(by_topic[topic]))) for topic in sorted(by_topic))


# -- cursors with what the shared ones lack: int8, nullable arrays, raw tagged fields --------------------


class _Reader(SchemaReader):
    __slots__ = ()

    def i8(self, name: str) -> int:
        raw = self._take(1, name)
        return int.from_bytes(raw, "big", signed=True)

    def nullable_array_count(self, flexible: bool, name: str) -> int | None:
        return self._length(flexible, True, True, name)

    def tagged(self, name: str) -> dict[int, bytes]:
        """A tagged-field section as {tag: data}; tags must be strictly increasing, as Kafka requires."""
        out: dict[int, bytes] = {}
        last = -1
        for _ in range(self.uvarint(f"tagged field count of {name}")):
            tag = self.uvarint(f"tag in {name}")
            if tag <= last:
                self.fail(f"tag {tag} in {name} is not greater than the previous tag {last}")
            last = tag
            out[tag] = self._take(self.uvarint(f"size of tag {tag} in {name}"), f"tag {tag} in {name}")
        return out


class _Writer(SchemaWriter):
    __slots__ = ()

    def i8(self, value: int, name: str) -> None:
        if not -128 <= value <= 127:
            raise TxnRecordError(f"{name} {value!r} does not fit in 8 bits")
        self._out.append(value & 0xFF)

    def nullable_array_count(self, n: int | None, name: str) -> None:
        self._length(n, True, name)

    def tagged(self, fields: list[tuple[int, bytes]]) -> None:
        self.uvarint(len(fields))
        for tag, data in fields:
            self.uvarint(tag)
            self.uvarint(len(data))
            self._out += data


def _int_field(data: bytes, size: int, tag: int, r: _Reader) -> int:
    if len(data) != size:
        r.fail(f"tag {tag} has {len(data)} bytes, expected {size}")
    return int.from_bytes(data, "big", signed=True)


# -- keys -------------------------------------------------------------------------------------------


def encode_key(key: TxnKey) -> bytes:
    w = _Writer(TxnRecordError)
    w.i16(KEY_VERSION, "key version")
    w.string(key.transactional_id, "transactional_id")
    return w.getvalue()


def _decode_key(data: bytes) -> TxnKey | None:
    r = _Reader(data, "__transaction_state key", TxnRecordError)
    version = r.i16("key version")
    if version < 0:
        r.fail(f"negative key version {version}")
    if version != KEY_VERSION:
        return None
    r.what = f"transaction log key v{version}"
    key = TxnKey(r.string(False, "transactional_id"))
    r.end()
    return key


# -- values ---------------------------------------------------------------------------------------


def encode_value(value: TxnValue | None, version: int = VALUE_VERSION) -> bytes | None:
    """Serialize a value (v1 unless told); a tombstone (``None``) stays ``None``."""
    if value is None:
        return None
    if not 0 <= version <= HIGHEST_VALUE_VERSION:
        raise TxnRecordError(f"transaction log value: unknown version {version}")
    if value.status is TxnState.EMPTY and value.partitions:
        raise TxnRecordError("an Empty transaction has no partitions")
    flexible = version >= 1
    w = _Writer(TxnRecordError, flexible=flexible)
    w.i16(version, "value version")
    w.i64(value.producer_id, "producer_id")
    w.i16(value.producer_epoch, "producer_epoch")
    w.i32(value.timeout_ms, "transaction_timeout_ms")
    w.i8(int(value.status), "transaction_status")
    partitions = None if value.status is TxnState.EMPTY else (value.partitions or ())
    w.nullable_array_count(None if partitions is None else len(partitions), "transaction_partitions")
    for topic, ids in partitions or ():
        w.string(topic, "topic")
        w.array_count(len(ids), "partition_ids")
        for p in ids:
            w.i32(p, "partition id")
        w.tagged_fields()
    w.i64(value.last_update_ms, "transaction_last_update_timestamp_ms")
    w.i64(value.start_ms, "transaction_start_timestamp_ms")
    if flexible:
        tags: list[tuple[int, bytes]] = []
        if value.previous_producer_id != NO_PRODUCER_ID:
            tags.append((TAG_PREVIOUS_PRODUCER_ID, _pack(value.previous_producer_id, 8, "previous_producer_id")))
        if value.next_producer_id != NO_PRODUCER_ID:
            tags.append((TAG_NEXT_PRODUCER_ID, _pack(value.next_producer_id, 8, "next_producer_id")))
        if value.client_transaction_version != 0:
            tags.append((TAG_CLIENT_TRANSACTION_VERSION,
                         _pack(value.client_transaction_version, 2, "client_transaction_version")))
        w.tagged(tags)
    return w.getvalue()


def _pack(value: int, size: int, name: str) -> bytes:
    try:
        return value.to_bytes(size, "big", signed=True)
    except OverflowError:
        raise TxnRecordError(f"{name} {value!r} does not fit in {size * 8} bits") from None


def _decode_value(data: bytes) -> TxnValue:
    r = _Reader(data, "transaction log value", TxnRecordError)
    version = r.i16("value version")
    if not 0 <= version <= HIGHEST_VALUE_VERSION:
        r.fail(f"unknown version {version} (known: 0-{HIGHEST_VALUE_VERSION})")
    r.what = f"transaction log value v{version}"
    flexible = version >= 1
    producer_id = r.i64("producer_id")
    producer_epoch = r.i16("producer_epoch")
    timeout_ms = r.i32("transaction_timeout_ms")
    code = r.i8("transaction_status")
    try:
        status = TxnState(code)
    except ValueError:
        r.fail(f"unknown transaction status {code}")
    count = r.nullable_array_count(flexible, "transaction_partitions")
    partitions: Partitions | None = None
    if count is not None:
        entries = []
        for _ in range(count):
            topic = r.string(flexible, "topic")
            ids = tuple(r.i32("partition id") for _ in range(r.array_count(flexible, "partition_ids")))
            if flexible:
                r.tagged("partitions entry")
            entries.append((topic, ids))
        partitions = tuple(entries)
    last_update_ms = r.i64("transaction_last_update_timestamp_ms")
    start_ms = r.i64("transaction_start_timestamp_ms")
    previous_producer_id = next_producer_id = NO_PRODUCER_ID
    client_transaction_version = 0
    if flexible:
        tags = r.tagged("transaction log value")
        if TAG_PREVIOUS_PRODUCER_ID in tags:
            previous_producer_id = _int_field(tags[TAG_PREVIOUS_PRODUCER_ID], 8, TAG_PREVIOUS_PRODUCER_ID, r)
        if TAG_NEXT_PRODUCER_ID in tags:
            next_producer_id = _int_field(tags[TAG_NEXT_PRODUCER_ID], 8, TAG_NEXT_PRODUCER_ID, r)
        if TAG_CLIENT_TRANSACTION_VERSION in tags:
            client_transaction_version = _int_field(
                tags[TAG_CLIENT_TRANSACTION_VERSION], 2, TAG_CLIENT_TRANSACTION_VERSION, r)
    r.end()
    return TxnValue(producer_id, producer_epoch, timeout_ms, status, partitions, last_update_ms, start_ms,
                    previous_producer_id, next_producer_id, client_transaction_version)


def decode_record(key: bytes, value: bytes | None) -> tuple[TxnKey, TxnValue | None] | None:
    """Decode one record of ``__transaction_state``.

    Returns ``None`` for a key version other than 0 (skipped on load, as Kafka does), the key and
    ``None`` for a tombstone, else the key and its value. Raises ``TxnRecordError`` on malformed bytes.
    """
    k = _decode_key(key)
    if k is None:
        return None
    if value is None:
        return k, None
    return k, _decode_value(value)
