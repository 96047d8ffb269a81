"""Connection limits (odradek/broker/connection_limits.py), pure, with a manual clock."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from odradek.broker.config import KEYS, BrokerConfig, ConfigError
from odradek.broker.connection_limits import ConnectionLimits, parse_per_ip_overrides
from odradek.clock import ManualClock

UNLIMITED = 2**31 - 1


def limits(*, max_connections: int = UNLIMITED, max_per_ip: int = UNLIMITED,
           overrides: dict[str, int] | None = None, rate: int = UNLIMITED, clock: ManualClock | None = None,
           windows: int = 11, window_ms: int = 1000, **kw: Any) -> ConnectionLimits:
    return ConnectionLimits(max_connections=max_connections, max_per_ip=max_per_ip,
                            per_ip_overrides=overrides or {}, max_creation_rate=rate,
                            clock=clock or ManualClock(), windows=windows, window_ms=window_ms, **kw)


def config_values(**props: str) -> dict[str, Any]:
    return BrokerConfig.from_properties({k.replace("_", "."): v for k, v in props.items()}).values


# -- per IP -------------------------------------------------------------------------------------------


def test_per_ip_limit_refuses_the_next_connection_and_counts_nothing() -> None:
    lim = limits(max_per_ip=2)
    assert lim.admit("10.0.0.1") is None
    assert lim.admit("10.0.0.1") is None
    reason = lim.admit("10.0.0.1")
    assert reason is not None and "max.connections.per.ip=2" in reason and "10.0.0.1" in reason
    assert (lim.count("10.0.0.1"), lim.total) == (2, 2)  # the refused one changed nothing
    assert lim.admit("10.0.0.2") is None  # another address has its own count
    assert (lim.count("10.0.0.2"), lim.total) == (1, 3)


def test_release_makes_room_and_counts_never_go_negative() -> None:
    lim = limits(max_per_ip=1)
    assert lim.admit("10.0.0.1") is None
    assert lim.admit("10.0.0.1") is not None
    lim.release("10.0.0.1")
    assert (lim.count("10.0.0.1"), lim.total) == (0, 0)
    assert lim.admit("10.0.0.1") is None
    lim.release("10.0.0.1")
    with pytest.raises(ValueError, match="holds none"):
        lim.release("10.0.0.1")
    with pytest.raises(ValueError, match="holds none"):
        lim.release("10.9.9.9")
    assert (lim.count("10.0.0.1"), lim.total) == (0, 0)


def test_ipv4_mapped_ipv6_is_the_same_address() -> None:
    lim = limits(max_per_ip=1)
    assert lim.admit("::ffff:10.0.0.1") is None
    assert lim.admit("10.0.0.1") is not None
    assert lim.count("10.0.0.1") == 1
    lim.release("10.0.0.1")
    assert lim.total == 0


# -- overrides ----------------------------------------------------------------------------------------


def test_an_override_replaces_the_default_for_its_address_only() -> None:
    lim = limits(max_per_ip=1, overrides={"10.0.0.1": 3})
    for _ in range(3):
        assert lim.admit("10.0.0.1") is None
    reason = lim.admit("10.0.0.1")
    assert reason is not None and "max.connections.per.ip.overrides" in reason and "3" in reason
    assert lim.admit("10.0.0.2") is None
    assert lim.admit("10.0.0.2") is not None
    assert (lim.limit_for("10.0.0.1"), lim.limit_for("10.0.0.2")) == (3, 1)


def test_an_override_of_zero_refuses_that_address_always() -> None:
    lim = limits(overrides={"10.0.0.66": 0})
    for _ in range(3):
        assert lim.admit("10.0.0.66") is not None
    assert lim.total == 0
    assert lim.admit("10.0.0.1") is None


def test_a_host_name_override_applies_to_the_addresses_it_resolves_to() -> None:
    lim = limits(max_per_ip=5, overrides={"localhost": 1})  # resolved for real, once
    assert lim.limit_for("127.0.0.1") == 1
    assert lim.admit("127.0.0.1") is None
    assert lim.admit("127.0.0.1") is not None
    assert lim.limit_for("10.0.0.1") == 5


def test_host_names_are_resolved_once_and_a_literal_address_wins() -> None:
    calls: list[str] = []

    def resolve(host: str) -> list[str]:
        calls.append(host)
        return {"db": ["10.0.0.1", "fe80::1%eth0"], "app": ["10.0.0.2", "::ffff:10.0.0.1"]}[host]

    lim = limits(max_per_ip=9, overrides={"db": 2, "app": 3, "10.0.0.2": 0}, resolve=resolve)
    assert sorted(calls) == ["app", "db"]
    assert lim.overrides == {"10.0.0.1": 2, "fe80::1": 2, "10.0.0.2": 0}
    for _ in range(5):
        lim.admit("10.0.0.1")
    assert len(calls) == 2  # no lookup per connection


def test_a_host_name_that_does_not_resolve_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    def resolve(host: str) -> list[str]:
        raise OSError(-2, "Name or service not known")

    with caplog.at_level(logging.WARNING, logger="odradek.broker.connection_limits"):
        lim = limits(max_per_ip=1, overrides={"nowhere.invalid": 4, "10.0.0.3": 2}, resolve=resolve)
    assert lim.overrides == {"10.0.0.3": 2}
    assert any("nowhere.invalid" in r.getMessage() and "max.connections.per.ip.overrides" in r.getMessage()
               for r in caplog.records)


# -- max.connections ----------------------------------------------------------------------------------


def test_max_connections_counts_every_address() -> None:
    lim = limits(max_connections=3)
    for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.1"):
        assert lim.admit(ip) is None
    reason = lim.admit("10.0.0.3")
    assert reason is not None and "max.connections=3" in reason
    assert (lim.total, lim.count("10.0.0.3")) == (3, 0)
    lim.release("10.0.0.2")
    assert lim.admit("10.0.0.3") is None


def test_max_connections_zero_refuses_everything() -> None:
    lim = limits(max_connections=0)
    assert lim.admit("10.0.0.1") is not None
    assert lim.total == 0


# -- creation rate ------------------------------------------------------------------------------------


def test_creation_rate_refuses_over_the_rate_and_accepts_again_after_the_windows() -> None:
    clock = ManualClock()
    lim = limits(rate=5, clock=clock, windows=2, window_ms=1000)  # measured over at least 1 s
    results = [lim.admit("10.0.0.1") for _ in range(30)]
    assert results[:5] == [None] * 5
    assert all(r is not None for r in results[5:])
    reason = results[5]
    assert reason is not None and "max.connection.creation.rate=5" in reason and "quota.window.num=2" in reason
    assert lim.total == 5  # refused connections neither count nor feed the rate
    assert lim.creation_rate() == pytest.approx(5.0)
    clock.advance(2000)  # both samples expire
    assert lim.admit("10.0.0.1") is None
    assert lim.total == 6


def test_refused_connections_do_not_feed_the_rate() -> None:
    clock = ManualClock()
    lim = limits(rate=2, clock=clock, windows=2, window_ms=1000)
    assert lim.admit("10.0.0.1") is None
    assert lim.admit("10.0.0.1") is None
    for _ in range(100):  # a flood, all refused
        assert lim.admit("10.0.0.1") is not None
    clock.advance(1000)  # one window on: the rate reads 2 over 1 s, so a third has to wait a little...
    assert lim.admit("10.0.0.1") is not None
    clock.advance(500)  # ...until 3 over 1.5 s is under 2/s; the flood would have kept it refused far longer
    assert lim.admit("10.0.0.1") is None


def test_creation_rate_uses_the_minimum_span_of_the_windows() -> None:
    # As Kafka's Rate: after a quiet period a burst is measured over (windows - 1) windows at least.
    lim = limits(rate=5, windows=11, window_ms=1000)
    accepted = sum(lim.admit(f"10.0.0.{i % 200}") is None for i in range(80))
    assert accepted == 50


def test_a_connection_refused_by_a_count_does_not_feed_the_rate() -> None:
    clock = ManualClock()
    lim = limits(max_per_ip=1, rate=1, clock=clock, windows=2, window_ms=1000)
    assert lim.admit("10.0.0.1") is None
    for _ in range(10):
        assert "max.connections.per.ip" in (lim.admit("10.0.0.1") or "")
    clock.advance(2000)
    assert lim.admit("10.0.0.2") is None


def test_creation_rate_zero_refuses_everything() -> None:
    lim = limits(rate=0)
    assert lim.admit("10.0.0.1") is not None
    assert lim.total == 0


# -- config -------------------------------------------------------------------------------------------


def test_from_config_reads_the_keys() -> None:
    clock = ManualClock()
    values = config_values(max_connections="7", max_connections_per_ip="3",
                           max_connections_per_ip_overrides="10.0.0.1:5, 10.0.0.2 : 0",
                           max_connection_creation_rate="4", quota_window_num="2", quota_window_size_seconds="1")
    lim = ConnectionLimits.from_config(values, clock)
    assert (lim.max_connections, lim.max_per_ip, lim.max_creation_rate) == (7, 3, 4)
    assert lim.overrides == {"10.0.0.1": 5, "10.0.0.2": 0}
    assert [lim.admit("10.0.0.9") for _ in range(5)][4] is not None  # 4/s over 1 s


def test_defaults_limit_nothing() -> None:
    values = {key: KEYS[key].default for key in KEYS}
    lim = ConnectionLimits.from_config(values, ManualClock())
    assert all(lim.admit("10.0.0.1") is None for _ in range(10_000))
    assert lim.total == 10_000


def test_per_ip_zero_needs_overrides() -> None:
    values = dict(config_values())
    values["max.connections.per.ip"] = 0
    with pytest.raises(ValueError, match=r"max\.connections\.per\.ip can be set to zero only if"):
        ConnectionLimits.from_config(values, ManualClock())
    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip can be set to zero only if"):
        config_values(max_connections_per_ip="0")  # the broker's config refuses it before starting
    lim = ConnectionLimits.from_config(
        config_values(max_connections_per_ip="0", max_connections_per_ip_overrides="10.0.0.1:2"), ManualClock())
    assert lim.admit("10.0.0.2") is not None
    assert lim.admit("10.0.0.1") is None


def test_parse_overrides() -> None:
    assert parse_per_ip_overrides("") == {}
    assert parse_per_ip_overrides("  ") == {}
    assert parse_per_ip_overrides("10.0.0.1:5,localhost:0") == {"10.0.0.1": 5, "localhost": 0}
    assert parse_per_ip_overrides(" a : 1 , b:2 ") == {"a": 1, "b": 2}
    assert parse_per_ip_overrides("::1:5,fe80::1:2") == {"::1": 5, "fe80::1": 2}  # split at the last colon


@pytest.mark.parametrize("text", [
    "10.0.0.1", "10.0.0.1:", ":5", "10.0.0.1:five", "10.0.0.1:-1", "10.0.0.1:1,", "a:1,a:2", "10.0.0.1:1.5",
])
def test_malformed_overrides_raise_naming_the_key(text: str) -> None:
    with pytest.raises(ValueError, match=r"max\.connections\.per\.ip\.overrides"):
        parse_per_ip_overrides(text)
    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides"):
        config_values(max_connections_per_ip_overrides=text)  # the broker refuses to start, naming the key


# -- ip connection_creation_rate quotas (KIP-612) ----------------------------------------------------


def test_ip_quota_limits_one_address_and_the_default_the_others() -> None:
    clock = ManualClock()
    lim = limits(clock=clock, windows=2, window_ms=1000)
    lim.set_ip_quotas({"10.0.0.1": 2, None: 5})
    # at least one full window is counted: 2 per second lets 2 connections in at once
    assert [lim.admit("10.0.0.1") for _ in range(3)][:2] == [None, None]
    assert "10.0.0.1's connection_creation_rate quota of 2" in (lim.admit("10.0.0.1") or "")
    assert lim.count("10.0.0.1") == 2  # the refused ones counted nothing
    assert sum(lim.admit("10.0.0.2") is None for _ in range(8)) == 5  # the default ip quota, per address
    assert sum(lim.admit("10.0.0.3") is None for _ in range(8)) == 5
    clock.advance(3000)  # the windows have passed
    assert lim.admit("10.0.0.1") is None
    lim.set_ip_quotas({})
    assert all(lim.admit("10.0.0.1") is None for _ in range(20))
