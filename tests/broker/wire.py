"""Hand-made Kafka frames over raw sockets, for tests that talk to a real broker process.

Bodies are kio's generated request classes (``odradek.protocol.apis.request_class``) written with
``kio.serial.entity_writer``; the request header (v1, or v2 for flexible versions) and the size
prefix are written here by hand, so tests can also send frames that no client library would.
Responses are read with bounded socket timeouts and decoded with kio's readers.
"""

from __future__ import annotations

import io
import socket
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kio.serial import entity_writer

from odradek.protocol import apis, entities
from odradek.protocol.frame import request_header as frame_header
from odradek.protocol.records import Record, build_batch, decode_records, iter_batches

# The versions these tests speak unless a test picks another one.
PRODUCE_V = 9
FETCH_V = 12
LIST_OFFSETS_V = 7
METADATA_V = 12
API_VERSIONS_V = 3

LATEST = -1
EARLIEST = -2
ZERO_UUID = uuid.UUID(int=0)
DEFAULT_TIMEOUT = 10.0


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def request_header(api_key: int, version: int, correlation_id: int, client_id: str | None = "odradek-tests",
                   *, flexible: bool) -> bytes:
    """Request header v1 (``flexible=False``) or v2 (v1 plus empty tagged fields)."""
    return frame_header(api_key, version, correlation_id, client_id, flexible=flexible)


def encode_body(api_key: int, version: int, values: dict[str, Any] | Any) -> bytes:
    cls = apis.request_class(api_key, version)
    request = values if isinstance(values, cls) else entities.build(cls, values)
    buf = io.BytesIO()
    entity_writer(cls)(buf, request)
    return buf.getvalue()


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def request_frame(api_key: int, version: int, correlation_id: int, values: dict[str, Any] | Any,
                  client_id: str | None = "odradek-tests") -> bytes:
    header = request_header(api_key, version, correlation_id, client_id,
                            flexible=apis.request_is_flexible(api_key, version))
    return frame(header + encode_body(api_key, version, values))


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    """(correlation id, response) from a response frame without its size prefix; the whole frame must
    be consumed."""
    return apis.decode_response(api_key, version, payload)


class Closed(Exception):
    """The broker closed the connection."""


class Conn:
    """A blocking socket to the broker with bounded reads."""

    def __init__(self, address: tuple[str, int], timeout: float = DEFAULT_TIMEOUT,
                 rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next_id = 1
        self._buf = bytearray()

    @property
    def local_address(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"{host}:{port}"

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_id(self) -> int:
        cid = self._next_id
        self._next_id += 1
        return cid

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, values: dict[str, Any] | Any) -> int:
        cid = self.next_id()
        self.sock.sendall(request_frame(api_key, version, cid, values))
        return cid

    def _fill(self, n: int, deadline: float) -> None:
        while len(self._buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete response within the timeout ({len(self._buf)}/{n} bytes)")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise Closed(f"connection closed with {len(self._buf)} of {n} bytes received")
            self._buf += chunk

    def recv_frame(self, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        deadline = time.monotonic() + timeout
        self._fill(4, deadline)
        (size,) = struct.unpack_from(">i", self._buf, 0)
        assert size > 0, f"bad response size {size}"
        self._fill(4 + size, deadline)
        payload = bytes(self._buf[4 : 4 + size])
        del self._buf[: 4 + size]
        return payload

    def recv_response(self, api_key: int, version: int, timeout: float = DEFAULT_TIMEOUT) -> tuple[int, Any]:
        return decode_response(api_key, version, self.recv_frame(timeout))

    def request(self, api_key: int, version: int, values: dict[str, Any] | Any,
                timeout: float = DEFAULT_TIMEOUT) -> Any:
        cid = self.send(api_key, version, values)
        got, response = self.recv_response(api_key, version, timeout)
        assert got == cid, f"correlation id {got}, expected {cid}"
        return response

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection within ``timeout`` (reads until EOF, bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True


# -- request builders -------------------------------------------------------------------------------


def api_versions(conn: Conn, version: int = API_VERSIONS_V) -> Any:
    values = {"client_software_name": "odradek-tests", "client_software_version": "1.0"}
    return conn.request(apis.API_VERSIONS, version, values)


def metadata(conn: Conn, topics: list[str] | None, *, auto_create: bool = True) -> Any:
    values = {
        "topics": None if topics is None else [{"name": t, "topic_id": ZERO_UUID} for t in topics],
        "allow_auto_topic_creation": auto_create,
    }
    return conn.request(apis.METADATA, METADATA_V, values)


def ensure_topic(conn: Conn, topic: str, partitions: int | None = None) -> int:
    """Auto-create ``topic`` through Metadata; returns its partition count."""
    response = metadata(conn, [topic])
    (t,) = response.topics
    assert int(t.error_code) == 0, f"metadata for {topic}: {t.error_code}"
    if partitions is not None:
        assert len(t.partitions) == partitions, f"{topic} has {len(t.partitions)} partitions, want {partitions}"
    return len(t.partitions)


def produce_values(topic: str, partition: int, records: bytes | None, acks: int = 1) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }


@dataclass
class ProduceResult:
    error_code: int
    base_offset: int


def produce(conn: Conn, topic: str, partition: int, records: bytes, acks: int = 1) -> ProduceResult:
    response = conn.request(apis.PRODUCE, PRODUCE_V, produce_values(topic, partition, records, acks))
    (t,) = response.responses
    (p,) = t.partition_responses
    return ProduceResult(int(p.error_code), int(p.base_offset))


def batch(*values: bytes, key: bytes | None = None) -> bytes:
    return build_batch([(key, v) for v in values])


def list_offsets_values(topic: str, partitions: list[int], timestamp: int = LATEST) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp} for p in partitions
        ]}],
    }


