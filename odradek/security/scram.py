"""SCRAM credentials as Kafka stores them (KIP-84, KIP-554).

A broker never keeps a SCRAM password. Per user and mechanism (SCRAM-SHA-256, SCRAM-SHA-512) it keeps a
``ScramCredential``: the salt, the iteration count, and the two keys RFC 5802 derives from the salted
password: ``stored_key = H(HMAC(salted_password, "Client Key"))`` and
``server_key = HMAC(salted_password, "Server Key")``, where ``salted_password = Hi(password, salt, i)`` is
PBKDF2-HMAC with the mechanism's hash. The arithmetic is scramp's (``scramp.utils``); this module only
decides the inputs and the storage form.

Ways in:

- ``ScramCredential.from_password``: what ``kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=..]'``
  does: a random salt, 4096 iterations unless told otherwise.
- ``ScramCredential.from_salted_password``: what an AlterUserScramCredentials upsertion carries (the client
  sends salt, salted_password and iterations; the broker derives the keys).
- ``ScramCredential.parse``: Kafka's storage string, kept in ZooKeeper under ``/config/users/<user>`` as the
  value of the mechanism's key (Kafka's ScramCredentialUtils):
  ``salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>``. ``format()`` writes it back;
  ``parse(c.format()) == c`` always.

Invariants:

- ``iterations >= MIN_ITERATIONS`` (4096, Kafka's minimum for both mechanisms) for every credential; the
  factories also refuse more than ``MAX_ITERATIONS`` (16384), as Kafka's controller refuses them in
  AlterUserScramCredentials. A stored string with more is still read (older ZooKeeper clusters hold them).
- ``salt``, ``stored_key`` and ``server_key`` are non-empty bytes; the factories take no salt shorter than
  12 bytes (scramp's floor, below which the SCRAM server would refuse the credential; Kafka's tools make
  about 26). The keys are as long as the mechanism's
  digest when made here; a parsed credential is not tied to a mechanism (Kafka's storage string does not
  name one), so a credential filed under the wrong mechanism simply never authenticates.
- Passwords are hashed as their UTF-8 bytes with no SASLprep, as Kafka's ScramFormatter does, so a
  credential made here for a given salt is byte-identical to one made by kafka-configs.
- ``repr``/``str`` never show the keys (nor the salt's bytes); errors never echo the storage string.
- Pure: no I/O; safe to share between threads (frozen).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from scramp.utils import h, hi, hmac

SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"

#: Mechanism name -> hash constructor, for the two mechanisms Kafka supports.
SCRAM_HASHES: Final[dict[str, Callable[..., hashlib._Hash]]] = {
    SCRAM_SHA_256: hashlib.sha256,
    SCRAM_SHA_512: hashlib.sha512,
}

#: Kafka's mechanism type bytes, as AlterUserScramCredentials and DescribeUserScramCredentials carry them.
SCRAM_MECHANISM_TYPES: Final[dict[int, str]] = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}

MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384
DEFAULT_ITERATIONS: Final = 4096
#: Bytes of a random salt made by ``from_password`` (Kafka makes about 26 printable ones).
SALT_BYTES: Final = 24
#: The shortest salt the factories take: scramp's (and RFC 5802's advice); Kafka's own tools make longer ones.
MIN_SALT_BYTES: Final = 12

_FIELDS: Final = ("salt", "stored_key", "server_key", "iterations")


class ScramCredentialError(ValueError):
    """A credential that cannot be made or read. The message names what is wrong, never a key or password."""


def scram_hash(mechanism: str) -> Callable[..., hashlib._Hash]:
    """The hash constructor of ``mechanism``; ``ScramCredentialError`` if it is not a SCRAM mechanism Kafka has."""
    try:
        return SCRAM_HASHES[mechanism]
    except KeyError:
        raise ScramCredentialError(
            f"unknown SCRAM mechanism {mechanism!r}: expected one of {', '.join(SCRAM_HASHES)}"
        ) from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(password, salt, iterations)`` as a Kafka client computes it (PBKDF2-HMAC of the UTF-8 bytes)."""
    _check_iterations(iterations, upper=True)
    return hi(scram_hash(mechanism), password.encode("utf-8"), salt, iterations)


