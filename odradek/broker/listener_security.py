"""What each listener's security protocol asks of a connection, built once from the broker's config.

Per listener (``listener.security.protocol.map``), with ``listener.name.<listener>.<key>`` overriding the broker-wide
keys as Kafka reads them:

- PLAINTEXT: nothing; every connection is User:ANONYMOUS.
- SSL: a server ``SSLContext`` (``security/tls.py``: the ``ssl.*`` keys; new connections follow the key store and
  trust store files when they are replaced, ``ReloadingServerContext``) and the principal of a client certificate
  (``security/principal.py``: ``ssl.principal.mapping.rules``; ANONYMOUS without one).
- SASL_PLAINTEXT, SASL_SSL: ``SaslSettings`` (``broker/authentication.py``) for ``sasl.enabled.mechanisms``; PLAIN's
  users come from the listener's JAAS line (``listener.name.<l>.plain.sasl.jaas.config``, else
  ``sasl.jaas.config``), SCRAM's credentials from the broker's credential store (a lookup passed in); SASL_SSL adds
  TLS as SSL does, its principal being the SASL one.

Invariants: any misconfiguration is a ``ConfigError`` naming the key (and listener) before the broker serves;
nothing here logs or keeps a password beyond the PLAIN users' table the mechanism needs.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.broker.authentication import SaslSettings
from odradek.broker.config import SASL_MECHANISMS, SSL_IGNORED_KEYS, SSL_KEYS, BrokerConfig, ConfigError
from odradek.client.connection import ClientSecurity
from odradek.protocol.sasl import PLAIN, PlainClient, SaslClient, SaslServer, ScramClient, create_server
from odradek.security.jaas import JaasConfigError, client_credentials, parse_jaas_config, plain_users
from odradek.security.principal import PrincipalMappingError, SslPrincipalMapper
from odradek.security.scram import ScramCredential
from odradek.security.tls import ReloadingServerContext, SslConfigError, TlsSettings, client_context, load_tls_settings

ScramLookup = Callable[[str, str], ScramCredential | None]  # (mechanism, user) -> credential


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    protocol: str
    tls: ssl.SSLContext | None = None
    sasl: SaslSettings | None = None
    mapper: SslPrincipalMapper | None = None
    reloading: ReloadingServerContext | None = None  # ``tls``'s: new connections follow the store files

    def tls_principal(self, ssl_object: Any) -> str | None:
        """The user name of an SSL connection's client certificate (None: no certificate, ANONYMOUS).
        ``NoMatchingRule`` when no ``ssl.principal.mapping.rules`` rule matches it: Kafka fails such a connection's
        authentication."""
        if ssl_object is None or self.mapper is None:
            return None
        der = ssl_object.getpeercert(binary_form=True)
        return None if der is None else self.mapper.principal(der).name


def listener_security(config: BrokerConfig, scram: ScramLookup | None = None) -> dict[str, ListenerSecurity]:
    """Every listener's security, by listener name; ``ConfigError`` for a bad setting."""
    return {lst.name: _one(config, lst.name, lst.security_protocol, scram) for lst in config.listeners}


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    """How this broker connects to the others: as a client of the inter-broker listener's protocol, with that
    listener's trust store (and key store, for brokers that require client certificates) and, for SASL, the
    mechanism ``sasl.mechanism.inter.broker.protocol`` with the ``username``/``password`` of that listener's JAAS
    line for it (Kafka's habit: one JAAS line holds the broker's own login and the users it accepts)."""
    name = config.inter_broker_listener_name
    protocol = next(lst.security_protocol for lst in config.listeners if lst.name == name)
    tls = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            tls = client_context(_tls_settings(config, name))
        except SslConfigError as e:
            raise ConfigError(f"inter-broker listener {name}: {e}") from None
    if not protocol.startswith("SASL_"):
        return ClientSecurity(tls)
    mechanism = str(config.values["sasl.mechanism.inter.broker.protocol"]).strip().upper()
    enabled = _mechanisms(config, name)
    if mechanism not in enabled:
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism} is not enabled on the inter-broker "
                          f"listener {name} ({', '.join(enabled)}): enable it in sasl.enabled.mechanisms")
    key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas = config.listener_value(name, "sasl.jaas.config", mechanism)
    if not jaas:
        raise ConfigError(f"{key} is not set: the broker logs in to the others with its username and password")
    try:
        username, password = client_credentials(parse_jaas_config(jaas))
    except JaasConfigError as e:
        raise ConfigError(f"{key}: {e}") from None

    def new_client() -> SaslClient:
        if mechanism == PLAIN:
            return PlainClient(username, password)
        return ScramClient(mechanism, username, password)

    return ClientSecurity(tls, mechanism, new_client)


