"""Test certificates made with ``cryptography``: a CA, server and client certificates, and the files Kafka reads.

API::

    ca = make_ca()                                   # self-signed CA (EC P-256 unless key_type="rsa")
    server = issue(ca, "localhost")                  # server certificate, SANs localhost and 127.0.0.1
    alice = issue(ca, "alice", client=True, subject=[("OU", "eng"), ("O", "Acme")])
    write_keystore_pem(path, server, password=b"pw")  # key (encrypted PKCS#8 if password) + chain: type PEM
    write_cert_pem(path, ca)                         # certificates only: a PEM trust store
    write_pkcs12(path, server, b"pw")                # ssl.keystore.type=PKCS12
    write_truststore_pkcs12(path, [ca], b"pw")       # ssl.truststore.type=PKCS12
    server.key_pem(b"pw"), server.chain_pem(), ca.cert_pem()   # for the inline ssl.keystore.key/... keys
    alice.der                                        # what SSLObject.getpeercert(binary_form=True) returns

Real clients against a broker using these files (PEM, written with the functions above)::

    # kafka-python
    KafkaProducer(bootstrap_servers=..., security_protocol="SSL", ssl_cafile="ca.pem",
                  ssl_certfile="alice-chain.pem", ssl_keyfile="alice-key.pem", ssl_password="pw",
                  ssl_check_hostname=True)
    # confluent-kafka (librdkafka)
    Producer({"bootstrap.servers": ..., "security.protocol": "SSL", "ssl.ca.location": "ca.pem",
              "ssl.certificate.location": "alice-chain.pem", "ssl.key.location": "alice-key.pem",
              "ssl.key.password": "pw", "ssl.endpoint.identification.algorithm": "https"})
    # librdkafka also reads a PKCS12 client store: "ssl.keystore.location": "alice.p12",
    # "ssl.keystore.password": "pw"

Write ``alice-key.pem`` with ``write_key_pem`` and ``alice-chain.pem`` with ``write_cert_pem(path, alice)``
(leaf then its CA chain). Server certificates carry SANs ``localhost`` and ``127.0.0.1`` by default, so both
host name checks pass against a broker on loopback.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

_ATTRIBUTES = {
    "CN": NameOID.COMMON_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "L": NameOID.LOCALITY_NAME,
    "ST": NameOID.STATE_OR_PROVINCE_NAME,
    "C": NameOID.COUNTRY_NAME,
    "DC": NameOID.DOMAIN_COMPONENT,
    "UID": NameOID.USER_ID,
    "STREET": NameOID.STREET_ADDRESS,
    "EMAIL": NameOID.EMAIL_ADDRESS,
}


@dataclass(frozen=True)
class Issued:
    """A certificate with its private key and the CA certificates above it (``chain``, nearest first)."""

    cert: x509.Certificate
    key: PrivateKey
    chain: tuple[x509.Certificate, ...] = ()

    @property
    def der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)

    def cert_pem(self) -> bytes:
        """This certificate alone."""
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def chain_pem(self) -> bytes:
        """This certificate followed by its CA chain (``ssl.keystore.certificate.chain``)."""
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (self.cert, *self.chain))

    def key_pem(self, password: bytes | None = None) -> bytes:
        """PKCS#8 PEM, encrypted with ``password`` when given (``ssl.keystore.key``)."""
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, _encryption(password)
        )


def _encryption(password: bytes | None) -> serialization.KeySerializationEncryption:
    return serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def new_key(key_type: str = "ec") -> PrivateKey:
    """A fresh key: "ec" (P-256, fast) or "rsa" (2048 bits)."""
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def name(cn: str | None, subject: Sequence[tuple[str, str]] = ()) -> x509.Name:
    """An X.501 name: ``subject`` pairs (keyword, value), most general first as certificates store them,
    then CN (so the RFC 2253 form starts with ``CN=``). Keywords: CN OU O L ST C DC UID STREET EMAIL."""
    pairs = [*subject] + ([("CN", cn)] if cn is not None else [])
    return x509.Name([x509.NameAttribute(_ATTRIBUTES[k], v) for k, v in pairs])


def make_ca(cn: str = "Odradek Test CA", *, key_type: str = "ec", parent: Issued | None = None) -> Issued:
    """A CA certificate: self-signed, or an intermediate signed by ``parent``."""
    key = new_key(key_type)
    subject = name(cn, [("O", "Odradek Tests")])
    issuer_cert, issuer_key = (parent.cert, parent.key) if parent else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if parent:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(parent.key.public_key()), critical=False
        )
    cert = builder.sign(issuer_key, hashes.SHA256())
    return Issued(cert, key, (parent.cert, *parent.chain) if parent else ())


def issue(
    ca: Issued,
    cn: str | None,
    *,
    sans: Iterable[str] = ("localhost", "127.0.0.1"),
    client: bool = False,
    server: bool = True,
    subject: Sequence[tuple[str, str]] = (),
    subject_name: x509.Name | None = None,
    key_type: str = "ec",
    key: PrivateKey | None = None,
) -> Issued:
    """A leaf certificate signed by ``ca``. ``sans``: DNS names and IP addresses; ``client``/``server``: extended
    key usages; ``subject``: extra attributes (see :func:`name`) or a whole ``subject_name``."""
    key = key or new_key(key_type)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    alt_names: list[x509.GeneralName] = []
    for san in sans:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            alt_names.append(x509.DNSName(san))
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject_name or name(cn, subject))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key, (ca.cert, *ca.chain))


def write_cert_pem(path: Path, *issued: Issued | x509.Certificate) -> Path:
    """PEM certificates: each ``Issued`` with its chain, each bare certificate alone (a PEM trust store)."""
    data = b"".join(
        i.chain_pem() if isinstance(i, Issued) else i.public_bytes(serialization.Encoding.PEM) for i in issued
    )
    path.write_bytes(data)
    return path


def write_key_pem(path: Path, issued: Issued, password: bytes | None = None) -> Path:
    """The private key alone, PKCS#8 PEM, encrypted if ``password``."""
    path.write_bytes(issued.key_pem(password))
    path.chmod(0o600)
    return path


def write_keystore_pem(path: Path, issued: Issued, password: bytes | None = None) -> Path:
    """A Kafka PEM key store file: the private key, then the certificate and its chain."""
    path.write_bytes(issued.key_pem(password) + issued.chain_pem())
    path.chmod(0o600)
    return path


def write_pkcs12(path: Path, issued: Issued, password: bytes | None, *, with_key: bool = True) -> Path:
    """A PKCS12 key store (key, certificate and chain); ``with_key=False`` leaves the key out."""
    data = pkcs12.serialize_key_and_certificates(
        b"odradek", issued.key if with_key else None, issued.cert if with_key else None,
        list(issued.chain) if with_key else [issued.cert, *issued.chain], _encryption(password),
    )
    path.write_bytes(data)
    return path


def write_truststore_pkcs12(path: Path, cas: Iterable[Issued | x509.Certificate], password: bytes | None) -> Path:
    """A PKCS12 trust store holding certificates only."""
    certs = [c.cert if isinstance(c, Issued) else c for c in cas]
    path.write_bytes(pkcs12.serialize_key_and_certificates(None, None, None, certs, _encryption(password)))
    return path
