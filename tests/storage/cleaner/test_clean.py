"""Log compaction on real logs: a ``LogCleaner`` (passes run in this process) over one ``Log`` in a temporary data
directory, against a model of what was written.

What a compacted log must give a reader from its start: every surviving record at its original offset with its
original key and value, and, applying the records in offset order, the latest value of every key (a deleted key
absent). Also: tombstones kept for ``delete.retention.ms`` after the pass that stamped their horizon, offset maps
smaller than the dirty part cleaning in several passes, ``min.compaction.lag.ms``, the cleaner's checkpoint file,
transactions (aborted data gone, markers, read_committed, live producers' last batches) and a corrupt segment."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.clock import ManualClock
from odradek.protocol import batch as rb
from odradek.protocol.compression import Compression
from odradek.protocol.records import (
    ControlType,
    Record,
    RecordInput,
    build_batch,
    decode_records,
    iter_batches,
    parse_control_key,
)
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.cleaner.batch_filter import has_delete_horizon
from odradek.storage.cleaner.clean import CleanResult, CleanTask, clean
from odradek.storage.cleaner.cleaner import CLEANER_CHECKPOINT, CleanerConfig, LogCleaner, plan_pass, swap_in
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.producer_state import OutOfOrderSequenceError, ProducerStateManager
from odradek.storage.segment import LOG_SUFFIX
from tests.storage.helpers import T0, small_config, snapshot
from tests.storage.txn_reader import committed_records

TP = ("t", 0)
DAY = 86_400_000
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def compact_config(**overrides: Any) -> LogConfig:
    base: dict[str, Any] = {"cleanup_policy": "compact", "segment_bytes": 700, "min_cleanable_dirty_ratio": 0.0,
                            "delete_retention_ms": 0}
    base.update(overrides)
    return small_config(**base)


class Harness:
    """One log ``<data_dir>/t-0`` and a cleaner over it; ``reopen`` swaps in a new ``Log`` the cleaner then sees."""

    def __init__(self, data_dir: Path, config: LogConfig, clock: ManualClock | None = None, *,
                 producer_state: bool = False) -> None:
        self.data_dir = data_dir
        self.config = config
        self.clock = clock or ManualClock(T0)
        self.producer_state = producer_state
        self.log = self._open()
        self.cleaner = self.new_cleaner()

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "t-0"

    def _open(self) -> Log:
        state = ProducerStateManager(self.log_dir, "t-0", expiration_ms=DAY) if self.producer_state else None
        return Log.open(self.log_dir, self.config, clock=self.clock, producer_state=state)

    def new_cleaner(self) -> LogCleaner:
        return LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 20), lambda: iter([(TP, self.data_dir, self.log)]),
                          clock=self.clock)

    def clean(self, cleaner: LogCleaner | None = None) -> bool:
        """One pass, if one is due (the high watermark at the log end first: cleaning stops at the LSO)."""
        self.log.update_high_watermark(self.log.next_offset)
        return (cleaner or self.cleaner).clean_once(in_process=True)

    def clean_all(self) -> int:
        passes = 0
        while self.clean():
            passes += 1
            assert passes < 50
        return passes

    def reopen(self) -> None:
        self.log.close()
        self.log = self._open()
        self.log.update_high_watermark(self.log.next_offset)

    @property
    def checkpoint(self) -> int | None:
        return self.cleaner.first_dirty_offset(self.data_dir, TP)

    def append(self, records: list[tuple[bytes | None, bytes | None]], **kw: Any) -> int:
        now = self.clock.milliseconds()
        info = self.log.append(build_batch([RecordInput(k, v, now) for k, v in records], **kw))
        return info.first_offset


def batches_of(log: Log) -> list[tuple[rb.BatchHeader, list[Record]]]:
    """Every batch a reader from the log start gets (control and emptied batches included), with its records."""
    out: list[tuple[rb.BatchHeader, list[Record]]] = []
    offset = log.log_start_offset
    while offset < log.next_offset:
        region = log.read(offset, 1 << 20)
        if region is None:
            break
        data = region.read_bytes()
        last = None
        for pos, h in iter_batches(data):
            if h.last_offset >= offset:
                out.append((h, decode_records(data[pos : pos + h.size])))
            last = h
        assert last is not None
        offset = last.next_offset
    return out


def data_records(log: Log) -> list[Record]:
    return [r for h, rs in batches_of(log) if not h.is_control for r in rs]


def reader_state(records: list[Record]) -> dict[bytes | None, bytes]:
    """What a consumer reading from the start ends with: the last value of each key, deleted keys absent."""
    state: dict[bytes | None, bytes] = {}
    for r in records:
        if r.value is None:
            state.pop(r.key, None)
        else:
            state[r.key] = r.value
    return state


def active_file(log: Log) -> tuple[int, bytes]:
    seg = log.segments[-1]
    return seg.base_offset, (log.directory / (f"{seg.base_offset:020d}" + LOG_SUFFIX)).read_bytes()


# -- the model -----------------------------------------------------------------------------------------------------

KEYS = [b"k%d" % i for i in range(6)]
_append = st.tuples(st.just("append"),
                    st.lists(st.tuples(st.integers(0, len(KEYS) - 1), st.sampled_from([False] * 4 + [True])),
                             min_size=1, max_size=6),
                    st.sampled_from(CODECS))
# bursts of appends, each followed by a pass, a roll, time passing or a restart
_then = st.one_of(st.just(("clean",)), st.just(("clean",)), st.just(("roll",)),
                  st.tuples(st.just("tick"), st.integers(0, 3_000)), st.just(("reopen",)))
scripts = st.lists(st.tuples(st.lists(_append, min_size=1, max_size=5), _then), min_size=3, max_size=14).map(
    lambda steps: [op for appends, then in steps for op in [*appends, then]])


@dataclass
class Model:
    written: dict[int, tuple[bytes, bytes | None]] = field(default_factory=dict)  # offset -> (key, value)

    def state(self) -> dict[bytes | None, bytes]:
        latest: dict[bytes, bytes | None] = {}
        for offset in sorted(self.written):
            k, v = self.written[offset]
            latest[k] = v
        return {k: v for k, v in latest.items() if v is not None}


def check_log(h: Harness, model: Model) -> None:
    records = data_records(h.log)
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    for r in records:
        assert model.written[r.offset] == (r.key, r.value), f"record at {r.offset} is not the one written there"
    assert reader_state(records) == model.state()
    # every latest value survives, and below the checkpoint each key appears once (the clean part is compacted)
    cp = h.checkpoint
    if cp is not None:
        below = [r.key for r in records if r.offset < cp]
        assert len(below) == len(set(below)), f"a key appears twice below the checkpoint {cp}"
    # batches do not overlap
    headers = [hd for hd, _ in batches_of(h.log)]
    for a, b in itertools.pairwise(headers):
        assert a.last_offset < b.base_offset


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts, st.sampled_from([0, 1_000, DAY]))
def test_compaction_keeps_what_a_reader_from_the_start_needs(script: list[tuple[Any, ...]], retention: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="clean-model-"))
    try:
        h = Harness(tmp, compact_config(delete_retention_ms=retention))
        model = Model()
        counter = 0
        for op in script:
            if op[0] == "append":
                records = []
                for k, tomb in op[1]:
                    counter += 1
                    records.append((KEYS[k], None if tomb else b"v%d-" % counter + b"." * 24))
                first = h.append(records, compression=op[2])
                for i, (k, v) in enumerate(records):
                    model.written[first + i] = (k, v)
            elif op[0] == "roll":
                h.log.roll()
            elif op[0] == "tick":
                h.clock.advance(op[1])
            elif op[0] == "reopen":
                before = data_records(h.log)
                h.reopen()
                assert data_records(h.log) == before
            else:
                base, active = active_file(h.log)
                h.clean()
                assert active_file(h.log) == (base, active), "the active segment must not change"
                check_log(h, model)
        h.log.roll()
        h.append([(b"tail", b"tail")])
        model.written[h.log.next_offset - 1] = (b"tail", b"tail")
        h.clean_all()
        check_log(h, model)
        before = batches_of(h.log)
        h.reopen()
        assert batches_of(h.log) == before
        check_log(h, model)
        h.log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_cleaned_log_is_smaller_and_each_key_left_once(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config())
    model = Model()
    for i in range(60):
        records = [(KEYS[(i + j) % len(KEYS)], b"value-%d-%d" % (i, j)) for j in range(4)]
        first = h.append(records, compression=CODECS[i % len(CODECS)])
        model.written.update({first + j: r for j, r in enumerate(records)})
    size = h.log.size
    assert len(h.log.segments) > 5
    assert h.clean() is True
    assert h.log.size < size / 3
    check_log(h, model)
    records = [r for r in data_records(h.log) if r.offset < h.log.segments[-1].base_offset]
    assert sorted(r.key for r in records) == sorted(set(r.key for r in records))
    assert h.cleaner.stats.passes == 1
    assert h.clean() is False  # nothing dirty left


# -- tombstones ----------------------------------------------------------------------------------------------------


def _tombstone(h: Harness, key: bytes) -> tuple[rb.BatchHeader, Record] | None:
    for hd, rs in batches_of(h.log):
        for r in rs:
            if r.key == key and r.value is None:
                return hd, r
    return None


def test_a_tombstone_stays_delete_retention_ms_after_the_pass_that_stamped_it(tmp_path: Path) -> None:
    d = 60_000
    h = Harness(tmp_path, compact_config(delete_retention_ms=d))
    h.append([(b"gone", b"1"), (b"kept", b"2")])
    tomb = h.append([(b"gone", None)])
    h.append([(b"other", b"3")])
    h.log.roll()
    h.append([(b"active", b"4")])

    h.clock.advance(5_000)
    first_pass = h.clock.milliseconds()
    assert h.clean() is True
    found = _tombstone(h, b"gone")
    assert found is not None
    hd, r = found
    assert r.offset == tomb and r.timestamp == T0  # the record's own timestamp never moves
    assert has_delete_horizon(hd) and hd.base_timestamp == first_pass + d
    plain = [hd for hd, rs in batches_of(h.log) if any(x.key == b"other" for x in rs)]
    assert plain and not has_delete_horizon(plain[0])  # no tombstone, no horizon
    assert reader_state(data_records(h.log)) == {b"kept": b"2", b"other": b"3", b"active": b"4"}

    def dirty_pass() -> None:  # new dirty data, rolled, so that a pass happens
        h.append([(b"filler-%d" % h.clock.milliseconds(), b"x")])
        h.log.roll()
        h.append([(b"active", b"5")])
        assert h.clean() is True

    h.clock.set(first_pass + d - 1)
    dirty_pass()
    found = _tombstone(h, b"gone")
    assert found is not None and found[0].base_timestamp == first_pass + d  # the horizon is not moved by a pass

    h.clock.set(first_pass + d)
    dirty_pass()
    assert _tombstone(h, b"gone") is None
    assert b"gone" not in reader_state(data_records(h.log))
    assert all(r.key != b"gone" for r in data_records(h.log))


def test_a_tombstone_superseded_by_a_value_goes_at_once(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config(delete_retention_ms=DAY))
    h.append([(b"k", b"1")])
    h.append([(b"k", None)])
    h.append([(b"k", b"2")])
    h.log.roll()
    h.append([(b"x", b"x")])
    assert h.clean() is True
    assert [(r.key, r.value) for r in data_records(h.log)] == [(b"k", b"2"), (b"x", b"x")]


# -- offset maps smaller than the dirty part ---------------------------------------------------------------------


def _task(lg: Log, checkpoint: int | None, now: int, memory_bytes: int) -> tuple[CleanTask, tuple[Any, ...]]:
    """The task ``LogCleaner._clean`` would build (its memory from ``memory_bytes`` instead of its config)."""
    view = lg.cleaning_view()
    return plan_pass(lg, view, view.cleanable(checkpoint, now, lg.config.min_compaction_lag_ms), now,
                     memory_bytes=memory_bytes)


def _pass(lg: Log, checkpoint: int | None, now: int, memory_bytes: int) -> tuple[CleanTask, CleanResult]:
    task, segments = _task(lg, checkpoint, now, memory_bytes)
    result = clean(task)
    assert swap_in(lg, segments, result)
    return task, result


def _passes_until_clean(lg: Log, now: int, memory_bytes: int) -> list[tuple[CleanTask, CleanResult]]:
    done = []
    checkpoint = None
    while True:
        task, result = _pass(lg, checkpoint, now, memory_bytes)
        done.append((task, result))
        assert result.end_offset > task.first_dirty, "a pass must make progress"
        assert result.end_offset <= task.first_uncleanable
        checkpoint = result.end_offset
        if checkpoint == task.first_uncleanable:
            return done
        assert len(done) < 100


TINY_MAP = 24 * 50  # 1080 bytes at load factor 0.9: 8 short keys


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 39), st.sampled_from(CODECS)), min_size=30, max_size=120))
def test_a_tiny_offset_map_cleans_in_several_passes_to_the_same_state(
    writes: list[tuple[int, Compression]],
) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="clean-tiny-"))
    try:
        cfg = compact_config(segment_bytes=1200)
        lg = Log.open(tmp / "t-0", cfg, clock=ManualClock(T0))
        model = Model()
        for i in range(0, len(writes), 3):
            group = writes[i : i + 3]
            records = [(b"key%02d" % k, b"value-%d" % (i + j)) for j, (k, _) in enumerate(group)]
            info = lg.append(build_batch([RecordInput(k, v, T0) for k, v in records], compression=group[0][1]))
            model.written.update({info.first_offset + j: r for j, r in enumerate(records)})
        lg.roll()
        lg.append(build_batch([RecordInput(b"tail", b"tail", T0)]))
        model.written[lg.next_offset - 1] = (b"tail", b"tail")
        lg.update_high_watermark(lg.next_offset)
        distinct = len({k for k, _ in writes})
        done = _passes_until_clean(lg, T0, TINY_MAP)
        if distinct > 8:
            assert len(done) > 1
            assert done[0][1].end_offset < done[0][0].first_uncleanable
        records = data_records(lg)
        assert all(model.written[r.offset] == (r.key, r.value) for r in records)
        assert reader_state(records) == model.state()
        below = [r.key for r in records if r.offset < done[-1][1].end_offset]
        assert len(below) == len(set(below))
        lg.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _resurrection_log(path: Path) -> Log:
    """``victim`` written, then 30 other keys and ``victim``'s tombstone in one segment: a map of 8 keys stops
    well before the tombstone, in the segment that holds it."""
    lg = Log.open(path, compact_config(segment_bytes=100_000), clock=ManualClock(T0))
    lg.append(build_batch([RecordInput(b"victim", b"old", T0)]))
    lg.roll()
    for i in range(30):
        lg.append(build_batch([RecordInput(b"a%02d" % i, b"x", T0)]))
    lg.append(build_batch([RecordInput(b"victim", None, T0)]))
    lg.roll()
    lg.append(build_batch([RecordInput(b"z", b"z", T0)]))
    lg.update_high_watermark(lg.next_offset)
    return lg


def test_a_full_map_never_removes_a_tombstone_it_did_not_map(tmp_path: Path) -> None:
    lg = _resurrection_log(tmp_path / "t-0")
    assert reader_state(data_records(lg)).get(b"victim") is None
    _passes_until_clean(lg, T0, TINY_MAP)  # delete.retention.ms=0: a stamped horizon passes at once
    assert reader_state(data_records(lg)).get(b"victim") is None, "the deleted key came back"


def test_a_full_map_keeps_a_tombstone_it_did_not_map_while_its_horizon_lasts(tmp_path: Path) -> None:
    """The same log with a long delete.retention.ms: the key stays deleted (the test above once found a tombstone
    past a full map removed while the value it deletes, not in that map, was kept: records past the map's last
    offset are now kept as they are, as Kafka's pastLatestOffset)."""
    lg = _resurrection_log(tmp_path / "t-0")
    lg.update_config(compact_config(segment_bytes=100_000, delete_retention_ms=DAY))
    _passes_until_clean(lg, T0, TINY_MAP)
    records = data_records(lg)
    assert reader_state(records).get(b"victim") is None
    assert [r.key for r in records if r.key == b"victim"] == [b"victim"]  # the tombstone alone


# -- what is (not) cleaned ------------------------------------------------------------------------------------------


def test_records_without_a_key_are_removed(tmp_path: Path) -> None:
    """Up to the last record the pass mapped; one after it stays (past the map, as Kafka's pastLatestOffset)."""
    h = Harness(tmp_path, compact_config(cleanup_policy="delete"))
    h.append([(None, b"a"), (b"k", b"1"), (None, b"b")])
    h.append([(None, b"c")])
    h.append([(b"k", b"2"), (None, b"d")])
    h.log.update_config(compact_config())  # a topic switched to compaction: keyless records were accepted before
    h.log.roll()
    h.append([(b"x", b"x")])
    assert h.clean() is True
    assert [(r.key, r.value) for r in data_records(h.log)] == [(b"k", b"2"), (None, b"d"), (b"x", b"x")]


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path: Path) -> None:
    lag = 10_000
    h = Harness(tmp_path, compact_config(min_compaction_lag_ms=lag))
    for i in range(20):
        h.append([(b"old", b"o%d" % i), (b"both", b"b%d" % i)])
    h.log.roll()
    recent = h.log.next_offset
    h.clock.advance(lag)  # the first records are now exactly min.compaction.lag.ms old
    for i in range(20):
        h.append([(b"new", b"n%d" % i), (b"both", b"c%d" % i)])
    h.log.roll()
    h.append([(b"active", b"a")])
    files = snapshot(h.log_dir)

    h.clock.advance(-1)  # every segment younger than the lag: nothing cleaned
    assert h.clean() is False
    assert snapshot(h.log_dir) == files

    h.clock.advance(1)  # the old segments only
    assert h.clean() is True
    assert h.checkpoint == recent
    records = data_records(h.log)
    assert [r.value for r in records if r.key == b"old"] == [b"o19"]
    assert [r.value for r in records if r.key == b"new"] == [b"n%d" % i for i in range(20)]  # untouched
    assert [r.offset for r in records if r.offset >= recent] == list(range(recent, h.log.next_offset))

    h.clock.advance(lag)
    assert h.clean() is True
    records = data_records(h.log)
    assert [(r.key, r.value) for r in records] == [(b"old", b"o19"), (b"new", b"n19"), (b"both", b"c19"),
                                                    (b"active", b"a")]


