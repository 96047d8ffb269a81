"""A rate over sliding sample windows, as Kafka's quotas measure it (``SampledStat`` ``Rate``): pure, with an
injected clock.

``WindowedRate(windows, window_ms)`` keeps ``windows`` samples of ``window_ms`` each. The rate is the sum of
the samples not older than the whole span, divided by the time they cover, which is at least
``(windows - 1)`` full windows (so a burst right after a quiet period does not read as an infinite rate, as
in Kafka's ``Rate.windowSize``).

Invariants: ``record`` and ``rate`` are a few integer operations (no allocation per call; the sum over the
other live windows is recomputed once per window); samples older than ``windows * window_ms`` never count; a
rate is never negative.
"""

from __future__ import annotations

from odradek.clock import Clock

_EMPTY = -(1 << 62)  # the start of a slot that never held a window: never live, whatever the clock reads


class WindowedRate:
    __slots__ = ("_base_oldest", "_base_total", "_cached_start", "_clock", "_counts", "_starts", "_window_ms",
                 "_windows")

    def __init__(self, clock: Clock, *, windows: int = 11, window_ms: int = 1000) -> None:
        if windows < 2 or window_ms < 1:
            raise ValueError(f"a rate needs at least 2 windows of at least 1 ms, got {windows} x {window_ms} ms")
        self._clock = clock
        self._windows = windows
        self._window_ms = window_ms
        self._counts: list[float] = [0] * windows
        self._starts = [_EMPTY] * windows  # start (ms) of the window each slot holds
        # The live windows other than the current one change only when the current window does: their sum and
        # oldest start are kept for the current window's start (``_cached_start``), so a measure is O(1).
        self._cached_start = _EMPTY
        self._base_total: float = 0
        self._base_oldest = 0

    def _slot(self, now: int) -> int:
        start = now - now % self._window_ms
        i = (start // self._window_ms) % self._windows
        if self._starts[i] != start:
            self._starts[i] = start
            self._counts[i] = 0
        return i

    def record(self, amount: float) -> None:
        i = self._slot(self._clock.milliseconds())
        self._counts[i] += amount

    def record_at(self, now: int, amount: float) -> tuple[float, int]:
        """``record`` then ``measure`` at ``now`` (the caller's reading of this rate's clock): the quota step's
        one call per request."""
        self._counts[self._slot(now)] += amount
        return self._measure(now)

    def rate(self) -> float:
        """Units per second over the live windows."""
        total, elapsed = self.measure()
        return total * 1000.0 / elapsed

    def measure(self) -> tuple[float, int]:
        """(units recorded in the live windows, milliseconds they cover): the rate's two terms, which a quota
        needs to compute how long a client must wait to come back under it."""
        now = self._clock.milliseconds()
        self._slot(now)
        return self._measure(now)

    def _measure(self, now: int) -> tuple[float, int]:
        """At ``now``, once ``_slot(now)`` made the current window's slot current."""
        start = now - now % self._window_ms
        current = (start // self._window_ms) % self._windows
        if start != self._cached_start:  # a new current window: which others are live changed
            oldest_allowed = now - self._windows * self._window_ms  # constant within a window (integer ms)
            base: float = 0
            oldest = start
            for i, (s, count) in enumerate(zip(self._starts, self._counts, strict=True)):
                if i != current and s > oldest_allowed:
                    base += count
                    if s < oldest:
                        oldest = s
            self._cached_start, self._base_total, self._base_oldest = start, base, oldest
        total = self._base_total + self._counts[current]
        return total, max(now - self._base_oldest, (self._windows - 1) * self._window_ms)
