"""Client quotas: which quota a request's (user, client-id) falls under, what it used, and how long it must wait.

Kafka's ``ClientQuotaManager`` with its ``DefaultQuotaCallback``, pure and with an injected clock. For each
quota kind (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``, ``controller_mutation_rate``)
the configured entity that applies to a client is the first of these that sets the kind (Kafka's precedence,
most specific first)::

    (user, client-id)  (user, <default> client-id)  (user)
    (<default> user, client-id)  (<default> user, <default> client-id)  (<default> user)
    (client-id)  (<default> client-id)

The match also decides who shares the measured rate (a *quota group*, Kafka's metric tags): a match with a user
component is measured per user, one with a client-id component per client-id, both for both. So
``(<default> client-id) producer_byte_rate=1048576`` gives every client-id its own 1 MB/s, shared by all of
that client-id's connections, and ``(user alice)`` gives alice one rate across all her client-ids.

Byte and request rates are measured over ``quota.window.num`` windows of ``quota.window.size.seconds``
(``WindowedRate``); a request that takes a rate above its quota is answered with the time that brings it back
under the quota if nothing more were recorded, ``(rate - quota) / quota * window`` (Kafka's
``QuotaUtils.throttleTime``; request-time throttles are capped at one window, as Kafka caps them). The request
percentage is the share of the broker's event loop a quota group's requests held: 100 is the whole loop.
Controller mutations (partitions created or deleted) use Kafka's token bucket (KIP-599): a burst of
``rate * controller.quota.window.num * controller.quota.window.size.seconds`` partitions, refilled at ``rate``
per second; once the bucket is below zero new mutations are refused (strict) or only throttled (old request
versions), the throttle being the time until it is back at zero.

Invariants:
- With no quota configured, ``enabled`` is False and the broker skips every call here (no cost per request).
- ``for_client`` is a dict lookup once resolved; ``record`` is a few arithmetic operations on one sensor.
- A quota change applies at once: resolutions are recomputed and limits re-read; the measured rates of quota
  groups that still exist are kept.
- Sensors and buckets unused for ``SENSOR_EXPIRY_MS`` are dropped (checked at most once a minute, on any
  client's request), so memory follows the active clients, not every client-id ever seen.
- A refused mutation always comes with a throttle time of at least 1 ms; a changed mutation quota keeps its
  bucket's level (capped at the new burst).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from odradek.clock import Clock
from odradek.quota.entity import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    Entity,
)
from odradek.quota.rate import WindowedRate

ANONYMOUS = "ANONYMOUS"  # the user of an unauthenticated connection (Kafka's KafkaPrincipal.ANONYMOUS name)
SENSOR_EXPIRY_MS = 3_600_000
_SWEEP_INTERVAL_MS = 60_000
_KINDS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)


def _candidates(user: str, client_id: str) -> tuple[tuple[Entity, str, str], ...]:
    """The entities that may apply to (user, client-id), most specific first, each with the quota group it
    implies (user tag, client-id tag)."""
    return (
        (((USER, user), (CLIENT_ID, client_id)), user, client_id),
        (((USER, user), (CLIENT_ID, None)), user, client_id),
        (((USER, user),), user, ""),
        (((USER, None), (CLIENT_ID, client_id)), user, client_id),
        (((USER, None), (CLIENT_ID, None)), user, client_id),
        (((USER, None),), user, ""),
        (((CLIENT_ID, client_id),), "", client_id),
        (((CLIENT_ID, None),), "", client_id),
    )


@dataclass(slots=True)
class Sensor:
    """The measured rate of one quota group for one kind."""

    rate: WindowedRate
    last_used_ms: int = 0


@dataclass(slots=True)
class TokenBucket:
    """KIP-599's bucket of controller mutations: ``tokens`` may go below zero; refilled at ``rate`` per second up
    to ``burst``."""

    rate: float
    burst: float
    tokens: float
    updated_ms: int
    last_used_ms: int = 0

    def refill(self, now_ms: int) -> None:
        self.tokens = min(self.burst, self.tokens + self.rate * max(now_ms - self.updated_ms, 0) / 1000)
        self.updated_ms = now_ms

    def throttle_ms(self) -> int:
        return 0 if self.tokens >= 0 else max(1, round(-self.tokens / self.rate * 1000))


@dataclass(slots=True)
class Bound:
    """One kind's quota for a client: its limit and the sensor of its quota group."""

    limit: float
    entity: Entity
    sensor: Sensor | TokenBucket


@dataclass(slots=True)
class ClientQuota:
    """What applies to one (user, client-id): a ``Bound`` per kind that has a quota, None otherwise."""

    user: str
    client_id: str
    produce: Bound | None = None
    fetch: Bound | None = None
    request: Bound | None = None
    mutation: Bound | None = None
    bounds: dict[str, Bound] = field(default_factory=dict)


