"""The compiled cleaner's offset map: an open-addressing hash table of exact keys in preallocated arrays.

Kafka's ``SkimpyOffsetMap`` holds 16-byte MD5 digests and offsets in one preallocated buffer and trusts the digest
(a collision would drop a record that should stay; Kafka argues its odds away). This table stores the keys
themselves, so no collision can ever lose a record: a lookup matches a 64-bit hash *and* the key's bytes.

Layout (numpy arrays, allocated once per buffer size and reused by every pass of a worker; ``np.zeros`` pages
cost no memory until touched):

- ``slots`` (int64 rows of hash, entry number + 1; 0 = empty): linear probing from ``hash & (active - 1)``.
  ``active`` starts at ``INITIAL_SLOTS`` and doubles (every entry re-placed) before the load passes 1/2, so a
  small map stays small and cache-resident; it never exceeds the array, sized for the most entries the budget
  allows.
- ``entries`` (int64 rows of offset, key position in the arena, key length, hash): one per key, in insertion
  order.
- ``arena``: the keys' bytes, appended.
- ``meta``: count, charged bytes, latest offset, arena bytes used, capacity, most entries, active slots.

Invariants (the same as ``offset_map.OffsetMap``'s, so the compiled and the reference cleaner stop a pass at the
same record and write the same files):

- Every new key is charged ``len(key) + ENTRY_OVERHEAD``; charged bytes never exceed ``capacity = memory_bytes *
  load_factor``; a ``put`` of a new key that does not fit returns False and changes nothing.
- ``put`` of a key already present replaces its offset only with a larger one; ``latest_offset`` is the largest
  offset put (-1 when empty).
- Memory: an entry costs 32 bytes of row, its key's bytes and at most 64 bytes of slots (active slots <= 4 x
  entries, 16 bytes each), less than the 128 + key bytes it is charged: the bytes a pass touches stay within the
  charged bytes, hence within the buffer.

Hash: 8 bytes of key at a time, multiply-xorshift, then a finaliser so that the low bits (the slot) depend on
every byte. It is not keyed: keys crafted to collide slow probing down but never change what is kept.

Prefetch: a put costs three dependent cache misses when the table is not cached (its slot, the slot's entry row,
the key's bytes in the arena). ``table_prefetch`` starts loading one of those levels for a hash the caller computed
(``table_hash``), so that a caller holding many keys (the kernel: a batch's records) overlaps their misses, level by
level, before it puts them with ``table_put_hashed``. Prefetches are hints (``llvm.prefetch``: no fault, no
effect on what the table holds) and read only the table's own rows.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from odradek.storage.cleaner.offset_map import ENTRY_OVERHEAD

COUNT, CHARGED, LATEST, ARENA_USED, CAPACITY, MAX_ENTRIES, ACTIVE = range(7)
OFFSET, KEY_AT, KEY_LEN, HASH = range(4)  # entries' columns
INITIAL_SLOTS = 1024

_K0 = np.uint64(0x9E3779B97F4A7C15)
_K1 = np.uint64(0xD6E8FEB86659FD93)
_K2 = np.uint64(0xFF51AFD7ED558CCD)
_S29 = np.uint64(29)
_S32 = np.uint64(32)


class KeyTable(NamedTuple):
    slots: np.ndarray  # int64[max slots, 2]: hash, entry number + 1 (0 = empty)
    entries: np.ndarray  # int64[max entries, 4]: OFFSET, KEY_AT, KEY_LEN, HASH
    arena: np.ndarray  # uint8[capacity]
    meta: np.ndarray  # int64[7]: COUNT, CHARGED, LATEST, ARENA_USED, CAPACITY, MAX_ENTRIES, ACTIVE


def new_table(memory_bytes: int, load_factor: float) -> KeyTable:
    """An empty table charged against ``memory_bytes * load_factor`` (checked as ``OffsetMap`` checks them)."""
    if memory_bytes < ENTRY_OVERHEAD:
        raise ValueError(f"the offset map needs at least {ENTRY_OVERHEAD} bytes "
                         f"(log.cleaner.dedupe.buffer.size), got {memory_bytes}")
    if not 0.0 < load_factor <= 1.0:
        raise ValueError(f"log.cleaner.io.buffer.load.factor must be in (0, 1], got {load_factor}")
    capacity = max(ENTRY_OVERHEAD, int(memory_bytes * load_factor))
    max_entries = capacity // ENTRY_OVERHEAD
    slots = INITIAL_SLOTS
    while slots < 2 * max_entries + 2:
        slots *= 2
    meta = np.zeros(7, dtype=np.int64)
    meta[LATEST] = -1
    meta[CAPACITY] = capacity
    meta[MAX_ENTRIES] = max_entries
    meta[ACTIVE] = INITIAL_SLOTS
    return KeyTable(np.zeros((slots, 2), np.int64), np.zeros((max_entries, 4), np.int64),
                    np.zeros(capacity, np.uint8), meta)


@njit(cache=True, nogil=True)
def clear_table(t: KeyTable) -> None:
    """Empty the table (only the active slots are touched)."""
    t.slots[: t.meta[ACTIVE], 1] = 0
    t.meta[COUNT] = 0
    t.meta[CHARGED] = 0
    t.meta[LATEST] = -1
    t.meta[ARENA_USED] = 0
    t.meta[ACTIVE] = INITIAL_SLOTS


@intrinsic
def _prefetch(typingctx: object, arr: types.Array, i: types.Integer) -> tuple[object, object]:  # pragma: no cover
    """Start loading the cache line of ``arr.flat[i]`` (``llvm.prefetch``: read, high locality). Computes the
    address only: never faults, whatever ``i``."""
    sig = types.void(arr, i)

    def codegen(context: object, builder: ir.IRBuilder, signature: object, args: list[object]) -> object:
        aryty = signature.args[0]  # type: ignore[attr-defined]
        ary = context.make_array(aryty)(context, builder, args[0])  # type: ignore[attr-defined]
        data = builder.bitcast(ary.data, ir.IntType(8).as_pointer())
        size = context.get_constant(types.intp, aryty.dtype.bitwidth // 8)  # type: ignore[attr-defined]
        at = context.cast(builder, args[1], signature.args[1], types.intp)  # type: ignore[attr-defined]
        ptr = builder.gep(data, [builder.mul(at, size)])
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]), "llvm.prefetch.p0")
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()  # type: ignore[attr-defined]

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _word(buf: np.ndarray, at: int, n: int) -> np.uint64:
    """``n`` <= 8 bytes at ``at``, little-endian."""
    w = np.uint64(0)
    for j in range(n):
        w |= np.uint64(buf[at + j]) << np.uint64(8 * j)
    return w


@njit(cache=True, nogil=True, inline="always")
def _hash(buf: np.ndarray, at: int, n: int) -> np.uint64:
    h = np.uint64(n) * _K0
    i = 0
    while i < n:
        h = (h ^ _word(buf, at + i, min(8, n - i))) * _K1
        h ^= h >> _S29
        i += 8
    h *= _K2
    h ^= h >> _S32
    return h


@njit(cache=True, nogil=True, inline="always")
def _same(a: np.ndarray, i: int, b: np.ndarray, j: int, n: int) -> bool:
    """Whether ``a[i:i+n]`` and ``b[j:j+n]`` hold the same bytes (8 at a time)."""
    q = 0
    while q + 8 <= n:
        if _word(a, i + q, 8) != _word(b, j + q, 8):
            return False
        q += 8
    while q < n:
        if a[i + q] != b[j + q]:
            return False
        q += 1
    return True


@njit(cache=True, nogil=True, inline="always")
def _find(t: KeyTable, buf: np.ndarray, at: int, n: int, h: np.int64) -> tuple[int, int]:
    """(slot, entry) of the key ``buf[at:at+n]`` whose hash is ``h``: its entry number, or -1 with the empty slot
    that ends its probe path."""
    mask = t.meta[ACTIVE] - 1
    i = np.int64(np.uint64(h) & np.uint64(mask))
    slots = t.slots
    entries = t.entries
    while True:
        e = slots[i, 1] - 1
        if e < 0:
            return i, -1
        if slots[i, 0] == h and entries[e, KEY_LEN] == n and _same(t.arena, entries[e, KEY_AT], buf, at, n):
            return i, e
        i = (i + 1) & mask


@njit(cache=True, nogil=True)
def _grow(t: KeyTable) -> None:
    """Double the active slots and place every entry again."""
    active = t.meta[ACTIVE] * 2
    t.meta[ACTIVE] = active
    slots = t.slots
    slots[:active, 1] = 0
    mask = active - 1
    for e in range(t.meta[COUNT]):
        h = t.entries[e, HASH]
        i = np.int64(np.uint64(h) & np.uint64(mask))
        while slots[i, 1] != 0:
            i = (i + 1) & mask
        slots[i, 0] = h
        slots[i, 1] = e + 1


@njit(cache=True, nogil=True)
def _insert(t: KeyTable, buf: np.ndarray, at: int, n: int, offset: int, h: np.int64, slot: int) -> bool:
    """``table_put`` of a key not in the table, whose probe path ends at the empty ``slot`` (a call of its own:
    the put of a key already there, most puts, stays a short loop)."""
    meta = t.meta
    cost = n + ENTRY_OVERHEAD
    if meta[CHARGED] + cost > meta[CAPACITY] or meta[COUNT] >= meta[MAX_ENTRIES]:
        return False
    if 2 * (meta[COUNT] + 1) > meta[ACTIVE]:
        _grow(t)
        slot, _ = _find(t, buf, at, n, h)
    e = meta[COUNT]
    k = meta[ARENA_USED]
    t.arena[k : k + n] = buf[at : at + n]
    t.entries[e, OFFSET] = offset
    t.entries[e, KEY_AT] = k
    t.entries[e, KEY_LEN] = n
    t.entries[e, HASH] = h
    t.slots[slot, 0] = h
    t.slots[slot, 1] = e + 1
    meta[COUNT] = e + 1
    meta[CHARGED] += cost
    meta[ARENA_USED] = k + n
    if offset > meta[LATEST]:
        meta[LATEST] = offset
    return True


@njit(cache=True, nogil=True, inline="always")
def table_hash(buf: np.ndarray, at: int, n: int) -> np.int64:
    """The hash of the key ``buf[at:at+n]`` (for ``table_prefetch`` and ``table_put_hashed``)."""
    return np.int64(_hash(buf, at, n))


@njit(cache=True, nogil=True, inline="always")
def table_prefetch(t: KeyTable, hashes: np.ndarray, key_lens: np.ndarray, count: int) -> None:
    """Start loading what puts of the keys hashed ``hashes[:count]`` read, level by level: their slots, then the
    entry rows of the keys in those slots, then those keys' bytes (each level reads what the one before loaded, so
    the keys' misses overlap). Keys whose ``key_lens`` is negative (none) are skipped."""
    mask = np.uint64(t.meta[ACTIVE] - 1)
    slots = t.slots
    entries = t.entries
    for i in range(count):
        if key_lens[i] >= 0:
            _prefetch(slots, 2 * np.int64(np.uint64(hashes[i]) & mask))
    for i in range(count):
        if key_lens[i] >= 0:
            e = slots[np.int64(np.uint64(hashes[i]) & mask), 1] - 1
            if e >= 0:
                _prefetch(entries, 4 * e)
    for i in range(count):
        if key_lens[i] >= 0:
            e = slots[np.int64(np.uint64(hashes[i]) & mask), 1] - 1
            if e >= 0:
                _prefetch(t.arena, entries[e, KEY_AT])


