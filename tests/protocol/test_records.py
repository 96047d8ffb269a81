"""Tests of records.py: varints, build/decode round trips, structural damage, control records, and
interop with a real client library (kafka-python's v2 record batch reader and builder).
"""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import decode_varint as kp_decode_varint
from kafka.record.util import encode_varint as kp_encode_varint

from odradek.protocol import batch
from odradek.protocol.batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, check_batch
from odradek.protocol.compression import Compression, compress
from odradek.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    UnsupportedCompressionError,
    UnsupportedMagicError,
)
from odradek.protocol.records import (
    ControlKey,
    ControlType,
    Record,
    RecordInput,
    build_batch,
    build_control_batch,
    decode_records,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    iter_batches,
    parse_control_key,
    parse_end_txn_marker,
    size_of_varint,
    size_of_varlong,
)

CODECS = list(Compression)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


# --- varints -------------------------------------------------------------------------------------

VARINT_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (300, "d804"),
    ((1 << 31) - 1, "feffffff0f"),
    (-(1 << 31), "ffffffff0f"),
]


@pytest.mark.parametrize(("value", "hex_"), VARINT_VECTORS)
def test_varint_vectors(value: int, hex_: str) -> None:
    encoded = bytes.fromhex(hex_)
    assert encode_varint(value) == encoded
    assert encode_varlong(value) == encoded
    assert size_of_varint(value) == len(encoded)
    assert decode_varint(encoded) == (value, len(encoded))
    assert decode_varlong(b"\xaa" + encoded, 1) == (value, 1 + len(encoded))


def test_varlong_extremes() -> None:
    assert encode_varlong((1 << 63) - 1) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert encode_varlong(-(1 << 63)) == b"\xff" * 9 + b"\x01"
    assert decode_varlong(b"\xff" * 9 + b"\x01") == (-(1 << 63), 10)
    assert size_of_varlong(-(1 << 63)) == 10


@given(INT32)
def test_varint_round_trip_and_matches_kafka_python(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value) <= 5
    assert decode_varint(encoded) == (value, len(encoded))
    theirs = bytearray()
    kp_encode_varint(value, theirs.append)
    assert bytes(theirs) == encoded


