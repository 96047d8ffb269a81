"""The broker's own counters: per API, per topic, per listener, per throttled client. Kafka's MBeans, as plain ints.

Who bumps what (each a few integer operations, on the event loop, no labels resolved, no locks):
- ``dispatch`` (``broker/dispatch.py``): ``request(api_key)`` once per request frame, then ``RequestStats.done``
  with its queue (frame in -> handler called: header and body decoding, quota step), local (the handler, a fetch's
  long poll included) and total (frame in -> response encoded) times; ``remote`` is the wait of a deferred
  (acks=all) response for its replicas, recorded when it completes. ``errors`` counts the error codes of each
  response, NONE included, as Kafka's ErrorsPerSec (``protocol/error_counts.py``: the encoder's entity walked, or
  counts the handler of a pre-encoded response made while laying it out); a handler that raised (the connection
  is closed) counts as UNKNOWN_SERVER_ERROR, the code Kafka would have answered.
- Produce and Fetch handlers: ``topic(name)`` once per topic of a request; messages and bytes in per appended
  batch, bytes out per fetched record set (consumers only: followers' fetches are replication traffic).
- Replication, apart as Kafka keeps it: ``replication_bytes_out`` per follower fetch response (its record sets'
  bytes, in ``replica_fetch.py``), ``replication_bytes_in`` per record set a follower appends (``fetcher.py``).
- The server: connections opened and closed per listener.
- The quota step: throttle time per (quota type, user, client id) of throttled responses.

Invariants: counters only grow (Prometheus counters), except ``connections`` (a gauge); nothing here is read
except by a scrape on the broker's loop; a ``TopicStats`` lives until the broker restarts (a deleted topic's
counters stay, as a counter must not go back).
"""

from __future__ import annotations

from odradek.metrics.histogram import Histogram
from odradek.protocol.error_counts import ErrorCounts


class RequestStats:
    """One API's request counts and times (Kafka's ``kafka.network:type=RequestMetrics,request=<Api>``)."""

    __slots__ = ("errors", "local", "queue", "remote", "requests", "total")

    def __init__(self) -> None:
        self.requests = 0
        self.errors: ErrorCounts = {}  # error code -> responses' fields that carried it
        self.queue = Histogram()
        self.local = Histogram()
        self.remote = Histogram()
        self.total = Histogram()

    def done(self, queue_s: float, local_s: float, total_s: float) -> None:
        self.queue.observe(queue_s)
        self.local.observe(local_s)
        self.total.observe(total_s)


class TopicStats:
    """One topic's traffic (Kafka's ``kafka.server:type=BrokerTopicMetrics,topic=<t>``)."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "failed_fetch_requests",
        "failed_produce_requests",
        "fetch_requests",
        "messages_in",
        "produce_requests",
    )

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.produce_requests = 0
        self.failed_produce_requests = 0
        self.fetch_requests = 0
        self.failed_fetch_requests = 0


class BrokerMetrics:
    def __init__(self) -> None:
        self.apis: dict[int, RequestStats] = {}
        self.topics: dict[str, TopicStats] = {}
        self.connections: dict[str, int] = {}  # listener -> open connections
        self.connections_created: dict[str, int] = {}  # listener -> connections accepted since start
        # (quota type: produce, fetch, request; user; client id) -> [throttled responses, total throttle ms]
        self.throttles: dict[tuple[str, str, str], list[int]] = {}
        self.replication_bytes_out = 0  # record bytes sent to followers (ReplicationBytesOutPerSec)
        self.replication_bytes_in = 0  # record bytes appended from leaders (ReplicationBytesInPerSec)

    def request(self, api_key: int) -> RequestStats:
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = RequestStats()
        stats.requests += 1
        return stats

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def connection_opened(self, listener: str) -> None:
        self.connections[listener] = self.connections.get(listener, 0) + 1
        self.connections_created[listener] = self.connections_created.get(listener, 0) + 1

    def connection_closed(self, listener: str) -> None:
        self.connections[listener] -= 1

    def throttled(self, kind: str, user: str, client_id: str, throttle_ms: int) -> None:
        entry = self.throttles.get((kind, user, client_id))
        if entry is None:
            entry = self.throttles[(kind, user, client_id)] = [0, 0]
        entry[0] += 1
        entry[1] += throttle_ms
