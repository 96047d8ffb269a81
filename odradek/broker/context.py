"""What a handler gets besides its request (the broker, the request header, the client's address) and the
shapes of what it gives back: a response body, a ``RawResponse`` already laid out, or a ``Deferred`` one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.broker.broker import Broker
from odradek.broker.config import Listener
from odradek.protocol.error_counts import ErrorCounts
from odradek.protocol.frame import RequestHeader
from odradek.quota.client_quotas import ANONYMOUS, ClientQuota
from odradek.storage.segment import FileRegion

# Keys of the per-connection state (``RequestContext.connection``) that the authenticate step uses.
SASL = "sasl"  # the connection's SaslAuthentication, on SASL listeners (broker/authentication.py)
PRINCIPAL = "principal"  # the authenticated user's name; absent: ANONYMOUS
CLOSE_AFTER_RESPONSE = "close_after_response"  # a reason: close the connection once this response is sent


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    peer: str
    connection: dict[str, Any] = field(default_factory=dict)  # per-connection state
    quota: ClientQuota | None = None  # the client's quotas, when any quota is configured (broker/throttle.py)
    throttle_ms: int = 0  # how long this request's client is throttled (its response's throttle_time_ms)
    listener: str = ""  # the name of the listener the request came in on ("": the first listener)

    @property
    def advertised(self) -> Listener:
        """This broker's advertised address on the request's listener (what Metadata and FindCoordinator give
        the client: Kafka answers each listener with its own addresses)."""
        return self.broker.config.advertised_for(self.listener_name)

    @property
    def listener_name(self) -> str:
        return self.listener or self.broker.config.listener.name

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def user(self) -> str:
        """The connection's user: its authenticated principal's name (SASL, or a TLS client certificate), else
        ANONYMOUS."""
        return self.connection.get(PRINCIPAL, ANONYMOUS)  # type: ignore[no-any-return]


class CloseConnection(Exception):
    """The request cannot be answered; close the connection and log this reason."""


@dataclass(slots=True)
class RawResponse:
    """A response body already laid out as bytes and file regions (sent with sendfile), with the error codes it
    carries counted by the handler that laid it out (``protocol/error_counts.py``; None: not counted)."""

    chunks: list[bytes | FileRegion]
    errors: ErrorCounts | None = None

    @property
    def size(self) -> int:
        return sum(c.length if isinstance(c, FileRegion) else len(c) for c in self.chunks)


@dataclass(slots=True)
class Deferred:
    """A response that is not known yet, although the request's effects on the broker are done: a produce
    request waiting for its acks=all replication. The connection goes on with its next requests meanwhile;
    their responses are still sent after this one (Kafka's order of responses on a connection).

    The response is ``complete(outcomes)`` once every future of ``waits`` is done or ``timeout_s`` has passed:
    each outcome is its future's result, or None for a future still pending at the deadline (then cancelled).
    No task per request: the connection's response queue waits on the futures itself."""

    waits: list[asyncio.Future[Any]]
    timeout_s: float
    complete: Callable[[list[Any]], dict[str, Any] | RawResponse | None]
