"""Framing and request headers: exact bytes, limits, malformed input."""

from __future__ import annotations

import struct

import pytest

from odradek.protocol.frame import (
    FrameError,
    FrameTooLargeError,
    frame_size,
    parse_request_header,
    response_prefix,
)


def header_v1(api_key: int, version: int, corr: int, client: str | None) -> bytes:
    cid = b"\xff\xff" if client is None else struct.pack(">h", len(client)) + client.encode()
    return struct.pack(">hhi", api_key, version, corr) + cid


def test_oversized_prefix_is_refused_before_the_body_arrives() -> None:
    with pytest.raises(FrameTooLargeError) as e:
        frame_size(struct.pack(">i", 101), 100)
    assert e.value.size == 101 and "socket.request.max.bytes=100" in str(e.value)
    assert frame_size(struct.pack(">i", 100), 100) == 100


@pytest.mark.parametrize("size", [0, -1, -(2**31)])
def test_non_positive_sizes_are_frame_errors(size: int) -> None:
    with pytest.raises(FrameError):
        frame_size(struct.pack(">i", size), 100)


def test_header_v1_and_v2() -> None:
    h = parse_request_header(header_v1(3, 12, 7, "me") + b"BODY", flexible=False)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id, h.size) == (3, 12, 7, "me", 12)
    # v2: the same plus tagged fields (one tag of 2 bytes here)
    raw = header_v1(3, 12, 7, None) + bytes([1, 5, 2, 0xAA, 0xBB]) + b"BODY"
    h = parse_request_header(raw, flexible=True)
    assert h.client_id is None and raw[h.size :] == b"BODY"


@pytest.mark.parametrize(
    "raw",
    [b"\x00\x03", struct.pack(">hhi", 3, 1, 1), struct.pack(">hhih", 3, 1, 1, 5) + b"ab",
     struct.pack(">hhih", 3, 1, 1, -2), header_v1(3, 12, 1, "x") + b"\x01\x05\x09"],
)
def test_truncated_or_invalid_headers_raise_frame_error(raw: bytes) -> None:
    with pytest.raises(FrameError):
        parse_request_header(raw, flexible=True)


def test_response_prefix_bytes() -> None:
    assert response_prefix(9, 3, flexible_header=False) == struct.pack(">ii", 7, 9)
    assert response_prefix(9, 3, flexible_header=True) == struct.pack(">ii", 8, 9) + b"\x00"
