"""Kafka's ZooKeeper layout: the znode paths of a ZooKeeper-mode cluster and their JSON encodings.

Pure: no I/O, no clock (timestamps are passed in as ``now_ms``). The formats are those Kafka 3.x writes
(``kafka.zk.ZkData``), so a Kafka tool pointed at Odradek's ZooKeeper reads what it expects, and Odradek
reads what Kafka wrote:

- compact JSON, UTF-8, no spaces; the keys in the order Kafka 3.x brokers write them (Kafka builds these
  maps as Scala hash maps, so the order is fixed but not alphabetical), partitions in ascending order;
- numbers that Kafka writes as strings stay strings (``timestamp``, ``block_start``, ``block_end``, the
  ``version`` of ``/cluster/id``);
- topic ids as Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes without padding (22 characters).

Odradek adds two fields to a broker's registration: ``"odradek.shutting_down"`` (its controlled-shutdown
request) and, only while it has any, ``"odradek.offline_replicas"`` (``{"topic": [partitions]}`` whose log
directory failed there; Kafka tells its controller through ``/log_dir_event_notification`` and
LeaderAndIsr responses instead); Kafka's readers ignore unknown fields. Decoders accept older versions
Kafka still reads: broker registrations 1..5, topics without ``topic_id`` (versions 1 and 2; the id decodes as Kafka's
zero Uuid, ``ZERO_TOPIC_ID``, meaning "none yet"), controller registration version 1.

Every decoder raises ``ZkDataError`` naming the znode and what is wrong with it; none returns partial data.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from odradek.cluster.model import UNKNOWN_VERSION, BrokerRegistration, Endpoint, LeaderAndIsr, TopicAssignment

# -- errors --------------------------------------------------------------------------------------------------


class ZkError(Exception):
    """Base of the errors of Odradek's ZooKeeper store (layout and client)."""


class ZkDataError(ZkError):
    """A znode's data is not what Kafka's format says it should be."""

    def __init__(self, path: str, problem: str, data: bytes | None = None) -> None:
        shown = "" if data is None else f" (data: {data[:200]!r})"
        super().__init__(f"znode {path}: {problem}{shown}")
        self.path = path
        self.problem = problem


# -- paths ---------------------------------------------------------------------------------------------------

ADMIN_PATH = "/admin"
BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_SEQID_PATH = "/brokers/seqid"
TOPICS_PATH = "/brokers/topics"
CLUSTER_PATH = "/cluster"
CLUSTER_ID_PATH = "/cluster/id"
CONFIG_PATH = "/config"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
CONSUMERS_PATH = "/consumers"  # the old consumers' path; Kafka still creates it
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
DELETE_TOPICS_PATH = "/admin/delete_topics"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"

# Kafka's ConfigType.ALL in ZooKeeper mode; "<default>" names the cluster-wide default entity.
CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers", "ips")
DEFAULT_ENTITY = "<default>"

# The persistent paths a Kafka broker creates at startup (ZkData.PersistentZkPaths), in Kafka's order.
PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS_PATH,
    BROKER_IDS_PATH,
    TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH,
    BROKER_SEQID_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    PRODUCER_ID_BLOCK_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    *(f"{CONFIG_PATH}/{entity_type}" for entity_type in CONFIG_ENTITY_TYPES),
)

# Kafka's Uuid.ZERO_UUID: a topic written without an id (by Kafka before 2.8) decodes with this one.
ZERO_TOPIC_ID = uuid.UUID(int=0)

BROKER_REGISTRATION_VERSION = 5
TOPIC_VERSION = 3
CONTROLLER_VERSION = 2
SHUTTING_DOWN_KEY = "odradek.shutting_down"
OFFLINE_REPLICAS_KEY = "odradek.offline_replicas"
# Listener names that are also security protocol names need no entry in listener_security_protocol_map.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


def config_entity_type_path(entity_type: str) -> str:
    _check_entity_type(entity_type)
    return f"{CONFIG_PATH}/{entity_type}"


def config_path(entity_type: str, name: str) -> str:
    """``/config/<type>/<name>``; ``name`` is ``<default>`` for the default entity of the type."""
    _check_entity_type(entity_type)
    if not name or "/" in name:
        raise ValueError(f"invalid config entity name {name!r}: it must be non-empty and contain no '/'")
    return f"{CONFIG_PATH}/{entity_type}/{name}"


def config_entity_path(entity_type: str, name: str) -> str:
    """The ``entity_path`` of a change notification: ``topics/orders``, ``brokers/<default>``."""
    _check_entity_type(entity_type)
    return f"{entity_type}/{name}"