def _some_dirty_log(h: Harness) -> None:
    for i in range(30):
        h.append([(KEYS[i % 3], b"v%d" % i)])
    h.log.roll()
    h.append([(b"active", b"a")])


def test_the_checkpoint_file_holds_the_end_of_the_last_pass(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config())
    _some_dirty_log(h)
    assert not (tmp_path / CLEANER_CHECKPOINT).exists()
    assert h.clean() is True
    path = tmp_path / CLEANER_CHECKPOINT
    assert path.exists() and not (h.log_dir / CLEANER_CHECKPOINT).exists()
    end = h.log.segments[-1].base_offset
    assert OffsetCheckpointFile(path).read() == {TP: end}
    assert h.checkpoint == end
    # another cleaner (a restart) reads it: nothing left to clean
    assert h.clean(h.new_cleaner()) is False
    # more writes: the next pass starts at the checkpoint and moves it
    for i in range(10):
        h.append([(KEYS[i % 3], b"w%d" % i)])
    h.log.roll()
    assert h.clean() is True
    assert OffsetCheckpointFile(path).read() == {TP: h.log.segments[-1].base_offset}


@pytest.mark.parametrize("content", [None, b"", b"garbage\n\x00\xff", b"0\n1\nt 0 notanumber\n", b"7\n0\n"])
def test_a_missing_or_damaged_checkpoint_means_cleaning_from_the_start(tmp_path: Path, content: bytes | None) -> None:
    h = Harness(tmp_path, compact_config())
    _some_dirty_log(h)
    assert h.clean() is True
    assert h.clean(h.new_cleaner()) is False  # a valid checkpoint: all clean
    path = tmp_path / CLEANER_CHECKPOINT
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)
    fresh = h.new_cleaner()
    assert fresh.first_dirty_offset(tmp_path, TP) is None
    before = reader_state(data_records(h.log))
    assert h.clean(fresh) is True  # the whole log is dirty again: a pass from the start, no failure
    assert reader_state(data_records(h.log)) == before
    assert OffsetCheckpointFile(path).read() == {TP: h.log.segments[-1].base_offset}