def _check_iterations(iterations: int, *, upper: bool) -> None:
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise ScramCredentialError(f"iterations must be an int, not {type(iterations).__name__}")
    if iterations < MIN_ITERATIONS:
        raise ScramCredentialError(f"iterations {iterations} is less than the minimum {MIN_ITERATIONS}")
    if upper and iterations > MAX_ITERATIONS:
        raise ScramCredentialError(f"iterations {iterations} is more than the maximum {MAX_ITERATIONS}")


@dataclass(frozen=True, repr=False)
class ScramCredential:
    """One user's SCRAM credential for one mechanism (see the module docstring)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __post_init__(self) -> None:
        for name in ("salt", "stored_key", "server_key"):
            value = getattr(self, name)
            if not isinstance(value, bytes):
                raise ScramCredentialError(f"{name} must be bytes, not {type(value).__name__}")
            if not value:
                raise ScramCredentialError(f"{name} is empty")
        _check_iterations(self.iterations, upper=False)

    def __repr__(self) -> str:
        return f"ScramCredential(salt=<{len(self.salt)} bytes>, keys=<hidden>, iterations={self.iterations})"

    __str__ = __repr__

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salted_password: bytes, salt: bytes, iterations: int
    ) -> ScramCredential:
        """The credential an AlterUserScramCredentials upsertion describes.

        Raises ``ScramCredentialError`` for an unknown mechanism, a salt under 12 bytes, an empty salted password, or
        iterations outside ``[MIN_ITERATIONS, MAX_ITERATIONS]``.
        """
        hf = scram_hash(mechanism)
        _check_iterations(iterations, upper=True)
        if not salted_password:
            raise ScramCredentialError("salted_password is empty")
        if len(salt) < MIN_SALT_BYTES:
            raise ScramCredentialError(f"salt is {len(salt)} bytes; at least {MIN_SALT_BYTES} are needed")
        client_key = hmac(hf, salted_password, b"Client Key")
        return cls(
            salt=bytes(salt),
            stored_key=h(hf, client_key),
            server_key=hmac(hf, salted_password, b"Server Key"),
            iterations=iterations,
        )

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
    ) -> ScramCredential:
        """A new credential for ``password``, with a random salt unless one is given (tests, test vectors).

        Raises ``ScramCredentialError`` as ``from_salted_password`` does, and for an empty password.
        """
        if not password:
            raise ScramCredentialError("password is empty")
        if salt is None:
            salt = secrets.token_bytes(SALT_BYTES)
        return cls.from_salted_password(
            mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
        )

    def format(self) -> str:
        """Kafka's storage string: ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def parse(cls, text: str) -> ScramCredential:
        """Read Kafka's storage string (the four fields in any order, each exactly once).

        Raises ``ScramCredentialError`` naming the field that is missing, repeated, unknown or malformed.
        """
        fields: dict[str, str] = {}
        for number, token in enumerate(text.split(","), start=1):
            name, sep, value = token.partition("=")
            if not sep or not name:
                raise ScramCredentialError(f"SCRAM credential item {number} is not of the form name=value")
            if name not in _FIELDS:
                raise ScramCredentialError(
                    f"SCRAM credential has an unknown field {name[:32]!r}: expected {', '.join(_FIELDS)}"
                )
            if name in fields:
                raise ScramCredentialError(f"SCRAM credential has the field {name!r} twice")
            fields[name] = value
        missing = [name for name in _FIELDS if name not in fields]
        if missing:
            raise ScramCredentialError(f"SCRAM credential lacks {', '.join(missing)}")
        iterations_text = fields["iterations"]
        if not (iterations_text.isascii() and iterations_text.isdigit()) or len(iterations_text) > 10:
            raise ScramCredentialError("SCRAM credential's iterations is not a decimal integer")
        return cls(
            salt=_b64_field(fields, "salt"),
            stored_key=_b64_field(fields, "stored_key"),
            server_key=_b64_field(fields, "server_key"),
            iterations=int(iterations_text),
        )


def _b64_field(fields: dict[str, str], name: str) -> bytes:
    try:
        return base64.b64decode(fields[name], validate=True)
    except (binascii.Error, ValueError):
        raise ScramCredentialError(f"SCRAM credential's {name} is not valid base64") from None