def _check_entity_type(entity_type: str) -> None:
    if entity_type not in CONFIG_ENTITY_TYPES:
        expected = ", ".join(CONFIG_ENTITY_TYPES)
        raise ValueError(f"unknown config entity type {entity_type!r}: expected one of {expected}")


# Client quota entities (KIP-546) live under /config/users, /config/clients and /config/ips, a (user, client-id)
# under /config/users/<user>/clients/<client-id>; names are sanitized as Kafka's ``Sanitizer`` does (URL
# encoding), the default entity is ``<default>``.
_QUOTA_TYPE_DIRS = {"user": "users", "client-id": "clients", "ip": "ips"}
_QUOTA_DIR_TYPES = {d: t for t, d in _QUOTA_TYPE_DIRS.items()}


def sanitize(name: str | None) -> str:
    return DEFAULT_ENTITY if name is None else urllib.parse.quote(name, safe="")


def desanitize(part: str) -> str | None:
    return None if part == DEFAULT_ENTITY else urllib.parse.unquote(part)


# A user's znode /config/users/<user> holds both its client quota configs and its SCRAM credentials (Kafka's
# layout: the credential of a mechanism is the value of the key named after it, e.g. "SCRAM-SHA-256"). The two
# sides share the znode and never read or write each other's keys (Kafka's ``ScramMechanism.isScram``).
SCRAM_CONFIG_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def is_credential_key(key: str) -> bool:
    """Whether a user config key holds a SCRAM credential rather than a quota."""
    return key in SCRAM_CONFIG_KEYS


