"""The windowed rate (odradek/quota/rate.py) with an injected clock."""

from __future__ import annotations

import pytest

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