@given(INT64)
def test_varlong_round_trip_and_matches_kafka_python(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varlong(value) <= 10
    assert decode_varlong(encoded) == (value, len(encoded))
    theirs = bytearray()
    kp_encode_varint(value, theirs.append)
    assert bytes(theirs) == encoded
    assert kp_decode_varint(bytearray(encoded)) == (value, len(encoded))


def test_varint_range_checks() -> None:
    with pytest.raises(ValueError, match="int32"):
        encode_varint(1 << 31)
    with pytest.raises(ValueError, match="int64"):
        encode_varlong(-(1 << 63) - 1)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"])
def test_truncated_varint(data: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="truncated") as exc_info:
        decode_varint(data)
    assert exc_info.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_varlong(data)


def test_varint_end_bound_is_respected() -> None:
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_varint(b"\x80\x01", 0, 1)


def test_overlong_varints() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_varint(b"\x80" * 5 + b"\x00")
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varlong(b"\x80" * 10 + b"\x00")
    # Like Kafka's reader, a 5-byte varint keeps only 32 bits.
    assert decode_varint(b"\xfe\xff\xff\xff\x7f") == ((1 << 31) - 1, 5)


# --- build / decode round trips ------------------------------------------------------------------

SAMPLE: list[RecordInput | tuple[bytes | None, bytes | None]] = [
    (b"key", b"value"),
    (None, b"null key"),
    (b"null value", None),
    (None, None),
    (b"", b""),
    RecordInput(b"h", b"with headers", headers=(("trace-id", b"abc"), ("null", None), ("é ✓", b""))),
    RecordInput(b"early", b"negative delta", timestamp=1_000 - 250),
    RecordInput(b"late", b"big", timestamp=1_000 + 86_400_000, headers=(("dup", b"1"), ("dup", b"2"))),
    (b"k" * 300, b"v" * 70_000),
]


def expected(records, base_offset: int, default_ts: int) -> list[Record]:
    out = []
    for i, item in enumerate(records):
        if isinstance(item, RecordInput):
            ts = default_ts if item.timestamp is None else item.timestamp
            out.append(Record(base_offset + i, ts, item.key, item.value, item.headers))
        else:
            out.append(Record(base_offset + i, default_ts, item[0], item[1], ()))
    return out


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_round_trip_every_codec(codec: Compression) -> None:
    buf = build_batch(SAMPLE, base_offset=100, base_timestamp=1_000, compression=codec)
    header = check_batch(buf)
    assert header.compression == codec
    assert header.size == len(buf)
    assert header.record_count == len(SAMPLE)
    assert header.last_offset_delta == len(SAMPLE) - 1
    assert header.base_timestamp == 1_000
    assert header.max_timestamp == 1_000 + 86_400_000
    assert decode_records(buf) == expected(SAMPLE, 100, 1_000)
    assert decode_records(memoryview(buf)) == decode_records(bytearray(buf))


def test_empty_bytes_are_not_null() -> None:
    (rec,) = decode_records(build_batch([(b"", b"")], base_timestamp=0))
    assert rec.key == b"" and rec.value == b""
    (rec,) = decode_records(build_batch([(None, None)], base_timestamp=0))
    assert rec.key is None and rec.value is None


def test_base_timestamp_defaults_to_first_record_then_now() -> None:
    buf = build_batch([RecordInput(b"a", b"1", timestamp=500), RecordInput(b"b", b"2", timestamp=400)])
    header = check_batch(buf)
    assert (header.base_timestamp, header.max_timestamp) == (500, 500)
    assert [r.timestamp for r in decode_records(buf)] == [500, 400]

    before = time.time_ns() // 1_000_000
    buf = build_batch([(b"a", b"1"), (b"b", b"2")])
    after = time.time_ns() // 1_000_000
    header = check_batch(buf)
    assert before <= header.base_timestamp <= after
    assert {r.timestamp for r in decode_records(buf)} == {header.base_timestamp}


def test_negative_timestamps() -> None:
    records = [RecordInput(None, b"x", timestamp=-1), RecordInput(None, b"y", timestamp=-(1 << 40))]
    buf = build_batch(records, base_timestamp=1 << 40)
    assert [r.timestamp for r in decode_records(buf)] == [-1, -(1 << 40)]


def test_producer_fields_and_flags_are_written() -> None:
    buf = build_batch(
        [(b"k", b"v")] * 4,
        base_offset=7,
        producer_id=12345,
        producer_epoch=6,
        base_sequence=99,
        is_transactional=True,
        partition_leader_epoch=3,
        base_timestamp=1,
        compression=Compression.LZ4,
    )
    header = check_batch(buf)
    assert header.producer_id == 12345
    assert header.producer_epoch == 6
    assert header.base_sequence == 99
    assert header.last_sequence == 102
    assert header.partition_leader_epoch == 3
    assert header.is_transactional and not header.is_control
    assert header.compression == Compression.LZ4
    assert [r.offset for r in decode_records(buf)] == [7, 8, 9, 10]


def test_rebuilding_decoded_records_keeps_offsets_and_gaps() -> None:
    """What the log cleaner does: keep some records of a batch, with their offsets."""
    original = build_batch([(b"k%d" % i, b"v%d" % i) for i in range(10)], base_offset=50, base_timestamp=9)
    kept = [r for r in decode_records(original) if r.offset % 3 == 0]
    header = check_batch(original)
    rebuilt = build_batch(
        kept, base_offset=header.base_offset, last_offset_delta=header.last_offset_delta, compression=4
    )
    new_header = check_batch(rebuilt)
    assert new_header.record_count == len(kept) == 3
    assert new_header.last_offset_delta == 9
    assert new_header.next_offset == header.next_offset
    assert decode_records(rebuilt) == kept


def test_empty_batch_with_explicit_last_offset_delta() -> None:
    buf = build_batch([], base_offset=10, last_offset_delta=4, base_timestamp=77, producer_id=3)
    header = check_batch(buf)
    assert (header.record_count, header.last_offset_delta, header.next_offset) == (0, 4, 15)
    assert decode_records(buf) == []


def test_build_batch_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])
    with pytest.raises(ValueError, match="increase"):
        build_batch([Record(5, 0, None, b"a"), Record(5, 0, None, b"b")], base_offset=0)
    with pytest.raises(ValueError, match="increase"):
        build_batch([Record(3, 0, None, b"a")], base_offset=4)
    with pytest.raises(ValueError, match="last_offset_delta"):
        build_batch([(None, b"a"), (None, b"b")], last_offset_delta=0)
    with pytest.raises(ValueError, match="out of range"):
        build_batch([(None, b"a")], producer_epoch=1 << 15)
    with pytest.raises(UnsupportedCompressionError):
        build_batch([(None, b"a")], compression=9)


