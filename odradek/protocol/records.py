"""Records inside a v2 record batch: varints, decoding, building, control records.

This is *not* the produce/fetch path (that handles batches as opaque bytes, see ``batch.py``). It is
for tools, ListOffsets by timestamp, compaction, transaction markers and tests.

A batch is the 61-byte header of ``batch.py`` followed by ``recordCount`` records, the whole record
section compressed with the codec in attributes bits 0-2 when that is not none. One record::

    length          varint   bytes of the record after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - baseTimestamp
    offsetDelta     varint   offset - baseOffset
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint, key utf-8, valueLength varint (-1 = null), value)

varint / varlong are zigzag-encoded base-128 integers (protobuf's sint32 / sint64): at most 5 and 10
bytes. As in Kafka's reader, bits above 32 in a 5-byte varint are dropped.

A control batch (attributes transactional + control) holds one control record whose key is
``version int16 (0), type int16 (0 abort, 1 commit)`` and whose value for commit/abort markers is
``version int16 (0), coordinatorEpoch int32``.

Invariants:
- ``decode_records(build_batch(rs, base_offset=b, ...))`` gives back ``rs`` with offsets ``b + i``
  (or the record's own offset when a ``Record`` is passed in), for every codec.
- ``build_batch`` output always passes ``batch.check_batch``: CRC-32C, lastOffsetDelta, maxTimestamp
  and recordCount are computed from the records.
- Decoding either returns every record of the batch or raises ``CorruptRecordError`` (structure, CRC,
  codec) / ``UnsupportedMagicError`` / ``UnsupportedCompressionError``; it never returns a partial list.
- Records are decoded eagerly into frozen ``Record`` objects; memory is proportional to the batch.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from odradek.protocol import batch as _batch
from odradek.protocol.batch import (
    CONTROL_BIT,
    CURRENT_MAGIC,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_BIT,
    BatchHeader,
)
from odradek.protocol.compression import Compression, codec_from_id, compress, decompress
from odradek.protocol.errors import CorruptRecordError

__all__ = [
    "ControlType",
    "Header",
    "Record",
    "RecordInput",
    "build_batch",
    "build_control_batch",
    "decode_records",
    "decode_varint",
    "decode_varlong",
    "encode_varint",
    "encode_varlong",
    "iter_batches",
    "parse_control_key",
    "parse_end_txn_marker",
    "size_of_varint",
    "size_of_varlong",
]

Header = tuple[str, bytes | None]
"""A record header: a utf-8 key (never null) and a nullable value."""

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10

_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


# --- varints -------------------------------------------------------------------------------------


def _write_unsigned(out: bytearray, u: int) -> None:
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def _write_varint(out: bytearray, n: int) -> None:
    if not _INT32_MIN <= n <= _INT32_MAX:
        raise ValueError(f"{n} does not fit a varint (int32)")
    _write_unsigned(out, ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def _write_varlong(out: bytearray, n: int) -> None:
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise ValueError(f"{n} does not fit a varlong (int64)")
    _write_unsigned(out, ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def encode_varint(n: int) -> bytes:
    """Zigzag varint of an int32 (1-5 bytes). Raises ``ValueError`` outside the int32 range."""
    out = bytearray()
    _write_varint(out, n)
    return bytes(out)


def encode_varlong(n: int) -> bytes:
    """Zigzag varlong of an int64 (1-10 bytes). Raises ``ValueError`` outside the int64 range."""
    out = bytearray()
    _write_varlong(out, n)
    return bytes(out)


def _unsigned_size(u: int) -> int:
    return max(1, (u.bit_length() + 6) // 7)


def size_of_varint(n: int) -> int:
    """Bytes ``encode_varint(n)`` takes."""
    return _unsigned_size(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def size_of_varlong(n: int) -> int:
    """Bytes ``encode_varlong(n)`` takes."""
    return _unsigned_size(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _read_unsigned(buf: bytes | bytearray | memoryview, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    u = 0
    shift = 0
    limit = pos + max_bytes
    while True:
        if pos >= end:
            raise CorruptRecordError(f"varint truncated at byte {pos}: the data ends inside it")
        if pos >= limit:
            raise CorruptRecordError(f"varint at byte {pos - max_bytes} is longer than {max_bytes} bytes")
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            return u, pos
        shift += 7


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """(value, position after it) of the zigzag varint at ``pos``; ``CorruptRecordError`` if malformed."""
    if end is None:
        end = len(buf)
    if pos < end and buf[pos] < 0x80:  # one-byte fast path: most lengths and deltas
        u = buf[pos]
        return (u >> 1) ^ -(u & 1), pos + 1
    u, pos = _read_unsigned(buf, pos, end, _MAX_VARINT_BYTES)
    u &= 0xFFFFFFFF
    return (u >> 1) ^ -(u & 1), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """(value, position after it) of the zigzag varlong at ``pos``; ``CorruptRecordError`` if malformed."""
    if end is None:
        end = len(buf)
    if pos < end and buf[pos] < 0x80:  # one-byte fast path: most lengths and deltas
        u = buf[pos]
        return (u >> 1) ^ -(u & 1), pos + 1
    u, pos = _read_unsigned(buf, pos, end, _MAX_VARLONG_BYTES)
    u &= 0xFFFFFFFFFFFFFFFF
    return (u >> 1) ^ -(u & 1), pos


# --- records -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record, with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class RecordInput:
    """A record to build: ``timestamp`` None means the batch's default timestamp."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    headers: tuple[Header, ...] = ()


