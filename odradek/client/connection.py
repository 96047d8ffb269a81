"""One TCP connection to one broker, speaking Kafka's wire protocol with pipelined requests.

``send`` encodes a request (a kio dataclass, or a dict that is built into the kio class of the version
both sides support), writes it and awaits its decoded response. Many sends may be outstanding at once
on one connection; a Kafka broker answers the requests of one connection in the order it received
them, so responses are matched to requests by position and checked by correlation id.

Invariants:
- Frames are written in correlation-id order, and a request is registered as in flight in the same
  synchronous step that writes it, so the in-flight queue is always in wire order.
- Every response must carry the correlation id at the head of the in-flight queue. Anything else (an
  unexpected id, a frame larger than ``max_response_bytes``, a body that does not decode) is a protocol
  error: the connection closes.
- A closed connection is never reused. A request timeout, a socket error, the peer closing, a protocol
  error or ``close()`` fail every in-flight request with ``BrokerConnectionError`` and close the socket:
  after a timeout a late response could otherwise be matched to the wrong request. Make a new
  connection instead (``pool.ConnectionPool`` does).
- A caller that is cancelled while its request is in flight does not break the connection: its
  response, when it comes, is read and dropped.
- Produce with ``acks=0`` gets no response from a Kafka broker; ``send`` returns None once it is written.
- ``connect`` is bounded by ``connect_timeout_ms`` as a whole (TCP connect plus ApiVersions); each
  request by its own timeout (``request_timeout_ms`` unless the caller gives one). A Fetch that may wait
  on the broker (``max_wait``) needs a timeout longer than that wait, as Kafka's replica fetcher uses.
- Fetch responses are decoded by kio, which gives each partition's ``records`` as ``bytes`` (or None
  when the broker sent none): the record batches exactly as the leader stored them.
- Security (``ClientSecurity``, the inter-broker listener's protocol): TLS wraps the socket before anything is
  sent (the context decides whether the peer's host name is checked); SASL runs right after ApiVersions
  (SaslHandshake v1, then SaslAuthenticate until the mechanism completes), all within ``connect_timeout_ms``. A
  refused handshake or a failed authentication closes the connection with the peer's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.protocol import apis, entities
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.frame import SIZE
from odradek.protocol.sasl import SaslAuthenticationError, SaslClient

log = logging.getLogger(__name__)

MiB = 1024 * 1024
DEFAULT_CLIENT_ID = "odradek-broker"  # the broker passes "odradek-broker-<broker.id>"
DEFAULT_CONNECT_TIMEOUT_MS = 10_000  # Kafka's socket.connection.setup.timeout.max.ms is 30 s; peers are near
DEFAULT_REQUEST_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms for inter-broker clients
DEFAULT_MAX_RESPONSE_BYTES = 100 * MiB
API_VERSIONS_VERSION = 3  # the first flexible ApiVersions (KIP-511); older peers answer v0 and we step down
CLIENT_SOFTWARE_NAME = "odradek"
CLIENT_SOFTWARE_VERSION = "0.1.0"
_MAX_CORRELATION_ID = 2**31 - 1


class BrokerConnectionError(Exception):
    """The connection to ``host:port`` failed or was closed; every request in flight on it failed.

    Maps to Kafka's NETWORK_EXCEPTION: the request may or may not have been processed by the peer.
    """

    code = ErrorCode.NETWORK_EXCEPTION

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"broker {host}:{port}: {reason}")
        self.host = host
        self.port = port
        self.reason = reason


class UnsupportedVersionError(KafkaError):
    """No version of an API is supported by both this broker and the peer."""

    code = ErrorCode.UNSUPPORTED_VERSION


def api_name(api_key: int) -> str:
    r = apis.SUPPORTED.get(api_key)
    return r.name if r is not None else f"api {api_key}"


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How connections to other brokers are secured: a client ``SSLContext`` for SSL/SASL_SSL, and for
    SASL_PLAINTEXT/SASL_SSL the mechanism and a factory of a fresh client exchange per connection."""

    tls: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    new_sasl_client: Callable[[], SaslClient] | None = None


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    version: int
    future: asyncio.Future[Any]


