"""One partition read straight from its leader over the Kafka protocol: the data path of a Spark task.

A small blocking client that speaks four requests, all encoded and decoded by kio through
``protocol.apis``: ApiVersions (to use versions both sides have), Metadata (to find the leader),
ListOffsets (where the log starts and ends after OFFSET_OUT_OF_RANGE) and Fetch, whose record sets
go whole to ``columnar`` and become Arrow columns without a Python object per record.

Why not confluent-kafka for this: its only way out is one ``Message`` object per record, measured at
5 µs a record on this machine, seven times the budget a task has to reach half of Spark's Parquet
scan (docs/spark.md, "The read path"). confluent-kafka still plans (metadata, watermarks, offsets
for timestamps) and writes, and it reads whenever this client cannot: TLS or SASL.

``isolation_level`` 1 (read_committed) is passed to Fetch and ListOffsets: the broker stops at the last
stable offset and lists the aborted transactions, which ``columnar`` leaves out.

Invariants:
- Every wait is bounded: socket operations by ``timeout_s``, leader moves and lost connections by
  ``max_retries`` with back-off, and the caller bounds empty fetches.
- At most one Fetch is in flight per reader, and a response is matched to its request by
  correlation id; anything else closes the connection.
- Versions: Fetch 4-12 (v13+ names topics by id), Metadata 1-12, ListOffsets 1-7, each the highest
  the broker also supports.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from odradek.protocol import apis, entities
from odradek.protocol.errors import ErrorCode
from odradek.protocol.frame import SIZE

WANTED = {apis.FETCH: (4, 12), apis.METADATA: (1, 12), apis.LIST_OFFSETS: (1, 7)}
EARLIEST, LATEST = -2, -1
T = TypeVar("T")
# errors after which the leader is looked up again and the request retried
RETRIABLE = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.OFFSET_NOT_AVAILABLE,
})


class FetchError(RuntimeError):
    """The broker refused a request in a way retrying does not mend; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Settings:
    client_id: str = "odradek-spark"
    timeout_s: float = 30.0
    max_wait_ms: int = 500
    partition_max_bytes: int = 8 << 20
    max_retries: int = 10
    backoff_s: float = 0.1
    isolation_level: int = 0  # 0 read_uncommitted, 1 read_committed


