"""Kafka's framing: 4-byte size prefixes, request headers v1/v2, response headers v0/v1. Sans-IO.

A request frame is ``size:int32`` then ``api_key:int16 api_version:int16 correlation_id:int32
client_id:nullable_string`` (header v1), plus tagged fields when the request version is flexible
(header v2), then the body. A response frame is ``size:int32 correlation_id:int32``, plus empty
tagged fields for flexible responses (header v1) — except ApiVersions, whose response header is
always v0 so that a client can read it before knowing what the broker supports.

Invariants:
- ``FrameBuffer`` never allocates for a frame whose size prefix exceeds ``max_frame_size``: it raises
  ``FrameTooLargeError`` as soon as the 4-byte prefix is seen.
- A negative or zero size prefix, or a header cut short, is a ``FrameError`` (close the connection).
- Nothing here touches sockets or files.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_RESPONSE_HEADER = struct.Struct(">ii")


class FrameError(Exception):
    """The byte stream is not a valid sequence of Kafka frames; the connection must close."""


class FrameTooLargeError(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"request of {size} bytes exceeds socket.request.max.bytes={limit}"
        )
        self.size = size
        self.limit = limit


class FrameBuffer:
    """Accumulates received bytes and hands out whole frames (without their size prefix)."""

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    def next_frame(self) -> bytes | None:
        """The next complete frame, or None if more bytes are needed."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        (size,) = SIZE.unpack_from(buf, pos)
        if size <= 0:
            raise FrameError(f"invalid frame size {size}")
        if size > self.max_frame_size:
            raise FrameTooLargeError(size, self.max_frame_size)
        end = pos + 4 + size
        if len(buf) < end:
            return None
        frame = bytes(buf[pos + 4 : end])
        if end == len(buf):
            buf.clear()
            self._pos = 0
        elif end > 1 << 20:
            del buf[:end]
            self._pos = 0
        else:
            self._pos = end
        return frame

    @property
    def pending(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def needed(self) -> int:
        """How many more bytes the frame being received needs (at least 1 when unknown)."""
        avail = len(self._buf) - self._pos
        if avail < 4:
            return 4 - avail
        (size,) = SIZE.unpack_from(self._buf, self._pos)
        return max(1, 4 + size - avail)


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes the header occupies; the body starts there


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the fields every header version starts with."""
    if len(frame) < _HEADER_FIXED.size:
        raise FrameError(f"request of {len(frame)} bytes is too short for a request header")
    return _HEADER_FIXED.unpack_from(frame, 0)


def parse_request_header(frame: bytes | memoryview, *, flexible: bool) -> RequestHeader:
    """Parse header v1 (``flexible=False``) or v2 (``flexible=True``)."""
    api_key, api_version, correlation_id = peek_header(frame)
    pos = _HEADER_FIXED.size
    if len(frame) < pos + 2:
        raise FrameError("request header is cut short before client_id")
    (n,) = _I16.unpack_from(frame, pos)
    pos += 2
    client_id: str | None = None
    if n >= 0:
        if len(frame) < pos + n:
            raise FrameError("request header is cut short inside client_id")
        try:
            client_id = bytes(frame[pos : pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise FrameError("client_id is not valid UTF-8") from None
        pos += n
    elif n != -1:
        raise FrameError(f"invalid client_id length {n}")
    if flexible:
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(frame, pos)
            length, pos = read_uvarint(frame, pos)
            pos += length
            if pos > len(frame):
                raise FrameError("request header tagged field runs past the frame")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise FrameError("unsigned varint runs past the frame")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise FrameError("unsigned varint is longer than 5 bytes")


def write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def response_prefix(correlation_id: int, body_size: int, *, flexible_header: bool) -> bytes:
    """Size prefix plus response header for a body of ``body_size`` bytes."""
    if flexible_header:
        return _RESPONSE_HEADER.pack(4 + 1 + body_size, correlation_id) + b"\x00"
    return _RESPONSE_HEADER.pack(4 + body_size, correlation_id)