# -- transactions --------------------------------------------------------------------------------------------------


def _txn_batch(records: list[tuple[bytes, bytes | None]], pid: int, seq: int, *, epoch: int = 0,
               transactional: bool = True) -> bytes:
    return build_batch([RecordInput(k, v, T0) for k, v in records], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=transactional)


def _markers(lg: Log) -> list[tuple[int, int, ControlType, bool]]:
    """(offset, producer, type, has a delete horizon) of every marker."""
    return [(hd.base_offset, hd.producer_id, parse_control_key(rs[0].key).type, has_delete_horizon(hd))
            for hd, rs in batches_of(lg) if hd.is_control]


def _read_committed(lg: Log) -> list[Record]:
    out: list[Record] = []
    offset = lg.log_start_offset
    while offset < lg.last_stable_offset:
        region = lg.read(offset, 1 << 20, max_offset=lg.last_stable_offset)
        if region is None:
            break
        data = region.read_bytes()
        out += committed_records(data, lg.aborted_transactions(offset, region.end_offset), offset)
        offset = region.end_offset
    return out


def _transactional_log(h: Harness) -> dict[str, int]:
    lg = h.log
    at = {}
    # producer 1: committed transactions; producer 2: aborted ones; plain writes in between
    at["a"] = lg.append(_txn_batch([(b"k1", b"a1"), (b"k2", b"a2"), (b"k5", b"x5")], 1, 0)).first_offset
    lg.append_marker(1, 0, True, 0)
    at["b"] = lg.append(_txn_batch([(b"k1", b"b1"), (b"k3", b"b3"), (b"k5", b"y5")], 2, 0)).first_offset
    at["abort_b"] = lg.append_marker(2, 0, False, 0).first_offset
    lg.append(build_batch([RecordInput(b"k1", b"c1", T0)]))
    at["c"] = lg.append(_txn_batch([(b"k2", b"c2")], 1, 3)).first_offset
    lg.append_marker(1, 0, True, 0)
    at["d"] = lg.append(_txn_batch([(b"k4", b"d4")], 2, 3)).first_offset
    at["abort_d"] = lg.append_marker(2, 0, False, 0).first_offset
    lg.append(build_batch([RecordInput(b"k2", b"z2", T0)]))  # supersedes producer 1's last batch
    lg.roll()
    lg.append(build_batch([RecordInput(b"active", b"a", T0)]))
    lg.update_high_watermark(lg.next_offset)
    return at


