"""The leader-epoch cache: Kafka's semantics, its checkpoint file, and a model-based property test."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import StorageError
from odradek.storage import leader_epoch
from odradek.storage.checkpoint import CheckpointError
from odradek.storage.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / LEADER_EPOCH_CHECKPOINT_FILENAME


def cache_with(path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(path)
    for epoch, start in entries:
        cache.assign(epoch, start)
    assert cache.entries == list(entries)
    return cache


def on_disk(path: Path) -> list[tuple[int, int]]:
    return LeaderEpochCache(path).entries


class CountingWrites:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = leader_epoch.write_atomically

        def counting(target: Path, data: bytes) -> None:
            self.count += 1
            real(target, data)

        monkeypatch.setattr(leader_epoch, "write_atomically", counting)


# ---- basics and the file -------------------------------------------------------------------------


def test_new_cache_is_empty_and_writes_nothing(path: Path) -> None:
    cache = LeaderEpochCache(path)
    assert cache.entries == []
    assert cache.latest_epoch is None
    assert cache.epoch_for_offset(0) is None
    assert not path.exists()


def test_assign_persists_in_kafka_format(path: Path) -> None:
    cache = LeaderEpochCache(path)
    cache.assign(0, 0)
    assert path.read_text() == "0\n1\n0 0\n"
    cache.assign(3, 1200)
    assert path.read_text() == "0\n2\n0 0\n3 1200\n"
    assert cache.latest_epoch == 3
    assert on_disk(path) == [(0, 0), (3, 1200)]
    assert not path.with_name(path.name + ".tmp").exists()


def test_reload_from_disk(path: Path) -> None:
    path.write_text("0\n3\n1 0\n4 10\n7 25\n")
    cache = LeaderEpochCache(path)
    assert cache.entries == [(1, 0), (4, 10), (7, 25)]
    assert cache.latest_epoch == 7


def test_zero_length_file_loads_as_empty(path: Path) -> None:
    path.write_bytes(b"")
    assert LeaderEpochCache(path).entries == []


def test_entries_is_a_copy(path: Path) -> None:
    cache = cache_with(path, (1, 0))
    cache.entries.append((9, 9))
    assert cache.entries == [(1, 0)]


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("1\n0\n", 1),  # version
        ("0\n2\n1 0\n", 2),  # count mismatch
        ("0\n1\n1\n", 3),  # one field
        ("0\n1\n1 0 0\n", 3),  # three fields
        ("0\n1\n1 x\n", 3),  # not a number
        ("0\n1\n-1 0\n", 3),  # negative epoch
        ("0\n1\n1 -5\n", 3),  # negative start offset
        ("0\n2\n2 0\n1 10\n", 4),  # epochs decrease
        ("0\n2\n1 0\n1 10\n", 4),  # epoch repeated
        ("0\n2\n1 10\n2 10\n", 4),  # start offsets not strictly increasing
        ("0\n2\n1 10\n2 5\n", 4),  # start offsets decrease
    ],
)
def test_malformed_file_raises_checkpoint_error(path: Path, content: str, line: int) -> None:
    path.write_text(content)
    with pytest.raises(CheckpointError) as info:
        LeaderEpochCache(path)
    assert str(path) in str(info.value)
    assert f"line {line}:" in str(info.value)


def test_negative_assignment_is_refused(path: Path) -> None:
    cache = LeaderEpochCache(path)
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)
    assert cache.entries == []


# ---- assign ----------------------------------------------------------------------------------------


def test_same_epoch_again_is_a_no_op(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = cache_with(path, (1, 0), (2, 6))
    writes = CountingWrites(monkeypatch)
    cache.assign(2, 10)
    cache.assign(2, 3)
    assert cache.entries == [(1, 0), (2, 6)]
    assert writes.count == 0


def test_lower_epoch_is_ignored_with_a_warning(
    path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache = cache_with(path, (1, 0), (3, 6))
    writes = CountingWrites(monkeypatch)
    with caplog.at_level(logging.WARNING, logger=leader_epoch.__name__):
        cache.assign(2, 20)
    assert cache.entries == [(1, 0), (3, 6)]
    assert writes.count == 0
    assert any("lower than the latest epoch 3" in r.getMessage() for r in caplog.records)


def test_higher_epoch_with_lower_start_truncates_conflicting_entries(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = cache_with(path, (1, 0), (2, 6), (3, 10))
    with caplog.at_level(logging.WARNING, logger=leader_epoch.__name__):
        cache.assign(5, 6)
    assert cache.entries == [(1, 0), (5, 6)]
    assert on_disk(path) == [(1, 0), (5, 6)]
    assert any("truncates conflicting entries" in r.getMessage() for r in caplog.records)


def test_higher_epoch_at_same_start_replaces_empty_epoch_quietly(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = cache_with(path, (1, 0), (2, 6))
    with caplog.at_level(logging.WARNING, logger=leader_epoch.__name__):
        cache.assign(3, 6)  # epoch 2 wrote nothing
    assert cache.entries == [(1, 0), (3, 6)]
    assert caplog.records == []


def test_higher_epoch_below_every_start_replaces_everything(path: Path) -> None:
    cache = cache_with(path, (1, 5), (2, 6))
    cache.assign(4, 0)
    assert cache.entries == [(4, 0)]


def test_every_change_is_persisted(path: Path) -> None:
    cache = LeaderEpochCache(path)
    steps = [
        lambda: cache.assign(1, 0),
        lambda: cache.assign(2, 5),
        lambda: cache.assign(4, 9),
        lambda: cache.truncate_from_end(7),
        lambda: cache.assign(5, 12),
        lambda: cache.truncate_from_start(6),
        lambda: cache.clear(),
    ]
    for step in steps:
        step()
        assert on_disk(path) == cache.entries
    assert path.read_text() == "0\n0\n"


def test_failed_persist_leaves_cache_and_file_unchanged(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = cache_with(path, (1, 0), (2, 6))

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    for change in (
        lambda: cache.assign(3, 4),
        lambda: cache.truncate_from_end(3),
        lambda: cache.truncate_from_start(7),
        cache.clear,
    ):
        with pytest.raises(StorageError):
            change()
        assert cache.entries == [(1, 0), (2, 6)]
    monkeypatch.undo()
    assert on_disk(path) == [(1, 0), (2, 6)]
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


# ---- lookups ---------------------------------------------------------------------------------------


def test_epoch_for_offset(path: Path) -> None:
    cache = cache_with(path, (1, 5), (3, 10), (4, 20))
    assert cache.epoch_for_offset(0) is None
    assert cache.epoch_for_offset(4) is None
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(9) == 1
    assert cache.epoch_for_offset(10) == 3
    assert cache.epoch_for_offset(19) == 3
    assert cache.epoch_for_offset(20) == 4
    assert cache.epoch_for_offset(10**12) == 4


def test_end_offset_for_empty_cache(path: Path) -> None:
    cache = LeaderEpochCache(path)
    assert cache.end_offset_for(0, 100) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert cache.end_offset_for(5, 100) == (-1, -1)


def test_end_offset_for(path: Path) -> None:
    cache = cache_with(path, (2, 5), (4, 10), (7, 20))
    leo = 30
    # the latest epoch ends at the log end
    assert cache.end_offset_for(7, leo) == (7, leo)
    # a known earlier epoch ends where the next one starts
    assert cache.end_offset_for(2, leo) == (2, 10)
    assert cache.end_offset_for(4, leo) == (4, 20)
    # an unknown epoch between known ones: the largest known epoch below it, and the next start
    assert cache.end_offset_for(3, leo) == (2, 10)
    assert cache.end_offset_for(5, leo) == (4, 20)
    assert cache.end_offset_for(6, leo) == (4, 20)
    # above the latest epoch: undefined
    assert cache.end_offset_for(8, leo) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    # undefined requested epoch: undefined
    assert cache.end_offset_for(UNDEFINED_EPOCH, leo) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_end_offset_for_epoch_before_first_entry_is_first_start(path: Path) -> None:
    # As Kafka's LeaderEpochFileCache.endOffsetFor: the requested epoch itself, ending where the
    # first known epoch starts (its records are gone, e.g. after the log start advanced).
    cache = cache_with(path, (2, 5), (4, 10))
    assert cache.end_offset_for(0, 30) == (0, 5)
    assert cache.end_offset_for(1, 30) == (1, 5)


def test_end_offset_for_single_entry(path: Path) -> None:
    cache = cache_with(path, (3, 0))
    assert cache.end_offset_for(3, 42) == (3, 42)
    assert cache.end_offset_for(2, 42) == (2, 0)
    assert cache.end_offset_for(4, 42) == (-1, -1)


# ---- truncation ------------------------------------------------------------------------------------


def test_truncate_from_end(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = cache_with(path, (1, 0), (2, 6), (3, 10))
    writes = CountingWrites(monkeypatch)
    cache.truncate_from_end(11)  # nothing starts at or after 11
    assert writes.count == 0
    cache.truncate_from_end(10)  # exclusive end: the epoch starting at 10 goes
    assert cache.entries == [(1, 0), (2, 6)]
    cache.truncate_from_end(3)
    assert cache.entries == [(1, 0)]
    assert on_disk(path) == [(1, 0)]
    cache.truncate_from_end(-1)  # undefined offset: no change, as in Kafka
    assert cache.entries == [(1, 0)]
    cache.truncate_from_end(0)
    assert cache.entries == []
    assert writes.count == 3


def test_truncate_from_start_moves_covering_epoch(path: Path) -> None:
    cache = cache_with(path, (1, 0), (2, 6), (3, 10))
    cache.truncate_from_start(8)
    assert cache.entries == [(2, 8), (3, 10)]
    assert on_disk(path) == [(2, 8), (3, 10)]


def test_truncate_from_start_at_an_epoch_start_drops_earlier_epochs(path: Path) -> None:
    cache = cache_with(path, (1, 0), (2, 6), (3, 10))
    cache.truncate_from_start(6)
    assert cache.entries == [(2, 6), (3, 10)]


def test_truncate_from_start_past_every_start_keeps_latest_epoch(path: Path) -> None:
    cache = cache_with(path, (1, 0), (2, 6), (3, 10))
    cache.truncate_from_start(50)
    assert cache.entries == [(3, 50)]


def test_truncate_from_start_that_changes_nothing_does_not_write(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = cache_with(path, (1, 5), (2, 8))
    writes = CountingWrites(monkeypatch)
    cache.truncate_from_start(3)  # before the first entry
    cache.truncate_from_start(5)  # exactly at the first entry
    assert cache.entries == [(1, 5), (2, 8)]
    assert writes.count == 0
    LeaderEpochCache(path.with_name("other")).truncate_from_start(10)  # empty cache
    assert writes.count == 0


def test_clear(path: Path) -> None:
    cache = cache_with(path, (1, 0), (2, 6))
    cache.clear()
    assert cache.entries == []
    assert cache.latest_epoch is None
    assert on_disk(path) == []
    cache.assign(0, 0)  # after a clear any epoch may be assigned
    assert cache.entries == [(0, 0)]


# ---- model-based property test ---------------------------------------------------------------------


class Model:
    """The cache's rules written as plainly as possible: a list rewritten on every operation."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch: int, start: int) -> None:
        if self.entries and epoch <= self.entries[-1][0]:
            return
        self.entries = [(e, s) for e, s in self.entries if s < start] + [(epoch, start)]

    def truncate_from_end(self, end: int) -> None:
        if end >= 0:
            self.entries = [(e, s) for e, s in self.entries if s < end]

    def truncate_from_start(self, start: int) -> None:
        below = [(e, s) for e, s in self.entries if s <= start]
        if below:
            above = [(e, s) for e, s in self.entries if s > start]
            self.entries = [(below[-1][0], start), *above]

    def clear(self) -> None:
        self.entries = []

    def epoch_for_offset(self, offset: int) -> int | None:
        found = None
        for e, s in self.entries:
            if s <= offset:
                found = e
        return found

    def end_offset_for(self, requested: int, leo: int) -> tuple[int, int]:
        if requested == -1 or not self.entries:
            return (-1, -1)
        if requested == self.entries[-1][0]:
            return (requested, leo)
        later = [(e, s) for e, s in self.entries if e > requested]
        if not later:
            return (-1, -1)
        earlier = [e for e, _ in self.entries if e <= requested]
        return (earlier[-1] if earlier else requested, later[0][1])