def split_credentials(configs: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """A user's configs as (everything else, i.e. quotas; its SCRAM credentials by mechanism)."""
    others = {k: v for k, v in configs.items() if not is_credential_key(k)}
    credentials = {k: v for k, v in configs.items() if is_credential_key(k)}
    return others, credentials


def user_entity_path(user: str) -> str:
    """The entity path of a named user: ``users/<sanitized user>``."""
    if not user:
        raise ValueError("a user entity needs a non-empty name")
    return f"users/{sanitize(user)}"


def quota_entity_path(entity: tuple[tuple[str, str | None], ...]) -> str:
    """The entity path of a client quota entity: ``clients/app``, ``users/alice/clients/<default>``."""
    return "/".join(f"{_QUOTA_TYPE_DIRS[t]}/{sanitize(n)}" for t, n in entity)


def quota_entity_from_path(entity_path: str) -> tuple[tuple[str, str | None], ...] | None:
    """The entity of a quota entity path, None if it is not one (``topics/orders``)."""
    parts = entity_path.split("/")
    if len(parts) not in (2, 4) or any(not p for p in parts):
        return None
    out = []
    for i in range(0, len(parts), 2):
        t = _QUOTA_DIR_TYPES.get(parts[i])
        if t is None:
            return None
        out.append((t, desanitize(parts[i + 1])))
    return tuple(out)


def config_change_sequence(node_name: str) -> int:
    """The sequence number of a ``config_change_0000000042`` node (42)."""
    path = f"{CONFIG_CHANGES_PATH}/{node_name}"
    if not node_name.startswith(CONFIG_CHANGE_PREFIX):
        raise ZkDataError(path, f"a config change notification's name must start with {CONFIG_CHANGE_PREFIX!r}")
    digits = node_name[len(CONFIG_CHANGE_PREFIX) :]
    if not digits.isdigit():
        raise ZkDataError(path, "a config change notification's name must end with its sequence number")
    return int(digits)


# -- JSON helpers --------------------------------------------------------------------------------------------


def _dump(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _parse(path: str, data: bytes | None) -> dict[str, Any]:
    if not data:
        raise ZkDataError(path, "no data, expected a JSON object")
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZkDataError(path, f"not valid JSON ({exc})", data) from None
    if not isinstance(obj, dict):
        raise ZkDataError(path, f"expected a JSON object, got {type(obj).__name__}", data)
    return obj


def _int(path: str, obj: Mapping[str, Any], key: str, data: bytes) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ZkDataError(path, f"field {key!r} must be an integer, got {value!r}", data)
    return value


def _str(path: str, obj: Mapping[str, Any], key: str, data: bytes) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise ZkDataError(path, f"field {key!r} must be a string, got {value!r}", data)
    return value


def _int_list(path: str, value: Any, what: str, data: bytes) -> tuple[int, ...]:
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise ZkDataError(path, f"{what} must be a list of integers, got {value!r}", data)
    return tuple(value)


def _numeric_string(path: str, obj: Mapping[str, Any], key: str, data: bytes) -> int:
    text = _str(path, obj, key, data)
    try:
        return int(text)
    except ValueError:
        raise ZkDataError(path, f"field {key!r} must be a decimal number in a string, got {text!r}", data) from None


# -- /cluster/id ---------------------------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    obj = _parse(CLUSTER_ID_PATH, data)
    assert data is not None
    cluster_id = _str(CLUSTER_ID_PATH, obj, "id", data)
    if not cluster_id:
        raise ZkDataError(CLUSTER_ID_PATH, "the cluster id is empty", data)
    return cluster_id


# -- /brokers/ids/<id> ---------------------------------------------------------------------------------------


def format_endpoint(endpoint: Endpoint) -> str:
    """``LISTENER://host:port``, with IPv6 hosts in brackets (Kafka's ``EndPoint.connectionString``)."""
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    return f"{endpoint.listener}://{host}:{endpoint.port}"


_ENDPOINT = re.compile(
    r"^(?P<listener>[^:/]+)://(?:\[(?P<v6>[0-9a-zA-Z\-%._:]*)\]|(?P<host>[0-9a-zA-Z\-%._]*)):(?P<port>-?\d+)$"
)


def parse_endpoint(path: str, text: str, protocols: Mapping[str, str], data: bytes) -> Endpoint:
    match = _ENDPOINT.match(text)
    if match is None:
        raise ZkDataError(path, f"endpoint {text!r} is not LISTENER://host:port", data)
    listener = match["listener"]
    host = match["v6"] if match["v6"] is not None else match["host"]
    protocol = protocols.get(listener)
    if protocol is None:
        if listener not in SECURITY_PROTOCOLS:
            raise ZkDataError(path, f"listener {listener!r} has no entry in listener_security_protocol_map", data)
        protocol = listener
    return Endpoint(listener, host, int(match["port"]), protocol)


def encode_broker(reg: BrokerRegistration, now_ms: int, *, jmx_port: int = -1) -> bytes:
    """A version 5 broker registration, as Kafka 3.x writes it, plus ``odradek.shutting_down``.

    The top-level ``host``/``port`` are the first PLAINTEXT endpoint's (null/-1 without one), for old clients.
    """
    if not reg.endpoints:
        raise ValueError(f"broker {reg.broker_id} has no endpoints to register")
    plaintext = next((e for e in reg.endpoints if e.security_protocol == "PLAINTEXT"), None)
    obj: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in reg.endpoints},
        "endpoints": [format_endpoint(e) for e in reg.endpoints],
        "jmx_port": jmx_port,
        "port": plaintext.port if plaintext is not None else -1,
        "host": plaintext.host if plaintext is not None else None,
        "version": BROKER_REGISTRATION_VERSION,
        "timestamp": str(now_ms),
    }
    if reg.rack is not None:
        obj["rack"] = reg.rack
    obj[SHUTTING_DOWN_KEY] = reg.shutting_down
    if reg.offline_replicas:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(reg.offline_replicas):
            by_topic.setdefault(topic, []).append(partition)
        obj[OFFLINE_REPLICAS_KEY] = by_topic
    return _dump(obj)


def decode_broker(broker_id: int, data: bytes | None, *, epoch: int = -1) -> BrokerRegistration:
    """A broker registration of any version Kafka reads (1..5); ``epoch`` is the znode's czxid."""
    path = broker_path(broker_id)
    obj = _parse(path, data)
    assert data is not None
    version = _int(path, obj, "version", data)
    if version < 1:
        raise ZkDataError(path, f"unsupported broker registration version {version}", data)
    if version == 1:
        host = _str(path, obj, "host", data)
        endpoints: tuple[Endpoint, ...] = (Endpoint("PLAINTEXT", host, _int(path, obj, "port", data), "PLAINTEXT"),)
    else:
        protocols_raw = obj.get("listener_security_protocol_map", {})
        if not isinstance(protocols_raw, dict) or not all(isinstance(v, str) for v in protocols_raw.values()):
            raise ZkDataError(path, "listener_security_protocol_map must map listener names to protocol names", data)
        raw = obj.get("endpoints")
        if not isinstance(raw, list) or not raw or not all(isinstance(e, str) for e in raw):
            raise ZkDataError(path, "field 'endpoints' must be a non-empty list of strings", data)
        endpoints = tuple(parse_endpoint(path, e, protocols_raw, data) for e in raw)
    rack = obj.get("rack")
    if rack is not None and not isinstance(rack, str):
        raise ZkDataError(path, f"field 'rack' must be a string or null, got {rack!r}", data)
    shutting_down = obj.get(SHUTTING_DOWN_KEY, False)
    if not isinstance(shutting_down, bool):
        raise ZkDataError(path, f"field {SHUTTING_DOWN_KEY!r} must be true or false, got {shutting_down!r}", data)
    offline = obj.get(OFFLINE_REPLICAS_KEY, {})
    if not isinstance(offline, dict):
        raise ZkDataError(path, f"field {OFFLINE_REPLICAS_KEY!r} must map topic names to partition lists", data)
    offline_replicas = frozenset((str(topic), p) for topic, ps in offline.items()
                                 for p in _int_list(path, ps, f"{OFFLINE_REPLICAS_KEY}.{topic}", data))
    return BrokerRegistration(broker_id, endpoints, rack, epoch, shutting_down, offline_replicas)


