"""Connections to other brokers by broker id: created on demand, replaced after an error, with backoff.

The pool asks ``resolve(broker_id)`` (backed by the live cluster metadata) for a broker's address on
every send, so a broker that re-registered elsewhere is reached at its new address.

Invariants:
- At most one connection per broker id; concurrent sends to one broker share it (pipelined) and
  wait for one connect, never open two.
- A connection that closed (timeout, socket error, ``drop``) is never used again; the next send opens
  a new one. A connection whose broker's resolved address changed is closed and replaced.
- Reconnects back off as Kafka clients do (``reconnect.backoff.ms`` 50 doubling per failed attempt
  up to ``reconnect.backoff.max.ms`` 1000, each with ±20% jitter); a successful connect resets it,
  and so does a new address. A send waits out the remaining backoff (at most the maximum) before it
  connects, so callers may simply retry. Worst case for one send: backoff + ``connect_timeout_ms``
  + the request's timeout.
- Requests are never retried here: whether a failed request may be repeated is the caller's call.
- ``ReconnectBackoff`` is pure: it takes ``now_ms`` and a random draw, so its schedule is testable.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.client.connection import (
    DEFAULT_CONNECT_TIMEOUT_MS,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_REQUEST_TIMEOUT_MS,
    BrokerConnection,
    BrokerConnectionError,
    ClientSecurity,
)
from odradek.clock import Clock

RECONNECT_BACKOFF_MS = 50  # reconnect.backoff.ms
RECONNECT_BACKOFF_MAX_MS = 1000  # reconnect.backoff.max.ms
RECONNECT_BACKOFF_JITTER = 0.2  # Kafka's CommonClientConfigs.RECONNECT_BACKOFF_JITTER

Resolver = Callable[[int], tuple[str, int] | None]


class BrokerNotAvailableError(Exception):
    """The broker id has no known address in the live metadata (Kafka's BROKER_NOT_AVAILABLE, code 8)."""

    code = 8

    def __init__(self, broker_id: int) -> None:
        super().__init__(f"broker {broker_id} has no registered address in the cluster metadata; it is down or "
                         "not yet registered: retry after the metadata lists it")
        self.broker_id = broker_id


@dataclass(slots=True)
class ReconnectBackoff:
    """Exponential backoff between connection attempts to one address (pure: time and randomness are given)."""

    initial_ms: int = RECONNECT_BACKOFF_MS
    max_ms: int = RECONNECT_BACKOFF_MAX_MS
    jitter: float = RECONNECT_BACKOFF_JITTER
    failures: int = 0
    next_attempt_ms: int = field(default=0)

    def delay_ms(self, now_ms: int) -> int:
        """How long to wait before the next attempt (never more than one maximum backoff)."""
        ceiling = int(self.max_ms * (1 + self.jitter))
        return max(0, min(self.next_attempt_ms - now_ms, ceiling))

    def failed(self, now_ms: int, draw: float) -> int:
        """Record a failed attempt at ``now_ms``; ``draw`` in [0, 1) picks the jitter. Returns the backoff."""
        base = min(self.initial_ms * 2**self.failures, self.max_ms)
        backoff = int(base * (1 + self.jitter * (2 * draw - 1)))
        self.failures += 1
        self.next_attempt_ms = now_ms + backoff
        return backoff

    def succeeded(self) -> None:
        self.failures = 0
        self.next_attempt_ms = 0


class _MonotonicClock:
    def milliseconds(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ConnectionPool:
    """Connections to other brokers by broker id, created on demand, replaced after an error, with reconnect
    backoff (reconnect.backoff.ms 50 growing to reconnect.backoff.max.ms 1000, as Kafka clients).

    ``clock`` must be monotonic (the default is); ``draw`` gives the jitter's random numbers.
    """

    def __init__(self, *, client_id: str, resolve: Resolver,
                 connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
                 request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 reconnect_backoff_ms: int = RECONNECT_BACKOFF_MS,
                 reconnect_backoff_max_ms: int = RECONNECT_BACKOFF_MAX_MS,
                 clock: Clock | None = None,
                 draw: Callable[[], float] = random.random,
                 security: ClientSecurity | None = None) -> None:
        self.client_id = client_id
        self.security = security
        self._resolve = resolve
        self._connect_timeout_ms = connect_timeout_ms
        self._request_timeout_ms = request_timeout_ms
        self._max_response_bytes = max_response_bytes
        self._backoff_ms = reconnect_backoff_ms
        self._backoff_max_ms = reconnect_backoff_max_ms
        self._clock: Clock = clock if clock is not None else _MonotonicClock()
        self._draw = draw
        self._connections: dict[int, BrokerConnection] = {}
        self._backoffs: dict[int, tuple[tuple[str, int], ReconnectBackoff]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._closed = False

    async def send(self, broker_id: int, api_key: int, request: Any, *, version: int | None = None,
                   timeout_ms: int | None = None) -> Any:
        """Send ``request`` to ``broker_id`` (see ``BrokerConnection.send``) over its pooled connection.

        Raises ``BrokerNotAvailableError`` if the id resolves to no address, ``BrokerConnectionError``
        if connecting fails or the connection breaks (the next send reconnects, after backoff).
        """
        connection = await self.connection(broker_id)
        try:
            return await connection.send(api_key, request, version=version, timeout_ms=timeout_ms)
        except BrokerConnectionError:
            if not connection.connected:
                self._forget(broker_id, connection, failed=True)
            raise

    async def connection(self, broker_id: int) -> BrokerConnection:
        """The open connection to ``broker_id``, connecting (after any backoff) if there is none."""
        address = self._address(broker_id)
        lock = self._locks.setdefault(broker_id, asyncio.Lock())
        async with lock:
            address = self._address(broker_id)  # it may have changed while we waited for the lock
            current = self._connections.get(broker_id)
            if current is not None:
                if current.connected and current.address == address:
                    return current
                self._forget(broker_id, current, failed=False)
                if current.address != address:
                    current.abort(f"broker {broker_id} moved to {address[0]}:{address[1]}")
                await current.close()
            backoff = self._backoff_for(broker_id, address)
            delay = backoff.delay_ms(self._clock.milliseconds())
            if delay > 0:
                await asyncio.sleep(delay / 1000)
            connection = BrokerConnection(address[0], address[1], client_id=self.client_id,
                                          connect_timeout_ms=self._connect_timeout_ms,
                                          request_timeout_ms=self._request_timeout_ms,
                                          max_response_bytes=self._max_response_bytes, security=self.security)
            try:
                await connection.connect()
            except BrokerConnectionError:
                backoff.failed(self._clock.milliseconds(), self._draw())
                raise
            if self._closed:
                await connection.close()
                raise BrokerConnectionError(address[0], address[1], "the connection pool was closed")
            backoff.succeeded()
            self._connections[broker_id] = connection
            return connection

    def drop(self, broker_id: int) -> None:
        """Close the connection to ``broker_id`` now (its in-flight requests fail); the next send reconnects."""
        connection = self._connections.pop(broker_id, None)
        if connection is not None:
            connection.abort("connection dropped by this broker's connection pool")

    async def close(self) -> None:
        """Close every connection; later sends raise ``BrokerConnectionError``."""
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

    @property
    def broker_ids(self) -> frozenset[int]:
        """Brokers with an open connection."""
        return frozenset(b for b, c in self._connections.items() if c.connected)

    def _address(self, broker_id: int) -> tuple[str, int]:
        address = self._resolve(broker_id)
        if address is None:
            raise BrokerNotAvailableError(broker_id)
        if self._closed:
            raise BrokerConnectionError(address[0], address[1], "the connection pool is closed")
        return address

    def _backoff_for(self, broker_id: int, address: tuple[str, int]) -> ReconnectBackoff:
        known = self._backoffs.get(broker_id)
        if known is None or known[0] != address:  # a new address starts afresh
            known = (address, ReconnectBackoff(self._backoff_ms, self._backoff_max_ms))
            self._backoffs[broker_id] = known
        return known[1]

    def _forget(self, broker_id: int, connection: BrokerConnection, *, failed: bool) -> None:
        if self._connections.get(broker_id) is not connection:
            return  # already forgotten: one broken connection counts as one failure, however many sends saw it
        del self._connections[broker_id]
        if failed:
            self._backoff_for(broker_id, connection.address).failed(self._clock.milliseconds(), self._draw())
