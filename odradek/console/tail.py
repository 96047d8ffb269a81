"""The live tail: records appended to a topic, pushed to the browser as server-sent events as they arrive.

It is woken by the broker's own notification, the one that wakes long-poll Fetch requests
(``Broker.wait_for_data``, signalled by ``Broker.notify`` on every append and transaction marker): it never
polls. The loop reads what is new in each followed partition (from where the tail started: the high watermark,
or given offsets), sends it, reads again while that made progress, and waits on the notification only once
nothing is left to read; that check and the wait's registration happen with no ``await`` in between, so an append
cannot slip through unseen.

In a cluster a partition led by another broker is followed by a task of its own: a long-poll Fetch loop to its
leader (``LONG_POLL_MS`` a request, at most ``peers.FETCH_MAX_BYTES``, read_uncommitted as the local tail), from the
leader's high watermark when the tail starts; its records are decoded by ``messages.scan``, the browser's scanner.
Its requests go through a connection pool of the tail's own, closed when the tail ends, so they never delay a page's
requests; a leader that moves is followed to its new broker (to this one: the partition is then read from the local
log, woken by this broker's notifications), waiting up to ``LEADER_MOVE_S`` for the news of a move after a refused
Fetch; one that does not answer and does not move ends the tail with a ``failure`` event. What this broker leads
stays woken by its own notifications (single node: everything).

Invariants:
- one event per record (``data:`` a JSON object: partition, offset, timestamp, key, value, headers, shown in
  the requested format), in offset order per partition;
- at most ``BATCH`` records per partition per read, so a busy topic cannot starve the loop; reads run in a
  worker thread;
- a comment line is sent every ``KEEPALIVE_S`` without data, which is also when a closed connection is noticed;
- events go out one write at a time (a lock when remote partitions are followed too), whole events per write;
- a remote partition's loop notices a gone client after each long poll (at most ``LONG_POLL_MS``) and ends, which
  ends the tail and cancels its other loops;
- the tail ends when the client goes away, the topic is deleted, the broker shuts down (``wake_all``), the console
  is stopped (its tasks are cancelled by the application's shutdown), or a read fails (a ``failure`` event says
  why).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from odradek.console.messages import Message, Page, read_partition, scan, show
from odradek.console.peers import LATEST, PeerError
from odradek.protocol.errors import KafkaError

if TYPE_CHECKING:
    from odradek.broker.broker import Broker
    from odradek.client.pool import ConnectionPool
    from odradek.console.peers import Peers

BATCH = 200
KEEPALIVE_S = 10.0
LONG_POLL_MS = 500  # a remote partition's Fetch waits this long for data; also how soon a gone client is noticed
LEADER_MOVE_S = 5.0  # a remote partition's leader that failed a Fetch: how long to wait for news of a new one


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
    request: web.Request,
    b: Broker,
    topic: str,
    partitions: list[int],
    fmt: str,
    start: dict[int, int] | None = None,
    peers: Peers | None = None,
) -> web.StreamResponse:
    """Serve the tail of ``partitions`` of ``topic`` until the client leaves (see the module's invariants); with
    ``peers`` (in a cluster) the partitions led by other brokers are followed with Fetch requests to them."""
    start = start or {}
    positions: dict[int, int] = {}
    remote: dict[int, int] = {}  # partition -> its leader
    for p in partitions:
        part = b.replicas.get(topic, p)
        if peers is not None and not (part is not None and part.is_leader):
            leader = peers.leader(topic, p)
            if leader is not None and leader != b.node_id:
                remote[p] = leader
                continue
        if part is not None:
            positions[p] = start.get(p, part.log.high_watermark)
    failure: str | None = None
    remote_at: dict[int, int] = {}
    if remote:
        assert peers is not None
        missing = {(topic, p): LATEST for p in remote if p not in start}
        found, notices = await peers.list_offsets(missing) if missing else ({}, [])
        for p in remote:
            at = start.get(p, found.get((topic, p), -1))
            if at < 0:
                failure = notices[0] if notices else f"the end offset of {topic}-{p} is unknown"
            remote_at[p] = at
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await resp.prepare(request)
    await resp.write(b": tailing " + topic.encode() + b"\n\n")
    if failure is not None:
        await _fail(resp.write, failure)
        return resp
    if not remote:
        await _follow_local(b, topic, positions, fmt, resp.write)
        return resp
    assert peers is not None
    lock = asyncio.Lock()

    async def send(data: bytes) -> None:
        async with lock:
            await resp.write(data)

    pool = peers.tail_pool()
    tasks = [asyncio.create_task(_follow_local(b, topic, positions, fmt, send))]
    tasks += [
        asyncio.create_task(_follow_remote(request, peers, pool, leader, topic, p, remote_at[p], fmt, send))
        for p, leader in remote.items()
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await pool.close()
    return resp


async def _fail(send: Callable[[bytes], Awaitable[None]], message: str) -> None:
    with contextlib.suppress(ConnectionError):
        await send(b"event: failure\ndata: " + json.dumps({"error": message}).encode() + b"\n\n")


async def _follow_local(
    b: Broker, topic: str, positions: dict[int, int], fmt: str, send: Callable[[bytes], Awaitable[None]]
) -> None:
    """Follow the local partitions at ``positions``, woken by the broker's notifications."""
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
                    await send(b"".join(event(m, fmt) for m in page.messages))
            if progressed:
                continue  # read again: more may have come while reading and writing
            # nothing new: each high watermark was looked at with no await since (reads that made no progress
            # aside), so any append from here on notifies the wait below
            waited = asyncio.get_running_loop().time()
            await b.wait_for_data(keys, int(KEEPALIVE_S * 1000))  # registered before any other await
            if asyncio.get_running_loop().time() - waited >= KEEPALIVE_S * 0.99:
                await send(b": keepalive\n\n")
    except (ConnectionResetError, ConnectionError):
        pass
    except KafkaError as e:  # the log went away under the tail (an offline directory, a corrupt batch): say so, end
        await _fail(send, e.message)


async def _moved_leader(peers: Peers, topic: str, p: int, old: int) -> int | None:
    """The partition's leader if it is no longer ``old``, waiting up to ``LEADER_MOVE_S`` for this broker's
    metadata to learn of a move (the old leader may refuse a Fetch before the news arrives here); None if it is
    still ``old`` (or unknown) then."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LEADER_MOVE_S
    while True:
        now = peers.leader(topic, p)
        if now is not None and now != old:
            return now
        if loop.time() >= deadline:
            return None
        await asyncio.sleep(0.1)


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _follow_remote(
    request: web.Request,
    peers: Peers,
    pool: ConnectionPool,
    leader: int,
    topic: str,
    p: int,
    offset: int,
    fmt: str,
    send: Callable[[bytes], Awaitable[None]],
) -> None:
    """Follow ``topic``-``p``, led by broker ``leader``, from ``offset``: long-poll Fetch requests to its leader,
    until the client goes away, the topic is deleted or the leader cannot be read (a ``failure`` event)."""
    b = peers.broker
    try:
        while not _gone(request) and not b.shutting_down and b.registry.get(topic) is not None:
            try:
                f = await peers.fetch(leader, topic, p, offset, max_wait_ms=LONG_POLL_MS, pool=pool)
            except PeerError as e:
                moved = await _moved_leader(peers, topic, p, leader)
                if moved == b.node_id:  # leadership moved here: read the local log from where the tail is
                    await _follow_local(b, topic, {p: offset}, fmt, send)
                    return
                if moved is not None:
                    leader = moved  # leadership moved: follow it to the new leader
                    continue
                await _fail(send, e.message)
                return
            if f.out_of_range:
                if offset < f.log_start_offset:  # retention went past the tail: go on from the log start
                    offset = f.log_start_offset
                    continue
                await _fail(send, f"offset {offset} of {topic}-{p} is out of range at broker {leader}")
                return
            if not f.records:
                continue
            page = Page()
            progressed = await asyncio.to_thread(
                scan, f.records, page, p, offset, f.high_watermark, BATCH, None, [], set()
            )
            if page.messages:
                await send(b"".join(event(m, fmt) for m in page.messages))
            if len(page.messages) >= BATCH:
                offset = page.next_offset
            elif progressed > offset:
                offset = min(progressed, f.high_watermark)
    except (ConnectionResetError, ConnectionError):
        pass
