"""Batches encoded by a real client library go through the log untouched, and that client reads them back.

The encoder is kafka-python's ``DefaultRecordBatchBuilder`` (record format v2, what its producer
sends), in every codec, with keys, values, headers, out-of-order timestamps, and idempotent or
transactional producer fields. Each batch is appended to a ``Log``, read back with ``Log.read`` /
``FileRegion.read_bytes``, and checked three ways:

- the bytes are exactly the client's except baseOffset (0..8) and partitionLeaderEpoch (12..16);
  for a LogAppendTime topic, also attributes' timestamp-type bit, maxTimestamp and the CRC;
- kafka-python's own reader (``MemoryRecords`` / ``DefaultRecordBatch``) accepts the CRC and decodes
  the same keys, values, headers and timestamps at the offsets the log assigned;
- ``odradek.protocol.records.decode_records`` agrees with it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from odradek.clock import ManualClock
from odradek.protocol import batch as rb
from odradek.protocol.compression import Compression
from odradek.protocol.records import decode_records, iter_batches
from odradek.storage.config import LOG_APPEND_TIME, LogConfig
from odradek.storage.log import Log

T0 = 1_700_000_000_000
NOW = T0 + 60_000
LEADER_EPOCH = 5
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
CREATE_TIME, LOG_APPEND_TIME_TYPE = 0, 1  # kafka-python's timestamp_type values


@dataclass(frozen=True)
class Sent:
    """One record as the client sent it (offset delta in its batch)."""

    delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def sample_records(tag: str, n: int = 12) -> list[Sent]:
    out = []
    for i in range(n):
        key = None if i % 5 == 3 else f"{tag}-key-{i}".encode()
        value = None if i % 7 == 6 else (f"{tag} value {i} " * (3 + i % 4)).encode()  # compressible
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 0:
            headers = (("trace-id", f"{tag}{i}".encode()), ("ünïcode", None), ("empty", b""))
        timestamp = T0 + 10 * i - (25 if i % 4 == 2 else 0)  # some go backwards within the batch
        out.append(Sent(i, timestamp, key, value, headers))
    return out


def client_batch(
    codec: int,
    records: list[Sent],
    *,
    producer: tuple[int, int, int] | None = None,
    transactional: bool = False,
) -> bytes:
    """Encode ``records`` with kafka-python's v2 batch builder (as its producer does)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=0,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )
    if producer is not None:
        builder.set_producer_state(*producer, is_transactional=transactional)
    for r in records:
        meta = builder.append(r.delta, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
        assert meta is not None
    data = bytes(builder.build())
    assert data[rb.ATTRIBUTES_AT + 1] & rb.COMPRESSION_MASK == codec, "the client really compressed it"
    return data


def open_log(tmp_path: Path, **config: object) -> Log:
    cfg = LogConfig(segment_bytes=64 * 1024, **config)  # type: ignore[arg-type]
    return Log.open(tmp_path / "clients-0", cfg, clock=ManualClock(NOW))


def read_all(lg: Log, offset: int) -> bytes:
    region = lg.read(offset, 1 << 20)
    assert region is not None
    assert region.first_offset == offset
    return region.read_bytes()


def assert_same_except(sent: bytes, stored: bytes, ranges: list[tuple[int, int]]) -> None:
    """``stored`` equals ``sent`` outside the byte ``ranges``."""
    assert len(stored) == len(sent)
    a, b = bytearray(sent), bytearray(stored)
    for start, end in ranges:
        a[start:end] = b[start:end]
    assert a == b


def assert_client_reads(
    batch_bytes: bytes, records: list[Sent], base_offset: int, *, timestamp_type: int, append_time: int | None = None
) -> DefaultRecordBatch:
    """kafka-python's reader checks the CRC and decodes ``records`` at ``base_offset``."""
    batches = list(MemoryRecords(batch_bytes))
    assert len(batches) == 1
    got = batches[0]
    assert isinstance(got, DefaultRecordBatch)
    assert got.validate_crc()
    assert got.base_offset == base_offset
    assert got.leader_epoch == LEADER_EPOCH
    assert got.timestamp_type == timestamp_type
    decoded = list(got)
    assert len(decoded) == len(records)
    for rec, sent in zip(decoded, records, strict=True):
        assert rec.offset == base_offset + sent.delta
        assert rec.key == sent.key
        assert rec.value == sent.value
        assert [tuple(h) for h in rec.headers] == list(sent.headers)
        assert rec.timestamp == (sent.timestamp if append_time is None else append_time)
        assert rec.timestamp_type == timestamp_type
    return got


def assert_odradek_reads(
    batch_bytes: bytes, records: list[Sent], base_offset: int, append_time: int | None = None
) -> None:
    decoded = decode_records(batch_bytes)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (
            base_offset + s.delta,
            s.timestamp if append_time is None else append_time,
            s.key,
            s.value,
            s.headers,
        )
        for s in records
    ]


