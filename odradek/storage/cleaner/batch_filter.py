"""Reading the records of one stored v2 batch in place, and rewriting the batch with only those the cleaner keeps.

The only place (with the tools) where stored batches are read record by record: the produce and fetch paths never
are. Records are not decoded into objects: ``scan_records`` finds each record's bounds, offset and timestamp
deltas, key and whether it has a value, and a rewritten batch is the kept records' own bytes joined (their deltas
are relative to the batch's base offset and base timestamp, which a rewrite keeps).

Invariants of ``rewrite_batch``:
- Offsets never change: kept records keep their absolute offsets; a rewritten batch keeps the original's base
  offset *and* last offset delta (so the producer's last sequence survives compaction, as Kafka's does), its
  producer id, epoch and base sequence, its transactional and control flags, its partition leader epoch, its
  codec (a compressed batch is recompressed with its own codec; an emptied one is the header alone, uncompressed)
  and its timestamp type.
- Record timestamps never change. With a delete horizon (Kafka's KIP-534: the batch holds tombstones or is a
  transaction marker, and was cleaned once), the base timestamp field holds the horizon, the header's
  ``DELETE_HORIZON_BIT`` says so, and every kept record's timestamp delta is re-encoded against it.
- A batch whose every record is kept and whose horizon does not change is returned as the same bytes.
- The result is a valid batch: ``check_batch`` passes on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.protocol import batch as rb
from odradek.protocol.compression import compress, decompress
from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import encode_varint, encode_varlong

DELETE_HORIZON_BIT = 0x40  # attributes bit 6 (KIP-534): baseTimestamp holds the delete horizon


RecordSpan = tuple[int, int, int, int, int, int, "bytes | None", bool]
"""Where one record lies in a batch's (decompressed) body and what the cleaner needs of it, as a plain tuple (the
scanner builds one per record: a NamedTuple costs a Python call each): its length prefix's position, its
timestamp delta's position (after the attributes byte), the byte after the timestamp delta, one past its last
byte, its offset delta, its timestamp delta, its key, whether it has a value."""
START, TS_AT, AFTER_TS, END, OFFSET_DELTA, TS_DELTA, KEY, HAS_VALUE = range(8)


def has_delete_horizon(header: rb.BatchHeader) -> bool:
    return bool(header.attributes & DELETE_HORIZON_BIT)


def batch_body(raw: bytes | bytearray | memoryview, header: rb.BatchHeader) -> bytes:
    """The records of the batch ``raw`` (decompressed)."""
    body = memoryview(raw)[rb.HEADER_SIZE : header.size]
    return decompress(header.compression, body) if header.compression else bytes(body)


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint/varlong at ``pos`` (at most 10 bytes) and the position after it."""
    result = 0
    shift = 0
    while pos < end:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            break
    raise CorruptRecordError("a record holds a malformed varint")


def scan_records(body: bytes, header: rb.BatchHeader) -> list[RecordSpan]:
    """Every record of the batch whose body is ``body``; ``CorruptRecordError`` if they do not fill it exactly.

    The hot loop of the cleaner: varints of one and two bytes (record lengths up to 8 KiB, keys up to 8 KiB) are
    decoded inline, longer ones by ``_varint``."""
    end = len(body)
    pos = 0
    out: list[RecordSpan] = []
    append = out.append
    try:
        for _ in range(header.record_count):
            start = pos
            b = body[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                c = body[pos + 1]
                if c < 0x80:
                    u = (b & 0x7F) | (c << 7)
                    length = (u >> 1) ^ -(u & 1)
                    pos += 2
                else:
                    length, pos = _varint(body, pos, end)
            record_end = pos + length
            if length <= 0 or record_end > end:
                raise CorruptRecordError(f"a record of batch at offset {header.base_offset} declares {length} "
                                         f"bytes but {end - pos} remain")
            ts_at = pos + 1  # after the attributes byte
            b = body[ts_at]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos = ts_at + 1
            else:
                ts_delta, pos = _varint(body, ts_at, record_end)
            after_ts = pos
            b = body[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = _varint(body, pos, record_end)
            b = body[pos]
            if b < 0x80:
                key_len = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                key_len, pos = _varint(body, pos, record_end)
            if key_len >= 0:
                key: bytes | None = body[pos : pos + key_len]
                pos += key_len
            else:
                key = None
            if pos >= record_end:
                raise CorruptRecordError(f"a record of batch at offset {header.base_offset} ends inside its key")
            append((start, ts_at, after_ts, record_end, offset_delta, ts_delta, key, body[pos] != 1))
            pos = record_end
    except IndexError:
        raise CorruptRecordError(f"batch at offset {header.base_offset} ends inside a record") from None
    if pos != end or len(out) != header.record_count:
        raise CorruptRecordError(f"batch at offset {header.base_offset} declares {header.record_count} records "
                                 f"but {end - pos} bytes remain after {len(out)}")
    return out


def rewrite_batch(raw: bytes | bytearray | memoryview, header: rb.BatchHeader, body: bytes,
                  records: Sequence[RecordSpan], kept: Sequence[RecordSpan], *,
                  delete_horizon: int | None = None) -> bytes:
    """The batch ``raw`` holding only ``kept`` (a subsequence of ``records``), with ``delete_horizon`` stamped
    when given. ``kept`` may be empty: the header alone then survives (record count 0), as Kafka keeps a live
    producer's last batch."""
    if len(kept) == len(records) and delete_horizon is None:
        return bytes(raw)
    base_ts = header.base_timestamp
    attributes = header.attributes
    if delete_horizon is None:
        new_body = b"".join(body[r[START] : r[END]] for r in kept)
    else:
        attributes |= DELETE_HORIZON_BIT
        shift = base_ts - delete_horizon
        parts = []
        for r in kept:
            rest = body[r[AFTER_TS] : r[END]]
            record = body[r[TS_AT] - 1 : r[TS_AT]] + encode_varlong(r[TS_DELTA] + shift) + rest
            parts.append(encode_varint(len(record)))
            parts.append(record)
        new_body = b"".join(parts)
        base_ts = delete_horizon
    if header.is_log_append_time or not kept:
        max_ts = header.max_timestamp
    else:
        max_ts = header.base_timestamp + max(r[TS_DELTA] for r in kept)
    if not kept:  # the header alone, uncompressed (Kafka's writeEmptyHeader)
        attributes &= ~rb.COMPRESSION_MASK
        payload = b""
    else:
        payload = compress(header.compression, new_body) if header.compression else new_body
    out = bytearray(rb.HEADER_SIZE + len(payload))
    rb.HEADER.pack_into(
        out, 0, header.base_offset, len(out) - rb.LOG_OVERHEAD, header.partition_leader_epoch, rb.CURRENT_MAGIC, 0,
        attributes, header.last_offset_delta, base_ts, max_ts, header.producer_id, header.producer_epoch,
        header.base_sequence, len(kept),
    )
    out[rb.HEADER_SIZE :] = payload
    rb.restamp_crc(out, 0, len(out))
    return bytes(out)
