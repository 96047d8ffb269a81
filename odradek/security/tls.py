"""TLS for SSL and SASL_SSL listeners and for inter-broker connections, configured with Kafka's ``ssl.*`` keys.

Pure: no sockets, no asyncio. The broker hands :func:`load_tls_settings` one listener's ``ssl.*`` keys (per-listener
overrides already applied) and gets a validated, frozen :class:`TlsSettings`; :func:`server_context` and
:func:`client_context` turn that into ``ssl.SSLContext`` objects for the listener's server side and for
connections this broker opens (inter-broker, tests). :func:`reload_if_changed` gives fresh settings when a key store
or trust store file changed on disk (Kafka's dynamic keystore update, without the admin call), and
:class:`ReloadingServerContext` is a listener's server side that new connections see follow those files.

Key stores (``ssl.keystore.type``): PEM (a file with the private key and the certificate chain, or the inline
``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``) and PKCS12. Kafka's default type JKS is Java's own
format and cannot be read here: a file configured as JKS that is really PKCS12 (what Java 9+ ``keytool`` writes by
default) is loaded as PKCS12; a real JKS or JCEKS file is refused with the ``keytool -importkeystore`` command that
converts it. Trust stores (``ssl.truststore.type``): PEM (file or inline ``ssl.truststore.certificates``), PKCS12,
JKS as above. Python's ``ssl`` reads keys only from files: the key is written re-encrypted under a random one-time
password to a 0600 temporary file (in /dev/shm when there is one) that is removed as soon as OpenSSL has read it;
trust goes through ``cadata`` and never touches the disk.

Invariants:
- Every bad input raises :class:`SslConfigError` (a ``ValueError``) whose ``key`` is the offending config key and
  whose message says what to do. Passwords and key bytes never appear in messages, reprs or logs.
- A :class:`TlsSettings` is complete: building a context from it fails only for reasons OpenSSL keeps to itself
  (still reported as :class:`SslConfigError`).
- The effective protocols form one contiguous range of TLS versions (OpenSSL enables a range, not a set).
- ``ssl.cipher.suites`` governs TLS 1.2 and older exactly. Python's ``ssl`` cannot choose TLS 1.3 suites: naming
  only TLS 1.3 suites disables TLS 1.2 and older, naming none disables TLS 1.3 (as Java does when no suite of a
  version is enabled); naming some but not all of OpenSSL's TLS 1.3 defaults leaves all of them on, which is
  recorded in ``TlsSettings.notes`` and logged once as a warning.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import re
import secrets
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import pkcs12

log = logging.getLogger(__name__)

PrivateKey: TypeAlias = (
    rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey
    | dsa.DSAPrivateKey
)

KEYSTORE_TYPE = "ssl.keystore.type"
KEYSTORE_LOCATION = "ssl.keystore.location"
KEYSTORE_PASSWORD = "ssl.keystore.password"
KEY_PASSWORD = "ssl.key.password"
KEYSTORE_CHAIN = "ssl.keystore.certificate.chain"
KEYSTORE_KEY = "ssl.keystore.key"
TRUSTSTORE_TYPE = "ssl.truststore.type"
TRUSTSTORE_LOCATION = "ssl.truststore.location"
TRUSTSTORE_PASSWORD = "ssl.truststore.password"
TRUSTSTORE_CERTIFICATES = "ssl.truststore.certificates"
CLIENT_AUTH = "ssl.client.auth"
ENABLED_PROTOCOLS = "ssl.enabled.protocols"
PROTOCOL = "ssl.protocol"
CIPHER_SUITES = "ssl.cipher.suites"
ENDPOINT_IDENTIFICATION = "ssl.endpoint.identification.algorithm"

#: The keys this module reads, with Kafka's defaults (None: unset).
SUPPORTED_KEYS: Mapping[str, str | None] = {
    KEYSTORE_TYPE: "JKS",
    KEYSTORE_LOCATION: None,
    KEYSTORE_PASSWORD: None,
    KEY_PASSWORD: None,
    KEYSTORE_CHAIN: None,
    KEYSTORE_KEY: None,
    TRUSTSTORE_TYPE: "JKS",
    TRUSTSTORE_LOCATION: None,
    TRUSTSTORE_PASSWORD: None,
    TRUSTSTORE_CERTIFICATES: None,
    CLIENT_AUTH: "none",
    ENABLED_PROTOCOLS: "TLSv1.2,TLSv1.3",
    PROTOCOL: "TLSv1.3",
    CIPHER_SUITES: "",
    ENDPOINT_IDENTIFICATION: "https",
}

#: Kafka keys that choose Java security providers or algorithms; accepted and ignored (OpenSSL has its own).
IGNORED_KEYS = frozenset(
    {
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "ssl.provider",
        "ssl.engine.factory.class",
    }
)

ALLOW_DN_CHANGES = "ssl.allow.dn.changes"  # (read by ReloadingServerContext)
ALLOW_SAN_CHANGES = "ssl.allow.san.changes"
#: ``ssl.*`` keys read elsewhere (odradek.security.principal, ReloadingServerContext); not reported as unknown.
OTHER_KNOWN_KEYS = frozenset({"ssl.principal.mapping.rules", ALLOW_DN_CHANGES, ALLOW_SAN_CHANGES})

_PROTOCOL_VERSIONS: Mapping[str, ssl.TLSVersion] = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_PROTOCOL_ORDER = tuple(_PROTOCOL_VERSIONS)
_OBSOLETE_PROTOCOLS = frozenset({"SSL", "SSLV2", "SSLV3", "SSLV2HELLO"})

#: IANA (Java) names of TLS 1.2-and-older suites -> OpenSSL names. Java's signalling pseudo-suite maps to None.
_IANA_TO_OPENSSL: Mapping[str, str | None] = {
    "TLS_EMPTY_RENEGOTIATION_INFO_SCSV": None,
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_DSS_WITH_AES_256_GCM_SHA384": "DHE-DSS-AES256-GCM-SHA384",
    "TLS_DHE_DSS_WITH_AES_128_GCM_SHA256": "DHE-DSS-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_DHE_DSS_WITH_AES_256_CBC_SHA256": "DHE-DSS-AES256-SHA256",
    "TLS_DHE_DSS_WITH_AES_128_CBC_SHA256": "DHE-DSS-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_DHE_DSS_WITH_AES_256_CBC_SHA": "DHE-DSS-AES256-SHA",
    "TLS_DHE_DSS_WITH_AES_128_CBC_SHA": "DHE-DSS-AES128-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
}

_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)


class SslConfigError(ValueError):
    """A bad ``ssl.*`` setting: ``key`` names it, the message says what is wrong and what to do."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class ClientAuth(enum.Enum):
    """``ssl.client.auth``: whether a listener asks clients for a certificate."""

    NONE = "none"
    REQUESTED = "requested"
    REQUIRED = "required"