EXPECTED_COMMITTED = {b"k1": b"c1", b"k2": b"z2", b"k5": b"x5", b"active": b"a"}


def test_aborted_data_goes_its_marker_stays_and_read_committed_holds(tmp_path: Path) -> None:
    h = Harness(tmp_path, compact_config(segment_bytes=100_000), producer_state=True)
    at = _transactional_log(h)
    assert reader_state(_read_committed(h.log)) == EXPECTED_COMMITTED
    assert h.log.aborted_transactions(0, h.log.next_offset) == [(2, at["b"]), (2, at["d"])]

    assert h.clean() is True
    records = data_records(h.log)
    # no aborted record is left; committed ones are compacted like any other
    assert not {r.value for r in records} & {b"b1", b"b3", b"y5", b"d4"}
    assert reader_state(records) == EXPECTED_COMMITTED  # k5: the aborted y5 never hid the committed x5
    assert reader_state(_read_committed(h.log)) == EXPECTED_COMMITTED
    # both ABORT markers stay in the first pass (this pass removed their data), with a horizon; the COMMIT markers
    # stay too (their transactions' batches were seen)
    markers = _markers(h.log)
    assert [(m[1], m[2]) for m in markers] == [(1, ControlType.COMMIT), (2, ControlType.ABORT),
                                               (1, ControlType.COMMIT), (2, ControlType.ABORT)]
    assert all(m[3] for m in markers)
    assert (at["abort_b"], 2, ControlType.ABORT, True) in markers
    # producer 2's last batch (aborted) and producer 1's (superseded) are kept, emptied, at their offsets
    kept = {hd.producer_id: hd for hd, rs in batches_of(h.log) if not hd.is_control and hd.producer_id >= 0
            and hd.record_count == 0}
    assert kept[2].base_offset == at["d"] and kept[2].base_sequence == 3 and kept[2].is_transactional
    assert kept[1].base_offset == at["c"] and kept[1].base_sequence == 3
    assert h.log.aborted_transactions(0, h.log.next_offset)[-1] == (2, at["d"])

    # later passes (delete.retention.ms=0): what may go goes, read_committed still holds
    h.log.append(build_batch([RecordInput(b"k9", b"9", T0)]))
    h.log.roll()
    h.clock.advance(1)
    assert h.clean() is True
    assert reader_state(_read_committed(h.log)) == {**EXPECTED_COMMITTED, b"k9": b"9"}
    assert reader_state(data_records(h.log)) == {**EXPECTED_COMMITTED, b"k9": b"9"}
    markers = _markers(h.log)
    assert at["abort_b"] not in [m[0] for m in markers]  # its data are gone: the marker went after its horizon
    assert (at["abort_d"], 2, ControlType.ABORT, True) in markers  # its (emptied) batch is still there


