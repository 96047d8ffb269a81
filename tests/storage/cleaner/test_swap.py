"""The swap of cleaned segments is crash-safe: a crash at any rename leaves either the old segments or the new ones
as the log's data, never neither and never both; leftovers of an unfinished pass are removed when the log opens."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol.records import RecordInput, build_batch
from odradek.storage.cleaner.clean import CLEANED_SUFFIX, CleanTask, clean
from odradek.storage.cleaner.cleaner import plan_pass
from odradek.storage.log import Log
from tests.storage.helpers import T0, region_records, small_config

KEYS = 7


class Crash(Exception):
    """The machine stops here."""


def _append(lg: Log, rounds: int, tag: int, keys: int = KEYS) -> None:
    for i in range(rounds):
        lg.append(build_batch([RecordInput(b"k%d" % ((i * 3 + j) % keys), b"value-%d-%d-%d" % (tag, i, j), T0 + i)
                               for j in range(3)]))
    lg.update_high_watermark(lg.next_offset)


def _compacted_log(path: Path) -> Log:
    """A log cleaned once (its old segments now small), then written to again: the next pass merges groups of
    several segments into one."""
    cfg = small_config(cleanup_policy="compact", segment_bytes=2048, delete_retention_ms=0)
    lg = Log.open(path, cfg)
    _append(lg, 20, 0)
    _append(lg, 40, 0, keys=3)  # k3..k6 keep their values in the first segments
    task, segments = _task(lg)
    _swap(lg, segments, clean(task))
    _append(lg, 30, 1, keys=3)
    assert len(lg.segments) >= 4
    return lg


def _swap(lg: Log, segments: tuple[Any, ...], result: Any) -> list[bool]:
    by_base = {s.base_offset: s for s in segments}
    return [lg.replace_with_cleaned([by_base[b] for b in c.replaces], c) for c in result.segments]


def _task(lg: Log) -> tuple[CleanTask, tuple[Any, ...]]:
    view = lg.cleaning_view()
    return plan_pass(lg, view, view.cleanable(None, T0, 0), T0, memory_bytes=1 << 16)


def _state(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record a reader from the log start gets (a compacted log may end in a gap: reads then stop)."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = lg.log_start_offset
    while offset < lg.next_offset:
        region = lg.read(offset, 1 << 16)
        if region is None:
            break
        out += [(r.offset, r.key, r.value) for r in region_records(region) if r.offset >= offset]
        offset = region.end_offset
    return out


def _clean_into_copy(tmp_path: Path) -> tuple[list[Any], list[Any]]:
    """The records before and after a complete swap, from a throwaway log."""
    lg = _compacted_log(tmp_path / "reference" / "t-0")
    before = _state(lg)
    task, segments = _task(lg)
    result = clean(task)
    assert any(len(c.replaces) > 1 and c.size for c in result.segments), "no group of several segments to swap"
    assert all(_swap(lg, segments, result))
    after = _state(lg)
    lg.close()
    assert len(after) < len(before)
    return before, after


def test_a_crash_at_every_rename_of_the_swap_leaves_the_old_or_the_new_segments(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before, after = _clean_into_copy(tmp_path)
    real_replace = os.replace
    outcomes = []
    for crash_at in range(0, 200):
        lg = _compacted_log(tmp_path / f"run{crash_at}" / "t-0")
        task, segments = _task(lg)
        result = clean(task)
        by_base = {s.base_offset: s for s in segments}
        calls = 0

        def replace(src: Any, dst: Any, *, _at: int = crash_at) -> None:
            nonlocal calls
            if calls == _at:
                raise Crash(f"crash before rename {_at}: {src} -> {dst}")
            calls += 1
            real_replace(src, dst)

        monkeypatch.setattr(os, "replace", replace)
        crashed = False
        try:
            for c in result.segments:
                lg.replace_with_cleaned([by_base[b] for b in c.replaces], c)
        except Crash:
            crashed = True
        finally:
            monkeypatch.setattr(os, "replace", real_replace)
        disk = tmp_path / f"disk{crash_at}" / "t-0"
        shutil.copytree(lg.directory, disk)  # what the disk holds at the crash
        reopened = Log.open(disk, lg.config)
        state = _state(reopened)
        overlaps = [(a.base_offset, a.next_offset, b.base_offset) for a, b in zip(reopened.segments,
                                                                               reopened.segments[1:], strict=False)
                    if a.next_offset > b.base_offset]
        leftovers = [p.name for p in disk.iterdir() if p.name.endswith((CLEANED_SUFFIX, ".swap"))]
        reopened.close()
        lg.close()
        assert not leftovers, f"crash at rename {crash_at} left {leftovers}"
        assert not overlaps, f"crash at rename {crash_at}: old and new segments both live: {overlaps}"
        # Every group swaps on its own: each group's range is old or new, and the log is their union.
        assert _consistent(state, before, after), f"crash at rename {crash_at}: neither old nor new data:\n{state}"
        outcomes.append(state == after)
        if not crashed:
            break
    else:
        pytest.fail("the swap never completed without a crash")
    assert outcomes[0] is False and outcomes[-1] is True
    assert len(outcomes) > 8  # every rename of the swap was a crash point


def _consistent(state: list[Any], before: list[Any], after: list[Any]) -> bool:
    """``state`` is ``after`` on a prefix of groups and ``before`` on the rest (per-offset: each record of state
    is one the log held before, and every record of ``after`` is in it: no record the new segments keep is lost,
    and nothing is there twice)."""
    offsets = [s[0] for s in state]
    return (set(state) <= set(before) and set(after) <= set(state) and offsets == sorted(set(offsets)))


def test_leftovers_of_an_unfinished_pass_are_removed_and_the_old_segments_kept(tmp_path: Path) -> None:
    lg = _compacted_log(tmp_path / "t-0")
    before = _state(lg)
    task, _ = _task(lg)
    clean(task)  # the worker wrote its .cleaned files; the broker died before the swap
    (lg.directory / "cleaner-scratch").mkdir()
    (lg.directory / "cleaner-scratch" / "00000000000000000000.log").write_bytes(b"half written")
    assert any(p.name.endswith(CLEANED_SUFFIX) for p in lg.directory.iterdir())
    cfg = lg.config
    lg.close()
    reopened = Log.open(tmp_path / "t-0", cfg)
    assert _state(reopened) == before
    assert not any(p.name.endswith(CLEANED_SUFFIX) for p in reopened.directory.iterdir())
    assert not (reopened.directory / "cleaner-scratch").exists()
    reopened.close()


def test_a_pass_is_thrown_away_when_the_log_changed_meanwhile(tmp_path: Path) -> None:
    lg = _compacted_log(tmp_path / "t-0")
    task, segments = _task(lg)
    result = clean(task)
    lg.truncate_to(segments[1].base_offset + 1)  # a follower truncating into the cleaned range
    expected = _state(lg)
    swapped = _swap(lg, segments, result)
    assert not any(swapped[1:])  # the truncated segments are no longer the log's
    assert not any(p.name.endswith(CLEANED_SUFFIX) for p in lg.directory.iterdir())
    if not swapped[0]:
        assert _state(lg) == expected
    lg.close()
