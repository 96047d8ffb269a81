"""The quota step of dispatch: charge a request to its client's quotas and throttle its connection.

Around each handler (``dispatch``): ``before`` resolves the client's quotas (user ANONYMOUS until connections
authenticate, and the request header's client-id), records a Produce request's size against
``producer_byte_rate`` and checks the client's ``request_percentage`` (the loop time its earlier requests held);
the larger throttle goes into ``ctx.throttle_ms``, which handlers that lay out their own response (Produce,
Fetch) encode, and which ``after`` writes into every other response's ``throttle_time_ms``; ``after`` also mutes
the connection for the throttle time. Fetch charges ``consumer_byte_rate`` itself (``handlers/fetch.py``): it
must know the response size, and answers a throttled fetch with no records.

The server times each request from its frame to its written response with ``Timed``, counting only the steps
that actually ran on the loop (not the time parked in a long poll or a rebalance: Kafka counts request-handler
and network-thread time, not purgatory time), and ``charge_loop_time`` keeps it for the connection's next request,
whose ``before`` records it to ``request_percentage`` and measures the throttle in one step. (The time of the
request being answered is only known once it is written, so its throttle counts the requests before it either
way.)

Muting follows KIP-219: the server reads nothing more from a throttled connection until its throttle time is
over (``MUTED_UNTIL``), and sends the response at once to clients whose request version tells them to back off
by themselves; to older versions it sends the response only when the throttle time is over (``DELAY_UNTIL``).

Exempt, as in Kafka: followers' fetches (replication has its own throttles), requests between brokers
(WriteTxnMarkers) and the SASL exchange (Kafka's authenticator answers it before any quota applies).

Invariants: with no quota configured nothing here runs but one attribute test per request; a throttle time is
never negative and only ever raises a response's own ``throttle_time_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar

from odradek.broker.context import RequestContext
from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.quota.client_quotas import ClientQuotas

T = TypeVar("T")

MUTED_UNTIL = "muted_until"  # connection state: time.monotonic() until which nothing is read
DELAY_UNTIL = "delay_until"  # connection state: time.monotonic() before which the response is not sent
REQUEST_BOUND = "request_bound"  # connection state: the request_percentage bound the current request charges
UNCHARGED = "uncharged"  # connection state: (bound, seconds) of the last request, charged by the next one


def charge_loop_time(quotas: ClientQuotas, state: dict[str, Any], seconds: float) -> None:
    """Keep the loop time the connection's last request held (decoding, handling, encoding, writing) for its
    client's ``request_percentage``: recorded by the connection's next request, in the same step that measures
    that request's throttle (one rate update per request)."""
    bound = state.pop(REQUEST_BOUND, None)
    if bound is not None:
        state[UNCHARGED] = (bound, seconds)

# The first version of each response that tells the client to back off by itself (KIP-219; Kafka's
# ``AbstractResponse.shouldClientThrottle``). Earlier versions, and APIs not listed, get a delayed response.
CLIENT_THROTTLES_FROM: dict[int, int] = {
    apis.PRODUCE: 6, apis.FETCH: 8, apis.LIST_OFFSETS: 3, apis.METADATA: 6, apis.OFFSET_COMMIT: 4,
    apis.OFFSET_FETCH: 4, apis.FIND_COORDINATOR: 2, apis.JOIN_GROUP: 3, apis.HEARTBEAT: 2, apis.LEAVE_GROUP: 2,
    apis.SYNC_GROUP: 2, apis.DESCRIBE_GROUPS: 2, apis.LIST_GROUPS: 2, apis.API_VERSIONS: 2, apis.CREATE_TOPICS: 3,
    apis.DELETE_TOPICS: 2, apis.DELETE_RECORDS: 1, apis.DESCRIBE_CONFIGS: 2, apis.ALTER_CONFIGS: 1,
    apis.CREATE_PARTITIONS: 1, apis.DELETE_GROUPS: 1, apis.INCREMENTAL_ALTER_CONFIGS: 0, apis.DESCRIBE_LOG_DIRS: 1,
    apis.ELECT_LEADERS: 0, apis.ALTER_PARTITION_REASSIGNMENTS: 0, apis.LIST_PARTITION_REASSIGNMENTS: 0,
    apis.OFFSET_DELETE: 0, apis.INIT_PRODUCER_ID: 1, apis.ADD_PARTITIONS_TO_TXN: 1, apis.ADD_OFFSETS_TO_TXN: 1,
    apis.END_TXN: 1, apis.TXN_OFFSET_COMMIT: 1, apis.DESCRIBE_CLIENT_QUOTAS: 0, apis.ALTER_CLIENT_QUOTAS: 0,
    apis.DESCRIBE_ACLS: 1, apis.CREATE_ACLS: 1, apis.DELETE_ACLS: 1, apis.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    apis.ALTER_USER_SCRAM_CREDENTIALS: 0,
}
_EXEMPT = frozenset({apis.WRITE_TXN_MARKERS, apis.SASL_HANDSHAKE, apis.SASL_AUTHENTICATE})


