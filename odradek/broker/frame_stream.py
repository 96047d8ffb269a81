"""A connection's incoming bytes, read straight into the buffers frames are cut from (an asyncio ``BufferedProtocol``).

asyncio's ``StreamReader`` receives each chunk as a new ``bytes`` object (over TLS: one decrypted piece of up to
16 KiB each, joined), appends it to its buffer and copies every ``readexactly`` out again. Here the transport reads
(or, over TLS, decrypts) into memory handed out by ``get_buffer``: small frames come out of one reusable receive
buffer, and a large frame gets a buffer of its own, which the transport fills directly; the frame is then one copy
away from the wire (the ``bytes`` handed to the dispatcher).

Invariants:
- ``get_buffer`` never returns an empty buffer (asyncio treats a 0-byte TLS read as the peer's close_notify): a
  receive buffer holding ``_PAUSE_AT`` or more unread bytes pauses reading, and grows if a transport still asks.
- While a large read is in progress its buffer is filled exactly: the transport is never offered more than the
  bytes still missing, so nothing of the next frame lands in it; the moment it is full, the receive buffer takes
  over (the transport may read again before the reader wakes).
- Bytes are delivered in order, each once; ``readexactly`` raises ``asyncio.IncompleteReadError`` (with the bytes
  that did arrive) when the peer closes first, ``ConnectionResetError`` when the connection was lost with an error.
- The receive buffer starts at ``_FIRST_BUFFER`` and doubles, up to ``_RECEIVE_BUFFER``, each time a read fills
  all the room it was offered: a busy connection reads in large pieces, an idle one holds little memory. Once
  ``_QUIET_READS`` reads in a row brought less than ``_FIRST_BUFFER`` each, the buffer goes back to
  ``_FIRST_BUFFER`` the next time it is empty (a new one: no view of the old one is ever resized), so a connection
  that was busy and is now quiet gives its memory back.
- Reading is paused while nobody waits and ``_PAUSE_AT`` bytes are buffered (a muted or busy connection does not
  buffer without bound), and resumed when a reader consumes them.
- Writing goes through an ordinary ``asyncio.StreamWriter`` on this protocol (``FlowControlMixin`` gives it
  ``drain``); one coroutine per connection (``on_connection``) is started once the connection is made (after the
  TLS handshake on a TLS listener).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

_FIRST_BUFFER = 16 * 1024  # an idle connection's receive buffer (a thousand idle clients hold 16 MiB)
_RECEIVE_BUFFER = 256 * 1024  # the receive buffer's size once reads fill what it offers
_PAUSE_AT = _RECEIVE_BUFFER  # unread bytes at which reading pauses until a reader takes them
_OWN_BUFFER_FROM = 64 * 1024  # reads at least this large get a buffer of their own, filled by the transport
_QUIET_READS = 32  # small reads in a row after which a grown receive buffer is given back

OnConnection = Callable[["FrameStream", asyncio.StreamWriter], Awaitable[None]]


class FrameStream(asyncio.streams.FlowControlMixin, asyncio.BufferedProtocol):
    def __init__(self, on_connection: OnConnection) -> None:
        super().__init__(asyncio.get_running_loop())
        self._on_connection = on_connection
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self._buf = bytearray(_FIRST_BUFFER)
        self._offered = 0  # the room the last get_buffer offered in the receive buffer
        self._grow = False  # the last read filled that room: offer more next time
        self._quiet = 0  # reads in a row that brought less than _FIRST_BUFFER
        self._start = 0  # unread bytes are _buf[_start:_end]
        self._end = 0
        self._own: bytearray | None = None  # the large read in progress, filled up to _own_filled
        self._own_filled = 0
        self._discard = False  # shutting down: whatever arrives is dropped
        self._eof = False
        self._error: str | None = None  # why the connection was lost (text only: the exception's traceback would
        # keep the transport's frame, and with it a view of the receive buffer, which could then not be resized)
        self._waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._closed: asyncio.Future[None] = self._loop.create_future()

    # -- the transport's side -------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        writer = asyncio.StreamWriter(transport, self, None, self._loop)  # type: ignore[arg-type]
        self.task = self._loop.create_task(self._on_connection(self, writer))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._own is not None:
            return memoryview(self._own)[self._own_filled:]
        if self._grow:
            self._grow = False
            if len(self._buf) < _RECEIVE_BUFFER:
                self._double()
        elif self._quiet >= _QUIET_READS and self._end == 0 and len(self._buf) > _FIRST_BUFFER:
            self._buf = bytearray(_FIRST_BUFFER)  # empty and quiet: give the grown buffer back
            self._quiet = 0
        if self._end == len(self._buf):
            self._make_room()
        self._offered = len(self._buf) - self._end
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._own is not None:
            self._own_filled += nbytes
            if self._own_filled == len(self._own):  # complete: what comes next goes to the receive buffer
                self._own = None
                self._wake()
            return
        if self._discard:
            return
        self._grow = nbytes == self._offered
        self._quiet = self._quiet + 1 if nbytes < _FIRST_BUFFER else 0
        self._end += nbytes
        self._wake()
        if self._end - self._start >= _PAUSE_AT and self._waiter is None:
            self._pause()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._eof = True
        if exc is not None:
            self._error = f"{type(exc).__name__}: {exc}"
        self._wake()
        if not self._closed.done():
            self._closed.set_result(None)

    def _get_close_waiter(self, stream: Any) -> asyncio.Future[None]:  # StreamWriter.wait_closed
        return self._closed

    # -- the reader's side ----------------------------------------------------------------------------------

    async def readexactly(self, n: int) -> bytes:
        """The next ``n`` bytes."""
        if self._end - self._start >= n:
            return self._take(n)
        if n >= _OWN_BUFFER_FROM:
            return await self._read_own(n)
        if self._start + n > len(self._buf):
            self._make_room()
            while len(self._buf) < n:  # a frame under _OWN_BUFFER_FROM larger than the buffer so far
                self._double()
        while self._end - self._start < n:
            await self._wait()
            if self._eof and self._end - self._start < n:
                partial = self._take(self._end - self._start)
                self._raise_closed(partial, n)
        return self._take(n)

    async def discard_until_eof(self) -> None:
        """Drop everything the peer sends from now on, and return once it closes."""
        self._discard = True
        self._start = self._end = 0
        self._resume()
        while not self._eof:
            await self._wait()

    async def _read_own(self, n: int) -> bytes:
        own = bytearray(n)
        have = self._end - self._start
        own[:have] = memoryview(self._buf)[self._start:self._end]
        self._start = self._end = 0
        self._own_filled = have
        self._own = own if have < n else None
        try:
            while self._own is not None:
                await self._wait()
                if self._eof and self._own is not None:
                    self._raise_closed(bytes(own[:self._own_filled]), n)
        finally:
            self._own = None
        return bytes(own)

    def _take(self, n: int) -> bytes:
        data = bytes(memoryview(self._buf)[self._start:self._start + n])
        self._start += n
        if self._start == self._end:
            self._start = self._end = 0
        if self._reading_paused and self._end - self._start < _PAUSE_AT:
            self._resume()
        return data

    def _raise_closed(self, partial: bytes, expected: int) -> None:
        if self._error is not None:
            raise ConnectionResetError(f"connection lost: {self._error}")
        raise asyncio.IncompleteReadError(partial, expected)

    async def _wait(self) -> None:
        if self._eof:
            return
        self._resume()
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _make_room(self) -> None:
        """Move the unread bytes to the front; grow the buffer if they fill it."""
        unread = self._end - self._start
        if self._start:
            self._buf[:unread] = self._buf[self._start:self._end]
            self._start, self._end = 0, unread
        if unread == len(self._buf):
            self._double()

    def _double(self) -> None:
        self._buf.extend(bytes(len(self._buf)))

    def _pause(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.transport.is_closing():
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self._reading_paused and self.transport is not None and not self.transport.is_closing():
            self._reading_paused = False
            self.transport.resume_reading()
