"""The compiled cleaner's offset map: an open-addressing hash table of exact keys in preallocated arrays.

Kafka's ``SkimpyOffsetMap`` holds 16-byte MD5 digests and offsets in one preallocated buffer and trusts the digest
(a collision would drop a record that should stay; Kafka argues its odds away). This table stores the keys
themselves, so no collision can ever lose a record: a lookup matches a 64-bit hash *and* the key's bytes.

Layout (numpy arrays, allocated once per buffer size and reused by every pass of a worker):

- ``slot_hash`` (uint64) and ``slot_entry`` (int32, entry number + 1, 0 = empty): the probe sequence, linear
  probing from ``hash & (slots - 1)``; ``slots`` is the power of two >= 1.5 x the most entries the budget allows,
  so probes stay short (load <= 2/3).
- ``entry_offset``, ``entry_key_at``, ``entry_key_len``: one row per key, in insertion order.
- ``arena``: the keys' bytes, appended.
- ``meta``: count, charged bytes, latest offset, arena bytes used, capacity, most entries.

Invariants (the same as ``offset_map.OffsetMap``'s, so the compiled and the reference cleaner stop a pass at the
same record and write the same files):

- Every new key is charged ``len(key) + ENTRY_OVERHEAD``; charged bytes never exceed ``capacity = memory_bytes *
  load_factor``; a ``put`` of a new key that does not fit returns False and changes nothing.
- ``put`` of a key already present replaces its offset only with a larger one; ``latest_offset`` is the largest
  offset put (-1 when empty).
- Memory: what a pass touches is at most the charged bytes (an entry really costs 20 bytes of row + its key's
  bytes, below the 128 + key charged) plus the slot arrays (12 bytes x slots, about 0.14 x capacity); arrays come
  from ``np.zeros`` (untouched pages cost nothing), so a small log touches little of them.

Hash: FNV-1a over the key's bytes, then a multiply-xorshift finaliser so that the low bits (the slot) depend on
every byte. It is not keyed: keys crafted to collide slow probing down but never change what is kept.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from odradek.storage.cleaner.offset_map import ENTRY_OVERHEAD

COUNT, CHARGED, LATEST, ARENA_USED, CAPACITY, MAX_ENTRIES = range(6)

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_MIX1 = np.uint64(0xFF51AFD7ED558CCD)
_MIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


class KeyTable(NamedTuple):
    slot_hash: np.ndarray  # uint64[slots]
    slot_entry: np.ndarray  # int32[slots]: entry number + 1, 0 = empty
    entry_offset: np.ndarray  # int64[max_entries]
    entry_key_at: np.ndarray  # int64[max_entries]: where the key's bytes start in the arena
    entry_key_len: np.ndarray  # int32[max_entries]
    arena: np.ndarray  # uint8[capacity]
    meta: np.ndarray  # int64[6]: COUNT, CHARGED, LATEST, ARENA_USED, CAPACITY, MAX_ENTRIES


def new_table(memory_bytes: int, load_factor: float) -> KeyTable:
    """An empty table charged against ``memory_bytes * load_factor`` (checked as ``OffsetMap`` checks them)."""
    if memory_bytes < ENTRY_OVERHEAD:
        raise ValueError(f"the offset map needs at least {ENTRY_OVERHEAD} bytes "
                         f"(log.cleaner.dedupe.buffer.size), got {memory_bytes}")
    if not 0.0 < load_factor <= 1.0:
        raise ValueError(f"log.cleaner.io.buffer.load.factor must be in (0, 1], got {load_factor}")
    capacity = max(ENTRY_OVERHEAD, int(memory_bytes * load_factor))
    max_entries = capacity // ENTRY_OVERHEAD
    slots = 1
    while slots < max_entries * 3 // 2 + 1:
        slots *= 2
    meta = np.zeros(6, dtype=np.int64)
    meta[LATEST] = -1
    meta[CAPACITY] = capacity
    meta[MAX_ENTRIES] = max_entries
    return KeyTable(np.zeros(slots, np.uint64), np.zeros(slots, np.int32), np.zeros(max_entries, np.int64),
                    np.zeros(max_entries, np.int64), np.zeros(max_entries, np.int32),
                    np.zeros(capacity, np.uint8), meta)


def clear_table(t: KeyTable) -> None:
    """Empty the table (only the slots in use are touched)."""
    _clear(t)


@njit(cache=True, nogil=True)
def _clear(t: KeyTable) -> None:
    mask = np.uint64(t.slot_hash.shape[0] - 1)
    for e in range(t.meta[COUNT]):
        i = _hash(t.arena, t.entry_key_at[e], t.entry_key_len[e]) & mask
        while t.slot_entry[i] != 0:  # the entry's slot is on its probe path: clear the path's run of it
            t.slot_entry[i] = 0
            i = (i + np.uint64(1)) & mask
    t.meta[COUNT] = 0
    t.meta[CHARGED] = 0
    t.meta[LATEST] = -1
    t.meta[ARENA_USED] = 0


@njit(cache=True, nogil=True, inline="always")
def _hash(buf: np.ndarray, at: int, n: int) -> np.uint64:
    h = _FNV_OFFSET
    for i in range(at, at + n):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    h ^= h >> _S33
    h *= _MIX1
    h ^= h >> _S33
    h *= _MIX2
    h ^= h >> _S33
    return h


@njit(cache=True, nogil=True, inline="always")
def _find(t: KeyTable, buf: np.ndarray, at: int, n: int, h: np.uint64) -> tuple[np.uint64, int]:
    """(slot, entry) of the key ``buf[at:at+n]``: its entry number, or -1 with the empty slot that ends its
    probe path."""
    mask = np.uint64(t.slot_hash.shape[0] - 1)
    i = h & mask
    while True:
        e = t.slot_entry[i] - 1
        if e < 0:
            return i, -1
        if t.slot_hash[i] == h and t.entry_key_len[e] == n:
            k = t.entry_key_at[e]
            same = True
            for j in range(n):
                if t.arena[k + j] != buf[at + j]:
                    same = False
                    break
            if same:
                return i, e
        i = (i + np.uint64(1)) & mask


@njit(cache=True, nogil=True)
def table_put(t: KeyTable, buf: np.ndarray, at: int, n: int, offset: int) -> bool:
    """Map the key ``buf[at:at+n]`` to ``offset``; False (nothing changed) if it is new and does not fit."""
    meta = t.meta
    h = _hash(buf, at, n)
    slot, e = _find(t, buf, at, n, h)
    if e < 0:
        cost = n + ENTRY_OVERHEAD
        if meta[CHARGED] + cost > meta[CAPACITY] or meta[COUNT] >= meta[MAX_ENTRIES]:
            return False
        e = meta[COUNT]
        k = meta[ARENA_USED]
        t.arena[k : k + n] = buf[at : at + n]
        t.entry_key_at[e] = k
        t.entry_key_len[e] = n
        t.entry_offset[e] = offset
        t.slot_hash[slot] = h
        t.slot_entry[slot] = e + 1
        meta[COUNT] = e + 1
        meta[CHARGED] += cost
        meta[ARENA_USED] = k + n
    elif t.entry_offset[e] >= offset:
        return True
    else:
        t.entry_offset[e] = offset
    if offset > meta[LATEST]:
        meta[LATEST] = offset
    return True


@njit(cache=True, nogil=True)
def table_get(t: KeyTable, buf: np.ndarray, at: int, n: int) -> int:
    """The latest offset mapped for the key ``buf[at:at+n]``, -1 if none."""
    _, e = _find(t, buf, at, n, _hash(buf, at, n))
    return -1 if e < 0 else t.entry_offset[e]


class CompiledOffsetMap:
    """``OffsetMap``'s interface over a ``KeyTable``, for the cleaner's Python code (per-record calls from Python
    cost a compiled call each: only batches the kernel leaves to Python use it)."""

    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        self.table = new_table(memory_bytes, load_factor)
        self.memory_bytes = memory_bytes
        self.capacity = int(self.table.meta[CAPACITY])

    @property
    def size(self) -> int:
        return int(self.table.meta[COUNT])

    @property
    def charged(self) -> int:
        return int(self.table.meta[CHARGED])

    @property
    def latest_offset(self) -> int:
        return int(self.table.meta[LATEST])

    @property
    def full(self) -> bool:
        return self.charged + ENTRY_OVERHEAD > self.capacity

    def clear(self) -> None:
        clear_table(self.table)

    def put(self, key: bytes, offset: int) -> bool:
        return bool(table_put(self.table, np.frombuffer(key, np.uint8), 0, len(key), offset))

    def get(self, key: bytes) -> int:
        return int(table_get(self.table, np.frombuffer(key, np.uint8), 0, len(key)))

    def utilization(self) -> float:
        return self.charged / self.memory_bytes