@dataclass(frozen=True)
class KeyStore:
    """A private key and its certificate chain (the key's certificate first). ``source`` says where it came from."""

    chain: tuple[x509.Certificate, ...]
    key: PrivateKey = field(repr=False, compare=False)
    source: str


@dataclass(frozen=True)
class FileStamp:
    """A key store or trust store file as it was when read (for :func:`reload_if_changed`)."""

    key: str
    path: str
    mtime_ns: int
    size: int
    inode: int = 0  # (a file replaced by a rename with an older time and the same size is still a change)


@dataclass(frozen=True)
class TlsSettings:
    """One listener's validated TLS settings.

    ``trusted`` is None when no trust store is configured: a client context then trusts the system's CAs and a
    server context verifies no client certificates (``client_auth`` is then NONE). ``openssl_ciphers`` empty means
    OpenSSL's defaults. ``protocols`` are the effective versions, oldest first.
    """

    keystore: KeyStore | None
    trusted: tuple[x509.Certificate, ...] | None
    client_auth: ClientAuth
    protocols: tuple[str, ...]
    openssl_ciphers: tuple[str, ...]
    endpoint_identification: bool
    files: tuple[FileStamp, ...] = ()
    ignored_keys: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


# ----------------------------------------------------------------------------------------------------------------
# Settings


