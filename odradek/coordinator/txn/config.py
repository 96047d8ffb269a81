"""The transaction coordinator's settings, named after Kafka's ``server.properties`` keys, with Kafka's defaults."""

from __future__ import annotations

from dataclasses import dataclass

SECONDS = 1000
MINUTES = 60 * SECONDS
HOURS = 60 * MINUTES
DAYS = 24 * HOURS


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 15 * MINUTES  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 7 * DAYS  # transactional.id.expiration.ms
    abort_timed_out_interval_ms: int = 10 * SECONDS  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 1 * HOURS  # transaction.remove.expired.transaction.cleanup.interval.ms
    num_partitions: int = 50  # transaction.state.log.num.partitions (the topic's own count wins once it exists)
