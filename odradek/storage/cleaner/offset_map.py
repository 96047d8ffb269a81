"""The cleaner's offset map: for each key of the dirty part of a log, the offset of its latest record.

Kafka's ``SkimpyOffsetMap`` in spirit: a fixed-size open-addressing hash table in one preallocated buffer
(``log.cleaner.dedupe.buffer.size`` divided among the cleaner threads), so the cleaner's memory is what the
operator configured, whatever the number of keys. A slot is 24 bytes: the key's 16-byte MD5 digest and the
offset (8 bytes, big-endian). Keys are never stored, only digests: two keys with the same digest would share
a slot, which MD5's 128 bits make negligible (Kafka takes the same bet).

Invariants:
- At most ``capacity`` entries, where ``capacity = slots * load_factor`` (``log.cleaner.io.buffer.load.factor``,
  0.9): ``put`` of a new key into a full map returns False and changes nothing, so the caller cleans the
  part it has mapped and maps the rest in another pass.
- ``put`` of a key already present replaces its offset only with a larger one (records are mapped in offset
  order; a replayed older record never wins).
- An all-zero digest slot marks "empty"; the (astronomically unlikely) all-zero digest of a real key is
  stored as digest 0...01 instead.
- ``latest_offset`` is the largest offset put (-1 when empty): records above it were not mapped, and the
  cleaner keeps them.
"""

from __future__ import annotations

import hashlib
import struct

SLOT = 24
DIGEST = 16
_OFFSET = struct.Struct(">q")
_EMPTY = bytes(DIGEST)
_ZERO_STAND_IN = bytes(DIGEST - 1) + b"\x01"


class OffsetMap:
    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        if memory_bytes < SLOT:
            raise ValueError(f"the offset map needs at least {SLOT} bytes (log.cleaner.dedupe.buffer.size), "
                             f"got {memory_bytes}")
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"log.cleaner.io.buffer.load.factor must be in (0, 1], got {load_factor}")
        self.slots = memory_bytes // SLOT
        self.capacity = max(1, int(self.slots * load_factor))
        self._table = bytearray(self.slots * SLOT)
        self.size = 0
        self.latest_offset = -1
        self.lookups = 0
        self.probes = 0

    @property
    def full(self) -> bool:
        return self.size >= self.capacity

    @property
    def memory_bytes(self) -> int:
        return len(self._table)

    def clear(self) -> None:
        self._table[:] = bytes(len(self._table))
        self.size = 0
        self.latest_offset = -1

    @staticmethod
    def digest(key: bytes) -> bytes:
        d = hashlib.md5(key, usedforsecurity=False).digest()
        return _ZERO_STAND_IN if d == _EMPTY else d

    def _find(self, d: bytes) -> int:
        """The byte position of ``d``'s slot, or of the empty slot where it would go."""
        table = self._table
        slots = self.slots
        i = int.from_bytes(d[:8], "big") % slots
        self.lookups += 1
        for _ in range(slots):
            pos = i * SLOT
            here = table[pos:pos + DIGEST]
            if here == d or here == _EMPTY:
                return pos
            self.probes += 1
            i = i + 1 if i + 1 < slots else 0
        raise AssertionError("the offset map has no empty slot (capacity is below the slot count)")

    def put(self, key: bytes, offset: int) -> bool:
        """Map ``key`` to ``offset``; False (nothing changed) if the key is new and the map is full."""
        d = self.digest(key)
        pos = self._find(d)
        table = self._table
        if table[pos:pos + DIGEST] == _EMPTY:
            if self.size >= self.capacity:
                return False
            table[pos:pos + DIGEST] = d
            self.size += 1
        elif _OFFSET.unpack_from(table, pos + DIGEST)[0] >= offset:
            return True
        _OFFSET.pack_into(table, pos + DIGEST, offset)
        if offset > self.latest_offset:
            self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        """The latest offset mapped for ``key``, -1 if none."""
        pos = self._find(self.digest(key))
        if self._table[pos:pos + DIGEST] == _EMPTY:
            return -1
        return int(_OFFSET.unpack_from(self._table, pos + DIGEST)[0])

    def utilization(self) -> float:
        return self.size / self.slots
