"""Bulk decoding of record sets into Arrow columns, checked against the record-by-record decoder."""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.batch import set_log_append_time
from odradek.protocol.errors import CorruptRecordError, UnsupportedMagicError
from odradek.protocol.records import (
    ControlType,
    RecordInput,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
)
from odradek.spark import columnar
from tests.storage.txn_reader import committed_records

TOPIC, PARTITION = "t", 3
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

blobs = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
records = st.builds(RecordInput, blobs, blobs, st.one_of(st.none(), st.integers(0, 2**41)),
                    headers.map(tuple))
batch_specs = st.lists(
    st.tuples(st.lists(records, min_size=1, max_size=12), st.sampled_from([0, 1, 2, 3, 4]),
              st.sampled_from(["data", "control", "append-time"])),
    min_size=1, max_size=6)


def build_set(specs: list[Any]) -> bytes:
    out = bytearray()
    offset = 100
    for recs, codec, kind in specs:
        if kind == "control":
            out += build_control_batch(ControlType.COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                       timestamp=1_700_000_000_000, base_offset=offset)
            offset += 1
            continue
        raw = bytearray(build_batch(recs, base_offset=offset, compression=codec, base_timestamp=1_600_000_000_000))
        if kind == "append-time":
            set_log_append_time(raw, 0, len(raw), 1_750_000_000_000)
        out += raw
        offset += len(recs)
    return bytes(out)


def expected_rows(data: bytes, lo: int, hi: int) -> list[dict[str, Any]]:
    """The reference: record by record through ``protocol.records``, in Spark's row shape."""
    rows = []
    for pos, header in iter_batches(data, allow_partial_tail=True):
        if header.is_control:
            continue
        for r in decode_records(data[pos:pos + header.size]):
            if lo <= r.offset < hi:
                rows.append({"key": r.key, "value": r.value, "topic": TOPIC, "partition": PARTITION,
                             "offset": r.offset, "timestamp": r.timestamp,
                             "timestampType": int(header.is_log_append_time),
                             "headers": [{"key": k, "value": v} for k, v in r.headers]})
    return rows


def decoded_rows(data: bytes, lo: int, hi: int) -> list[dict[str, Any]]:
    batch = columnar.parse(data, TOPIC, PARTITION).to_arrow(lo, hi, include_headers=True)
    if batch is None:
        return []
    assert batch.schema == columnar.arrow_schema(True)
    rows = batch.to_pylist()
    for row in rows:
        row["timestamp"] = (row["timestamp"] - EPOCH) // datetime.timedelta(milliseconds=1)
    return rows


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_specs, st.integers(95, 140), st.integers(0, 60), st.integers(0, 400))
def test_bulk_decoding_equals_record_by_record(specs: list[Any], lo: int, span: int, cut: int) -> None:
    data = build_set(specs)
    assert decoded_rows(data, lo, lo + span) == expected_rows(data, lo, lo + span)
    # a record set cut anywhere (a fetch stops at a byte limit) decodes its complete batches only
    cut_data = data[:max(0, len(data) - cut)]
    parsed = columnar.parse(cut_data, TOPIC, PARTITION)
    complete = list(iter_batches(cut_data, allow_partial_tail=True))
    assert parsed.complete_batches == len(complete)
    if complete:
        assert parsed.next_offset(-1) == complete[-1][1].next_offset
        assert parsed.first_offset == complete[0][1].base_offset
    assert decoded_rows(cut_data, 0, 1 << 40) == expected_rows(cut_data, 0, 1 << 40)


def test_kernels_as_plain_python_agree_with_compiled() -> None:
    """The same kernels run uncompiled when numba is missing; both must give the same rows."""
    data = build_set([([RecordInput(b"k", b"v", None, (("h", None),)), RecordInput(None, b"w")], 0, "data"),
                      ([RecordInput(b"x", None)], 3, "append-time")])
    compiled = decoded_rows(data, 0, 1 << 40)
    saved = {name: getattr(columnar, name) for name in ("_index_batches", "_be", "_be_small", "_varint", "_decode")}
    try:
        for name, fn in saved.items():
            setattr(columnar, name, getattr(fn, "py_func", fn))
        assert decoded_rows(data, 0, 1 << 40) == compiled == expected_rows(data, 0, 1 << 40)
    finally:
        for name, fn in saved.items():
            setattr(columnar, name, fn)


def test_values_are_packed_without_gaps_and_nulls_are_nulls() -> None:
    data = build_batch([RecordInput(None, b"a" * 100), RecordInput(b"k", None), RecordInput(None, b"")], base_offset=5)
    batch = columnar.parse(data, TOPIC, PARTITION).to_arrow(0, 100, include_headers=False)
    assert batch is not None and batch.num_rows == 3
    assert batch.column("value").to_pylist() == [b"a" * 100, None, b""]
    assert batch.column("key").to_pylist() == [None, b"k", None]
    assert batch.column("offset").to_pylist() == [5, 6, 7]
    assert "headers" not in batch.schema.names


# (kind, producer id, record count, codec): a transactional batch, a plain batch, or a COMMIT/ABORT marker
txn_events = st.lists(st.tuples(st.sampled_from(["txn", "txn", "plain", "commit", "abort"]), st.integers(1, 3),
                                st.integers(1, 4), st.sampled_from([0, 1, 4])), min_size=1, max_size=25)


