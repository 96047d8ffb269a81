"""Replication throttles (odradek/replica/throttle.py): which replicas, and when."""

from __future__ import annotations

import pytest

from odradek.clock import ManualClock
from odradek.replica.throttle import UNLIMITED, ReplicationThrottle, parse_throttled_replicas


def test_throttled_replica_lists_parse_as_kafka_writes_them() -> None:
    assert parse_throttled_replicas("k", "*") is None
    assert parse_throttled_replicas("k", "0:101, 1:102,") == {(0, 101), (1, 102)}
    assert parse_throttled_replicas("k", "") == frozenset()
    for bad in ("0", "a:1", "0:b", "0-1"):
        with pytest.raises(ValueError, match="partition:broker"):
            parse_throttled_replicas("k", bad)


def test_only_listed_replicas_outside_the_isr_wait_once_the_rate_is_used_up() -> None:
    clock = ManualClock()
    specs = {"t": "0:7,1:8", "all": "*", "none": ""}
    th = ReplicationThrottle(7, lambda topic: specs[topic], clock, rate=1000, windows=11, window_ms=1000)
    assert th.is_throttled("t", 0) and not th.is_throttled("t", 1) and th.is_throttled("all", 5)
    assert not th.is_throttled("none", 0)
    assert not th.holds_back("t", 0, in_sync=False)  # nothing moved yet
    th.record(20_000)  # 2,000 B/s over the minimum 10 s span: above 1,000 B/s
    assert th.holds_back("t", 0, in_sync=False)
    assert not th.holds_back("t", 0, in_sync=True), "in-sync replicas are never throttled"
    assert not th.holds_back("t", 1, in_sync=False), "not listed"
    clock.advance(12_000)
    assert not th.holds_back("t", 0, in_sync=False), "the window moved on"
    specs["t"] = "1:7"  # a changed spec is read again
    assert not th.is_throttled("t", 0) and th.is_throttled("t", 1)


def test_an_unlimited_rate_never_throttles() -> None:
    th = ReplicationThrottle(7, lambda topic: "*", ManualClock(), rate=UNLIMITED)
    th.record(10**12)
    assert not th.holds_back("t", 0, in_sync=False)
    th.set_rate(1)
    th.record(100)
    assert th.holds_back("t", 0, in_sync=False)