@njit(cache=True, nogil=True, inline="always")
def table_put(t: KeyTable, buf: np.ndarray, at: int, n: int, offset: int) -> bool:
    """Map the key ``buf[at:at+n]`` to ``offset``; False (nothing changed) if it is new and does not fit."""
    return table_put_hashed(t, buf, at, n, offset, np.int64(_hash(buf, at, n)))


@njit(cache=True, nogil=True, inline="always")
def table_put_hashed(t: KeyTable, buf: np.ndarray, at: int, n: int, offset: int, h: np.int64) -> bool:
    """``table_put`` of a key whose ``table_hash`` is ``h``."""
    slot, e = _find(t, buf, at, n, h)
    if e < 0:
        return _insert(t, buf, at, n, offset, h, slot)
    entries = t.entries
    if entries[e, OFFSET] < offset:
        entries[e, OFFSET] = offset
        meta = t.meta
        if offset > meta[LATEST]:
            meta[LATEST] = offset
    return True


@njit(cache=True, nogil=True)
def table_get(t: KeyTable, buf: np.ndarray, at: int, n: int) -> int:
    """The latest offset mapped for the key ``buf[at:at+n]``, -1 if none."""
    _, e = _find(t, buf, at, n, np.int64(_hash(buf, at, n)))
    return -1 if e < 0 else t.entries[e, OFFSET]


