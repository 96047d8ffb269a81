"""SaslHandshake and SaslAuthenticate: the requests of a connection's SASL exchange (``broker/authentication.py``
holds its state machine).

On a SASL listener the connection state holds a ``SaslAuthentication`` under ``SASL``. A refused handshake or a
failed authentication is answered after ``connection.failed.authentication.delay.ms`` and the connection closes
(``CLOSE_AFTER_RESPONSE``). On any other listener, as in Kafka, both are answered ILLEGAL_SASL_STATE and nothing
else happens.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from odradek.broker.authentication import AuthenticationFailed, IllegalState, SaslAuthentication
from odradek.broker.context import CLOSE_AFTER_RESPONSE, PRINCIPAL, SASL, CloseConnection, RequestContext
from odradek.broker.throttle import DELAY_UNTIL
from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


def _auth(ctx: RequestContext) -> SaslAuthentication | None:
    auth = ctx.connection.get(SASL)
    return auth if isinstance(auth, SaslAuthentication) else None


def _fail_later(ctx: RequestContext, auth: SaslAuthentication, reason: str) -> None:
    """Answer after the failure delay, then close."""
    ctx.connection[DELAY_UNTIL] = time.monotonic() + auth.settings.failed_delay_ms / 1000
    ctx.connection[CLOSE_AFTER_RESPONSE] = reason


async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> dict[str, Any]:
    auth = _auth(ctx)
    if auth is None:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    mechanism = str(request.mechanism)
    code, enabled = auth.handshake(ctx.version, mechanism)
    if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        _fail_later(ctx, auth, f"SASL mechanism {mechanism!r} is not enabled on this listener (enabled: "
                               f"{', '.join(enabled)}; sasl.enabled.mechanisms)")
    elif code != ErrorCode.NONE:
        _fail_later(ctx, auth, f"SaslHandshake ({mechanism}) not expected in the connection's SASL state")
    return {"error_code": code, "mechanisms": enabled}


async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> dict[str, Any]:
    auth = _auth(ctx)
    if auth is None:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message":
                "SaslAuthenticate request received on a listener without SASL (or after authentication)",
                "auth_bytes": b"", "session_lifetime": 0}
    try:
        challenge, lifetime_ms = auth.authenticate(bytes(request.auth_bytes))
    except AuthenticationFailed as e:
        log.warning("failed authentication from %s with SASL mechanism %s: %s", ctx.peer, auth.mechanism, e)
        _fail_later(ctx, auth, f"authentication failed ({auth.mechanism})")
        return {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": str(e), "auth_bytes": b"",
                "session_lifetime": 0}
    except IllegalState as e:
        raise CloseConnection(str(e)) from None
    if auth.authenticated:
        _authenticated(ctx.connection, auth, ctx.peer, ctx.listener)
    return {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": challenge,
            "session_lifetime": lifetime_ms}


def bare_token(auth: SaslAuthentication, token: bytes, connection: dict[str, Any], peer: str,
               listener: str) -> bytes:
    """A token after SaslHandshake v0 (no request header): the token to send back, size-prefixed by the caller.
    A failure closes the connection (v0 has no way to report it)."""
    try:
        challenge, _ = auth.authenticate(token)
    except (AuthenticationFailed, IllegalState) as e:
        log.warning("failed authentication from %s with SASL mechanism %s: %s", peer, auth.mechanism, e)
        raise CloseConnection(f"authentication failed ({auth.mechanism})") from None
    if auth.authenticated:
        _authenticated(connection, auth, peer, listener)
    return challenge


def _authenticated(connection: dict[str, Any], auth: SaslAuthentication, peer: str, listener: str) -> None:
    connection[PRINCIPAL] = auth.principal
    log.debug("connection from %s on listener %s authenticated as User:%s (%s)", peer, listener, auth.principal,
              auth.mechanism)
