"""The cleaner's hot loops, compiled (numba): both passes over a segment's bytes, many batches per call.

A call walks the batches of one segment (a numpy view of its mmap) from ``pos`` while the batch start is below
``limit``, and stops early, returning a *status* and the position of the batch it stopped at, for anything it
leaves to the reference Python code (``clean.py``), which handles that one batch and calls again after it:

- ``STRUCTURE``: the bytes at ``pos`` are not a whole, well-formed v2 batch header (length, magic, size, negative
  lastOffsetDelta or record count): the reference reader raises or decides.
- ``FALLBACK``: a batch whose rules are not compiled: compressed, transactional or control (rewrite pass;
  control batches are skipped by the map pass itself), a producer's last batch, one whose kept records need a new
  delete horizon (KIP-534 stamping), or records the compiled scanner does not accept (malformed, or varints
  longer than 9 bytes): the reference scanner raises for the malformed.
- ``NEED_SCRATCH`` (more records than the scratch rows), ``LISTS_FULL`` (the span list, the output batch list
  or the output buffer is full): the caller grows or flushes and calls again at ``pos``.
- ``MAP_DONE`` / ``MAP_FULL`` (map pass): the pass's mapped part ends at the returned offset.

Invariants:
- A batch is either wholly done by the kernel (its counters, map puts and output committed together) or not
  touched at all (the status says which batch): the caller never sees half a batch.
- The kernel accepts a batch only if the reference would parse it the same way (same varint rules, records
  filling the batch exactly): everything else is the reference's, so both paths write the same bytes.
- Every batch it consumes is listed in ``spans`` (position, size, stored CRC) for the caller to check with the
  ``crc32c`` library before using the results: the kernel checks structure, not checksums. A batch with a bad
  CRC makes the pass fail, as in the reference (whatever the kernel did meanwhile is thrown away).
- Reads stay within ``buf[:size]``, writes within ``out`` and the given arrays (numba does not bounds-check:
  every length is checked against the batch, every batch against ``size``). The map pass's prefetches of the
  table's rows (``table_prefetch``) are hints that name only rows of the table and change nothing.
- A rewritten batch keeps the original header but for batchLength, maxTimestamp, recordCount and the CRC, which
  is left zero (``out_batches`` flags it for the caller to compute); a batch kept whole is copied as it is.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from odradek.storage.cleaner.key_table import (  # (table_put_hashed is inlined here)
    KeyTable,
    table_get,
    table_hash,
    table_prefetch,
    table_put_hashed,
)

WINDOW_END, FALLBACK, STRUCTURE, NEED_SCRATCH, LISTS_FULL, MAP_DONE, MAP_FULL = range(7)

# counters
MAP_BYTES_READ, MAP_RECORDS, BYTES_READ, RECORDS_READ, RECORDS_KEPT, TOMBSTONES_REMOVED, KEYLESS_REMOVED = range(7)
N_COUNTERS = 7

# span columns: one row per batch a call consumed (position in ``buf``, size, stored CRC); the map pass adds, for a
# batch it wholly mapped that the rewrite would drop if none of its records is the latest of its key (a data batch
# whose records are all at or past ``first_dirty``, not a producer's last batch), its records' lowest and highest
# offsets, its record count and keyless records; SPAN_LOW is -1 for every other batch
SPAN_POS, SPAN_SIZE, SPAN_CRC, SPAN_LOW, SPAN_HIGH, SPAN_COUNT, SPAN_KEYLESS = range(7)
SPAN_COLUMNS = 7

# scratch columns: one row per record of the batch at hand (positions absolute in ``buf``)
START, END, OFFSET_DELTA, KEY_AT, KEY_LEN, HAS_VALUE, TS_DELTA, KEEP, HASH = range(9)
SCRATCH_COLUMNS = 9

_HEADER = 61
_OVERHEAD = 12
_MIN_LENGTH = 49
_COMPRESSION = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_DELETE_HORIZON = 0x40


@njit(cache=True, nogil=True, inline="always")
def _be(buf: np.ndarray, at: int, n: int) -> int:
    """The big-endian signed integer of ``n`` bytes at ``at``."""
    v = np.int64(0)
    for i in range(n):
        v = (v << 8) | np.int64(buf[at + i])
    if n < 8 and v >= np.int64(1) << (8 * n - 1):
        v -= np.int64(1) << (8 * n)
    return v


@njit(cache=True, nogil=True, inline="always")
def _put_be(buf: np.ndarray, at: int, n: int, v: int) -> None:
    for i in range(n - 1, -1, -1):
        buf[at + i] = v & 0xFF
        v >>= 8


@njit(cache=True, nogil=True, inline="always")
def _varint(buf: np.ndarray, p: int, end: int) -> tuple[int, int]:
    """A zigzag varint of at most 9 bytes at ``p``, all before ``end``: (value, position after), or (0, -1)."""
    u = np.int64(0)
    shift = 0
    while shift < 63:
        if p >= end:
            return 0, -1
        b = np.int64(buf[p])
        p += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            return (u >> 1) ^ -(u & 1), p
        shift += 7
    return 0, -1


@njit(cache=True, nogil=True)
def parse_records(buf: np.ndarray, at: int, end: int, count: int, scr: np.ndarray) -> bool:
    """Fill ``scr[:count]`` with the records of the body ``buf[at:end]``; False if they are not ``count``
    well-formed records filling it exactly (the reference scanner's rules)."""
    p = at
    for i in range(count):
        start = p
        length, p = _varint(buf, p, end)
        if p < 0 or length <= 0 or p + length > end:
            return False
        rend = p + length
        ts_delta, p = _varint(buf, p + 1, rend)  # after the attributes byte
        if p < 0:
            return False
        offset_delta, p = _varint(buf, p, rend)
        if p < 0:
            return False
        key_len, p = _varint(buf, p, rend)
        if p < 0:
            return False
        key_at = p
        if key_len >= 0:
            if key_len >= rend - p:
                return False
            p += key_len
        elif p >= rend:
            return False
        scr[i, START] = start
        scr[i, END] = rend
        scr[i, OFFSET_DELTA] = offset_delta
        scr[i, KEY_AT] = key_at
        scr[i, KEY_LEN] = key_len
        scr[i, HAS_VALUE] = 1 if buf[p] != 1 else 0
        scr[i, TS_DELTA] = ts_delta
        p = rend
    return p == end


@njit(cache=True, nogil=True, inline="always")
def _batch_size(buf: np.ndarray, pos: int, size: int) -> int:
    """Bytes of the well-formed batch header at ``pos`` (the batch within ``size``), or -1."""
    if pos + _HEADER > size:
        return -1
    length = _be(buf, pos + 8, 4)
    if length < _MIN_LENGTH or buf[pos + 16] != 2 or pos + _OVERHEAD + length > size:
        return -1
    if _be(buf, pos + 23, 4) < 0 or _be(buf, pos + 57, 4) < 0:  # lastOffsetDelta, recordCount
        return -1
    return length + _OVERHEAD


@njit(cache=True, nogil=True, inline="always")
def _fits(count: int, whole: int) -> bool:
    """Whether ``count`` records of at least 6 bytes each fit the batch's body (else the batch is malformed,
    and the scratch is not grown for it)."""
    return count * 6 <= whole - _HEADER


@njit(cache=True, nogil=True, inline="always")
def _list_span(spans: np.ndarray, n: int, buf: np.ndarray, pos: int, whole: int) -> None:
    spans[n, SPAN_POS] = pos
    spans[n, SPAN_SIZE] = whole
    spans[n, SPAN_CRC] = _be(buf, pos + 17, 4) & 0xFFFFFFFF
    spans[n, SPAN_LOW] = -1


@njit(cache=True, nogil=True, inline="always")
def _producers_last(buf: np.ndarray, pos: int, last: int, last_offsets: np.ndarray) -> bool:
    """Whether the batch at ``pos`` (its last offset ``last``) is a producer's last data batch."""
    if _be(buf, pos + 43, 8) < 0:  # no producer id
        return False
    i = np.searchsorted(last_offsets, last)
    return i < last_offsets.shape[0] and last_offsets[i] == last


@njit(cache=True, nogil=True)
def map_batches(buf: np.ndarray, pos: int, size: int, limit: int, first_dirty: int, first_uncleanable: int,
                last_offsets: np.ndarray, t: KeyTable, scr: np.ndarray, spans: np.ndarray,
                counters: np.ndarray) -> tuple[int, int, int, int]:
    """Map pass over ``buf[pos:size]``: (status, position, spans listed, offset for MAP_DONE / MAP_FULL).
    ``last_offsets`` as ``rewrite_batches``'s."""
    n = 0
    while pos < limit:
        if n == spans.shape[0]:
            return LISTS_FULL, pos, n, 0
        whole = _batch_size(buf, pos, size)
        if whole < 0:
            return STRUCTURE, pos, n, 0
        attributes = _be(buf, pos + 21, 2)
        base = _be(buf, pos, 8)
        last = base + _be(buf, pos + 23, 4)
        count = _be(buf, pos + 57, 4)
        mapped = (attributes & _CONTROL) == 0 and last >= first_dirty and base < first_uncleanable
        if mapped:
            if attributes & (_TRANSACTIONAL | _COMPRESSION):
                return FALLBACK, pos, n, 0
            if not _fits(count, whole):
                return FALLBACK, pos, n, 0
            if count > scr.shape[0]:
                return NEED_SCRATCH, pos, n, count
            if not parse_records(buf, pos + _HEADER, pos + whole, count, scr):
                return FALLBACK, pos, n, 0
        _list_span(spans, n, buf, pos, whole)
        n += 1
        counters[MAP_BYTES_READ] += whole
        pos += whole
        if base >= first_uncleanable and (attributes & _CONTROL) == 0 and last >= first_dirty:
            return MAP_DONE, pos, n, first_uncleanable
        if not mapped:
            continue
        for i in range(count):
            if scr[i, KEY_LEN] >= 0:
                scr[i, HASH] = table_hash(buf, scr[i, KEY_AT], scr[i, KEY_LEN])
        table_prefetch(t, scr[:, HASH], scr[:, KEY_LEN], count)  # the batch's keys' misses overlap
        low = last
        high = base
        keyless = 0
        for i in range(count):
            offset = base + scr[i, OFFSET_DELTA]
            low = min(low, offset)
            high = max(high, offset)
            key_len = scr[i, KEY_LEN]
            if offset < first_dirty or key_len < 0:
                if key_len < 0:
                    keyless += 1
                continue
            if offset >= first_uncleanable:
                return MAP_DONE, pos, n, first_uncleanable
            if not table_put_hashed(t, buf, scr[i, KEY_AT], key_len, offset, scr[i, HASH]):
                return MAP_FULL, pos, n, offset
            counters[MAP_RECORDS] += 1
        if count > 0 and low >= first_dirty and not _producers_last(buf, pos - whole, last, last_offsets):
            spans[n - 1, SPAN_LOW] = low
            spans[n - 1, SPAN_HIGH] = high
            spans[n - 1, SPAN_COUNT] = count
            spans[n - 1, SPAN_KEYLESS] = keyless
    return WINDOW_END, pos, n, 0


@njit(cache=True, nogil=True)
def rewrite_batches(buf: np.ndarray, pos: int, size: int, limit: int, first_dirty: int, mapped_to: int,
                    latest: np.ndarray, now_ms: int, last_offsets: np.ndarray, t: KeyTable, scr: np.ndarray,
                    spans: np.ndarray, out: np.ndarray, out_pos: int, out_batches: np.ndarray,
                    counters: np.ndarray) -> tuple[int, int, int, int, int]:
    """Rewrite pass over ``buf[pos:size]`` into ``out[out_pos:]``: (status, position, spans listed, output batches
    listed, output position). ``out_batches`` rows: (position in ``out``, size, 1 if rebuilt: its CRC is to
    compute). ``last_offsets``: sorted last offsets of the producers' last batches (those go to the reference).

    A keyed record is superseded when its offset is below its key's in the map. In the mapped part
    ``[first_dirty, mapped_to]`` every keyed record of a batch the kernel takes was put in the map (in offset
    order, until the map's last offset), so there the test needs no key at all: the record stays iff its offset
    is one of the map's (``latest``, sorted), found by walking ``latest`` along with the records. Records below
    ``first_dirty`` are looked up by key."""
    n = 0
    m = 0
    while pos < limit:
        whole = _batch_size(buf, pos, size)
        if whole < 0:
            return STRUCTURE, pos, n, m, out_pos
        if n == spans.shape[0] or m == out_batches.shape[0] or out_pos + whole > out.shape[0]:
            return LISTS_FULL, pos, n, m, out_pos
        attributes = _be(buf, pos + 21, 2)
        if attributes & (_CONTROL | _TRANSACTIONAL | _COMPRESSION):
            return FALLBACK, pos, n, m, out_pos
        base = _be(buf, pos, 8)
        last = base + _be(buf, pos + 23, 4)
        if _producers_last(buf, pos, last, last_offsets):
            return FALLBACK, pos, n, m, out_pos
        count = _be(buf, pos + 57, 4)
        if not _fits(count, whole):
            return FALLBACK, pos, n, m, out_pos
        if count > scr.shape[0]:
            return NEED_SCRATCH, pos, n, m, out_pos
        if not parse_records(buf, pos + _HEADER, pos + whole, count, scr):
            return FALLBACK, pos, n, m, out_pos
        base_ts = _be(buf, pos + 27, 8)
        expired = (attributes & _DELETE_HORIZON) != 0 and now_ms >= base_ts
        kept = 0
        keyless = 0
        tombstones = 0
        kept_tombstone = False
        max_delta = np.int64(0)
        j = -1  # where the last record's offset is in ``latest``
        previous = np.int64(-1)
        for i in range(count):
            keep = 1
            offset = base + scr[i, OFFSET_DELTA]
            if offset <= mapped_to:  # past what was mapped: kept as it is
                key_len = scr[i, KEY_LEN]
                if key_len < 0:
                    keyless += 1
                    keep = 0
                elif offset >= first_dirty:
                    if j < 0 or offset < previous:
                        j = np.searchsorted(latest, offset)
                    while j < latest.shape[0] and latest[j] < offset:
                        j += 1
                    previous = offset
                    if j == latest.shape[0] or latest[j] != offset:
                        keep = 0
                elif offset < table_get(t, buf, scr[i, KEY_AT], key_len):
                    keep = 0
                if keep and expired and scr[i, HAS_VALUE] == 0:
                    tombstones += 1
                    keep = 0
            scr[i, KEEP] = keep
            if keep:
                if kept == 0 or scr[i, TS_DELTA] > max_delta:
                    max_delta = scr[i, TS_DELTA]
                kept += 1
                if scr[i, HAS_VALUE] == 0:
                    kept_tombstone = True
        if kept_tombstone and (attributes & _DELETE_HORIZON) == 0:
            return FALLBACK, pos, n, m, out_pos  # the batch gets a delete horizon: the reference stamps it
        _list_span(spans, n, buf, pos, whole)
        n += 1
        counters[BYTES_READ] += whole
        counters[RECORDS_READ] += count
        counters[RECORDS_KEPT] += kept
        counters[KEYLESS_REMOVED] += keyless
        counters[TOMBSTONES_REMOVED] += tombstones
        if kept == 0:  # nothing kept (an emptied batch included): the batch goes
            pass
        elif kept == count:
            out[out_pos : out_pos + whole] = buf[pos : pos + whole]
            out_batches[m, 0] = out_pos
            out_batches[m, 1] = whole
            out_batches[m, 2] = 0
            m += 1
            out_pos += whole
        else:
            q = out_pos + _HEADER
            out[out_pos:q] = buf[pos : pos + _HEADER]
            for i in range(count):
                if scr[i, KEEP]:
                    s = scr[i, START]
                    e = scr[i, END]
                    out[q : q + e - s] = buf[s:e]
                    q += e - s
            _put_be(out, out_pos + 8, 4, q - out_pos - _OVERHEAD)
            _put_be(out, out_pos + 17, 4, 0)
            if (attributes & _LOG_APPEND_TIME) == 0:
                _put_be(out, out_pos + 35, 8, base_ts + max_delta)
            _put_be(out, out_pos + 57, 4, kept)
            out_batches[m, 0] = out_pos
            out_batches[m, 1] = q - out_pos
            out_batches[m, 2] = 1
            m += 1
            out_pos = q
        pos += whole
    return WINDOW_END, pos, n, m, out_pos
