"""FrameStream: the bytes a peer sends come out of ``readexactly`` whole, in order, once, however the peer splits
its writes, over TCP and TLS; a peer closing mid-read is reported with what arrived; a reader that stops reading
pauses the transport; a stream being discarded returns at the peer's close."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.broker.frame_stream import _FIRST_BUFFER, _OWN_BUFFER_FROM, _PAUSE_AT, _QUIET_READS, FrameStream
from odradek.security.tls import client_context, load_tls_settings, server_context
from tests.security import certs

Handler = Callable[[FrameStream, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    d: Path = tmp_path_factory.mktemp("frame-stream-tls")
    ca = certs.make_ca()
    keystore = certs.write_keystore_pem(d / "server.pem", certs.issue(ca, "localhost"))
    trust = certs.write_cert_pem(d / "ca.pem", ca)
    server = server_context(load_tls_settings({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}))
    client = client_context(load_tls_settings({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(trust)}))
    return server, client


async def _serve(handler: Handler, tls: ssl.SSLContext | None) -> tuple[asyncio.Server, int]:
    server = await asyncio.get_running_loop().create_server(lambda: FrameStream(handler), "127.0.0.1", 0, ssl=tls)
    return server, server.sockets[0].getsockname()[1]


async def _connect(port: int, tls: ssl.SSLContext | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, ssl=tls, server_hostname="localhost" if tls else None)


def _frames(sizes: list[int]) -> list[bytes]:
    return [bytes((i * 7 + j) % 251 for j in range(n)) for i, n in enumerate(sizes)]


async def _echo_frames(sizes: list[int], chunks: list[int], tls: tuple[ssl.SSLContext, ssl.SSLContext] | None) -> None:
    """Send length-prefixed frames in pieces of the given sizes (cycled); the server reads each frame with two
    readexactly calls and answers its length and checksum."""
    frames = _frames(sizes)

    async def handler(reader: FrameStream, writer: asyncio.StreamWriter) -> None:
        for _ in frames:
            (n,) = struct.unpack(">i", await reader.readexactly(4))
            body = await reader.readexactly(n)
            assert isinstance(body, bytes)
            writer.write(struct.pack(">iI", len(body), sum(body) & 0xFFFFFFFF))
        await writer.drain()

    server, port = await _serve(handler, tls[0] if tls else None)
    async with server:
        r, w = await _connect(port, tls[1] if tls else None)
        wire = b"".join(struct.pack(">i", len(f)) + f for f in frames)
        pos, k = 0, 0
        while pos < len(wire):
            step = chunks[k % len(chunks)]
            w.write(wire[pos:pos + step])
            await w.drain()
            pos, k = pos + step, k + 1
        for f in frames:
            n, total = struct.unpack(">iI", await asyncio.wait_for(r.readexactly(8), 10))
            assert (n, total) == (len(f), sum(f) & 0xFFFFFFFF)
        w.close()


SIZES = st.lists(st.sampled_from([0, 1, 3, 100, 4096, _OWN_BUFFER_FROM - 1, _OWN_BUFFER_FROM, 300_000, 1_100_000]),
                 min_size=1, max_size=8)
CHUNKS = st.lists(st.integers(1, 400_000), min_size=1, max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=SIZES, chunks=CHUNKS)
def test_frames_come_out_whole_and_in_order_over_tcp(sizes: list[int], chunks: list[int]) -> None:
    asyncio.run(_echo_frames(sizes, chunks, None))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=SIZES, chunks=CHUNKS)
def test_frames_come_out_whole_and_in_order_over_tls(sizes: list[int], chunks: list[int],
                                                      contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    asyncio.run(_echo_frames(sizes, chunks, contexts))


@pytest.mark.parametrize("reset", [False, True])
@pytest.mark.parametrize("wanted", [10, 1_000_000])
@pytest.mark.parametrize("use_tls", [False, True])
def test_a_peer_closing_mid_read_is_reported_with_what_arrived(
        wanted: int, use_tls: bool, reset: bool, contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    """A close (FIN) or a reset (RST, SO_LINGER 0): the reader gets what arrived, or a ConnectionResetError, and the
    next read after it raises the same way (the stream never fails with an error of its own making)."""
    async def run() -> None:
        seen: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

        async def handler(reader: FrameStream, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.readexactly(wanted)
            except (asyncio.IncompleteReadError, ConnectionResetError) as e:
                try:
                    await reader.readexactly(wanted)
                except (asyncio.IncompleteReadError, ConnectionResetError):
                    seen.set_result(e)
        server, port = await _serve(handler, contexts[0] if use_tls else None)
        async with server:
            _, w = await _connect(port, contexts[1] if use_tls else None)
            w.write(b"x" * 5)
            await w.drain()
            if reset:
                await asyncio.sleep(0.05)  # the 5 bytes read by the server first
                sock = w.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                w.transport.abort()
            else:
                w.close()
            e = await asyncio.wait_for(seen, 10)
            assert isinstance(e, asyncio.IncompleteReadError | ConnectionResetError)
            if isinstance(e, asyncio.IncompleteReadError) and not reset:
                assert e.partial == b"x" * 5 and e.expected == wanted
    asyncio.run(run())


def test_a_reader_that_stops_reading_pauses_the_transport_and_loses_nothing() -> None:
    async def run() -> None:
        release = asyncio.Event()
        streams: list[FrameStream] = []
        got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        async def handler(reader: FrameStream, writer: asyncio.StreamWriter) -> None:
            streams.append(reader)
            await release.wait()
            got.set_result(await reader.readexactly(total))
        total = 8 * _PAUSE_AT
        data = bytes(i % 253 for i in range(total))
        server, port = await _serve(handler, None)
        async with server:
            _, w = await _connect(port, None)
            w.write(data)  # far more than the receive buffer: the server stops reading, the client's buffers fill
            for _ in range(200):
                if streams and streams[0]._reading_paused:
                    break
                await asyncio.sleep(0.01)
            assert streams and streams[0]._reading_paused
            assert streams[0]._end - streams[0]._start < 2 * _PAUSE_AT  # bounded, not the whole 2 MiB
            release.set()
            assert await asyncio.wait_for(got, 10) == data
            w.close()
    asyncio.run(run())


def test_discard_until_eof_drops_what_comes_and_returns_at_the_close() -> None:
    async def run() -> None:
        done = asyncio.Event()

        async def handler(reader: FrameStream, writer: asyncio.StreamWriter) -> None:
            await reader.readexactly(3)
            await reader.discard_until_eof()
            done.set()
        server, port = await _serve(handler, None)
        async with server:
            _, w = await _connect(port, None)
            w.write(b"abc" + b"z" * 3_000_000)
            await w.drain()
            await asyncio.sleep(0.05)
            assert not done.is_set()
            w.close()
            await asyncio.wait_for(done.wait(), 10)
    asyncio.run(run())


def test_a_grown_receive_buffer_is_given_back_once_the_connection_is_quiet() -> None:
    async def run() -> None:
        streams: list[FrameStream] = []
        sizes: list[int] = []
        small = 0

        async def handler(reader: FrameStream, writer: asyncio.StreamWriter) -> None:
            streams.append(reader)
            for _ in range(4 + small):
                (n,) = struct.unpack(">i", await reader.readexactly(4))
                await reader.readexactly(n)
                sizes.append(len(reader._buf))
                writer.write(b"k")
                await writer.drain()

        small = _QUIET_READS + 2
        server, port = await _serve(handler, None)
        async with server:
            r, w = await _connect(port, None)
            # a busy phase: many small frames at once, so that reads fill the room they are offered
            w.write(b"".join(struct.pack(">i", 60_000) + bytes(60_000) for _ in range(4)))
            await w.drain()
            await asyncio.wait_for(r.readexactly(4), 10)
            grown = max(sizes)
            assert grown > _FIRST_BUFFER
            for _ in range(small):  # then a quiet one: a small frame at a time, each answered before the next
                w.write(struct.pack(">i", 10) + bytes(10))
                await asyncio.wait_for(r.readexactly(1), 10)
            assert sizes[-1] == _FIRST_BUFFER
            w.close()
    asyncio.run(run())
