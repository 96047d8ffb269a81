"""A guard run before kio decodes a request: no compact array may announce a count above 32 bits.

kio 0.6.5's native compact-array reader reserves room for the announced item count before it reads
any item. A count that fits 32 bits is checked against the buffer, but a 5-byte varint whose value
needs more than 32 bits (a 6-byte body such as ``ce e7 a9 a7 17``) makes it ask the allocator for
tens of gigabytes, and the process aborts -- one malformed frame would kill the broker. Kafka's own
varints hold 32 bits, so no client sends such a count.

``check(request_class, buffer, offset)`` walks the body by its schema (kio's generated dataclasses
as ``entities.fields_of`` reads them: field order, ``kafka_type``, ``tag``; ``__flexible__``) and
raises ``ArrayBoundsError`` for an array whose count varint exceeds 32 bits or announces more items
than bytes remain (every item takes at least one byte). It reads lengths only; whatever else is
wrong with the body is left to kio, which raises on it. A body it cannot follow (a type it does not
know, a truncated field) ends the walk silently: kio then reports that input as malformed.

``needs_check(buffer, offset)`` is the cheap pre-test for small bodies: a varint above 32 bits has
four bytes with the continuation bit followed by a fifth of 0x10 or more; without that pattern no
count can be too large and the walk is skipped. A regex scan of a body with no high bytes (text
payloads) costs ~6 us per KB, the walk ~4 us whatever the size (it skips a record set in one step,
so its cost follows the number of fields, not of bytes), so bodies above ``SCAN_LIMIT`` (1 KiB: the
two cost about the same there) are walked instead.

Invariant: never raises for a body that kio encoded (tests round-trip every supported request).
"""

from __future__ import annotations

import re
import struct
from functools import cache

from odradek.protocol import entities
from odradek.protocol.entities import FieldInfo

_LONG_VARINT = re.compile(rb"[\x80-\xff]{4}[\x10-\x7f]")
_FIXED = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
          "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
          "uuid": 16}
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
SCAN_LIMIT = 1024


class ArrayBoundsError(ValueError):
    """An array count no valid request can carry."""


class _Stop(Exception):
    """The walk cannot go on (truncated or unknown input): leave the verdict to kio."""


@cache
def _plan(cls: type) -> tuple[bool, tuple[int | FieldInfo, ...], dict[int, FieldInfo]]:
    """(flexible, steps, tagged fields by tag): consecutive fixed-size fields merged into one skip."""
    steps: list[int | FieldInfo] = []
    tagged: dict[int, FieldInfo] = {}
    for f in entities.fields_of(cls):
        if f.tag is not None:
            tagged[f.tag] = f
            continue
        size = None if f.is_array or f.nested is not None else _FIXED.get(f.kafka_type or "")
        if size is None:
            steps.append(f)
        elif steps and isinstance(steps[-1], int):
            steps[-1] += size
        else:
            steps.append(size)
    return bool(getattr(cls, "__flexible__", False)), tuple(steps), tagged


def needs_check(buffer: bytes | bytearray | memoryview, offset: int = 0) -> bool:
    if len(buffer) - offset > SCAN_LIMIT:
        return True
    return _LONG_VARINT.search(buffer, offset) is not None


def check(request_class: type, buffer: bytes | bytearray | memoryview, offset: int = 0) -> None:
    """Raise ``ArrayBoundsError`` if an array of the body at ``offset`` announces an impossible count."""
    try:
        _Walker(buffer).entity(request_class, offset, len(buffer))
    except _Stop:
        pass


class _Walker:
    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self.buf = buf

    def uvarint(self, pos: int, end: int) -> tuple[int, int]:
        value = shift = 0
        for i in range(5):
            if pos + i >= end:
                raise _Stop
            b = self.buf[pos + i]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value, pos + i + 1
            shift += 7
        raise _Stop  # longer than 5 bytes: kio refuses it

    def fixed(self, fmt: struct.Struct, pos: int, end: int) -> tuple[int, int]:
        if pos + fmt.size > end:
            raise _Stop
        return fmt.unpack_from(self.buf, pos)[0], pos + fmt.size

    def count(self, flexible: bool, pos: int, end: int, what: str) -> tuple[int, int]:
        """An array's item count (-1 for null) and the position after it; raises for impossible counts."""
        if flexible:
            n, after = self.uvarint(pos, end)
            if n > 0xFFFFFFFF:
                raise ArrayBoundsError(f"array {what} announces {n - 1} items: longer than a 32-bit count")
            n -= 1
        else:
            n, after = self.fixed(_I32, pos, end)
        if n > end - after:
            raise ArrayBoundsError(f"array {what} announces {n} items but only {end - after} bytes follow")
        return n, after

    def entity(self, cls: type, pos: int, end: int) -> int:
        flexible, steps, tagged = _plan(cls)
        for step in steps:
            if isinstance(step, int):  # a run of fixed-size fields
                pos += step
                if pos > end:
                    raise _Stop
            else:
                pos = self.field(step, flexible, pos, end)
        if flexible:
            pos = self.tagged_section(tagged, pos, end)
        return pos

    def tagged_section(self, known: dict[int, FieldInfo], pos: int, end: int) -> int:
        n, pos = self.uvarint(pos, end)
        for _ in range(min(n, end - pos)):
            tag, pos = self.uvarint(pos, end)
            size, pos = self.uvarint(pos, end)
            if pos + size > end:
                raise _Stop
            f = known.get(tag)
            if f is not None and (f.is_array or f.nested is not None):
                self.field(f, True, pos, pos + size)
            pos += size
        return pos

    def field(self, f: FieldInfo, flexible: bool, pos: int, end: int) -> int:
        if f.is_array:
            n, pos = self.count(flexible, pos, end, f.name)
            for _ in range(max(n, 0)):
                pos = self.entity(f.nested, pos, end) if f.nested is not None else self.scalar(f, flexible, pos, end)
            return pos
        if f.nested is not None:
            if f.nullable:
                marker, pos = self.fixed(_I8, pos, end)
                if marker < 0:
                    return pos
            return self.entity(f.nested, pos, end)
        return self.scalar(f, flexible, pos, end)

    def scalar(self, f: FieldInfo, flexible: bool, pos: int, end: int) -> int:
        kt = f.kafka_type
        size = _FIXED.get(kt or "")
        if size is not None:
            if pos + size > end:
                raise _Stop
            return pos + size
        if kt == "string":
            if flexible:
                n, pos = self.uvarint(pos, end)
                n -= 1
            else:
                n, pos = self.fixed(_I16, pos, end)
        elif kt in ("bytes", "records"):
            if flexible:
                n, pos = self.uvarint(pos, end)
                n -= 1
            else:
                n, pos = self.fixed(_I32, pos, end)
        else:
            raise _Stop  # a type this walk does not know: let kio decide
        if n > 0:
            if pos + n > end:
                raise _Stop
            pos += n
        return pos
