"""Per-log configuration: the topic-level keys Kafka users know, with Kafka's defaults.

Invariants:
- Every field is validated on construction; an invalid value raises ``InvalidConfigError`` naming the
  key, the value and the accepted range.
- ``TOPIC_TO_BROKER_KEY`` maps each topic key to the broker-wide ``server.properties`` key that sets
  its default, exactly as Kafka names them.
- Field types are int, float, str or bool; booleans are written ``true``/``false`` (as Kafka writes them) by
  ``to_properties`` and read back case-insensitively by ``with_overrides``.
- ``min.insync.replicas``, ``unclean.leader.election.enable`` and ``*.replication.throttled.replicas`` are
  replication settings kept here so a topic can override them like any other key; the storage layer itself
  never reads them. The throttled-replica lists have no broker default (as in Kafka).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from odradek.protocol.errors import InvalidConfigError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
SECONDS = 1000  # milliseconds
MINUTES = 60 * SECONDS
HOURS = 60 * MINUTES
DAYS = 24 * HOURS
LONG_MAX = 2**63 - 1

CREATE_TIME = "CreateTime"
_THROTTLED_REPLICAS = re.compile(r"\*|(\d+:\d+(,\d+:\d+)*,?)?")  # replication throttles (replica/throttle.py)
LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Storage settings of one partition log (field names are Kafka's keys with _ for .)."""

    segment_bytes: int = 1 * GiB
    segment_ms: int = 7 * DAYS
    segment_index_bytes: int = 10 * MiB
    index_interval_bytes: int = 4 * KiB
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 7 * DAYS
    retention_bytes: int = -1
    max_message_bytes: int = 1 * MiB + 12
    message_timestamp_type: str = CREATE_TIME
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    file_delete_delay_ms: int = 1 * MINUTES
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 1 * DAYS
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""

    def __post_init__(self) -> None:
        _at_least("segment.bytes", self.segment_bytes, 14)
        _at_least("segment.ms", self.segment_ms, 1)
        _at_least("segment.index.bytes", self.segment_index_bytes, 12)
        _at_least("index.interval.bytes", self.index_interval_bytes, 0)
        _at_least("flush.messages", self.flush_messages, 1)
        _at_least("flush.ms", self.flush_ms, 0)
        _at_least("retention.ms", self.retention_ms, -1)
        _at_least("retention.bytes", self.retention_bytes, -1)
        _at_least("max.message.bytes", self.max_message_bytes, 0)
        _at_least("message.timestamp.before.max.ms", self.message_timestamp_before_max_ms, 0)
        _at_least("message.timestamp.after.max.ms", self.message_timestamp_after_max_ms, 0)
        _at_least("file.delete.delay.ms", self.file_delete_delay_ms, 0)
        _at_least("min.insync.replicas", self.min_insync_replicas, 1)
        if not isinstance(self.unclean_leader_election_enable, bool):
            raise InvalidConfigError(
                f"unclean.leader.election.enable={self.unclean_leader_election_enable!r} is invalid: "
                "use true or false"
            )
        for key, value in (("leader.replication.throttled.replicas", self.leader_replication_throttled_replicas),
                           ("follower.replication.throttled.replicas", self.follower_replication_throttled_replicas)):
            if not _THROTTLED_REPLICAS.fullmatch(value.replace(" ", "")):
                raise InvalidConfigError(f"{key}={value!r} is invalid: use * or a list of partition:broker pairs, "
                                         "e.g. 0:101,0:102,1:101")
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise InvalidConfigError(
                f"message.timestamp.type={self.message_timestamp_type!r} is invalid: "
                f"use {CREATE_TIME} or {LOG_APPEND_TIME}"
            )
        policies = {p.strip().lower() for p in self.cleanup_policy.split(",")}
        if not policies or not policies <= {"delete", "compact"}:
            raise InvalidConfigError(f"cleanup.policy={self.cleanup_policy!r} is invalid: use delete, compact or "
                                     "compact,delete")
        if not isinstance(self.min_cleanable_dirty_ratio, float) or not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise InvalidConfigError(f"min.cleanable.dirty.ratio={self.min_cleanable_dirty_ratio!r} is invalid: it "
                                     "must be a number between 0 and 1")
        _at_least("min.compaction.lag.ms", self.min_compaction_lag_ms, 0)
        _at_least("max.compaction.lag.ms", self.max_compaction_lag_ms, 1)
        _at_least("delete.retention.ms", self.delete_retention_ms, 0)

    @property
    def compact(self) -> bool:
        """cleanup.policy includes compact: the cleaner keeps the latest record per key."""
        return "compact" in self.cleanup_policy.lower()

    @property
    def max_segment_ms(self) -> int:
        """When the active segment rolls by age: segment.ms, or max.compaction.lag.ms if smaller on a compacted
        topic (Kafka's KIP-354: a record waiting in the active segment must be cleanable within that lag)."""
        if self.compact and 0 < self.max_compaction_lag_ms < self.segment_ms:
            return self.max_compaction_lag_ms
        return self.segment_ms

    @property
    def delete(self) -> bool:
        """cleanup.policy includes delete: retention.ms and retention.bytes remove old segments."""
        return "delete" in self.cleanup_policy.lower()

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    def to_properties(self) -> dict[str, str]:
        """The config as Kafka topic keys with string values."""
        return {f.name.replace("_", "."): _to_str(getattr(self, f.name)) for f in fields(self)}

    def with_overrides(self, props: Mapping[str, Any]) -> LogConfig:
        """A copy with Kafka topic keys (``segment.bytes`` ...) overridden; unknown keys are an error."""
        changes: dict[str, Any] = {}
        for key, raw in props.items():
            name = key.replace(".", "_")
            field = _FIELDS.get(name)
            if field is None:
                raise InvalidConfigError(
                    f"unknown topic config {key!r}; known keys: {', '.join(sorted(TOPIC_KEYS))}"
                )
            if field is bool:
                changes[name] = _parse_bool(key, raw)
            elif field is int:
                try:
                    changes[name] = int(raw)
                except (TypeError, ValueError):
                    raise InvalidConfigError(f"{key}={raw!r} is not an integer") from None
            elif field is float:
                try:
                    changes[name] = float(raw)
                except (TypeError, ValueError):
                    raise InvalidConfigError(f"{key}={raw!r} is not a number") from None
            else:
                changes[name] = str(raw)
        return replace(self, **changes)


def _at_least(key: str, value: int, minimum: int) -> None:
    if not isinstance(value, int) or value < minimum:
        raise InvalidConfigError(f"{key}={value!r} is invalid: it must be an integer >= {minimum}")


def _parse_bool(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    low = str(raw).strip().lower()
    if low not in ("true", "false"):
        raise InvalidConfigError(f"{key}={raw!r} is invalid: use true or false")
    return low == "true"


def _to_str(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _field_type(default: Any) -> type:
    if isinstance(default, bool):  # before int: bool is a subclass of int
        return bool
    if isinstance(default, float):
        return float
    return int if isinstance(default, int) else str


_FIELDS: dict[str, type] = {f.name: _field_type(f.default) for f in fields(LogConfig)}
TOPIC_KEYS = frozenset(name.replace("_", ".") for name in _FIELDS)

TOPIC_TO_BROKER_KEY: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "cleanup.policy": "log.cleanup.policy",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}