# -- /controller and /controller_epoch -----------------------------------------------------------------------


def encode_controller(broker_id: int, now_ms: int) -> bytes:
    return _dump(
        {"version": CONTROLLER_VERSION, "brokerid": broker_id, "timestamp": str(now_ms), "kraftControllerEpoch": -1}
    )


def decode_controller(data: bytes | None) -> int:
    """The controller's broker id (version 1 and 2 registrations)."""
    obj = _parse(CONTROLLER_PATH, data)
    assert data is not None
    return _int(CONTROLLER_PATH, obj, "brokerid", data)


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes | None) -> int:
    text = (data or b"").decode("ascii", "replace").strip()
    if not text.lstrip("-").isdigit():
        raise ZkDataError(CONTROLLER_EPOCH_PATH, "expected a decimal controller epoch", data)
    return int(text)


# -- /brokers/topics/<t> -------------------------------------------------------------------------------------


def topic_id_to_string(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def topic_id_from_string(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``; ValueError if ``text`` is not 22 base64url characters of 16 bytes."""
    if len(text) != 22:
        raise ValueError(f"a topic id is 22 base64url characters, got {len(text)}: {text!r}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        raise ValueError(f"topic id {text!r} is not base64url") from None
    if len(raw) != 16:
        raise ValueError(f"topic id {text!r} does not decode to 16 bytes")
    return uuid.UUID(bytes=raw)


def encode_topic(t: TopicAssignment) -> bytes:
    """A version 3 topic assignment with ``topic_id`` and the partitions being reassigned."""
    partitions = {str(p): list(t.replicas[p]) for p in sorted(t.replicas)}
    return _dump(
        {
            "removing_replicas": {str(p): list(r) for p, r in sorted(t.removing.items()) if r},
            "partitions": partitions,
            "topic_id": topic_id_to_string(t.topic_id),
            "adding_replicas": {str(p): list(r) for p, r in sorted(t.adding.items()) if r},
            "version": TOPIC_VERSION,
        }
    )


def decode_topic(name: str, data: bytes | None, zk_version: int = UNKNOWN_VERSION) -> TopicAssignment:
    """Any version (1..3); without ``topic_id`` the id is ``ZERO_TOPIC_ID``. ``partitions`` lists each
    partition's full replica set; ``adding_replicas``/``removing_replicas`` (a reassignment in progress) must be
    subsets of it."""
    path = topic_path(name)
    obj = _parse(path, data)
    assert data is not None
    raw_id = obj.get("topic_id")
    if raw_id is None:
        topic_id = ZERO_TOPIC_ID
    elif isinstance(raw_id, str):
        try:
            topic_id = topic_id_from_string(raw_id)
        except ValueError as exc:
            raise ZkDataError(path, str(exc), data) from None
    else:
        raise ZkDataError(path, f"field 'topic_id' must be a string, got {raw_id!r}", data)
    raw_partitions = obj.get("partitions", {})
    if not isinstance(raw_partitions, dict):
        raise ZkDataError(path, "field 'partitions' must map partition numbers to replica lists", data)
    replicas: dict[int, tuple[int, ...]] = {}
    for key, value in raw_partitions.items():
        if not key.isdigit():
            raise ZkDataError(path, f"partition {key!r} is not a non-negative number", data)
        replicas[int(key)] = _int_list(path, value, f"the replicas of partition {key}", data)
    moving: list[dict[int, tuple[int, ...]]] = []
    for key in ("adding_replicas", "removing_replicas"):
        extra = obj.get(key, {})
        if not isinstance(extra, dict):
            raise ZkDataError(path, f"field {key!r} must map partition numbers to replica lists", data)
        lists: dict[int, tuple[int, ...]] = {}
        for partition, value in extra.items():
            ids = _int_list(path, value, f"{key} of partition {partition}", data)
            if not partition.isdigit() or int(partition) not in replicas:
                raise ZkDataError(path, f"{key} names partition {partition!r}, which the topic does not have", data)
            if any(r not in replicas[int(partition)] for r in ids):
                raise ZkDataError(path, f"{key} of partition {partition} are not all among its replicas", data)
            if ids:
                lists[int(partition)] = ids
        moving.append(lists)
    return TopicAssignment(name, topic_id, dict(sorted(replicas.items())), zk_version, moving[0], moving[1])


# -- /brokers/topics/<t>/partitions/<p>/state ----------------------------------------------------------------


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    return _dump(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    )


def decode_partition_state(
    topic: str, partition: int, data: bytes | None, zk_version: int = UNKNOWN_VERSION
) -> LeaderAndIsr:
    """``leader_recovery_state`` (written by Kafka after an unclean election) is accepted and not kept."""
    path = partition_state_path(topic, partition)
    obj = _parse(path, data)
    assert data is not None
    isr = _int_list(path, obj.get("isr"), "field 'isr'", data)
    if len(set(isr)) != len(isr):
        raise ZkDataError(path, f"the ISR {list(isr)} has duplicates", data)
    if "leader_recovery_state" in obj:
        _int(path, obj, "leader_recovery_state", data)
    return LeaderAndIsr(
        leader=_int(path, obj, "leader", data),
        leader_epoch=_int(path, obj, "leader_epoch", data),
        isr=isr,
        controller_epoch=_int(path, obj, "controller_epoch", data),
        zk_version=zk_version,
    )


# -- /config -------------------------------------------------------------------------------------------------


def encode_config(configs: Mapping[str, str]) -> bytes:
    for key, value in configs.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"config {key!r}={value!r}: keys and values must be strings")
    return _dump({"version": 1, "config": dict(configs)})


def decode_config(entity_type: str, name: str, data: bytes | None) -> dict[str, str]:
    """The overrides stored for an entity; no data means none (Kafka reads a null znode as empty)."""
    if not data:
        return {}
    path = config_path(entity_type, name)
    obj = _parse(path, data)
    config = obj.get("config", {})
    if not isinstance(config, dict):
        raise ZkDataError(path, "field 'config' must be a JSON object", data)
    bad = [k for k, v in config.items() if not isinstance(v, str)]
    if bad:
        raise ZkDataError(path, f"config values must be strings; not so for {', '.join(bad)}", data)
    return dict(config)


def encode_config_change(entity_path: str) -> bytes:
    """A version 2 change notification: ``entity_path`` is ``<type>/<name>``, e.g. ``topics/orders``."""
    return _dump({"version": 2, "entity_path": entity_path})


def decode_config_change(node_name: str, data: bytes | None) -> str:
    """The changed entity's path (``topics/orders``), from a version 1 or 2 notification."""
    path = f"{CONFIG_CHANGES_PATH}/{node_name}"
    obj = _parse(path, data)
    assert data is not None
    version = _int(path, obj, "version", data)
    if version == 1:
        return f"{_str(path, obj, 'entity_type', data)}/{_str(path, obj, 'entity_name', data)}"
    if version == 2:
        entity_path = _str(path, obj, "entity_path", data)
        if "/" not in entity_path:
            raise ZkDataError(path, f"entity_path {entity_path!r} is not <type>/<name>", data)
        return entity_path
    raise ZkDataError(path, f"unsupported config change notification version {version}", data)


# -- /latest_producer_id_block -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Producer ids ``[start, end)`` handed to ``broker_id``; stored with Kafka's inclusive ``block_end``."""

    broker_id: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    if block.start < 0 or block.end <= block.start:
        raise ValueError(f"invalid producer id block [{block.start}, {block.end})")
    return _dump(
        {
            "version": 1,
            "broker": block.broker_id,
            "block_start": str(block.start),
            "block_end": str(block.end - 1),
        }
    )


def decode_producer_id_block(data: bytes | None) -> ProducerIdBlock | None:
    """The last block handed out, or None if none was (Kafka creates the znode with no data)."""
    if not data:
        return None
    path = PRODUCER_ID_BLOCK_PATH
    obj = _parse(path, data)
    start = _numeric_string(path, obj, "block_start", data)
    last = _numeric_string(path, obj, "block_end", data)
    if start < 0 or last < start:
        raise ZkDataError(path, f"block_start {start} and block_end {last} do not form a block", data)
    return ProducerIdBlock(_int(path, obj, "broker", data), start, last + 1)
