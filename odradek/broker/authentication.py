"""The authenticate step of dispatch: who is on the other end of a connection.

PLAINTEXT listeners: every connection is ``User:ANONYMOUS``. SSL listeners: the principal comes from the client's
certificate once the TLS handshake is done (``security/principal.py``; ANONYMOUS without one). SASL_PLAINTEXT and
SASL_SSL listeners: a ``SaslAuthentication`` per connection runs Kafka's SASL exchange, and only then are other
requests served.

States of a connection on a SASL listener (Kafka's ``SaslServerAuthenticator``):

- ``HANDSHAKE``: ApiVersions and SaslHandshake are answered; any other request closes the connection ("Unexpected
  Kafka request of type ... during SASL handshake"). A SaslHandshake naming an enabled mechanism moves on; one
  naming another mechanism is answered UNSUPPORTED_SASL_MECHANISM with the enabled ones, then the connection
  closes.
- ``AUTHENTICATE``: after SaslHandshake v1, SaslAuthenticate requests carry the tokens (KIP-152: a failure is
  answered SASL_AUTHENTICATION_FAILED with a message, then the connection closes); after SaslHandshake v0, the
  frames that follow are bare tokens with no request header, answered with bare tokens (a failure just closes).
  Anything else closes the connection.
- ``AUTHENTICATED``: every request is served as the authenticated principal. With ``connections.max.reauth.ms``
  > 0 the session has that lifetime (SaslAuthenticate v1+ tells the client, KIP-368): a SaslHandshake starts a
  re-authentication, which must be by the same principal and mechanism; once the session has expired, any
  request other than a re-authentication closes the connection.

A failed authentication is answered only after ``connection.failed.authentication.delay.ms`` (KIP-306), and the
connection then closes; the log line names the peer and the mechanism, never a token or password.

Invariants: no request but ApiVersions and SASL reaches a handler before ``authenticated``; the principal never
changes on a connection; this module does no I/O and reads time only from the clock passed in.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from odradek.protocol.sasl import SaslAuthenticationError, SaslServer


class AuthenticationFailed(Exception):
    """The exchange failed: the message goes to the client (KIP-152) and the connection closes."""


class IllegalState(Exception):
    """A request that the SASL state does not allow: the connection closes with this reason."""


class State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SaslSettings:
    """A SASL listener's settings: its enabled mechanisms (in the order given) and how to start each one's server,
    the session lifetime (``connections.max.reauth.ms``, 0: none) and the failure delay."""

    mechanisms: tuple[str, ...]
    new_server: Callable[[str], SaslServer]
    max_reauth_ms: int = 0
    failed_delay_ms: int = 100


@dataclass(slots=True)
class SaslAuthentication:
    settings: SaslSettings
    now_ms: Callable[[], int]
    state: State = State.HANDSHAKE
    principal: str | None = None  # the authenticated user name, set once
    mechanism: str | None = None  # of the current or last exchange
    bare_tokens: bool = False  # after SaslHandshake v0: tokens come as frames with no request header
    session_expires_ms: int | None = None  # when the current session ends (None: never)
    _server: SaslServer | None = field(default=None, repr=False)
    _reauthenticating: bool = False

    @property
    def authenticated(self) -> bool:
        return self.principal is not None and self.state is State.AUTHENTICATED

    def check(self, api_key: int) -> None:
        """May a request of ``api_key`` be served now? ``IllegalState`` (close the connection) if not."""
        if self.state is State.AUTHENTICATED:
            if api_key == apis.SASL_HANDSHAKE:
                return  # a re-authentication starts (KIP-368)
            if api_key == apis.SASL_AUTHENTICATE:
                raise IllegalState("SaslAuthenticate without a SaslHandshake first")
            if self.session_expires_ms is not None and self.now_ms() >= self.session_expires_ms:
                raise IllegalState("its SASL session expired (connections.max.reauth.ms) and the client did not "
                                   "re-authenticate")
            return
        if self.state is State.HANDSHAKE:
            if api_key in (apis.API_VERSIONS, apis.SASL_HANDSHAKE):
                return
            raise IllegalState(f"unexpected Kafka request of type {_name(api_key)} during SASL handshake: "
                               "the client must authenticate first (check its security.protocol and sasl.mechanism)")
        if self.state is State.AUTHENTICATE:
            if api_key == apis.SASL_AUTHENTICATE and not self.bare_tokens:
                return
            raise IllegalState(f"unexpected Kafka request of type {_name(api_key)} during SASL authentication")
        raise IllegalState("authentication failed")

    def handshake(self, version: int, mechanism: str) -> tuple[int, list[str]]:
        """SaslHandshake: (error code, enabled mechanisms). An error closes the connection once answered."""
        enabled = list(self.settings.mechanisms)
        if self.state is State.AUTHENTICATED:
            if version == 0:
                self.state = State.FAILED
                return ErrorCode.ILLEGAL_SASL_STATE, enabled
            if mechanism != self.mechanism:
                self.state = State.FAILED
                return ErrorCode.ILLEGAL_SASL_STATE, enabled  # Kafka: a re-authentication keeps its mechanism
            self._reauthenticating = True
        elif self.state is not State.HANDSHAKE:
            self.state = State.FAILED
            return ErrorCode.ILLEGAL_SASL_STATE, enabled
        if mechanism not in self.settings.mechanisms:
            self.state = State.FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled
        self.mechanism = mechanism
        self._server = self.settings.new_server(mechanism)
        self.bare_tokens = version == 0
        self.state = State.AUTHENTICATE
        return ErrorCode.NONE, enabled

    def authenticate(self, token: bytes) -> tuple[bytes, int]:
        """One token of the exchange: (the token to send back, the session lifetime in ms to tell the client once
        the exchange is complete, else 0). ``AuthenticationFailed`` ends the connection."""
        if self.state is not State.AUTHENTICATE or self._server is None:
            raise IllegalState("a SASL token before SaslHandshake")
        server = self._server
        try:
            challenge = server.respond(token)
        except SaslAuthenticationError as e:  # the mechanisms raise nothing else (protocol/sasl/base.py)
            self.state = State.FAILED
            raise AuthenticationFailed(_message(e)) from None
        if not server.complete:
            return challenge, 0
        user = server.authorization_id
        if self._reauthenticating and user != self.principal:
            self.state = State.FAILED
            raise AuthenticationFailed(f"Cannot change principals during re-authentication from User:{self.principal}"
                                       f" to User:{user}")
        self.principal = user
        self.state = State.AUTHENTICATED
        self._server = None
        self._reauthenticating = False
        lifetime = self.settings.max_reauth_ms
        self.session_expires_ms = self.now_ms() + lifetime if lifetime > 0 else None
        return challenge, lifetime


def _name(api_key: int) -> str:
    spec = apis.SUPPORTED.get(api_key)
    return spec.name if spec is not None else f"api key {api_key}"


def _message(e: SaslAuthenticationError) -> str:
    """What the client is told: the mechanism's own message (it never holds a secret), else a generic one."""
    text = str(e).strip()
    if not text:
        return "Authentication failed during authentication due to invalid credentials with SASL mechanism"
    return text if text.startswith("Authentication failed") else f"Authentication failed: {text}"
