"""What every SASL mechanism shares: the server and client interfaces, their state, and the one error.

A server is fed the client's tokens (SaslAuthenticate's ``auth_bytes``, or the raw frames of a v0
SaslHandshake) one at a time through ``respond``, and returns the token to send back. A client is the
mirror: ``first()`` is its initial token, ``respond(challenge)`` answers each server token.

Invariants:

- ``respond`` either returns bytes or raises ``SaslAuthenticationError``; nothing else escapes, whatever
  the bytes (a mechanism's own bugs excepted).
- After a failure the object is dead: every later ``respond`` raises (``ILLEGAL_SASL_STATE``). After
  completion likewise: a token after the last one is out of order, as Kafka's servers treat it.
- ``complete`` turns True once, only after the peer proved itself; ``authorization_id`` (server) is
  readable only then.
- An error's message is the text Kafka puts in SaslAuthenticate's ``error_message`` (KIP-152). Its
  ``reason`` is the detail for the broker's log. Neither ever holds a password, a proof or a key.
- Not thread-safe: one object per connection and exchange.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from odradek.protocol.errors import ErrorCode, KafkaError


class SaslAuthenticationError(KafkaError):
    """An exchange failed. ``str(err)`` is what the client may read; ``reason`` is for the broker's log.

    ``code`` is ``SASL_AUTHENTICATION_FAILED``, or ``ILLEGAL_SASL_STATE`` for a token that came out of order.
    """

    code = ErrorCode.SASL_AUTHENTICATION_FAILED

    def __init__(self, message: str, *, reason: str | None = None, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else message
        if code is not None:
            self.code = code


class UnsupportedSaslMechanismError(KafkaError):
    """A mechanism the broker does not offer (SaslHandshake's UNSUPPORTED_SASL_MECHANISM)."""

    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


class _Exchange(ABC):
    """The state both sides share: running, complete, or failed; and the guard around each step."""

    mechanism: str

    def __init__(self) -> None:
        self._complete = False
        self._failed = False

    @property
    def complete(self) -> bool:
        return self._complete

    def _run(self, step_name: str, token: bytes, step: Callable[[bytes], bytes]) -> bytes:
        if self._failed or self._complete:
            state = "FAILED" if self._failed else "COMPLETE"
            raise SaslAuthenticationError(
                f"Unexpected {step_name} in SASL/{self.mechanism} state {state}", code=ErrorCode.ILLEGAL_SASL_STATE
            )
        try:
            return step(bytes(token))
        except SaslAuthenticationError:
            self._failed = True
            raise


class SaslServer(_Exchange):
    """The server side of one mechanism. Subclasses implement ``_step``."""

    def __init__(self) -> None:
        super().__init__()
        self._authorization_id: str | None = None

    def respond(self, token: bytes) -> bytes:
        """Evaluate the client's ``token``; return the challenge (possibly empty) to send back."""
        return self._run("client token", token, self._step)

    @property
    def authorization_id(self) -> str:
        """The authenticated user name. ``RuntimeError`` before the exchange is complete."""
        if not self._complete or self._authorization_id is None:
            raise RuntimeError(f"SASL/{self.mechanism} exchange has not completed")
        return self._authorization_id

    def _succeed(self, user: str) -> None:
        self._authorization_id = user
        self._complete = True

    @abstractmethod
    def _step(self, token: bytes) -> bytes: ...


class SaslClient(_Exchange):
    """The client side of one mechanism. Subclasses implement ``_first`` and ``_step``."""

    def __init__(self) -> None:
        super().__init__()
        self._started = False

    def first(self) -> bytes:
        """The initial token, sent in the first SaslAuthenticate. Only once."""
        if self._started:
            raise SaslAuthenticationError(
                f"SASL/{self.mechanism} initial token already sent", code=ErrorCode.ILLEGAL_SASL_STATE
            )
        self._started = True
        return self._run("initial token", b"", lambda _: self._first())

    def respond(self, challenge: bytes) -> bytes:
        """Answer the server's ``challenge``; returns b"" once nothing more is to be sent (then ``complete``)."""
        if not self._started:
            raise SaslAuthenticationError(
                f"SASL/{self.mechanism} challenge before the initial token", code=ErrorCode.ILLEGAL_SASL_STATE
            )
        return self._run("server challenge", challenge, self._step)

    @abstractmethod
    def _first(self) -> bytes: ...

    @abstractmethod
    def _step(self, challenge: bytes) -> bytes: ...
