"""SASL mechanisms as sans-IO state machines: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

The broker's SaslHandshake handler picks a mechanism with ``create_server``; its SaslAuthenticate handler
feeds each request's ``auth_bytes`` to ``server.respond`` and answers with the returned bytes, or, on
``SaslAuthenticationError``, with the error's ``code`` and ``str(err)`` as ``error_message`` (KIP-152),
logging ``err.reason``. Once ``server.complete``, ``server.authorization_id`` is the connection's user.
Inter-broker connections and tests use ``PlainClient`` and ``ScramClient``, the mirror image.

Nothing here touches sockets, files or the event loop; credentials come in through lookups (callables),
so the broker decides where they live (the JAAS line for PLAIN, the metadata store for SCRAM).

Invariants: see ``base`` (states, errors), ``plain`` and ``scram`` (Kafka's rules and wording).
"""

from __future__ import annotations

from odradek.protocol.sasl.base import (
    SaslAuthenticationError,
    SaslClient,
    SaslServer,
    UnsupportedSaslMechanismError,
)
from odradek.protocol.sasl.plain import PLAIN, PasswordLookup, PlainClient, PlainServer
from odradek.protocol.sasl.scram import ScramClient, ScramCredentialLookup, ScramServer
from odradek.security.scram import SCRAM_SHA_256, SCRAM_SHA_512

#: The mechanisms ``create_server`` knows, in the order a broker lists them by default.
SUPPORTED_MECHANISMS: tuple[str, ...] = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)


def create_server(
    mechanism: str,
    *,
    plain_passwords: PasswordLookup | None = None,
    scram_credentials: dict[str, ScramCredentialLookup] | None = None,
) -> SaslServer:
    """A fresh server for ``mechanism`` (a name as the client sent it in SaslHandshake).

    ``plain_passwords`` serves PLAIN; ``scram_credentials`` maps each enabled SCRAM mechanism to its lookup.
    Raises ``UnsupportedSaslMechanismError`` (Kafka's "Unsupported SASL mechanism <M>") for a mechanism that
    is unknown or has no lookup, i.e. is not enabled.
    """
    if mechanism == PLAIN and plain_passwords is not None:
        return PlainServer(plain_passwords)
    lookup = (scram_credentials or {}).get(mechanism)
    if lookup is not None:
        return ScramServer(mechanism, lookup)
    raise UnsupportedSaslMechanismError(f"Unsupported SASL mechanism {mechanism[:64]}")


__all__ = [
    "PLAIN",
    "SCRAM_SHA_256",
    "SCRAM_SHA_512",
    "SUPPORTED_MECHANISMS",
    "PasswordLookup",
    "PlainClient",
    "PlainServer",
    "SaslAuthenticationError",
    "SaslClient",
    "SaslServer",
    "ScramClient",
    "ScramCredentialLookup",
    "ScramServer",
    "UnsupportedSaslMechanismError",
    "create_server",
]
