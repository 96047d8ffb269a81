"""The live tail: records appended to a topic, pushed to the browser as server-sent events as they arrive.

It is woken by the broker's own notification, the one that wakes long-poll Fetch requests
(``Broker.wait_for_data``, signalled by ``Broker.notify`` on every append and transaction marker): it never
polls. The loop reads what is new in each followed partition (from where the tail started: the high watermark,
or given offsets), sends it, reads again while that made progress, and waits on the notification only once
nothing is left to read; that check and the wait's registration happen with no ``await`` in between, so an append
cannot slip through unseen.

Invariants:
- one event per record (``data:`` a JSON object: partition, offset, timestamp, key, value, headers, shown in
  the requested format), in offset order per partition;
- at most ``BATCH`` records per partition per read, so a busy topic cannot starve the loop; reads run in a
  worker thread;
- a comment line is sent every ``KEEPALIVE_S`` without data, which is also when a closed connection is noticed;
- the tail ends when the client goes away, the topic is deleted, the broker shuts down (``wake_all``), the console
  is stopped (its tasks are cancelled by the application's shutdown), or a read fails (a ``failure`` event says
  why).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING

from aiohttp import web

from odradek.console.messages import Message, read_partition, show
from odradek.protocol.errors import KafkaError

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

BATCH = 200
KEEPALIVE_S = 10.0


def event(m: Message, fmt: str) -> bytes:
    doc = {
        "partition": m.partition,
        "offset": m.offset,
        "timestamp": m.timestamp,
        "key": show(m.key, fmt),
        "value": show(m.value, fmt),
        "headers": [[k, show(v, fmt)] for k, v in m.headers],
    }
    return b"data: " + json.dumps(doc, ensure_ascii=False).encode() + b"\n\n"


async def stream(
    request: web.Request, b: Broker, topic: str, partitions: list[int], fmt: str, start: dict[int, int] | None = None
) -> web.StreamResponse:
    """Serve the tail of ``partitions`` of ``topic`` until the client leaves (see the module's invariants)."""
    positions: dict[int, int] = {}
    for p in partitions:
        part = b.replicas.get(topic, p)
        if part is not None:
            positions[p] = (start or {}).get(p, part.log.high_watermark)
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await resp.prepare(request)
    await resp.write(b": tailing " + topic.encode() + b"\n\n")
    keys = [(topic, p) for p in positions]
    try:
        while not b.shutting_down and b.registry.get(topic) is not None:
            progressed = False
            for p, offset in list(positions.items()):
                part = b.replicas.get(topic, p)
                if part is None or part.log.high_watermark <= offset:
                    continue
                page = await asyncio.to_thread(read_partition, part.log, p, offset, BATCH)
                progressed |= page.next_offset > offset
                positions[p] = page.next_offset
                if page.messages:
                    await resp.write(b"".join(event(m, fmt) for m in page.messages))
            if progressed:
                continue  # read again: more may have come while reading and writing
            # nothing new: each high watermark was looked at with no await since (reads that made no progress
            # aside), so any append from here on notifies the wait below
            waited = asyncio.get_running_loop().time()
            await b.wait_for_data(keys, int(KEEPALIVE_S * 1000))  # registered before any other await
            if asyncio.get_running_loop().time() - waited >= KEEPALIVE_S * 0.99:
                await resp.write(b": keepalive\n\n")
    except (ConnectionResetError, ConnectionError):
        pass
    except KafkaError as e:  # the log went away under the tail (an offline directory, a corrupt batch): say so, end
        with contextlib.suppress(ConnectionError):
            await resp.write(b"event: failure\ndata: " + json.dumps({"error": e.message}).encode() + b"\n\n")
    return resp
