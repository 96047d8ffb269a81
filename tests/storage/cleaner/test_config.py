"""Compaction settings are validated with messages that name the key, as every topic and broker key is."""

from __future__ import annotations

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.protocol.errors import InvalidConfigError
from odradek.storage.config import LogConfig


@pytest.mark.parametrize(("policy", "compact", "delete"), [
    ("delete", False, True), ("compact", True, False), ("compact,delete", True, True), ("delete, compact", True, True),
])
def test_cleanup_policies(policy: str, compact: bool, delete: bool) -> None:
    cfg = LogConfig().with_overrides({"cleanup.policy": policy})
    assert (cfg.compact, cfg.delete) == (compact, delete)


@pytest.mark.parametrize(("key", "value", "named"), [
    ("cleanup.policy", "shred", "cleanup.policy"),
    ("cleanup.policy", "", "cleanup.policy"),
    ("min.cleanable.dirty.ratio", "1.5", "min.cleanable.dirty.ratio"),
    ("min.cleanable.dirty.ratio", "half", "min.cleanable.dirty.ratio"),
    ("min.compaction.lag.ms", "-1", "min.compaction.lag.ms"),
    ("max.compaction.lag.ms", "0", "max.compaction.lag.ms"),
    ("delete.retention.ms", "-5", "delete.retention.ms"),
])
def test_invalid_topic_settings_are_refused_naming_the_key(key: str, value: str, named: str) -> None:
    with pytest.raises(InvalidConfigError, match=named):
        LogConfig().with_overrides({key: value})


def test_broker_keys_set_the_cleaner_and_the_topic_defaults() -> None:
    c = BrokerConfig.from_properties({"log.cleaner.threads": "2", "log.cleaner.dedupe.buffer.size": str(8 << 20),
                                      "log.cleaner.min.cleanable.ratio": "0.25", "log.cleaner.backoff.ms": "500",
                                      "log.cleaner.delete.retention.ms": "1000", "log.cleanup.policy": "compact"})
    assert (c.cleaner_config.threads, c.cleaner_config.dedupe_buffer_size, c.cleaner_config.backoff_ms) == (
        2, 8 << 20, 500)
    assert (c.log_config.min_cleanable_dirty_ratio, c.log_config.delete_retention_ms, c.log_config.compact) == (
        0.25, 1000, True)


@pytest.mark.parametrize(("key", "value"), [("log.cleaner.threads", "0"),
                                            ("log.cleaner.dedupe.buffer.size", "1000"),
                                            ("log.cleaner.io.buffer.size", "10")])
def test_invalid_cleaner_keys_stop_the_broker_at_startup(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key):
        BrokerConfig.from_properties({key: value})


def test_a_compacted_topic_rolls_its_active_segment_within_max_compaction_lag() -> None:
    assert LogConfig(segment_ms=10_000).max_segment_ms == 10_000
    assert LogConfig(segment_ms=10_000, max_compaction_lag_ms=500).max_segment_ms == 10_000  # not compacted
    assert LogConfig(segment_ms=10_000, max_compaction_lag_ms=500, cleanup_policy="compact").max_segment_ms == 500
    assert LogConfig(segment_ms=400, max_compaction_lag_ms=500, cleanup_policy="compact").max_segment_ms == 400
