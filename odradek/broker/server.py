"""The network loop: accept connections, read frames, dispatch, write responses. The only I/O wiring.

Invariants:
- Each connection reads through a ``FrameStream`` (``frame_stream.py``): bytes land, or are decrypted, straight into
  the buffers frames are cut from; responses go out through an ordinary ``asyncio.StreamWriter``.
- Requests on one connection are handled one at a time, in order, and responses go out in request
  order (as Kafka does). A handler's work is done before the next request starts; only a deferred
  response (an acks=all produce waiting for its replicas) lets the next requests start before it is sent,
  and theirs queue behind it (at most ``MAX_DEFERRED``, then the connection stops reading). Each
  connection is its own task, so a slow client only delays itself.
- A size prefix larger than ``socket.request.max.bytes`` closes the connection before any buffer
  for the frame is allocated. Every closed-on-error connection is logged with address and reason.
- Record sets in Fetch responses go from the page cache to the socket with ``sendfile``, except in responses
  of at most ``SMALL_RESPONSE`` bytes, which are read (the same bytes) and written in one piece: for them an
  extra loop turn per region costs more than the copy (acks=all waits on followers' small fetches). TLS
  connections cannot take ``sendfile``: their regions are read with ``pread`` at their own positions and
  written through the TLS layer in pieces (asyncio's fallback would read through the file's shared position).
- The HTTP listener (``http.listeners``, ``odradek/http/``) is bound right after the Kafka listeners, on this loop,
  and closed after the last connection; ``broker.serving`` (what ``/readyz`` reads) is true from the moment the
  Kafka listeners serve until shutdown begins.
- Shutdown: stop accepting, let in-flight requests finish and answer, then give each client up to
  ``SHUTDOWN_LINGER_S`` to read its last responses (requests arriving meanwhile are read and dropped,
  unanswered and unapplied) before closing; then flush and mark the logs clean. The linger matters:
  a client that reads a response and the close in one wake-up may drop the response (kafka-python 3.0
  does) and resend a request that was already applied.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from odradek.broker.authentication import IllegalState, SaslAuthentication
from odradek.broker.authentication import State as AuthState
from odradek.broker.broker import Broker
from odradek.broker.connection_limits import ConnectionLimits
from odradek.broker.context import CLOSE_AFTER_RESPONSE, PRINCIPAL, SASL, CloseConnection, RequestContext
from odradek.broker.dispatch import PendingFrame, dispatch
from odradek.broker.frame_stream import FrameStream
from odradek.broker.handlers import sasl
from odradek.broker.listener_security import ListenerSecurity, listener_security
from odradek.broker.throttle import DELAY_UNTIL, MUTED_UNTIL, Timed, charge_loop_time
from odradek.protocol.frame import SIZE, FrameError, RequestHeader, frame_size, peek_header
from odradek.security.principal import NoMatchingRule
from odradek.security.tls import ReloadingServerContext
from odradek.storage.segment import FileRegion

if TYPE_CHECKING:
    from odradek.http.listener import HttpServer

log = logging.getLogger(__name__)

_WRITE_HIGH_WATER = 1 << 20
GROUP_TICK_MS = 50
SHUTDOWN_LINGER_S = 0.25
SMALL_RESPONSE = 64 * 1024  # responses up to this size are copied and written at once instead of sendfile
TLS_READ_CHUNK = 256 * 1024  # file regions sent over TLS are read (pread) and written in pieces of this size
TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a TLS client that has not finished its handshake by then is dropped
MAX_DEFERRED = 64  # responses of one connection waiting behind a deferred one before it stops reading


class Server:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.limits = ConnectionLimits.from_config(broker.config.values, broker.clock)  # admitted on accept
        self.security: dict[str, ListenerSecurity] = listener_security(broker.config, scram=broker.credentials.lookup)
        broker.on_ip_quotas = self.limits.set_ip_quotas
        self._servers: list[asyncio.Server] = []  # one per listener, in ``listeners`` order
        self.ports: dict[str, int] = {}  # listener name -> bound port
        self._connections: dict[asyncio.Task[None], bool] = {}  # task -> busy with a request
        self._closing = False
        self._ticker: asyncio.Task[None] | None = None
        self._isr_ticker: asyncio.Task[None] | None = None
        self._group_ticker: asyncio.Task[None] | None = None
        self._group_loader: asyncio.Task[None] | None = None
        self.port: int | None = None  # the first listener's bound port
        self.http: HttpServer | None = None  # the HTTP listener (http.listeners; odradek/http/), if any
        if self.config.http_listeners:  # aiohttp is imported only by brokers that serve HTTP
            from odradek.http.listener import HttpServer

            self.http = HttpServer(broker, self.security)
        self._tls_files: list[ReloadingServerContext] = [
            s.reloading for s in self.security.values() if s.reloading is not None]
        if self.http is not None and self.http.reloading is not None:
            self._tls_files.append(self.http.reloading)

    async def start(self) -> None:
        self.broker.start()
        # Bound first (so a port 0 is known before a cluster member registers its address), served last.
        try:
            for lst in self.config.listeners:
                tls = self.security[lst.name].tls
                on_connection = functools.partial(self._on_connection, lst.name)
                server = await asyncio.get_running_loop().create_server(
                    functools.partial(FrameStream, on_connection), host=lst.host or None, port=lst.port,
                    reuse_address=True, backlog=1024, start_serving=False,
                    **({"ssl": tls, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S} if tls is not None else {}),
                )
                self._servers.append(server)
                port = server.sockets[0].getsockname()[1]
                self.ports[lst.name] = port
                self.config.bound(lst.name, port)
            if self.http is not None:  # /healthz answers (and /readyz says why not yet) while the broker joins
                await self.http.start()
                self.broker.http_urls = list(self.http.urls)
        except BaseException:
            self._close_servers()
            if self.http is not None:
                await self.http.stop()
            raise
        self.port = self.ports[self.config.listener.name]
        if self.broker.replicated:
            try:
                await self.broker.start_cluster()
            except BaseException:
                self._close_servers()
                if self.http is not None:
                    await self.http.stop()
                raise
            to_load, txns_to_load = [], []  # coordinators follow the leadership of their partitions
        else:
            to_load = self.broker.groups.start()  # their groups answer COORDINATOR_LOAD_IN_PROGRESS until loaded
            txns_to_load = self.broker.txns.start()  # likewise their transactional ids
        for server in self._servers:
            await server.start_serving()
        self.broker.serving = True
        self._ticker = asyncio.create_task(self._tick_forever())
        if self.broker.replicated:
            self._isr_ticker = asyncio.create_task(self._check_isr_forever())
        self._group_loader = asyncio.create_task(self._load_coordinators(to_load, txns_to_load))
        self._group_ticker = asyncio.create_task(self._tick_groups_forever())
        served = ", ".join(
            f"{lst.name} {lst.host or '*'}:{self.ports[lst.name]} (advertised {a.host}:{a.port}, {a.security_protocol})"
            for lst, a in zip(self.config.listeners, self.config.advertised_listeners, strict=True))
        log.info("broker %d listening on %s; data in %s", self.broker.node_id, served,
                 ", ".join(str(d) for d in self.config.log_dirs))

    def _close_servers(self) -> None:
        for server in self._servers:
            server.close()

    async def stop(self) -> None:
        """Graceful shutdown (SIGTERM/SIGINT)."""
        if self._closing:
            return
        self.broker.serving = False  # /readyz answers 503 from now on
        if self.broker.replicated:
            await self.broker.controlled_shutdown()  # still serving: clients follow the moved leaderships
        self._closing = True
        log.info("shutting down: no new connections, finishing in-flight requests")
        self._close_servers()
        for task in (self._ticker, self._group_ticker, self._group_loader, self._isr_ticker):
            if task is not None:
                task.cancel()
        self.broker.groups.shutdown()
        self.broker.txns.shutdown()
        for task, busy in list(self._connections.items()):
            if not busy:
                task.cancel()
        self.broker.wake_all()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=30)
        for server in self._servers:
            await server.wait_closed()
        if self.http is not None:
            await self.http.stop()
        if self.broker.replicated:
            await self.broker.stop_cluster()
        self.broker.stop()
        log.info("shutdown complete: logs flushed and marked clean")

    async def _check_isr_forever(self) -> None:
        """Shrink ISRs of followers that fell behind (Kafka checks every replica.lag.time.max.ms / 2)."""
        interval = max(self.config.replica_lag_time_max_ms / 2, 50) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.broker.replicas.check_isr()
            except Exception:
                log.exception("ISR check failed")

    async def _tick_forever(self) -> None:
        interval = self.config.flush_scheduler_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self.broker.tick)
            except Exception:
                log.exception("periodic log maintenance failed")
            if self._tls_files:
                try:
                    await asyncio.to_thread(self._check_tls_files)
                except Exception:
                    log.exception("checking the key store and trust store files failed")

    def _check_tls_files(self) -> None:
        """New TLS connections follow replaced key store and trust store files (a stat per file per tick)."""
        for reloading in self._tls_files:
            reloading.check()

    async def _load_coordinators(self, groups: list[int], txns: list[int]) -> None:
        """Groups first (transaction markers settle their pending offsets), then transactional ids."""
        await self.broker.groups.load(groups)
        await self.broker.txns.load(txns)

    async def _tick_groups_forever(self) -> None:
        """Coordinator timers every 50 ms: sessions, rebalances, offset retention; transaction timeouts and
        markers to retry."""
        while True:
            await asyncio.sleep(GROUP_TICK_MS / 1000)
            try:
                self.broker.groups.tick()
            except Exception:
                log.exception("group coordinator timers failed")
            try:
                self.broker.txns.tick()
            except Exception:
                log.exception("transaction coordinator timers failed")

    async def _on_connection(self, listener: str, reader: FrameStream, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        ip = str(peername[0]) if isinstance(peername, tuple) else str(peername)
        refused = self.limits.admit(ip)  # connection limits (odradek/broker/connection_limits.py)
        if refused is not None:
            log.warning("closing connection from %s: %s", peer, refused)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = False
        metrics = self.broker.metrics
        metrics.connection_opened(listener)
        sock: socket.socket | None = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state: dict[str, Any] = {}
        limit = self.config.socket_request_max_bytes
        security = self.security[listener]
        auth: SaslAuthentication | None = None
        if security.sasl is not None:
            auth = state[SASL] = SaslAuthentication(security.sasl, self.broker.clock.milliseconds)

        def make_ctx(header: RequestHeader) -> RequestContext:
            return RequestContext(self.broker, header, peer, state, listener=listener)

        later = _InOrder(self, writer, peer)
        try:
            if auth is None and security.tls is not None:  # the client certificate's principal, if any
                try:
                    principal = security.tls_principal(writer.get_extra_info("ssl_object"))
                except NoMatchingRule:
                    log.warning("closing connection from %s: no ssl.principal.mapping.rules rule matches the "
                                "subject of its certificate", peer)
                    return
                if principal is not None:
                    state[PRINCIPAL] = principal
                    log.debug("connection from %s on listener %s authenticated as User:%s (TLS client certificate)",
                              peer, listener, principal)
            while not self._closing:
                if state.get(MUTED_UNTIL):
                    await self._mute(state)
                unauthenticated = auth is not None and not auth.authenticated
                try:  # before authentication only small frames (Kafka's sasl.server.max.receive.size)
                    prefix = await reader.readexactly(4)
                    size = (frame_size(prefix, self.config.sasl_server_max_receive_size, "sasl.server.max.receive.size")
                            if unauthenticated else frame_size(prefix, limit))
                except FrameError as e:
                    log.warning("closing connection from %s: %s", peer, e)
                    return
                frame = await reader.readexactly(size)
                if auth is not None:  # the authenticate step (broker/authentication.py)
                    try:
                        if auth.bare_tokens and auth.state is AuthState.AUTHENTICATE:
                            token = sasl.bare_token(auth, frame, state, peer, listener)
                            writer.write(SIZE.pack(len(token)) + token)
                            continue
                        auth.check(peek_header(frame)[0])
                    except (IllegalState, FrameError, CloseConnection) as e:
                        if auth.state is AuthState.FAILED:
                            await asyncio.sleep(auth.settings.failed_delay_ms / 1000)
                        log.warning("closing connection from %s: %s", peer, e)
                        return
                self._connections[task] = True
                try:
                    if self.broker.quotas.enabled:  # the loop time it holds counts toward request_percentage
                        timed = Timed(self._serve(make_ctx, frame, writer, later, state))
                        await timed
                        charge_loop_time(self.broker.quotas, state, timed.seconds)
                    else:
                        await self._serve(make_ctx, frame, writer, later, state)
                except CloseConnection as e:
                    log.warning("closing connection from %s: %s", peer, e)
                    return
                if CLOSE_AFTER_RESPONSE in state:  # a failed SASL exchange, answered
                    log.warning("closing connection from %s: %s", peer, state.pop(CLOSE_AFTER_RESPONSE))
                    return
                self._connections[task] = False
        except asyncio.IncompleteReadError as e:
            if e.partial:
                log.info("connection from %s closed in the middle of a request (%d bytes)", peer, len(e.partial))
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            try:
                await later.finish()
                if self._closing:
                    await self._linger(reader)
                self._connections.pop(task, None)
                writer.close()
            finally:
                self.limits.release(ip)  # exactly once per admitted connection
                metrics.connection_closed(listener)

    async def _serve(self, make_ctx: Any, frame: bytes, writer: asyncio.StreamWriter, later: _InOrder,
                     state: dict[str, Any]) -> None:
        """One request frame: dispatched, and its response sent (or queued behind a deferred one)."""
        out = await dispatch(make_ctx, frame)
        if DELAY_UNTIL in state:  # a quota throttled this old-version request (broker/throttle.py)
            await self._throttle(state)
        if isinstance(out, list) and not later.pending:
            await self._send(writer, out)
        elif out is not None:
            await later.add(out)  # behind a deferred response: sent in turn

    @staticmethod
    async def _throttle(state: dict[str, Any]) -> None:
        """A throttled response of an old request version (its client does not back off by itself, KIP-219) is
        sent once the throttle time is over; a newer one goes at once."""
        until = state.pop(DELAY_UNTIL, 0.0)
        wait = until - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)

    @staticmethod
    async def _mute(state: dict[str, Any]) -> None:
        """The channel stays muted (nothing read from it) until its throttle time is over, as Kafka mutes it."""
        wait = state.pop(MUTED_UNTIL) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)

    @staticmethod
    async def _linger(reader: FrameStream) -> None:
        """Shutting down: wait for the client to close, or ``SHUTDOWN_LINGER_S``, so the responses already
        written are read before the connection ends. Whatever the client sends meanwhile is dropped."""
        try:
            async with asyncio.timeout(SHUTDOWN_LINGER_S):
                await reader.discard_until_eof()
        except (TimeoutError, ConnectionError, asyncio.CancelledError):
            pass

    async def _send(self, writer: asyncio.StreamWriter, chunks: list[Any]) -> None:
        loop = asyncio.get_running_loop()
        if len(chunks) > 1 and sum(c.length if isinstance(c, FileRegion) else len(c) for c in chunks) <= SMALL_RESPONSE:
            # One write: asyncio's sendfile costs an extra loop turn per region and splits the response in
            # pieces the peer (a follower waiting to acknowledge an acks=all write) can decode only at the end.
            data = b"".join(c.read_bytes() if isinstance(c, FileRegion) else c for c in chunks)
            writer.write(data)
            if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                await writer.drain()
            return
        if writer.get_extra_info("ssl_object") is not None:
            await self._send_through_tls(writer, chunks)
            return
        pending: list[bytes] = []
        for chunk in chunks:
            if isinstance(chunk, FileRegion):
                if pending:
                    writer.write(b"".join(pending))
                    pending.clear()
                await writer.drain()
                await loop.sendfile(writer.transport, chunk.file, chunk.position, chunk.length)
            else:
                pending.append(chunk)
        if pending:
            writer.write(b"".join(pending) if len(pending) > 1 else pending[0])
        if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
            await writer.drain()


    @staticmethod
    async def _send_through_tls(writer: asyncio.StreamWriter, chunks: list[Any]) -> None:
        """A TLS connection cannot take ``sendfile``: its bytes go through the TLS layer. File regions are read
        with ``pread`` (never through the file's shared position, which other readers move) in pieces of
        ``TLS_READ_CHUNK``, written as they come, with back-pressure."""
        for chunk in chunks:
            if not isinstance(chunk, FileRegion):
                writer.write(chunk)
                continue
            fd, position, end = chunk.file.fileno(), chunk.position, chunk.position + chunk.length
            while position < end:
                data = os.pread(fd, min(TLS_READ_CHUNK, end - position), position)
                if not data:  # the file is shorter than the region: a truncated segment
                    raise ConnectionError(f"segment {chunk.file.name} ends before its region does")
                writer.write(data)
                position += len(data)
                if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                    await writer.drain()
        if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
            await writer.drain()


class _InOrder:
    """The responses of one connection from its first deferred one on, sent in request order by one writer task.

    The writer waits for the head's futures (until its deadline), encodes it, and goes on while the next
    responses are ready, writing consecutive small ones in one piece: one HW advance completes many waiting
    produce requests, and one write (system call) answers them all. At most ``MAX_DEFERRED`` responses
    are queued: beyond that the connection stops reading until the writer makes room. A response that
    fails to complete closes the connection (as a failing request does); those behind it are dropped."""

    def __init__(self, server: Server, writer: asyncio.StreamWriter, peer: str) -> None:
        self.server = server
        self.writer = writer
        self.peer = peer
        self.queue: deque[tuple[list[Any] | PendingFrame, float]] = deque()  # (response, deadline)
        self._task: asyncio.Task[None] | None = None
        self._room: asyncio.Future[None] | None = None

    @property
    def pending(self) -> bool:
        return bool(self.queue)

    async def add(self, response: list[Any] | PendingFrame) -> None:
        loop = asyncio.get_running_loop()
        while len(self.queue) >= MAX_DEFERRED:
            self._room = loop.create_future()
            await self._room
        if self.writer.is_closing():
            return
        deadline = loop.time() + response.deferred.timeout_s if isinstance(response, PendingFrame) else 0.0
        self.queue.append((response, deadline))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._write_all())

    async def _write_all(self) -> None:
        loop = asyncio.get_running_loop()
        pieces: list[bytes] = []  # ready small responses, written together
        try:
            while self.queue:
                response, deadline = self.queue[0]
                if isinstance(response, PendingFrame):
                    waits = response.deferred.waits
                    waiting = [f for f in waits if not f.done()]
                    if waiting:
                        if pieces:
                            self.writer.write(b"".join(pieces))
                            pieces.clear()
                        await asyncio.wait(waiting, timeout=max(deadline - loop.time(), 0.0))
                    outcomes = [f.result() if f.done() and not f.cancelled() else None for f in waits]
                    for f in waits:
                        f.cancel()  # no-op for the done ones
                    chunks = response.complete(outcomes)
                else:
                    chunks = response
                self.queue.popleft()
                if self._room is not None and not self._room.done():
                    self._room.set_result(None)
                if chunks is None:
                    continue
                if all(isinstance(c, bytes | bytearray | memoryview) for c in chunks):
                    pieces.extend(chunks)
                    if sum(map(len, pieces)) <= SMALL_RESPONSE:
                        continue
                    self.writer.write(b"".join(pieces))
                    pieces.clear()
                else:
                    if pieces:
                        self.writer.write(b"".join(pieces))
                        pieces.clear()
                    await self.server._send(self.writer, chunks)
                if self.writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                    await self.writer.drain()
            if pieces:
                self.writer.write(b"".join(pieces))
        except CloseConnection as e:
            log.warning("closing connection from %s: %s", self.peer, e)
            self._abandon()
        except ConnectionError:
            self._abandon()
        except Exception:
            log.exception("closing connection from %s after an internal error", self.peer)
            self._abandon()

    def _abandon(self) -> None:
        self.writer.close()
        for response, _ in self.queue:
            if isinstance(response, PendingFrame):
                for f in response.deferred.waits:
                    f.cancel()
        self.queue.clear()
        if self._room is not None and not self._room.done():
            self._room.set_result(None)

    async def finish(self) -> None:
        """Let the queued responses be sent (or fail) before the connection closes."""
        if self._task is not None:
            await asyncio.wait([self._task])
