"""Client quotas (odradek/quota/client_quotas.py) and the rate they measure (odradek/quota/rate.py), with a
``ManualClock``: which configured entity applies to a (user, client-id) for each quota kind, who shares a
measured rate, the throttle times, the controller mutation token bucket, config updates and sensor expiry.

Expected throttle times are worked out here from the documented formula, ``(rate - limit) / limit * elapsed``
where ``rate = total / elapsed`` over the live windows (Kafka's ``QuotaUtils.throttleTime``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.clock import ManualClock
from odradek.quota.client_quotas import SENSOR_EXPIRY_MS, Bound, ClientQuotas, Sensor, TokenBucket
from odradek.quota.entity import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    Entity,
)
from odradek.quota.rate import WindowedRate

KINDS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)

# Kafka's precedence for the client (alice, app), most specific first.
LEVELS: tuple[Entity, ...] = (
    ((USER, "alice"), (CLIENT_ID, "app")),
    ((USER, "alice"), (CLIENT_ID, None)),
    ((USER, "alice"),),
    ((USER, None), (CLIENT_ID, "app")),
    ((USER, None), (CLIENT_ID, None)),
    ((USER, None),),
    ((CLIENT_ID, "app"),),
    ((CLIENT_ID, None),),
)
# Entities that never apply to (alice, app).
DECOYS: tuple[Entity, ...] = (
    ((USER, "bob"), (CLIENT_ID, "app")),
    ((USER, "alice"), (CLIENT_ID, "other")),
    ((USER, "bob"), (CLIENT_ID, None)),
    ((USER, "bob"),),
    ((USER, None), (CLIENT_ID, "other")),
    ((CLIENT_ID, "other"),),
)
DEFAULT_CLIENT: Entity = ((CLIENT_ID, None),)


def quotas_with(configs: Mapping[Entity, Mapping[str, float]], clock: ManualClock | None = None,
                **windows: int) -> ClientQuotas:
    q = ClientQuotas(clock if clock is not None else ManualClock(), **windows)
    q.update(configs)
    return q


def bound(q: ClientQuotas, kind: str, user: str = "alice", client_id: str = "app") -> Bound:
    b = q.for_client(user, client_id).bounds.get(kind)
    assert b is not None, f"no {kind} quota applies to ({user}, {client_id})"
    return b


def rate_of(b: Bound) -> WindowedRate:
    assert isinstance(b.sensor, Sensor)
    return b.sensor.rate


def bucket_of(b: Bound) -> TokenBucket:
    assert isinstance(b.sensor, TokenBucket)
    return b.sensor


def expected_throttle(total: float, elapsed_ms: int, limit: float) -> int:
    """The documented throttle: 0 while under, else (rate - limit) / limit * elapsed."""
    rate = total * 1000.0 / elapsed_ms
    return 0 if rate <= limit else round((rate - limit) / limit * elapsed_ms)


# -- precedence -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("top", range(len(LEVELS)))
def test_the_most_specific_configured_entity_applies_per_kind(top: int) -> None:
    # Each kind m is configured at every level from its own top level down to (<default> client-id), with a
    # value telling the level apart; the kinds' top levels differ, so each kind resolves on its own.
    tops = {kind: (top + 2 * m) % len(LEVELS) for m, kind in enumerate(KINDS)}
    configs: dict[Entity, dict[str, float]] = {e: {} for e in LEVELS + DECOYS}
    for m, kind in enumerate(KINDS):
        for level in range(tops[kind], len(LEVELS)):
            configs[LEVELS[level]][kind] = 1000 * (level + 1) + m
        for d, e in enumerate(DECOYS):
            configs[e][kind] = 7 + d  # more specific for other clients; never for (alice, app)
    q = quotas_with(configs)
    client = q.for_client("alice", "app")
    for m, kind in enumerate(KINDS):
        b = client.bounds[kind]
        assert b.entity == LEVELS[tops[kind]], kind
        assert b.limit == 1000 * (tops[kind] + 1) + m
    assert (client.produce, client.fetch, client.request, client.mutation) == tuple(
        client.bounds[k] for k in KINDS)


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_each_level_applies_when_it_is_the_only_one(level: int) -> None:
    q = quotas_with({LEVELS[level]: {PRODUCER_BYTE_RATE: 5000}, **{e: {PRODUCER_BYTE_RATE: 1} for e in DECOYS}})
    b = bound(q, PRODUCER_BYTE_RATE)
    assert (b.entity, b.limit) == (LEVELS[level], 5000)
    client = q.for_client("alice", "app")
    assert client.fetch is client.request is client.mutation is None
    assert set(client.bounds) == {PRODUCER_BYTE_RATE}


def test_kinds_resolve_independently_of_each_other() -> None:
    user, client = ((USER, "alice"),), ((CLIENT_ID, "app"),)
    q = quotas_with({
        user: {PRODUCER_BYTE_RATE: 1000},
        client: {CONSUMER_BYTE_RATE: 2000},
        LEVELS[0]: {REQUEST_PERCENTAGE: 25},  # the most specific entity sets only request_percentage
        DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1, CONTROLLER_MUTATION_RATE: 3},
    })
    c = q.for_client("alice", "app")
    assert c.produce is not None and (c.produce.entity, c.produce.limit) == (user, 1000)
    assert c.fetch is not None and (c.fetch.entity, c.fetch.limit) == (client, 2000)
    assert c.request is not None and (c.request.entity, c.request.limit) == (LEVELS[0], 25)
    assert c.mutation is not None and (c.mutation.entity, c.mutation.limit) == (DEFAULT_CLIENT, 3)
    # another user with the same client-id: the user and (user, client-id) quotas are alice's only
    other = q.for_client("bob", "app")
    assert other.produce is not None and other.produce.entity == DEFAULT_CLIENT
    assert other.fetch is not None and other.fetch.entity == client
    assert other.request is None


def test_gaps_in_the_precedence_fall_through_to_the_next_configured_level() -> None:
    q = quotas_with({LEVELS[0]: {PRODUCER_BYTE_RATE: 10}, LEVELS[4]: {PRODUCER_BYTE_RATE: 50},
                     LEVELS[7]: {PRODUCER_BYTE_RATE: 80}})
    assert bound(q, PRODUCER_BYTE_RATE, "alice", "app").entity == LEVELS[0]
    assert bound(q, PRODUCER_BYTE_RATE, "alice", "other").entity == LEVELS[4]  # (<default>, <default>)
    assert bound(q, PRODUCER_BYTE_RATE, "bob", "app").entity == LEVELS[4]
    q.update({LEVELS[7]: {PRODUCER_BYTE_RATE: 80}})
    assert bound(q, PRODUCER_BYTE_RATE, "bob", "app").entity == LEVELS[7]
    assert bound(q, PRODUCER_BYTE_RATE, "", "").entity == LEVELS[7]


def test_resolution_is_cached_until_the_next_update() -> None:
    q = quotas_with({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1000}})
    first = q.for_client("alice", "app")
    assert q.for_client("alice", "app") is first
    q.update({LEVELS[2]: {PRODUCER_BYTE_RATE: 2000}})
    again = q.for_client("alice", "app")
    assert again is not first
    assert again.produce is not None and (again.produce.entity, again.produce.limit) == (LEVELS[2], 2000)


def test_no_quota_for_a_client_none_configure_for() -> None:
    q = quotas_with({((USER, "alice"),): {PRODUCER_BYTE_RATE: 1000}})
    c = q.for_client("bob", "app")
    assert c.bounds == {}
    assert (c.user, c.client_id) == ("bob", "app")
    assert q.record(c.produce, 10**9) == 0
    assert q.record_request_time(c.request, 100.0) == 0
    assert q.mutate(c.mutation, 10**6, strict=True) == (True, 0)
    assert q.max_value_in_window(c.fetch) == float("inf")
    q.unrecord(c.fetch, 5)  # nothing to take back from


# -- quota groups -----------------------------------------------------------------------------------------

CLIENTS = (("alice", "app"), ("alice", "other"), ("bob", "app"), ("bob", "other"))


@pytest.mark.parametrize("level, group", [
    (0, lambda u, c: (u, c)),
    (1, lambda u, c: (u, c)),
    (2, lambda u, c: (u, "")),
    (3, lambda u, c: (u, c)),
    (4, lambda u, c: (u, c)),
    (5, lambda u, c: (u, "")),
    (6, lambda u, c: ("", c)),
    (7, lambda u, c: ("", c)),
])
def test_the_matched_entity_decides_who_shares_a_rate(level: int, group: Callable[[str, str], tuple[str, str]],
                                                     ) -> None:
    e = LEVELS[level]
    q = quotas_with({e: {kind: 1000 for kind in KINDS}})
    names = dict(e)

    def applies(u: str, c: str) -> bool:
        return all(n is None or n == {USER: u, CLIENT_ID: c}[t] for t, n in names.items())

    matching = [uc for uc in CLIENTS if applies(*uc)]
    assert matching
    for u, c in CLIENTS:
        if not applies(u, c):
            assert q.for_client(u, c).bounds == {}
    for kind in KINDS:
        for a in matching:
            for b in matching:
                same = bound(q, kind, *a).sensor is bound(q, kind, *b).sensor
                assert same == (group(*a) == group(*b)), (kind, a, b)
    # one client's kinds never share a sensor
    sensors = [bound(q, kind, *matching[0]).sensor for kind in KINDS]
    assert len({id(s) for s in sensors}) == len(KINDS)


def test_client_ids_of_one_user_quota_share_one_rate() -> None:
    clock = ManualClock()
    q = quotas_with({((USER, "alice"),): {PRODUCER_BYTE_RATE: 1000}}, clock, windows=3, window_s=1)
    one, two = bound(q, PRODUCER_BYTE_RATE, "alice", "app1"), bound(q, PRODUCER_BYTE_RATE, "alice", "app2")
    assert one.sensor is two.sensor
    assert q.record(one, 2500) == expected_throttle(2500, 2000, 1000) == 500
    assert q.record(two, 0) == 500  # app2 is throttled for what app1 sent
    assert q.record(two, 500) == expected_throttle(3000, 2000, 1000) == 1000


def test_each_client_id_has_its_own_rate_under_the_default_client_id_quota() -> None:
    clock = ManualClock()
    q = quotas_with({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1000}}, clock, windows=3, window_s=1)
    one, two = bound(q, PRODUCER_BYTE_RATE, "alice", "app1"), bound(q, PRODUCER_BYTE_RATE, "alice", "app2")
    assert one.sensor is not two.sensor
    assert q.record(one, 2500) == 500
    assert q.record(two, 0) == 0
    assert q.record(two, 2000) == 0  # 2000 B over 2 s: exactly the quota
    assert q.record(one, 0) == 500
    # the same client-id under another user is the same group: a client-id quota is measured per client-id
    assert bound(q, PRODUCER_BYTE_RATE, "bob", "app1").sensor is one.sensor


# -- throttle arithmetic ----------------------------------------------------------------------------------

T0 = 1_700_000_000_000  # ManualClock's start, on a window boundary


def test_measure_reports_the_live_total_and_the_time_it_covers() -> None:
    clock = ManualClock(T0)
    r = WindowedRate(clock, windows=3, window_ms=1000)
    assert r.measure() == (0, 2000)  # at least (windows - 1) windows
    r.record(1500)
    assert r.measure() == (1500, 2000)
    clock.advance(2500)
    r.record(500)
    assert r.measure() == (2000, 2500)  # windows T0 and T0+2000 are live: 2500 ms since T0
    clock.advance(499)
    assert r.measure() == (2000, 2999)
    clock.advance(1)  # T0+3000: the window of T0 is a whole span old and no longer counts
    assert r.measure() == (500, 2000)
    clock.advance(3000)
    assert r.measure() == (0, 2000)
    assert r.rate() == 0


def test_throttle_time_follows_the_documented_formula() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1000}}, clock, windows=3, window_s=1)
    b = bound(q, PRODUCER_BYTE_RATE)
    # T0: 1500 B over the minimum span of 2 windows = 750 B/s: under
    assert q.record(b, 1500) == 0
    # T0: 2500 B / 2 s = 1250 B/s: (1250 - 1000) / 1000 * 2000 = 500 ms
    assert q.record(b, 1000) == 500
    assert rate_of(b).measure() == (2500, 2000)
    # T0+2500: 3000 B / 2.5 s = 1200 B/s: (1200 - 1000) / 1000 * 2500 = 500 ms
    clock.advance(2500)
    assert q.record(b, 500) == 500 == expected_throttle(3000, 2500, 1000)
    # T0+2999: 4000 B / 2.999 s: (4000000 / 2999 - 1000) / 1000 * 2999 = 1001 ms
    clock.advance(499)
    assert q.record(b, 1000) == expected_throttle(4000, 2999, 1000) == 1001
    # T0+3000: the window of T0 expires; 1500 B / 2 s = 750 B/s: under again
    clock.advance(1)
    assert q.record(b, 0) == 0
    assert rate_of(b).measure() == (1500, 2000)
    # a large burst: 1500 + 100000 B / 2 s = 50750 B/s: (50750 - 1000) / 1000 * 2000, not capped
    assert q.record(b, 100_000) == expected_throttle(101_500, 2000, 1000) == 99_500


def test_throttle_time_with_a_fractional_limit_and_longer_windows() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {CONSUMER_BYTE_RATE: 300}}, clock, windows=5, window_s=2)
    b = bound(q, CONSUMER_BYTE_RATE)
    assert q.record(b, 2400) == 0  # 2400 B over the minimum span of 4 x 2 s = 300 B/s: exactly the quota
    # 2401 B / 8 s = 300.125 B/s: (300.125 - 300) / 300 * 8000 = 3.3 ms
    assert q.record(b, 1) == expected_throttle(2401, 8000, 300) == 3
    clock.advance(9000)  # T0+9000: T0's window (span 10 s) still counts; 9 s covered
    assert q.record(b, 500) == expected_throttle(2901, 9000, 300)
    assert rate_of(b).measure() == (2901, 9000)


def test_request_time_throttle_is_capped_at_one_window() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {REQUEST_PERCENTAGE: 10, PRODUCER_BYTE_RATE: 10}}, clock,
                    windows=3, window_s=1)
    b = bound(q, REQUEST_PERCENTAGE)
    # 0.1 s of the loop = 10 percent-seconds; over 2 s that is 5 %: under
    assert q.record_request_time(b, 0.1) == 0
    assert rate_of(b).measure() == (pytest.approx(10), 2000)
    # 22 percent-seconds over 2 s = 11 %: (11 - 10) / 10 * 2000 = 200 ms, under the cap
    assert q.record_request_time(b, 0.12) == 200
    # 522 percent-seconds over 2 s = 261 %: 50200 ms by the formula, capped at one window
    assert expected_throttle(522, 2000, 10) == 50_200
    assert q.record_request_time(b, 5.0) == 1000
    # the same arithmetic on a byte rate is not capped
    produce = bound(q, PRODUCER_BYTE_RATE)
    assert q.record(produce, 522) == 50_200
    # the cap is one window, whatever its length
    q2 = quotas_with({DEFAULT_CLIENT: {REQUEST_PERCENTAGE: 10}}, ManualClock(T0), windows=3, window_s=2)
    assert q2.record_request_time(bound(q2, REQUEST_PERCENTAGE), 50.0) == 2000


def test_unrecord_takes_an_amount_back() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {CONSUMER_BYTE_RATE: 1000}}, clock, windows=3, window_s=1)
    b = bound(q, CONSUMER_BYTE_RATE)
    assert q.record(b, 2500) == 500
    q.unrecord(b, 1000)
    assert rate_of(b).measure() == (1500, 2000)
    assert q.record(b, 0) == 0
    clock.advance(1000)  # taken back in a later window: the total still drops
    q.unrecord(b, 500)
    assert rate_of(b).measure() == (1000, 2000)
    assert q.record(b, 1000) == 0  # 2000 B over 2 s: exactly the quota
    assert q.record(b, 1) == expected_throttle(2001, 2000, 1000) == 1


def test_max_value_in_window() -> None:
    q = quotas_with({DEFAULT_CLIENT: {CONSUMER_BYTE_RATE: 1000, PRODUCER_BYTE_RATE: 1500}}, windows=3, window_s=1)
    assert q.max_value_in_window(bound(q, CONSUMER_BYTE_RATE)) == 1000 * (3 - 1) * 1 == 2000
    assert q.max_value_in_window(bound(q, PRODUCER_BYTE_RATE)) == 3000
    q2 = quotas_with({DEFAULT_CLIENT: {CONSUMER_BYTE_RATE: 1000}}, windows=11, window_s=2)
    assert q2.max_value_in_window(bound(q2, CONSUMER_BYTE_RATE)) == 1000 * 10 * 2
    assert q2.max_value_in_window(None) == float("inf")


def test_a_fetch_of_max_value_after_a_quiet_period_is_not_throttled() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {CONSUMER_BYTE_RATE: 1000}}, clock, windows=3, window_s=1)
    b = bound(q, CONSUMER_BYTE_RATE)
    cap = q.max_value_in_window(b)
    assert q.record(b, cap) == 0
    assert q.record(b, 1) > 0


# -- controller mutations ---------------------------------------------------------------------------------


def test_mutation_bucket_burst_is_rate_times_the_mutation_windows() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {CONTROLLER_MUTATION_RATE: 2}}, clock, windows=3, window_s=1,
                    mutation_windows=2, mutation_window_s=3)
    b = bound(q, CONTROLLER_MUTATION_RATE)
    bucket = bucket_of(b)
    assert (bucket.rate, bucket.burst, bucket.tokens) == (2, 2 * 2 * 3, 12)
    assert q.mutate(b, 12, strict=True) == (True, 0)  # the whole burst at once, not throttled
    assert bucket.tokens == 0
    assert q.mutate(b, 1, strict=True) == (True, 500)  # 0 is not below zero: accepted, then 1 token short
    assert bucket.tokens == -1


def test_strict_mutations_are_refused_only_once_the_bucket_is_below_zero() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {CONTROLLER_MUTATION_RATE: 2}}, clock,
                    mutation_windows=2, mutation_window_s=3)
    b = bound(q, CONTROLLER_MUTATION_RATE)
    bucket = bucket_of(b)
    assert q.mutate(b, 10, strict=True) == (True, 0)  # 12 -> 2
    assert q.mutate(b, 5, strict=True) == (True, 1500)  # 2 -> -3: accepted; 3 tokens at 2/s = 1.5 s
    assert bucket.tokens == -3
    assert q.mutate(b, 1, strict=True) == (False, 1500)  # below zero: refused, and nothing taken
    assert bucket.tokens == -3
    clock.advance(1000)  # +2 tokens
    assert q.mutate(b, 1, strict=True) == (False, 500)
    assert bucket.tokens == -1
    clock.advance(250)
    assert q.mutate(b, 1, strict=True) == (False, 250)  # -0.5 tokens
    clock.advance(250)  # back at exactly zero
    assert q.mutate(b, 4, strict=True) == (True, 2000)
    assert bucket.tokens == -4


def test_a_refused_mutation_always_has_a_throttle_time() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {CONTROLLER_MUTATION_RATE: 2}}, clock,
                    mutation_windows=2, mutation_window_s=3)
    b = bound(q, CONTROLLER_MUTATION_RATE)
    assert q.mutate(b, 13, strict=True) == (True, 500)  # 12 -> -1
    clock.advance(999)  # +1.998 tokens: 0.998
    assert q.mutate(b, 1, strict=True) == (True, 1)  # down to -0.002 tokens: 1 ms to go
    clock.advance(1)  # back at zero: accepted, or else refused with a wait of at least 1 ms
    accepted, throttle_ms = q.mutate(b, 1, strict=True)
    assert accepted or throttle_ms > 0


def test_non_strict_mutations_are_never_refused_only_throttled() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {CONTROLLER_MUTATION_RATE: 2}}, clock,
                    mutation_windows=2, mutation_window_s=3)
    b = bound(q, CONTROLLER_MUTATION_RATE)
    assert q.mutate(b, 12, strict=False) == (True, 0)
    assert q.mutate(b, 4, strict=False) == (True, 2000)
    assert q.mutate(b, 4, strict=False) == (True, 4000)  # -8 tokens at 2/s
    assert q.mutate(b, 100, strict=False) == (True, 54_000)
    assert bucket_of(b).tokens == -108
    assert q.mutate(b, 1, strict=True) == (False, 54_000)  # a strict request from the same group is refused


def test_the_bucket_refills_at_the_rate_up_to_the_burst() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {CONTROLLER_MUTATION_RATE: 0.5}}, clock,
                    mutation_windows=2, mutation_window_s=2)
    b = bound(q, CONTROLLER_MUTATION_RATE)
    bucket = bucket_of(b)
    assert bucket.burst == 2
    assert q.mutate(b, 4, strict=True) == (True, 4000)  # 2 -> -2: 2 tokens at 0.5/s = 4 s
    clock.advance(3000)  # +1.5 tokens: -0.5
    assert q.mutate(b, 1, strict=True) == (False, 1000)
    clock.advance(1000)
    assert q.mutate(b, 1, strict=True) == (True, 2000)  # at 0: accepted, -1
    clock.advance(3_600_000)  # an hour of refill stops at the burst
    assert q.mutate(b, 0, strict=True) == (True, 0)
    assert bucket.tokens == 2
    assert q.mutate(b, 3, strict=True) == (True, 2000)


def test_mutation_buckets_are_per_quota_group() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {CONTROLLER_MUTATION_RATE: 1}, ((USER, "alice"),): {
        CONTROLLER_MUTATION_RATE: 1}}, clock, mutation_windows=2, mutation_window_s=1)
    one, two = bound(q, CONTROLLER_MUTATION_RATE, "bob", "a"), bound(q, CONTROLLER_MUTATION_RATE, "bob", "b")
    assert q.mutate(one, 3, strict=True) == (True, 1000)
    assert q.mutate(one, 1, strict=True) == (False, 1000)
    assert q.mutate(two, 2, strict=True) == (True, 0)  # another client-id: its own bucket
    alice_a, alice_b = bound(q, CONTROLLER_MUTATION_RATE, "alice", "a"), bound(q, CONTROLLER_MUTATION_RATE,
                                                                             "alice", "b")
    assert q.mutate(alice_a, 3, strict=True) == (True, 1000)
    assert q.mutate(alice_b, 1, strict=True) == (False, 1000)  # alice's client-ids share her bucket


# -- updates ----------------------------------------------------------------------------------------------


def test_enabled_only_with_a_client_quota_configured() -> None:
    q = ClientQuotas(ManualClock())
    assert q.enabled is False
    q.update({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1000}})
    assert q.enabled is True
    q.update({})
    assert q.enabled is False
    assert q.entities() == {}
    q.update({DEFAULT_CLIENT: {}, ((USER, "alice"),): {}})
    assert q.enabled is False
    assert q.entities() == {}
    # connection_creation_rate (an ip quota) and unknown keys are not client quotas
    q.update({(("ip", "10.0.0.7"),): {CONNECTION_CREATION_RATE: 5}, DEFAULT_CLIENT: {"foo": 3}})
    assert q.enabled is False
    assert q.entities() == {}
    assert q.for_client("alice", "app").bounds == {}


def test_update_replaces_every_config_and_keeps_only_client_keys() -> None:
    q = quotas_with({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1000, "foo": 1}, LEVELS[2]: {CONSUMER_BYTE_RATE: 5}})
    assert q.entities() == {DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1000.0}, LEVELS[2]: {CONSUMER_BYTE_RATE: 5.0}}
    q.update({LEVELS[0]: {REQUEST_PERCENTAGE: 50}})
    assert q.entities() == {LEVELS[0]: {REQUEST_PERCENTAGE: 50.0}}
    c = q.for_client("alice", "app")
    assert set(c.bounds) == {REQUEST_PERCENTAGE}
    entities = q.entities()
    entities[LEVELS[0]][REQUEST_PERCENTAGE] = 1  # a copy: changing it changes nothing
    assert q.entities() == {LEVELS[0]: {REQUEST_PERCENTAGE: 50.0}}


def test_an_update_applies_at_once_and_keeps_the_measured_rates() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1000}}, clock, windows=3, window_s=1)
    old = bound(q, PRODUCER_BYTE_RATE)
    assert q.record(old, 2500) == 500
    q.update({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1000}, ((USER, "bob"),): {CONSUMER_BYTE_RATE: 5}})
    same = bound(q, PRODUCER_BYTE_RATE)
    assert same.sensor is old.sensor  # the quota group still exists: its rate is kept
    assert q.record(same, 0) == 500
    q.update({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 2000}})
    higher = bound(q, PRODUCER_BYTE_RATE)
    assert higher.limit == 2000
    assert q.record(higher, 0) == 0  # 1250 B/s is under the new limit
    q.update({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 500}})
    lower = bound(q, PRODUCER_BYTE_RATE)
    assert q.record(lower, 0) == expected_throttle(2500, 2000, 500) == 3000
    # the quota moves to the user: another quota group, measured from nothing
    q.update({LEVELS[2]: {PRODUCER_BYTE_RATE: 500}})
    moved = bound(q, PRODUCER_BYTE_RATE)
    assert moved.entity == LEVELS[2]
    assert moved.sensor is not old.sensor
    assert rate_of(moved).measure() == (0, 2000)
    assert q.record(moved, 0) == 0
    # removing the quota: nothing applies any more
    q.update({})
    assert q.for_client("alice", "app").produce is None


def test_a_removed_more_specific_quota_falls_back_to_the_next_level() -> None:
    q = quotas_with({LEVELS[0]: {PRODUCER_BYTE_RATE: 10}, LEVELS[5]: {PRODUCER_BYTE_RATE: 60}})
    assert bound(q, PRODUCER_BYTE_RATE).entity == LEVELS[0]
    q.update({LEVELS[5]: {PRODUCER_BYTE_RATE: 60}})
    assert bound(q, PRODUCER_BYTE_RATE).entity == LEVELS[5]
    q.update({LEVELS[5]: {PRODUCER_BYTE_RATE: 60}, LEVELS[3]: {PRODUCER_BYTE_RATE: 40}})
    assert bound(q, PRODUCER_BYTE_RATE).entity == LEVELS[3]


def test_an_update_changes_the_mutation_rate_at_once() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {CONTROLLER_MUTATION_RATE: 1}}, clock, mutation_windows=2,
                    mutation_window_s=1)
    q.update({DEFAULT_CLIENT: {CONTROLLER_MUTATION_RATE: 4}})
    b = bound(q, CONTROLLER_MUTATION_RATE)
    assert (bucket_of(b).rate, bucket_of(b).burst) == (4, 8)
    assert q.mutate(b, 8, strict=True) == (True, 0)
    assert q.mutate(b, 2, strict=True) == (True, 500)


def test_an_update_keeps_the_mutation_bucket_of_a_group_that_still_exists() -> None:
    clock = ManualClock(T0)
    configs: dict[Entity, dict[str, float]] = {DEFAULT_CLIENT: {CONTROLLER_MUTATION_RATE: 1}}
    q = quotas_with(configs, clock, mutation_windows=2, mutation_window_s=1)
    b = bound(q, CONTROLLER_MUTATION_RATE)
    assert q.mutate(b, 4, strict=True) == (True, 2000)  # 2 -> -2
    q.update({**configs, ((USER, "bob"),): {PRODUCER_BYTE_RATE: 5}})  # an unrelated change
    assert q.mutate(bound(q, CONTROLLER_MUTATION_RATE), 1, strict=True) == (False, 2000)


# -- sensor expiry ----------------------------------------------------------------------------------------


def test_sensors_unused_for_longer_than_the_expiry_are_dropped() -> None:
    clock = ManualClock(T0)
    # windows spanning more than the expiry: a kept sensor still counts what it measured an hour ago, so a
    # dropped one is told apart by its empty rate
    q = quotas_with({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1000}}, clock, windows=3, window_s=2000)
    a, b = bound(q, PRODUCER_BYTE_RATE, "u", "a"), bound(q, PRODUCER_BYTE_RATE, "u", "b")
    c = bound(q, PRODUCER_BYTE_RATE, "u", "c")
    q.record(a, 10_000_000)
    q.record(b, 20_000_000)
    clock.advance(SENSOR_EXPIRY_MS // 2)
    q.record(b, 1)  # b stays in use (and a sweep runs: nothing is old enough yet)
    clock.advance(SENSOR_EXPIRY_MS // 2)  # a unused for exactly the expiry: not more
    q.record(c, 1)
    assert bound(q, PRODUCER_BYTE_RATE, "u", "a").sensor is a.sensor
    clock.advance(60_000)  # a is now stale, but the last sweep was only a minute ago
    q.record(c, 1)
    assert bound(q, PRODUCER_BYTE_RATE, "u", "a").sensor is a.sensor
    clock.advance(1)
    q.record(c, 1)  # recording on another client sweeps
    fresh = bound(q, PRODUCER_BYTE_RATE, "u", "a")
    assert fresh.sensor is not a.sensor
    assert rate_of(fresh).measure()[0] == 0  # the group starts from an empty rate
    assert q.record(fresh, 0) == 0
    assert rate_of(a).measure()[0] == 10_000_000  # (the dropped sensor had kept it)
    kept = bound(q, PRODUCER_BYTE_RATE, "u", "b")
    assert kept.sensor is b.sensor
    assert rate_of(kept).measure()[0] == 20_000_001


def test_a_resolution_sweeps_sensors_unused_past_the_expiry() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1000}}, clock, windows=3, window_s=2000)
    a = bound(q, PRODUCER_BYTE_RATE, "u", "a")
    q.record(a, 5)
    clock.advance(2 * SENSOR_EXPIRY_MS)
    fresh = bound(q, PRODUCER_BYTE_RATE, "u", "a")  # any client's request sweeps what went unused
    assert fresh.sensor is not a.sensor
    assert rate_of(fresh).measure()[0] == 0


def test_stale_mutation_buckets_are_dropped_with_only_a_mutation_quota() -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {CONTROLLER_MUTATION_RATE: 2}}, clock)
    for i in range(100):  # every request resolves its client, which makes its client-id's bucket
        q.for_client("ANONYMOUS", f"short-lived-{i}")
    live = bound(q, CONTROLLER_MUTATION_RATE, "ANONYMOUS", "live")
    for _ in range(70):  # 70 minutes of activity by one client, through every call the broker makes
        clock.advance(60_001)
        c = q.for_client("ANONYMOUS", "live")
        q.record(c.produce, 100)
        q.record_request_time(c.request, 0.001)
        q.mutate(c.mutation, 1, strict=False)
        q.mutate(live, 0, strict=False)
    # the buckets are private state; there is no other view of what the quotas keep in memory
    assert len(q._sensors) == 1


# -- property ---------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 6000)), min_size=1, max_size=40))
def test_throttle_is_never_negative_and_zero_exactly_when_under_the_quota(steps: list[tuple[int, int]]) -> None:
    clock = ManualClock(T0)
    q = quotas_with({DEFAULT_CLIENT: {PRODUCER_BYTE_RATE: 1000}}, clock, windows=3, window_s=1)
    b = bound(q, PRODUCER_BYTE_RATE)
    recorded: dict[int, int] = {}  # a model of the windows: start -> amount
    for advance, amount in steps:
        clock.advance(advance)
        now = clock.milliseconds()
        start = now - now % 1000
        recorded[start] = recorded.get(start, 0) + amount
        throttle = q.record(b, amount)
        total, elapsed = rate_of(b).measure()
        live = [s for s in recorded if s > now - 3000]
        assert total == sum(recorded[s] for s in live)
        assert elapsed == max(now - min(live), 2000)
        assert throttle >= 0
        assert (throttle == 0) == (total * 1000.0 / elapsed <= 1000)
        assert throttle == expected_throttle(total, elapsed, 1000)
