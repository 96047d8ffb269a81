"""Produce response bodies laid out by hand: Produce is the hot path, and kio's general-purpose
writer costs more than the append itself for small batches (see docs/performance.md).

Layout, versions 3-12 (flexible from 9)::

    responses: [name string, partition_responses: [index int32, error_code int16, base_offset int64,
        log_append_time_ms int64, [v5+ log_start_offset int64],
        [v8+ record_errors [batch_index int32, batch_index_error_message nullable string],
         error_message nullable string]]]
    throttle_time_ms int32

Invariants: output decodes with kio's reader for every supported version (tested); tagged fields
are always empty.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.protocol.frame import write_array_len, write_string

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART = struct.Struct(">ihqq")
_I64 = struct.Struct(">q")


@dataclass(slots=True)
class PartitionResult:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


def encode(version: int, topics: list[tuple[str, list[PartitionResult]]], *, throttle_ms: int = 0) -> bytes:
    flexible = version >= 9
    out = bytearray()
    write_array_len(out, len(topics), flexible)
    for name, parts in topics:
        write_string(out, name, flexible)
        write_array_len(out, len(parts), flexible)
        for p in parts:
            out += _PART.pack(p.index, p.error_code, p.base_offset, p.log_append_time)
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            if version >= 8:
                out += b"\x01" if flexible else _I32.pack(0)  # record_errors: empty
                write_string(out, p.error_message, flexible, nullable=True)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    out += _I32.pack(throttle_ms)
    if flexible:
        out.append(0)
    return bytes(out)
