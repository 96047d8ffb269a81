"""HTTP Basic authentication of the HTTP listener against the broker's SASL users.

"Security is on" when any Kafka listener uses SASL (SASL_PLAINTEXT or SASL_SSL): then every HTTP request needs
``Authorization: Basic`` with a user name and password that a SASL login on one of those listeners would accept,
and is answered 401 (with ``WWW-Authenticate``) otherwise. Without a SASL listener the broker has no users to
check against, and HTTP is open, as its Kafka listeners are.

The check *is* a SASL login: for each SASL listener and each of its enabled mechanisms, a client of that mechanism
holding the given password runs the whole exchange against a fresh server from the listener's own settings
(``broker/listener_security.py``): PLAIN compares with the listener's JAAS users, SCRAM-SHA-256/512 prove the
password against the stored credentials (``security/credentials.py``). No second copy of the rules, no password
kept.

Invariants: a password never reaches a log line or a response; a failed check costs the client the broker's
``connection.failed.authentication.delay.ms``; SCRAM's key derivation (PBKDF2, milliseconds) runs in a worker
thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Sequence

from odradek.broker.authentication import SaslSettings
from odradek.protocol.sasl import PLAIN, PlainClient, SaslAuthenticationError, SaslClient, ScramClient
from odradek.protocol.sasl.base import UnsupportedSaslMechanismError

_MAX_STEPS = 4  # PLAIN takes one token, SCRAM two


class BasicAuth:
    """The users of the broker's SASL listeners, checked through their own mechanisms (see the module)."""

    def __init__(self, listeners: Sequence[SaslSettings], failed_delay_ms: int = 100) -> None:
        self.listeners = tuple(listeners)
        self.failed_delay_s = failed_delay_ms / 1000

    async def user(self, authorization: str | None) -> str | None:
        """The authenticated user of an ``Authorization`` header, or None (missing, malformed or refused)."""
        credentials = parse_basic(authorization)
        if credentials is None:
            return None
        name = await asyncio.to_thread(self.check, *credentials)
        if name is None:
            await asyncio.sleep(self.failed_delay_s)
        return name

    def check(self, user: str, password: str) -> str | None:
        """The user name a SASL login with ``user``/``password`` would get on some SASL listener, else None."""
        if not user or not password:
            return None
        for settings in self.listeners:
            for mechanism in settings.mechanisms:
                name = _login(settings, mechanism, user, password)
                if name is not None:
                    return name
        return None


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """(user, password) of a ``Basic`` authorization header (RFC 7617, UTF-8), or None."""
    if not header:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


def _login(settings: SaslSettings, mechanism: str, user: str, password: str) -> str | None:
    try:
        server = settings.new_server(mechanism)
    except UnsupportedSaslMechanismError:
        return None
    client: SaslClient = PlainClient(user, password) if mechanism == PLAIN else ScramClient(mechanism, user, password)
    try:
        token = client.first()
        for _ in range(_MAX_STEPS):
            challenge = server.respond(token)
            if server.complete:
                return server.authorization_id
            token = client.respond(challenge)
    except SaslAuthenticationError:
        return None
    return None