def test_log_append_time_overrides_record_timestamps() -> None:
    buf = bytearray(build_batch(SAMPLE, base_timestamp=1_000, compression=Compression.GZIP))
    batch.set_log_append_time(buf, 0, len(buf), 123_456)
    assert [r.timestamp for r in decode_records(buf)] == [123_456] * len(SAMPLE)


# --- hypothesis ----------------------------------------------------------------------------------

_bytes_or_none = st.none() | st.binary(max_size=64)
_headers = st.lists(st.tuples(st.text(max_size=8), _bytes_or_none), max_size=3).map(tuple)
_timestamps = st.none() | st.integers(-(1 << 45), 1 << 45)
_record_inputs = st.lists(
    st.builds(RecordInput, _bytes_or_none, _bytes_or_none, _timestamps, _headers)
    | st.tuples(_bytes_or_none, _bytes_or_none),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    records=_record_inputs,
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 1 << 62),
    base_timestamp=st.integers(-(1 << 45), 1 << 45),
)
def test_build_decode_round_trip_property(records, codec, base_offset, base_timestamp) -> None:
    buf = build_batch(records, base_offset=base_offset, base_timestamp=base_timestamp, compression=codec)
    header = check_batch(buf)
    want = expected(records, base_offset, base_timestamp)
    assert header.record_count == len(records)
    assert header.max_timestamp == max(r.timestamp for r in want)
    assert batch.validate_record_set(buf, max_batch_bytes=1 << 30)[0] == header
    assert decode_records(buf) == want


# --- structural damage ---------------------------------------------------------------------------


def raw_batch(body: bytes, count: int, *, attributes: int = 0, last_offset_delta: int | None = None) -> bytes:
    """A batch with a hand-made record section and a valid CRC, so only the records are wrong."""
    out = bytearray(HEADER_SIZE) + body
    last = count - 1 if last_offset_delta is None else last_offset_delta
    HEADER.pack_into(out, 0, 0, len(out) - LOG_OVERHEAD, -1, 2, 0, attributes, last, 0, 0, -1, -1, -1, count)
    batch.restamp_crc(out, 0, len(out))
    return bytes(out)


def record_bytes(fields: bytes) -> bytes:
    return encode_varint(len(fields)) + fields


# attributes, tsDelta 0, offsetDelta 0, key null, value b"v", 0 headers
GOOD_FIELDS = b"\x00" + b"\x00" + b"\x00" + b"\x01" + b"\x02v" + b"\x00"


def test_raw_batch_helper_is_valid() -> None:
    assert decode_records(raw_batch(record_bytes(GOOD_FIELDS), 1)) == [Record(0, 0, None, b"v")]


DAMAGE = [
    ("count larger than records", record_bytes(GOOD_FIELDS), 2, "truncated"),
    ("count smaller than records", record_bytes(GOOD_FIELDS) * 2, 1, "remain after"),
    ("records but count zero", record_bytes(GOOD_FIELDS), 0, "remain after"),
    ("record length past the end", encode_varint(len(GOOD_FIELDS) + 5) + GOOD_FIELDS, 1, "declares"),
    ("record length zero", b"\x00", 1, "declares"),
    ("record length negative", b"\x01", 1, "declares"),
    ("record length too long for fields", record_bytes(GOOD_FIELDS + b"\x00"), 1, "fields take"),
    ("record length too short for fields", record_bytes(GOOD_FIELDS[:-1]), 1, "truncated"),
    ("truncated length varint", b"\x80", 1, "truncated"),
    ("overlong length varint", b"\x80\x80\x80\x80\x80\x01", 1, "longer than"),
    ("key runs past record", record_bytes(b"\x00\x00\x00" + b"\x10k" + b"\x02v\x00"), 1, "key"),
    ("invalid key length", record_bytes(b"\x00\x00\x00" + b"\x03" + b"\x02v\x00"), 1, "invalid length"),
    ("negative header count", record_bytes(b"\x00\x00\x00\x01\x02v" + b"\x01"), 1, "header count"),
    ("null header key", record_bytes(b"\x00\x00\x00\x01\x02v\x02" + b"\x01\x00"), 1, "null key"),
    ("non-utf8 header key", record_bytes(b"\x00\x00\x00\x01\x02v\x02" + b"\x02\xff\x00"), 1, "utf-8"),
    ("header value past end", record_bytes(b"\x00\x00\x00\x01\x02v\x02" + b"\x02h\x08"), 1, "header value"),
]


