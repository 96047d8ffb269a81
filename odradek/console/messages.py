"""The console's message browser and producer: records of a partition read from an offset or a timestamp,
filtered by key, value or header, and one record produced from a form.

Reading goes through ``Log.read`` (whole batches up to the high watermark, what a read_uncommitted consumer may
see, or up to the last stable offset without aborted transactions, what a read_committed one sees) and the batch
scanner ``records.iter_batches`` / ``decode_records``, as the tools do; control batches
(transaction markers) are skipped. It reads files (``pread``), so callers run it off the event loop
(``asyncio.to_thread``); ``Log`` reads take no lock and see an immutable segment list, so that is safe. A
partition led by another broker is read the same way from Fetch answers of its leader (``read_remote``, the
requests sent by ``peers.py``): the same batch scanner (``scan``), the same page rules.

Invariants:
- A page holds at most ``limit`` records, in offset order per partition; ``next_offset`` is where the next page
  of that partition starts (the offset after the last record looked at, matching or not).
- A filtered read stops after ``max_scan_bytes`` of batches even with fewer than ``limit`` matches, so one request
  never scans a whole log; the page says where it stopped.
- Producing appends one CreateTime batch as the partition's leader with acks=1 (``ReplicaManager.append``, which
  wakes long polls and live tails); internal topics are refused as Produce refuses them. Without a partition a
  keyed record goes where Kafka's default partitioner puts it (murmur2 of the key), an unkeyed one to a random one.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.protocol.batch import CONTROL_BIT, TRANSACTIONAL_BIT
from odradek.protocol.errors import InvalidTopicError, UnknownTopicError
from odradek.protocol.records import RecordInput, build_batch, decode_records, iter_batches

if TYPE_CHECKING:
    from odradek.broker.broker import Broker
    from odradek.console.peers import Fetched
    from odradek.storage.log import Log

READ_CHUNK = 1 << 20  # bytes of batches read at a time
MAX_SCAN_BYTES = 32 << 20  # a filtered page stops after this much


@dataclass(frozen=True, slots=True)
class Message:
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class Filter:
    """Substrings to look for (None: anything): in the key, in the value, and in a header written
    ``name`` or ``name=value``. Bytes are compared as UTF-8 text (undecodable bytes replaced)."""

    key: str | None = None
    value: str | None = None
    header: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.key or self.value or self.header)

    def matches(self, m: Message) -> bool:
        if self.key and self.key not in _text(m.key):
            return False
        if self.value and self.value not in _text(m.value):
            return False
        if self.header:
            name, sep, wanted = self.header.partition("=")
            if not any(h == name and (not sep or wanted in _text(v)) for h, v in m.headers):
                return False
        return True


@dataclass(slots=True)
class Page:
    messages: list[Message] = field(default_factory=list)
    next_offset: int = 0
    end_offset: int = 0  # the high watermark when read
    stopped_early: bool = False  # a filtered scan hit max_scan_bytes


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", "replace")


def read_partition(
    lg: Log,
    partition: int,
    start: int,
    limit: int,
    filt: Filter | None = None,
    *,
    committed: bool = False,
    max_scan_bytes: int = MAX_SCAN_BYTES,
) -> Page:
    """Up to ``limit`` records of ``lg`` from ``start`` (clamped into the log) below its high watermark, or with
    ``committed`` what a read_committed consumer gets: below the last stable offset, aborted transactions'
    records left out (the consumer's rule: a producer's transactional batches are skipped from the first offset
    of its aborted transaction to its marker). Blocking."""
    end = lg.last_stable_offset if committed else lg.high_watermark
    offset = min(max(start, lg.log_start_offset), end)
    page = Page(next_offset=offset, end_offset=end)
    pending = sorted(lg.aborted_transactions(offset, end), key=lambda a: a[1]) if committed else []
    aborting: set[int] = set()
    scanned = 0
    filt = None if filt is None or filt.empty else filt
    while offset < end and len(page.messages) < limit:
        if filt is not None and scanned >= max_scan_bytes:
            page.stopped_early = True
            break
        region = lg.read(offset, READ_CHUNK, max_offset=end)
        if region is None:
            break
        data = region.read_bytes()
        scanned += len(data)
        progressed = scan(data, page, partition, offset, end, limit, filt, pending, aborting)
        if len(page.messages) >= limit:
            return page
        if progressed <= offset:
            break
        offset = progressed
    page.next_offset = min(offset, end)
    return page


def scan(
    data: bytes,
    page: Page,
    partition: int,
    offset: int,
    end: int,
    limit: int,
    filt: Filter | None,
    pending: list[tuple[int, int]],
    aborting: set[int],
) -> int:
    """Add to ``page`` the records of ``data``'s batches in ``[offset, end)`` that ``filt`` lets through, until it
    holds ``limit`` (then ``page.next_offset`` is set after the last one). ``pending``: aborted transactions
    ``(producer_id, first_offset)`` not yet reached, by first offset; ``aborting``: producers inside an aborted
    transaction (both updated). Returns the offset after the last batch looked at (``offset`` when none was)."""
    view = memoryview(data)
    progressed = offset
    for pos, header in iter_batches(data, allow_partial_tail=True):
        progressed = header.next_offset
        while pending and pending[0][1] <= header.last_offset:
            aborting.add(pending.pop(0)[0])
        if header.attributes & CONTROL_BIT:
            aborting.discard(header.producer_id)  # its marker ends the aborted transaction
            continue
        if header.attributes & TRANSACTIONAL_BIT and header.producer_id in aborting:
            continue
        for r in decode_records(view[pos : pos + header.size]):
            if r.offset < offset or r.offset >= end:
                continue
            m = Message(partition, r.offset, r.timestamp, r.key, r.value, tuple((h[0], h[1]) for h in r.headers))
            if filt is None or filt.matches(m):
                page.messages.append(m)
                if len(page.messages) >= limit:
                    page.next_offset = r.offset + 1
                    return progressed
    return progressed


async def read_remote(
    fetch: Callable[[int], Awaitable[Fetched]],
    partition: int,
    start: int,
    limit: int,
    filt: Filter | None = None,
    *,
    committed: bool = False,
    max_scan_bytes: int = MAX_SCAN_BYTES,
) -> Page:
    """``read_partition`` of a partition led by another broker: ``fetch(offset)`` is one Fetch to its leader (at
    the isolation level of ``committed``). The page ends at the high watermark (or last stable offset) of the first
    answer; ``start`` is clamped into the leader's log as ``read_partition`` clamps it; aborted transactions are
    those the answers list. Decoding runs in a worker thread. Raises ``PeerError``s."""
    offset = max(start, 0)
    f = await fetch(offset)
    end = f.last_stable_offset if committed else f.high_watermark
    if f.out_of_range:
        clamped = min(max(offset, f.log_start_offset), end)
        if clamped != offset and clamped < end:
            offset = clamped
            f = await fetch(offset)
            end = min(end, f.last_stable_offset if committed else f.high_watermark)
        else:
            offset = clamped
    page = Page(next_offset=offset, end_offset=end)
    pending: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    aborting: set[int] = set()
    scanned = 0
    filt = None if filt is None or filt.empty else filt
    while offset < end and len(page.messages) < limit and not f.out_of_range:
        if filt is not None and scanned >= max_scan_bytes:
            page.stopped_early = True
            break
        if not f.records:
            break
        scanned += len(f.records)
        fresh = [a for a in f.aborted if a not in seen] if committed else []
        if fresh:
            seen.update(fresh)
            pending = sorted(pending + fresh, key=lambda a: a[1])
        progressed = await asyncio.to_thread(
            scan, f.records, page, partition, offset, end, limit, filt, pending, aborting
        )
        if len(page.messages) >= limit:
            return page
        if progressed <= offset:
            break
        offset = progressed
        if offset < end and not (filt is not None and scanned >= max_scan_bytes):
            f = await fetch(offset)
    page.next_offset = min(offset, end)
    return page


def offset_for_timestamp(lg: Log, timestamp: int) -> int:
    """The first offset whose record's timestamp is >= ``timestamp`` (ListOffsets' rule), else the high watermark.
    Blocking."""
    found = lg.offset_for_timestamp(timestamp)
    return found.offset if found is not None and found.offset < lg.high_watermark else lg.high_watermark


# -- how bytes are shown ------------------------------------------------------------------------------

FORMATS = ("text", "json", "hex")


def show(data: bytes | None, fmt: str, *, limit: int = 4096) -> str:
    """``data`` for display: UTF-8 text, indented JSON (text when it is not JSON) or hex; long values cut."""
    if data is None:
        return "null"
    cut = data[:limit]
    if fmt == "hex":
        out = cut.hex(" ")
    elif fmt == "json":
        try:
            out = json.dumps(json.loads(data), indent=2, ensure_ascii=False)
            cut = data
        except ValueError:
            out = _text(cut)
    else:
        out = _text(cut)
    return out + (f" … ({len(data)} bytes)" if len(cut) < len(data) else "")


# -- producing ------------------------------------------------------------------------------------------


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (``Utils.murmur2``), as a signed 32-bit value."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length // 4
    for i in range(whole):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = data[4 * whole :]
    if len(rest) >= 3:
        h ^= rest[2] << 16
    if len(rest) >= 2:
        h ^= rest[1] << 8
    if rest:
        h ^= rest[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def default_partition(key: bytes | None, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record (positive murmur2 modulo the count); random without a key."""
    if key is None:
        return random.randrange(partitions)
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def produce(
    b: Broker,
    topic: str,
    partition: int | None,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...] = (),
) -> tuple[int, int]:
    """Append one record as the partition's leader; its (partition, offset). Raises ``KafkaError``s."""
    known = b.registry.get(topic)
    if known is None:
        raise UnknownTopicError(f"topic '{topic}' does not exist")
    if known.internal:
        raise InvalidTopicError(f"topic {topic} is internal to the broker: clients cannot produce to it")
    p = default_partition(key, known.partitions) if partition is None else partition
    if not 0 <= p < known.partitions:
        raise UnknownTopicError(f"topic '{topic}' has no partition {p}")
    batch = build_batch([RecordInput(key, value, headers=headers)])
    _, info = b.replicas.append(topic, p, batch, required_acks=1)
    return p, info.first_offset


def parse_time(text: str) -> int:
    """Epoch milliseconds, or an ISO 8601 date-time (``2026-01-31T12:00``, with Z or +01:00 for a zone; the
    server's local time without) → epoch milliseconds. ``ConsoleError`` otherwise."""
    from odradek.cli._client import CliError
    from odradek.cli.groups_reset import parse_datetime
    from odradek.console.errors import ConsoleError

    t = text.strip()
    if t.lstrip("-").isdigit():
        return int(t)
    try:
        return parse_datetime(t)
    except CliError:
        raise ConsoleError(f"{text!r} is neither epoch milliseconds nor a date-time like 2026-01-31T12:00") from None
