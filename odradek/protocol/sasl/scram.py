"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer speaks them.

Four messages::

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<base64 proof>
    server-final   v=<base64 server signature>

The message grammar, nonces, proof check and signatures are scramp's (``scramp.ScramMechanism.make_server``
and ``scramp.ScramClient``); this module adds Kafka's rules around them and turns every failure into one
``SaslAuthenticationError``:

- The credential lookup is ``user -> ScramCredential or None`` (``odradek.security.scram``); credentials
  below 4096 iterations never authenticate (Kafka's minimum).
- Any failure but one is reported to the client in Kafka's words for a SaslException,
  ``Authentication failed during authentication due to invalid credentials with SASL mechanism <M>``
  (Kafka hides from the client whether the user exists); ``reason`` says which: unknown user, wrong
  proof, nonce mismatch, malformed message. The one exception, as in Kafka, is an authorization id
  different from the user name, reported as ``Authentication failed: Client requested an authorization id
  that is different from username``.
- Kafka's ``tokenauth`` extension (delegation tokens) is refused: Odradek has no delegation tokens.

Where this differs from Kafka (all rare; Kafka's and librdkafka's clients send none of them):

- other client-first extensions are refused (Kafka ignores them);
- an authorization id equal to the user name is refused (Kafka accepts it);
- the ``c=`` channel-binding field must be the base64 of the client's GS2 header (Kafka does not look);
- user names are SASLprep-normalized by scramp (identity for ASCII and NFKC names).

The client side verifies the server's signature, and refuses a server asking for more than 16384
iterations (Kafka's maximum) so a hostile server cannot make it hash for minutes.

Invariants: each object runs one exchange, in order (``base``); ``authorization_id`` is the user name
whose proof verified; no error text holds a password, proof, key or signature.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from scramp import ScramClient as _ScrampClient
from scramp import ScramException, ScramMechanism
from scramp.utils import ServerError

from odradek.protocol.sasl.base import SaslAuthenticationError, SaslClient, SaslServer, UnsupportedSaslMechanismError
from odradek.security.scram import MAX_ITERATIONS, SCRAM_HASHES, ScramCredential

#: ``user -> ScramCredential``, or None for a user with no credential for this mechanism.
ScramCredentialLookup = Callable[[str], "ScramCredential | None"]

_REASONS = {
    ServerError.UNKNOWN_USER: "unknown user",
    ServerError.INVALID_PROOF: "invalid client proof (wrong password)",
    ServerError.NO_RESOURCES: "credential lookup failed",
}


def _check_mechanism(mechanism: str) -> str:
    if mechanism not in SCRAM_HASHES:
        raise UnsupportedSaslMechanismError(f"Unsupported SASL mechanism {mechanism[:64]}")
    return mechanism


def _text(token: bytes, what: str, message: str) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationError(message, reason=f"SCRAM {what} message is not UTF-8") from None


@contextmanager
def _scram_failures(message: str, what: str) -> Iterator[None]:
    """Turn scramp's errors (and malformed-input ValueErrors) into ``SaslAuthenticationError(message)``."""
    try:
        yield
    except ScramException as exc:
        detail = _REASONS.get(exc.server_error) if exc.server_error else None
        raise SaslAuthenticationError(message, reason=f"SCRAM {what}: {detail or exc.args[0]}") from None
    except ValueError as exc:
        raise SaslAuthenticationError(message, reason=f"SCRAM {what}: {type(exc).__name__}") from None


def _unescape_saslname(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer(SaslServer):
    """Server side of SCRAM-SHA-256/512. ``nonce`` fixes the server nonce (test vectors only)."""

    def __init__(self, mechanism: str, credentials: ScramCredentialLookup, *, nonce: str | None = None) -> None:
        super().__init__()
        self.mechanism = _check_mechanism(mechanism)
        self._credentials = credentials
        self._failure = (
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
        )
        self._user: str | None = None
        self._scram = ScramMechanism(mechanism).make_server(self._auth_info, s_nonce=nonce)
        self._awaiting_final = False

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int] | None:
        credential = self._credentials(user)
        if credential is None:
            return None
        self._user = user
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def _fail(self, reason: str) -> SaslAuthenticationError:
        return SaslAuthenticationError(self._failure, reason=reason)

    def _step(self, token: bytes) -> bytes:
        if not self._awaiting_final:
            return self._client_first(_text(token, "client-first", self._failure))
        return self._client_final(_text(token, "client-final", self._failure))

    def _client_first(self, text: str) -> bytes:
        self._check_kafka_rules(text)
        with _scram_failures(self._failure, "client-first"):
            self._scram.set_client_first(text)
            server_first = self._scram.get_server_first()
        self._awaiting_final = True
        return server_first.encode("utf-8")

    def _check_kafka_rules(self, text: str) -> None:
        """Authorization id and extensions, which Kafka treats in its own way (see the module docstring)."""
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise self._fail("SCRAM client-first: malformed GS2 header")
        _flag, authzid, bare = parts
        attributes = bare.split(",")
        extensions = {a.partition("=")[0] for a in attributes[2:] if len(a.partition("=")[0]) > 1}
        if "tokenauth" in extensions:
            raise self._fail("SCRAM client-first: delegation token authentication (tokenauth) is not supported")
        if extensions:
            raise self._fail("SCRAM client-first: SCRAM extensions are not supported")
        if authzid:
            if not authzid.startswith("a=") or not attributes[0].startswith("n="):
                raise self._fail("SCRAM client-first: malformed GS2 header")
            if _unescape_saslname(authzid[2:]) != _unescape_saslname(attributes[0][2:]):
                raise SaslAuthenticationError(
                    "Authentication failed: Client requested an authorization id that is different from username"
                )
            raise self._fail("SCRAM client-first: an authorization id in the GS2 header is not supported")

    def _client_final(self, text: str) -> bytes:
        with _scram_failures(self._failure, "client-final"):
            self._scram.set_client_final(text)
            server_final = self._scram.get_server_final()
        assert self._user is not None  # set by the lookup, which set_client_first ran
        self._succeed(self._user)
        return server_final.encode("utf-8")


class ScramClient(SaslClient):
    """Client side of SCRAM-SHA-256/512. ``nonce`` fixes the client nonce (test vectors only).

    ``ValueError`` if scramp cannot use the user name or password (empty, or refused by SASLprep).
    """

    def __init__(self, mechanism: str, username: str, password: str, *, nonce: str | None = None) -> None:
        super().__init__()
        self.mechanism = _check_mechanism(mechanism)
        try:
            self._scram = _ScrampClient([mechanism], username, password, c_nonce=nonce)
        except ScramException as exc:
            raise ValueError(f"SCRAM cannot use this user name or password: {exc.args[0]}") from None
        self._sent_final = False

    def _first(self) -> bytes:
        return self._scram.get_client_first().encode("utf-8")

    def _step(self, challenge: bytes) -> bytes:
        if not self._sent_final:
            return self._server_first(_text(challenge, "server-first", "Invalid SCRAM server first message"))
        text = _text(challenge, "server-final", "Invalid SCRAM server final message")
        with _scram_failures("Invalid server signature in server final message", "server-final"):
            self._scram.set_server_final(text)
        self._complete = True
        return b""

    def _server_first(self, text: str) -> bytes:
        with _scram_failures("Invalid SCRAM server first message", "server-first"):
            self._scram.set_server_first(text)
        iterations = int(self._scram.iterations)
        if iterations > MAX_ITERATIONS:
            raise SaslAuthenticationError(
                "Invalid SCRAM server first message",
                reason=f"SCRAM server-first asks for {iterations} iterations, more than {MAX_ITERATIONS}",
            )
        with _scram_failures("Invalid SCRAM server first message", "client-final"):
            client_final = self._scram.get_client_final()
        self._sent_final = True
        return client_final.encode("utf-8")
