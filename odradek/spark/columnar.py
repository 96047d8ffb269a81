"""Record sets (the ``records`` of a Fetch response) decoded in bulk into Arrow columns.

A Spark task's cost is per record, so records are never Python objects here: two compiled kernels
(numba) walk the bytes, one over batch headers and one over the records of every batch, and write
straight into the buffers Arrow then wraps without copying (offsets, timestamps, and key and value
bytes packed end to end with int32 offsets, which is Arrow's binary layout).

What a record set may hold, and what is done with it:

- v2 batches (magic 2), each ``batch.py``'s 61-byte header then its records; compressed batches are
  inflated with ``protocol.compression`` (one Python call per compressed batch) and their records
  decoded from the inflated bytes.
- Control batches (transaction markers) are skipped; they are not data.
- read_committed: given the Fetch response's aborted transactions, the batches of a producer from the
  first offset of one of its aborted transactions up to that producer's ABORT marker are dropped, as
  Kafka's consumers do (a per-batch decision, made in Python only when the list is not empty).
- A batch cut short at the end (a fetch stops at a byte limit, not a batch boundary) ends the set:
  ``next_offset`` says where to fetch next.
- Records outside ``[lo, hi)`` are dropped: a fetch returns whole batches, so the first can start
  before the offset asked for.

Invariants:
- Every read of the kernels is bounds-checked against the end of its batch: a corrupt record is a
  ``CorruptRecordError`` naming the partition and offset, never a wild read or a wrong row.
- The output equals decoding each record with ``protocol.records`` (property-tested).
- Without numba the same kernels run as plain Python (correct, ~100x slower).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from odradek.protocol import compression
from odradek.protocol.batch import ATTRIBUTES_AT, HEADER_SIZE, LOG_OVERHEAD
from odradek.protocol.errors import CorruptRecordError, UnsupportedMagicError
from odradek.protocol.records import ControlType, decode_records, parse_control_key

F = TypeVar("F", bound=Callable[..., Any])

try:
    from numba import njit as _njit

    def compiled(fn: F) -> F:
        return _njit(cache=True, nogil=True)(fn)  # type: ignore[no-any-return]

    COMPILED = True
except ImportError:  # pragma: no cover - the spark extra installs numba

    def compiled(fn: F) -> F:
        return fn

    COMPILED = False

# batch index columns (one row per batch, int64)
_B_POS, _B_END, _B_BASE, _B_ATTR, _B_COUNT, _B_BASE_TS, _B_MAX_TS, _B_MAGIC, _B_LAST, _B_CRC, _B_PID = range(11)
_B_COLS = 11
_CONTROL = 0x20
_TRANSACTIONAL = 0x10
_LOG_APPEND_TIME = 0x08
_CODEC = 0x07

# error codes returned by the record kernel (negative row counts)
_BAD_VARINT, _BAD_LENGTH, _BAD_RECORD_END = -1, -2, -3
_ERRORS = {_BAD_VARINT: "a varint runs past its record or over 10 bytes",
           _BAD_LENGTH: "a length points past the end of its batch",
           _BAD_RECORD_END: "a record's fields do not end where its length says"}


@compiled
def _index_batches(buf: Any, out: Any) -> int:
    """Fill ``out`` (rows of _B_COLS) with the complete batches of ``buf``; return how many."""
    n = buf.shape[0]
    pos = 0
    count = 0
    while pos + HEADER_SIZE <= n and count < out.shape[0]:
        length = _be(buf, pos + 8, 4)
        end = pos + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or end > n:
            break
        row = out[count]
        row[_B_POS] = pos
        row[_B_END] = end
        row[_B_BASE] = _be(buf, pos, 8)
        row[_B_MAGIC] = buf[pos + 16]
        row[_B_ATTR] = _be(buf, pos + 21, 2)
        row[_B_COUNT] = _be(buf, pos + 57, 4)
        row[_B_BASE_TS] = _be(buf, pos + 27, 8)
        row[_B_MAX_TS] = _be(buf, pos + 35, 8)
        row[_B_LAST] = _be(buf, pos + 23, 4)
        row[_B_CRC] = _be(buf, pos + 17, 4) & 0xFFFFFFFF
        row[_B_PID] = _be(buf, pos + 43, 8)
        count += 1
        pos = end
    return count


@compiled
def _be(buf: Any, pos: int, width: int) -> int:
    """Signed big-endian integer of ``width`` (2, 4 or 8) bytes; no intermediate exceeds int64."""
    if width == 8:
        return _be_small(buf, pos, 4) * 4294967296 + (_be_small(buf, pos + 4, 4) & 0xFFFFFFFF)
    return _be_small(buf, pos, width)


@compiled
def _be_small(buf: Any, pos: int, width: int) -> int:
    v = 0
    for i in range(width):
        v = (v << 8) | int(buf[pos + i])
    if v >= 1 << (8 * width - 1):
        v -= 1 << (8 * width)
    return v


@compiled
def _varint(buf: Any, pos: int, end: int, max_shift: int) -> tuple[int, int]:
    """Zigzag varint at ``pos`` -> (value, next pos); next pos -1 if past ``end`` or longer than an
    int32 (``max_shift`` 28) or int64 (63) allows, so no later arithmetic can overflow."""
    u = 0
    shift = 0
    while True:
        if pos >= end or shift > max_shift:
            return 0, -1
        b = int(buf[pos])
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return (u >> 1) ^ -(u & 1), pos


@compiled
def _decode(buf: Any, regions: Any, lo: int, hi: int, headers: bool,
            offsets: Any, stamps: Any, kinds: Any, key_off: Any, key_ok: Any, key_data: Any,
            val_off: Any, val_ok: Any, val_data: Any,
            hdr_off: Any, hk_off: Any, hk_data: Any, hv_off: Any, hv_ok: Any, hv_data: Any,
            fault: Any) -> int:
    """Decode the records of every region into the output columns; return the row count.

    A region row is (records start, end, record count, base offset, base timestamp, timestamp
    override or -1, timestamp type). On corrupt input returns a negative _ERRORS code and sets
    ``fault[0]`` to the offending record's offset.
    """
    rows = 0
    kp = 0
    vp = 0
    hn = 0
    hkp = 0
    hvp = 0
    key_off[0] = 0
    val_off[0] = 0
    hdr_off[0] = 0
    hk_off[0] = 0
    hv_off[0] = 0
    for r in range(regions.shape[0]):
        pos = regions[r, 0]
        end = regions[r, 1]
        base = regions[r, 3]
        base_ts = regions[r, 4]
        override = regions[r, 5]
        kind = regions[r, 6]
        for _ in range(regions[r, 2]):
            fault[0] = base
            length, pos = _varint(buf, pos, end, 28)
            if pos < 0:
                return _BAD_VARINT
            rec_end = pos + length
            if length < 0 or rec_end > end:
                return _BAD_LENGTH
            pos += 1  # attributes
            ts_delta, pos = _varint(buf, pos, rec_end, 63)
            if pos < 0:
                return _BAD_VARINT
            off_delta, pos = _varint(buf, pos, rec_end, 28)
            if pos < 0:
                return _BAD_VARINT
            offset = base + off_delta
            fault[0] = offset
            keep = lo <= offset < hi
            klen, pos = _varint(buf, pos, rec_end, 28)
            if pos < 0:
                return _BAD_VARINT
            if klen < -1 or pos + klen > rec_end:
                return _BAD_LENGTH
            if keep:
                if klen >= 0:
                    key_data[kp:kp + klen] = buf[pos:pos + klen]
                    kp += klen
                key_ok[rows] = klen >= 0
                key_off[rows + 1] = kp
            if klen > 0:
                pos += klen
            vlen, pos = _varint(buf, pos, rec_end, 28)
            if pos < 0:
                return _BAD_VARINT
            if vlen < -1 or pos + vlen > rec_end:
                return _BAD_LENGTH
            if keep:
                if vlen >= 0:
                    val_data[vp:vp + vlen] = buf[pos:pos + vlen]
                    vp += vlen
                val_ok[rows] = vlen >= 0
                val_off[rows + 1] = vp
            if vlen > 0:
                pos += vlen
            hcount, pos = _varint(buf, pos, rec_end, 28)
            if pos < 0:
                return _BAD_VARINT
            if hcount < 0:
                return _BAD_LENGTH
            for _h in range(hcount):
                hklen, pos = _varint(buf, pos, rec_end, 28)
                if pos < 0:
                    return _BAD_VARINT
                if hklen < 0 or pos + hklen > rec_end:
                    return _BAD_LENGTH
                if keep and headers:
                    hk_data[hkp:hkp + hklen] = buf[pos:pos + hklen]
                    hkp += hklen
                    hk_off[hn + 1] = hkp
                pos += hklen
                hvlen, pos = _varint(buf, pos, rec_end, 28)
                if pos < 0:
                    return _BAD_VARINT
                if hvlen < -1 or pos + hvlen > rec_end:
                    return _BAD_LENGTH
                if keep and headers:
                    if hvlen >= 0:
                        hv_data[hvp:hvp + hvlen] = buf[pos:pos + hvlen]
                        hvp += hvlen
                    hv_ok[hn] = hvlen >= 0
                    hv_off[hn + 1] = hvp
                    hn += 1
                if hvlen > 0:
                    pos += hvlen
            if pos != rec_end:
                return _BAD_RECORD_END
            if keep:
                offsets[rows] = offset
                stamps[rows] = (base_ts + ts_delta if override < 0 else override) * 1000
                kinds[rows] = kind
                if headers:
                    hdr_off[rows + 1] = hn
                rows += 1
    return rows


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Spark's Kafka source schema, as Arrow types."""
    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(HEADER_TYPE)))
    return pa.schema(fields)


HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


@dataclass(frozen=True, slots=True)
class RecordSet:
    """The complete batches of one record set, indexed (cheap); ``to_arrow`` decodes their records."""

    topic: str
    partition: int
    buf: np.ndarray
    index: np.ndarray  # one row per complete batch, columns _B_*

    @property
    def complete_batches(self) -> int:
        return len(self.index)

    @property
    def first_offset(self) -> int:
        """The base offset of the first complete batch (the set must have one)."""
        return int(self.index[0, _B_BASE])

    def next_offset(self, default: int) -> int:
        """The offset after the last complete batch (where the next fetch starts), or ``default``."""
        if not len(self.index):
            return default
        last = self.index[-1]
        return int(last[_B_BASE]) + int(last[_B_LAST]) + 1

    def to_arrow(self, lo: int, hi: int, include_headers: bool,
                 aborted: Sequence[tuple[int, int]] | None = None) -> pa.RecordBatch | None:
        """The rows with ``lo <= offset < hi`` in Spark's Kafka schema; None if there are none.

        ``aborted``: the ``(producer_id, first_offset)`` list of a read_committed Fetch response; their
        records are left out."""
        keep = (self.index[:, _B_ATTR] & _CONTROL) == 0
        if aborted:
            keep &= ~self.aborted_batches(aborted)
        data = self.index[keep]
        buf, regions = _regions(self.buf, data, self.topic, self.partition)
        return _columns(buf, regions, self.topic, self.partition, lo, hi, include_headers)

    def aborted_batches(self, aborted: Sequence[tuple[int, int]]) -> np.ndarray:
        """Which batches hold records of aborted transactions (Kafka's consumer rule: a producer's
        transactional batches are dropped from the first offset of its aborted transaction until its
        ABORT marker)."""
        out = np.zeros(len(self.index), dtype=np.bool_)
        queue = sorted((first, pid) for pid, first in aborted)
        at = 0
        producers: set[int] = set()
        for i, row in enumerate(self.index):
            pid = int(row[_B_PID])
            if pid < 0:
                continue
            last = int(row[_B_BASE]) + int(row[_B_LAST])
            while at < len(queue) and queue[at][0] <= last:
                producers.add(queue[at][1])
                at += 1
            attributes = int(row[_B_ATTR])
            if attributes & _CONTROL:
                if pid in producers and self._is_abort_marker(row):
                    producers.discard(pid)
            elif attributes & _TRANSACTIONAL and pid in producers:
                out[i] = True
        return out

    def _is_abort_marker(self, row: np.ndarray) -> bool:
        records = decode_records(self.buf[int(row[_B_POS]):int(row[_B_END])].tobytes())
        return bool(records) and parse_control_key(records[0].key).type == ControlType.ABORT