@pytest.mark.parametrize("lose_snapshots", [False, True])
def test_a_live_producer_continues_its_sequence_after_cleaning_and_a_restart(
    tmp_path: Path, lose_snapshots: bool
) -> None:
    h = Harness(tmp_path, compact_config(segment_bytes=100_000), producer_state=True)
    lg = h.log
    lg.append(_txn_batch([(b"k", b"1"), (b"k", b"2")], 7, 0, transactional=False))
    lg.append(_txn_batch([(b"k", b"3"), (b"k", b"4"), (b"k", b"5")], 7, 2, transactional=False))  # seq 2..4
    lg.append(build_batch([RecordInput(b"k", b"6", T0)]))  # everything of producer 7 superseded
    lg.roll()
    lg.append(build_batch([RecordInput(b"x", b"x", T0)]))
    assert h.clean() is True
    last = [hd for hd, _ in batches_of(h.log) if hd.producer_id == 7]
    assert len(last) == 1
    assert (last[0].record_count, last[0].base_sequence, last[0].last_sequence) == (0, 2, 4)
    assert [(r.key, r.value) for r in data_records(h.log)] == [(b"k", b"6"), (b"x", b"x")]

    h.log.close()
    if lose_snapshots:  # the producer state is then rebuilt from the log alone
        for p in h.log_dir.glob("*.snapshot"):
            p.unlink()
    h.log = h._open()
    [p7] = [p for p in h.log.active_producers() if p.producer_id == 7]
    assert (p7.producer_epoch, p7.last_sequence) == (0, 4)
    with pytest.raises(OutOfOrderSequenceError):
        h.log.append(_txn_batch([(b"k", b"gap")], 7, 6, transactional=False))
    info = h.log.append(_txn_batch([(b"k", b"7")], 7, 5, transactional=False))
    assert info.record_count == 1


