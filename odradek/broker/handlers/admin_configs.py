"""DescribeConfigs (v1-4), AlterConfigs (v0-2) and IncrementalAlterConfigs (v0-1).

Resources are identified by ``(resource_type, resource_name)``: ``TOPIC`` (2) by topic name,
``BROKER`` (4) by this broker's node id as a decimal string (``""`` names the cluster-wide dynamic
defaults, Kafka's ``--entity-default``). ``BROKER_LOGGER`` (8) and every other type are answered with
``INVALID_REQUEST``.

What a topic's configs are:
- the topic keys ``LogConfig`` knows (``TOPIC_KEYS``), each with its effective value
  (``Broker.topic_log_config``): the topic's override if it has one (in a cluster as ZooKeeper holds it
  now, as Kafka reads it: a describe right after an alter sees it on every broker), else the dynamic per-broker
  config, else the dynamic cluster default, else ``server.properties``, else ``LogConfig``'s own;
- ``config_source`` is ``DYNAMIC_TOPIC_CONFIG`` for an override, ``DYNAMIC_BROKER_CONFIG`` /
  ``DYNAMIC_DEFAULT_BROKER_CONFIG`` for a dynamic broker value, ``STATIC_BROKER_CONFIG`` when
  ``server.properties`` changed the default, ``DEFAULT_CONFIG`` otherwise. With synonyms the
  topic override comes first, then the broker keys that set the default (``log.retention.ms``,
  ``log.retention.minutes``, ``log.retention.hours`` for ``retention.ms``) level by level: dynamic
  per-broker, dynamic default, ``server.properties``, built-in default, as Kafka lists them;
- topic configs are never read-only; nothing here is sensitive.

Broker configs are the ``server.properties`` keys. Those that set topic defaults (``DYNAMIC_KEYS``:
``log.segment.bytes``, ``log.retention.ms`` ...) are dynamic, as in Kafka: AlterConfigs and
IncrementalAlterConfigs change them for this broker (resource name = its node id) or as the
cluster-wide default (``""``), and ``Broker.alter_broker_configs`` persists them and re-applies every
log's effective config. The other keys are read-only: changing one fails with ``INVALID_REQUEST``
saying it must be set in ``server.properties``. Describing broker ``""`` lists the dynamic cluster
defaults only, as Kafka does.

Invariants:
- AlterConfigs (legacy) replaces the whole set of a topic's overrides with the given ones;
  IncrementalAlterConfigs applies SET/DELETE/APPEND/SUBTRACT on top of the current overrides.
  The same holds for a broker resource's dynamic configs (``Broker.alter_broker_configs``).
  Either way the resulting set is validated as a whole by ``Broker.alter_topic_configs`` (which
  raises ``InvalidConfigError`` carrying ``LogConfig``'s message) before anything changes, and
  ``validate_only`` changes nothing.
- Every client mistake is an error code (and message) on its resource; no exception escapes for one.
- A resource named twice in one alter request is answered once, with ``INVALID_REQUEST``.

Authorization, as Kafka's: describing a topic's configs needs DESCRIBE_CONFIGS on the topic
(TOPIC_AUTHORIZATION_FAILED), a broker's (or its loggers') DESCRIBE_CONFIGS on the cluster
(CLUSTER_AUTHORIZATION_FAILED); altering needs ALTER_CONFIGS likewise. The check is per resource, before the
resource is looked at.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import fields
from typing import Any

from odradek.broker.authorization import config_resource_error
from odradek.broker.broker import Broker
from odradek.broker.config import DYNAMIC_KEYS, check_dynamic_key
from odradek.broker.config import KEYS as BROKER_KEYS
from odradek.broker.context import RequestContext
from odradek.cluster.metadata import validate_topic_name
from odradek.protocol.errors import ErrorCode, InvalidConfigError, KafkaError
from odradek.security.acl import AclOperation
from odradek.storage.config import TOPIC_KEYS, TOPIC_TO_BROKER_KEY, LogConfig

# Resource types (Kafka's ConfigResource.Type).
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8

# Config sources (DescribeConfigsResponse.ConfigSource).
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Config types (DescribeConfigsResponse.ConfigType, v3+).
BOOLEAN = 1
STRING = 2
INT = 3
LONG = 5
DOUBLE = 6
LIST = 7

# IncrementalAlterConfigs operations (AlterConfigOp.OpType).
SET = 0
DELETE = 1
APPEND = 2
SUBTRACT = 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

# Topic keys whose Kafka type is INT or LIST; every other integer key is a LONG in Kafka.
_INT_TOPIC_KEYS = frozenset({"segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes",
                             "min.insync.replicas"})
_BOOLEAN_TOPIC_KEYS = frozenset({"unclean.leader.election.enable"})
LIST_TOPIC_KEYS = frozenset({"cleanup.policy"})
LIST_BROKER_KEYS = frozenset({"log.cleanup.policy"})

# Broker keys that set a topic key's default, most specific first (Kafka's synonym order).
_BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
}

_TOPIC_DOCS: dict[str, str] = {
    "segment.bytes": "Size of one segment file of the log; a new segment is rolled when it would be exceeded.",
    "segment.ms": "Time after which a segment is rolled even if it is not full, so retention can delete it.",
    "segment.index.bytes": "Size of the offset and time indexes of one segment.",
    "index.interval.bytes": "How many bytes of records lie between two entries of the offset index.",
    "flush.messages": "Number of messages after which the log is fsynced.",
    "flush.ms": "Time after which unflushed data of the log is fsynced.",
    "retention.ms": "How long records are kept before their segment may be deleted; -1 keeps them forever.",
    "retention.bytes": "Largest size a partition's log may grow to before old segments are deleted; -1: no limit.",
    "max.message.bytes": "Largest record batch the topic accepts.",
    "message.timestamp.type": "CreateTime keeps the producer's timestamps; LogAppendTime sets the broker's.",
    "message.timestamp.before.max.ms": "How far a batch's timestamp may lie before the broker's clock.",
    "message.timestamp.after.max.ms": "How far a batch's timestamp may lie after the broker's clock.",
    "file.delete.delay.ms": "Time a deleted segment's files are kept before they are removed from disk.",
    "cleanup.policy": "What happens to old segments: delete (retention), compact (the latest record of every key "
                      "is kept), or both.",
    "min.cleanable.dirty.ratio": "Share of a compacted log that must be dirty (not yet cleaned) before the cleaner "
                                 "cleans it.",
    "min.compaction.lag.ms": "Records younger than this are never compacted.",
    "max.compaction.lag.ms": "A record is compacted at the latest this long after it was written, however clean "
                             "the log.",
    "delete.retention.ms": "How long a tombstone (and a transaction marker) is kept after the cleaning that made it "
                           "removable, so that consumers still see it.",
    "min.insync.replicas": "Smallest number of in-sync replicas for an acks=all write to be accepted.",
    "unclean.leader.election.enable": "Whether a replica outside the ISR may become leader when no ISR member is "
                                      "alive, at the price of losing committed records.",
}

_BUILTIN_DEFAULTS = LogConfig().to_properties()


# -- describing ---------------------------------------------------------------------------------------


_INTEGER_TOPIC_KEYS = frozenset(f.name.replace("_", ".") for f in fields(LogConfig) if isinstance(f.default, int))
_FLOAT_TOPIC_KEYS = frozenset(f.name.replace("_", ".") for f in fields(LogConfig) if isinstance(f.default, float))


def _topic_config_type(name: str) -> int:
    if name in LIST_TOPIC_KEYS:
        return LIST
    if name in _BOOLEAN_TOPIC_KEYS:
        return BOOLEAN
    if name in _INT_TOPIC_KEYS:
        return INT
    if name in _FLOAT_TOPIC_KEYS:
        return DOUBLE
    return LONG if name in _INTEGER_TOPIC_KEYS else STRING


def _broker_config_type(name: str) -> int:
    spec = BROKER_KEYS[name]
    if isinstance(spec.default, bool):
        return BOOLEAN
    if spec.parse is int:
        return LONG if name.endswith(".ms") or name in ("log.retention.bytes", "log.flush.interval.messages") else INT
    return STRING


def _default_str(value: Any) -> str | None:
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def broker_synonyms_of(topic_key: str) -> tuple[str, ...]:
    """The broker keys whose values set ``topic_key``'s default, most specific first."""
    if topic_key in _BROKER_SYNONYMS:
        return _BROKER_SYNONYMS[topic_key]
    broker_key = TOPIC_TO_BROKER_KEY.get(topic_key)
    return (broker_key,) if broker_key is not None else ()