OFFSET_AND_EPOCH = [(0, 8), (12, 16)]


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_client_batch_round_trips_byte_identical(tmp_path: Path, codec: Compression) -> None:
    lg = open_log(tmp_path)
    try:
        # Something before it, so the batch gets a non-zero base offset.
        lg.append(client_batch(Compression.NONE, sample_records("first", 3)), leader_epoch=LEADER_EPOCH)
        records = sample_records(codec.name)
        sent = client_batch(codec, records)
        info = lg.append(sent, leader_epoch=LEADER_EPOCH)
        assert (info.first_offset, info.last_offset, info.record_count) == (3, 3 + len(records) - 1, len(records))
        assert info.log_append_time == -1
        stored = read_all(lg, info.first_offset)
        assert_same_except(sent, stored, OFFSET_AND_EPOCH)
        assert stored[:8] == struct.pack(">q", info.first_offset)
        assert stored[12:16] == struct.pack(">i", LEADER_EPOCH)
        got = assert_client_reads(stored, records, info.first_offset, timestamp_type=CREATE_TIME)
        assert got.compression_type == codec
        assert got.max_timestamp == max(r.timestamp for r in records)
        assert_odradek_reads(stored, records, info.first_offset)
        # Reading from an offset inside the batch returns the whole batch (the client skips ahead).
        region = lg.read(info.last_offset, 1)
        assert region is not None and region.read_bytes() == stored
    finally:
        lg.close()


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_producer_fields_survive(tmp_path: Path, codec: Compression) -> None:
    """Idempotent and transactional batches keep producer id, epoch and sequence."""
    lg = open_log(tmp_path)
    try:
        for transactional, producer in ((False, (4242, 3, 17)), (True, (4343, 1, 0))):
            records = sample_records(f"p{producer[0]}", 6)
            sent = client_batch(codec, records, producer=producer, transactional=transactional)
            info = lg.append(sent, leader_epoch=LEADER_EPOCH)
            stored = read_all(lg, info.first_offset)
            assert_same_except(sent, stored, OFFSET_AND_EPOCH)
            got = assert_client_reads(stored, records, info.first_offset, timestamp_type=CREATE_TIME)
            assert (got.producer_id, got.producer_epoch, got.base_sequence) == producer
            assert got.is_transactional is transactional
            assert_odradek_reads(stored, records, info.first_offset)
    finally:
        lg.close()


