"""TLS settings from Kafka's ssl.* keys: real handshakes between server and client contexts over memory BIOs."""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.security import tls
from odradek.security.principal import ANONYMOUS, KafkaPrincipal, SslPrincipalMapper, subject_dn
from odradek.security.tls import SslConfigError, client_context, load_tls_settings, server_context
from tests.security import certs
from tests.security.tlspair import handshake

PW = "s3cret-pw"


class Material:
    """A CA, a server (EC and RSA), a client, and their files, made once for the module."""

    def __init__(self, d: Path) -> None:
        self.dir = d
        self.ca = certs.make_ca()
        self.other_ca = certs.make_ca("Other CA")
        self.server = certs.issue(self.ca, "localhost")
        self.rsa_server = certs.issue(self.ca, "localhost", key_type="rsa")
        self.client = certs.issue(
            self.ca, "alice", client=True, server=False, sans=(), subject=[("C", "US"), ("O", "Acme"), ("OU", "eng")]
        )
        self.ca_pem = certs.write_cert_pem(d / "ca.pem", self.ca)
        self.server_pem = certs.write_keystore_pem(d / "server.pem", self.server, PW.encode())
        self.rsa_server_pem = certs.write_keystore_pem(d / "rsa-server.pem", self.rsa_server)
        self.client_pem = certs.write_keystore_pem(d / "client.pem", self.client)
        self.server_p12 = certs.write_pkcs12(d / "server.p12", self.server, PW.encode())
        self.trust_p12 = certs.write_truststore_pkcs12(d / "trust.p12", [self.ca], PW.encode())

    def server_config(self, **extra: str | None) -> dict[str, str | None]:
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.server_pem),
            "ssl.key.password": PW,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_pem),
            **extra,
        }

    def client_config(self, with_cert: bool = False, **extra: str | None) -> dict[str, str | None]:
        config: dict[str, str | None] = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_pem)}
        if with_cert:
            config |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.client_pem)}
        return config | extra


@pytest.fixture(scope="module")
def m(tmp_path_factory: pytest.TempPathFactory) -> Material:
    return Material(tmp_path_factory.mktemp("tls"))


def server(config: dict[str, str | None]) -> ssl.SSLContext:
    return server_context(load_tls_settings(config))


def client(config: dict[str, str | None]) -> ssl.SSLContext:
    return client_context(load_tls_settings(config))


# ---------------------------------------------------------------------------------------------------------------
# Key stores and trust stores


def test_pem_files_with_encrypted_key(m: Material) -> None:
    pair = handshake(server(m.server_config()), client(m.client_config()))
    assert pair.client.version() == "TLSv1.3"
    assert pair.server.getpeercert() is None


def test_inline_pem(m: Material) -> None:
    config = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": m.server.chain_pem().decode(),
        "ssl.keystore.key": m.server.key_pem(PW.encode()).decode(),
        "ssl.key.password": PW,
    }
    trust = {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": m.ca.cert_pem().decode()}
    settings = load_tls_settings(config)
    assert settings.keystore is not None and settings.keystore.source == "inline PEM"
    handshake(server_context(settings), client(trust))


def test_pkcs12_keystore_and_truststore(m: Material) -> None:
    config = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(m.server_p12),
        "ssl.keystore.password": PW,
    }
    trust = {"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(m.trust_p12),
             "ssl.truststore.password": PW}
    handshake(server(config), client(trust))


def test_jks_type_reads_a_pkcs12_file(m: Material) -> None:
    # Kafka's default type; Java 9+ keytool writes PKCS12 whatever the file is called.
    config = {"ssl.keystore.location": str(m.server_p12), "ssl.keystore.password": PW}
    trust = {"ssl.truststore.location": str(m.trust_p12), "ssl.truststore.password": PW}
    handshake(server(config), client(trust))


def test_unencrypted_pem_key_and_rsa(m: Material) -> None:
    config = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(m.rsa_server_pem)}
    handshake(server(config), client(m.client_config()))


def test_intermediate_ca_chain(m: Material, tmp_path: Path) -> None:
    intermediate = certs.make_ca("Intermediate", parent=m.ca)
    leaf = certs.issue(intermediate, "localhost")
    path = certs.write_keystore_pem(tmp_path / "leaf.pem", leaf)
    settings = load_tls_settings({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(path)})
    assert settings.keystore is not None and len(settings.keystore.chain) == 3
    handshake(server_context(settings), client(m.client_config()))


