"""Fetch response bodies laid out by hand, so record sets can be file regions sent with sendfile.

Every other response is serialized by kio; Fetch is the one whose bulk is record data that must go
from the page cache to the socket without passing through Python memory. The encoder emits chunks:
``bytes`` for the framing it writes and, for each partition's records, the caller's region object
(anything with a ``length``) after its length prefix.

Layout, versions 4-17 (flexible from 12: compact arrays/strings/records and tagged fields)::

    [v1+ throttle_time_ms int32] [v7+ error_code int16, session_id int32]
    responses: [topic (v<13: string, v13+: uuid), partitions: [
        partition_index int32, error_code int16, high_watermark int64, last_stable_offset int64,
        [v5+ log_start_offset int64], aborted_transactions nullable [producer_id int64, first_offset int64],
        [v11+ preferred_read_replica int32], records nullable bytes]]

Partition tagged fields (v12+): tag 0 ``diverging_epoch`` {epoch int32, end_offset int64} for a follower
whose log diverges from the leader's (KIP-320), tag 1 ``current_leader`` {leader_id int32, leader_epoch
int32} with NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH (KIP-951); each written only when set.

Invariants: the sum of chunk lengths is exactly the body size; other tagged fields are always empty.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from odradek.protocol.frame import write_array_len, write_uvarint


class Region(Protocol):
    @property
    def length(self) -> int: ...


@dataclass(slots=True)
class PartitionData:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    records: Any = None  # a Region, bytes, or None for an empty record set
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch)
    preferred_read_replica: int = -1  # KIP-392: fetch from this replica instead (v11+)


@dataclass(slots=True)
class TopicData:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionData] = field(default_factory=list)


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_FIXED = struct.Struct(">ihqqq")  # index, error, hw, lso, log start
_PART_FIXED_V4 = struct.Struct(">ihqq")
_ABORTED = struct.Struct(">qq")
_EPOCH_END = struct.Struct(">iqB")  # epoch, end offset, empty tagged fields
_LEADER = struct.Struct(">iiB")  # leader id, leader epoch, empty tagged fields


def encode(
    version: int, topics: list[TopicData], *, error_code: int = 0, session_id: int = 0, throttle_ms: int = 0
) -> list[Any]:
    """The body of a FetchResponse of ``version`` as chunks (bytes and regions)."""
    flexible = version >= 12
    chunks: list[Any] = []
    out = bytearray()
    out += _I32.pack(throttle_ms)
    if version >= 7:
        out += _I16.pack(error_code)
        out += _I32.pack(session_id)
    write_array_len(out, len(topics), flexible)
    for t in topics:
        if version >= 13:
            out += t.topic_id.bytes
        else:
            name = t.name.encode()
            if flexible:
                write_uvarint(out, len(name) + 1)
            else:
                out += _I16.pack(len(name))
            out += name
        write_array_len(out, len(t.partitions), flexible)
        for p in t.partitions:
            if version >= 5:
                out += _PART_FIXED.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                                        p.log_start_offset)
            else:
                out += _PART_FIXED_V4.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                out += b"\x00" if flexible else _I32.pack(-1)
            else:
                write_array_len(out, len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    out += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        out.append(0)
            if version >= 11:
                out += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                size = 0
            else:
                size = len(records) if isinstance(records, bytes | bytearray) else records.length
            if flexible:
                write_uvarint(out, size + 1)
            else:
                out += _I32.pack(size)
            if size:
                if isinstance(records, bytes | bytearray):
                    out += records
                else:
                    chunks.append(bytes(out))
                    out = bytearray()
                    chunks.append(records)
            if flexible:
                _partition_tags(out, p)
        if flexible:
            out.append(0)  # topic tagged fields
    if flexible:
        out.append(0)  # top-level tagged fields
    chunks.append(bytes(out))
    return chunks


def _partition_tags(out: bytearray, p: PartitionData) -> None:
    tags = []
    if p.diverging_epoch is not None:
        tags.append((0, _EPOCH_END.pack(p.diverging_epoch[0], p.diverging_epoch[1], 0)))
    if p.current_leader is not None:
        tags.append((1, _LEADER.pack(p.current_leader[0], p.current_leader[1], 0)))
    write_uvarint(out, len(tags))
    for tag, data in tags:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data
