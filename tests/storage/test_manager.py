"""The log manager: data directories, lock file, clean-shutdown marker, recovery, checkpoints, retention."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from odradek.clock import ManualClock
from odradek.protocol.errors import ErrorCode, StorageError
from odradek.storage import checkpoint as checkpoint_module
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.manager import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOCK_FILE,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    DataDirLockedError,
    LogExistsError,
    LogManager,
)
from odradek.storage.segment import LogSegment
from tests.storage.helpers import T0, all_records, batch, small_config, snapshot

CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def manager(dirs: list[Path], clock: ManualClock, **kwargs: object) -> LogManager:
    kwargs.setdefault("background_flush", False)
    return LogManager(dirs, small_config(), clock=clock, **kwargs)  # type: ignore[arg-type]


def started(dirs: list[Path], clock: ManualClock, **kwargs: object) -> LogManager:
    mgr = manager(dirs, clock, **kwargs)
    mgr.startup()
    return mgr


def fill(mgr: LogManager, topic: str, partition: int, batches: int) -> None:
    log = mgr.get_or_create_log(topic, partition)
    for _ in range(batches):
        log.append(batch(3, ts=mgr.clock.milliseconds()))
    log.update_high_watermark(log.next_offset)  # as the broker does once records are acknowledged


class RecoverySpy:
    """Counts LogSegment.recover calls (and can forbid them)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, forbid: bool = False) -> None:
        self.calls = 0
        real = LogSegment.recover

        def spy(seg: LogSegment, *args: object, **kwargs: object) -> int:
            if forbid:
                raise AssertionError(f"recover() called for {seg.log_path} after a clean shutdown")
            self.calls += 1
            return real(seg, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(LogSegment, "recover", spy)


# ---- startup and shutdown ---------------------------------------------------------------------------


def test_startup_on_an_empty_directory(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "data"
    mgr = started([d], clock)
    assert (d / LOCK_FILE).exists()
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()
    for name in CHECKPOINTS:
        assert OffsetCheckpointFile(d / name).read() == {}
    assert list(mgr.logs()) == []
    assert mgr.get_log("t", 0) is None
    mgr.shutdown()
    assert (d / CLEAN_SHUTDOWN_FILE).exists()


def test_create_log_requires_startup_and_refuses_duplicates(tmp_path: Path, clock: ManualClock) -> None:
    mgr = manager([tmp_path / "data"], clock)
    with pytest.raises(StorageError, match="startup"):
        mgr.create_log("t", 0)
    mgr.startup()
    log = mgr.create_log("t", 0)
    assert mgr.get_log("t", 0) is log
    assert mgr.get_or_create_log("t", 0) is log
    with pytest.raises(LogExistsError):
        mgr.create_log("t", 0)
    assert log.directory == (tmp_path / "data" / "t-0").resolve()
    mgr.shutdown()


def test_clean_shutdown_then_reopen_skips_recovery(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "data"
    mgr = started([d], clock)
    fill(mgr, "orders", 0, 80)
    fill(mgr, "orders", 1, 5)
    before = {tp: all_records(mgr.get_log(*tp)) for tp in [("orders", 0), ("orders", 1)]}
    segments_before = len(mgr.get_log("orders", 0).segments)
    assert segments_before > 2
    mgr.shutdown()
    assert (d / CLEAN_SHUTDOWN_FILE).exists()
    assert OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).read() == {("orders", 0): 240, ("orders", 1): 15}
    files = snapshot(d)

    RecoverySpy(monkeypatch, forbid=True)
    again = started([d], clock)
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()  # removed at startup, before any write
    for tp, records in before.items():
        log = again.get_log(*tp)
        assert log is not None
        assert all_records(log) == records
        assert log.recovery_point == log.next_offset
    assert len(again.get_log("orders", 0).segments) == segments_before
    # the segment files themselves were not rewritten
    for name, content in files.items():
        if name.endswith(".log"):
            assert (d / name).read_bytes() == content
    again.get_log("orders", 0).append(batch(1))
    assert again.get_log("orders", 0).next_offset == 241
    again.shutdown()


def test_unclean_reopen_recovers_from_the_recovery_point(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "data"
    mgr = started([d], clock)
    fill(mgr, "t", 0, 40)
    log = mgr.get_log("t", 0)
    mgr.checkpoint()
    rp = log.recovery_point
    fill(mgr, "t", 0, 5)  # written after the last checkpoint
    end = log.next_offset
    active = log.active_segment
    # a crash: copy the directory as it is while the broker runs, then tear a write at the tail
    crashed = tmp_path / "crashed"
    shutil.copytree(d, crashed)
    mgr.shutdown()
    copy_of_active = crashed / "t-0" / active.log_path.name
    with open(copy_of_active, "ab") as f:
        f.write(batch(4)[:-3])
    assert not (crashed / CLEAN_SHUTDOWN_FILE).exists()

    spy = RecoverySpy(monkeypatch)
    again = started([crashed], clock)
    recovered = again.get_log("t", 0)
    assert spy.calls >= 1
    # only segments from the one holding the recovery point on are scanned
    assert 0 < rp < end
    assert spy.calls == sum(1 for s in recovered.segments if s.next_offset > rp) < len(recovered.segments)
    assert recovered.next_offset == end
    assert os.path.getsize(copy_of_active) == recovered.active_segment.size
    assert [r.offset for r in all_records(recovered)] == list(range(end))
    assert recovered.recovery_point == end  # recovery flushes what it kept
    again.shutdown()


def test_unclean_reopen_without_any_checkpoint_scans_everything(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "data"
    mgr = started([d], clock)
    fill(mgr, "t", 0, 30)
    nsegments = len(mgr.get_log("t", 0).segments)
    mgr.shutdown()
    (d / CLEAN_SHUTDOWN_FILE).unlink()
    for name in CHECKPOINTS:
        (d / name).unlink()
    spy = RecoverySpy(monkeypatch)
    again = started([d], clock)
    assert spy.calls == nsegments
    assert again.get_log("t", 0).next_offset == 90
    again.shutdown()


# ---- the lock file -------------------------------------------------------------------------------


def test_lock_prevents_a_second_manager(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "data"
    first = started([d], clock)
    fill(first, "t", 0, 3)
    files = snapshot(d)
    second = manager([d], clock)
    with pytest.raises(DataDirLockedError) as exc_info:
        second.startup()
    assert exc_info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert "in use" in str(exc_info.value)
    assert snapshot(d) == files  # the loser touched nothing
    first.get_log("t", 0).append(batch(1))  # the owner is unaffected
    first.shutdown()
    third = started([d], clock)  # released at shutdown
    assert third.get_log("t", 0).next_offset == 10
    third.shutdown()


def test_failed_lock_releases_the_directories_already_locked(tmp_path: Path, clock: ManualClock) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    holder = started([b], clock)
    loser = manager([a, b], clock)
    with pytest.raises(DataDirLockedError):
        loser.startup()
    other = started([a], clock)  # a was released when b could not be locked
    other.shutdown()
    holder.shutdown()


# ---- checkpoints ---------------------------------------------------------------------------------


def test_checkpoints_are_written_and_read_back(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "data"
    mgr = started([d], clock)
    fill(mgr, "t", 0, 40)
    fill(mgr, "u", 3, 2)
    log = mgr.get_log("t", 0)
    log.update_high_watermark(100)
    log.delete_records_before(50)
    log.flush()
    mgr.checkpoint()
    assert OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 120, ("u", 3): 0}
    assert OffsetCheckpointFile(d / LOG_START_CHECKPOINT).read() == {("t", 0): 50, ("u", 3): 0}
    assert OffsetCheckpointFile(d / HIGH_WATERMARK_CHECKPOINT).read() == {("t", 0): 100, ("u", 3): 6}
    assert (d / LOG_START_CHECKPOINT).read_text() == "0\n2\nt 0 50\nu 3 0\n"
    mgr.shutdown()
    again = started([d], clock)
    log = again.get_log("t", 0)
    assert (log.log_start_offset, log.high_watermark, log.recovery_point, log.next_offset) == (50, 100, 120, 120)
    assert all_records(log)[0].offset == 50
    again.shutdown()


def test_checkpoints_are_replaced_atomically(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "data"
    mgr = started([d], clock)
    fill(mgr, "t", 0, 2)
    mgr.checkpoint()
    old = {name: (d / name).read_bytes() for name in CHECKPOINTS}
    replaced: list[tuple[str, str]] = []
    real_replace = os.replace

    def recording_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        replaced.append((Path(src).name, Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(checkpoint_module.os, "replace", recording_replace)
    fill(mgr, "t", 0, 2)
    mgr.get_log("t", 0).flush()
    mgr.checkpoint()
    for name in CHECKPOINTS:
        assert (name + ".tmp", name) in replaced  # written aside, then renamed over the old file

    # a failure before the rename leaves the previous checkpoint whole
    def failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_module.os, "replace", failing_replace)
    current = {name: (d / name).read_bytes() for name in CHECKPOINTS}
    assert current != old
    fill(mgr, "t", 0, 2)
    mgr.get_log("t", 0).flush()
    mgr.checkpoint()  # a disk failure: the directory goes offline (see the failed-directory tests below)
    assert d in mgr.offline_dirs
    assert {name: (d / name).read_bytes() for name in CHECKPOINTS} == current
    assert not any(p.name.endswith(".tmp") for p in d.iterdir())
    monkeypatch.setattr(checkpoint_module.os, "replace", real_replace)
    mgr.shutdown()


# ---- deleting logs -------------------------------------------------------------------------------


def test_delete_log(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "data"
    mgr = started([d], clock)
    fill(mgr, "t", 0, 20)
    fill(mgr, "t", 1, 2)
    mgr.checkpoint()
    mgr.delete_log("t", 0)
    assert mgr.get_log("t", 0) is None
    assert not (d / "t-0").exists()
    assert not any(p.name.startswith("t-0") for p in d.iterdir())
    for name in CHECKPOINTS:
        assert ("t", 0) not in OffsetCheckpointFile(d / name).read()
        assert ("t", 1) in OffsetCheckpointFile(d / name).read()
    with pytest.raises(KeyError):
        mgr.delete_log("t", 0)
    fresh = mgr.create_log("t", 0)
    assert fresh.next_offset == 0
    mgr.shutdown()


def test_startup_finishes_interrupted_deletions(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "data"
    mgr = started([d], clock)
    fill(mgr, "t", 0, 3)
    mgr.shutdown()
    os.rename(d / "t-0", d / "t-0.0123abcd-delete")  # a crash between rename and removal
    again = started([d], clock)
    assert again.get_log("t", 0) is None
    assert not (d / "t-0.0123abcd-delete").exists()
    again.shutdown()


# ---- periodic work -------------------------------------------------------------------------------


def test_tick_applies_retention_and_delayed_deletion(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "data"
    mgr = LogManager(
        [d],
        small_config(retention_ms=60_000, file_delete_delay_ms=30_000),
        clock=clock,
        retention_check_interval_ms=10_000,
        background_flush=False,
    )
    mgr.startup()
    fill(mgr, "t", 0, 80)
    log = mgr.get_log("t", 0)
    nsegments = len(log.segments)
    assert nsegments > 2
    mgr.tick()  # nothing is old yet
    assert len(log.segments) == nsegments
    clock.advance(60_001)
    log.append(batch(1, ts=clock.milliseconds()))  # a young active segment
    log.update_high_watermark(log.next_offset)
    mgr.tick()
    assert len(log.segments) == 1
    assert log.log_start_offset == log.active_segment.base_offset
    assert any(n.endswith(".deleted") for n in os.listdir(d / "t-0"))
    clock.advance(30_000)
    mgr.tick()
    assert not any(n.endswith(".deleted") for n in os.listdir(d / "t-0"))
    mgr.shutdown()


def test_tick_respects_the_retention_check_interval(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "data"
    mgr = LogManager([d], small_config(retention_ms=1_000), clock=clock, retention_check_interval_ms=50_000,
                     background_flush=False)
    mgr.startup()
    mgr.tick()  # the first tick runs the check
    fill(mgr, "t", 0, 40)
    log = mgr.get_log("t", 0)
    nsegments = len(log.segments)
    clock.advance(2_000)
    log.append(batch(1, ts=clock.milliseconds()))
    log.update_high_watermark(log.next_offset)
    mgr.tick()
    assert len(log.segments) == nsegments  # not due yet
    clock.advance(48_000)
    mgr.tick()
    assert len(log.segments) == 1
    mgr.shutdown()


def test_tick_applies_flush_ms_and_writes_checkpoints(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "data"
    mgr = LogManager([d], small_config(flush_ms=5_000), clock=clock, checkpoint_interval_ms=10_000,
                     background_flush=False)
    mgr.startup()
    fill(mgr, "t", 0, 2)
    log = mgr.get_log("t", 0)
    clock.advance(5_000)
    mgr.tick()
    assert log.recovery_point == 6
    clock.advance(5_000)
    mgr.tick()
    assert OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 6}
    mgr.shutdown()


# ---- several data directories ----------------------------------------------------------------------


def test_two_data_dirs_spread_logs_and_keep_them_across_restarts(tmp_path: Path, clock: ManualClock) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    mgr = started([a, b], clock)
    for p in range(6):
        fill(mgr, "t", p, 1 + p)
    in_a = {p.name for p in a.iterdir() if p.is_dir()}
    in_b = {p.name for p in b.iterdir() if p.is_dir()}
    assert len(in_a) == len(in_b) == 3
    assert in_a | in_b == {f"t-{p}" for p in range(6)}
    mgr.shutdown()
    for d, names in ((a, in_a), (b, in_b)):
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
        assert {f"t-{tp[1]}" for tp in OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).read()} == names
    again = started([a, b], clock)
    for p in range(6):
        log = again.get_log("t", p)
        assert log is not None and log.next_offset == 3 * (1 + p)
        assert log.directory.parent == (a if f"t-{p}" in in_a else b).resolve()
    again.shutdown()


def test_a_partition_in_two_data_dirs_is_refused(tmp_path: Path, clock: ManualClock) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    mgr = started([a], clock)
    fill(mgr, "t", 0, 1)
    mgr.shutdown()
    shutil.copytree(a / "t-0", b / "t-0")
    with pytest.raises(StorageError, match="two log directories"):
        started([a, b], clock)


def test_background_flush_after_roll(tmp_path: Path, clock: ManualClock) -> None:
    d = tmp_path / "data"
    mgr = started([d], clock, background_flush=True)
    fill(mgr, "t", 0, 40)
    log = mgr.get_log("t", 0)
    mgr.shutdown()  # waits for the scheduled flushes, then flushes everything
    assert log.recovery_point == log.next_offset
    again = started([d], clock)
    assert again.get_log("t", 0).next_offset == 120
    again.shutdown()
