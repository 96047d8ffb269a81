"""``perf_stats``: the windows, totals and percentiles of ``odradek perf``, and the pace of a throughput, with
the times given (no clock, no broker)."""

from __future__ import annotations

from array import array

import pytest

from odradek.cli.perf_stats import Pacer, Stats, percentiles


def test_percentiles_take_the_element_at_int_p_times_count() -> None:
    lat = array("d", [float(i) for i in range(1000, 0, -1)])  # 1..1000, unsorted
    assert percentiles(lat) == (501.0, 951.0, 991.0, 1000.0)
    assert percentiles(array("d")) == (0.0, 0.0, 0.0, 0.0)
    assert percentiles(array("d", [7.0])) == (7.0, 7.0, 7.0, 7.0)


def test_windows_close_after_their_length_and_totals_cover_everything() -> None:
    stats = Stats(start=100.0, window_s=5.0)
    assert stats.record(2.0, 100, now=101.0) is None
    assert stats.record(4.0, 100, now=104.9) is None
    window = stats.record(6.0, 100, now=105.0)
    assert window is not None
    assert (window.records, window.bytes, window.elapsed_s) == (3, 300, 5.0)
    assert window.latency_avg_ms == pytest.approx(4.0)
    assert window.latency_max_ms == 6.0
    assert (
        window.window_line() == "3 records sent, 0.6 records/sec (0.00 MB/sec), 4.0 ms avg latency, 6.0 ms max latency."
    )
    assert stats.record(1.0, 100, now=106.0) is None  # a new window
    total = stats.total(now=110.0)
    assert (total.records, total.bytes) == (4, 400)
    assert total.latency_avg_ms == pytest.approx(13.0 / 4)
    assert total.final_line() == (
        "4 records sent, 0.400000 records/sec (0.00 MB/sec), 3.25 ms avg latency, 6.00 ms max latency, "
        "4 ms 50th, 6 ms 95th, 6 ms 99th, 6 ms 99.9th."
    )


def test_pacer_holds_the_rate_and_minus_one_never_waits() -> None:
    pacer = Pacer(100.0, start=10.0)
    assert pacer.delay(1, now=10.0) == pytest.approx(0.01)
    assert pacer.delay(50, now=10.2) == pytest.approx(0.3)
    assert pacer.delay(50, now=11.0) == 0.0  # behind: no wait
    assert Pacer(-1, start=0.0).delay(10**9, now=0.0) == 0.0
    with pytest.raises(ValueError):
        Pacer(0, start=0.0)