_txn_records = st.lists(st.tuples(st.integers(0, 4), st.sampled_from([False] * 4 + [True])), min_size=1, max_size=4)
txn_scripts = st.lists(st.one_of(
    st.tuples(st.just("plain"), st.integers(0, 4), st.sampled_from([False] * 4 + [True])),
    st.tuples(st.just("txn"), st.sampled_from([1, 2, 3]), _txn_records),
    st.tuples(st.just("idempotent"), st.sampled_from([1, 2, 3]), _txn_records),
    st.tuples(st.just("end"), st.sampled_from([1, 2, 3]), st.booleans()),
    st.tuples(st.just("end"), st.sampled_from([1, 2, 3]), st.booleans()),
    st.just(("clean",)), st.just(("clean",)), st.just(("roll",)),
    st.tuples(st.just("tick"), st.integers(0, 3_000)),
    st.tuples(st.just("reopen"), st.booleans()),
), min_size=20, max_size=70)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(txn_scripts, st.sampled_from([0, 1_000, DAY]))
def test_transactions_model(script: list[tuple[Any, ...]], retention: int) -> None:
    """Transactions (committed, aborted, still open), idempotent and plain writes, passes, restarts (with or without
    the producer snapshots): a read_committed reader from the start always ends with the committed model state,
    every record left is the one written at its offset, and a restart rebuilds the same producer state and LSO (the
    producers' next sequences are accepted: the script goes on writing with them)."""
    tmp = Path(tempfile.mkdtemp(prefix="clean-txn-"))
    try:
        h = Harness(tmp, compact_config(delete_retention_ms=retention, segment_bytes=600), producer_state=True)
        written: dict[int, tuple[bytes, bytes | None]] = {}
        status: dict[int, str] = {}  # offset -> committed / aborted / ongoing
        seq = {1: 0, 2: 0, 3: 0}
        ongoing: dict[int, list[int]] = {1: [], 2: [], 3: []}
        n = 0

        def value(tomb: bool) -> bytes | None:
            nonlocal n
            n += 1
            return None if tomb else b"v%d-" % n + b"." * 40

        def check() -> None:
            lg = h.log
            lg.update_high_watermark(lg.next_offset)
            expect: dict[bytes | None, bytes] = {}
            for off in sorted(o for o in written if o < lg.last_stable_offset and status[o] == "committed"):
                k, v = written[off]
                if v is None:
                    expect.pop(k, None)
                else:
                    expect[k] = v
            assert reader_state(_read_committed(lg)) == expect
            assert all(written[r.offset] == (r.key, r.value) for r in data_records(lg))

        def producers() -> dict[int, tuple[int, int, int]]:
            return {p.producer_id: (p.producer_epoch, p.last_sequence, p.current_txn_start_offset)
                    for p in h.log.active_producers() if p.last_sequence >= 0}

        for op in script:
            if op[0] == "plain":
                v = value(op[2])
                off = h.append([(KEYS[op[1]], v)])
                written[off], status[off] = (KEYS[op[1]], v), "committed"
            elif op[0] in ("txn", "idempotent"):
                pid, txn = op[1], op[0] == "txn"
                if not txn and ongoing[pid]:
                    continue  # a producer in a transaction writes transactionally
                records = [(KEYS[k], value(tomb)) for k, tomb in op[2]]
                first = h.append(records, producer_id=pid, producer_epoch=0, base_sequence=seq[pid],
                                 is_transactional=txn)
                seq[pid] += len(records)
                for i, r in enumerate(records):
                    written[first + i], status[first + i] = r, ("ongoing" if txn else "committed")
                    if txn:
                        ongoing[pid].append(first + i)
            elif op[0] == "end":
                h.log.append_marker(op[1], 0, op[2], 0)
                for off in ongoing[op[1]]:
                    status[off] = "committed" if op[2] else "aborted"
                ongoing[op[1]] = []
            elif op[0] == "clean":
                h.clean()
                check()
            elif op[0] == "roll":
                h.log.roll()
            elif op[0] == "tick":
                h.clock.advance(op[1])
            else:
                h.log.update_high_watermark(h.log.next_offset)
                lso, before = h.log.last_stable_offset, producers()
                h.log.close()
                if op[1]:
                    for p in h.log_dir.glob("*.snapshot"):
                        p.unlink()
                h.log = h._open()
                h.log.update_high_watermark(h.log.next_offset)
                assert h.log.last_stable_offset == lso
                assert producers() == before
                check()
        for pid in ongoing:
            if ongoing[pid]:
                h.log.append_marker(pid, 0, True, 0)
                for off in ongoing[pid]:
                    status[off] = "committed"
        h.log.roll()
        off = h.append([(b"tail", b"t")])
        written[off], status[off] = (b"tail", b"t"), "committed"
        for _ in range(3):
            h.clock.advance(DAY + 1)
            h.clean()
            check()
        h.log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- a corrupt segment ---------------------------------------------------------------------------------------------