class ClientQuotas:
    def __init__(self, clock: Clock, *, windows: int = 11, window_s: int = 1, mutation_windows: int = 11,
                 mutation_window_s: int = 1) -> None:
        self.clock = clock
        self.windows = windows
        self.window_ms = window_s * 1000
        self.mutation_burst_s = mutation_windows * mutation_window_s
        self._configs: dict[Entity, dict[str, float]] = {}
        self._resolved: dict[tuple[str, str], ClientQuota] = {}
        self._sensors: dict[tuple[str, str, str], Sensor | TokenBucket] = {}
        self._last_sweep_ms = clock.milliseconds()
        self.enabled = False

    # -- configuration -------------------------------------------------------------------------------------

    def update(self, configs: Mapping[Entity, Mapping[str, float]]) -> None:
        """Replace every quota config (entity -> key -> value) and apply them from now on."""
        self._configs = {e: {k: float(v) for k, v in c.items() if k in _KINDS} for e, c in configs.items()}
        self._configs = {e: c for e, c in self._configs.items() if c}
        self._resolved.clear()  # resolved again on next use; sensors and buckets take the new limits then
        self.enabled = bool(self._configs)

    def for_client(self, user: str, client_id: str) -> ClientQuota:
        if self.clock.milliseconds() - self._last_sweep_ms > _SWEEP_INTERVAL_MS:
            self._sweep(self.clock.milliseconds())
        q = self._resolved.get((user, client_id))
        if q is None:
            if len(self._resolved) > 100_000:  # bounded: a flood of client-ids only costs re-resolution
                self._resolved.clear()
            q = self._resolved[(user, client_id)] = self._resolve(user, client_id)
        return q

    def _resolve(self, user: str, client_id: str) -> ClientQuota:
        q = ClientQuota(user, client_id)
        now = self.clock.milliseconds()
        candidates = _candidates(user, client_id)
        for kind in _KINDS:
            for e, user_tag, client_tag in candidates:
                limit = self._configs.get(e, {}).get(kind)
                if limit is not None:
                    q.bounds[kind] = Bound(limit, e, self._sensor(kind, user_tag, client_tag, limit, now))
                    break
        q.produce = q.bounds.get(PRODUCER_BYTE_RATE)
        q.fetch = q.bounds.get(CONSUMER_BYTE_RATE)
        q.request = q.bounds.get(REQUEST_PERCENTAGE)
        q.mutation = q.bounds.get(CONTROLLER_MUTATION_RATE)
        return q

    def _sensor(self, kind: str, user_tag: str, client_tag: str, limit: float, now: int) -> Sensor | TokenBucket:
        key = (kind, user_tag, client_tag)
        sensor = self._sensors.get(key)
        if sensor is None:
            if kind == CONTROLLER_MUTATION_RATE:
                burst = limit * self.mutation_burst_s
                sensor = TokenBucket(limit, burst, burst, now)
            else:
                sensor = Sensor(WindowedRate(self.clock, windows=self.windows, window_ms=self.window_ms))
            self._sensors[key] = sensor
        elif isinstance(sensor, TokenBucket) and sensor.rate != limit:  # a changed quota keeps the bucket's level
            sensor.refill(now)
            sensor.rate = limit
            sensor.burst = limit * self.mutation_burst_s
            sensor.tokens = min(sensor.tokens, sensor.burst)
        sensor.last_used_ms = now
        return sensor

    def entities(self) -> dict[Entity, dict[str, float]]:
        return {e: dict(c) for e, c in self._configs.items()}

    # -- measuring -----------------------------------------------------------------------------------------

    def record(self, bound: Bound | None, amount: float, *, cap_ms: int | None = None) -> int:
        """Record ``amount`` against ``bound`` (bytes, or percent-seconds of the loop) and return the throttle
        time in ms (0 while under the quota)."""
        if bound is None:
            return 0
        sensor = bound.sensor
        assert isinstance(sensor, Sensor)
        now = self.clock.milliseconds()
        sensor.last_used_ms = now
        total, elapsed_ms = sensor.rate.record_at(now, amount)
        rate = total * 1000.0 / elapsed_ms
        if rate <= bound.limit:
            return 0
        throttle = round((rate - bound.limit) / bound.limit * elapsed_ms)
        return min(throttle, cap_ms) if cap_ms is not None else throttle

    def unrecord(self, bound: Bound | None, amount: float) -> None:
        """Take back an amount recorded for a response that was not sent (a throttled fetch), as Kafka does."""
        if bound is not None:
            sensor = bound.sensor
            assert isinstance(sensor, Sensor)
            sensor.rate.record(-amount)

    def record_request_time(self, bound: Bound | None, seconds: float) -> int:
        """``request_percentage``: the loop time a request held, as percent-seconds; throttle capped at one
        window (Kafka's ``ClientRequestQuotaManager``)."""
        return self.record(bound, seconds * 100.0, cap_ms=self.window_ms)

    def max_value_in_window(self, bound: Bound | None) -> float:
        """The most one response may carry without being throttled for sure: a fetch's byte cap (Kafka's
        ``getMaxValueInQuotaWindow``)."""
        if bound is None:
            return float("inf")
        return bound.limit * (self.windows - 1) * self.window_ms / 1000

    def mutate(self, bound: Bound | None, partitions: int, *, strict: bool) -> tuple[bool, int]:
        """Controller mutations of ``partitions``: (accepted, throttle ms). Strict (current request versions):
        refused while the bucket is below zero, else accepted even if it goes below. Not strict: always
        accepted, only throttled."""
        if bound is None:
            return True, 0
        bucket = bound.sensor
        assert isinstance(bucket, TokenBucket)
        now = self.clock.milliseconds()
        bucket.last_used_ms = now
        bucket.refill(now)
        if strict and bucket.tokens < 0:
            return False, bucket.throttle_ms()
        bucket.tokens -= partitions
        return True, bucket.throttle_ms()

    def _sweep(self, now: int) -> None:
        self._last_sweep_ms = now
        stale = [k for k, s in self._sensors.items() if now - s.last_used_ms > SENSOR_EXPIRY_MS]
        if stale:
            for k in stale:
                del self._sensors[k]
            self._resolved.clear()  # resolutions hold the dropped sensors: resolve again on next use