def tls_keys(config: BrokerConfig, name: str | None) -> dict[str, str | None]:
    """The ``ssl.*`` keys as listener ``name`` sees them (its overrides applied; None: the broker-wide values),
    the ignored Java-only ones only when set."""
    def value(key: str) -> str | None:
        return config.listener_value(name, key) if name is not None else config.values[key]

    keys = {key: value(key) for key, _, _ in SSL_KEYS}
    keys.update({key: v for key in SSL_IGNORED_KEYS if (v := value(key)) is not None})
    return keys


def _tls_settings(config: BrokerConfig, name: str) -> TlsSettings:
    return load_tls_settings(tls_keys(config, name))


def _one(config: BrokerConfig, name: str, protocol: str, scram: ScramLookup | None) -> ListenerSecurity:
    reloading: ReloadingServerContext | None = None
    mapper: SslPrincipalMapper | None = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            reloading = ReloadingServerContext(tls_keys(config, name), f"listener {name}")
        except SslConfigError as e:
            raise ConfigError(f"listener {name}: {e}") from None
        if protocol == "SSL":
            try:
                mapper = SslPrincipalMapper(config.listener_value(name, "ssl.principal.mapping.rules"))
            except PrincipalMappingError as e:
                raise ConfigError(f"listener {name}: ssl.principal.mapping.rules: {e}") from None
    sasl = _sasl(config, name, scram) if protocol.startswith("SASL_") else None
    return ListenerSecurity(protocol, reloading.context if reloading else None, sasl, mapper, reloading)


def _mechanisms(config: BrokerConfig, name: str) -> tuple[str, ...]:
    """The listener's ``sasl.enabled.mechanisms``; ``ConfigError`` for none or one not supported."""
    raw = str(config.listener_value(name, "sasl.enabled.mechanisms") or "")
    mechanisms = tuple(m.strip().upper() for m in raw.split(",") if m.strip())
    unsupported = [m for m in mechanisms if m not in SASL_MECHANISMS]
    if unsupported or not mechanisms:
        raise ConfigError(
            f"listener {name}: sasl.enabled.mechanisms={raw!r}: "
            + (f"{', '.join(unsupported)} is not supported" if unsupported else "none enabled")
            + f"; use any of {', '.join(SASL_MECHANISMS)} (GSSAPI, Kafka's default, is Kerberos: not supported)"
        )
    return mechanisms


def _sasl(config: BrokerConfig, name: str, scram: ScramLookup | None) -> SaslSettings:
    mechanisms = _mechanisms(config, name)
    passwords: dict[str, str] = {}
    if PLAIN in mechanisms:
        jaas = config.listener_value(name, "sasl.jaas.config", PLAIN)
        key = f"listener.name.{name.lower()}.plain.sasl.jaas.config"
        if not jaas:
            raise ConfigError(f"listener {name}: PLAIN is enabled but has no users: set {key} to "
                              'org.apache.kafka.common.security.plain.PlainLoginModule required '
                              'user_alice="alice-secret";')
        try:
            passwords = plain_users(parse_jaas_config(jaas))
        except JaasConfigError as e:
            raise ConfigError(f"{key}: {e}") from None
    lookups = {m: _scram_lookup(scram, m) for m in mechanisms if m.startswith("SCRAM-")}

    def new_server(mechanism: str) -> SaslServer:
        return create_server(mechanism, plain_passwords=passwords.get if PLAIN in mechanisms else None,
                             scram_credentials=lookups)

    reauth = max((int(config.listener_value(name, "connections.max.reauth.ms", m) or 0) for m in mechanisms),
                 default=0)
    return SaslSettings(mechanisms, new_server, max_reauth_ms=reauth,
                        failed_delay_ms=int(config.values["connection.failed.authentication.delay.ms"]))


def _scram_lookup(scram: ScramLookup | None, mechanism: str) -> Callable[[str], ScramCredential | None]:
    def lookup(user: str) -> ScramCredential | None:
        return scram(mechanism, user) if scram is not None else None
    return lookup
