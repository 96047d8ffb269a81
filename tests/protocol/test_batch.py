"""Tests of batch.py: the opaque-batch checks of the produce path and the fields the log rewrites.

Good batches come from two independent writers: kafka-python's ``DefaultRecordBatchBuilder`` and
Odradek's own ``records.build_batch``. Damaged ones are made by editing bytes and, where the test is
about something other than the CRC, re-stamping the CRC so that only the intended fault remains.
"""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from odradek.protocol import batch
from odradek.protocol.batch import (
    ATTRIBUTES_AT,
    CONTROL_BIT,
    CRC_AT,
    HEADER_SIZE,
    LENGTH_AT,
    MAGIC_AT,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    check_batch,
    validate_record_set,
)
from odradek.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    KafkaError,
    RecordTooLargeError,
    UnsupportedMagicError,
)
from odradek.protocol.records import ControlType, build_batch, build_control_batch, decode_records

MAX = 1 << 20


def kafka_python_batch(n: int = 3, *, timestamp: int = 1_700_000_000_000) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=MAX,
    )
    for i in range(n):
        builder.append(i, timestamp + i, f"k{i}".encode(), f"v{i}".encode(), [])
    return bytes(builder.build())


def odradek_batch(n: int = 3, **kwargs: object) -> bytes:
    return build_batch([(f"k{i}".encode(), b"value-%d" % i) for i in range(n)], base_timestamp=1_000, **kwargs)


def patched(buf: bytes, at: int, fmt: str, value: int, *, restamp: bool = True) -> bytes:
    """``buf`` with one header field replaced, CRC re-stamped unless told otherwise."""
    out = bytearray(buf)
    struct.pack_into(fmt, out, at, value)
    if restamp:
        batch.restamp_crc(out, 0, len(out))
    return bytes(out)


def assert_error(exc_info: pytest.ExceptionInfo[KafkaError], cls: type[KafkaError], code: ErrorCode) -> None:
    assert type(exc_info.value) is cls
    assert exc_info.value.code == code
    assert str(exc_info.value)


# --- check_batch: good batches -------------------------------------------------------------------


@pytest.mark.parametrize("make", [kafka_python_batch, odradek_batch])
def test_check_batch_accepts_good_batches(make) -> None:
    buf = make(3)
    header = check_batch(buf)
    assert isinstance(header, BatchHeader)
    assert header.magic == 2
    assert header.size == len(buf)
    assert header.record_count == 3
    assert header.last_offset_delta == 2
    assert header.next_offset == header.base_offset + 3
    assert header.compression == 0
    assert not header.is_control and not header.is_transactional and not header.is_log_append_time


def test_check_batch_at_a_position_inside_a_larger_buffer() -> None:
    first, second = odradek_batch(2), kafka_python_batch(4)
    buf = first + second + b"\xff" * 7
    header = check_batch(buf, len(first), available=len(second))
    assert header.record_count == 4
    assert header.size == len(second)
    # Also works on a memoryview, and with bytearray input.
    assert check_batch(memoryview(buf), len(first), available=len(second)) == header
    assert check_batch(bytearray(first)).record_count == 2


def test_check_batch_parse_header_agrees() -> None:
    buf = odradek_batch(5, base_offset=42, producer_id=7, producer_epoch=3, base_sequence=11)
    header = check_batch(buf)
    assert header == batch.parse_header(buf)
    assert header.base_offset == 42
    assert header.last_offset == 46
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 11)
    assert header.last_sequence == 15
    assert batch.read_prefix(buf) == (42, len(buf) - batch.LOG_OVERHEAD)


# --- check_batch: refusals -----------------------------------------------------------------------


