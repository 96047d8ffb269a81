"""From a request frame to a response: header parsing, version checks, decoding, the handler, encoding.

Invariants:
- An ApiVersions request of a version the broker does not know is answered in v0 format with
  UNSUPPORTED_VERSION and the supported ranges (KIP-511), so every client can fall back.
- For any other API, an unknown key, an unsupported version or a body that does not decode raises
  ``CloseConnection`` with a reason the server logs with the client's address: Kafka answers these by
  closing the connection, since it cannot encode a response in a version it does not know. A
  flexible body is first checked for array counts that kio's decoder cannot survive
  (``protocol/array_bounds.py``).
- A handler may answer ``Deferred``: its request's effects are done and its response comes later. Dispatch
  then returns a ``PendingFrame``, which the server completes when its waits are over while it goes on
  with the connection's next requests, and sends in request order.
- With a client quota configured, ``throttle.before``/``after`` wrap the handler: the request is charged to its
  client's quotas, its response carries the throttle time and the connection is muted for it.
- A handler's ``KafkaError`` never escapes: handlers map errors to per-partition codes themselves;
  anything unexpected is logged and closes only that connection.
- Every decoded request is counted and timed in ``broker.metrics`` (``metrics/broker_metrics.py``): queue (frame
  in -> handler called), local (the handler), total (frame in -> response encoded; a deferred response's total
  and remote times are taken when it completes). The error codes of each response are counted per API, as
  Kafka's ErrorsPerSec; a handler that raises counts as UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from odradek.broker import throttle
from odradek.broker.context import CloseConnection, Deferred, RawResponse, RequestContext
from odradek.broker.handlers import (
    acls,
    admin_configs,
    admin_topics,
    api_versions,
    client_quotas,
    cluster,
    describe_producers,
    elections,
    fetch,
    groups,
    list_offsets,
    log_dirs,
    metadata,
    offsets,
    produce,
    producers,
    reassignments,
    records_admin,
    sasl,
    scram_credentials,
    transactions,
    txn_markers,
)
from odradek.metrics.broker_metrics import RequestStats
from odradek.protocol import apis, array_bounds, entities
from odradek.protocol.error_counts import add_code, count_errors
from odradek.protocol.errors import ErrorCode
from odradek.protocol.frame import FrameError, parse_request_header, peek_header, response_prefix

log = logging.getLogger(__name__)

Handler = Callable[[RequestContext, Any], Awaitable[dict[str, Any] | RawResponse | Deferred | None]]
Chunks = list[bytes | Any]


@dataclass(slots=True)
class PendingFrame:
    """The response frame of a deferred request, once its waits are over (see ``Deferred``)."""

    deferred: Deferred
    api_key: int
    version: int
    correlation_id: int
    stats: RequestStats | None = None
    received: float = 0.0  # time.perf_counter() when dispatch got the frame
    handled: float = 0.0  # ... and when its handler returned

    def complete(self, outcomes: list[Any]) -> Chunks | None:
        out = _encode(self.api_key, self.version, self.correlation_id, self.deferred.complete(outcomes), self.stats)
        stats = self.stats
        if stats is not None:
            now = time.perf_counter()
            stats.remote.observe(now - self.handled)
            stats.total.observe(now - self.received)
        return out

HANDLERS: dict[int, Handler] = {
    apis.API_VERSIONS: api_versions.handle,
    apis.METADATA: metadata.handle,
    apis.PRODUCE: produce.handle,
    apis.FETCH: fetch.handle,
    apis.LIST_OFFSETS: list_offsets.handle,
    apis.CREATE_TOPICS: admin_topics.handle_create_topics,
    apis.DELETE_TOPICS: admin_topics.handle_delete_topics,
    apis.CREATE_PARTITIONS: admin_topics.handle_create_partitions,
    apis.DESCRIBE_CONFIGS: admin_configs.handle_describe_configs,
    apis.ALTER_CONFIGS: admin_configs.handle_alter_configs,
    apis.INCREMENTAL_ALTER_CONFIGS: admin_configs.handle_incremental_alter_configs,
    apis.DESCRIBE_CLUSTER: cluster.handle_describe_cluster,
    apis.ELECT_LEADERS: elections.handle_elect_leaders,
    apis.DESCRIBE_LOG_DIRS: log_dirs.handle_describe_log_dirs,
    apis.ALTER_PARTITION_REASSIGNMENTS: reassignments.handle_alter_partition_reassignments,
    apis.LIST_PARTITION_REASSIGNMENTS: reassignments.handle_list_partition_reassignments,
    apis.DESCRIBE_PRODUCERS: describe_producers.handle_describe_producers,
    apis.WRITE_TXN_MARKERS: txn_markers.handle_write_txn_markers,
    apis.DELETE_RECORDS: records_admin.handle_delete_records,
    apis.OFFSET_FOR_LEADER_EPOCH: records_admin.handle_offset_for_leader_epoch,
    apis.FIND_COORDINATOR: groups.handle_find_coordinator,
    apis.JOIN_GROUP: groups.handle_join_group,
    apis.SYNC_GROUP: groups.handle_sync_group,
    apis.HEARTBEAT: groups.handle_heartbeat,
    apis.LEAVE_GROUP: groups.handle_leave_group,
    apis.DESCRIBE_GROUPS: groups.handle_describe_groups,
    apis.LIST_GROUPS: groups.handle_list_groups,
    apis.DELETE_GROUPS: groups.handle_delete_groups,
    apis.OFFSET_COMMIT: offsets.handle_offset_commit,
    apis.OFFSET_FETCH: offsets.handle_offset_fetch,
    apis.OFFSET_DELETE: offsets.handle_offset_delete,
    apis.INIT_PRODUCER_ID: producers.handle_init_producer_id,
    apis.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions_to_txn,
    apis.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets_to_txn,
    apis.END_TXN: transactions.handle_end_txn,
    apis.TXN_OFFSET_COMMIT: offsets.handle_txn_offset_commit,
    apis.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
    apis.LIST_TRANSACTIONS: transactions.handle_list_transactions,
    apis.DESCRIBE_CLIENT_QUOTAS: client_quotas.handle_describe_client_quotas,
    apis.ALTER_CLIENT_QUOTAS: client_quotas.handle_alter_client_quotas,
    apis.SASL_HANDSHAKE: sasl.handle_sasl_handshake,
    apis.SASL_AUTHENTICATE: sasl.handle_sasl_authenticate,
    apis.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_credentials.handle_describe_user_scram_credentials,
    apis.ALTER_USER_SCRAM_CREDENTIALS: scram_credentials.handle_alter_user_scram_credentials,
    apis.DESCRIBE_ACLS: acls.handle_describe_acls,
    apis.CREATE_ACLS: acls.handle_create_acls,
    apis.DELETE_ACLS: acls.handle_delete_acls,
}
assert set(HANDLERS) == set(apis.SUPPORTED), "every advertised API needs a handler"
# Kafka's quota types (the MBean type of a client's throttle-time): Produce, Fetch, and Request for the others.
_QUOTA_TYPES = {apis.PRODUCE: "produce", apis.FETCH: "fetch"}


async def dispatch(ctx_factory: Callable[[Any], RequestContext], frame: bytes) -> Chunks | PendingFrame | None:
    """The response frame (as chunks) for one request frame, None when no response is due, or a
    ``PendingFrame`` when the handler deferred its response."""
    received = time.perf_counter()
    try:
        api_key, version, correlation_id = peek_header(frame)
    except FrameError as e:
        raise CloseConnection(str(e)) from None
    if api_key == apis.API_VERSIONS and not apis.is_supported(api_key, version):
        body = api_versions.unsupported_version_body()
        return [response_prefix(correlation_id, len(body), flexible_header=False), body]
    spec = apis.SUPPORTED.get(api_key)
    if spec is None:
        raise CloseConnection(f"unknown or unsupported api key {api_key} (v{version})")
    if not spec.min_version <= version <= spec.max_version:
        raise CloseConnection(
            f"{spec.name} v{version} is not supported (supported: v{spec.min_version}-v{spec.max_version})"
        )
    flexible = apis.request_is_flexible(api_key, version)
    try:
        header = parse_request_header(frame, flexible=flexible)
        if flexible and array_bounds.needs_check(frame, header.size):  # kio cannot take these (see the module)
            array_bounds.check(apis.request_class(api_key, version), frame, header.size)
        request = apis.decode_request(api_key, version, frame, header.size)
    except FrameError as e:
        raise CloseConnection(f"malformed {spec.name} v{version} request header: {e}") from None
    except array_bounds.ArrayBoundsError as e:
        raise CloseConnection(f"malformed {spec.name} v{version} request: {e}") from None
    except Exception as e:  # kio raises assorted errors on malformed bodies
        raise CloseConnection(f"malformed {spec.name} v{version} request: {type(e).__name__}: {e}") from None
    ctx = ctx_factory(header)
    stats = ctx.broker.metrics.request(api_key)
    try:
        if not ctx.broker.quotas.enabled:
            called = time.perf_counter()
            result = await HANDLERS[api_key](ctx, request)
        else:
            throttle.before(ctx, api_key, request, len(frame))
            called = time.perf_counter()
            result = await HANDLERS[api_key](ctx, request)
            throttle.after(ctx, api_key, version, result)
            if ctx.throttle_ms > 0:
                ctx.broker.metrics.throttled(_QUOTA_TYPES.get(api_key, "request"), ctx.user,
                                             ctx.header.client_id or "", ctx.throttle_ms)
    except Exception:  # a cancellation (shutdown) is not the request's failure
        add_code(stats.errors, ErrorCode.UNKNOWN_SERVER_ERROR)
        raise
    handled = time.perf_counter()
    if isinstance(result, Deferred):
        stats.queue.observe(called - received)
        stats.local.observe(handled - called)
        return PendingFrame(result, api_key, version, correlation_id, stats, received, handled)
    out = _encode(api_key, version, correlation_id, result, stats)
    stats.done(called - received, handled - called, time.perf_counter() - received)
    return out


def _encode(api_key: int, version: int, correlation_id: int, result: dict[str, Any] | RawResponse | None,
            stats: RequestStats | None) -> Chunks | None:
    if result is None:
        return None
    flexible_header = apis.response_header_is_flexible(api_key, version)
    if isinstance(result, RawResponse):
        if stats is not None and result.errors:
            for code, n in result.errors.items():
                add_code(stats.errors, code, n)
        return [response_prefix(correlation_id, result.size, flexible_header=flexible_header), *result.chunks]
    response = entities.build(apis.response_class(api_key, version), result)
    if stats is not None:
        count_errors(response, stats.errors)
    body = apis.encode_body(response)
    return [response_prefix(correlation_id, len(body), flexible_header=flexible_header), body]