def _synonym(name: str, value: str | None, source: int) -> dict[str, Any]:
    return {"name": name, "value": value, "source": source}


def _broker_key_synonyms(broker: Broker, keys: Iterable[str], *, per_broker: bool = True) -> list[dict[str, Any]]:
    """The values of broker ``keys`` level by level, in Kafka's order (ConfigHelper.configSynonyms).

    Dynamic per-broker (left out when ``per_broker`` is false: describing the cluster default),
    dynamic cluster default, ``server.properties`` (when it differs from the default), built-in default.
    """
    keys = [k for k in keys if k in BROKER_KEYS]
    static = broker.config.broker_config_entries()
    levels: list[tuple[dict[str, str], int]] = []
    if per_broker:
        levels.append((broker.dynamic_broker_configs(broker.broker_entity), DYNAMIC_BROKER_CONFIG))
    levels.append((broker.dynamic_broker_configs(""), DYNAMIC_DEFAULT_BROKER_CONFIG))
    out = [_synonym(k, level[k], source) for level, source in levels for k in keys if k in level]
    for k in keys:
        value, is_default = static.get(k, (None, True))
        if not is_default and value is not None:
            out.append(_synonym(k, value, STATIC_BROKER_CONFIG))
    for k in keys:
        default = _default_str(BROKER_KEYS[k].default)
        if default is not None:
            out.append(_synonym(k, default, DEFAULT_CONFIG))
    return out


