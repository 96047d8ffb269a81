"""A latency histogram with fixed buckets, cheap enough to bump on every request.

Invariants:
- ``observe`` is one ``bisect`` over ``BOUNDS`` and three integer/float additions: no locks, no allocation.
- ``counts[i]`` holds the observations ``<= BOUNDS[i]`` and ``> BOUNDS[i-1]`` (not cumulative); the last slot
  holds those above every bound (Prometheus' ``+Inf`` bucket). ``cumulative`` gives Prometheus' shape.
- Values are seconds; owned by one event loop (not thread-safe; a scrape reads it on that loop).
"""

from __future__ import annotations

from bisect import bisect_left

#: Upper bounds in seconds, from 0.1 ms to 30 s (Kafka's request times span that range).
BOUNDS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class Histogram:
    __slots__ = ("count", "counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BOUNDS, seconds)] += 1
        self.count += 1
        self.sum += seconds

    def cumulative(self) -> list[tuple[str, int]]:
        """Buckets as Prometheus wants them: (upper bound as text, observations <= it), ending with ``+Inf``."""
        out = []
        running = 0
        for bound, n in zip((*(repr(b) for b in BOUNDS), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out
