"""BrokerConnection and ConnectionPool against a real ``odradek serve`` process (one per module).

Peers that misbehave (close at once, close mid-request, never answer, answer out of order, speak
only ApiVersions v0) are tiny asyncio servers in this module, on 127.0.0.1; they parse real request
frames and answer with kio-encoded responses. Every wait is bounded: each scenario runs under
``asyncio.wait_for`` and every poll has a deadline.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from odradek.client.connection import BrokerConnection, BrokerConnectionError, UnsupportedVersionError
from odradek.client.pool import BrokerNotAvailableError, ConnectionPool, ReconnectBackoff
from odradek.protocol import apis, entities
from odradek.protocol.errors import ErrorCode
from odradek.protocol.frame import SIZE, peek_header, response_prefix
from odradek.protocol.records import build_batch, decode_records
from tests.broker.process import BrokerProcess, free_port, serving

T = TypeVar("T")
SCENARIO_TIMEOUT_S = 60.0
BROKER_ID = 1  # what the pool's resolver maps to the module's broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serving(tmp_path_factory.mktemp("client_broker"))


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), SCENARIO_TIMEOUT_S)

    return asyncio.run(bounded())


async def connected(broker: BrokerProcess, **options: Any) -> BrokerConnection:
    conn = BrokerConnection("127.0.0.1", broker.port, client_id="odradek-tests", **options)
    await conn.connect()
    return conn


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def create_topic(conn: BrokerConnection, name: str) -> uuid.UUID:
    response = await conn.send(apis.CREATE_TOPICS, {
        "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout": 10_000})
    (result,) = response.topics
    assert result.error_code == ErrorCode.NONE, result
    metadata = await conn.send(apis.METADATA, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
    (topic,) = metadata.topics
    assert topic.error_code == ErrorCode.NONE, topic
    return topic.topic_id


def fetch_request(topic: str, topic_id: uuid.UUID, offset: int, *, max_wait_ms: int = 0) -> dict[str, Any]:
    """A consumer Fetch of partition 0, in fields every version from v4 to v17 understands."""
    return {
        "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [
            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1},
        ]}],
    }


# -- against the real broker -------------------------------------------------------------------------


def test_api_versions_negotiation(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        conn = await connected(broker)
        try:
            assert conn.connected
            peer = conn.peer_versions
            for key, r in apis.SUPPORTED.items():  # the broker advertises exactly its API table
                assert peer[key] == (r.min_version, r.max_version)
            assert conn.version_for(apis.FETCH) == apis.SUPPORTED[apis.FETCH].max_version
            assert conn.version_for(apis.FETCH, highest=12) == 12
            with pytest.raises(UnsupportedVersionError, match="does not support"):
                conn.version_for(4, highest=7)  # LeaderAndIsr: not advertised by the peer
            with pytest.raises(UnsupportedVersionError, match="no common version"):
                conn.version_for(apis.FETCH, highest=3)  # the broker's floor is v4
            with pytest.raises(UnsupportedVersionError, match="not v3"):
                await conn.send(apis.FETCH, {}, version=3)
            assert conn.connected  # refusing a version locally does not touch the connection
            response = await conn.send(apis.API_VERSIONS, {"client_software_name": "t",
                                                           "client_software_version": "1"})
            assert response.error_code == ErrorCode.NONE
        finally:
            await conn.close()
        assert not conn.connected

    run(scenario)


def test_metadata(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        conn = await connected(broker)
        try:
            for version in (0, 9, conn.version_for(apis.METADATA)):
                response = await conn.send(apis.METADATA, {"topics": None, "allow_auto_topic_creation": False},
                                           version=version)
                assert type(response).__version__ == version
                assert [(b.host, b.port) for b in response.brokers] == [("127.0.0.1", broker.port)]
            # a kio request object fixes the version itself
            request = entities.build(apis.request_class(apis.METADATA, 4), {"topics": None})
            response = await conn.send(apis.METADATA, request)
            assert type(response).__version__ == 4
            with pytest.raises(ValueError, match="not v5"):
                await conn.send(apis.METADATA, request, version=5)
        finally:
            await conn.close()

    run(scenario)


def test_response_larger_than_max_response_bytes_closes_the_connection(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        conn = await connected(broker, max_response_bytes=600)  # enough for ApiVersions, not for a Metadata
        with pytest.raises(BrokerConnectionError, match=r"protocol error: response size \d+ is outside 4..600"):
            await conn.send(apis.METADATA, {"topics": [{"name": "x" * 1000}], "allow_auto_topic_creation": False})
        assert not conn.connected

    run(scenario)


def test_produce_then_fetch_returns_the_same_bytes(broker: BrokerProcess) -> None:
    topic = unique_topic("bytes")

    async def scenario() -> None:
        conn = await connected(broker)
        try:
            topic_id = await create_topic(conn, topic)
            batch = build_batch([(b"k1", b"v1"), (None, b"v2"), (b"k3", None)], base_offset=0)
            response = await conn.send(apis.PRODUCE, {"acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
            (partition,) = response.responses[0].partition_responses
            assert partition.error_code == ErrorCode.NONE and partition.base_offset == 0
            for version in (4, 12, 13, conn.version_for(apis.FETCH)):  # by name up to v12, by topic id after
                fetched = await conn.send(apis.FETCH, fetch_request(topic, topic_id, 0), version=version)
                (data,) = fetched.responses[0].partitions
                assert data.error_code == ErrorCode.NONE
                assert data.high_watermark == 3
                records = data.records
                assert type(records) is bytes  # kept as the stored bytes, for a follower to append as they are
                # identical except the partition leader epoch (bytes 12..16), which a leader may stamp
                assert len(records) == len(batch)
                assert records[:12] == batch[:12] and records[16:] == batch[16:]
                assert [r.value for r in decode_records(records)] == [b"v1", b"v2", None]
            past_end = await conn.send(apis.FETCH, fetch_request(topic, topic_id, 3))
            assert not past_end.responses[0].partitions[0].records  # None or b"": nothing to append
        finally:
            await conn.close()

    run(scenario)


def test_concurrent_sends_are_pipelined_and_each_gets_its_own_response(broker: BrokerProcess) -> None:
    n = 150

    async def scenario() -> None:
        conn = await connected(broker)
        try:
            async def ask(i: int) -> tuple[int, Any]:
                if i % 3 == 0:
                    return i, await conn.send(apis.API_VERSIONS, {"client_software_name": "t",
                                                                  "client_software_version": str(i)})
                name = f"absent-{i}"
                return i, await conn.send(apis.METADATA, {"topics": [{"name": name}],
                                                          "allow_auto_topic_creation": False},
                                          version=[1, 9, 12][i % 3])

            tasks = [asyncio.create_task(ask(i)) for i in range(n)]
            await asyncio.sleep(0)  # every task has written its request; no response has been read yet
            assert conn.in_flight == n
            for i, response in await asyncio.gather(*tasks):
                if i % 3 == 0:
                    assert type(response).__name__ == "ApiVersionsResponse"
                else:
                    assert type(response).__version__ == [1, 9, 12][i % 3]
                    (topic,) = response.topics
                    assert topic.name == f"absent-{i}"
                    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert conn.in_flight == 0 and conn.connected
        finally:
            await conn.close()

    run(scenario)


def test_cancelled_send_leaves_the_connection_usable(broker: BrokerProcess) -> None:
    topic = unique_topic("cancel")

    async def scenario() -> None:
        conn = await connected(broker)
        try:
            topic_id = await create_topic(conn, topic)
            long_poll = asyncio.create_task(conn.send(apis.FETCH, fetch_request(topic, topic_id, 0,
                                                                                max_wait_ms=300)))
            await asyncio.sleep(0.05)
            long_poll.cancel()
            with pytest.raises(asyncio.CancelledError):
                await long_poll
            # the late Fetch response is read and dropped; the next response still matches its request
            response = await conn.send(apis.METADATA, {"topics": [{"name": topic}]})
            assert response.topics[0].name == topic
            assert conn.connected and conn.in_flight == 0
        finally:
            await conn.close()

    run(scenario)


# -- misbehaving peers ---------------------------------------------------------------------------------


class FakePeer:
    """A tiny Kafka peer on 127.0.0.1 that answers ApiVersions and then misbehaves as ``mode`` says.

    Modes: ``close`` (close at accept), ``mute`` (never answer anything), ``close_mid_request`` (read
    one request after ApiVersions, then close), ``silent`` (read requests, never answer them),
    ``wrong_id`` (answer the next request with a correlation id it never sent), ``v0_only`` (an old
    broker: ApiVersions v0 only).
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.server: asyncio.Server | None = None
        self.api_versions_asked: list[int] = []
        self.requests_seen = 0
        self.port = 0
        self.clients: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> FakePeer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.clients:
            writer.close()
        await asyncio.wait_for(self.server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients.append(writer)
        try:
            if self.mode == "close":
                return
            while True:
                (size,) = SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, correlation_id = peek_header(frame)
                if self.mode == "mute":
                    continue
                if api_key == apis.API_VERSIONS:
                    self.api_versions_asked.append(version)
                    writer.write(self._api_versions(version, correlation_id))
                    await writer.drain()
                    continue
                self.requests_seen += 1
                if self.mode == "close_mid_request":
                    return
                if self.mode == "wrong_id":
                    body = apis.encode_body(entities.build(apis.response_class(api_key, version), {}))
                    flexible = apis.response_header_is_flexible(api_key, version)
                    writer.write(response_prefix(correlation_id + 1000, len(body), flexible_header=flexible) + body)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _api_versions(self, version: int, correlation_id: int) -> bytes:
        if self.mode == "v0_only" and version > 0:
            version, values = 0, {"error_code": ErrorCode.UNSUPPORTED_VERSION,
                                  "api_keys": [{"api_key": apis.API_VERSIONS, "min_version": 0, "max_version": 0}]}
        else:
            ranges = [{"api_key": r.key, "min_version": r.min_version, "max_version": r.max_version}
                      for r in apis.SUPPORTED.values()]
            if self.mode == "v0_only":
                ranges = [{"api_key": apis.API_VERSIONS, "min_version": 0, "max_version": 0},
                          {"api_key": apis.METADATA, "min_version": 0, "max_version": 1}]
            values = {"error_code": ErrorCode.NONE, "api_keys": ranges}
        body = apis.encode_body(entities.build(apis.response_class(apis.API_VERSIONS, version), values))
        return response_prefix(correlation_id, len(body), flexible_header=False) + body


def test_connect_to_a_port_nobody_listens_on_fails_fast() -> None:
    port = free_port()

    async def scenario() -> None:
        conn = BrokerConnection("127.0.0.1", port, connect_timeout_ms=5000)
        with pytest.raises(BrokerConnectionError, match=f"127.0.0.1:{port}: cannot connect") as e:
            await conn.connect()
        assert e.value.port == port and not conn.connected
        with pytest.raises(BrokerConnectionError):
            await conn.send(apis.METADATA, {})

    run(scenario)


def test_peer_that_closes_at_once_fails_connect() -> None:
    async def scenario() -> None:
        async with FakePeer("close") as peer:
            conn = BrokerConnection("127.0.0.1", peer.port, connect_timeout_ms=5000)
            with pytest.raises(BrokerConnectionError, match="closed by the broker"):
                await conn.connect()
            assert not conn.connected

    run(scenario)


def test_peer_that_never_answers_api_versions_fails_connect_within_the_timeout() -> None:
    async def scenario() -> None:
        async with FakePeer("mute") as peer:
            conn = BrokerConnection("127.0.0.1", peer.port, connect_timeout_ms=300)
            started = time.monotonic()
            with pytest.raises(BrokerConnectionError, match="within 300 ms"):
                await conn.connect()
            assert 0.25 <= time.monotonic() - started < 2.0
            assert not conn.connected

    run(scenario)


def test_peer_that_closes_mid_request_fails_every_request_in_flight() -> None:
    async def scenario() -> None:
        async with FakePeer("close_mid_request") as peer:
            conn = BrokerConnection("127.0.0.1", peer.port, request_timeout_ms=10_000)
            await conn.connect()
            sends = [asyncio.create_task(conn.send(apis.METADATA, {"topics": None})) for _ in range(5)]
            results = await asyncio.gather(*sends, return_exceptions=True)
            assert all(isinstance(r, BrokerConnectionError) for r in results), results
            assert "closed by the broker" in str(results[0])
            assert peer.requests_seen == 1
            assert not conn.connected and conn.in_flight == 0
            with pytest.raises(BrokerConnectionError, match="closed by the broker"):  # never reused
                await conn.send(apis.METADATA, {"topics": None})

    run(scenario)


def test_silent_peer_times_out_within_the_bound_and_closes_the_connection() -> None:
    async def scenario() -> None:
        async with FakePeer("silent") as peer:
            conn = BrokerConnection("127.0.0.1", peer.port, request_timeout_ms=5_000)
            await conn.connect()
            started = time.monotonic()
            sends = [asyncio.create_task(conn.send(apis.METADATA, {"topics": None}, timeout_ms=300)),
                     asyncio.create_task(conn.send(apis.METADATA, {"topics": None})),
                     asyncio.create_task(conn.send(apis.METADATA, {"topics": None}))]
            results = await asyncio.gather(*sends, return_exceptions=True)
            elapsed = time.monotonic() - started
            assert all(isinstance(r, BrokerConnectionError) for r in results), results
            assert "within 300 ms" in str(results[0])
            assert all(r is results[0] for r in results[1:])  # the others fail for the same reason, at once
            assert 0.25 <= elapsed < 2.0, elapsed
            assert not conn.connected

    run(scenario)


def test_response_with_an_unexpected_correlation_id_closes_the_connection() -> None:
    async def scenario() -> None:
        async with FakePeer("wrong_id") as peer:
            conn = BrokerConnection("127.0.0.1", peer.port, request_timeout_ms=5_000)
            await conn.connect()
            with pytest.raises(BrokerConnectionError, match="protocol error: response with correlation id"):
                await conn.send(apis.METADATA, {"topics": None})
            assert not conn.connected

    run(scenario)


def test_api_versions_falls_back_for_an_old_peer() -> None:
    async def scenario() -> None:
        async with FakePeer("v0_only") as peer:
            conn = BrokerConnection("127.0.0.1", peer.port, request_timeout_ms=5_000)
            await conn.connect()
            try:
                assert peer.api_versions_asked == [3, 0]
                assert conn.peer_versions == {apis.API_VERSIONS: (0, 0), apis.METADATA: (0, 1)}
                assert conn.version_for(apis.METADATA) == 1
                with pytest.raises(UnsupportedVersionError, match="does not support Fetch"):
                    conn.version_for(apis.FETCH)
            finally:
                await conn.close()

    run(scenario)


# -- the pool ------------------------------------------------------------------------------------------


def test_reconnect_backoff_grows_to_its_maximum_and_resets() -> None:
    backoff = ReconnectBackoff()
    now = 1_000
    assert backoff.delay_ms(now) == 0
    schedule = [backoff.failed(now, 0.5) for _ in range(7)]
    assert schedule == [50, 100, 200, 400, 800, 1000, 1000]
    assert backoff.delay_ms(now) == 1000 and backoff.delay_ms(now + 400) == 600 and backoff.delay_ms(now + 2000) == 0
    assert ReconnectBackoff().failed(now, 0.0) == 40 and ReconnectBackoff().failed(now, 0.999) == 59  # ±20% jitter
    backoff.succeeded()
    assert backoff.delay_ms(now) == 0 and backoff.failed(now, 0.5) == 50


def test_pool_backs_off_between_failed_connects_and_knows_only_resolvable_brokers() -> None:
    port = free_port()

    async def scenario() -> None:
        pool = ConnectionPool(client_id="odradek-tests", resolve=lambda b: ("127.0.0.1", port) if b == 7 else None,
                              connect_timeout_ms=2000, draw=lambda: 0.5)
        try:
            with pytest.raises(BrokerNotAvailableError, match="broker 8 has no registered address"):
                await pool.send(8, apis.METADATA, {})
            attempts = []
            for _ in range(3):
                started = time.monotonic()
                with pytest.raises(BrokerConnectionError, match="cannot connect"):
                    await pool.send(7, apis.METADATA, {})
                attempts.append(time.monotonic() - started)
            assert attempts[1] >= 0.045 and attempts[2] >= 0.095, attempts  # 50 ms, then 100 ms
            assert max(attempts) < 2.0
        finally:
            await pool.close()

    run(scenario)


def test_pool_reconnects_after_the_broker_restarts(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        # the resolver reads the broker's current address, as the live metadata would after a re-registration
        pool = ConnectionPool(client_id="odradek-tests",
                              resolve=lambda b: broker.address if b == BROKER_ID else None,
                              connect_timeout_ms=2000, request_timeout_ms=5000)
        try:
            first = await pool.send(BROKER_ID, apis.METADATA, {"topics": None})
            assert first.brokers[0].port == broker.port
            before = await pool.connection(BROKER_ID)
            assert await pool.connection(BROKER_ID) is before and pool.broker_ids == {BROKER_ID}

            assert await asyncio.to_thread(broker.stop) == 0
            with pytest.raises(BrokerConnectionError):
                await pool.send(BROKER_ID, apis.METADATA, {"topics": None})
            await asyncio.to_thread(broker.start)  # a new port: the pool must follow the resolver

            loop = asyncio.get_running_loop()
            deadline = loop.time() + 15
            while True:
                try:
                    again = await pool.send(BROKER_ID, apis.METADATA, {"topics": None})
                    break
                except BrokerConnectionError:
                    if loop.time() > deadline:
                        raise
                    await asyncio.sleep(0.05)
            assert again.brokers[0].port == broker.port
            after = await pool.connection(BROKER_ID)
            assert after is not before and after.address == broker.address and not before.connected

            pool.drop(BROKER_ID)
            assert not after.connected
            assert (await pool.send(BROKER_ID, apis.METADATA, {"topics": None})).brokers
            assert await pool.connection(BROKER_ID) is not after
        finally:
            await pool.close()
        with pytest.raises(BrokerConnectionError, match="pool is closed"):
            await pool.send(BROKER_ID, apis.METADATA, {})

    run(scenario)