def load_tls_settings(config: Mapping[str, str | None]) -> TlsSettings:
    """Validate one listener's ``ssl.*`` keys and read its key store and trust store.

    Raises :class:`SslConfigError` for any bad input (missing or unreadable file, wrong password, key not matching
    its certificate, unknown type, protocol or cipher name, ...).
    """
    cfg = _Config(config)
    files: list[FileStamp] = []
    notes: list[str] = []
    keystore = _load_keystore(cfg, files)
    trusted = _load_truststore(cfg, files)
    client_auth = _client_auth(cfg)
    if client_auth is not ClientAuth.NONE and trusted is None:
        raise SslConfigError(
            CLIENT_AUTH,
            f"is {client_auth.value} but no trust store is configured to verify client certificates: set "
            f"{TRUSTSTORE_LOCATION} (or {TRUSTSTORE_CERTIFICATES}) to the CAs that sign client certificates",
        )
    protocols = _protocols(cfg)
    ciphers, protocols = _cipher_suites(cfg, protocols, notes)
    algorithm = cfg.get(ENDPOINT_IDENTIFICATION)
    if algorithm is None:
        algorithm = "https"
    algorithm = algorithm.strip()
    if algorithm.lower() not in ("https", ""):
        raise SslConfigError(
            ENDPOINT_IDENTIFICATION,
            f"unknown algorithm {algorithm!r}: use https (check the server's host name) or an empty value (don't)",
        )
    ignored = tuple(sorted(k for k in config if k in IGNORED_KEYS))
    unknown = sorted(k for k in config if k not in SUPPORTED_KEYS and k not in IGNORED_KEYS
                     and k not in OTHER_KNOWN_KEYS)
    if unknown:
        notes.append(f"unknown keys ignored: {', '.join(unknown)}")
    for note in notes:
        log.warning("TLS settings: %s", note)
    return TlsSettings(
        keystore=keystore,
        trusted=trusted,
        client_auth=client_auth,
        protocols=protocols,
        openssl_ciphers=ciphers,
        endpoint_identification=algorithm != "",
        files=tuple(files),
        ignored_keys=ignored,
        notes=tuple(notes),
    )


class _Config:
    """Reads keys: None, empty and blank values are unset (except where the caller asks for the raw value)."""

    def __init__(self, config: Mapping[str, str | None]) -> None:
        self._config = config

    def get(self, key: str) -> str | None:
        return self._config.get(key)

    def value(self, key: str) -> str | None:
        raw = self._config.get(key)
        if raw is None or not raw.strip():
            return None
        return raw.strip()

    def secret(self, key: str) -> bytes | None:
        raw = self._config.get(key)
        return raw.encode() if raw else None

    def store_type(self, key: str) -> str:
        raw = self.value(key) or str(SUPPORTED_KEYS[key])
        kind = raw.upper()
        if kind not in ("PEM", "PKCS12", "JKS"):
            raise SslConfigError(key, f"unknown store type {raw!r}: use PEM or PKCS12 (JKS files must be converted)")
        return kind


def _read_file(key: str, path: str, files: list[FileStamp]) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
            st = os.fstat(f.fileno())
    except FileNotFoundError:
        raise SslConfigError(key, f"file {path} does not exist: check the path") from None
    except IsADirectoryError:
        raise SslConfigError(key, f"{path} is a directory: give the store file's path") from None
    except PermissionError:
        raise SslConfigError(key, f"file {path} cannot be read (permission denied): let the broker's user read it") \
            from None
    except OSError as e:
        raise SslConfigError(key, f"file {path} cannot be read ({e.strerror})") from None
    files.append(FileStamp(key, path, st.st_mtime_ns, st.st_size, st.st_ino))
    return data


def _refuse_java_store(key: str, type_key: str, path: str, data: bytes) -> None:
    """Raise if ``data`` is a real JKS or JCEKS store, which only Java can read."""
    if data[:4] in (_JKS_MAGIC, _JCEKS_MAGIC):
        kind = "JKS" if data[:4] == _JKS_MAGIC else "JCEKS"
        raise SslConfigError(
            key,
            f"{path} is a Java {kind} store, which Odradek cannot read: convert it with `keytool -importkeystore "
            f"-srckeystore {path} -srcstoretype {kind} -destkeystore {path}.p12 -deststoretype PKCS12`, then point "
            f"{key} at {path}.p12 and set {type_key}=PKCS12",
        )