class BrokerConnection:
    """One TCP connection to one broker; requests pipelined with correlation ids; responses matched in order.

    Use once: ``await connect()``, any number of concurrent ``send``, then ``close()`` (or ``abort()``).
    Not thread-safe: use it from the event loop that connected it.
    """

    def __init__(self, host: str, port: int, *, client_id: str = DEFAULT_CLIENT_ID,
                 connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
                 request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 security: ClientSecurity | None = None) -> None:
        if connect_timeout_ms <= 0 or request_timeout_ms <= 0 or max_response_bytes <= 0:
            raise ValueError("connect_timeout_ms, request_timeout_ms and max_response_bytes must be positive")
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connect_timeout_ms = connect_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_response_bytes = max_response_bytes
        self.security = security or ClientSecurity()
        self._state = "new"  # new -> connecting -> open -> closed; never back
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._in_flight: deque[_InFlight] = deque()
        self._last_correlation_id = 0
        self._peer_versions: dict[int, tuple[int, int]] = {}
        self._closed_error: BrokerConnectionError | None = None

    def __repr__(self) -> str:
        return f"<BrokerConnection {self.host}:{self.port} {self._state} in_flight={len(self._in_flight)}>"

    # -- state -------------------------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def connected(self) -> bool:
        """True once ``connect`` has negotiated versions, until the connection closes for any reason."""
        return self._state == "open"

    @property
    def in_flight(self) -> int:
        """Requests written and not yet answered."""
        return len(self._in_flight)

    @property
    def peer_versions(self) -> Mapping[int, tuple[int, int]]:
        """The peer's ApiVersions answer: api key -> (min version, max version)."""
        return dict(self._peer_versions)

    @property
    def closed_error(self) -> BrokerConnectionError | None:
        """Why the connection closed (None while it is open or before it connected)."""
        return self._closed_error

    def _error(self, reason: str) -> BrokerConnectionError:
        return BrokerConnectionError(self.host, self.port, reason)

    # -- connect and negotiate -----------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the socket (TCP_NODELAY) and learn the peer's API versions; bounded by ``connect_timeout_ms``.

        Raises ``BrokerConnectionError`` (the connection is then closed) if the peer cannot be reached,
        does not answer in time or refuses ApiVersions.
        """
        if self._state != "new":
            raise RuntimeError(f"{self!r} was already connected once; make a new BrokerConnection")
        self._state = "connecting"
        try:
            async with asyncio.timeout(self.connect_timeout_ms / 1000):
                tls = self.security.tls
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, **({"ssl": tls, "server_hostname": self.host} if tls is not None else {}))
                self._writer = writer
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._read_task = asyncio.create_task(self._read_loop(reader),
                                                      name=f"odradek-client-read-{self.host}:{self.port}")
                self._peer_versions = await self._negotiate()
                if self.security.new_sasl_client is not None:
                    await self._authenticate()
        except TimeoutError:
            err = self._error(f"could not connect and negotiate API versions within {self.connect_timeout_ms} ms "
                              "(connect_timeout_ms); check that the broker is up and its advertised address is right")
            self.abort(err)
            raise err from None
        except OSError as e:
            err = self._error(f"cannot connect: {e.strerror or e}; check that the broker is up and listening there")
            self.abort(err)
            raise err from e
        except BrokerConnectionError as e:
            self.abort(e)
            raise
        except BaseException:
            self.abort(self._error("connect was cancelled"))
            raise
        if self._state == "connecting":
            self._state = "open"
        elif self._closed_error is not None:  # closed by the peer right after answering ApiVersions
            raise self._closed_error

    async def _negotiate(self) -> dict[int, tuple[int, int]]:
        """ApiVersions at v3; a peer that does not know v3 answers v0 with UNSUPPORTED_VERSION and its
        own ApiVersions range (KIP-511), and we ask again at the highest version both know."""
        response = await self._request(apis.API_VERSIONS, API_VERSIONS_VERSION,
                                       _api_versions_request(API_VERSIONS_VERSION), None)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            lo, hi = advertised.get(apis.API_VERSIONS, (0, 0))
            fallback = min(hi, API_VERSIONS_VERSION) if lo <= min(hi, API_VERSIONS_VERSION) else 0
            log.info("broker %s:%d does not support ApiVersions v%d; retrying at v%d",
                     self.host, self.port, API_VERSIONS_VERSION, fallback)
            response = await self._request(apis.API_VERSIONS, fallback, _api_versions_request(fallback), None)
        if response.error_code != ErrorCode.NONE:
            raise self._error(f"ApiVersions failed with {_error_name(response.error_code)}")
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}

    async def _authenticate(self) -> None:
        """SaslHandshake v1 naming the mechanism, then SaslAuthenticate with each token of the exchange."""
        mechanism = self.security.sasl_mechanism or ""
        assert self.security.new_sasl_client is not None
        handshake = await self._request(apis.SASL_HANDSHAKE, 1, entities.build(
            apis.request_class(apis.SASL_HANDSHAKE, 1), {"mechanism": mechanism}), None)
        if handshake.error_code != ErrorCode.NONE:
            raise self._error(f"SASL mechanism {mechanism} refused ({_error_name(handshake.error_code)}); the "
                              f"broker enables {', '.join(handshake.mechanisms) or 'none'}: check "
                              "sasl.mechanism.inter.broker.protocol and sasl.enabled.mechanisms")
        lo, hi = self._peer_versions.get(apis.SASL_AUTHENTICATE, (0, -1))
        version = min(hi, apis.SUPPORTED[apis.SASL_AUTHENTICATE].max_version)
        if version < lo:
            raise self._error("no common version of SaslAuthenticate")
        client = self.security.new_sasl_client()
        try:
            token = client.first()
            while True:
                answer = await self._request(apis.SASL_AUTHENTICATE, version, entities.build(
                    apis.request_class(apis.SASL_AUTHENTICATE, version), {"auth_bytes": token}), None)
                if answer.error_code != ErrorCode.NONE:
                    raise self._error(f"SASL/{mechanism} authentication failed: "
                                      f"{answer.error_message or _error_name(answer.error_code)}")
                token = client.respond(bytes(answer.auth_bytes))
                if client.complete:
                    return
        except SaslAuthenticationError as e:
            raise self._error(f"SASL/{mechanism} authentication failed on our side: {e}") from None

    def version_for(self, api_key: int, highest: int | None = None) -> int:
        """The highest version of ``api_key`` both sides support.

        Ours is ``apis.SUPPORTED``, or ``0..highest`` when the caller gives ``highest`` (then the API need
        not be one this broker serves, only one kio has classes for). Raises ``UnsupportedVersionError``
        when the ranges do not overlap.
        """
        if not self._peer_versions:
            raise RuntimeError(f"{self!r}: versions are known only after connect() succeeded")
        name = api_name(api_key)
        if highest is not None:
            ours = (0, highest)
        elif api_key in apis.SUPPORTED:
            r = apis.SUPPORTED[api_key]
            ours = (r.min_version, r.max_version)
        else:
            raise UnsupportedVersionError(f"{name} is not in odradek's API table; pass highest= to send it anyway")
        peer = self._peer_versions.get(api_key)
        if peer is None:
            raise UnsupportedVersionError(f"broker {self.host}:{self.port} does not support {name} at all")
        lo, hi = max(ours[0], peer[0]), min(ours[1], peer[1])
        if lo > hi:
            raise UnsupportedVersionError(
                f"no common version of {name}: odradek speaks v{ours[0]}-v{ours[1]}, "
                f"broker {self.host}:{self.port} v{peer[0]}-v{peer[1]}; upgrade the older broker")
        return hi

    # -- requests ------------------------------------------------------------------------------------

    async def send(self, api_key: int, request: Any, *, version: int | None = None,
                   timeout_ms: int | None = None) -> Any:
        """Send one request and return its decoded response (a kio dataclass).

        ``request`` is a kio request dataclass (its class fixes the version; a ``version`` given must
        match) or a dict of its fields, built with ``entities.build`` at ``version`` (default: the
        highest both sides support; fields that version lacks are dropped). Raises
        ``BrokerConnectionError`` if the connection is or becomes closed or the response does not come
        within ``timeout_ms`` (default ``request_timeout_ms``), ``UnsupportedVersionError`` if the peer
        does not support the version.
        """
        if self._state != "open":
            raise self._closed_error or self._error(f"not connected ({self._state}); call connect() first")
        request, version = self._prepare(api_key, request, version)
        return await self._request(api_key, version, request, timeout_ms)

    def _prepare(self, api_key: int, request: Any, version: int | None) -> tuple[Any, int]:
        name = api_name(api_key)
        if isinstance(request, Mapping):
            if version is None:
                version = self.version_for(api_key)
            self._check_peer_supports(api_key, version)
            return entities.build(apis.request_class(api_key, version), request), version
        cls = type(request)
        cls_api, cls_version = getattr(cls, "__api_key__", None), getattr(cls, "__version__", None)
        if cls_api is None or cls_version is None:
            raise TypeError(f"request for {name} must be a kio request dataclass or a dict, not {cls.__name__}")
        if int(cls_api) != api_key:
            raise ValueError(f"request is a {cls.__name__} of api {cls_api}, not {name} (api {api_key})")
        if version is not None and version != int(cls_version):
            raise ValueError(f"request is a {name} v{cls_version} object, not v{version}; build it at v{version} "
                             "or pass a dict")
        self._check_peer_supports(api_key, int(cls_version))
        return request, int(cls_version)

    def _check_peer_supports(self, api_key: int, version: int) -> None:
        lo, hi = self._peer_versions.get(api_key, (0, -1))
        if not lo <= version <= hi:
            supported = f"v{lo}-v{hi}" if lo <= hi else "no version"
            raise UnsupportedVersionError(f"broker {self.host}:{self.port} supports {supported} of "
                                          f"{api_name(api_key)}, not v{version}")

    def _next_correlation_id(self) -> int:
        self._last_correlation_id = self._last_correlation_id % _MAX_CORRELATION_ID + 1
        return self._last_correlation_id

    async def _request(self, api_key: int, version: int, request: Any, timeout_ms: int | None) -> Any:
        writer = self._writer
        if writer is None or self._state not in ("connecting", "open"):
            raise self._closed_error or self._error("not connected")
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        correlation_id = self._next_correlation_id()
        frame = apis.encode_request(api_key, version, correlation_id, request, self.client_id)
        expects_response = not (api_key == apis.PRODUCE and getattr(request, "acks", 1) == 0)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # Registering and writing in one synchronous step keeps the in-flight queue in wire order.
        if expects_response:
            self._in_flight.append(_InFlight(correlation_id, api_key, version, future))
        writer.write(frame)
        try:
            async with asyncio.timeout(timeout / 1000):
                await writer.drain()
                if not expects_response:
                    return None
                return await future
        except TimeoutError:
            err = self._error(f"no response to {api_name(api_key)} v{version} (correlation id {correlation_id}) "
                              f"within {timeout} ms; the connection is closed and its in-flight requests fail")
            self.abort(err)
            _retrieve(future)
            raise err from None
        except (ConnectionError, OSError) as e:
            err = self._closed_error or self._error(f"writing {api_name(api_key)} failed: {e}")
            self.abort(err)
            _retrieve(future)
            raise err from e
        except asyncio.CancelledError:
            future.cancel()  # its response will be read and dropped
            raise

    # -- responses -----------------------------------------------------------------------------------

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                prefix = await reader.readexactly(SIZE.size)
                (size,) = SIZE.unpack(prefix)
                if size < 4 or size > self.max_response_bytes:
                    raise _ProtocolError(f"response size {size} is outside 4..{self.max_response_bytes} "
                                         "(max_response_bytes)")
                payload = await reader.readexactly(size)
                self._dispatch(payload)
        except asyncio.CancelledError:
            return
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            waiting = len(self._in_flight)
            detail = "" if isinstance(e, asyncio.IncompleteReadError) else f" ({e})"
            self.abort(self._error(f"connection closed by the broker{detail} with {waiting} request(s) in flight"))
        except _ProtocolError as e:
            log.warning("broker %s:%d broke the protocol: %s; closing the connection", self.host, self.port, e)
            self.abort(self._error(f"protocol error: {e}"))
        except Exception as e:  # a bug here must not leave callers waiting forever
            log.exception("reading responses from %s:%d failed", self.host, self.port)
            self.abort(self._error(f"unexpected error reading responses: {e!r}"))

    def _dispatch(self, payload: bytes) -> None:
        (correlation_id,) = SIZE.unpack_from(payload, 0)
        if not self._in_flight:
            raise _ProtocolError(f"response with correlation id {correlation_id} when no request is in flight")
        head = self._in_flight[0]
        if correlation_id != head.correlation_id:
            raise _ProtocolError(f"response with correlation id {correlation_id} where {head.correlation_id} "
                                 f"({api_name(head.api_key)} v{head.version}) was next")
        self._in_flight.popleft()
        if head.future.done():  # its caller was cancelled
            return
        try:
            response = _decode(head.api_key, head.version, payload)
        except Exception as e:
            reason = f"{api_name(head.api_key)} v{head.version} response does not decode: {e}"
            head.future.set_exception(self._error(f"protocol error: {reason}"))
            raise _ProtocolError(reason) from e
        head.future.set_result(response)

    # -- closing -------------------------------------------------------------------------------------

    def abort(self, error: BrokerConnectionError | str = "connection closed by this broker") -> None:
        """Close now: fail every in-flight request with ``error`` and close the socket (no waiting)."""
        if self._state == "closed":
            return
        err = error if isinstance(error, BrokerConnectionError) else self._error(error)
        self._state = "closed"
        self._closed_error = err
        while self._in_flight:
            pending = self._in_flight.popleft()
            if not pending.future.done():
                pending.future.set_exception(err)
        if self._writer is not None:
            self._writer.close()
        task = self._read_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def close(self) -> None:
        """Close the connection (in-flight requests fail) and wait, briefly, for the socket to close."""
        self.abort(self._error("connection closed by this broker"))
        if self._read_task is not None and self._read_task is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError):
                await self._read_task
        if self._writer is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await self._writer.wait_closed()


class _ProtocolError(Exception):
    """The peer sent something that is not a valid response stream."""


def _api_versions_request(version: int) -> Any:
    return entities.build(apis.request_class(apis.API_VERSIONS, version), {
        "client_software_name": CLIENT_SOFTWARE_NAME,
        "client_software_version": CLIENT_SOFTWARE_VERSION,
    })


def _decode(api_key: int, version: int, payload: bytes) -> Any:
    # A peer that does not know our ApiVersions version answers with a v0 body (error code first in
    # every version), whatever version we asked for (KIP-511).
    if (api_key == apis.API_VERSIONS and version > 0 and len(payload) >= 6
            and int.from_bytes(payload[4:6], "big", signed=True) == ErrorCode.UNSUPPORTED_VERSION):
        version = 0
    _correlation_id, response = apis.decode_response(api_key, version, payload)
    return response


def _error_name(code: int) -> str:
    try:
        return ErrorCode(int(code)).name
    except ValueError:
        return f"error code {int(code)}"


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark an exception set on a future nobody will await as retrieved (no 'never retrieved' warning)."""
    if future.done() and not future.cancelled():
        future.exception()
    elif not future.done():
        future.cancel()