# Narrow ranges, so that offsets often coincide with entries' start offsets (the edge cases).
epochs_st = st.integers(min_value=0, max_value=8)
offsets_st = st.integers(min_value=0, max_value=12)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), epochs_st, offsets_st),
        st.tuples(st.just("truncate_from_end"), st.integers(min_value=-1, max_value=12)),
        st.tuples(st.just("truncate_from_start"), offsets_st),
        st.tuples(st.just("clear")),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_cache_matches_model(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / LEADER_EPOCH_CHECKPOINT_FILENAME
        cache = LeaderEpochCache(path)
        model = Model()
        for name, *args in ops:
            getattr(cache, name)(*args)
            getattr(model, name)(*args)
            assert cache.entries == model.entries
            if path.exists():
                assert LeaderEpochCache(path).entries == cache.entries
            else:
                assert cache.entries == []
            epochs = [e for e, _ in cache.entries]
            starts = [s for _, s in cache.entries]
            assert epochs == sorted(set(epochs)) and starts == sorted(set(starts))
            assert cache.latest_epoch == (epochs[-1] if epochs else None)
            for offset in range(-1, 15):
                assert cache.epoch_for_offset(offset) == model.epoch_for_offset(offset)
            for requested in range(-1, 11):
                assert cache.end_offset_for(requested, 99) == model.end_offset_for(requested, 99)
        assert sorted(p.name for p in Path(d).iterdir()) in ([], [path.name])
