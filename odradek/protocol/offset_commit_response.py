"""OffsetCommit response bodies laid out by hand: consumers commit often, and kio's general-purpose
writer was a fifth of the broker's time per commit (docs/performance.md, consumer groups).

Layout, versions 2-9 (flexible from 8)::

    [v3+ throttle_time_ms int32]
    topics: [name string, partitions: [partition_index int32, error_code int16]]

Invariants: output decodes with kio's reader for every supported version (tested); tagged fields
are always empty; topics and partitions keep the order given.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from odradek.protocol.frame import write_array_len, write_string

_I32 = struct.Struct(">i")
_PART = struct.Struct(">ih")


def encode(version: int, results: Mapping[tuple[str, int], int], *, throttle_ms: int = 0) -> bytes:
    """``results`` maps (topic, partition) to an error code; partitions are grouped under their topic."""
    flexible = version >= 8
    topics: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), error in results.items():
        topics.setdefault(topic, []).append((partition, error))
    out = bytearray()
    if version >= 3:
        out += _I32.pack(throttle_ms)
    write_array_len(out, len(topics), flexible)
    for name, parts in topics.items():
        write_string(out, name, flexible)
        write_array_len(out, len(parts), flexible)
        for partition, error in parts:
            out += _PART.pack(partition, error)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    return bytes(out)