def topic_config_entries(
    broker: Broker,
    overrides: dict[str, str],
    *,
    keys: Collection[str] | None = None,
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> list[dict[str, Any]]:
    """DescribeConfigs entries of a topic with these ``overrides`` (sorted by key).

    ``keys`` restricts the result (None or empty: every key). The entries also carry what
    CreateTopics v5+ reports (name, value, read_only, config_source, is_sensitive).
    """
    try:
        effective = broker.topic_log_config(overrides).to_properties()
    except InvalidConfigError:
        # Stored overrides that no longer validate (e.g. written by another version): show them.
        effective = {**broker.log_defaults.to_properties(),
                     **{k: v for k, v in overrides.items() if k in TOPIC_KEYS}}
    static_defaults = broker.config.log_config.to_properties()
    wanted = set(keys) if keys else None
    out = []
    for name in sorted(effective):
        if wanted is not None and name not in wanted:
            continue
        synonyms: list[dict[str, Any]] = []
        if name in overrides:
            synonyms.append(_synonym(name, overrides[name], DYNAMIC_TOPIC_CONFIG))
        synonyms += _broker_key_synonyms(broker, broker_synonyms_of(name))
        sources = {s["source"] for s in synonyms}
        if name in overrides:
            source = DYNAMIC_TOPIC_CONFIG
        elif DYNAMIC_BROKER_CONFIG in sources:
            source = DYNAMIC_BROKER_CONFIG
        elif DYNAMIC_DEFAULT_BROKER_CONFIG in sources:
            source = DYNAMIC_DEFAULT_BROKER_CONFIG
        elif STATIC_BROKER_CONFIG in sources or static_defaults.get(name) != _BUILTIN_DEFAULTS.get(name):
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        out.append({
            "name": name,
            "value": effective[name],
            "read_only": False,
            "config_source": source,
            "is_sensitive": False,
            "synonyms": synonyms if include_synonyms else [],
            "config_type": _topic_config_type(name),
            "documentation": _TOPIC_DOCS.get(name) if include_documentation else None,
        })
    return out


def broker_config_entries(
    broker: Broker,
    *,
    entity: str | None = None,
    keys: Collection[str] | None = None,
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> list[dict[str, Any]]:
    """DescribeConfigs entries of this broker (``entity`` None or its node id): every key.

    Values include the dynamic configs; ``DYNAMIC_KEYS`` are not read-only. With ``entity=""``: only
    the keys set as dynamic cluster defaults, as Kafka answers for ``--entity-default``.
    """
    wanted = set(keys) if keys else None
    per_broker = entity != ""
    if per_broker:
        values = broker.broker_values()
        names = sorted(BROKER_KEYS)
    else:
        dynamic_default = broker.dynamic_broker_configs("")
        values = broker.broker_values((dynamic_default, {}))
        names = sorted(dynamic_default)
    out = []
    for name in names:
        if wanted is not None and name not in wanted:
            continue
        spec = BROKER_KEYS.get(name)
        synonyms = _broker_key_synonyms(broker, [name], per_broker=per_broker)
        out.append({
            "name": name,
            "value": _default_str(values.get(name)),
            "read_only": name not in DYNAMIC_KEYS,
            "config_source": synonyms[0]["source"] if synonyms else DEFAULT_CONFIG,
            "is_sensitive": False,
            "synonyms": synonyms if include_synonyms else [],
            "config_type": _broker_config_type(name) if spec is not None else STRING,
            "documentation": (spec.doc if spec is not None else None) if include_documentation else None,
        })
    return out


def _check_broker_name(broker: Broker, name: str) -> None:
    """Raise ``_InvalidRequest`` unless ``name`` is ``""`` or this broker's node id."""
    if name == "":
        return
    try:
        node = int(name)
    except ValueError:
        raise _InvalidRequest(f"broker resource name must be a broker id (an integer), got {name!r}") from None
    if node != broker.node_id:
        raise _InvalidRequest(f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}")


class _InvalidRequest(KafkaError):
    code = ErrorCode.INVALID_REQUEST


class _Denied(KafkaError):
    """A resource authorization refused (its code is the one ``config_resource_error`` gave)."""

    def __init__(self, code: ErrorCode) -> None:
        what = "Topic" if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED else "Cluster"
        super().__init__(f"{what} authorization failed.")
        self.code = code


class _UnknownTopic(KafkaError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _topic_or_error(broker: Broker, name: str) -> Any:
    topic = broker.registry.get(name)
    if topic is None:
        validate_topic_name(name)  # INVALID_TOPIC_EXCEPTION for a name no topic can have
        raise _UnknownTopic(f"topic '{name}' does not exist")
    return topic


def _unsupported_type(resource_type: int) -> _InvalidRequest:
    if resource_type == BROKER_LOGGER:
        return _InvalidRequest("BROKER_LOGGER resources are not supported: Odradek's log levels are set at startup")
    return _InvalidRequest(f"resource type {resource_type} is not supported: use TOPIC (2) or BROKER (4)")


def _describe_one(ctx: RequestContext, resource: Any, include_synonyms: bool, include_documentation: bool,
                  stored: dict[str, str] | None) -> dict[str, Any]:
    """``stored``: a topic's overrides as stored now (``Broker.stored_topic_configs``), None for other resources."""
    b = ctx.broker
    result: dict[str, Any] = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                              "error_code": ErrorCode.NONE, "error_message": None, "configs": []}
    keys = resource.configuration_keys
    if denied := config_resource_error(ctx, AclOperation.DESCRIBE_CONFIGS, resource.resource_type,
                                       resource.resource_name):
        result["error_code"] = denied
        return result
    try:
        if resource.resource_type == TOPIC:
            topic = _topic_or_error(b, resource.resource_name)
            result["configs"] = topic_config_entries(
                b, topic.configs if stored is None else stored, keys=keys, include_synonyms=include_synonyms,
                include_documentation=include_documentation)
        elif resource.resource_type == BROKER:
            _check_broker_name(b, resource.resource_name)
            result["configs"] = broker_config_entries(  # "": the dynamic cluster defaults only
                b, entity=resource.resource_name, keys=keys, include_synonyms=include_synonyms,
                include_documentation=include_documentation)
        else:
            raise _unsupported_type(resource.resource_type)
    except KafkaError as e:
        result.update(error_code=e.code, error_message=e.message, configs=[])
    return result


async def handle_describe_configs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    include_documentation = bool(getattr(request, "include_documentation", False))
    results = []
    for r in request.resources:
        topic = ctx.broker.registry.get(r.resource_name) if r.resource_type == TOPIC else None
        stored = None if topic is None else await ctx.broker.stored_topic_configs(r.resource_name, topic.configs)
        results.append(_describe_one(ctx, r, include_synonyms, include_documentation, stored))
    return {"throttle_time": 0, "results": results}


# -- altering ----------------------------------------------------------------------------------------


def _first_of_each(resources: Iterable[Any]) -> tuple[list[Any], set[tuple[int, str]]]:
    """The resources in request order, once each, and the keys of those named more than once."""
    seen: dict[tuple[int, str], Any] = {}
    dupes: set[tuple[int, str]] = set()
    for r in resources:
        key = (r.resource_type, r.resource_name)
        if key in seen:
            dupes.add(key)
        else:
            seen[key] = r
    return list(seen.values()), dupes


def _alter_response(resource: Any, error: KafkaError | None) -> dict[str, Any]:
    return {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
            "error_code": error.code if error is not None else ErrorCode.NONE,
            "error_message": error.message if error is not None else None}


def _alterable_topic(b: Broker, resource: Any) -> Any:
    """The topic an alter request names, or the error Kafka gives for other resources."""
    if resource.resource_type != TOPIC:
        raise _unsupported_type(resource.resource_type)
    return _topic_or_error(b, resource.resource_name)


def _broker_entity(b: Broker, name: str) -> str:
    """The dynamic-config entity a BROKER resource names: ``""`` or this broker's node id."""
    _check_broker_name(b, name)
    return "" if name == "" else b.broker_entity


def _alter_all(
    ctx: RequestContext, request: Any, alter_one: Callable[[RequestContext, Any, bool], None]
) -> dict[str, Any]:
    """Apply ``alter_one`` to each resource; duplicates and errors are answered per resource."""
    resources, dupes = _first_of_each(request.resources)
    responses = []
    for r in resources:
        error: KafkaError | None = None
        if (r.resource_type, r.resource_name) in dupes:
            error = _InvalidRequest("Duplicate resource.")
        elif denied := config_resource_error(ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name):
            error = _Denied(denied)
        else:
            try:
                alter_one(ctx, r, bool(request.validate_only))
            except KafkaError as e:
                error = e
        responses.append(_alter_response(r, error))
    return {"throttle_time": 0, "responses": responses}


def _legacy_alter_one(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    b = ctx.broker
    entity = _broker_entity(b, resource.resource_name) if resource.resource_type == BROKER else None
    if entity is None:
        _alterable_topic(b, resource)
    nulls = [c.name for c in resource.configs if c.value is None]
    if nulls:
        what = "topic" if entity is None else "broker"
        raise InvalidConfigError(f"Null value not supported for {what} configs: {', '.join(nulls)}")
    configs = {c.name: c.value for c in resource.configs}
    if entity is None:
        b.alter_topic_configs(resource.resource_name, configs, validate_only=validate_only)
    else:
        b.alter_broker_configs(entity, configs, validate_only=validate_only)


async def handle_alter_configs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return _alter_all(ctx, request, _legacy_alter_one)


def _list_parts(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def apply_incremental(broker: Broker, current: dict[str, str], ops: Iterable[Any], *,
                      list_keys: Collection[str] = LIST_TOPIC_KEYS,
                      defaults: dict[str, str] | None = None) -> dict[str, str]:
    """The configs after applying ``ops`` (SET/DELETE/APPEND/SUBTRACT) to ``current``.

    APPEND and SUBTRACT work on ``list_keys`` only; their starting value is the current one if there
    is one, else ``defaults`` (for topics: the effective broker default). Raises ``_InvalidRequest``
    or ``InvalidConfigError``.
    """
    ops = list(ops)
    names = [op.name for op in ops]
    if len(set(names)) != len(names):
        raise _InvalidRequest("Error due to duplicate config keys")
    unknown = [op.config_operation for op in ops if op.config_operation not in _OP_NAMES]
    if unknown:
        raise _InvalidRequest(
            f"unknown config operation {unknown[0]}: use 0 (SET), 1 (DELETE), 2 (APPEND) or 3 (SUBTRACT)"
        )
    nulls = [op.name for op in ops if op.config_operation != DELETE and op.value is None]
    if nulls:
        raise _InvalidRequest(f"Null value not supported for : {', '.join(nulls)}")
    new = dict(current)
    if defaults is None:
        defaults = broker.log_defaults.to_properties()
    for op in ops:
        if op.config_operation == SET:
            new[op.name] = op.value
        elif op.config_operation == DELETE:
            new.pop(op.name, None)
        else:
            if op.name not in list_keys:
                raise InvalidConfigError(
                    f"Can't {_OP_NAMES[op.config_operation]} to key {op.name} because its type is not LIST."
                )
            parts = _list_parts(new.get(op.name, defaults.get(op.name)))
            given = _list_parts(op.value)
            if op.config_operation == APPEND:
                parts += [p for p in given if p not in parts]
            else:
                parts = [p for p in parts if p not in given]
            new[op.name] = ",".join(parts)
    return new


def _incremental_alter_broker(b: Broker, resource: Any, validate_only: bool) -> None:
    entity = _broker_entity(b, resource.resource_name)
    for op in resource.configs:
        check_dynamic_key(op.name)  # DELETE of a read-only key is refused too
    # APPEND/SUBTRACT start from the value the levels below this one give.
    below = b.broker_values(({}, {}) if entity == "" else (b.dynamic_broker_configs(""), {}))
    defaults = {k: v for k in LIST_BROKER_KEYS if (v := _default_str(below.get(k))) is not None}
    configs = apply_incremental(b, b.dynamic_broker_configs(entity), resource.configs,
                                list_keys=LIST_BROKER_KEYS, defaults=defaults)
    b.alter_broker_configs(entity, configs, validate_only=validate_only)


def _incremental_alter_one(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    b = ctx.broker
    if resource.resource_type == BROKER:
        _incremental_alter_broker(b, resource, validate_only)
        return
    topic = _alterable_topic(b, resource)
    configs = apply_incremental(b, topic.configs, resource.configs)
    b.alter_topic_configs(resource.resource_name, configs, validate_only=validate_only)


async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return _alter_all(ctx, request, _incremental_alter_one)