def test_client_without_truststore_uses_system_cas(m: Material) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server(m.server_config()), client({}))


def test_untrusted_server(m: Material, tmp_path: Path) -> None:
    other = certs.write_cert_pem(tmp_path / "other.pem", m.other_ca)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server(m.server_config()), client({"ssl.truststore.type": "PEM",
                                                     "ssl.truststore.location": str(other)}))


# ---------------------------------------------------------------------------------------------------------------
# Client authentication and principals


def test_client_auth_none_asks_for_no_certificate(m: Material) -> None:
    pair = handshake(server(m.server_config()), client(m.client_config(with_cert=True)))
    assert pair.server.getpeercert(binary_form=True) is None
    assert SslPrincipalMapper().principal(pair.server.getpeercert(binary_form=True)) == ANONYMOUS


def test_client_auth_requested(m: Material) -> None:
    ctx = server(m.server_config(**{"ssl.client.auth": "requested"}))
    anonymous = handshake(ctx, client(m.client_config()))
    assert SslPrincipalMapper().principal(anonymous.server.getpeercert(binary_form=True)) == ANONYMOUS
    known = handshake(ctx, client(m.client_config(with_cert=True)))
    principal = SslPrincipalMapper().principal(known.server.getpeercert(binary_form=True))
    assert principal == KafkaPrincipal("User", "CN=alice,OU=eng,O=Acme,C=US")


@pytest.mark.parametrize("protocol", ["TLSv1.2", "TLSv1.3"])
def test_client_auth_required(m: Material, protocol: str) -> None:
    ctx = server(m.server_config(**{"ssl.client.auth": "REQUIRED", "ssl.enabled.protocols": protocol}))
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client(m.client_config()))
    pair = handshake(ctx, client(m.client_config(with_cert=True)))
    der = pair.server.getpeercert(binary_form=True)
    assert der == m.client.der
    assert subject_dn(der) == "CN=alice,OU=eng,O=Acme,C=US"
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U,DEFAULT")
    assert str(mapper.principal(der)) == "User:ALICE@ENG"


def test_client_certificate_from_another_ca_is_refused(m: Material, tmp_path: Path) -> None:
    stranger = certs.issue(m.other_ca, "mallory", client=True, server=False)
    path = certs.write_keystore_pem(tmp_path / "mallory.pem", stranger)
    ctx = server(m.server_config(**{"ssl.client.auth": "required"}))
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client(m.client_config(**{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(path)})))


# ---------------------------------------------------------------------------------------------------------------
# Protocols, cipher suites, host names


def test_protocol_mismatch_fails(m: Material) -> None:
    ctx = server(m.server_config(**{"ssl.enabled.protocols": "TLSv1.2"}))
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client(m.client_config(**{"ssl.enabled.protocols": "TLSv1.3"})))
    assert handshake(ctx, client(m.client_config())).client.version() == "TLSv1.2"


def test_ssl_protocol_caps_the_enabled_protocols(m: Material) -> None:
    settings = load_tls_settings(m.client_config(**{"ssl.protocol": "TLSv1.2"}))
    assert settings.protocols == ("TLSv1.2",)
    assert load_tls_settings(m.client_config(**{"ssl.protocol": "TLS"})).protocols == ("TLSv1.2", "TLSv1.3")
    assert load_tls_settings({}).protocols == ("TLSv1.2", "TLSv1.3")
    assert handshake(server(m.server_config()), client_context(settings)).client.version() == "TLSv1.2"