def parse(records: bytes | bytearray | memoryview | None, topic: str, partition: int, *,
          check_crcs: bool = True) -> RecordSet:
    """Index the complete batches of a record set (one Fetch response partition's ``records``).

    With ``check_crcs`` (Kafka's consumer default) every batch's CRC-32C is verified first: a batch
    damaged on disk or on the way is a ``CorruptRecordError``, never rows.
    """
    buf = np.frombuffer(records or b"", dtype=np.uint8)
    index = np.empty((buf.shape[0] // HEADER_SIZE + 1, _B_COLS), dtype=np.int64)
    index = index[:_index_batches(buf, index)]
    bad = index[index[:, _B_MAGIC] != 2]
    if len(bad):
        raise UnsupportedMagicError(f"{topic}-{partition}: batch at offset {int(bad[0, _B_BASE])} has magic "
                                    f"{int(bad[0, _B_MAGIC])}; this reader handles record batches v2 (Kafka >= 0.11)")
    if check_crcs:
        for row in index:
            pos, end = int(row[_B_POS]), int(row[_B_END])
            if crc32c(buf[pos + ATTRIBUTES_AT:end]) != int(row[_B_CRC]):
                raise CorruptRecordError(f"{topic}-{partition}: the batch at offset {int(row[_B_BASE])} fails its "
                                         "CRC-32C check (damaged on disk or on the way)")
    return RecordSet(topic, partition, buf, index)


def _regions(buf: np.ndarray, batches: np.ndarray, topic: str, partition: int) -> tuple[np.ndarray, np.ndarray]:
    """The record regions of the data batches, inflating compressed ones into an appended buffer."""
    regions = np.empty((len(batches), 7), dtype=np.int64)
    regions[:, 0] = batches[:, _B_POS] + HEADER_SIZE
    regions[:, 1] = batches[:, _B_END]
    regions[:, 2] = batches[:, _B_COUNT]
    regions[:, 3] = batches[:, _B_BASE]
    regions[:, 4] = batches[:, _B_BASE_TS]
    append_time = (batches[:, _B_ATTR] & _LOG_APPEND_TIME) != 0
    regions[:, 5] = np.where(append_time, batches[:, _B_MAX_TS], -1)
    regions[:, 6] = append_time
    if (regions[:, 2] < 0).any():
        raise CorruptRecordError(f"{topic}-{partition}: a batch has a negative record count")
    compressed = np.flatnonzero(batches[:, _B_ATTR] & _CODEC)
    if len(compressed) == 0:
        return buf, regions
    parts = [buf]
    size = buf.shape[0]
    for i in compressed:
        start, end = int(regions[i, 0]), int(regions[i, 1])
        try:
            raw = compression.decompress(int(batches[i, _B_ATTR] & _CODEC), buf[start:end].tobytes())
        except Exception as exc:
            raise CorruptRecordError(f"{topic}-{partition}: the batch at offset {int(batches[i, _B_BASE])} does not "
                                     f"decompress ({exc})") from exc
        parts.append(np.frombuffer(raw, dtype=np.uint8))
        regions[i, 0], regions[i, 1] = size, size + len(raw)
        size += len(raw)
    return np.concatenate(parts), regions


def _columns(buf: np.ndarray, regions: np.ndarray, topic: str, partition: int, lo: int, hi: int,
             include_headers: bool) -> pa.RecordBatch | None:
    cap = int(regions[:, 2].sum())
    if cap == 0:
        return None
    size = buf.shape[0]
    offsets = np.empty(cap, np.int64)
    stamps = np.empty(cap, np.int64)
    kinds = np.empty(cap, np.int32)
    key_off, val_off = np.empty(cap + 1, np.int32), np.empty(cap + 1, np.int32)
    key_ok, val_ok = np.empty(cap, np.bool_), np.empty(cap, np.bool_)
    key_data, val_data = np.empty(size, np.uint8), np.empty(size, np.uint8)
    hcap = size // 2 + 1 if include_headers else 0
    hdr_off = np.empty(cap + 1 if include_headers else 1, np.int32)
    hk_off, hv_off = np.empty(hcap + 1, np.int32), np.empty(hcap + 1, np.int32)
    hv_ok = np.empty(hcap, np.bool_)
    hk_data, hv_data = np.empty(size if include_headers else 0, np.uint8), np.empty(size if include_headers else 0,
                                                                                      np.uint8)
    fault = np.zeros(1, np.int64)
    rows = _decode(buf, regions, lo, hi, include_headers, offsets, stamps, kinds, key_off, key_ok, key_data,
                   val_off, val_ok, val_data, hdr_off, hk_off, hk_data, hv_off, hv_ok, hv_data, fault)
    if rows < 0:
        raise CorruptRecordError(f"{topic}-{partition}: corrupt record at offset {int(fault[0])}: {_ERRORS[rows]}")
    if rows == 0:
        return None
    columns = [
        _binary(rows, key_off, key_ok, key_data), _binary(rows, val_off, val_ok, val_data),
        pa.repeat(topic, rows).cast(pa.string()), pa.repeat(partition, rows).cast(pa.int32()),
        pa.array(offsets[:rows]), pa.array(stamps[:rows]).cast(pa.timestamp("us", tz="UTC")),
        pa.array(kinds[:rows]),
    ]
    if include_headers:
        n_headers = int(hdr_off[rows])
        keys = pa.Array.from_buffers(pa.string(), n_headers, [None, pa.py_buffer(hk_off[:n_headers + 1]),
                                                              pa.py_buffer(hk_data[:int(hk_off[n_headers])])])
        values = _binary(n_headers, hv_off, hv_ok, hv_data)
        structs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
        columns.append(pa.ListArray.from_arrays(pa.array(hdr_off[:rows + 1]), structs))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _binary(n: int, off: np.ndarray, ok: np.ndarray, data: np.ndarray) -> pa.Array:
    if n == 0:
        return pa.array([], pa.binary())
    valid = ok[:n]
    nulls = n - int(np.count_nonzero(valid))
    if nulls == n:
        return pa.nulls(n, pa.binary())
    bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(off[:n + 1]), pa.py_buffer(data[:int(off[n])])],
                                 null_count=nulls)
