"""Cursors for the small Kafka-schema formats embedded in group records and member metadata.

``__consumer_offsets`` keys and values (``records.py``) and the consumer protocol's subscriptions and
assignments (``consumer_protocol.py``) are laid out like Kafka's message schemas: big-endian
integers, and in non-flexible versions int16-length strings, int32-length bytes and int32 array
counts with -1 for null; flexible versions use unsigned varints of length + 1 (0 for null) and
tagged-field sections. One reader and one writer serve both formats; each raises the error type its
format gives it.

Invariants: the reader never reads past its data, and every failure names the structure (``what``),
the problem and the byte position; the writer refuses values that do not fit their field (ints out
of range, strings over 32767 bytes, None where null is not allowed).
"""

from __future__ import annotations

import struct
from typing import NoReturn

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class SchemaReader:
    __slots__ = ("_data", "_error", "_pos", "what")

    def __init__(self, data: bytes, what: str, error: type[Exception]) -> None:
        self._data = bytes(data)
        self._pos = 0
        self._error = error
        self.what = what

    def fail(self, problem: str) -> NoReturn:
        raise self._error(f"{self.what}: {problem} (at byte {self._pos} of {len(self._data)})")

    def _int(self, fmt: struct.Struct, name: str) -> int:
        if self._pos + fmt.size > len(self._data):
            self.fail(f"truncated: {name} needs {fmt.size} bytes, {len(self._data) - self._pos} left")
        (value,) = fmt.unpack_from(self._data, self._pos)
        self._pos += fmt.size
        return int(value)

    def i16(self, name: str) -> int:
        return self._int(_I16, name)

    def i32(self, name: str) -> int:
        return self._int(_I32, name)

    def i64(self, name: str) -> int:
        return self._int(_I64, name)

    def uvarint(self, name: str) -> int:
        value = 0
        for shift in range(0, 35, 7):
            if self._pos >= len(self._data):
                self.fail(f"truncated: varint {name} runs past the end")
            b = self._data[self._pos]
            self._pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                if value > 0xFFFFFFFF:
                    self.fail(f"varint {name} exceeds 32 bits")
                return value
        self.fail(f"varint {name} is longer than 5 bytes")

    def _take(self, n: int, name: str) -> bytes:
        if n > len(self._data) - self._pos:
            self.fail(f"truncated: {name} has length {n}, {len(self._data) - self._pos} bytes left")
        chunk = self._data[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def _length(self, flexible: bool, wide: bool, nullable: bool, name: str) -> int | None:
        if flexible:
            n = self.uvarint(f"length of {name}") - 1
        elif wide:
            n = self.i32(f"length of {name}")
        else:
            n = self.i16(f"length of {name}")
        if n == -1 and nullable:
            return None
        if n < 0:
            self.fail(f"{name} is null, which it may not be" if n == -1 else f"{name} has negative length {n}")
        return n

    def _utf8(self, raw: bytes, name: str) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(f"{name} is not valid UTF-8 ({e.reason})")

    def string(self, flexible: bool, name: str) -> str:
        n = self._length(flexible, False, False, name)
        assert n is not None
        return self._utf8(self._take(n, name), name)

    def nullable_string(self, flexible: bool, name: str) -> str | None:
        n = self._length(flexible, False, True, name)
        return None if n is None else self._utf8(self._take(n, name), name)

    def bytes_(self, flexible: bool, name: str) -> bytes:
        n = self._length(flexible, True, False, name)
        assert n is not None
        return self._take(n, name)

    def nullable_bytes(self, flexible: bool, name: str) -> bytes | None:
        n = self._length(flexible, True, True, name)
        return None if n is None else self._take(n, name)

    def array_count(self, flexible: bool, name: str) -> int:
        n = self._length(flexible, True, False, name)
        assert n is not None
        return n

    def tagged_fields(self, name: str) -> None:
        """Skip a tagged-field section (no tagged fields are known here)."""
        for _ in range(self.uvarint(f"tagged field count of {name}")):
            self.uvarint(f"tag in {name}")
            self._take(self.uvarint(f"tagged field size in {name}"), f"tagged field in {name}")

    def end(self) -> None:
        if self._pos != len(self._data):
            self.fail(f"{len(self._data) - self._pos} trailing bytes")


class SchemaWriter:
    __slots__ = ("_error", "_out", "flexible")

    def __init__(self, error: type[Exception], *, flexible: bool = False) -> None:
        self._out = bytearray()
        self._error = error
        self.flexible = flexible

    def _int(self, fmt: struct.Struct, value: int, name: str) -> None:
        try:
            self._out += fmt.pack(value)
        except struct.error:
            raise self._error(f"{name} {value!r} does not fit in {fmt.size * 8} bits") from None

    def i16(self, value: int, name: str) -> None:
        self._int(_I16, value, name)

    def i32(self, value: int, name: str) -> None:
        self._int(_I32, value, name)

    def i64(self, value: int, name: str) -> None:
        self._int(_I64, value, name)

    def uvarint(self, value: int) -> None:
        while value > 0x7F:
            self._out.append((value & 0x7F) | 0x80)
            value >>= 7
        self._out.append(value)

    def _length(self, n: int | None, wide: bool, name: str) -> None:
        limit = 0x7FFFFFFF if wide else 0x7FFF  # Kafka caps strings at 0x7fff bytes, flexible or not
        if n is not None and n > limit:
            raise self._error(f"{name} is {n} bytes long, more than the {limit} its field holds")
        if self.flexible:
            self.uvarint(0 if n is None else n + 1)
        elif wide:
            self.i32(-1 if n is None else n, name)
        else:
            self.i16(-1 if n is None else n, name)

    def string(self, value: str | None, name: str, nullable: bool = False) -> None:
        if value is None:
            if not nullable:
                raise self._error(f"{name} may not be None")
            self._length(None, False, name)
            return
        raw = value.encode("utf-8")
        self._length(len(raw), False, name)
        self._out += raw

    def bytes_(self, value: bytes | None, name: str, nullable: bool = False) -> None:
        if value is None:
            if not nullable:
                raise self._error(f"{name} may not be None")
            self._length(None, True, name)
            return
        self._length(len(value), True, name)
        self._out += value

    def array_count(self, n: int, name: str) -> None:
        self._length(n, True, name)

    def tagged_fields(self) -> None:
        if self.flexible:
            self.uvarint(0)

    def getvalue(self) -> bytes:
        return bytes(self._out)