def test_cipher_suites_by_java_name(m: Material) -> None:
    suites = {"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS_EMPTY_RENEGOTIATION_INFO_SCSV"}
    settings = load_tls_settings({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(m.rsa_server_pem),
                                  **suites})
    # Naming no TLS 1.3 suite disables TLS 1.3, as in Java.
    assert settings.protocols == ("TLSv1.2",)
    assert settings.openssl_ciphers == ("ECDHE-RSA-AES256-GCM-SHA384",)
    ctx = server_context(settings)
    pair = handshake(ctx, client(m.client_config()))
    assert pair.client.cipher()[0] == "ECDHE-RSA-AES256-GCM-SHA384"
    other = client(m.client_config(**{"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}))
    with pytest.raises(ssl.SSLError):
        handshake(ctx, other)
    # An EC key cannot serve an RSA suite.
    with pytest.raises(ssl.SSLError):
        handshake(server(m.server_config(**suites)), client(m.client_config()))


def test_cipher_suites_tls13_names(m: Material) -> None:
    only13 = load_tls_settings({"ssl.cipher.suites": "TLS_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256,"
                                "TLS_CHACHA20_POLY1305_SHA256"})
    assert only13.protocols == ("TLSv1.3",) and only13.openssl_ciphers == () and only13.notes == ()
    partial = load_tls_settings({"ssl.cipher.suites": "TLS_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"})
    assert partial.protocols == ("TLSv1.2", "TLSv1.3")
    assert partial.openssl_ciphers == ("ECDHE-ECDSA-AES128-GCM-SHA256",)
    assert any("cannot restrict TLS 1.3" in n for n in partial.notes)
    openssl_name = load_tls_settings({"ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256"})
    assert openssl_name.openssl_ciphers == ("ECDHE-ECDSA-AES128-GCM-SHA256",)


def test_host_name_verification(m: Material, tmp_path: Path) -> None:
    elsewhere = certs.issue(m.ca, "broker1.example.com", sans=("broker1.example.com",))
    path = certs.write_keystore_pem(tmp_path / "b1.pem", elsewhere)
    ctx = server({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(path)})
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(ctx, client(m.client_config()), server_hostname="localhost")
    handshake(ctx, client(m.client_config()), server_hostname="broker1.example.com")
    handshake(ctx, client(m.client_config(**{"ssl.endpoint.identification.algorithm": ""})),
              server_hostname="localhost")
    handshake(server(m.server_config()), client(m.client_config()), server_hostname="127.0.0.1")


# ---------------------------------------------------------------------------------------------------------------
# Bad inputs: one error type, naming the key, saying what to do


def _jks(tmp: Path) -> Path:
    path = tmp / "broker.jks"
    path.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + os.urandom(64))
    return path


BadCase = Callable[[Material, Path], dict[str, str | None]]

BAD: dict[str, tuple[BadCase, str, str]] = {
    "missing file": (
        lambda m, t: m.server_config(**{"ssl.keystore.location": str(t / "nope.pem")}),
        "ssl.keystore.location", "does not exist",
    ),
    "directory": (
        lambda m, t: m.server_config(**{"ssl.truststore.location": str(t)}), "ssl.truststore.location", "directory",
    ),
    "wrong key password": (
        lambda m, t: m.server_config(**{"ssl.key.password": "wrong"}), "ssl.key.password", "does not decrypt",
    ),
    "encrypted key without password": (
        lambda m, t: m.server_config(**{"ssl.key.password": None}), "ssl.key.password", "is encrypted: set it",
    ),
    "password for a plain key": (
        lambda m, t: {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(m.client_pem),
                      "ssl.key.password": "x"},
        "ssl.key.password", "not encrypted: remove it",
    ),
    "key not matching certificate": (
        lambda m, t: {"ssl.keystore.type": "PEM", "ssl.keystore.key": m.client.key_pem().decode(),
                      "ssl.keystore.certificate.chain": m.server.chain_pem().decode()},
        "ssl.keystore.key", "does not match the first certificate",
    ),
    "key matching a later certificate": (
        lambda m, t: {"ssl.keystore.type": "PEM", "ssl.keystore.key": m.client.key_pem().decode(),
                      "ssl.keystore.certificate.chain": (m.server.cert_pem() + m.client.cert_pem()).decode()},
        "ssl.keystore.key", "put that one first",
    ),
    "PEM key store without key": (
        lambda m, t: {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(m.ca_pem)},
        "ssl.keystore.location", "no PEM private key",
    ),
    "PEM key store without certificate": (
        lambda m, t: {"ssl.keystore.type": "PEM",
                      "ssl.keystore.location": str(certs.write_key_pem(t / "k.pem", m.server))},
        "ssl.keystore.location", "no PEM certificate",
    ),
    "PKCS12 without key": (
        lambda m, t: {"ssl.keystore.type": "PKCS12", "ssl.keystore.password": PW, "ssl.keystore.location":
                      str(certs.write_pkcs12(t / "nokey.p12", m.server, PW.encode(), with_key=False))},
        "ssl.keystore.location", "holds no private key",
    ),
    "PKCS12 wrong password": (
        lambda m, t: {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(m.server_p12),
                      "ssl.keystore.password": "wrong"},
        "ssl.keystore.password", "wrong password",
    ),
    "PKCS12 without password": (
        lambda m, t: {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(m.server_p12)},
        "ssl.keystore.password", "needs its password",
    ),
    "PEM file typed PKCS12": (
        lambda m, t: {"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(m.ca_pem)},
        "ssl.truststore.location", "not a PKCS12 store",
    ),
    "real JKS key store": (
        lambda m, t: {"ssl.keystore.location": str(_jks(t)), "ssl.keystore.password": PW},
        "ssl.keystore.location", "-deststoretype PKCS12",
    ),
    "real JKS trust store": (
        lambda m, t: {"ssl.truststore.type": "JKS", "ssl.truststore.location": str(_jks(t))},
        "ssl.truststore.location", "keytool -importkeystore",
    ),
    "unknown key store type": (
        lambda m, t: m.server_config(**{"ssl.keystore.type": "BKS"}), "ssl.keystore.type", "use PEM or PKCS12",
    ),
    "unknown trust store type": (
        lambda m, t: m.server_config(**{"ssl.truststore.type": "JCEKS"}), "ssl.truststore.type", "unknown store",
    ),
    "unknown protocol": (
        lambda m, t: {"ssl.enabled.protocols": "TLSv1.2,TLSv2"}, "ssl.enabled.protocols", "unknown protocol",
    ),
    "obsolete protocol": (lambda m, t: {"ssl.protocol": "SSLv3"}, "ssl.protocol", "obsolete"),
    "protocol gap": (
        lambda m, t: {"ssl.enabled.protocols": "TLSv1.1,TLSv1.3"}, "ssl.enabled.protocols", "consecutive",
    ),
    "ssl.protocol below enabled": (
        lambda m, t: {"ssl.protocol": "TLSv1.1"}, "ssl.protocol", "older than every protocol",
    ),
    "unknown cipher": (
        lambda m, t: {"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_ROT13_SHA"}, "ssl.cipher.suites", "unknown",
    ),
    "unknown OpenSSL-style cipher": (
        lambda m, t: {"ssl.cipher.suites": "NOT-A-CIPHER"}, "ssl.cipher.suites", "not available",
    ),
    "TLS 1.3 suite OpenSSL does not enable": (
        lambda m, t: {"ssl.cipher.suites": "TLS_AES_128_CCM_SHA256"}, "ssl.cipher.suites", "cannot be enabled",
    ),
    "TLS 1.2 suites with TLS 1.3 only": (
        lambda m, t: {"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                      "ssl.enabled.protocols": "TLSv1.3"},
        "ssl.cipher.suites", "add TLS 1.3 suites",
    ),
    "empty suite list": (lambda m, t: {"ssl.cipher.suites": " , "}, "ssl.cipher.suites", "names no cipher suite"),
    "client auth without trust store": (
        lambda m, t: m.server_config(**{"ssl.client.auth": "required", "ssl.truststore.location": None}),
        "ssl.client.auth", "no trust store",
    ),
    "unknown client auth": (
        lambda m, t: m.server_config(**{"ssl.client.auth": "optional"}), "ssl.client.auth", "none, requested",
    ),
    "PEM location and inline PEM": (
        lambda m, t: m.server_config(**{"ssl.keystore.certificate.chain": m.server.chain_pem().decode(),
                                        "ssl.keystore.key": m.server.key_pem().decode()}),
        "ssl.keystore.location", "one way only",
    ),
    "trust location and inline trust": (
        lambda m, t: m.server_config(**{"ssl.truststore.certificates": m.ca.cert_pem().decode()}),
        "ssl.truststore.location", "one way only",
    ),
    "inline PEM with JKS type": (
        lambda m, t: {"ssl.keystore.certificate.chain": m.server.chain_pem().decode(),
                      "ssl.keystore.key": m.server.key_pem().decode()},
        "ssl.keystore.type", "set ssl.keystore.type=PEM",
    ),
    "inline chain without key": (
        lambda m, t: {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": m.server.chain_pem().decode()},
        "ssl.keystore.key", "set together",
    ),
    "key store password with PEM": (
        lambda m, t: m.server_config(**{"ssl.keystore.password": "x"}), "ssl.keystore.password", "cannot be used",
    ),
    "trust store password with PEM": (
        lambda m, t: m.server_config(**{"ssl.truststore.password": "x"}), "ssl.truststore.password", "remove it",
    ),
    "damaged inline certificate": (
        lambda m, t: {"ssl.truststore.type": "PEM", "ssl.truststore.certificates":
                      "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"},
        "ssl.truststore.certificates", "damaged",
    ),
    "unknown endpoint algorithm": (
        lambda m, t: {"ssl.endpoint.identification.algorithm": "ldap"},
        "ssl.endpoint.identification.algorithm", "use https",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input(m: Material, tmp_path: Path, case: str) -> None:
    make, key, text = BAD[case]
    with pytest.raises(SslConfigError) as info:
        load_tls_settings(make(m, tmp_path))
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: ")
    assert text in str(info.value)
    assert PW not in str(info.value)


def test_server_context_needs_a_key_store(m: Material) -> None:
    with pytest.raises(SslConfigError, match=r"ssl\.keystore\.location: is not set: a TLS listener"):
        server(m.client_config())


# ---------------------------------------------------------------------------------------------------------------
# Secrets, ignored keys, reload


def test_no_secret_left_on_disk_or_in_repr(m: Material) -> None:
    shm = Path("/dev/shm")
    before = set(shm.glob("odradek-tls-*")) if shm.is_dir() else set()
    settings = load_tls_settings(m.server_config())
    server_context(settings)
    after = set(shm.glob("odradek-tls-*")) if shm.is_dir() else set()
    assert after == before
    text = repr(settings)
    assert PW not in text and "PRIVATE KEY" not in text and "_key=" not in text


def test_ignored_and_unknown_keys(m: Material) -> None:
    settings = load_tls_settings({
        "ssl.keymanager.algorithm": "SunX509",
        "ssl.trustmanager.algorithm": "PKIX",
        "ssl.secure.random.implementation": "SHA1PRNG",
        "ssl.provider": "SunJSSE",
        "ssl.engine.factory.class": "x.Y",
        "ssl.principal.mapping.rules": "DEFAULT",
        "ssl.made.up": "1",
    })
    assert settings.ignored_keys == tuple(sorted(tls.IGNORED_KEYS))
    assert settings.notes == ("unknown keys ignored: ssl.made.up",)


def test_reload_when_the_key_store_changes(m: Material, tmp_path: Path) -> None:
    path = certs.write_keystore_pem(tmp_path / "rotating.pem", m.server)
    config: dict[str, str | None] = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(path)}
    first = load_tls_settings(config)
    assert tls.reload_if_changed(config, first) is None
    renewed = certs.issue(m.ca, "localhost")
    certs.write_keystore_pem(path, renewed)
    os.utime(path, ns=(first.files[0].mtime_ns + 10**9, first.files[0].mtime_ns + 10**9))
    second = tls.reload_if_changed(config, first)
    assert second is not None and second.keystore is not None
    assert second.keystore.chain[0] == renewed.cert
    pair = handshake(server_context(second), client(m.client_config()))
    assert pair.client.getpeercert(binary_form=True) == renewed.der
    path.write_bytes(b"garbage")
    with pytest.raises(SslConfigError):
        tls.reload_if_changed(config, second)


def _replaced(path: Path, write: Callable[[Path], object]) -> None:
    """``path`` replaced as an operator rotating a store does: written beside it, then renamed over it."""
    fresh = path.with_name(path.name + ".new")
    write(fresh)
    os.replace(fresh, path)


@pytest.mark.parametrize("server_name", ["localhost", None])  # a client connecting by address sends no SNI
def test_a_reloading_listener_context_hands_new_connections_the_replaced_stores(
    m: Material, tmp_path: Path, caplog: pytest.LogCaptureFixture, server_name: str | None,
) -> None:
    path = certs.write_keystore_pem(tmp_path / "rotating.pem", m.server, PW.encode())
    trust = certs.write_cert_pem(tmp_path / "trust.pem", m.ca)
    config: dict[str, str | None] = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(path),
                                     "ssl.key.password": PW, "ssl.truststore.type": "PEM",
                                     "ssl.truststore.location": str(trust), "ssl.client.auth": "required"}
    reloading = tls.ReloadingServerContext(config, "listener SSL")
    alice = certs.issue(m.other_ca, "alice", client=True, server=False, sans=())
    to_both = client({"ssl.truststore.type": "PEM",
                      "ssl.truststore.location": str(certs.write_cert_pem(tmp_path / "both.pem", m.ca, m.other_ca)),
                      "ssl.keystore.type": "PEM",
                      "ssl.keystore.location": str(certs.write_keystore_pem(tmp_path / "alice.pem", alice))})
    to_both.check_hostname = server_name is not None

    def served() -> bytes | None:
        return handshake(reloading.context, to_both, server_name).client.getpeercert(binary_form=True)

    with pytest.raises(ssl.SSLError):  # alice's CA is not trusted yet
        served()
    assert not reloading.check()  # nothing changed
    before = handshake(reloading.context, client(m.client_config(with_cert=True)), "localhost")  # open across it
    renewed = certs.issue(m.other_ca, "localhost")
    _replaced(path, lambda p: certs.write_keystore_pem(p, renewed, PW.encode()))
    _replaced(trust, lambda p: certs.write_cert_pem(p, m.other_ca))
    caplog.set_level(logging.INFO, logger="odradek.security.tls")
    assert reloading.check()
    assert served() == renewed.der  # the new key store, and the new trust store accepts alice
    assert "reloaded" in caplog.text and "listener SSL" in caplog.text
    assert before.client.getpeercert(binary_form=True) == m.server.der  # an open connection keeps its own
    caplog.clear()
    _replaced(path, lambda p: p.write_bytes(b"-----BEGIN half written"))  # logged once; the last good one serves
    assert not reloading.check() and not reloading.check()
    assert [r.levelname for r in caplog.records] == ["WARNING"] and "could not be loaded" in caplog.text
    assert PW not in caplog.text
    assert served() == renewed.der
    _replaced(path, lambda p: certs.write_keystore_pem(p, m.server, PW.encode()))
    assert reloading.check()
    assert served() == m.server.der


@pytest.mark.parametrize(("renewal", "allowed_by"), [
    ({"name": "elsewhere"}, "ssl.allow.dn.changes"),
    ({"name": "localhost", "sans": ("localhost", "127.0.0.1", "broker-1.example")}, "ssl.allow.san.changes"),
])
def test_a_replaced_key_store_must_keep_the_certificates_identity_unless_allowed(
    m: Material, tmp_path: Path, caplog: pytest.LogCaptureFixture, renewal: dict[str, Any], allowed_by: str,
) -> None:
    for allowed in (False, True):
        path = certs.write_keystore_pem(tmp_path / f"{allowed}.pem", m.server)
        config: dict[str, str | None] = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(path),
                                         allowed_by: "true" if allowed else None}
        reloading = tls.ReloadingServerContext(config, "listener SSL")
        renewed = certs.issue(m.ca, renewal["name"], sans=renewal.get("sans", ("localhost", "127.0.0.1")))
        _replaced(path, lambda p, renewed=renewed: certs.write_keystore_pem(p, renewed))
        caplog.clear()
        assert reloading.check() is allowed
        if not allowed:
            assert allowed_by + "=true" in caplog.text
        to_any = client({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(m.ca_pem)})
        to_any.check_hostname = False
        served = handshake(reloading.context, to_any, None).client.getpeercert(binary_form=True)
        assert served == (renewed.der if allowed else m.server.der)


def test_the_identity_flags_are_true_or_false(m: Material) -> None:
    with pytest.raises(SslConfigError, match=r"ssl\.allow\.dn\.changes"):
        tls.ReloadingServerContext(m.server_config(**{"ssl.allow.dn.changes": "maybe"}), "listener SSL")
