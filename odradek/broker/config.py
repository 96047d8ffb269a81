"""Broker configuration: ``server.properties`` keys as Kafka names them, with Kafka's defaults.

Invariants:
- Every key is declared in ``KEYS`` with a type and default; an unknown key or an invalid value is
  a ``ConfigError`` naming the key, the value and what is accepted, raised before the broker starts.
- Keys that only matter to Kafka's own process layout (KRaft controller settings, thread counts)
  are accepted and ignored, so a stock Kafka ``server.properties`` works unchanged; ``from_properties``
  lists the ones given in ``ignored_keys`` and ``odradek serve`` logs a warning naming each. An unknown
  key names the closest known key when one is close (a typo).
- Where the keys come from (the properties file, the environment) is ``config_sources.py``'s.
- ``zookeeper.connect`` unset (the default) is single-node mode: the broker keeps its metadata in its
  own files, exactly as before the cluster keys existed, and the replication keys (replication factors,
  ``replica.*``, ``controlled.shutdown.*``) have no effect. Set, it is ZooKeeper mode (Kafka's).
- Listeners: every client listener has its own name and is served; its security protocol comes from
  ``listener.security.protocol.map`` (``broker/listener_security.py`` checks what each protocol needs; a
  ``listener.name.<listener>.<key>`` names an existing listener and a key a listener may override).
  ``advertised_listeners`` holds the advertised address of every listener, in ``listeners`` order (a listener not
  named in ``advertised.listeners`` advertises itself; an unset, ``0.0.0.0`` or ``::`` host advertises
  127.0.0.1); ``advertised_host``/``advertised_port`` are the first one's; ``bound`` fills in a port 0 once the
  server has bound it.
- ``http.listeners`` (not Kafka's) lists the HTTP listener's ``http://`` or ``https://`` addresses (``/metrics``,
  ``/healthz``, ``/readyz``, the console; docs/metrics.md); empty serves none; anything else is a ``ConfigError``.
- Cross-key rules are Kafka's: ``replica.fetch.wait.max.ms`` <= ``replica.lag.time.max.ms`` and
  <= ``replica.socket.timeout.ms``.
- Topic-level defaults (``log.segment.bytes`` ...) are turned into a ``LogConfig`` by
  ``default_log_config``; per-topic overrides use the topic keys (``segment.bytes`` ...).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.broker.connection_limits import ConnectionLimits
from odradek.clock import SYSTEM_CLOCK
from odradek.cluster.model import Endpoint
from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.txn.config import TxnConfig
from odradek.protocol.errors import ErrorCode, InvalidConfigError, KafkaError
from odradek.security.authorizer import AUTHORIZER_CLASSES, parse_authorizer_class_name, parse_super_users
from odradek.storage.cleaner.cleaner import CleanerConfig
from odradek.storage.config import HOURS, LONG_MAX, MINUTES, TOPIC_TO_BROKER_KEY, LogConfig, MiB


class ConfigError(InvalidConfigError):
    pass


class ReadOnlyConfigError(KafkaError):
    """A broker key that cannot be changed at runtime was given to a dynamic config change."""

    code = ErrorCode.INVALID_REQUEST


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise ValueError("expected true or false")


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str
    ignored: bool = False  # accepted for compatibility, has no effect


def _k(name: str, parse: Callable[[str], Any], default: Any, doc: str, ignored: bool = False) -> Key:
    return Key(name, parse, default, doc, ignored)


RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
REPLICA_SELECTORS = frozenset({RACK_AWARE_SELECTOR, "org.apache.kafka.common.replica.LeaderSelector"})

# Kafka's default: every security protocol is also a listener name of itself.
DEFAULT_SECURITY_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})

INT_MAX = 2**31 - 1
_LOG = LogConfig()
_CLEANER = CleanerConfig()
# TLS keys with Kafka's defaults (parsed and checked per listener by security/tls.py); JKS means "the file's own
# format" here (Java 9+ keytool writes PKCS12 under that name).
SSL_KEYS: tuple[tuple[str, str | None, str], ...] = (
    ("ssl.keystore.type", "JKS", "PEM or PKCS12"),
    ("ssl.keystore.location", None, "key store file"),
    ("ssl.keystore.password", None, "key store password"),
    ("ssl.key.password", None, "password of the private key"),
    ("ssl.keystore.certificate.chain", None, "inline PEM certificate chain (ssl.keystore.type=PEM)"),
    ("ssl.keystore.key", None, "inline PEM private key (ssl.keystore.type=PEM)"),
    ("ssl.truststore.type", "JKS", "PEM or PKCS12"),
    ("ssl.truststore.location", None, "trust store file"),
    ("ssl.truststore.password", None, "trust store password"),
    ("ssl.truststore.certificates", None, "inline PEM trusted certificates (ssl.truststore.type=PEM)"),
    ("ssl.client.auth", "none", "client certificates: none, requested, required"),
    ("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", "TLS versions accepted"),
    ("ssl.protocol", "TLSv1.3", "TLS protocol"),
    ("ssl.cipher.suites", None, "cipher suites (IANA names); unset: OpenSSL's defaults"),
    ("ssl.endpoint.identification.algorithm", "https", "check the host name of brokers connected to"),
    ("ssl.principal.mapping.rules", "DEFAULT", "rules from a client certificate's DN to a user name"),
    ("ssl.allow.dn.changes", "false", "a replaced key store may change the certificate's subject"),
    ("ssl.allow.san.changes", "false", "a replaced key store may change the certificate's alternative names"),
)
SSL_IGNORED_KEYS = ("ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
                    "ssl.provider", "ssl.engine.factory.class", "ssl.keystore.alias")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Keys a listener may override as listener.name.<listener>.<key> (and <mechanism>.<key> for the SASL ones).
LISTENER_KEYS = frozenset({*(k for k, _, _ in SSL_KEYS), *SSL_IGNORED_KEYS, "sasl.enabled.mechanisms",
                           "sasl.jaas.config", "connections.max.reauth.ms", "sasl.server.max.receive.size"})
MECHANISM_KEYS = frozenset({"sasl.jaas.config", "connections.max.reauth.ms"})
LISTENER_PREFIX = "listener.name."

_GROUP = GroupConfig()
_TXN = TxnConfig()
KEYS: dict[str, Key] = {
    k.name: k
    for k in [
        _k("node.id", int, 1, "id of this broker"),
        _k("broker.id", int, None, "alias of node.id"),
        _k("broker.rack", str, None, "rack of this broker (replicas of a partition are spread over racks)"),
        _k("replica.selector.class", str, None,
           "which replica consumers fetch from (KIP-392): unset = the leader; "
           "org.apache.kafka.common.replica.RackAwareReplicaSelector = an in-sync replica in the client's rack"),
        _k("listeners", str, "PLAINTEXT://127.0.0.1:9092", "addresses to listen on"),
        _k("advertised.listeners", str, None, "addresses given to clients (default: listeners)"),
        _k("http.listeners", str, "http://127.0.0.1:9644",
           "HTTP listeners for /metrics, /healthz, /readyz and the console: http://HOST:PORT or https://HOST:PORT "
           "(the ssl.* keys), comma-separated; empty: no HTTP listener (docs/metrics.md)"),
        _k("inter.broker.listener.name", str, None,
           "listener other brokers replicate through (default: the first of listeners)"),
        _k("listener.security.protocol.map", str, DEFAULT_SECURITY_PROTOCOL_MAP,
           "security protocol of each listener name, NAME:PROTOCOL,..."),
        _k("zookeeper.connect", str, None,
           "ZooKeeper ensemble HOST:PORT[,HOST:PORT...][/CHROOT]; unset: single-node mode"),
        _k("zookeeper.session.timeout.ms", int, 18_000, "ZooKeeper session timeout"),
        _k("zookeeper.connection.timeout.ms", int, None,
           "how long to wait for a ZooKeeper connection (default: zookeeper.session.timeout.ms)"),
        _k("zookeeper.max.in.flight.requests", int, 10, "ZooKeeper requests in flight", True),
        _k("log.dirs", str, None, "comma-separated data directories"),
        _k("log.dir", str, "data", "data directory when log.dirs is not set"),
        _k("num.partitions", int, 1, "partitions of auto-created topics"),
        _k("default.replication.factor", int, 1, "replication factor of auto-created topics"),
        _k("min.insync.replicas", int, 1, "min.insync.replicas default: replicas an acks=all write needs"),
        _k("unclean.leader.election.enable", _bool, False,
           "unclean.leader.election.enable default: may a replica outside the ISR become leader (data loss)"),
        _k("offsets.topic.replication.factor", int, 3, "replication factor of __consumer_offsets"),
        _k("transaction.state.log.replication.factor", int, 3, "replication factor of __transaction_state"),
        _k("transaction.state.log.min.isr", int, 2, "min.insync.replicas of __transaction_state"),
        _k("replica.lag.time.max.ms", int, 30_000,
           "a follower that has not caught up with the leader for this long leaves the ISR"),
        _k("replica.fetch.max.bytes", int, 1 * MiB, "bytes a follower asks for per partition"),
        _k("replica.fetch.response.max.bytes", int, 10 * MiB, "bytes a follower asks for per fetch response"),
        _k("replica.fetch.wait.max.ms", int, 500, "longest a follower's fetch waits on the leader for data"),
        _k("replica.fetch.min.bytes", int, 1, "bytes a follower's fetch waits for"),
        _k("replica.fetch.backoff.ms", int, 1_000, "pause after a follower's fetch failed"),
        _k("leader.replication.throttled.rate", int, LONG_MAX,
           "bytes/s a leader sends to throttled replicas outside the ISR (dynamic)"),
        _k("follower.replication.throttled.rate", int, LONG_MAX,
           "bytes/s a follower fetches for throttled replicas outside the ISR (dynamic)"),
        _k("replication.quota.window.num", int, 11, "samples of the replication throttles' rates"),
        _k("replication.quota.window.size.seconds", int, 1, "length of each replication throttle sample"),
        _k("num.replica.fetchers", int, 1, "fetcher connections per source broker"),
        _k("replica.high.watermark.checkpoint.interval.ms", int, 5_000,
           "how often high watermarks are written to disk"),
        _k("replica.socket.timeout.ms", int, 30_000, "timeout of a follower's fetch request"),
        _k("controlled.shutdown.enable", _bool, True, "move leaderships away before stopping"),
        _k("controlled.shutdown.max.retries", int, 3, "attempts of a controlled shutdown"),
        _k("controlled.shutdown.retry.backoff.ms", int, 5_000, "pause between controlled shutdown attempts"),
        _k("controller.socket.timeout.ms", int, 30_000, "timeout of the controller's requests to brokers"),
        _k("auto.leader.rebalance.enable", _bool, True, "the controller moves leadership back to preferred replicas"),
        _k("leader.imbalance.per.broker.percentage", int, 10,
           "share of a broker's preferred partitions led elsewhere that triggers a rebalance"),
        _k("leader.imbalance.check.interval.seconds", int, 300, "how often the controller checks leader balance"),
        _k("auto.create.topics.enable", _bool, True, "create unknown topics on metadata/produce"),
        _k("delete.topic.enable", _bool, True, "allow DeleteTopics"),
        _k("socket.request.max.bytes", int, 100 * 1024 * 1024, "largest request accepted"),
        _k("quota.window.num", int, 11, "samples of the client quotas' rates"),
        _k("quota.window.size.seconds", int, 1, "length of each client quota sample"),
        _k("controller.quota.window.num", int, 11, "samples of the controller mutation quota's rate"),
        _k("controller.quota.window.size.seconds", int, 1, "length of each controller mutation quota sample"),
        _k("max.connections", int, INT_MAX, "connections the broker accepts across its listeners"),
        _k("max.connections.per.ip", int, INT_MAX, "connections accepted from one IP address"),
        _k("max.connections.per.ip.overrides", str, "",
           "per-IP (or host name) limits overriding max.connections.per.ip: host:count,host2:count"),
        _k("max.connection.creation.rate", int, INT_MAX, "new connections accepted per second on each listener"),
        _k("log.retention.ms", int, None, "retention.ms default (overrides minutes/hours)"),
        _k("log.retention.minutes", int, None, "retention default in minutes"),
        _k("log.retention.hours", int, 168, "retention default in hours"),
        _k("log.retention.bytes", int, _LOG.retention_bytes, "retention.bytes default"),
        _k("log.segment.bytes", int, _LOG.segment_bytes, "segment.bytes default"),
        _k("log.roll.ms", int, None, "segment.ms default (overrides hours)"),
        _k("log.roll.hours", int, 168, "segment.ms default in hours"),
        _k("log.index.interval.bytes", int, _LOG.index_interval_bytes, "index.interval.bytes default"),
        _k("log.index.size.max.bytes", int, _LOG.segment_index_bytes, "segment.index.bytes default"),
        _k("log.flush.interval.messages", int, _LOG.flush_messages, "flush.messages default"),
        _k("log.flush.interval.ms", int, None, "flush.ms default"),
        _k("log.flush.scheduler.interval.ms", int, 1000, "how often flush.ms is checked"),
        _k("log.retention.check.interval.ms", int, 5 * MINUTES, "how often retention runs"),
        _k("log.flush.offset.checkpoint.interval.ms", int, 1 * MINUTES, "how often checkpoints are written"),
        _k("log.segment.delete.delay.ms", int, _LOG.file_delete_delay_ms, "file.delete.delay.ms default"),
        _k("message.max.bytes", int, _LOG.max_message_bytes, "max.message.bytes default"),
        _k("log.message.timestamp.type", str, _LOG.message_timestamp_type, "message.timestamp.type default"),
        _k("log.message.timestamp.before.max.ms", int, _LOG.message_timestamp_before_max_ms, "default"),
        _k("log.message.timestamp.after.max.ms", int, _LOG.message_timestamp_after_max_ms, "default"),
        _k("log.cleanup.policy", str, _LOG.cleanup_policy, "cleanup.policy default (delete, compact, compact,delete)"),
        _k("log.cleaner.enable", _bool, _CLEANER.enable, "run the log cleaner (compacted topics need it)"),
        _k("log.cleaner.threads", int, _CLEANER.threads, "cleaner threads (each drives one worker process)"),
        _k("log.cleaner.dedupe.buffer.size", int, _CLEANER.dedupe_buffer_size,
           "memory of the cleaners' offset maps, shared among the threads"),
        _k("log.cleaner.io.buffer.size", int, _CLEANER.io_buffer_size, "a cleaner's read and write buffer"),
        _k("log.cleaner.io.buffer.load.factor", float, _CLEANER.io_buffer_load_factor,
           "how full a cleaner's offset map may get"),
        _k("log.cleaner.io.max.bytes.per.second", float, _CLEANER.io_max_bytes_per_second,
           "I/O the cleaners may do per second (read plus written), shared among the threads"),
        _k("log.cleaner.backoff.ms", int, _CLEANER.backoff_ms, "pause of a cleaner that found nothing to clean"),
        _k("log.cleaner.min.cleanable.ratio", float, _LOG.min_cleanable_dirty_ratio,
           "min.cleanable.dirty.ratio default"),
        _k("log.cleaner.min.compaction.lag.ms", int, _LOG.min_compaction_lag_ms, "min.compaction.lag.ms default"),
        _k("log.cleaner.max.compaction.lag.ms", int, _LOG.max_compaction_lag_ms, "max.compaction.lag.ms default"),
        _k("log.cleaner.delete.retention.ms", int, _LOG.delete_retention_ms, "delete.retention.ms default"),
        _k("cluster.id", str, None, "cluster id (generated and kept in meta.properties if unset)"),
        _k("fetch.max.bytes", int, 55 * 1024 * 1024, "largest fetch response"),
        _k("max.incremental.fetch.session.cache.slots", int, 1000, "fetch sessions kept"),
        # Security (docs/security.md); listener.name.<listener>.<key> overrides these per listener.
        _k("security.inter.broker.protocol", str, None,
           "security protocol between brokers (the listener of that name; or set inter.broker.listener.name)"),
        _k("sasl.enabled.mechanisms", str, "GSSAPI",
           "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's default GSSAPI, "
           "Kerberos, is not supported)"),
        _k("sasl.mechanism.inter.broker.protocol", str, "GSSAPI", "SASL mechanism between brokers"),
        _k("sasl.jaas.config", str, None, "JAAS login line (PLAIN users; the inter-broker SASL user)"),
        _k("sasl.server.max.receive.size", int, 524288, "largest request before and during SASL authentication"),
        _k("connections.max.reauth.ms", int, 0, "SASL session lifetime; clients re-authenticate (0: never)"),
        _k("connection.failed.authentication.delay.ms", int, 100, "delay of the answer to a failed authentication"),
        _k("authorizer.class.name", parse_authorizer_class_name, "",
           f"ACL authorizer: {' or '.join(AUTHORIZER_CLASSES)} (both are Kafka's ACLs); empty: no authorization"),
        _k("super.users", parse_super_users, "", "principals allowed everything, User:alice;User:bob"),
        _k("allow.everyone.if.no.acl.found", _bool, False, "a resource without any ACL is open to everyone"),
        *(_k(key, str, default, doc) for key, default, doc in SSL_KEYS),
        *(_k(key, str, None, "Java-specific", True) for key in SSL_IGNORED_KEYS),
        # Accepted for compatibility with Kafka's server.properties; no effect here.
        _k("process.roles", str, None, "KRaft roles", True),
        _k("controller.quorum.voters", str, None, "KRaft", True),
        _k("controller.quorum.bootstrap.servers", str, None, "KRaft", True),
        _k("controller.listener.names", str, None, "KRaft", True),
        _k("num.network.threads", int, 3, "threads (asyncio here)", True),
        _k("num.io.threads", int, 8, "threads (asyncio here)", True),
        _k("num.recovery.threads.per.data.dir", int, 1, "recovery threads", True),
        _k("socket.send.buffer.bytes", int, 102400, "socket buffer", True),
        _k("socket.receive.buffer.bytes", int, 102400, "socket buffer", True),
        _k("share.coordinator.state.topic.replication.factor", int, 1, "share groups", True),
        _k("share.coordinator.state.topic.min.isr", int, 1, "share groups", True),
        _k("group.initial.rebalance.delay.ms", int, _GROUP.initial_rebalance_delay_ms,
           "how long an empty group waits for more members before its first rebalance"),
        _k("group.min.session.timeout.ms", int, _GROUP.min_session_timeout_ms, "smallest session.timeout.ms allowed"),
        _k("group.max.session.timeout.ms", int, _GROUP.max_session_timeout_ms, "largest session.timeout.ms allowed"),
        _k("group.max.size", int, _GROUP.max_size, "most members a consumer group may have"),
        _k("offsets.topic.num.partitions", int, _GROUP.num_partitions,
           "partitions of __consumer_offsets (when it is created)"),
        _k("offsets.topic.segment.bytes", int, 100 * 1024 * 1024,
           "segment.bytes of __consumer_offsets (when it is created; the cleaner compacts closed segments)"),
        _k("offsets.retention.minutes", int, _GROUP.offsets_retention_ms // MINUTES,
           "committed offsets of an empty group are kept this long"),
        _k("offsets.retention.check.interval.ms", int, _GROUP.offsets_retention_check_interval_ms,
           "how often expired offsets are removed"),
        _k("offset.metadata.max.bytes", int, _GROUP.offset_metadata_max_bytes, "longest commit metadata string"),
        _k("producer.id.expiration.ms", int, 86_400_000,
           "an idempotent producer silent this long is forgotten by each partition"),
        _k("producer.id.expiration.check.interval.ms", int, 600_000, "how often expired producer ids are removed"),
        _k("transaction.state.log.num.partitions", int, _TXN.num_partitions,
           "partitions of __transaction_state (when it is created)"),
        _k("transaction.state.log.segment.bytes", int, 100 * 1024 * 1024,
           "segment.bytes of __transaction_state (when it is created; the cleaner compacts closed segments)"),
        _k("transaction.max.timeout.ms", int, _TXN.max_timeout_ms, "largest transaction.timeout.ms a producer may ask"),
        _k("transactional.id.expiration.ms", int, _TXN.transactional_id_expiration_ms,
           "a transactional id idle this long (no transaction running) is forgotten"),
        _k("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, _TXN.abort_timed_out_interval_ms,
           "how often transactions that ran past their timeout are aborted"),
        _k("transaction.remove.expired.transaction.cleanup.interval.ms", int, _TXN.remove_expired_interval_ms,
           "how often expired transactional ids are removed"),
        _k("transaction.partition.verification.enable", _bool, True,
           "check with the transaction coordinator that a partition is in the transaction before its first "
           "transactional write (KIP-890)"),
        _k("offsets.load.buffer.size", int, 5 * 1024 * 1024, "consumer offsets loading", True),
        _k("offsets.commit.timeout.ms", int, 5000, "consumer offsets commits (one replica)", True),
        _k("group.coordinator.rebalance.protocols", str, "classic", "group protocols (classic only)", True),
    ]
}


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


def parse_listeners(value: str, key: str) -> list[Listener]:
    out = []
    for item in filter(None, (v.strip() for v in value.split(","))):
        name, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise ConfigError(f"{key}: {item!r} is not NAME://HOST:PORT (e.g. PLAINTEXT://127.0.0.1:9092)")
        out.append(Listener(name.upper(), host.strip("[]"), int(port)))
    if not out:
        raise ConfigError(f"{key} is empty")
    return out


@dataclass(frozen=True, slots=True)
class HttpListener:
    scheme: str  # http or https
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_http_listeners(value: str) -> list[HttpListener]:
    """``http.listeners`` as a list (empty: no HTTP listener); ``ConfigError`` for anything but http(s)://HOST:PORT."""
    out: list[HttpListener] = []
    for item in filter(None, (v.strip() for v in value.split(","))):
        scheme, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or scheme.lower() not in ("http", "https") or not colon or not port.isdigit() or int(port) > 65535:
            raise ConfigError(
                f"http.listeners: {item!r} is not http://HOST:PORT or https://HOST:PORT (e.g. http://127.0.0.1:9644; "
                "port 0 picks a free one; leave http.listeners empty to serve no HTTP)"
            )
        out.append(HttpListener(scheme.lower(), host.strip("[]"), int(port)))
    return out


