"""Reading stored batches record by record and rewriting them with the records compaction keeps
(``batch_filter``): ``scan_records`` agrees with ``decode_records``; a rewritten batch keeps offsets, sequences,
flags, codec and timestamps; a delete horizon is stamped without moving any record's timestamp; damage is a
``CorruptRecordError``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol import batch as rb
from odradek.protocol.compression import Compression, compress
from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import ControlType, Record, build_batch, build_control_batch, decode_records
from odradek.storage.cleaner.batch_filter import (
    AFTER_TS,
    DELETE_HORIZON_BIT,
    END,
    HAS_VALUE,
    KEY,
    OFFSET_DELTA,
    START,
    TS_AT,
    TS_DELTA,
    batch_body,
    has_delete_horizon,
    rewrite_batch,
    scan_records,
)

T0 = 1_700_000_000_000
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- arbitrary batches ---------------------------------------------------------------------------------------

# mostly small fields (one-byte varints), sometimes long ones (two- and three-byte varints: the scanner decodes
# one- and two-byte varints inline, longer ones apart)
_blob = st.one_of(st.binary(max_size=12), st.binary(min_size=64, max_size=200),
                  st.sampled_from([b"L" * 8200, b"M" * 17000]))
keys = st.one_of(st.none(), st.sampled_from([b"", b"a", b"b", b"key-c"]), _blob)
values = st.one_of(st.none(), _blob)
record_headers = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)


@dataclass
class Spec:
    raw: bytes
    records: list[Record]  # as built (absolute offsets and timestamps)
    codec: Compression
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    leader_epoch: int


@st.composite
def batches(draw: st.DrawFn, *, min_records: int = 1) -> Spec:
    n = draw(st.integers(min_records, 8))
    base = draw(st.sampled_from([0, 5, 1000, 2**40]))
    gaps = draw(st.lists(st.sampled_from([0, 0, 0, 1, 3, 200]), min_size=n, max_size=n))
    offsets, at = [], base
    for g in gaps:
        at += g
        offsets.append(at)
        at += 1
    first_ts = T0 + draw(st.integers(-10**6, 10**6))
    records = [
        Record(off, first_ts + draw(st.sampled_from([0, 1, -1, 63, 64, -65, 10**5, 10**9, -10**9])),
               draw(keys), draw(values), tuple(draw(record_headers)))
        for off in offsets
    ]
    codec = draw(st.sampled_from(CODECS))
    producer_id = draw(st.sampled_from([-1, 7, 2**50]))
    producer_epoch = -1 if producer_id < 0 else draw(st.integers(0, 5))
    base_sequence = -1 if producer_id < 0 else draw(st.sampled_from([0, 41, 2**31 - 3]))
    transactional = producer_id >= 0 and draw(st.booleans())
    leader_epoch = draw(st.sampled_from([-1, 0, 12]))
    extra = draw(st.sampled_from([0, 0, 2]))  # a last offset delta past the last record's, as a compacted batch
    last_delta = offsets[-1] - base + extra if n else extra
    raw = build_batch(records, base_offset=base, compression=codec, base_timestamp=first_ts, producer_id=producer_id,
                      producer_epoch=producer_epoch, base_sequence=base_sequence, is_transactional=transactional,
                      partition_leader_epoch=leader_epoch, last_offset_delta=last_delta)
    return Spec(raw, records, codec, producer_id, producer_epoch, base_sequence, transactional, leader_epoch)


def _scan(raw: bytes) -> tuple[rb.BatchHeader, bytes, list[tuple]]:
    h = rb.check_batch(raw)
    body = batch_body(raw, h)
    return h, body, scan_records(body, h)


def _summary(r: Record) -> tuple:
    return r.offset, r.timestamp, r.key, r.value, r.headers


# -- scan_records ------------------------------------------------------------------------------------------------


@SETTINGS
@given(batches())
def test_scan_records_agrees_with_decode_records(spec: Spec) -> None:
    h, body, spans = _scan(spec.raw)
    decoded = decode_records(spec.raw)
    assert [_summary(r) for r in decoded] == [_summary(r) for r in spec.records]
    assert len(spans) == len(decoded) == h.record_count
    for s, r in zip(spans, decoded, strict=True):
        assert h.base_offset + s[OFFSET_DELTA] == r.offset
        assert h.base_timestamp + s[TS_DELTA] == r.timestamp
        assert s[KEY] == r.key
        assert s[HAS_VALUE] == (r.value is not None)
        assert s[START] < s[TS_AT] - 1 < s[TS_AT] < s[AFTER_TS] < s[END]
    # the spans tile the body exactly
    assert [s[START] for s in spans[1:]] == [s[END] for s in spans[:-1]]
    assert spans[0][START] == 0 and spans[-1][END] == len(body)


def test_scan_records_of_an_empty_batch() -> None:
    raw = build_batch([], base_offset=10, base_timestamp=T0, last_offset_delta=3)
    h, body, spans = _scan(raw)
    assert spans == [] and body == b"" and h.record_count == 0


# -- rewrite_batch -----------------------------------------------------------------------------------------------


def _check_header_kept(out: bytes, old: rb.BatchHeader, kept: int) -> rb.BatchHeader:
    h = rb.check_batch(out)
    assert h.size == len(out)
    assert (h.base_offset, h.last_offset_delta, h.last_offset) == (old.base_offset, old.last_offset_delta,
                                                                   old.last_offset)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (
        old.producer_id, old.producer_epoch, old.base_sequence, old.last_sequence)
    assert h.is_transactional == old.is_transactional and h.is_control == old.is_control
    assert h.partition_leader_epoch == old.partition_leader_epoch
    # an emptied batch is the header alone, uncompressed (Kafka's writeEmptyHeader)
    assert h.compression == (old.compression if kept else Compression.NONE)
    assert h.is_log_append_time == old.is_log_append_time
    ignored = DELETE_HORIZON_BIT | (0 if kept else rb.COMPRESSION_MASK)
    assert h.attributes & ~ignored == old.attributes & ~ignored
    assert h.record_count == kept
    return h


@SETTINGS
@given(batches(), st.data(), st.one_of(st.none(), st.sampled_from([T0 + 86_400_000, T0 - 5, T0 + 2**40])))
def test_a_rewritten_batch_keeps_offsets_sequences_flags_codec_and_record_contents(
    spec: Spec, data: st.DataObject, horizon: int | None
) -> None:
    old, body, spans = _scan(spec.raw)
    mask = data.draw(st.lists(st.booleans(), min_size=len(spans), max_size=len(spans)))
    kept = [s for s, m in zip(spans, mask, strict=True) if m]
    out = rewrite_batch(spec.raw, old, body, spans, kept, delete_horizon=horizon)
    h = _check_header_kept(out, old, len(kept))
    assert has_delete_horizon(h) == (horizon is not None)
    expected = [r for r, m in zip(spec.records, mask, strict=True) if m]
    got = decode_records(out)
    assert [_summary(r) for r in got] == [_summary(r) for r in expected]
    if horizon is not None:
        assert h.base_timestamp == horizon
    else:
        assert h.base_timestamp == old.base_timestamp
    if kept:
        assert h.max_timestamp == max(r.timestamp for r in expected)
    # what a rewritten batch says is read back the same by the scanner (a second pass over it)
    h2, _, spans2 = _scan(out)
    assert [(h2.base_offset + s[OFFSET_DELTA], s[KEY], s[HAS_VALUE]) for s in spans2] == [
        (r.offset, r.key, r.value is not None) for r in expected]


@SETTINGS
@given(batches())
def test_everything_kept_without_a_horizon_is_the_same_bytes(spec: Spec) -> None:
    old, body, spans = _scan(spec.raw)
    assert rewrite_batch(spec.raw, old, body, spans, list(spans)) == spec.raw
    assert rewrite_batch(memoryview(spec.raw), old, body, spans, spans) == spec.raw


@SETTINGS
@given(batches(), st.booleans())
def test_nothing_kept_leaves_a_valid_empty_batch(spec: Spec, horizon: bool) -> None:
    old, body, spans = _scan(spec.raw)
    out = rewrite_batch(spec.raw, old, body, spans, [], delete_horizon=T0 + 1000 if horizon else None)
    h = _check_header_kept(out, old, 0)
    assert decode_records(out) == []
    assert scan_records(batch_body(out, h), h) == []
    assert h.max_timestamp == old.max_timestamp
    if spec.codec == Compression.NONE:
        assert len(out) == rb.HEADER_SIZE


@pytest.mark.parametrize("codec", CODECS[1:])
def test_an_emptied_compressed_batch_is_the_header_alone(codec: Compression) -> None:
    raw = build_batch([Record(3, T0, b"k", b"v")], base_offset=3, compression=codec, producer_id=4,
                      producer_epoch=0, base_sequence=0)
    old, body, spans = _scan(raw)
    out = rewrite_batch(raw, old, body, spans, [])
    assert len(out) == rb.HEADER_SIZE


@SETTINGS
@given(batches(), st.data(), st.sampled_from([T0 + 86_400_000, T0 + 1, T0 - 10**9]))
def test_a_delete_horizon_moves_the_base_timestamp_but_no_record_timestamp(
    spec: Spec, data: st.DataObject, horizon: int
) -> None:
    old, body, spans = _scan(spec.raw)
    mask = data.draw(st.lists(st.booleans(), min_size=len(spans), max_size=len(spans)))
    kept = [s for s, m in zip(spans, mask, strict=True) if m]
    out = rewrite_batch(spec.raw, old, body, spans, kept, delete_horizon=horizon)
    h = rb.check_batch(out)
    assert h.attributes & DELETE_HORIZON_BIT and has_delete_horizon(h)
    assert h.base_timestamp == horizon
    assert [r.timestamp for r in decode_records(out)] == [
        r.timestamp for r, m in zip(spec.records, mask, strict=True) if m]
    # a second horizon over the first (a marker whose horizon was re-stamped): still the same timestamps
    h1, body1, spans1 = _scan(out)
    again = rewrite_batch(out, h1, body1, spans1, spans1[: len(spans1) // 2], delete_horizon=horizon + 7)
    h2 = rb.check_batch(again)
    assert h2.base_timestamp == horizon + 7
    assert [r.timestamp for r in decode_records(again)] == [r.timestamp for r in decode_records(out)][
        : len(spans1) // 2]


@SETTINGS
@given(batches(), st.data(), st.one_of(st.none(), st.just(T0 + 99)))
def test_log_append_time_batches_keep_their_max_timestamp(
    spec: Spec, data: st.DataObject, horizon: int | None
) -> None:
    appended = bytearray(spec.raw)
    rb.set_log_append_time(appended, 0, len(appended), T0 + 5_000)
    raw = bytes(appended)
    old, body, spans = _scan(raw)
    mask = data.draw(st.lists(st.booleans(), min_size=len(spans), max_size=len(spans)))
    kept = [s for s, m in zip(spans, mask, strict=True) if m]
    out = rewrite_batch(raw, old, body, spans, kept, delete_horizon=horizon)
    h = _check_header_kept(out, old, len(kept))
    assert h.is_log_append_time and h.max_timestamp == T0 + 5_000
    assert all(r.timestamp == T0 + 5_000 for r in decode_records(out))


@pytest.mark.parametrize("commit", [True, False])
def test_a_marker_with_a_horizon_stays_a_valid_marker(commit: bool) -> None:
    raw = build_control_batch(ControlType.COMMIT if commit else ControlType.ABORT, producer_id=9, producer_epoch=2,
                              coordinator_epoch=4, timestamp=T0, base_offset=77)
    old, body, spans = _scan(raw)
    out = rewrite_batch(raw, old, body, spans, spans, delete_horizon=T0 + 10)
    h = _check_header_kept(out, old, 1)
    assert h.is_control and h.is_transactional and has_delete_horizon(h) and h.base_timestamp == T0 + 10
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decode_records(out)] == [
        (r.offset, r.timestamp, r.key, r.value) for r in decode_records(raw)]


# -- damage ------------------------------------------------------------------------------------------------------


@SETTINGS
@given(batches(), st.data())
def test_a_truncated_or_padded_body_is_corrupt(spec: Spec, data: st.DataObject) -> None:
    h, body, _ = _scan(spec.raw)
    cut = data.draw(st.integers(0, len(body) - 1))
    with pytest.raises(CorruptRecordError):
        scan_records(body[:cut], h)
    with pytest.raises(CorruptRecordError):
        scan_records(body + data.draw(st.binary(min_size=1, max_size=5)), h)
    with pytest.raises(CorruptRecordError):
        scan_records(body, h._replace(record_count=h.record_count + 1))
    with pytest.raises(CorruptRecordError):
        scan_records(body, h._replace(record_count=h.record_count - 1))


@SETTINGS
@given(batches(), st.data())
def test_a_damaged_body_is_corrupt_or_scanned_never_a_crash(spec: Spec, data: st.DataObject) -> None:
    h, body, _ = _scan(spec.raw)
    damaged = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    try:
        spans = scan_records(bytes(damaged), h)
    except CorruptRecordError:
        return
    assert len(spans) == h.record_count
    assert spans[-1][END] == len(damaged)


def test_a_record_declaring_no_bytes_is_corrupt() -> None:
    h = rb.parse_header(build_batch([Record(0, T0, b"k", b"v")], base_timestamp=T0))
    with pytest.raises(CorruptRecordError):
        scan_records(b"\x00", h)  # length 0
    with pytest.raises(CorruptRecordError):
        scan_records(b"\x01", h)  # length -1
    with pytest.raises(CorruptRecordError):
        scan_records(b"\xff" * 11, h)  # a varint that never ends
    with pytest.raises(CorruptRecordError):
        scan_records(b"", h)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_a_damaged_compressed_body_is_corrupt(codec: Compression) -> None:
    raw = bytearray(build_batch([Record(i, T0, b"k%d" % i, b"value" * 20) for i in range(20)], compression=codec,
                                base_timestamp=T0))
    h = rb.parse_header(raw)
    payload = compress(codec, b"this is not a record body at all, just some words" * 3)
    garbage = bytearray(raw[: rb.HEADER_SIZE] + payload)
    rb.HEADER.pack_into(garbage, 0, h.base_offset, len(garbage) - rb.LOG_OVERHEAD, *h[2:])
    rb.restamp_crc(garbage, 0, len(garbage))
    h2 = rb.check_batch(garbage)
    with pytest.raises(CorruptRecordError):
        scan_records(batch_body(garbage, h2), h2)
    # a payload that is not even a stream of its codec
    mangled = bytearray(raw)
    for i in range(rb.HEADER_SIZE, len(mangled)):
        mangled[i] ^= 0x5A
    with pytest.raises(CorruptRecordError):
        scan_records(batch_body(mangled, h), h)