def _corrupt_log(h: Harness) -> Path:
    for i in range(40):
        h.append([(KEYS[i % 4], b"value-%d" % i + b"." * 20)])
    h.log.roll()
    h.append([(b"active", b"a")])
    first = h.log.segments[0]
    path = h.log_dir / (f"{first.base_offset:020d}" + LOG_SUFFIX)
    data = bytearray(path.read_bytes())
    positions = [pos for pos, _ in iter_batches(bytes(data))]
    hd = rb.parse_header(data, positions[len(positions) // 2])
    middle = positions[len(positions) // 2] + rb.HEADER_SIZE + (hd.size - rb.HEADER_SIZE) // 2  # in its records
    data[middle] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("in_process", [True, False])
def test_a_corrupt_batch_makes_the_partition_uncleanable_and_changes_nothing(
    tmp_path: Path, in_process: bool
) -> None:
    h = Harness(tmp_path, compact_config())
    _corrupt_log(h)
    h.log.update_high_watermark(h.log.next_offset)
    files = snapshot(h.log_dir)
    try:
        assert h.cleaner.clean_once(in_process=in_process) is True
    finally:
        h.cleaner.stop()
    assert TP in h.cleaner.stats.uncleanable
    assert snapshot(h.log_dir) == files
    assert not (tmp_path / CLEANER_CHECKPOINT).exists()
    assert h.cleaner.clean_once(in_process=in_process) is False  # skipped from now on


def test_a_corrupt_batch_raises_from_clean_and_leaves_no_file(tmp_path: Path) -> None:
    from odradek.protocol.errors import CorruptRecordError

    h = Harness(tmp_path, compact_config())
    _corrupt_log(h)
    h.log.update_high_watermark(h.log.next_offset)
    files = snapshot(h.log_dir)
    with pytest.raises(CorruptRecordError):
        _pass(h.log, None, T0, 1 << 20)
    assert snapshot(h.log_dir) == files
    assert sorted(os.listdir(h.log_dir)) == sorted(files)
