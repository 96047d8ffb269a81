"""Kafka's framing: 4-byte size prefixes, request headers v1/v2, response headers v0/v1. Sans-IO.

A request frame is ``size:int32`` then ``api_key:int16 api_version:int16 correlation_id:int32
client_id:nullable_string`` (header v1), plus tagged fields when the request version is flexible
(header v2), then the body. A response frame is ``size:int32 correlation_id:int32``, plus empty
tagged fields for flexible responses (header v1) — except ApiVersions, whose response header is
always v0 so that a client can read it before knowing what the broker supports.

Invariants:
- ``frame_size`` judges a frame by its 4-byte prefix alone: larger than ``max_frame_size`` is
  ``FrameTooLargeError`` before any buffer for the body exists.
- A negative or zero size prefix, or a header cut short, is a ``FrameError`` (close the connection).
- Nothing here touches sockets or files.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_RESPONSE_HEADER = struct.Struct(">ii")


class FrameError(Exception):
    """The byte stream is not a valid sequence of Kafka frames; the connection must close."""


class FrameTooLargeError(FrameError):
    def __init__(self, size: int, limit: int, key: str = "socket.request.max.bytes") -> None:
        super().__init__(f"request size {size} exceeds {key}={limit}")
        self.size = size
        self.limit = limit


def frame_size(prefix: bytes | bytearray | memoryview, max_frame_size: int,
               key: str = "socket.request.max.bytes") -> int:
    """The body size a 4-byte size prefix announces; raises before anything is allocated for it (``key``: the
    setting the limit comes from, for the message)."""
    (size,) = SIZE.unpack_from(prefix, 0)
    if size > max_frame_size:
        raise FrameTooLargeError(size, max_frame_size, key)
    if size <= 0:
        raise FrameError(f"request size {size} is invalid")
    return size


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
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    """Position after a tagged-fields section (flexible headers); raises FrameError if cut short."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        length, pos = read_uvarint(buf, pos)
        pos += length
        if pos > len(buf):
            raise FrameError("tagged field runs past the frame")
    return pos


def request_header(api_key: int, version: int, correlation_id: int, client_id: str | None, *,
                   flexible: bool) -> bytes:
    """Request header v1 (``flexible=False``) or v2 (v1 plus empty tagged fields): the client side."""
    out = bytearray(_HEADER_FIXED.pack(api_key, version, correlation_id))
    if client_id is None:
        out += _I16.pack(-1)
    else:
        raw = client_id.encode()
        out += _I16.pack(len(raw)) + raw
    if flexible:
        out.append(0)
    return bytes(out)


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




# -- writing response bodies laid out by hand (Produce, Fetch, OffsetCommit) ------------------------


def write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def write_array_len(out: bytearray, n: int, flexible: bool) -> None:
    """An array's length: compact (n + 1 as a varint) in flexible versions, else int32."""
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += _I32.pack(n)


def write_string(out: bytearray, s: str | None, flexible: bool, *, nullable: bool = False) -> None:
    if s is None:
        assert nullable
        out += b"\x00" if flexible else _I16.pack(-1)
        return
    raw = s.encode()
    if flexible:
        write_uvarint(out, len(raw) + 1)
    else:
        out += _I16.pack(len(raw))
    out += raw


def response_prefix(correlation_id: int, body_size: int, *, flexible_header: bool) -> bytes:
    """Size prefix plus response header for a body of ``body_size`` bytes."""
    if flexible_header:
        return _RESPONSE_HEADER.pack(4 + 1 + body_size, correlation_id) + b"\x00"
    return _RESPONSE_HEADER.pack(4 + body_size, correlation_id)