def parse_security_protocol_map(value: str) -> dict[str, str]:
    """``listener.security.protocol.map`` as {LISTENER NAME: SECURITY PROTOCOL} (names upper-cased)."""
    out: dict[str, str] = {}
    for item in filter(None, (v.strip() for v in value.split(","))):
        name, sep, protocol = (part.strip().upper() for part in item.partition(":"))
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(sorted(SECURITY_PROTOCOLS))} (e.g. INTERNAL:PLAINTEXT)"
            )
        if name in out:
            raise ConfigError(f"listener.security.protocol.map: {name} is mapped twice")
        out[name] = protocol
    return out


_ZK_HOST = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$")


def parse_zookeeper_connect(value: str) -> tuple[list[tuple[str, int]], str | None]:
    """``zookeeper.connect`` as ([(host, port), ...], chroot or None); ``ConfigError`` if malformed.

    The format is ZooKeeper's: ``HOST:PORT[,HOST:PORT...][/CHROOT]`` (an IPv6 host in brackets).
    A chroot of ``/`` alone is no chroot, as ZooKeeper's client reads it.
    """

    def bad(reason: str) -> ConfigError:
        return ConfigError(
            f"zookeeper.connect={value!r} is invalid: {reason}; use HOST:PORT[,HOST:PORT...][/CHROOT], "
            "e.g. 127.0.0.1:2181/odradek"
        )

    text = value.strip()
    slash = text.find("/")
    hosts_part, chroot = (text, None) if slash < 0 else (text[:slash], text[slash:])
    hosts: list[tuple[str, int]] = []
    for item in (h.strip() for h in hosts_part.split(",")):
        match = _ZK_HOST.match(item)
        if match is None:
            raise bad(f"{item!r} is not HOST:PORT" if item else "a server is missing (empty entry)")
        port = int(match.group(1))
        if not 0 < port < 65536:
            raise bad(f"port {port} of {item!r} is not between 1 and 65535")
        hosts.append((item[: match.start(1) - 1].strip("[]"), port))
    if chroot == "/":
        chroot = None
    if chroot is not None:
        segments = chroot[1:].split("/")
        if any(s in ("", ".", "..") for s in segments):
            raise bad(f"chroot {chroot!r} has an empty, '.' or '..' path element (and must not end with '/')")
        if any(ch.isspace() or not ch.isprintable() for ch in chroot):
            raise bad(f"chroot {chroot!r} has a space or control character")
    return hosts, chroot


