"""The cleaner's offset map: for each key of the dirty part of a log, the offset of its latest record.

This is the reference map (the pure-Python cleaner's); the compiled cleaner uses ``key_table.CompiledOffsetMap``,
which charges its entries exactly as this one does (both stop a pass at the same record). ``KeyOffsets`` is what
the cleaner's rules need of either.

Kafka's ``SkimpyOffsetMap`` keeps 16-byte key digests in one preallocated buffer. In Python, hashing every key
with MD5 and probing a bytearray costs more than everything else the cleaner does per record, so this map is a
dict from the key itself to its offset, and the memory budget is enforced by accounting instead of by
preallocation: every entry is charged its key's length plus ``ENTRY_OVERHEAD`` (the dict slot, the key's bytes
object header and the offset's int object on 64-bit CPython, rounded up). Exact keys also mean no digest
collisions.

Invariants:
- Charged bytes never exceed ``capacity = memory_bytes * load_factor`` (``log.cleaner.dedupe.buffer.size`` per
  cleaner thread, ``log.cleaner.io.buffer.load.factor``): ``put`` of a new key that does not fit returns False
  and changes nothing, so the caller cleans the part it has mapped and maps the rest in another pass.
- ``put`` of a key already present replaces its offset only with a larger one (records are mapped in offset
  order; a replayed older record never wins).
- ``latest_offset`` is the largest offset put (-1 when empty): records above it were not mapped.
"""

from __future__ import annotations

from typing import Protocol

ENTRY_OVERHEAD = 128  # bytes charged per entry beyond the key's length (see the module docstring)


class KeyOffsets(Protocol):
    """What the cleaner's rules use of a map: this module's ``OffsetMap`` (the reference) and
    ``key_table.CompiledOffsetMap`` (the compiled cleaner's) both provide it, with the same charging."""

    @property
    def latest_offset(self) -> int: ...

    def put(self, key: bytes, offset: int) -> bool: ...

    def get(self, key: bytes) -> int: ...

    def put_many(self, keys: list[bytes], offsets: list[int]) -> int: ...

    def get_many(self, keys: list[bytes]) -> list[int]: ...

    def utilization(self) -> float: ...

    def clear(self) -> None: ...


class OffsetMap:
    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        if memory_bytes < ENTRY_OVERHEAD:
            raise ValueError(f"the offset map needs at least {ENTRY_OVERHEAD} bytes "
                             f"(log.cleaner.dedupe.buffer.size), got {memory_bytes}")
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"log.cleaner.io.buffer.load.factor must be in (0, 1], got {load_factor}")
        self.memory_bytes = memory_bytes
        self.capacity = max(ENTRY_OVERHEAD, int(memory_bytes * load_factor))
        self.offsets: dict[bytes, int] = {}
        self.charged = 0
        self.latest_offset = -1

    @property
    def size(self) -> int:
        return len(self.offsets)

    @property
    def full(self) -> bool:
        return self.charged + ENTRY_OVERHEAD > self.capacity

    def clear(self) -> None:
        self.offsets = {}
        self.charged = 0
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> bool:
        """Map ``key`` to ``offset``; False (nothing changed) if the key is new and does not fit."""
        offsets = self.offsets
        old = offsets.get(key)
        if old is None:
            cost = len(key) + ENTRY_OVERHEAD
            if self.charged + cost > self.capacity:
                return False
            self.charged += cost
        elif old >= offset:
            return True
        offsets[key] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        """The latest offset mapped for ``key``, -1 if none."""
        return self.offsets.get(key, -1)

    def put_many(self, keys: list[bytes], offsets: list[int]) -> int:
        """``put`` of each key to its offset, in order: how many were put before one did not fit (a batch's
        keys in one call: the compiled map's calls cost more than a dict's)."""
        put = self.put
        for i, (key, offset) in enumerate(zip(keys, offsets, strict=True)):
            if not put(key, offset):
                return i
        return len(keys)

    def get_many(self, keys: list[bytes]) -> list[int]:
        """``get`` of each key."""
        get = self.offsets.get
        return [get(key, -1) for key in keys]

    def utilization(self) -> float:
        return self.charged / self.memory_bytes