def test_check_batch_refuses_a_damaged_record_byte() -> None:
    buf = bytearray(odradek_batch())
    buf[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC-32C") as exc_info:
        check_batch(buf)
    assert_error(exc_info, CorruptRecordError, ErrorCode.CORRUPT_MESSAGE)


def test_check_batch_refuses_a_damaged_stored_crc() -> None:
    buf = bytearray(kafka_python_batch())
    buf[CRC_AT] ^= 0x80
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        check_batch(buf)


def test_check_batch_crc_covers_attributes() -> None:
    buf = patched(odradek_batch(), ATTRIBUTES_AT, ">h", TIMESTAMP_TYPE_BIT, restamp=False)
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        check_batch(buf)


@pytest.mark.parametrize("magic", [0, 1])
def test_check_batch_refuses_old_message_formats(magic: int) -> None:
    buf = patched(odradek_batch(), MAGIC_AT, ">b", magic, restamp=False)
    with pytest.raises(UnsupportedMagicError, match=f"v{magic}") as exc_info:
        check_batch(buf)
    assert_error(exc_info, UnsupportedMagicError, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT)
    assert isinstance(exc_info.value, InvalidRecordError)


@pytest.mark.parametrize("magic", [3, 7, -1])
def test_check_batch_refuses_unknown_magic(magic: int) -> None:
    buf = patched(odradek_batch(), MAGIC_AT, ">b", magic, restamp=False)
    with pytest.raises(CorruptRecordError, match="unknown magic") as exc_info:
        check_batch(buf)
    assert_error(exc_info, CorruptRecordError, ErrorCode.CORRUPT_MESSAGE)


def test_magic_is_checked_before_the_length_is_trusted() -> None:
    # A v1 message set has a different layout: it must be reported as such, not as a bad length.
    buf = patched(odradek_batch(), MAGIC_AT, ">b", 1, restamp=False)
    buf = patched(buf, LENGTH_AT, ">i", 10_000, restamp=False)
    with pytest.raises(UnsupportedMagicError):
        check_batch(buf)


@pytest.mark.parametrize("length", [MIN_BATCH_LENGTH - 1, 0, -1, -(1 << 31)])
def test_check_batch_refuses_length_below_minimum(length: int) -> None:
    buf = patched(odradek_batch(), LENGTH_AT, ">i", length, restamp=False)
    with pytest.raises(CorruptRecordError, match="below the minimum") as exc_info:
        check_batch(buf)
    assert_error(exc_info, CorruptRecordError, ErrorCode.CORRUPT_MESSAGE)


@pytest.mark.parametrize("keep", [0, 1, 11, 12, 16, 17, HEADER_SIZE - 1, HEADER_SIZE, -1])
def test_check_batch_refuses_truncated_batches(keep: int) -> None:
    good = odradek_batch()
    buf = good[:keep]
    with pytest.raises(CorruptRecordError, match=r"truncated|declares") as exc_info:
        check_batch(buf)
    assert_error(exc_info, CorruptRecordError, ErrorCode.CORRUPT_MESSAGE)


def test_check_batch_honours_available() -> None:
    good = odradek_batch()
    buf = good + b"\x00" * 100
    with pytest.raises(CorruptRecordError, match="declares"):
        check_batch(buf, available=len(good) - 1)
    assert check_batch(buf, available=len(good)).size == len(good)


def test_check_batch_refuses_length_past_end() -> None:
    good = odradek_batch()
    buf = patched(good, LENGTH_AT, ">i", len(good), restamp=False)  # 12 bytes too many
    with pytest.raises(CorruptRecordError, match="declares"):
        check_batch(buf)


def test_check_batch_refuses_negative_counts_even_with_valid_crc() -> None:
    buf = patched(odradek_batch(), 23, ">i", -1)  # lastOffsetDelta
    with pytest.raises(CorruptRecordError, match="negative"):
        check_batch(buf)
    buf = patched(odradek_batch(), 57, ">i", -5)  # recordCount
    with pytest.raises(CorruptRecordError, match="negative"):
        check_batch(buf)


# --- validate_record_set -------------------------------------------------------------------------


def test_validate_record_set_accepts_concatenated_batches() -> None:
    parts = [kafka_python_batch(2), odradek_batch(5, base_offset=2), odradek_batch(1)]
    buf = b"".join(parts)
    headers = validate_record_set(buf, max_batch_bytes=MAX)
    assert [h.record_count for h in headers] == [2, 5, 1]
    assert sum(h.size for h in headers) == len(buf)
    assert validate_record_set(memoryview(buf), max_batch_bytes=MAX) == headers


def test_validate_record_set_refuses_empty_input() -> None:
    with pytest.raises(InvalidRecordError, match="empty") as exc_info:
        validate_record_set(b"", max_batch_bytes=MAX)
    assert_error(exc_info, InvalidRecordError, ErrorCode.INVALID_RECORD)


def test_validate_record_set_max_batch_bytes_is_inclusive() -> None:
    buf = odradek_batch(10)
    assert validate_record_set(buf, max_batch_bytes=len(buf))[0].size == len(buf)
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes") as exc_info:
        validate_record_set(buf, max_batch_bytes=len(buf) - 1)
    assert_error(exc_info, RecordTooLargeError, ErrorCode.MESSAGE_TOO_LARGE)


def test_validate_record_set_size_limit_is_per_batch() -> None:
    one = odradek_batch(3)
    buf = one * 3
    assert len(validate_record_set(buf, max_batch_bytes=len(one))) == 3


def test_validate_record_set_refuses_trailing_garbage() -> None:
    buf = odradek_batch() + b"\x00\x00\x00"
    with pytest.raises(CorruptRecordError, match="truncated"):
        validate_record_set(buf, max_batch_bytes=MAX)


def test_validate_record_set_refuses_a_bad_second_batch() -> None:
    second = bytearray(odradek_batch())
    second[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=f"byte {len(odradek_batch())}"):
        validate_record_set(odradek_batch() + bytes(second), max_batch_bytes=MAX)


def test_validate_record_set_refuses_control_batch_from_client() -> None:
    marker = build_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=5)
    with pytest.raises(InvalidRecordError, match="control") as exc_info:
        validate_record_set(marker, max_batch_bytes=MAX)
    assert_error(exc_info, InvalidRecordError, ErrorCode.INVALID_RECORD)
    # The same bytes are fine from the broker itself (a coordinator writing a marker).
    (header,) = validate_record_set(marker, max_batch_bytes=MAX, from_client=False)
    assert header.is_control and header.is_transactional