def before(ctx: RequestContext, api_key: int, request: Any, size: int) -> None:
    """Resolve the client's quotas and charge what is known before the handler runs."""
    quotas = ctx.broker.quotas
    if api_key in _EXEMPT or (api_key == apis.FETCH and _replica_id(request) >= 0):
        return
    q = ctx.quota = quotas.for_client(ctx.user, ctx.header.client_id or "")
    throttle = 0
    if api_key == apis.PRODUCE and q.produce is not None:
        throttle = quotas.record(q.produce, size)
    uncharged = ctx.connection.pop(UNCHARGED, None)  # the connection's last request's loop time
    if uncharged is not None and uncharged[0] is not q.request:
        quotas.record_request_time(*uncharged)  # its bound is not this one's (the quotas changed)
        uncharged = None
    if q.request is not None:  # the earlier requests' share, the last one's included
        throttle = max(throttle, quotas.record_request_time(q.request, uncharged[1] if uncharged else 0.0))
    ctx.throttle_ms = throttle


def after(ctx: RequestContext, api_key: int, version: int, result: Any) -> None:
    """Put the throttle time in the response, mute the connection, and leave the request's ``request_percentage``
    bound for the server to charge."""
    q = ctx.quota
    if q is None:
        return
    if q.request is not None:  # charged by the server once the response is written (``charge_loop_time``)
        ctx.connection[REQUEST_BOUND] = q.request
    throttle = ctx.throttle_ms
    if throttle <= 0:
        return
    if isinstance(result, dict):
        result["throttle_time"] = max(int(result.get("throttle_time", 0) or 0), throttle)
    until = time.monotonic() + throttle / 1000
    state = ctx.connection
    state[MUTED_UNTIL] = max(state.get(MUTED_UNTIL, 0.0), until)
    first = CLIENT_THROTTLES_FROM.get(api_key)
    if first is None or version < first:
        state[DELAY_UNTIL] = until


class ThrottlingQuotaExceededError(KafkaError):
    code = ErrorCode.THROTTLING_QUOTA_EXCEEDED


def mutate(ctx: RequestContext, partitions: int, *, strict_from: int) -> None:
    """Charge ``partitions`` created or deleted to the client's ``controller_mutation_rate`` (KIP-599):
    ``ThrottlingQuotaExceededError`` when refused (request versions from ``strict_from`` on; older ones are only
    throttled). The throttle time goes into the response either way."""
    q = ctx.quota
    if q is None or q.mutation is None:
        return
    accepted, throttle_ms = ctx.broker.quotas.mutate(q.mutation, partitions, strict=ctx.version >= strict_from)
    ctx.throttle_ms = max(ctx.throttle_ms, throttle_ms)
    if not accepted:
        raise ThrottlingQuotaExceededError("The throttling quota has been exceeded: retry after the throttle time "
                                           "(controller_mutation_rate).")


def _replica_id(request: Any) -> int:
    replica_state = getattr(request, "replica_state", None)
    return replica_state.replica_id if replica_state is not None else getattr(request, "replica_id", -1)


class Timed(Awaitable[T]):
    """Awaits ``coro`` and adds to ``seconds`` only the time its steps ran on the loop (not the time it was
    suspended waiting for something else)."""

    __slots__ = ("coro", "seconds")

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self.coro = coro
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, T]:
        it = self.coro.__await__()
        send: Any = None
        thrown: BaseException | None = None
        clock = time.perf_counter
        while True:
            started = clock()
            try:
                waiting = it.throw(thrown) if thrown is not None else it.send(send)
            except StopIteration as done:
                self.seconds += clock() - started
                return done.value  # type: ignore[no-any-return]
            except BaseException:
                self.seconds += clock() - started
                raise
            self.seconds += clock() - started
            try:
                send = yield waiting
                thrown = None
            except BaseException as e:  # cancellation and the like go into the coroutine
                send = None
                thrown = e
