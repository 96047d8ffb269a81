"""Rewriting stored batches with the records compaction keeps: offsets, sequences, codecs, flags survive."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import batch as rb
from odradek.protocol.compression import Compression
from odradek.protocol.records import RecordInput, build_batch, decode_records
from odradek.storage.cleaner.batch_filter import filter_batch, latest_per_key
from odradek.storage.cleaner.offset_map import OffsetMap

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def _batch(base: int, keys: list[bytes | None], values: list[bytes | None], **kw: object) -> bytes:
    pairs = enumerate(zip(keys, values, strict=True))
    return build_batch([RecordInput(k, v, 1_700_000_000_000 + i) for i, (k, v) in pairs],
                       base_offset=base, **kw)  # type: ignore[arg-type]


def test_a_batch_kept_whole_is_the_same_bytes() -> None:
    raw = _batch(10, [b"a", b"b"], [b"1", b"2"])
    assert filter_batch(raw, lambda r: True) == (raw, 2)


def test_a_rewritten_batch_keeps_offsets_sequence_flags_and_codec() -> None:
    raw = _batch(100, [b"a", b"b", b"a", b"c"], [b"1", b"2", b"3", b"4"], compression=Compression.ZSTD,
                 producer_id=7, producer_epoch=2, base_sequence=40, is_transactional=True,
                 partition_leader_epoch=5)
    out, kept = filter_batch(raw, lambda r: r.offset in (101, 102))
    assert out is not None and kept == 2
    h, old = rb.check_batch(out), rb.check_batch(raw)
    assert (h.base_offset, h.last_offset_delta, h.last_offset) == (100, 3, 103)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (7, 2, 40, old.last_sequence)
    assert h.is_transactional and h.partition_leader_epoch == 5 and h.compression == Compression.ZSTD
    assert [(r.offset, r.key, r.value) for r in decode_records(out)] == [(101, b"b", b"2"), (102, b"a", b"3")]


def test_log_append_time_survives() -> None:
    raw = bytearray(_batch(0, [b"a", b"b"], [b"1", b"2"]))
    rb.set_log_append_time(raw, 0, len(raw), 1_800_000_000_000)
    out, _ = filter_batch(bytes(raw), lambda r: r.offset == 1)
    assert out is not None
    h = rb.check_batch(out)
    assert h.is_log_append_time and h.max_timestamp == 1_800_000_000_000
    assert [r.timestamp for r in decode_records(out)] == [1_800_000_000_000]


def test_nothing_kept_drops_the_batch_or_keeps_its_header_only() -> None:
    raw = _batch(50, [b"a", b"b"], [b"1", b"2"], producer_id=3, producer_epoch=0, base_sequence=8)
    assert filter_batch(raw, lambda r: False) == (None, 0)
    out, kept = filter_batch(raw, lambda r: False, keep_empty=True)
    assert out is not None and kept == 0
    h = rb.check_batch(out)
    assert (h.base_offset, h.last_offset, h.record_count, h.last_sequence) == (50, 51, 0, 9)
    assert decode_records(out) == []


def test_tombstones_go_only_past_their_horizon() -> None:
    m = OffsetMap(1 << 12)
    raw = _batch(0, [b"a", b"a", b"b"], [b"1", None, b"2"])
    for r in decode_records(raw):
        assert r.key is not None
        m.put(r.key, r.offset)
    kept, _ = filter_batch(raw, latest_per_key(m, retain_tombstones=True))
    assert kept is not None and [(r.offset, r.value) for r in decode_records(kept)] == [(1, None), (2, b"2")]
    gone, _ = filter_batch(raw, latest_per_key(m, retain_tombstones=False))
    assert gone is not None and [(r.offset, r.value) for r in decode_records(gone)] == [(2, b"2")]


keys = st.sampled_from([b"k0", b"k1", b"k2", b"k3", b"k4", None])
values = st.one_of(st.none(), st.binary(max_size=12))
batches = st.lists(st.lists(st.tuples(keys, values), min_size=1, max_size=8), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(batches, st.sampled_from(CODECS), st.booleans(), st.integers(0, 10))
def test_compaction_keeps_exactly_the_latest_record_per_key_at_its_offset(
    spec: list[list[tuple[bytes | None, bytes | None]]], codec: Compression, tombstones: bool, unmapped: int
) -> None:
    """Against a model: the kept records are, per key, the latest one (tombstones while retained), plus keyless
    records and every record beyond the mapped range, each at its original offset; every batch keeps its
    offsets range."""
    raws, base = [], 0
    for records in spec:
        raws.append(_batch(base, [k for k, _ in records], [v for _, v in records], compression=codec))
        base += len(records)
    everything = [r for raw in raws for r in decode_records(raw)]
    mapped_end = max(0, len(everything) - unmapped)  # the last records were not mapped (a later pass)
    m = OffsetMap(1 << 12)
    for r in everything[:mapped_end]:
        if r.key is not None:
            assert m.put(r.key, r.offset)
    latest = {r.key: r.offset for r in everything[:mapped_end] if r.key is not None}
    expected = [r for r in everything if r.key is None or r.offset >= mapped_end
                or (latest[r.key] == r.offset and (r.value is not None or tombstones))]
    got = []
    for raw in raws:
        out, kept = filter_batch(raw, latest_per_key(m, retain_tombstones=tombstones))
        if out is None:
            assert kept == 0
            continue
        h, old = rb.check_batch(out), rb.check_batch(raw)
        assert (h.base_offset, h.last_offset) == (old.base_offset, old.last_offset)
        assert h.compression == codec
        got += decode_records(out)
    assert [(r.offset, r.key, r.value) for r in got] == [(r.offset, r.key, r.value) for r in expected]