def _load_keystore(cfg: _Config, files: list[FileStamp]) -> KeyStore | None:
    kind = cfg.store_type(KEYSTORE_TYPE)
    location = cfg.value(KEYSTORE_LOCATION)
    inline_chain = cfg.value(KEYSTORE_CHAIN)
    inline_key = cfg.value(KEYSTORE_KEY)
    store_password = cfg.secret(KEYSTORE_PASSWORD)
    key_password = cfg.secret(KEY_PASSWORD)
    if inline_chain is not None or inline_key is not None:
        if location is not None:
            raise SslConfigError(
                KEYSTORE_LOCATION,
                f"is set together with inline {KEYSTORE_CHAIN}/{KEYSTORE_KEY}: configure the key store one way only",
            )
        if kind != "PEM":
            raise SslConfigError(
                KEYSTORE_TYPE, f"is {kind} but inline {KEYSTORE_CHAIN}/{KEYSTORE_KEY} are PEM: set {KEYSTORE_TYPE}=PEM"
            )
        if inline_chain is None or inline_key is None:
            missing = KEYSTORE_CHAIN if inline_chain is None else KEYSTORE_KEY
            raise SslConfigError(missing, f"is missing: {KEYSTORE_CHAIN} and {KEYSTORE_KEY} are set together")
        if store_password is not None:
            raise SslConfigError(KEYSTORE_PASSWORD, f"cannot be used with PEM; an encrypted key takes {KEY_PASSWORD}")
        chain = _pem_certificates(KEYSTORE_CHAIN, inline_chain.encode())
        key = _pem_private_key(KEYSTORE_KEY, inline_key.encode(), key_password, required=True)
        assert key is not None
        return _checked_keystore(KEYSTORE_KEY, chain, key, "inline PEM")
    if location is None:
        return None
    data = _read_file(KEYSTORE_LOCATION, location, files)
    if kind == "PEM":
        if store_password is not None:
            raise SslConfigError(KEYSTORE_PASSWORD, f"cannot be used with PEM; an encrypted key takes {KEY_PASSWORD}")
        key = _pem_private_key(KEYSTORE_LOCATION, data, key_password, required=True)
        assert key is not None
        chain = _pem_certificates(KEYSTORE_LOCATION, data)
        return _checked_keystore(KEYSTORE_LOCATION, chain, key, f"{location} (PEM)")
    _refuse_java_store(KEYSTORE_LOCATION, KEYSTORE_TYPE, location, data)
    if store_password is None:
        raise SslConfigError(KEYSTORE_PASSWORD, f"is not set: the {kind} key store {location} needs its password")
    bundle = _pkcs12(KEYSTORE_LOCATION, KEYSTORE_PASSWORD, location, data, store_password)
    if bundle.key is None:
        raise SslConfigError(
            KEYSTORE_LOCATION, f"{location} holds no private key: a key store needs the key and its certificate chain"
        )
    if bundle.cert is None:
        raise SslConfigError(KEYSTORE_LOCATION, f"{location} holds a key but no certificate for it")
    chain = (bundle.cert.certificate, *(c.certificate for c in bundle.additional_certs))
    key = _private_key(KEYSTORE_LOCATION, bundle.key)
    return _checked_keystore(KEYSTORE_LOCATION, chain, key, f"{location} (PKCS12)")


def _load_truststore(cfg: _Config, files: list[FileStamp]) -> tuple[x509.Certificate, ...] | None:
    kind = cfg.store_type(TRUSTSTORE_TYPE)
    location = cfg.value(TRUSTSTORE_LOCATION)
    inline = cfg.value(TRUSTSTORE_CERTIFICATES)
    password = cfg.secret(TRUSTSTORE_PASSWORD)
    if inline is not None:
        if location is not None:
            raise SslConfigError(
                TRUSTSTORE_LOCATION,
                f"is set together with inline {TRUSTSTORE_CERTIFICATES}: configure the trust store one way only",
            )
        if kind != "PEM":
            raise SslConfigError(
                TRUSTSTORE_TYPE, f"is {kind} but inline {TRUSTSTORE_CERTIFICATES} are PEM: set {TRUSTSTORE_TYPE}=PEM"
            )
        if password is not None:
            raise SslConfigError(TRUSTSTORE_PASSWORD, "cannot be used with PEM certificates: remove it")
        return _pem_certificates(TRUSTSTORE_CERTIFICATES, inline.encode())
    if location is None:
        return None
    data = _read_file(TRUSTSTORE_LOCATION, location, files)
    if kind == "PEM":
        if password is not None:
            raise SslConfigError(TRUSTSTORE_PASSWORD, "cannot be used with a PEM trust store: remove it")
        return _pem_certificates(TRUSTSTORE_LOCATION, data)
    _refuse_java_store(TRUSTSTORE_LOCATION, TRUSTSTORE_TYPE, location, data)
    bundle = _pkcs12(TRUSTSTORE_LOCATION, TRUSTSTORE_PASSWORD, location, data, password)
    certs = tuple(c.certificate for c in bundle.additional_certs)
    if bundle.cert is not None:
        certs = (bundle.cert.certificate, *certs)
    if not certs:
        raise SslConfigError(TRUSTSTORE_LOCATION, f"{location} holds no certificates: add the CAs to trust")
    return certs