def build_txn_set(events: list[tuple[str, int, int, int]]
                  ) -> tuple[bytes, list[tuple[int, int]], list[tuple[int, bytes]]]:
    """A record set as a log holds it, the aborted-transaction list a broker would send with it, and
    the (offset, value) of every record not in an aborted transaction (still open ones count: the
    broker, not the reader, holds them back at the last stable offset)."""
    out = bytearray()
    offset, sequences = 0, {1: 0, 2: 0, 3: 0}
    open_at: dict[int, int] = {}
    pending: dict[int, list[tuple[int, bytes]]] = {}
    aborted: list[tuple[int, int]] = []
    visible: list[tuple[int, bytes]] = []
    for kind, pid, n, codec in events:
        if kind in ("commit", "abort"):
            if pid not in open_at:
                continue
            out += build_control_batch(ControlType.COMMIT if kind == "commit" else ControlType.ABORT,
                                       producer_id=pid, producer_epoch=0, coordinator_epoch=0, timestamp=1,
                                       base_offset=offset)
            first, records = open_at.pop(pid), pending.pop(pid)
            if kind == "abort":
                aborted.append((pid, first))
            else:
                visible += records
            offset += 1
            continue
        values = [(offset + i, f"{kind}-{pid}-{offset + i}".encode()) for i in range(n)]
        recs = [RecordInput(b"k", v, 1) for _, v in values]
        if kind == "txn":
            out += build_batch(recs, base_offset=offset, compression=codec, producer_id=pid, producer_epoch=0,
                               base_sequence=sequences[pid], is_transactional=True)
            sequences[pid] += n
            open_at.setdefault(pid, offset)
            pending.setdefault(pid, []).extend(values)
        else:
            out += build_batch(recs, base_offset=offset, compression=codec)
            visible += values
        offset += n
    for records in pending.values():
        visible += records
    return bytes(out), aborted, sorted(visible)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(txn_events, st.integers(0, 20), st.integers(0, 80))
def test_read_committed_leaves_out_aborted_transactions_as_kafkas_consumers_do(
        events: list[tuple[str, int, int, int]], lo: int, span: int) -> None:
    data, aborted, visible = build_txn_set(events)
    hi = lo + span
    batch = columnar.parse(data, TOPIC, PARTITION).to_arrow(lo, hi, include_headers=False, aborted=aborted)
    got = [] if batch is None else list(zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(),
                                            strict=True))
    assert got == [(o, v) for o, v in visible if lo <= o < hi]
    assert got == [(r.offset, r.value) for r in committed_records(data, aborted, lo) if r.offset < hi]


def test_a_set_of_control_batches_only_has_no_rows_but_moves_on() -> None:
    data = build_control_batch(ControlType.ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                               timestamp=1, base_offset=41)
    parsed = columnar.parse(data, TOPIC, PARTITION)
    assert parsed.to_arrow(0, 100, include_headers=False) is None
    assert parsed.next_offset(0) == 42


def test_empty_and_partial_sets() -> None:
    assert columnar.parse(None, TOPIC, PARTITION).complete_batches == 0
    assert columnar.parse(b"", TOPIC, PARTITION).next_offset(17) == 17
    data = build_batch([RecordInput(None, b"v")], base_offset=3)
    assert columnar.parse(data[:-1], TOPIC, PARTITION).complete_batches == 0


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_damage_is_a_corrupt_record_error(data: st.DataObject) -> None:
    """Any changed byte fails the CRC; with the CRC check off, damage inside records is still caught
    by bounds checks or gives rows, never a crash or a read outside the set."""
    recs = [RecordInput(b"key%d" % i, b"value%d" % i, None, (("h", b"x"),)) for i in range(5)]
    first = build_batch(recs, base_offset=0)
    raw = bytearray(first + build_batch(recs, base_offset=5))
    batch_at = data.draw(st.sampled_from([0, len(first)]))
    at = batch_at + data.draw(st.integers(21, len(first) - 1))  # the bytes a batch's CRC covers
    raw[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError):
        columnar.parse(bytes(raw), TOPIC, PARTITION).to_arrow(0, 100, include_headers=True)
    try:
        batch = columnar.parse(bytes(raw), TOPIC, PARTITION, check_crcs=False).to_arrow(0, 100, include_headers=True)
    except (CorruptRecordError, UnsupportedMagicError):
        return
    if batch is not None:
        assert batch.num_rows <= 10
        batch.validate(full=False)


def test_corrupt_record_error_names_the_partition_and_offset() -> None:
    raw = bytearray(build_batch([RecordInput(None, b"v" * 10)] * 3, base_offset=70))
    raw[61] = 0x7E  # first record's length: 63, past the end of the batch
    with pytest.raises(CorruptRecordError, match=r"t-3: corrupt record at offset 70: a length points past"):
        columnar.parse(bytes(raw), TOPIC, PARTITION, check_crcs=False).to_arrow(0, 100, include_headers=False)


def test_old_message_formats_are_refused_by_name() -> None:
    raw = bytearray(build_batch([RecordInput(None, b"v")], base_offset=0))
    struct.pack_into(">b", raw, 16, 1)  # magic 1
    with pytest.raises(UnsupportedMagicError, match="magic 1"):
        columnar.parse(bytes(raw), TOPIC, PARTITION)