def _listener_override(key: str, value: str) -> str:
    """Check ``listener.name.<listener>.[<mechanism>.]<key>``'s shape; the listener is checked once all keys are
    read (``BrokerConfig.listener_overrides``)."""
    name, _, rest = key[len(LISTENER_PREFIX):].partition(".")
    mechanism, _, mechanism_key = rest.partition(".")
    ok = bool(name) and (rest in LISTENER_KEYS or (mechanism.upper() in SASL_MECHANISMS and mechanism_key in
                                                   MECHANISM_KEYS))
    if not ok:
        raise ConfigError(
            f"unknown config key {key!r}: a listener override is listener.name.<listener>.<key> with one of "
            f"{', '.join(sorted(LISTENER_KEYS))}, or listener.name.<listener>.<mechanism>.sasl.jaas.config "
            "(mechanism in lower case, e.g. listener.name.sasl_ssl.plain.sasl.jaas.config)"
        )
    return value


def _advertised_host(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


class BrokerConfig:
    """Validated broker settings. Build with ``from_properties``."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = dict(values)
        # Keys given that Odradek accepts for compatibility but ignores (``from_properties`` fills it in).
        self.ignored_keys: tuple[str, ...] = ()
        self.node_id: int = values["broker.id"] if values["broker.id"] is not None else values["node.id"]
        controller_names = {
            n.strip().upper() for n in (values["controller.listener.names"] or "").split(",") if n.strip()
        }
        listeners = [
            lst for lst in parse_listeners(values["listeners"], "listeners") if lst.name not in controller_names
        ]
        if not listeners:
            raise ConfigError("listeners: no client listener (all are controller listeners)")
        names = [lst.name for lst in listeners]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(
                f"listeners: each listener needs its own name, {', '.join(twice)} is used more than once "
                "(name them, e.g. INTERNAL://...,EXTERNAL://... with "
                "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT)"
            )
        protocols = parse_security_protocol_map(values["listener.security.protocol.map"])
        unmapped = [n for n in names if n not in protocols]
        if unmapped:
            raise ConfigError(
                f"listeners: no security protocol for {', '.join(unmapped)}: add "
                f"{','.join(f'{n}:PLAINTEXT' for n in unmapped)} to listener.security.protocol.map"
            )
        self.listeners: list[Listener] = [Listener(lst.name, lst.host, lst.port, protocols[lst.name])
                                          for lst in listeners]
        self.listener: Listener = self.listeners[0]
        adv = values["advertised.listeners"]
        named = {lst.name: lst for lst in self.listeners}
        given: dict[str, Listener] = {}
        for a in parse_listeners(adv, "advertised.listeners") if adv else []:
            if a.name in controller_names:
                continue  # KRaft's controller listener: not served here
            if a.name not in named:
                raise ConfigError(
                    f"advertised.listeners: {a.name} is not one of the listeners ({', '.join(named)}): "
                    "advertise only listeners the broker has"
                )
            if a.name in given:
                raise ConfigError(f"advertised.listeners: {a.name} is advertised twice")
            given[a.name] = a
        self.advertised_listeners: list[Listener] = [
            Listener(lst.name, _advertised_host(given.get(lst.name, lst).host), given.get(lst.name, lst).port,
                     lst.security_protocol)
            for lst in self.listeners
        ]
        self.listener_overrides: dict[str, dict[str, str]] = {lst.name: {} for lst in self.listeners}
        for key, value in values.items():
            if key.startswith(LISTENER_PREFIX):
                name, _, rest = key[len(LISTENER_PREFIX):].partition(".")
                if name.upper() not in self.listener_overrides:
                    raise ConfigError(f"{key}: there is no listener named {name.upper()} (listeners: "
                                      f"{', '.join(self.listener_overrides)})")
                self.listener_overrides[name.upper()][rest] = value
        inter = values["inter.broker.listener.name"]
        inter_protocol = values["security.inter.broker.protocol"]
        if inter and inter_protocol:
            raise ConfigError("inter.broker.listener.name and security.inter.broker.protocol are both set: set only "
                              "one (inter.broker.listener.name names the listener, the protocol is its map entry)")
        if inter_protocol:
            inter = inter_protocol.strip().upper()
            if inter not in SECURITY_PROTOCOLS:
                raise ConfigError(f"security.inter.broker.protocol={inter_protocol!r} is not one of "
                                  f"{', '.join(sorted(SECURITY_PROTOCOLS))}")
        self.inter_broker_listener_name: str = inter.strip().upper() if inter else self.listener.name
        if self.inter_broker_listener_name not in named:
            raise ConfigError(
                f"inter.broker.listener.name={inter!r} does not name a listener: use one of "
                f"{', '.join(named)} (the names in listeners)"
            )
        self.http_listeners: list[HttpListener] = parse_http_listeners(values["http.listeners"] or "")
        connect = values["zookeeper.connect"]
        self.zookeeper_connect: str | None = connect.strip() if connect and connect.strip() else None
        if self.zookeeper_connect is not None:
            parse_zookeeper_connect(self.zookeeper_connect)
        self.zk_session_timeout_ms: int = values["zookeeper.session.timeout.ms"]
        connection_timeout = values["zookeeper.connection.timeout.ms"]
        self.zk_connection_timeout_ms: int = (
            connection_timeout if connection_timeout is not None else self.zk_session_timeout_ms
        )
        self.zk_max_in_flight_requests: int = values["zookeeper.max.in.flight.requests"]
        selector = values["replica.selector.class"]
        if selector and selector not in REPLICA_SELECTORS:
            raise ConfigError(f"replica.selector.class={selector!r} is not supported: use one of "
                              f"{', '.join(sorted(REPLICA_SELECTORS))} or leave it unset")
        self.rack_aware_fetch: bool = selector == RACK_AWARE_SELECTOR
        rack = values["broker.rack"]
        self.rack: str | None = rack if rack else None
        dirs = values["log.dirs"] or values["log.dir"]
        self.log_dirs: list[Path] = [Path(d.strip()) for d in dirs.split(",") if d.strip()]
        self.num_partitions: int = values["num.partitions"]
        self.default_replication_factor: int = values["default.replication.factor"]
        self.auto_create_topics: bool = values["auto.create.topics.enable"]
        self.delete_topic_enable: bool = values["delete.topic.enable"]
        self.socket_request_max_bytes: int = values["socket.request.max.bytes"]
        self.sasl_server_max_receive_size: int = values["sasl.server.max.receive.size"]
        self.cluster_id: str | None = values["cluster.id"]
        self.fetch_max_bytes: int = values["fetch.max.bytes"]
        self.fetch_session_slots: int = values["max.incremental.fetch.session.cache.slots"]
        self.flush_scheduler_interval_ms: int = values["log.flush.scheduler.interval.ms"]
        self.retention_check_interval_ms: int = values["log.retention.check.interval.ms"]
        self.checkpoint_interval_ms: int = values["log.flush.offset.checkpoint.interval.ms"]
        self.producer_id_expiration_ms: int = values["producer.id.expiration.ms"]
        self.producer_id_expiration_check_interval_ms: int = values["producer.id.expiration.check.interval.ms"]
        # Replication (no effect in single-node mode). min.insync.replicas and unclean.leader.election.enable
        # here are the static broker defaults: a topic's effective value is its LogConfig's.
        self.min_insync_replicas: int = values["min.insync.replicas"]
        self.unclean_leader_election_enable: bool = values["unclean.leader.election.enable"]
        self.offsets_topic_replication_factor: int = values["offsets.topic.replication.factor"]
        self.transaction_state_log_replication_factor: int = values["transaction.state.log.replication.factor"]
        self.transaction_state_log_min_isr: int = values["transaction.state.log.min.isr"]
        self.replica_lag_time_max_ms: int = values["replica.lag.time.max.ms"]
        self.replica_fetch_max_bytes: int = values["replica.fetch.max.bytes"]
        self.replica_fetch_response_max_bytes: int = values["replica.fetch.response.max.bytes"]
        self.replica_fetch_wait_max_ms: int = values["replica.fetch.wait.max.ms"]
        self.replica_fetch_min_bytes: int = values["replica.fetch.min.bytes"]
        self.replica_fetch_backoff_ms: int = values["replica.fetch.backoff.ms"]
        self.replication_quota_window_num: int = values["replication.quota.window.num"]
        self.replication_quota_window_size_seconds: int = values["replication.quota.window.size.seconds"]
        self.num_replica_fetchers: int = values["num.replica.fetchers"]
        try:  # the connection limits' own checks (no host name resolved here: the server does that)
            ConnectionLimits.from_config(values, SYSTEM_CLOCK, resolve=lambda host: [])
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.quota_window_num: int = values["quota.window.num"]
        self.quota_window_size_seconds: int = values["quota.window.size.seconds"]
        self.controller_quota_window_num: int = values["controller.quota.window.num"]
        self.controller_quota_window_size_seconds: int = values["controller.quota.window.size.seconds"]
        self.high_watermark_checkpoint_interval_ms: int = values["replica.high.watermark.checkpoint.interval.ms"]
        self.replica_socket_timeout_ms: int = values["replica.socket.timeout.ms"]
        self.controlled_shutdown_enable: bool = values["controlled.shutdown.enable"]
        self.controlled_shutdown_max_retries: int = values["controlled.shutdown.max.retries"]
        self.controlled_shutdown_retry_backoff_ms: int = values["controlled.shutdown.retry.backoff.ms"]
        self.controller_socket_timeout_ms: int = values["controller.socket.timeout.ms"]
        self.auto_leader_rebalance_enable: bool = values["auto.leader.rebalance.enable"]
        self.leader_imbalance_per_broker_percentage: int = values["leader.imbalance.per.broker.percentage"]
        self.leader_imbalance_check_interval_seconds: int = values["leader.imbalance.check.interval.seconds"]
        for key, minimum in (("num.partitions", 1), ("default.replication.factor", 1),
                             ("socket.request.max.bytes", 1), ("log.flush.scheduler.interval.ms", 1),
                             ("group.initial.rebalance.delay.ms", 0), ("group.min.session.timeout.ms", 1),
                             ("group.max.size", 1), ("offsets.topic.num.partitions", 1),
                             ("leader.imbalance.per.broker.percentage", 0),
                             ("leader.imbalance.check.interval.seconds", 1),
                             ("leader.replication.throttled.rate", 1), ("follower.replication.throttled.rate", 1),
                             ("replication.quota.window.num", 2), ("replication.quota.window.size.seconds", 1),
                             ("quota.window.num", 2), ("quota.window.size.seconds", 1),
                             ("controller.quota.window.num", 2), ("controller.quota.window.size.seconds", 1),
                             ("max.connections", 0), ("max.connections.per.ip", 0),
                             ("max.connection.creation.rate", 0), ("sasl.server.max.receive.size", 1),
                             ("connections.max.reauth.ms", 0), ("connection.failed.authentication.delay.ms", 0),
                             ("offsets.topic.segment.bytes", 1024), ("offsets.retention.minutes", 1),
                             ("offsets.retention.check.interval.ms", 1), ("offset.metadata.max.bytes", 0),
                             ("producer.id.expiration.ms", 1), ("producer.id.expiration.check.interval.ms", 1),
                             ("transaction.state.log.num.partitions", 1),
                             ("transaction.state.log.segment.bytes", 1024), ("transaction.max.timeout.ms", 1),
                             ("transactional.id.expiration.ms", 1),
                             ("transaction.abort.timed.out.transaction.cleanup.interval.ms", 1),
                             ("transaction.remove.expired.transaction.cleanup.interval.ms", 1),
                             ("zookeeper.session.timeout.ms", 1), ("zookeeper.connection.timeout.ms", 1),
                             ("zookeeper.max.in.flight.requests", 1), ("min.insync.replicas", 1),
                             ("offsets.topic.replication.factor", 1), ("transaction.state.log.replication.factor", 1),
                             ("transaction.state.log.min.isr", 1), ("replica.lag.time.max.ms", 1),
                             ("replica.fetch.max.bytes", 0), ("replica.fetch.response.max.bytes", 0),
                             ("replica.fetch.wait.max.ms", 0), ("replica.fetch.min.bytes", 1),
                             ("replica.fetch.backoff.ms", 0), ("num.replica.fetchers", 1),
                             ("replica.high.watermark.checkpoint.interval.ms", 1), ("replica.socket.timeout.ms", 1),
                             ("controlled.shutdown.max.retries", 0), ("controlled.shutdown.retry.backoff.ms", 0),
                             ("controller.socket.timeout.ms", 1)):
            if values[key] is not None and values[key] < minimum:
                raise ConfigError(f"{key}={values[key]} is invalid: it must be >= {minimum}")
        if self.replica_fetch_wait_max_ms > self.replica_lag_time_max_ms:
            raise ConfigError(
                f"replica.fetch.wait.max.ms={self.replica_fetch_wait_max_ms} is larger than "
                f"replica.lag.time.max.ms={self.replica_lag_time_max_ms}: a follower waiting that long on an "
                "idle leader would keep falling out of the ISR; lower the first or raise the second"
            )
        if self.replica_fetch_wait_max_ms > self.replica_socket_timeout_ms:
            raise ConfigError(
                f"replica.fetch.wait.max.ms={self.replica_fetch_wait_max_ms} is larger than "
                f"replica.socket.timeout.ms={self.replica_socket_timeout_ms}: followers' fetches would time out "
                "while the leader waits for data; lower the first or raise the second"
            )
        if values["group.max.session.timeout.ms"] < values["group.min.session.timeout.ms"]:
            raise ConfigError(
                f"group.max.session.timeout.ms={values['group.max.session.timeout.ms']} is smaller than "
                f"group.min.session.timeout.ms={values['group.min.session.timeout.ms']}"
            )
        self.group_config = GroupConfig(
            min_session_timeout_ms=values["group.min.session.timeout.ms"],
            max_session_timeout_ms=values["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=values["group.initial.rebalance.delay.ms"],
            max_size=values["group.max.size"],
            offsets_retention_ms=values["offsets.retention.minutes"] * MINUTES,
            offsets_retention_check_interval_ms=values["offsets.retention.check.interval.ms"],
            offset_metadata_max_bytes=values["offset.metadata.max.bytes"],
            num_partitions=values["offsets.topic.num.partitions"],
        )
        self.offsets_segment_bytes: int = values["offsets.topic.segment.bytes"]
        self.txn_config = TxnConfig(
            max_timeout_ms=values["transaction.max.timeout.ms"],
            transactional_id_expiration_ms=values["transactional.id.expiration.ms"],
            abort_timed_out_interval_ms=values["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            remove_expired_interval_ms=values["transaction.remove.expired.transaction.cleanup.interval.ms"],
            num_partitions=values["transaction.state.log.num.partitions"],
        )
        self.txn_state_segment_bytes: int = values["transaction.state.log.segment.bytes"]
        self.txn_partition_verification: bool = values["transaction.partition.verification.enable"]
        self.log_config: LogConfig = default_log_config(values)
        try:
            self.cleaner_config = CleanerConfig(
                enable=values["log.cleaner.enable"], threads=values["log.cleaner.threads"],
                dedupe_buffer_size=values["log.cleaner.dedupe.buffer.size"],
                io_buffer_size=values["log.cleaner.io.buffer.size"],
                io_buffer_load_factor=values["log.cleaner.io.buffer.load.factor"],
                io_max_bytes_per_second=values["log.cleaner.io.max.bytes.per.second"],
                backoff_ms=values["log.cleaner.backoff.ms"])
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def listener_value(self, listener: str, key: str, mechanism: str | None = None) -> Any:
        """``key`` as the listener ``listener`` sees it: ``listener.name.<listener>.<mechanism>.<key>``, then
        ``listener.name.<listener>.<key>``, then the broker-wide value (Kafka's precedence)."""
        over = self.listener_overrides.get(listener, {})
        for candidate in ((f"{mechanism.lower()}.{key}",) if mechanism else ()) + (key,):
            if candidate in over:
                try:
                    return KEYS[key].parse(over[candidate])
                except ValueError as e:
                    raise ConfigError(f"listener.name.{listener.lower()}.{candidate}={over[candidate]!r} is "
                                      f"invalid: {e}") from None
        return self.values[key]

    @property
    def zk_mode(self) -> bool:
        """True when ``zookeeper.connect`` is set (a cluster member), False in single-node mode."""
        return self.zookeeper_connect is not None

    @property
    def advertised_host(self) -> str:
        """The host the first listener advertises (``advertised_listeners[0]``)."""
        return self.advertised_listeners[0].host

    @property
    def advertised_port(self) -> int:
        """The port the first listener advertises (set by ``bound`` once a port 0 is bound)."""
        return self.advertised_listeners[0].port

    def advertised_for(self, name: str) -> Listener:
        """This broker's advertised address on the listener named ``name`` (the first one for an unknown name)."""
        for a in self.advertised_listeners:
            if a.name == name:
                return a
        return self.advertised_listeners[0]

    def bound(self, name: str, port: int) -> None:
        """The listener ``name`` was bound to ``port``: an advertised port 0 (``listeners=...:0`` advertised as
        itself) becomes that port."""
        for i, a in enumerate(self.advertised_listeners):
            if a.name == name and a.port == 0:
                self.advertised_listeners[i] = Listener(a.name, a.host, port, a.security_protocol)

    @property
    def inter_broker_listener(self) -> Listener:
        """The advertised address of the listener other brokers replicate through."""
        return self.advertised_for(self.inter_broker_listener_name)

    def endpoints(self) -> tuple[Endpoint, ...]:
        """The advertised listeners as a broker registers them in ZooKeeper (``BrokerRegistration``)."""
        return tuple(Endpoint(a.name, a.host, a.port, a.security_protocol) for a in self.advertised_listeners)

    @classmethod
    def from_properties(cls, props: Mapping[str, str], origins: Mapping[str, str] | None = None) -> BrokerConfig:
        """The config of ``props`` (Kafka's defaults for the rest); ``ConfigError`` for an unknown key or a bad value.

        ``origins`` names where a key came from (e.g. ``environment variable ODRADEK_CFG_NUM_PARTITIONS``), for
        the error messages. The keys present that Odradek accepts but ignores are in ``ignored_keys``.
        """
        values: dict[str, Any] = {k.name: k.default for k in KEYS.values()}
        ignored: list[str] = []
        for raw_key, raw in props.items():
            key = raw_key.strip()
            where = f" (set by {origins[raw_key]})" if origins and raw_key in origins else ""
            if key.startswith(LISTENER_PREFIX):
                try:
                    values[key] = _listener_override(key, str(raw).strip())
                except ConfigError as e:
                    raise ConfigError(f"{e}{where}") from None
                continue
            spec = KEYS.get(key)
            if spec is None:
                raise ConfigError(unknown_key_message(key) + where)
            try:
                values[key] = spec.parse(str(raw).strip())
            except ValueError as e:
                raise ConfigError(f"{key}={raw!r} is invalid: {e}{where}") from None
            if spec.ignored:
                ignored.append(key)
        config = cls(values)
        config.ignored_keys = tuple(sorted(ignored))
        return config

    def broker_config_entries(self) -> dict[str, tuple[str | None, bool]]:
        """Every broker key with (value as string, is_default) for DescribeConfigs."""
        out: dict[str, tuple[str | None, bool]] = {}
        for key, spec in KEYS.items():
            value = self.values[key]
            out[key] = (None if value is None else _to_str(value), value == spec.default)
        return out


# Broker keys that may be changed at runtime (IncrementalAlterConfigs/AlterConfigs on a BROKER resource):
# the ones that set topic defaults, as in Kafka's DynamicLogConfig, and the replication throttle rates.
DYNAMIC_KEYS: frozenset[str] = frozenset(
    {*TOPIC_TO_BROKER_KEY.values(), "log.retention.minutes", "log.retention.hours", "log.roll.hours",
     "leader.replication.throttled.rate", "follower.replication.throttled.rate"}
)


def check_dynamic_key(key: str) -> None:
    """Raise ``ReadOnlyConfigError`` unless ``key`` may be changed at runtime."""
    if key not in DYNAMIC_KEYS:
        what = "an unknown broker config" if key not in KEYS else "read-only (not supported as a dynamic config)"
        raise ReadOnlyConfigError(
            f"Cannot update these configs dynamically: {key} is {what}; set it in server.properties "
            f"and restart the broker (dynamic keys: {', '.join(sorted(DYNAMIC_KEYS))})"
        )


def merge_dynamic(static: Mapping[str, Any], *layers: Mapping[str, str]) -> dict[str, Any]:
    """``static`` values with the dynamic ``layers`` (string values, lowest precedence first) on top.

    Raises ``ReadOnlyConfigError`` for a key that is not in ``DYNAMIC_KEYS``, ``InvalidConfigError``
    for a value that does not parse; the caller validates the resulting topic defaults with ``default_log_config``.
    """
    out = dict(static)
    for layer in layers:
        for key, raw in layer.items():
            check_dynamic_key(key)
            try:
                out[key] = KEYS[key].parse(str(raw).strip())
            except ValueError as e:
                raise InvalidConfigError(f"{key}={raw!r} is invalid: {e}") from None
    return out


def _to_str(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def default_log_config(values: Mapping[str, Any]) -> LogConfig:
    """The topic defaults implied by broker keys (Kafka's precedence: ms > minutes > hours)."""
    if values["log.retention.ms"] is not None:
        retention_ms = values["log.retention.ms"]
    elif values["log.retention.minutes"] is not None:
        retention_ms = values["log.retention.minutes"] * MINUTES
    else:
        retention_ms = values["log.retention.hours"] * HOURS
    segment_ms = values["log.roll.ms"] if values["log.roll.ms"] is not None else values["log.roll.hours"] * HOURS
    props: dict[str, Any] = {"retention.ms": retention_ms, "segment.ms": segment_ms}
    for topic_key, broker_key in TOPIC_TO_BROKER_KEY.items():
        if topic_key in props or broker_key not in values:
            continue
        if values[broker_key] is not None:
            props[topic_key] = values[broker_key]
    try:
        return LogConfig().with_overrides(props)
    except InvalidConfigError as e:
        raise ConfigError(f"invalid log default: {e}") from None


def unknown_key_message(key: str) -> str:
    """What to say about an unknown broker key: its name, the closest known key if one is close, where the keys
    are listed."""
    close = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.8)
    suggestion = f"did you mean {close[0]!r}? " if close else "check its spelling; "
    return f"unknown config key {key!r}: {suggestion}`odradek serve --help-config` lists the keys Odradek knows"


def ignored_key_warning(key: str) -> str:
    """The warning for a key Odradek accepts (so Kafka's ``server.properties`` work) but does not implement."""
    return (f"config key {key!r} is accepted for compatibility with Kafka but has no effect in Odradek "
            f"({KEYS[key].doc})")