@njit(cache=True, nogil=True)
def table_put_many(t: KeyTable, keys: np.ndarray, ends: np.ndarray, offsets: np.ndarray) -> int:
    """``table_put`` of each key ``keys[ends[i - 1]:ends[i]]`` to ``offsets[i]``, in order: how many were put
    before one did not fit (all of them if all did)."""
    start = 0
    for i in range(offsets.shape[0]):
        if not table_put(t, keys, start, ends[i] - start, offsets[i]):
            return i
        start = ends[i]
    return offsets.shape[0]


@njit(cache=True, nogil=True)
def table_get_many(t: KeyTable, keys: np.ndarray, ends: np.ndarray, out: np.ndarray) -> None:
    """``out[i]`` = ``table_get`` of the key ``keys[ends[i - 1]:ends[i]]``."""
    start = 0
    for i in range(out.shape[0]):
        out[i] = table_get(t, keys, start, ends[i] - start)
        start = ends[i]


def _joined(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """The keys' bytes end to end, and where each ends."""
    return (np.frombuffer(b"".join(keys), np.uint8),
            np.fromiter((len(k) for k in keys), np.int64, len(keys)).cumsum())


def latest_offsets(t: KeyTable) -> np.ndarray:
    """Every key's latest offset, sorted (each record of the mapped part whose offset is not here was superseded)."""
    return np.sort(t.entries[: t.meta[COUNT], OFFSET])


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

    def put_many(self, keys: list[bytes], offsets: list[int]) -> int:
        """``put`` of each key to its offset in order (one compiled call): how many before one did not fit."""
        if not keys:
            return 0
        joined, ends = _joined(keys)
        return int(table_put_many(self.table, joined, ends, np.array(offsets, np.int64)))

    def get_many(self, keys: list[bytes]) -> list[int]:
        """``get`` of each key (one compiled call)."""
        if not keys:
            return []
        joined, ends = _joined(keys)
        out = np.empty(len(keys), np.int64)
        table_get_many(self.table, joined, ends, out)
        return out.tolist()

    def utilization(self) -> float:
        return self.charged / self.memory_bytes
