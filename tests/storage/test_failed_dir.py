"""A failed log directory (Kafka's offline log dir): a full disk, for real, on a small tmpfs.

The log manager owns two directories, one of them a tmpfs of a few pages. Filling it makes a write fail with
ENOSPC: that directory goes offline (its logs closed and forgotten, its partitions reported offline, nothing
more written there), the listeners hear it once, and the other directory keeps working. After the "repair"
(the tmpfs grown) a restart finds every record acknowledged before the failure, and none of the refused ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.clock import ManualClock
from odradek.protocol.errors import StorageError
from odradek.storage.log import Log
from odradek.storage.manager import CLEAN_SHUTDOWN_FILE, LogManager
from tests.storage.helpers import T0, all_records, batch, fill_disk, grow_tmpfs, small_config, tmpfs

FILL_ATTEMPTS = 2000  # appends of ~100 bytes: far more than a 64 KiB tmpfs holds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "tiny", "64k") as mount:
        yield mount


def grow(mount: Path) -> None:
    grow_tmpfs(mount, "8m")


def manager(dirs: list[Path], clock: ManualClock) -> LogManager:
    return LogManager(dirs, small_config(segment_bytes=16 * 1024), clock=clock, background_flush=False)


def fill_until_full(lg: Log, clock: ManualClock) -> tuple[int, StorageError]:
    """Append until the disk refuses; (records acknowledged, the error)."""
    acked = 0
    for _ in range(FILL_ATTEMPTS):
        try:
            lg.append(batch(3, ts=clock.milliseconds()))
        except StorageError as e:
            return acked, e
        acked += 3
    raise AssertionError(f"{FILL_ATTEMPTS} appends fitted on a 64 KiB disk")


def test_a_full_directory_goes_offline_and_the_other_keeps_working(
    tmp_path: Path, tiny_disk: Path, clock: ManualClock
) -> None:
    good = tmp_path / "good"
    mgr = manager([good, tiny_disk], clock)
    mgr.startup()
    told: list[tuple[Path, list[tuple[str, int]], str]] = []
    mgr.on_dir_failure.append(lambda d, tps, why: told.append((d, tps, why)))
    a = mgr.create_log("t", 0)  # the emptier directory first: good, then the tiny one
    b = mgr.create_log("t", 1)
    assert (mgr.dir_of("t", 0), mgr.dir_of("t", 1)) == (good.resolve(), tiny_disk.resolve())
    a.append(batch(2, ts=clock.milliseconds()))

    acked, error = fill_until_full(b, clock)
    assert acked > 0
    assert "No space left on device" in str(error)
    assert told and told[0][0] == tiny_disk.resolve() and told[0][1] == [("t", 1)] and "ENOSPC" not in told[0][2]
    assert len(told) == 1  # once per directory, however many writes fail afterwards
    assert mgr.offline_dirs.keys() == {tiny_disk.resolve()}
    assert mgr.is_offline("t", 1) and not mgr.is_offline("t", 0)
    assert mgr.get_log("t", 1) is None and b.closed
    assert mgr.offline_partitions() == [("t", 1)]
    with pytest.raises(StorageError, match="failed log directory"):
        mgr.get_or_create_log("t", 1)  # never recreated elsewhere: two copies would clash at the next start

    # the other directory goes on: appends, new logs (only there), checkpoints, a clean shutdown
    a.append(batch(2, ts=clock.milliseconds()))
    assert mgr.create_log("u", 0).directory.parent == good.resolve()
    mgr.tick()
    mgr.checkpoint()
    mgr.shutdown()
    assert (good / CLEAN_SHUTDOWN_FILE).exists()
    assert not (tiny_disk / CLEAN_SHUTDOWN_FILE).exists()  # the failed one is recovered at the next start
    assert len(told) == 1

    # repaired: every record acknowledged before the failure is there, none of the refused ones
    grow(tiny_disk)
    again = manager([good, tiny_disk], clock)
    again.startup()
    try:
        assert not again.offline_dirs
        back = again.get_log("t", 1)
        assert back is not None
        assert back.next_offset == acked
        assert len(all_records(back)) == acked
        assert again.get_log("t", 0) is not None and again.get_log("t", 0).next_offset == 4  # type: ignore[union-attr]
        back.append(batch(1, ts=clock.milliseconds()))
    finally:
        again.shutdown()


def test_a_failed_checkpoint_takes_its_directory_offline(tmp_path: Path, tiny_disk: Path, clock: ManualClock) -> None:
    good = tmp_path / "good"
    mgr = manager([good, tiny_disk], clock)
    mgr.startup()
    mgr.create_log("t", 0)
    b = mgr.create_log("t", 1)
    fill_disk(tiny_disk, chunk=4096)  # someone else fills the disk: no checkpoint fits any more
    mgr.checkpoint()
    assert tiny_disk.resolve() in mgr.offline_dirs and b.closed
    assert mgr.get_log("t", 0) is not None
    mgr.shutdown()


def test_every_directory_failed_is_fatal(tiny_disk: Path, clock: ManualClock) -> None:
    mgr = manager([tiny_disk], clock)
    mgr.startup()
    fill_until_full(mgr.create_log("t", 0), clock)
    assert mgr.all_offline
    with pytest.raises(StorageError, match="every log directory failed"):
        mgr.create_log("t", 1)
    mgr.shutdown()


def test_a_directory_failing_at_startup_is_offline_and_the_others_load(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    mgr = manager([good, bad], clock)
    mgr.startup()
    for p in range(2):
        mgr.create_log("t", p).append(batch(1, ts=clock.milliseconds()))
    bad_log = mgr.dir_of("t", 1)
    assert bad_log == bad.resolve()
    mgr.shutdown()

    real_open = Log.open.__func__  # type: ignore[attr-defined]

    def failing_open(cls: type[Log], directory: Path, *args: object, **kwargs: object) -> Log:
        if directory.parent == bad.resolve():
            raise StorageError(f"cannot open log directory {directory}: EIO") from OSError(5, "Input/output error")
        return real_open(cls, directory, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Log, "open", classmethod(failing_open))
    again = manager([good, bad], clock)
    again.startup()
    try:
        assert again.offline_dirs.keys() == {bad.resolve()}
        assert again.offline_partitions() == [("t", 1)]
        assert again.get_log("t", 0) is not None
    finally:
        again.shutdown()
    only_bad = manager([bad], clock)
    with pytest.raises(StorageError, match="every log directory failed"):
        only_bad.startup()
    monkeypatch.undo()
    repaired = manager([bad], clock)
    repaired.startup()  # the failed start released its lock: the repaired directory opens
    assert repaired.get_log("t", 1) is not None
    repaired.shutdown()
