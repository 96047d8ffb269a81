"""TLS handshakes between two ``ssl.SSLContext`` objects over in-memory BIOs: no sockets, no event loop."""

from __future__ import annotations

import ssl
from dataclasses import dataclass


@dataclass
class Pair:
    """Both ends after a completed handshake and one round trip of application data."""

    server: ssl.SSLObject
    client: ssl.SSLObject


def handshake(
    server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, server_hostname: str | None = "localhost"
) -> Pair:
    """Run the handshake, then send b"ping" and b"pong" (TLS 1.3 reports a refused client certificate only after
    the client's handshake is done). Raises the first ``ssl.SSLError`` either side meets."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_side=False, server_hostname=server_hostname)
    done = {"server": False, "client": False}
    for _ in range(20):
        for side, obj in (("client", client), ("server", server)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
            s_in.write(c_out.read())
            c_in.write(s_out.read())
        if all(done.values()):
            break
    else:
        raise AssertionError("handshake did not finish")
    client.write(b"ping")
    s_in.write(c_out.read())
    assert _read(server, s_in, c_out) == b"ping"
    server.write(b"pong")
    c_in.write(s_out.read())
    assert _read(client, c_in, s_out) == b"pong"
    return Pair(server, client)


def _read(obj: ssl.SSLObject, incoming: ssl.MemoryBIO, peer_out: ssl.MemoryBIO) -> bytes:
    for _ in range(5):
        try:
            return obj.read(4)
        except ssl.SSLWantReadError:
            incoming.write(peer_out.read())
    raise AssertionError("no data arrived")