def test_multi_batch_record_set_in_every_codec(tmp_path: Path) -> None:
    """One produce request carrying a batch per codec: offsets follow on, each batch reads back whole."""
    lg = open_log(tmp_path)
    try:
        parts = [(codec, sample_records(f"m{codec.name}", 4 + codec)) for codec in CODECS]
        sent = [client_batch(codec, records) for codec, records in parts]
        info = lg.append(b"".join(sent), leader_epoch=LEADER_EPOCH)
        assert info.record_count == sum(len(r) for _, r in parts)
        stored = read_all(lg, 0)
        assert len(stored) == sum(len(s) for s in sent)
        offset = 0
        positions = [pos for pos, _ in iter_batches(stored)]
        assert len(positions) == len(sent)
        for pos, original, (codec, records) in zip(positions, sent, parts, strict=True):
            one = stored[pos : pos + len(original)]
            assert_same_except(original, one, OFFSET_AND_EPOCH)
            got = assert_client_reads(one, records, offset, timestamp_type=CREATE_TIME)
            assert got.compression_type == codec
            assert_odradek_reads(one, records, offset)
            offset += len(records)
        assert offset == lg.next_offset
        # kafka-python walks the whole region as a fetch response, batch by batch.
        walked = [(b.base_offset, [r.offset for r in b]) for b in MemoryRecords(stored)]
        assert [o for _, offsets in walked for o in offsets] == list(range(lg.next_offset))
        # and copes with a region cut inside the last batch (as a fetch limited by max_bytes may end)
        truncated = MemoryRecords(stored[: positions[-1] + 30])
        assert [b.base_offset for b in truncated] == [b for b, _ in walked[:-1]]
    finally:
        lg.close()


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_log_append_time_topic(tmp_path: Path, codec: Compression) -> None:
    """The log stamps LogAppendTime: kafka-python validates the re-stamped CRC and reports the
    append time for every record; nothing but the header fields the broker owns has changed."""
    lg = open_log(tmp_path, message_timestamp_type=LOG_APPEND_TIME)
    try:
        records = sample_records(f"lat{codec.name}")
        sent = client_batch(codec, records)
        info = lg.append(sent, leader_epoch=LEADER_EPOCH)
        assert info.log_append_time == NOW
        assert info.max_timestamp == NOW
        stored = read_all(lg, info.first_offset)
        assert_same_except(
            sent, stored,
            [*OFFSET_AND_EPOCH, (rb.CRC_AT, rb.CRC_AT + 4), (rb.ATTRIBUTES_AT, rb.ATTRIBUTES_AT + 2),
             (rb.MAX_TIMESTAMP_AT, rb.MAX_TIMESTAMP_AT + 8)],
        )
        attributes = struct.unpack_from(">h", stored, rb.ATTRIBUTES_AT)[0]
        assert attributes == struct.unpack_from(">h", sent, rb.ATTRIBUTES_AT)[0] | rb.TIMESTAMP_TYPE_BIT
        assert struct.unpack_from(">q", stored, rb.MAX_TIMESTAMP_AT)[0] == NOW
        got = assert_client_reads(
            stored, records, info.first_offset, timestamp_type=LOG_APPEND_TIME_TYPE, append_time=NOW
        )
        assert got.compression_type == codec
        assert got.first_timestamp == records[0].timestamp  # baseTimestamp is left as the client set it
        assert_odradek_reads(stored, records, info.first_offset, append_time=NOW)
        rb.check_batch(stored)  # and our own validator agrees the CRC is right
    finally:
        lg.close()


def test_client_batches_survive_a_restart(tmp_path: Path) -> None:
    """Bytes read back after a clean reopen and after crash recovery are still the client's."""
    lg = open_log(tmp_path, segment_index_bytes=1024, index_interval_bytes=100)
    sent: list[tuple[int, bytes, list[Sent]]] = []
    for codec in CODECS * 2:
        records = sample_records(f"r{codec.name}{len(sent)}", 5)
        data = client_batch(codec, records)
        sent.append((lg.append(data, leader_epoch=LEADER_EPOCH).first_offset, data, records))
    end = lg.next_offset
    lg.close()
    for clean in (True, False):
        cfg = LogConfig(segment_bytes=64 * 1024, segment_index_bytes=1024, index_interval_bytes=100)
        lg = Log.open(tmp_path / "clients-0", cfg, clock=ManualClock(NOW), clean_shutdown=clean)
        try:
            assert lg.next_offset == end
            for offset, data, records in sent:
                region = lg.read(offset + 2, 1)  # from inside the batch
                assert region is not None
                stored = region.read_bytes()
                assert_same_except(data, stored, OFFSET_AND_EPOCH)
                assert_client_reads(stored, records, offset, timestamp_type=CREATE_TIME)
        finally:
            lg.close()
