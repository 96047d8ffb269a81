"""A disk failure of a cleaning pass (the cleaned files do not fit a full disk, for real: a small tmpfs) takes the
log's directory offline, as Kafka's cleaner does; nothing stored is lost, and no cleaner file outlives the repair."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odradek.clock import ManualClock
from odradek.protocol.errors import StorageError
from odradek.protocol.records import RecordInput, build_batch
from odradek.storage.cleaner.clean import CLEANED_SUFFIX
from odradek.storage.manager import LogManager
from tests.storage.helpers import T0, all_records, fill_disk, grow_tmpfs, small_config, tmpfs


def test_a_pass_that_fills_the_disk_takes_the_directory_offline_and_loses_nothing(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with tmpfs(tmp_path / "tiny", "512k") as disk:
        cfg = small_config(cleanup_policy="compact", segment_bytes=32 * 1024, min_cleanable_dirty_ratio=0.01)
        mgr = LogManager([disk], cfg, clock=clock, background_flush=False)
        mgr.startup()
        lg = mgr.create_log("t", 0)
        for i in range(150):
            lg.append(build_batch([RecordInput(b"k%d" % (i % 7), os.urandom(600), T0)]))
        lg.update_high_watermark(lg.next_offset)
        before = [(r.offset, r.key, r.value) for r in all_records(lg)]
        filler = fill_disk(disk)
        with pytest.raises(StorageError):
            assert mgr.cleaner.clean_once(in_process=True)
        assert disk in mgr.offline_dirs and mgr.is_offline("t", 0)
        assert "no space" in mgr.offline_dirs[disk].lower()
        mgr.shutdown()
        filler.unlink()
        grow_tmpfs(disk, "4m")  # repaired: the broker restarts
        again = LogManager([disk], cfg, clock=clock, background_flush=False)
        again.startup()
        lg = again.get_log("t", 0)
        assert lg is not None
        assert [(r.offset, r.key, r.value) for r in all_records(lg)] == before
        assert not [p.name for p in lg.directory.iterdir() if p.name.endswith((CLEANED_SUFFIX, ".swap"))]
        assert not (lg.directory / "cleaner-scratch").exists()
        again.shutdown()
