"""The group coordinator's settings, named after Kafka's ``server.properties`` keys, with Kafka's defaults."""

from __future__ import annotations

from dataclasses import dataclass

SECONDS = 1000
MINUTES = 60 * SECONDS


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6 * SECONDS  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 30 * MINUTES  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3 * SECONDS  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    offsets_retention_ms: int = 7 * 24 * 60 * MINUTES  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 10 * MINUTES  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    num_partitions: int = 50  # offsets.topic.num.partitions (the topic's own count wins once it exists)
