"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer speaks it.

One token from the client, ``authzid NUL authcid NUL passwd`` (UTF-8), one empty token back. The server
checks, in Kafka's order and with Kafka's messages (sent to the client as they are, KIP-152):

1. exactly three NUL-separated parts, else ``Invalid SASL/PLAIN response: expected 3 tokens, got N``;
2. a user name, else ``Authentication failed: username not specified``;
3. a password, else ``Authentication failed: password not specified``;
4. the password, else ``Authentication failed: Invalid username or password`` (an unknown user gets the
   same words); a lookup that raises gives ``Authentication failed: credentials for user could not be
   verified``;
5. an authorization id, if sent, equal to the user name, else ``Authentication failed: Client requested an
   authorization id that is different from username``.

Invariants: the password is compared as UTF-8 bytes in constant time (``hmac.compare_digest``), also for
unknown users, so timing tells neither the password nor whether the user exists; the password is never
kept past ``respond`` nor put in an error. The lookup is ``user -> password or None`` (the JAAS line's
``user_<name>="<password>"`` options, see ``odradek.security.jaas.plain_users``).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from odradek.protocol.sasl.base import SaslAuthenticationError, SaslClient, SaslServer

PLAIN: str = "PLAIN"

#: ``user -> password``, or None for a user with no password.
PasswordLookup = Callable[[str], "str | None"]

_INVALID = "Authentication failed: Invalid username or password"
# Compared against when the user is unknown, so an unknown user costs what a wrong password costs.
_NO_PASSWORD = b"\x00" * 32


class PlainServer(SaslServer):
    """Server side of SASL/PLAIN; ``passwords`` looks a user's password up."""

    mechanism = PLAIN

    def __init__(self, passwords: PasswordLookup) -> None:
        super().__init__()
        self._passwords = passwords

    def _step(self, token: bytes) -> bytes:
        parts = token.split(b"\x00", 3)
        if len(parts) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid_bytes, user_bytes, password = parts
        if not user_bytes:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        try:
            user = user_bytes.decode("utf-8")
            authzid = authzid_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError(_INVALID, reason="user name or authorization id is not UTF-8") from None
        try:
            expected = self._passwords(user)
        except Exception as exc:
            raise SaslAuthenticationError(
                "Authentication failed: credentials for user could not be verified",
                reason=f"password lookup failed: {type(exc).__name__}",
            ) from None
        known = expected is not None
        matches = hmac.compare_digest(expected.encode("utf-8") if known else _NO_PASSWORD, password)
        if not (known and matches):
            raise SaslAuthenticationError(_INVALID, reason="unknown user" if not known else "wrong password")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self._succeed(user)
        return b""


class PlainClient(SaslClient):
    """Client side of SASL/PLAIN: sends the credentials, then accepts the server's empty answer."""

    mechanism = PLAIN

    def __init__(self, username: str, password: str, *, authorization_id: str = "") -> None:
        super().__init__()
        if not username or not password:
            raise ValueError("SASL/PLAIN needs a user name and a password")
        if "\x00" in username + password + authorization_id:
            raise ValueError("SASL/PLAIN user name, password and authorization id cannot contain NUL")
        self._token = b"\x00".join(s.encode("utf-8") for s in (authorization_id, username, password))

    def _first(self) -> bytes:
        token, self._token = self._token, b""
        return token

    def _step(self, challenge: bytes) -> bytes:
        if challenge:
            raise SaslAuthenticationError(
                "Authentication failed: unexpected SASL/PLAIN server challenge",
                reason=f"PLAIN server sent {len(challenge)} bytes where none are expected",
            )
        self._complete = True
        return b""
