"""A rate over sliding sample windows, as Kafka's quotas measure it (``SampledStat`` ``Rate``): pure, with an
injected clock.

``WindowedRate(windows, window_ms)`` keeps ``windows`` samples of ``window_ms`` each. The rate is the sum of
the samples not older than the whole span, divided by the time they cover, which is at least
``(windows - 1)`` full windows (so a burst right after a quiet period does not read as an infinite rate, as
in Kafka's ``Rate.windowSize``).

Invariants: ``record`` and ``rate`` are a few integer operations (no allocation per call); samples older
than ``windows * window_ms`` never count; a rate is never negative.
"""

from __future__ import annotations

from odradek.clock import Clock


class WindowedRate:
    __slots__ = ("_clock", "_counts", "_starts", "_window_ms", "_windows")

    def __init__(self, clock: Clock, *, windows: int = 11, window_ms: int = 1000) -> None:
        if windows < 2 or window_ms < 1:
            raise ValueError(f"a rate needs at least 2 windows of at least 1 ms, got {windows} x {window_ms} ms")
        self._clock = clock
        self._windows = windows
        self._window_ms = window_ms
        self._counts: list[float] = [0] * windows
        self._starts = [-1] * windows  # start (ms) of the window each slot holds; -1: empty

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
        oldest_allowed = now - self._windows * self._window_ms
        total: float = 0
        oldest = now
        for start, count in zip(self._starts, self._counts, strict=True):
            if start > oldest_allowed:
                total += count
                if start < oldest:
                    oldest = start
        return total, max(now - oldest, (self._windows - 1) * self._window_ms)