@pytest.mark.parametrize(("body", "count", "match"), [d[1:] for d in DAMAGE], ids=[d[0] for d in DAMAGE])
def test_structural_damage_raises_corrupt_record(body: bytes, count: int, match: str) -> None:
    buf = raw_batch(body, count, last_offset_delta=0)
    check_batch(buf)  # the CRC is fine: the damage is inside the records
    with pytest.raises(CorruptRecordError, match=match) as exc_info:
        decode_records(buf)
    assert exc_info.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", [c for c in CODECS if c], ids=lambda c: c.name)
def test_structural_damage_inside_compressed_records(codec: Compression) -> None:
    body = record_bytes(GOOD_FIELDS) * 2
    buf = raw_batch(compress(codec, body), 3, attributes=codec)
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_records(buf)
    assert len(decode_records(raw_batch(compress(codec, body), 2, attributes=codec))) == 2


@pytest.mark.parametrize("codec", [c for c in CODECS if c], ids=lambda c: c.name)
def test_undecompressable_payload_with_valid_crc(codec: Compression) -> None:
    buf = raw_batch(b"\xff" * 40, 1, attributes=codec)
    with pytest.raises(CorruptRecordError, match=codec.name.lower()):
        decode_records(buf)


def test_unknown_codec_in_attributes() -> None:
    buf = raw_batch(record_bytes(GOOD_FIELDS), 1, attributes=5)
    with pytest.raises(UnsupportedCompressionError) as exc_info:
        decode_records(buf)
    assert exc_info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_decode_records_checks_crc_magic_and_size() -> None:
    good = build_batch(SAMPLE[:3], base_timestamp=1)
    damaged = bytearray(good)
    damaged[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_records(damaged)
    old = bytearray(good)
    old[batch.MAGIC_AT] = 1
    with pytest.raises(UnsupportedMagicError):
        decode_records(old)
    with pytest.raises(CorruptRecordError, match="declares"):
        decode_records(good[:-1])
    with pytest.raises(CorruptRecordError, match="exactly one batch"):
        decode_records(good + good)


# --- iter_batches --------------------------------------------------------------------------------


def test_iter_batches() -> None:
    parts = [build_batch([(None, b"%d" % i)] * (i + 1), base_offset=i * 10, base_timestamp=0) for i in range(4)]
    buf = b"".join(parts)
    found = list(iter_batches(buf))
    assert [pos for pos, _ in found] == [sum(len(p) for p in parts[:i]) for i in range(4)]
    assert [h.base_offset for _, h in found] == [0, 10, 20, 30]
    values = [r.value for pos, h in found for r in decode_records(memoryview(buf)[pos : pos + h.size])]
    assert values == [b"0", b"1", b"1", b"2", b"2", b"2", b"3", b"3", b"3", b"3"]
    assert list(iter_batches(b"")) == []


@pytest.mark.parametrize("cut", [1, 5, 12, 40, 100])
def test_iter_batches_partial_tail(cut: int) -> None:
    one = build_batch([(b"k", b"v" * 100)], base_timestamp=0)
    buf = one + one[:cut]
    with pytest.raises(CorruptRecordError):
        list(iter_batches(buf))
    assert [pos for pos, _ in iter_batches(buf, allow_partial_tail=True)] == [0]


def test_iter_batches_partial_tail_does_not_hide_damage() -> None:
    one = build_batch([(b"k", b"v")], base_timestamp=0)
    damaged = bytearray(one)
    damaged[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(iter_batches(one + bytes(damaged) + one, allow_partial_tail=True))


# --- control records -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [ControlType.COMMIT, ControlType.ABORT])
def test_control_batch(kind: ControlType) -> None:
    buf = build_control_batch(
        kind, producer_id=4000, producer_epoch=2, coordinator_epoch=17, timestamp=1_234, base_offset=55
    )
    header = check_batch(buf)
    assert header.is_control and header.is_transactional
    assert header.compression == Compression.NONE
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4000, 2, -1)
    assert (header.record_count, header.base_offset, header.max_timestamp) == (1, 55, 1_234)
    (rec,) = decode_records(buf)
    assert rec.offset == 55 and rec.timestamp == 1_234
    assert rec.key == struct.pack(">hh", 0, kind)
    assert rec.value == struct.pack(">hi", 0, 17)
    assert parse_control_key(rec.key) == ControlKey(0, kind)
    assert parse_end_txn_marker(rec.value) == 17

    # kafka-python's consumer recognises it as a transaction marker.
    theirs = DefaultRecordBatch(buf)
    assert theirs.validate_crc() and theirs.is_control_batch and theirs.is_transactional
    (marker,) = list(theirs)
    assert marker.commit == (kind is ControlType.COMMIT)
    assert marker.abort == (kind is ControlType.ABORT)


def test_build_control_batch_only_writes_markers() -> None:
    with pytest.raises(ValueError, match="COMMIT or ABORT"):
        build_control_batch(
            ControlType.LEADER_CHANGE, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=0
        )


def test_parse_control_key() -> None:
    assert parse_control_key(struct.pack(">hh", 0, 1)).type is ControlType.COMMIT
    assert parse_control_key(struct.pack(">hh", 0, 2)).type is ControlType.LEADER_CHANGE
    assert parse_control_key(struct.pack(">hh", 0, 77)).type is ControlType.UNKNOWN
    assert parse_control_key(struct.pack(">hh", 3, 0) + b"future") == ControlKey(3, ControlType.ABORT)
    for bad, match in [(None, "null"), (b"\x00\x00\x00", "3 bytes"), (struct.pack(">hh", -1, 0), "version")]:
        with pytest.raises(CorruptRecordError, match=match):
            parse_control_key(bad)


def test_parse_end_txn_marker_errors() -> None:
    for bad, match in [(None, "null"), (b"\x00" * 5, "5 bytes"), (struct.pack(">hi", -2, 0), "version")]:
        with pytest.raises(CorruptRecordError, match=match):
            parse_end_txn_marker(bad)


# --- interop with kafka-python -------------------------------------------------------------------


def kafka_python_build(codec: int, n: int, *, transactional: bool = False) -> tuple[bytes, list[tuple]]:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 22,
    )
    if transactional:
        builder.set_producer_state(producer_id=77, producer_epoch=3, base_sequence=10, is_transactional=True)
    written = []
    for i in range(n):
        key = None if i % 5 == 0 else b"key-%d" % i
        value = None if i % 7 == 3 else b"value %d " % i * 20
        headers = [("h", b"%d" % i), ("none", None)] if i % 2 else []
        ts = 1_700_000_000_000 + (i * 37) % 100 - 50  # non-monotonic, some negative deltas
        builder.append(i, ts, key, value, headers)
        written.append((i, ts, key, value, tuple(headers)))
    return bytes(builder.build()), written


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_decodes_batches_built_by_kafka_python(codec: Compression) -> None:
    buf, written = kafka_python_build(codec, 50)
    header = check_batch(buf)
    assert header.compression == codec, "payload should be compressible enough to stay compressed"
    assert batch.validate_record_set(buf, max_batch_bytes=1 << 22) == [header]
    decoded = decode_records(buf)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == written


