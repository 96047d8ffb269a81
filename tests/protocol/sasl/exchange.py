"""Runs a SASL client against a server, token by token, as the broker's SaslAuthenticate loop would."""

from __future__ import annotations

from odradek.protocol.sasl import SaslClient, SaslServer


def run_exchange(client: SaslClient, server: SaslServer, *, max_rounds: int = 4) -> list[bytes]:
    """Every token sent, in order (client, server, client, ...); raises what either side raises."""
    tokens = [client.first()]
    for _ in range(max_rounds):
        challenge = server.respond(tokens[-1])
        tokens.append(challenge)
        reply = client.respond(challenge)
        if server.complete and client.complete:
            return tokens
        tokens.append(reply)
    raise AssertionError(f"no completion after {max_rounds} rounds")