@dataclass(frozen=True, slots=True)
class Fetched:
    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes | None
    last_stable_offset: int = -1
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset); read_committed only


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (optionally ``PLAINTEXT://``-prefixed, IPv6 in brackets)."""
    out = []
    for item in servers.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ValueError(f"kafka.bootstrap.servers entry {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("kafka.bootstrap.servers is empty")
    return out


class Connection:
    """One blocking socket to one broker, with the versions negotiated on it."""

    def __init__(self, address: tuple[str, int], settings: Settings) -> None:
        self.address = address
        self.settings = settings
        self.sock = socket.create_connection(address, timeout=settings.timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next_id = 0
        self.versions = self._negotiate()

    def close(self) -> None:
        self.sock.close()

    def send(self, api_key: int, body: dict[str, Any]) -> tuple[int, int]:
        """Send a request at the negotiated version; (correlation id, version) to receive it with."""
        version = self.versions[api_key]
        return self._send(api_key, version, body), version

    def receive(self, api_key: int, sent: tuple[int, int]) -> Any:
        cid, version = sent
        payload = self._read_frame()
        got, response = apis.decode_response(api_key, version, memoryview(payload).toreadonly())
        if got != cid:
            self.close()
            raise ConnectionError(f"{self.address}: response {got} arrived for request {cid}")
        return response

    def call(self, api_key: int, body: dict[str, Any]) -> Any:
        return self.receive(api_key, self.send(api_key, body))

    def _send(self, api_key: int, version: int, body: dict[str, Any]) -> int:
        self._next_id += 1
        request = entities.build(apis.request_class(api_key, version), body)
        self.sock.sendall(apis.encode_request(api_key, version, self._next_id, request, self.settings.client_id))
        return self._next_id

    def _read_frame(self) -> bytearray:
        (size,) = SIZE.unpack(self._read_exact(4))
        if size <= 0 or size > 1 << 30:
            self.close()
            raise ConnectionError(f"{self.address}: response frame of {size} bytes")
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionError(f"{self.address}: the broker closed the connection")
            got += k
        return buf

    def _negotiate(self) -> dict[int, int]:
        response = self.receive(apis.API_VERSIONS, (self._send(apis.API_VERSIONS, 3, {
            "client_software_name": "odradek-spark", "client_software_version": "1"}), 3))
        if response.error_code != ErrorCode.NONE:
            raise FetchError(f"{self.address}: ApiVersions failed with {ErrorCode(response.error_code).name}")
        theirs = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
        versions = {}
        for key, (lo, hi) in WANTED.items():
            their_lo, their_hi = theirs.get(key, (0, -1))
            if max(lo, their_lo) > min(hi, their_hi):
                raise FetchError(f"{self.address}: the broker speaks api {key} v{their_lo}-{their_hi}; this reader "
                                 f"needs v{lo}-{hi}")
            versions[key] = min(hi, their_hi)
        return versions


class PartitionFetcher:
    """Fetches one topic-partition from its current leader; reconnects when the leader moves."""

    def __init__(self, bootstrap: list[tuple[str, int]], topic: str, partition: int, settings: Settings) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partition = partition
        self.settings = settings
        self._conn: Connection | None = None
        self._pending: tuple[int, tuple[int, int]] | None = None  # (offset, sent) of the Fetch in flight

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._pending = None

    def __enter__(self) -> PartitionFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- Fetch -------------------------------------------------------------------------------

    def prefetch(self, offset: int) -> None:
        """Send the Fetch for ``offset`` now, so the broker works while the caller decodes."""
        if self._pending is None:
            try:
                self._send_fetch(offset)
            except OSError:
                self.close()  # fetch() will connect again and say what failed

    def _send_fetch(self, offset: int) -> None:
        self._pending = (offset, self._leader().send(apis.FETCH, self._fetch_body(offset)))

    def fetch(self, offset: int) -> Fetched:
        """Records from ``offset`` (whole batches; the first may start before it)."""
        def once(last: bool) -> Fetched | None:
            if self._pending is not None and self._pending[0] != offset:
                self.close()  # a prefetch for another offset: drop it with its connection
            if self._pending is None:
                self._send_fetch(offset)
            assert self._pending is not None
            response = self._leader().receive(apis.FETCH, self._pending[1])
            self._pending = None
            data = self._partition_data(response)
            if response.error_code != ErrorCode.NONE:
                raise FetchError(f"{self.topic}-{self.partition}: Fetch failed with "
                                 f"{ErrorCode(response.error_code).name}")
            if data.error_code in RETRIABLE and not last:
                return None
            aborted = [(int(a.producer_id), int(a.first_offset)) for a in data.aborted_transactions or ()]
            return Fetched(int(data.error_code), int(data.high_watermark), int(data.log_start_offset), data.records,
                           int(data.last_stable_offset), aborted)

        return self._retrying(f"fetching offset {offset}", once)

    def _fetch_body(self, offset: int) -> dict[str, Any]:
        s = self.settings
        return {
            "replica_id": -1, "max_wait": s.max_wait_ms, "min_bytes": 1,
            "max_bytes": max(s.partition_max_bytes, 1 << 20),
            "isolation_level": s.isolation_level, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": self.topic, "partitions": [{
                "partition": self.partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": s.partition_max_bytes}]}],
        }

    def _partition_data(self, response: Any) -> Any:
        for topic in response.responses:
            for data in topic.partitions:
                if data.partition_index == self.partition:
                    return data
        raise ValueError(f"the Fetch response has no {self.topic}-{self.partition}")

    # -- ListOffsets -------------------------------------------------------------------------

    def list_offset(self, timestamp: int) -> int:
        """The offset ListOffsets gives for ``timestamp`` (EARLIEST / LATEST or milliseconds)."""
        body = {"replica_id": -1, "isolation_level": self.settings.isolation_level, "topics": [
            {"name": self.topic, "partitions": [
                {"partition_index": self.partition, "current_leader_epoch": -1, "timestamp": timestamp}]}]}

        def once(last: bool) -> int | None:
            part = self._leader().call(apis.LIST_OFFSETS, body).topics[0].partitions[0]
            if part.error_code in RETRIABLE and not last:
                return None
            if part.error_code != ErrorCode.NONE:
                raise FetchError(f"{self.topic}-{self.partition}: ListOffsets failed with "
                                 f"{ErrorCode(part.error_code).name}")
            return int(part.offset)

        return self._retrying("ListOffsets", once)

    def _retrying(self, what: str, once: Callable[[bool], T | None]) -> T:
        """``once(last_attempt)`` until it gives a result: None (a retriable error answer) or a lost
        connection or malformed response means back off, look the leader up again and retry, at most
        ``max_retries`` times; then the last connection error is a ``FetchError``."""
        for attempt in range(self.settings.max_retries + 1):
            last = attempt >= self.settings.max_retries
            try:
                result = once(last)
            except (OSError, ValueError, IndexError) as exc:
                self.close()
                if last:
                    raise FetchError(f"{self.topic}-{self.partition}: {what} failed {attempt + 1} times; "
                                     f"last: {exc}") from exc
                result = None
            if result is not None:
                return result
            self._retry_later(attempt)
        raise AssertionError("unreachable")

    # -- the leader --------------------------------------------------------------------------

    def _retry_later(self, attempt: int) -> None:
        self.close()
        time.sleep(min(self.settings.backoff_s * (2 ** attempt), 2.0))

    def _leader(self) -> Connection:
        if self._conn is None:
            address = self._find_leader()
            self._conn = Connection(address, self.settings)
        return self._conn

    def _find_leader(self) -> tuple[str, int]:
        errors = []
        for address in self.bootstrap:
            try:
                conn = Connection(address, self.settings)
            except OSError as exc:
                errors.append(f"{address[0]}:{address[1]}: {exc}")
                continue
            try:
                response = conn.call(apis.METADATA, {"topics": [{"name": self.topic}],
                                                     "allow_auto_topic_creation": False})
            finally:
                conn.close()
            brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
            for topic in response.topics:
                if topic.name != self.topic:
                    continue
                for part in topic.partitions:
                    if part.partition_index == self.partition and int(part.leader_id) in brokers:
                        return brokers[int(part.leader_id)]
                raise ConnectionError(f"{self.topic}-{self.partition} has no leader now "
                                      f"({ErrorCode(topic.error_code).name})")
        raise ConnectionError(f"no bootstrap server answered: {'; '.join(errors) or 'none given'}")