def test_decodes_transactional_batch_built_by_kafka_python() -> None:
    buf, written = kafka_python_build(Compression.ZSTD, 5, transactional=True)
    header = check_batch(buf)
    assert header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 10)
    assert [r.value for r in decode_records(buf)] == [w[3] for w in written]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_reads_batches_built_by_odradek(codec: Compression) -> None:
    buf = build_batch(SAMPLE, base_offset=1000, base_timestamp=1_000, compression=codec, partition_leader_epoch=4)
    theirs = DefaultRecordBatch(buf)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert (theirs.base_offset, theirs.leader_epoch, theirs.records_count) == (1000, 4, len(SAMPLE))
    assert theirs.last_offset_delta == len(SAMPLE) - 1
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    want = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in expected(SAMPLE, 1000, 1_000)]
    assert got == want


def test_kafka_python_reads_a_record_set_built_by_odradek() -> None:
    parts = [
        build_batch([(b"a", b"1"), (b"b", b"2")], base_offset=0, base_timestamp=5, compression=codec)
        for codec in CODECS
    ]
    for i, part in enumerate(parts):  # give each batch its own offsets, as the log would
        buf = bytearray(part)
        batch.set_base_offset(buf, 0, 2 * i)
        parts[i] = bytes(buf)
    records = MemoryRecords(b"".join(parts))
    offsets = [r.offset for b in records for r in b]
    assert offsets == list(range(2 * len(CODECS)))