def _pkcs12(
    key: str, password_key: str, path: str, data: bytes, password: bytes | None
) -> pkcs12.PKCS12KeyAndCertificates:
    if data[:1] != b"\x30":
        raise SslConfigError(key, f"{path} is not a PKCS12 store: check the file and the store type")
    try:
        return pkcs12.load_pkcs12(data, password)
    except ValueError:
        hint = f"set {password_key}" if password is None else f"check {password_key}"
        raise SslConfigError(
            password_key, f"cannot open {path}: wrong password or damaged PKCS12 data ({hint})"
        ) from None
    except UnsupportedAlgorithm:
        raise SslConfigError(key, f"{path} uses an encryption this OpenSSL build cannot read: re-export it") from None


def _pem_certificates(key: str, data: bytes) -> tuple[x509.Certificate, ...]:
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise SslConfigError(key, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    try:
        return tuple(x509.load_pem_x509_certificates(data))
    except ValueError:
        raise SslConfigError(key, "holds a damaged PEM certificate") from None


def _pem_private_key(key: str, data: bytes, password: bytes | None, *, required: bool) -> PrivateKey | None:
    blocks = [m.group(0) for m in _PEM_BLOCK.finditer(data) if m.group(1).endswith(b"PRIVATE KEY")]
    if not blocks:
        if required:
            raise SslConfigError(key, "holds no PEM private key (-----BEGIN PRIVATE KEY----- or ENCRYPTED PRIVATE KEY)")
        return None
    if len(blocks) > 1:
        raise SslConfigError(key, f"holds {len(blocks)} private keys: keep only the one that matches the certificate")
    try:
        loaded = serialization.load_pem_private_key(blocks[0], password)
    except TypeError:
        if password is None:
            raise SslConfigError(KEY_PASSWORD, f"is not set but the key in {key} is encrypted: set it") from None
        raise SslConfigError(KEY_PASSWORD, f"is set but the key in {key} is not encrypted: remove it") from None
    except ValueError:
        if password is not None:
            raise SslConfigError(KEY_PASSWORD, f"does not decrypt the key in {key}: check the password") from None
        raise SslConfigError(key, "holds a damaged or unsupported private key") from None
    except UnsupportedAlgorithm:
        raise SslConfigError(key, "holds a key encrypted with an algorithm this OpenSSL cannot read") from None
    return _private_key(key, loaded)


def _private_key(key: str, loaded: object) -> PrivateKey:
    if not isinstance(loaded, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
                      | ed448.Ed448PrivateKey | dsa.DSAPrivateKey):
        raise SslConfigError(key, f"holds a {type(loaded).__name__}, which TLS cannot use: use an RSA or EC key")
    return loaded


def _spki(public_key: object) -> bytes:
    return public_key.public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _checked_keystore(key: str, chain: tuple[x509.Certificate, ...], private_key: PrivateKey, source: str) -> KeyStore:
    if _spki(private_key.public_key()) != _spki(chain[0].public_key()):
        others = [i for i, c in enumerate(chain[1:], 1) if _spki(c.public_key()) == _spki(private_key.public_key())]
        where = f" (it matches certificate {others[0] + 1}: put that one first)" if others else ""
        raise SslConfigError(
            key, f"the private key does not match the first certificate of the chain{where}: use the key's own "
            "certificate followed by its CA chain",
        )
    return KeyStore(chain=chain, key=private_key, source=source)


def _client_auth(cfg: _Config) -> ClientAuth:
    raw = cfg.value(CLIENT_AUTH) or "none"
    try:
        return ClientAuth(raw.lower())
    except ValueError:
        raise SslConfigError(CLIENT_AUTH, f"unknown value {raw!r}: use none, requested or required") from None


def _protocol_name(key: str, raw: str) -> str:
    for name in _PROTOCOL_ORDER:
        if name.lower() == raw.lower():
            return name
    if raw.upper() in _OBSOLETE_PROTOCOLS:
        raise SslConfigError(key, f"{raw} is obsolete and not supported: use TLSv1.2 or TLSv1.3")
    raise SslConfigError(key, f"unknown protocol {raw!r}: use TLSv1.2, TLSv1.3 (or TLSv1, TLSv1.1)")


def _protocols(cfg: _Config) -> tuple[str, ...]:
    raw = cfg.value(ENABLED_PROTOCOLS) or str(SUPPORTED_KEYS[ENABLED_PROTOCOLS])
    enabled = {_protocol_name(ENABLED_PROTOCOLS, p.strip()) for p in raw.split(",") if p.strip()}
    cap = cfg.value(PROTOCOL) or str(SUPPORTED_KEYS[PROTOCOL])
    if cap.upper() != "TLS":
        top = _PROTOCOL_ORDER.index(_protocol_name(PROTOCOL, cap))
        enabled = {p for p in enabled if _PROTOCOL_ORDER.index(p) <= top}
        if not enabled:
            raise SslConfigError(
                PROTOCOL, f"{cap} is older than every protocol in {ENABLED_PROTOCOLS} ({raw}): raise it or add {cap}"
            )
    ordered = tuple(p for p in _PROTOCOL_ORDER if p in enabled)
    indexes = [_PROTOCOL_ORDER.index(p) for p in ordered]
    if indexes != list(range(indexes[0], indexes[-1] + 1)):
        raise SslConfigError(
            ENABLED_PROTOCOLS, f"{raw} leaves a gap; OpenSSL enables a range of versions: list consecutive versions"
        )
    return ordered


def _openssl_suites() -> tuple[frozenset[str], tuple[str, ...]]:
    """(TLS 1.2-and-older suites this OpenSSL has, its TLS 1.3 suites in IANA names)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls13 = tuple(c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.3")
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    older = frozenset(c["name"] for c in ctx.get_ciphers() if c["protocol"] != "TLSv1.3")
    return older, tls13


_TLS13_IANA = frozenset({
    "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
    "TLS_AES_128_CCM_8_SHA256",
})


def _cipher_suites(
    cfg: _Config, protocols: tuple[str, ...], notes: list[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(OpenSSL names for TLS <= 1.2, protocols left once versions without a configured suite are dropped)."""
    raw = cfg.value(CIPHER_SUITES)
    if raw is None:
        return (), protocols
    available, tls13_defaults = _openssl_suites()
    older: list[str] = []
    tls13: list[str] = []
    for name in (n.strip() for n in raw.split(",")):
        if not name:
            continue
        if name.upper() in _TLS13_IANA:
            if name.upper() not in tls13_defaults:
                raise SslConfigError(
                    CIPHER_SUITES,
                    f"{name} cannot be enabled: Python's ssl cannot choose TLS 1.3 suites, only OpenSSL's defaults "
                    f"({', '.join(tls13_defaults)}) are available",
                )
            tls13.append(name.upper())
            continue
        if name.upper() in _IANA_TO_OPENSSL or name.upper().startswith(("TLS_", "SSL_")):
            if name.upper() not in _IANA_TO_OPENSSL:
                raise SslConfigError(
                    CIPHER_SUITES, f"unknown or unsupported cipher suite {name!r}: use IANA names such as "
                    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 (see odradek.security.tls for the list)",
                )
            openssl_name = _IANA_TO_OPENSSL[name.upper()]
            if openssl_name is None:
                continue
        else:
            openssl_name = name
        if openssl_name not in available:
            raise SslConfigError(
                CIPHER_SUITES, f"{name} is unknown or not available in this OpenSSL ({ssl.OPENSSL_VERSION}): "
                "use IANA names such as TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            )
        older.append(openssl_name)
    if not older and not tls13:
        raise SslConfigError(CIPHER_SUITES, f"{raw!r} names no cipher suite: list suites or leave it empty")
    kept = tuple(p for p in protocols if (p == "TLSv1.3" and tls13) or (p != "TLSv1.3" and older))
    if not kept:
        raise SslConfigError(
            CIPHER_SUITES, f"none of the suites is usable with {ENABLED_PROTOCOLS} {','.join(protocols)}: add "
            + ("TLS 1.3 suites such as TLS_AES_256_GCM_SHA384" if "TLSv1.3" in protocols else "TLS 1.2 suites"),
        )
    if tls13 and "TLSv1.3" in kept and set(tls13) != set(tls13_defaults):
        notes.append(
            f"{CIPHER_SUITES} names {', '.join(tls13)} for TLS 1.3, but Python's ssl cannot restrict TLS 1.3 suites: "
            f"all of {', '.join(tls13_defaults)} stay enabled"
        )
    return tuple(dict.fromkeys(older)), kept


# ----------------------------------------------------------------------------------------------------------------
# Contexts


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server side of an SSL or SASL_SSL listener. Raises :class:`SslConfigError` without a key store."""
    if settings.keystore is None:
        raise SslConfigError(
            KEYSTORE_LOCATION,
            f"is not set: a TLS listener needs its certificate and key; set {KEYSTORE_LOCATION} (or "
            f"{KEYSTORE_TYPE}=PEM with {KEYSTORE_CHAIN} and {KEYSTORE_KEY})",
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(ctx, settings)
    ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.verify_mode = {
        ClientAuth.NONE: ssl.CERT_NONE,
        ClientAuth.REQUESTED: ssl.CERT_OPTIONAL,
        ClientAuth.REQUIRED: ssl.CERT_REQUIRED,
    }[settings.client_auth]
    return ctx


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The client side (inter-broker connections, tests): always verifies the server's certificate chain against
    the trust store (the system's CAs without one), and its host name if ``endpoint_identification``; presents
    the key store's certificate when there is one."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = settings.endpoint_identification
    ctx.verify_mode = ssl.CERT_REQUIRED
    if settings.trusted is None:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _configure(ctx, settings)
    return ctx


def _configure(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    ctx.minimum_version = _PROTOCOL_VERSIONS[settings.protocols[0]]
    ctx.maximum_version = _PROTOCOL_VERSIONS[settings.protocols[-1]]
    if settings.openssl_ciphers:
        try:
            ctx.set_ciphers(":".join(settings.openssl_ciphers))
        except ssl.SSLError as e:
            raise SslConfigError(CIPHER_SUITES, f"OpenSSL refused the suites ({e.reason})") from None
    if settings.trusted is not None:
        cadata = "".join(c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in settings.trusted)
        try:
            ctx.load_verify_locations(cadata=cadata)
        except ssl.SSLError as e:
            raise SslConfigError(TRUSTSTORE_LOCATION, f"OpenSSL refused the trusted certificates ({e.reason})") \
                from None
    if settings.keystore is not None:
        _load_keystore_into(ctx, settings.keystore)


def _secret_dir() -> str | None:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def _load_keystore_into(ctx: ssl.SSLContext, keystore: KeyStore) -> None:
    """Hand OpenSSL the key and chain through a 0600 file that holds the key encrypted under a one-time password
    and exists only for the duration of ``load_cert_chain``."""
    one_time = secrets.token_urlsafe(32).encode()
    pem = keystore.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time),
    ) + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in keystore.chain)
    fd, path = tempfile.mkstemp(prefix="odradek-tls-", suffix=".pem", dir=_secret_dir())
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path, password=one_time)
    except ssl.SSLError as e:
        raise SslConfigError(KEYSTORE_LOCATION, f"OpenSSL refused {keystore.source} ({e.reason})") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


# ----------------------------------------------------------------------------------------------------------------
# Reload


def _file_states(settings: TlsSettings) -> tuple[tuple[int, int, int] | None, ...]:
    """(mtime, size, inode) of each store file read for ``settings`` as it is now, None for one that is gone."""
    states: list[tuple[int, int, int] | None] = []
    for stamp in settings.files:
        try:
            st = os.stat(stamp.path)
        except OSError:
            states.append(None)
        else:
            states.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(states)


def files_changed(settings: TlsSettings) -> bool:
    """True if a key store or trust store file read for ``settings`` changed (mtime, size or inode) or vanished."""
    return _file_states(settings) != tuple((s.mtime_ns, s.size, s.inode) for s in settings.files)


def reload_if_changed(config: Mapping[str, str | None], current: TlsSettings) -> TlsSettings | None:
    """Fresh settings if a store file changed since ``current`` was read, else None.

    Raises :class:`SslConfigError` if the changed files are bad (the caller keeps serving with its old context).
    New connections get the new certificates once the caller builds a context from the result; open ones keep
    theirs, as in Kafka.
    """
    if not files_changed(current):
        return None
    return load_tls_settings(config)


class ReloadingServerContext:
    """A TLS listener's server side that follows its key store and trust store files: replace the files (a renewed
    certificate, a new CA) and new connections use them, without a restart (Kafka's dynamic keystore update).

    ``context`` is built once and handed to the listener for good. Its SNI callback, which OpenSSL calls for every
    ClientHello whether or not it names a server, switches each new connection to the newest context ``check``
    built; open connections keep the certificates they were set up with, as in Kafka. A changed file that does not
    load (half written, a wrong password, a key not matching its certificate) or whose certificate changes the
    subject or the alternative names of the one served (refused as Kafka refuses them, unless
    ``ssl.allow.dn.changes`` / ``ssl.allow.san.changes``) is logged once per change, and the stores already loaded
    go on serving. ``check`` only stats the files until one changes (call it often)."""

    def __init__(self, config: Mapping[str, str | None], name: str) -> None:
        self.name = name
        self._config = dict(config)
        self._allow_dn_changes = _flag(config, ALLOW_DN_CHANGES)
        self._allow_san_changes = _flag(config, ALLOW_SAN_CHANGES)
        self._settings = load_tls_settings(self._config)
        self.context = server_context(self._settings)
        self._current = self.context
        self._refused: tuple[tuple[int, int, int] | None, ...] | None = None
        self.context.sni_callback = self._switch

    def _switch(self, ssl_object: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                context: ssl.SSLContext) -> None:
        current = self._current
        if current is not context:
            ssl_object.context = current

    def check(self) -> bool:
        """Reload the stores if a file changed; True if new connections now get the new ones."""
        try:
            fresh = reload_if_changed(self._config, self._settings)
            if fresh is None:
                return False
            self._same_identity(fresh)
            context = server_context(fresh)
        except SslConfigError as e:
            states = _file_states(self._settings)
            if states != self._refused:
                self._refused = states
                log.warning("%s: a changed key store or trust store could not be loaded, the ones loaded before go "
                            "on serving: %s", self.name, e)
            return False
        self._settings, self._current, self._refused = fresh, context, None
        log.info("%s: key store and trust store reloaded (%s); new connections use them, open ones keep theirs",
                 self.name, ", ".join(f"{f.key}={f.path}" for f in fresh.files))
        return True

    def _same_identity(self, fresh: TlsSettings) -> None:
        """As Kafka checks a new key store: its certificate keeps the subject and the alternative names of the one
        served, unless ``ssl.allow.dn.changes`` / ``ssl.allow.san.changes``."""
        old, new = self._settings.keystore, fresh.keystore
        if old is None or new is None:
            return
        was, now = old.chain[0], new.chain[0]
        if not self._allow_dn_changes and was.subject != now.subject:
            raise SslConfigError(KEYSTORE_LOCATION, f"the new certificate's subject {now.subject.rfc4514_string()} is "
                                 f"not the served one's ({was.subject.rfc4514_string()}): set {ALLOW_DN_CHANGES}=true "
                                 "to allow it")
        if not self._allow_san_changes and _alt_names(was) != _alt_names(now):
            raise SslConfigError(KEYSTORE_LOCATION, f"the new certificate's alternative names "
                                 f"{sorted(_alt_names(now))} are not the served one's ({sorted(_alt_names(was))}): "
                                 f"set {ALLOW_SAN_CHANGES}=true to allow it")


def _flag(config: Mapping[str, str | None], key: str) -> bool:
    raw = (config.get(key) or "false").strip().lower()
    if raw not in ("true", "false"):
        raise SslConfigError(key, f"is {raw!r}: use true or false")
    return raw == "true"


def _alt_names(cert: x509.Certificate) -> frozenset[str]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset()
    return frozenset(f"{type(n).__name__}:{n.value}" for n in names)
