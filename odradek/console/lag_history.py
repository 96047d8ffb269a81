"""Consumer lag over time, in memory, for the console's lag chart.

``LagHistory`` keeps, per group, its total lag sampled at most once per ``interval_ms`` (the sampler in
``__init__.py`` calls ``sample`` on the event loop every interval; a page view may call it too, which is then a
no-op unless the interval has passed). Memory is bounded: at most ``keep`` samples per group (the oldest dropped)
and at most ``max_groups`` groups (a group not seen in a sample for ``keep`` intervals is forgotten). Nothing is
persisted: a restart starts a new chart. Time comes from the broker's clock (``now_ms``), so tests drive it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping


class LagHistory:
    def __init__(self, *, interval_ms: int = 5_000, keep: int = 360, max_groups: int = 1_000) -> None:
        self.interval_ms = interval_ms
        self.keep = keep
        self.max_groups = max_groups
        self._series: dict[str, deque[tuple[int, int]]] = {}
        self._last_sample: int | None = None

    def due(self, now_ms: int) -> bool:
        return self._last_sample is None or now_ms - self._last_sample >= self.interval_ms

    def sample(self, now_ms: int, lags: Mapping[str, int]) -> bool:
        """Record ``lags`` (group -> total lag) if an interval has passed since the last sample; whether it did."""
        if not self.due(now_ms):
            return False
        self._last_sample = now_ms
        for group, lag in lags.items():
            series = self._series.get(group)
            if series is None:
                if len(self._series) >= self.max_groups:
                    continue
                series = self._series[group] = deque(maxlen=self.keep)
            series.append((now_ms, lag))
        horizon = now_ms - self.keep * self.interval_ms
        for group in [g for g, s in self._series.items() if g not in lags and (not s or s[-1][0] < horizon)]:
            del self._series[group]
        return True

    def series(self, group: str) -> list[tuple[int, int]]:
        return list(self._series.get(group, ()))


def chart_svg(points: list[tuple[int, int]], *, width: int = 600, height: int = 120) -> str:
    """A small inline SVG line chart of (time ms, lag) points; an empty string for fewer than one point."""
    if not points:
        return ""
    t0, t1 = points[0][0], points[-1][0]
    top = max(lag for _, lag in points) or 1
    span = max(t1 - t0, 1)
    pad = 4

    def xy(t: int, lag: int) -> str:
        x = pad + (t - t0) / span * (width - 2 * pad) if len(points) > 1 else width / 2
        y = height - pad - lag / top * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    coords = " ".join(xy(t, lag) for t, lag in points)
    return (
        f'<svg class="lag-chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="lag over time, max {top}">'
        f'<polyline fill="none" stroke="currentColor" stroke-width="2" points="{coords}"/>'
        f'<text x="{pad}" y="12" font-size="11">max {top}</text>'
        f'<text x="{width - pad}" y="{height - pad - 2}" font-size="11" text-anchor="end">'
        f"{len(points)} samples over {(t1 - t0) // 1000} s</text></svg>"
    )
