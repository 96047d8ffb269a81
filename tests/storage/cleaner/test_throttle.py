"""log.cleaner.io.max.bytes.per.second: a throttled pass moves its bytes no faster than the rate (it sleeps the
difference; only a lower bound on its time is asserted, which a slow machine cannot break)."""

from __future__ import annotations

import os
from pathlib import Path

from odradek.protocol.records import RecordInput, build_batch
from odradek.storage.cleaner.clean import CleanStats, Throttler, clean
from odradek.storage.cleaner.cleaner import plan_pass
from odradek.storage.log import Log
from tests.storage.helpers import T0, small_config


def test_the_throttler_sleeps_what_the_bytes_ran_ahead() -> None:
    stats = CleanStats()
    t = Throttler(1_000_000, stats)
    t.account(300_000)
    assert stats.throttled_seconds >= 0.25


def test_an_unlimited_throttler_never_sleeps() -> None:
    stats = CleanStats()
    t = Throttler(float("inf"), stats)
    t.account(10**12)
    assert stats.throttled_seconds == 0


def test_a_throttled_pass_takes_at_least_its_bytes_over_the_rate(tmp_path: Path) -> None:
    lg = Log.open(tmp_path / "t-0", small_config(cleanup_policy="compact", segment_bytes=64 * 1024))
    for _ in range(60):
        lg.append(build_batch([RecordInput(b"k%d" % (j % 10), os.urandom(900), T0) for j in range(8)]))
    lg.update_high_watermark(lg.next_offset)
    view = lg.cleaning_view()
    rate = 1_000_000
    task, _ = plan_pass(lg, view, view.cleanable(None, T0, 0), T0, memory_bytes=1 << 20,
                        max_io_bytes_per_second=rate)
    result = clean(task)
    s = result.stats
    moved = s.map_bytes_read + s.bytes_read - s.bytes_skipped + s.bytes_written
    assert moved > 300_000
    assert result.stats.seconds >= 0.9 * moved / rate
    assert result.stats.throttled_seconds > 0
    lg.close()
