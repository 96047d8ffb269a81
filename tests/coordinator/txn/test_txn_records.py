"""Tests of records.py: the ``__transaction_state`` record formats.

The exact-bytes examples were worked out by hand from Kafka's schemas (TransactionLogKey.json,
TransactionLogValue.json), field by field: v0 with int16-length strings and int32 array counts, v1
flexible with compact lengths (length + 1), a tagged-field section after each partitions entry and after
the value, and previous_producer_id as tag 0.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator.group.records import partition_for as group_partition_for
from odradek.coordinator.txn.model import TxnState
from odradek.coordinator.txn.records import (
    TxnKey,
    TxnRecordError,
    TxnValue,
    decode_record,
    encode_key,
    encode_value,
    partition_for,
)
from tests.coordinator.test_records import i16, i32, i64

KEY = TxnKey("txn-1")
KEY_BYTES = i16(0) + i16(5) + b"txn-1"

ONGOING = TxnValue(producer_id=1000, producer_epoch=2, timeout_ms=60_000, status=TxnState.ONGOING,
                   partitions=(("orders", (0, 3)),), last_update_ms=2000, start_ms=1500, previous_producer_id=1000)
ONGOING_V1 = (i16(1) + i64(1000) + i16(2) + i32(60_000) + b"\x01"
              + b"\x02"  # one partitions entry (compact: n + 1)
              + b"\x07orders" + b"\x03" + i32(0) + i32(3) + b"\x00"  # topic, two ids, no tags
              + i64(2000) + i64(1500)
              + b"\x01" + b"\x00" + b"\x08" + i64(1000))  # one tag: 0 (previous_producer_id), 8 bytes
ONGOING_V0 = (i16(0) + i64(1000) + i16(2) + i32(60_000) + b"\x01"
              + i32(1) + i16(6) + b"orders" + i32(2) + i32(0) + i32(3)
              + i64(2000) + i64(1500))

EMPTY = TxnValue(1000, 0, 60_000, TxnState.EMPTY, None, 5, -1, previous_producer_id=1000)
EMPTY_V1 = (i16(1) + i64(1000) + i16(0) + i32(60_000) + b"\x00" + b"\x00"  # Empty, null partitions
            + i64(5) + i64(-1) + b"\x01\x00\x08" + i64(1000))
EMPTY_V0 = i16(0) + i64(1000) + i16(0) + i32(60_000) + b"\x00" + i32(-1) + i64(5) + i64(-1)


def test_key_golden_bytes() -> None:
    assert encode_key(KEY) == KEY_BYTES
    assert decode_record(KEY_BYTES, None) == (KEY, None)


def test_ongoing_value_golden_bytes_v1_and_v0() -> None:
    assert encode_value(ONGOING) == ONGOING_V1
    assert decode_record(KEY_BYTES, ONGOING_V1) == (KEY, ONGOING)
    assert encode_value(ONGOING, version=0) == ONGOING_V0
    # v0 has no tagged fields: previous_producer_id reads back as its default
    assert decode_record(KEY_BYTES, ONGOING_V0) == (KEY, TxnValue(1000, 2, 60_000, TxnState.ONGOING,
                                                                  (("orders", (0, 3)),), 2000, 1500))


def test_empty_value_writes_a_null_partition_array() -> None:
    assert encode_value(EMPTY) == EMPTY_V1
    assert encode_value(EMPTY, version=0) == EMPTY_V0
    assert decode_record(KEY_BYTES, EMPTY_V1) == (KEY, EMPTY)


def test_complete_value_writes_an_empty_array_not_null() -> None:
    v = TxnValue(7, 1, 100, TxnState.COMPLETE_COMMIT, (), 9, 8)
    raw = encode_value(v)
    assert raw is not None
    assert raw == i16(1) + i64(7) + i16(1) + i32(100) + b"\x04" + b"\x01" + i64(9) + i64(8) + b"\x00"
    assert decode_record(KEY_BYTES, raw) == (KEY, v)


def test_all_tagged_fields_in_order_and_defaults_omitted() -> None:
    v = TxnValue(1, 1, 100, TxnState.PREPARE_ABORT, (("a", (1,)),), 3, 2, previous_producer_id=0,
                 next_producer_id=5, client_transaction_version=2)
    raw = encode_value(v)
    assert raw is not None
    assert raw.endswith(b"\x03" + b"\x00\x08" + i64(0) + b"\x01\x08" + i64(5) + b"\x02\x02" + i16(2))
    assert decode_record(KEY_BYTES, raw) == (KEY, v)


def test_unknown_tags_are_skipped_and_known_tags_checked() -> None:
    head = EMPTY_V1[: -len(b"\x01\x00\x08" + i64(1000))]
    with_unknown = head + b"\x02" + b"\x00\x08" + i64(1000) + b"\x09\x03abc"
    assert decode_record(KEY_BYTES, with_unknown) == (KEY, EMPTY)
    with pytest.raises(TxnRecordError, match="tag 0 has 4 bytes"):
        decode_record(KEY_BYTES, head + b"\x01\x00\x04" + i32(1))
    with pytest.raises(TxnRecordError, match="not greater"):
        decode_record(KEY_BYTES, head + b"\x02\x01\x08" + i64(1) + b"\x00\x08" + i64(1))


def test_last_producer_epoch_is_not_in_the_bytes() -> None:
    v = TxnValue(1000, 3, 100, TxnState.EMPTY, None, 1, -1, 1000, last_producer_epoch=2)
    decoded = decode_record(KEY_BYTES, encode_value(v))
    assert decoded is not None and decoded[1] == v and decoded[1].last_producer_epoch == -1  # type: ignore[union-attr]


@pytest.mark.parametrize("raw, problem", [
    (ONGOING_V1[:-3], "truncated"),
    (ONGOING_V1 + b"\x00", "trailing"),
    (i16(2) + ONGOING_V1[2:], "unknown version 2"),
    (ONGOING_V1[:16] + b"\x09" + ONGOING_V1[17:], "unknown transaction status 9"),
])
def test_malformed_values_are_refused(raw: bytes, problem: str) -> None:
    with pytest.raises(TxnRecordError, match=problem):
        decode_record(KEY_BYTES, raw)


def test_keys_of_other_versions_are_skipped_and_bad_keys_refused() -> None:
    assert decode_record(i16(1) + i16(1) + b"x", b"anything") is None
    with pytest.raises(TxnRecordError):
        decode_record(i16(-1), None)
    with pytest.raises(TxnRecordError):
        decode_record(i16(0) + i16(9) + b"abc", None)
    with pytest.raises(TxnRecordError):
        decode_record(i16(0) + i16(2) + b"\xff\xfe", None)


def test_encoding_refuses_what_does_not_fit() -> None:
    with pytest.raises(TxnRecordError):
        encode_value(TxnValue(1, 1, 1, TxnState.EMPTY, (("t", (0,)),), 0, -1))
    with pytest.raises(TxnRecordError):
        encode_value(TxnValue(1, 40_000, 1, TxnState.ONGOING, (), 0, 0))
    with pytest.raises(TxnRecordError):
        encode_value(EMPTY, version=2)
    assert encode_value(None) is None


def test_partition_for_matches_kafka() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE: Utils.abs maps it to 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("Aa", 50) == partition_for("BB", 50) == 2112 % 50  # equal Java hash codes
    for tid in ("txn-1", "my-transactional-id", "ζ", ""):
        assert partition_for(tid, 50) == group_partition_for(tid, 50)


_values = st.builds(
    TxnValue,
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 32767),
    timeout_ms=st.integers(1, 2**31 - 1),
    status=st.sampled_from([s for s in TxnState if s is not TxnState.EMPTY]),
    partitions=st.lists(st.tuples(st.text(max_size=8), st.lists(st.integers(0, 2**31 - 1), max_size=4)
                                  .map(tuple)), max_size=3).map(tuple),
    last_update_ms=st.integers(-1, 2**62),
    start_ms=st.integers(-1, 2**62),
    previous_producer_id=st.integers(-1, 2**62),
    next_producer_id=st.integers(-1, 2**62),
    client_transaction_version=st.integers(0, 2),
)


@settings(max_examples=150, deadline=None)
@given(_values, st.text(max_size=20))
def test_every_value_version_round_trips(value: TxnValue, tid: str) -> None:
    key = TxnKey(tid)
    assert decode_record(encode_key(key), encode_value(value, version=1)) == (key, value)
    v0 = TxnValue(value.producer_id, value.producer_epoch, value.timeout_ms, value.status, value.partitions,
                  value.last_update_ms, value.start_ms)
    assert decode_record(encode_key(key), encode_value(value, version=0)) == (key, v0)