def iter_batches(
    buf: bytes | bytearray | memoryview, *, allow_partial_tail: bool = False
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each batch in ``buf``, each checked by ``batch.check_batch``.

    With ``allow_partial_tail`` a final batch cut short (as a fetch response may end) ends the
    iteration quietly; otherwise it raises ``CorruptRecordError`` like any other damage.
    """
    total = len(buf)
    pos = 0
    while pos < total:
        available = total - pos
        if allow_partial_tail and _is_partial(buf, pos, available):
            return
        header = _batch.check_batch(buf, pos, available=available)
        yield pos, header
        pos += header.size


def _is_partial(buf: bytes | bytearray | memoryview, pos: int, available: int) -> bool:
    if available < LOG_OVERHEAD:
        return True
    _, length = _batch.read_prefix(buf, pos)
    return length + LOG_OVERHEAD > available


def decode_records(batch: bytes | bytearray | memoryview) -> list[Record]:
    """All records of the single v2 batch that ``batch`` holds, with absolute offsets and timestamps.

    The batch is checked first (magic, length, CRC-32C). ``batch`` must hold exactly one batch: use
    ``iter_batches`` to split a record set. LogAppendTime batches give every record the batch's
    maxTimestamp.
    """
    view = memoryview(batch).cast("B") if isinstance(batch, memoryview) else batch
    header = _batch.check_batch(view)
    if header.size != len(view):
        raise CorruptRecordError(
            f"decode_records was given {len(view)} bytes but the batch declares {header.size}: pass exactly "
            "one batch (iter_batches splits a record set)"
        )
    body = memoryview(view)[HEADER_SIZE:]
    data = decompress(header.compression, body) if header.compression else bytes(body)
    return _decode_body(data, header)


def _decode_body(data: bytes, header: BatchHeader) -> list[Record]:
    count = header.record_count
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.is_log_append_time
    max_timestamp = header.max_timestamp
    end = len(data)
    pos = 0
    records: list[Record] = []
    for index in range(count):
        length, pos = decode_varint(data, pos, end)
        start = pos
        record_end = pos + length
        if length <= 0 or record_end > end:
            raise CorruptRecordError(
                f"record {index} of batch at offset {base_offset} declares {length} bytes but "
                f"{end - pos} remain in the batch"
            )
        pos += 1  # attributes: int8, unused
        ts_delta, pos = decode_varlong(data, pos, record_end)
        offset_delta, pos = decode_varint(data, pos, record_end)
        key, pos = _read_bytes(data, pos, record_end, "key")
        value, pos = _read_bytes(data, pos, record_end, "value")
        header_count, pos = decode_varint(data, pos, record_end)
        if header_count < 0:
            raise CorruptRecordError(f"record {index} has a negative header count {header_count}")
        headers: list[Header] = []
        for _ in range(header_count):
            hkey, pos = _read_bytes(data, pos, record_end, "header key")
            if hkey is None:
                raise CorruptRecordError(f"record {index} has a header with a null key")
            try:
                hkey_str = hkey.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorruptRecordError(f"record {index} has a header key that is not utf-8: {exc}") from None
            hvalue, pos = _read_bytes(data, pos, record_end, "header value")
            headers.append((hkey_str, hvalue))
        if pos != record_end:
            raise CorruptRecordError(f"record {index} declares {length} bytes but its fields take {pos - start}")
        records.append(
            Record(
                offset=base_offset + offset_delta,
                timestamp=max_timestamp if log_append_time else base_timestamp + ts_delta,
                key=key,
                value=value,
                headers=tuple(headers),
            )
        )
    if pos != end:
        raise CorruptRecordError(
            f"batch at offset {base_offset} declares {count} records but {end - pos} bytes remain after them"
        )
    return records


def _read_bytes(data: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    length, pos = decode_varint(data, pos, end)
    if length < 0:
        if length != -1:
            raise CorruptRecordError(f"record {what} has invalid length {length}")
        return None, pos
    stop = pos + length
    if stop > end:
        raise CorruptRecordError(f"record {what} of {length} bytes runs past the end of its record")
    return data[pos:stop], stop


# --- building ------------------------------------------------------------------------------------


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _write_nullable(out: bytearray, data: bytes | bytearray | memoryview | None) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        _write_varint(out, len(data))
        out += data


def build_batch(
    records: Sequence[RecordInput | Record | tuple[bytes | None, bytes | None]],
    *,
    base_offset: int = 0,
    compression: Compression | int = Compression.NONE,
    base_timestamp: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    last_offset_delta: int | None = None,
) -> bytes:
    """Build one complete v2 batch (CreateTime) holding ``records``, and return its bytes.

    ``records`` may mix ``(key, value)`` tuples, ``RecordInput`` and decoded ``Record`` objects. The
    first two take offsets ``base_offset + i`` (i = position in ``records``); a ``Record`` keeps its
    own absolute offset, so compaction can rebuild a batch with gaps. Offsets must increase.

    A record without a timestamp gets ``base_timestamp``, or the current time when that is None. The
    batch's baseTimestamp is ``base_timestamp`` if given, else the first record's timestamp.
    ``last_offset_delta`` (default: the last record's) may be larger, as a compacted batch keeps it;
    with it, ``records`` may be empty. Raises ``ValueError`` for input that cannot be encoded.
    """
    if not records and last_offset_delta is None:
        raise ValueError("a batch needs at least one record (or an explicit last_offset_delta)")
    codec = codec_from_id(compression)
    default_ts = _now_ms() if base_timestamp is None else base_timestamp

    normalised: list[tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]] = []
    for index, item in enumerate(records):
        if isinstance(item, Record):
            normalised.append((item.offset - base_offset, item.timestamp, item.key, item.value, item.headers))
        elif isinstance(item, RecordInput):
            ts = default_ts if item.timestamp is None else item.timestamp
            normalised.append((index, ts, item.key, item.value, item.headers))
        else:
            key, value = item
            normalised.append((index, default_ts, key, value, ()))

    first_ts = base_timestamp if base_timestamp is not None else (normalised[0][1] if normalised else default_ts)
    max_ts = max((r[1] for r in normalised), default=first_ts)

    body = bytearray()
    record = bytearray()
    previous_delta = -1
    for offset_delta, ts, key, value, headers in normalised:
        if offset_delta <= previous_delta:
            raise ValueError(
                f"record offsets must increase and not precede base_offset {base_offset}: "
                f"offset {base_offset + offset_delta} follows {base_offset + previous_delta}"
            )
        previous_delta = offset_delta
        record.clear()
        record.append(0)  # attributes
        _write_varlong(record, ts - first_ts)
        _write_varint(record, offset_delta)
        _write_nullable(record, key)
        _write_nullable(record, value)
        _write_varint(record, len(headers))
        for hkey, hvalue in headers:
            _write_nullable(record, hkey.encode("utf-8"))
            _write_nullable(record, hvalue)
        _write_varint(body, len(record))
        body += record

    if last_offset_delta is None:
        last_offset_delta = previous_delta
    elif last_offset_delta < previous_delta:
        raise ValueError(f"last_offset_delta {last_offset_delta} precedes the last record's {previous_delta}")

    payload = compress(codec, body) if codec is not Compression.NONE else body
    attributes = int(codec)
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT

    out = bytearray(HEADER_SIZE + len(payload))
    try:
        HEADER.pack_into(
            out,
            0,
            base_offset,
            len(out) - LOG_OVERHEAD,
            partition_leader_epoch,
            CURRENT_MAGIC,
            0,  # crc, stamped below
            attributes,
            last_offset_delta,
            first_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            len(normalised),
        )
    except struct.error as exc:
        raise ValueError(f"a batch header field is out of range: {exc}") from None
    out[HEADER_SIZE:] = payload
    _batch.restamp_crc(out, 0, len(out))
    return bytes(out)


# --- control records -----------------------------------------------------------------------------


class ControlType(IntEnum):
    """Control record types (the key's ``type`` field). UNKNOWN stands for any other value."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4


class ControlKey(NamedTuple):
    version: int
    type: ControlType


def build_control_batch(
    kind: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker: a transactional control batch with one COMMIT or ABORT record."""
    if kind not in (ControlType.COMMIT, ControlType.ABORT):
        raise ValueError(f"a transaction marker is COMMIT or ABORT, not {kind!r}")
    key = _CONTROL_KEY.pack(CONTROL_KEY_VERSION, kind)
    value = _END_TXN_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    return build_batch(
        [RecordInput(key, value, timestamp)],
        base_offset=base_offset,
        base_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_control_key(key: bytes | None) -> ControlKey:
    """Version and type of a control record key; unknown types map to ``ControlType.UNKNOWN``.

    Raises ``CorruptRecordError`` for a null or short key or a negative version (as Kafka does).
    """
    if key is None or len(key) < _CONTROL_KEY.size:
        size = "null" if key is None else f"{len(key)} bytes"
        raise CorruptRecordError(f"control record key is {size}, expected at least {_CONTROL_KEY.size}")
    version, type_id = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key has invalid version {version}")
    try:
        kind = ControlType(type_id)
    except ValueError:
        kind = ControlType.UNKNOWN
    return ControlKey(version, kind)


def parse_end_txn_marker(value: bytes | None) -> int:
    """The coordinator epoch in the value of a COMMIT/ABORT control record.

    Raises ``CorruptRecordError`` for a null or short value or a negative version.
    """
    if value is None or len(value) < _END_TXN_VALUE.size:
        size = "null" if value is None else f"{len(value)} bytes"
        raise CorruptRecordError(f"transaction marker value is {size}, expected at least {_END_TXN_VALUE.size}")
    version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"transaction marker value has invalid version {version}")
    return coordinator_epoch
