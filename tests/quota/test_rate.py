"""The windowed rate (odradek/quota/rate.py) with an injected clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.clock import ManualClock
from odradek.quota.rate import WindowedRate


def test_a_steady_rate_is_measured_and_old_samples_expire() -> None:
    clock = ManualClock()
    r = WindowedRate(clock, windows=11, window_ms=1000)
    for _ in range(30):  # 1 MB/s for 30 s, recorded every 100 ms
        for _ in range(10):
            r.record(100_000)
            clock.advance(100)
    assert r.rate() == pytest.approx(1_000_000, rel=0.1)
    clock.advance(12_000)  # silence longer than the span: nothing counts any more
    assert r.rate() == 0


def test_a_burst_after_silence_reads_over_the_minimum_span() -> None:
    clock = ManualClock()
    r = WindowedRate(clock, windows=11, window_ms=1000)
    r.record(10_000_000)
    assert r.rate() == pytest.approx(1_000_000)  # 10 MB over at least 10 windows, not over 0 ms


def test_windows_must_be_sane() -> None:
    with pytest.raises(ValueError, match="at least 2 windows"):
        WindowedRate(ManualClock(), windows=1)


@given(st.lists(st.tuples(st.integers(0, 2500), st.integers(-50, 1000)), max_size=60),
       st.integers(2, 12), st.integers(1, 1000))
@settings(max_examples=300, deadline=None)
def test_measure_equals_the_sum_over_the_live_windows(steps: list[tuple[int, int]], windows: int,
                                                      window_ms: int) -> None:
    """The kept sum of the other live windows never drifts from summing every sample still inside the span."""
    clock = ManualClock(0)
    rate = WindowedRate(clock, windows=windows, window_ms=window_ms)
    samples: list[tuple[int, int]] = []  # (window start, amount)
    for advance, amount in steps:
        clock.advance(advance)
        now = clock.milliseconds()
        total, elapsed = rate.record_at(now, amount)
        start = now - now % window_ms
        samples.append((start, amount))
        live = [(s, a) for s, a in samples if s > now - windows * window_ms]
        assert total == sum(a for _, a in live)
        oldest = min(s for s, _ in live)
        assert elapsed == max(now - oldest, (windows - 1) * window_ms)
        assert rate.measure() == (total, elapsed)