def test_validate_record_set_refuses_control_bit_on_an_ordinary_batch() -> None:
    buf = patched(odradek_batch(), ATTRIBUTES_AT, ">h", CONTROL_BIT)
    with pytest.raises(InvalidRecordError, match="control"):
        validate_record_set(buf, max_batch_bytes=MAX)


def test_validate_record_set_refuses_count_mismatch() -> None:
    buf = patched(odradek_batch(3), 57, ">i", 2)  # recordCount 2, lastOffsetDelta 2
    with pytest.raises(InvalidRecordError, match="claims 2 records") as exc_info:
        validate_record_set(buf, max_batch_bytes=MAX)
    assert_error(exc_info, InvalidRecordError, ErrorCode.INVALID_RECORD)
    # A replica or the cleaner may legitimately hold batches with offset gaps.
    assert validate_record_set(buf, max_batch_bytes=MAX, from_client=False)[0].record_count == 2


def test_validate_record_set_refuses_batch_without_records() -> None:
    empty = build_batch([], last_offset_delta=0, base_timestamp=1)
    assert check_batch(empty).record_count == 0
    with pytest.raises(InvalidRecordError, match="no records"):
        validate_record_set(empty, max_batch_bytes=MAX)
    assert validate_record_set(empty, max_batch_bytes=MAX, from_client=False)[0].record_count == 0


def test_validate_record_set_magic_errors_are_invalid_record_family() -> None:
    buf = patched(odradek_batch(), MAGIC_AT, ">b", 0, restamp=False)
    with pytest.raises(UnsupportedMagicError):
        validate_record_set(buf, max_batch_bytes=MAX)


# --- fields the log rewrites ---------------------------------------------------------------------


@pytest.mark.parametrize("make", [kafka_python_batch, odradek_batch])
def test_set_base_offset_and_leader_epoch_keep_crc_valid(make) -> None:
    buf = bytearray(make(3))
    crc_before = check_batch(buf).crc
    batch.set_base_offset(buf, 0, 1_234_567_890_123)
    batch.set_leader_epoch(buf, 0, 17)
    header = check_batch(buf)
    assert header.crc == crc_before
    assert header.base_offset == 1_234_567_890_123
    assert header.partition_leader_epoch == 17
    assert header.last_offset == 1_234_567_890_125
    assert [r.offset for r in decode_records(buf)] == [1_234_567_890_123 + i for i in range(3)]


def test_set_base_offset_at_a_position_and_through_a_memoryview() -> None:
    first, second = odradek_batch(2), odradek_batch(4)
    buf = bytearray(first + second)
    view = memoryview(buf)
    batch.set_base_offset(view, len(first), 2)
    batch.set_leader_epoch(view, len(first), 3)
    headers = validate_record_set(buf, max_batch_bytes=MAX)
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, -1), (2, 3)]


@pytest.mark.parametrize("make", [kafka_python_batch, odradek_batch])
def test_set_log_append_time_restamps_crc(make) -> None:
    buf = bytearray(make(3))
    before = check_batch(buf)
    assert not before.is_log_append_time
    batch.set_log_append_time(buf, 0, len(buf), 9_999_999)
    after = check_batch(buf)
    assert after.is_log_append_time
    assert after.max_timestamp == 9_999_999
    assert after.crc != before.crc
    assert after.base_timestamp == before.base_timestamp
    assert after.compression == before.compression
    assert [r.timestamp for r in decode_records(buf)] == [9_999_999] * 3


def test_set_log_append_time_on_second_batch_leaves_first_alone() -> None:
    first, second = odradek_batch(2), odradek_batch(4)
    buf = bytearray(first + second)
    batch.set_log_append_time(buf, len(first), len(second), 77)
    h1, h2 = validate_record_set(buf, max_batch_bytes=MAX)
    assert not h1.is_log_append_time and h1.crc == check_batch(first).crc
    assert h2.is_log_append_time and h2.max_timestamp == 77


def test_restamp_crc_after_editing_attributes() -> None:
    buf = bytearray(odradek_batch())
    struct.pack_into(">h", buf, ATTRIBUTES_AT, TIMESTAMP_TYPE_BIT)
    with pytest.raises(CorruptRecordError):
        check_batch(buf)
    batch.restamp_crc(buf, 0, len(buf))
    assert check_batch(buf).is_log_append_time