def list_offsets(conn: Conn, topic: str, partitions: list[int], timestamp: int = LATEST) -> dict[int, int]:
    response = conn.request(apis.LIST_OFFSETS, LIST_OFFSETS_V, list_offsets_values(topic, partitions, timestamp))
    out = {}
    for t in response.topics:
        for p in t.partitions:
            assert int(p.error_code) == 0, f"ListOffsets {topic}-{p.partition_index}: {p.error_code}"
            out[p.partition_index] = p.offset
    return out


def fetch_values(offsets: dict[tuple[str, int], int], *, max_wait_ms: int = 0, min_bytes: int = 1,
                 max_bytes: int = 50 << 20, partition_max_bytes: int = 10 << 20, session_id: int = 0,
                 session_epoch: int = -1, forgotten: dict[str, list[int]] | None = None) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append({
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": partition_max_bytes,
        })
    return {
        "cluster_id": None, "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes,
        "max_bytes": max_bytes, "isolation_level": 0, "session_id": session_id, "session_epoch": session_epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in (forgotten or {}).items()],
        "rack_id": "",
    }


def fetch(conn: Conn, offsets: dict[tuple[str, int], int], timeout: float = DEFAULT_TIMEOUT, **kw: Any) -> Any:
    return conn.request(apis.FETCH, FETCH_V, fetch_values(offsets, **kw), timeout=timeout)


def fetched(response: Any) -> dict[tuple[str, int], Any]:
    """Partition responses of a Fetch response by (topic, partition)."""
    return {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}


def records_of(raw: bytes | None) -> list[Record]:
    out: list[Record] = []
    if raw:
        for pos, header in iter_batches(raw, allow_partial_tail=True):
            out.extend(decode_records(raw[pos : pos + header.size]))
    return out


def fetch_all(conn: Conn, topic: str, partition: int, start: int = 0) -> bytes:
    """Every byte of the partition's log from ``start`` to the high watermark (bounded loop)."""
    out = bytearray()
    offset = start
    for _ in range(10_000):
        p = fetched(fetch(conn, {(topic, partition): offset}))[(topic, partition)]
        assert int(p.error_code) == 0, f"fetch {topic}-{partition}@{offset}: {p.error_code}"
        raw = p.records or b""
        batches = list(iter_batches(raw, allow_partial_tail=True))
        if not batches:
            assert offset >= p.high_watermark, f"no records at {offset} below the high watermark {p.high_watermark}"
            return bytes(out)
        for pos, header in batches:
            out += raw[pos : pos + header.size]
            offset = header.next_offset
    raise AssertionError("fetch_all did not reach the high watermark")
