"""RecordBatch v2 as an opaque unit: the 61-byte header, validation, offset assignment.

This is the hot path of produce and fetch. A batch is handled as the bytes the producer sent:
its header is parsed, its CRC-32C checked, and only the fields the log owns are rewritten.
Records inside a batch are never decoded here (see ``records.py`` for that).

On-disk/wire layout (big-endian), offsets from the start of the batch::

    0  baseOffset int64        <- assigned by the log
    8  batchLength int32       bytes after this field
    12 partitionLeaderEpoch int32  <- assigned by the log
    16 magic int8              must be 2
    17 crc uint32              CRC-32C of bytes 21..end
    21 attributes int16        compression 0-2, timestampType 3, transactional 4, control 5
    23 lastOffsetDelta int32
    27 baseTimestamp int64
    35 maxTimestamp int64      <- set by the log for LogAppendTime topics
    43 producerId int64
    51 producerEpoch int16
    53 baseSequence int32
    57 recordCount int32
    61 records...

Invariants:
- ``validate_record_set`` either returns one header per batch covering every byte of the input, or
  raises a ``KafkaError`` subclass and the caller writes nothing.
- Rewriting baseOffset and partitionLeaderEpoch never invalidates the CRC (they precede it);
  rewriting attributes or maxTimestamp requires ``restamp_crc``.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from odradek.protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedCompressionError,
    UnsupportedMagicError,
)

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part not counted by batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
LEGACY_MIN_LENGTH = 14  # smallest message of formats v0/v1 (crc, magic, attributes, key/value lengths)
CURRENT_MAGIC = 2

BASE_OFFSET_AT = 0
LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21
MAX_TIMESTAMP_AT = 35

COMPRESSION_MASK = 0x07
MAX_COMPRESSION_ID = 4  # zstd
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_PREFIX = struct.Struct(">qi")


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a v2 record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; the caller guarantees ``HEADER_SIZE`` bytes are there."""
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def read_prefix(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """(baseOffset, batchLength) of the batch at ``pos``."""
    return _PREFIX.unpack_from(buf, pos)


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C over attributes..end of the batch at ``pos`` that is ``size`` bytes long."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_AT : pos + size])


def check_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, available: int | None = None
) -> BatchHeader:
    """Check structure, magic and CRC of the batch at ``pos`` and return its header.

    ``available`` is how many bytes from ``pos`` belong to the input (default: to the end of buf).
    Raises ``CorruptRecordError`` or ``UnsupportedMagicError``; never reads past ``available``.
    """
    if available is None:
        available = len(buf) - pos
    if available < LOG_OVERHEAD:
        raise CorruptRecordError(
            f"record batch at byte {pos} is truncated: {available} bytes, less than the 12-byte prefix"
        )
    _, length = _PREFIX.unpack_from(buf, pos)
    if length < LEGACY_MIN_LENGTH:  # too short for any message format: zeros, garbage, a torn tail
        raise CorruptRecordError(
            f"record batch at byte {pos} declares length {length}, below the minimum {MIN_BATCH_LENGTH}"
        )
    if available >= MAGIC_AT + 1 and buf[pos + MAGIC_AT] != CURRENT_MAGIC:
        magic = buf[pos + MAGIC_AT]
        if magic in (0, 1):
            raise UnsupportedMagicError(
                f"record batch at byte {pos} uses message format v{magic}; only v2 (Kafka 0.11+) is "
                "accepted: upgrade the client or enable its v2 record format"
            )
        raise CorruptRecordError(f"record batch at byte {pos} has unknown magic byte {magic}")
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"record batch at byte {pos} declares length {length}, below the minimum {MIN_BATCH_LENGTH}"
        )
    size = length + LOG_OVERHEAD
    if size > available:
        raise CorruptRecordError(
            f"record batch at byte {pos} declares {size} bytes but only {available} are present"
        )
    header = BatchHeader._make(HEADER.unpack_from(buf, pos))
    actual = compute_crc(buf, pos, size)
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at byte {pos} fails its CRC-32C check (stored {header.crc:#010x}, "
            f"computed {actual:#010x}): the data was damaged in transit or on disk"
        )
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise CorruptRecordError(
            f"record batch at byte {pos} has negative lastOffsetDelta or record count"
        )
    return header


def validate_record_set(
    buf: bytes | bytearray | memoryview,
    *,
    max_batch_bytes: int,
    from_client: bool = True,
) -> list[BatchHeader]:
    """Validate every batch of a record set as a produce request carries it.

    With ``from_client`` (a producer, not a replica or coordinator), batches must be non-empty,
    have ``recordCount == lastOffsetDelta + 1`` and must not be control batches.
    """
    total = len(buf)
    if total == 0:
        raise InvalidRecordError("the record set is empty: a produce request must carry at least one batch")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < total:
        header = check_batch(buf, pos, available=total - pos)
        size = header.size
        if size > max_batch_bytes:
            raise RecordTooLargeError(
                f"record batch of {size} bytes exceeds max.message.bytes={max_batch_bytes}: "
                "send smaller batches or raise the topic's max.message.bytes"
            )
        if header.compression > MAX_COMPRESSION_ID:
            raise UnsupportedCompressionError(
                f"record batch at byte {pos} uses compression id {header.compression}; "
                "supported: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd"
            )
        if from_client:
            if header.record_count == 0:
                raise InvalidRecordError("a record batch with no records cannot be produced")
            if header.record_count != header.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"record batch claims {header.record_count} records but lastOffsetDelta "
                    f"{header.last_offset_delta}"
                )
            if header.is_control:
                raise InvalidRecordError("clients may not produce control batches")
        headers.append(header)
        pos += size
    return headers


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign the batch's base offset (not covered by the CRC)."""
    _I64.pack_into(buf, pos + BASE_OFFSET_AT, base_offset)


def set_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Assign the batch's partitionLeaderEpoch (not covered by the CRC)."""
    _I32.pack_into(buf, pos + LEADER_EPOCH_AT, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, size: int, timestamp: int) -> None:
    """Mark the batch at ``pos`` LogAppendTime with ``timestamp`` and re-stamp its CRC."""
    attributes = _I16.unpack_from(buf, pos + ATTRIBUTES_AT)[0]
    _I16.pack_into(buf, pos + ATTRIBUTES_AT, attributes | TIMESTAMP_TYPE_BIT)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_AT, timestamp)
    restamp_crc(buf, pos, size)


def restamp_crc(buf: bytearray | memoryview, pos: int, size: int) -> None:
    """Recompute the CRC after a change to attributes..end of the batch."""
    _U32.pack_into(buf, pos + CRC_AT, compute_crc(buf, pos, size))
