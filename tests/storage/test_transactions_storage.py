"""Transactions in storage: the per-segment aborted-transaction index (format, truncation, deletion,
rebuild after a crash or damage), ``Log.aborted_transactions`` over many segments, and a model-based
property test: whatever the interleaving of transactions, plain writes, restarts and rolls, a
read_committed reader applying the aborted list sees exactly the committed records, in order."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.clock import ManualClock
from odradek.protocol.records import RecordInput, build_batch
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.producer_state import InvalidTxnStateError, ProducerStateManager
from odradek.storage.segment import DELETED_SUFFIX
from odradek.storage.txn_index import ENTRY_SIZE, TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex
from tests.storage.helpers import T0, batch, open_log, small_config
from tests.storage.txn_reader import committed_records

DAY = 86_400_000


def _open(path: Path, config: LogConfig | None = None, **kwargs: object) -> Log:
    state = ProducerStateManager(path, path.name, expiration_ms=DAY)
    return open_log(path, config=config, producer_state=state, **kwargs)


def _crash(log: Log) -> None:
    """Stop without a clean close: no snapshot at the end, files left as they are."""
    log.flush()
    for seg in log.segments:
        seg.close()


# -- the index file ----------------------------------------------------------------------------------


def _index(tmp_path: Path, base: int = 100) -> TransactionIndex:
    return TransactionIndex(tmp_path / f"{base:020d}{TXN_INDEX_SUFFIX}", base)


def test_entries_are_kafkas_34_byte_records_and_read_back(tmp_path: Path) -> None:
    idx = _index(tmp_path)
    assert not idx.path.exists() and idx.entries() == []  # no file until the first abort
    idx.append(AbortedTxn(7, 90, 105, 106))
    idx.append(AbortedTxn(8, 101, 110, 101))
    raw = idx.path.read_bytes()
    assert len(raw) == 2 * ENTRY_SIZE == 68
    assert struct.unpack(">hqqqq", raw[:34]) == (0, 7, 90, 105, 106)
    idx.close()
    again = _index(tmp_path)
    assert again.entries() == [AbortedTxn(7, 90, 105, 106), AbortedTxn(8, 101, 110, 101)]
    assert again.check(111) is None
    with pytest.raises(ValueError, match="does not follow the last entry"):
        again.append(AbortedTxn(9, 100, 110, 111))


def test_collect_finds_overlapping_aborts_and_stops_once_complete(tmp_path: Path) -> None:
    idx = _index(tmp_path, base=0)
    for i in range(200):  # producer i aborts [10i, 10i+5], marker at 10i+5; nothing else open
        idx.append(AbortedTxn(i, 10 * i, 10 * i + 5, 10 * i + 6))
    out: list[tuple[int, int]] = []
    assert idx.collect(42, 63, out) is True
    assert out == [(4, 40), (5, 50), (6, 60)]
    out = []
    assert idx.collect(1995, 5000, out) is False  # the last entry: the search must go on to later segments
    assert out == [(199, 1990)]


def test_truncation_and_reset(tmp_path: Path) -> None:
    idx = _index(tmp_path)
    for last in (101, 105, 109):
        idx.append(AbortedTxn(1, last - 1, last, last + 1))
    idx.truncate_to(105)
    assert [e.last_offset for e in idx.entries()] == [101]
    assert idx.path.stat().st_size == ENTRY_SIZE
    idx.append(AbortedTxn(2, 102, 103, 104))  # appends continue after the cut
    idx.reset()
    assert idx.entries() == [] and idx.path.stat().st_size == 0


@pytest.mark.parametrize("damage, reason", [
    (b"\x00" * 10, "not a multiple of 34"),
    (struct.pack(">hqqqq", 1, 7, 100, 101, 102), "version 1"),
    (struct.pack(">hqqqq", 0, 7, 100, 99, 102), "does not fit"),
    (struct.pack(">hqqqq", 0, 7, 100, 500, 501), "does not fit"),  # past the segment's end
    (struct.pack(">hqqqq", 0, 7, 100, 101, 102) * 2, "does not fit"),  # not increasing
])
def test_check_names_what_is_wrong(tmp_path: Path, damage: bytes, reason: str) -> None:
    path = tmp_path / f"{100:020d}{TXN_INDEX_SUFFIX}"
    path.write_bytes(damage)
    problem = TransactionIndex(path, 100).check(200)
    assert problem is not None and reason in problem


# -- the index in the log ----------------------------------------------------------------------------


def _txn(log: Log, pid: int, seq: int, n: int = 2) -> int:
    first = log.append(batch(n, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True,
                             ts=log.clock.milliseconds())).first_offset
    log.update_high_watermark(log.next_offset)
    return first


def _end(log: Log, pid: int, commit: bool) -> int:
    offset = log.append_marker(pid, 0, commit, 0).first_offset
    log.update_high_watermark(log.next_offset)
    return offset


def _fill(log: Log, n: int) -> None:
    for _ in range(n):
        log.append(batch(5, value_size=40, ts=log.clock.milliseconds()))
    log.update_high_watermark(log.next_offset)


def test_the_entry_goes_to_the_segment_holding_the_abort_marker(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    first = _txn(log, 1, 0)
    _fill(log, 30)  # several rolls: the transaction's data is in the first segment only
    marker = _end(log, 1, commit=False)
    assert len(log.segments) > 2
    holders = [s for s in log.segments if s.txn_index.count]
    assert holders == [log.active_segment]
    assert log.active_segment.txn_index.entries() == [AbortedTxn(1, first, marker, marker + 1)]
    assert log.aborted_transactions(0, 1) == [(1, 0)]  # found from the first segment on
    assert log.aborted_transactions(marker + 1, log.next_offset) == []  # ended before the range
    assert log.aborted_transactions(marker, marker + 1) == [(1, 0)]


def test_commits_have_no_entry_and_the_recorded_lso_is_the_next_open_transaction(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _txn(log, 1, 0)  # 0..1
    _txn(log, 2, 0)  # 2..3
    _txn(log, 3, 0)  # 4..5
    _end(log, 2, commit=True)  # 6
    _end(log, 3, commit=False)  # 7: producer 1 is still open from 0
    _end(log, 1, commit=False)  # 8
    entries = log.active_segment.txn_index.entries()
    assert entries == [AbortedTxn(3, 4, 7, 0), AbortedTxn(1, 0, 8, 9)]
    assert log.aborted_transactions(0, 9) == [(3, 4), (1, 0)]
    assert log.aborted_transactions(0, 4) == [(1, 0)]  # 3's began at 4: outside [0, 4)


def test_truncation_cuts_the_index_and_deleted_segments_take_theirs_along(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    clock = ManualClock(T0)
    log = _open(path, config=small_config(retention_bytes=0), clock=clock)
    markers = []
    for i in range(6):
        _txn(log, 1, 2 * i)
        _fill(log, 8)
        markers.append(_end(log, 1, commit=False))
    files = sorted(p.name for p in path.glob("*" + TXN_INDEX_SUFFIX))
    assert len(files) >= 3
    log.truncate_to(markers[-1])  # the last abort is cut off with its marker
    assert [e.last_offset for s in log.segments for e in s.txn_index.entries()] == markers[:-1]
    log.delete_retained_segments()  # retention.bytes=0: every segment but the active one goes
    remaining = {s.txn_index.path.name for s in log.segments}
    assert list(path.glob("*" + TXN_INDEX_SUFFIX + DELETED_SUFFIX))  # renamed with their segments
    assert {p.name for p in path.glob("*" + TXN_INDEX_SUFFIX)} <= remaining
    clock.advance(2_000)
    log.purge_deleted()
    assert not list(path.glob("*" + TXN_INDEX_SUFFIX + DELETED_SUFFIX))
    assert {p.name for p in path.glob("*" + TXN_INDEX_SUFFIX)} <= remaining
    assert log.aborted_transactions(log.log_start_offset, log.next_offset) == [
        (1, f) for s in log.segments for _, f, _, _ in s.txn_index.entries()]


SMALL = small_config(segment_bytes=1024)


def _aborting_log(path: Path) -> tuple[Log, dict[str, bytes]]:
    log = _open(path, config=SMALL)
    for i in range(5):
        _txn(log, 1, 2 * i)
        _txn(log, 2, 2 * i)
        _fill(log, 6)
        _end(log, 1, commit=i % 2 == 0)
        _end(log, 2, commit=False)
    assert len(log.segments) > 3 and len(list(path.glob("*" + TXN_INDEX_SUFFIX))) >= 3
    return log, {p.name: p.read_bytes() for p in path.glob("*" + TXN_INDEX_SUFFIX)}


@pytest.mark.parametrize("damage", ["deleted", "garbage", "torn", "wrong_offsets"])
def test_indexes_are_rebuilt_after_an_unclean_shutdown(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "t-0"
    log, before = _aborting_log(path)
    expected = log.aborted_transactions(0, log.next_offset)
    _crash(log)
    victim = path / sorted(before)[1]
    if damage == "deleted":
        victim.unlink()
    elif damage == "garbage":
        victim.write_bytes(b"\xff" * 3 * ENTRY_SIZE)
    elif damage == "torn":
        victim.write_bytes(before[victim.name][:-5])
    else:
        victim.write_bytes(struct.pack(">hqqqq", 0, 1, 0, 1, 2))
    reopened = _open(path, config=SMALL, clean_shutdown=False, recovery_point=0)
    assert {p.name: p.read_bytes() for p in path.glob("*" + TXN_INDEX_SUFFIX)} == before
    assert reopened.aborted_transactions(0, reopened.next_offset) == expected


@pytest.mark.parametrize("damage", ["garbage", "torn", "wrong_offsets"])
def test_a_damaged_index_is_rebuilt_even_after_a_clean_shutdown(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "t-0"
    log, before = _aborting_log(path)
    end = log.next_offset
    expected = log.aborted_transactions(0, end)
    log.close()
    victim = path / sorted(before)[-1]
    if damage == "garbage":
        victim.write_bytes(b"\xff" * 2 * ENTRY_SIZE)
    elif damage == "torn":
        victim.write_bytes(before[victim.name] + b"\x00\x01")
    else:
        victim.write_bytes(struct.pack(">hqqqq", 0, 1, 0, end + 5, end + 6))
    reopened = _open(path, config=SMALL, clean_shutdown=True, recovery_point=end)
    assert {p.name: p.read_bytes() for p in path.glob("*" + TXN_INDEX_SUFFIX)} == before
    assert reopened.aborted_transactions(0, end) == expected


def test_a_crash_before_the_index_reached_disk_is_repaired_from_the_log(tmp_path: Path) -> None:
    """The marker was written but its index entry lost: recovery replays the marker."""
    path = tmp_path / "t-0"
    log = _open(path)
    _txn(log, 1, 0)
    marker = _end(log, 1, commit=False)
    _crash(log)
    for p in path.glob("*" + TXN_INDEX_SUFFIX):
        p.unlink()
    reopened = _open(path, clean_shutdown=False, recovery_point=marker)
    assert reopened.aborted_transactions(0, marker + 1) == [(1, 0)]


def test_aborted_transactions_read_only_the_segments_that_matter(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    log = _open(tmp_path / "t-0", config=SMALL)
    for i in range(60):
        _txn(log, 1, 2 * i)
        _fill(log, 4)
        _end(log, 1, commit=i % 3 != 0)
    assert len(log.segments) > 50
    consulted: list[int] = []
    real = TransactionIndex.collect

    def counting(self: TransactionIndex, start: int, upper: int, out: list[tuple[int, int]]) -> bool:
        consulted.append(self.base_offset)
        return real(self, start, upper, out)

    monkeypatch.setattr(TransactionIndex, "collect", counting)
    middle = log.segments[len(log.segments) // 2]
    found = log.aborted_transactions(middle.base_offset, middle.base_offset + 10)
    assert len(consulted) <= 2, consulted  # the segment holding the start (or the next with entries), done
    assert all(first < middle.base_offset + 10 for _, first in found)
    consulted.clear()
    assert log.aborted_transactions(log.next_offset - 1, log.next_offset) == []
    assert len(consulted) <= 1


# -- the model-based property test -------------------------------------------------------------------


@dataclass
class Model:
    """What a read_committed reader must see, kept beside the log."""

    records: list[tuple[int, bytes, int | None]] = field(default_factory=list)  # offset, value, producer in txn
    ongoing: dict[int, tuple[int, list[int]]] = field(default_factory=dict)  # pid -> (first offset, record idx)
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # pid, first, marker
    discarded: set[int] = field(default_factory=set)  # indexes into records of aborted transactions
    sequences: dict[int, int] = field(default_factory=dict)

    def lso(self, log: Log) -> int:
        return min([first for first, _ in self.ongoing.values()] + [log.high_watermark])


Op = tuple[str, int, int]
ops = st.lists(st.one_of(
    st.tuples(st.just("plain"), st.just(0), st.integers(1, 4)),
    st.tuples(st.just("txn"), st.integers(1, 3), st.integers(1, 4)),
    st.tuples(st.just("idem"), st.integers(1, 3), st.integers(1, 3)),
    st.tuples(st.just("commit"), st.integers(1, 3), st.just(0)),
    st.tuples(st.just("abort"), st.integers(1, 3), st.just(0)),
    st.tuples(st.just("reopen"), st.integers(0, 1), st.just(0)),
    st.tuples(st.just("roll"), st.just(0), st.just(0)),
), min_size=1, max_size=40)


def _apply(log: Log, model: Model, op: Op, n_batch: list[int]) -> Log:
    kind, pid, n = op
    path = log.directory
    if kind == "reopen":
        end, hw = log.next_offset, log.high_watermark
        clean = bool(pid)
        if clean:
            log.close()
        else:
            _crash(log)
        return _open(path, config=log.config, clean_shutdown=clean, recovery_point=0 if not clean else end,
                     high_watermark=hw)
    if kind == "roll":
        log.roll()
        return log
    if kind in ("commit", "abort"):
        marker = log.append_marker(pid, 0, kind == "commit", 0).first_offset
        log.update_high_watermark(log.next_offset)
        started = model.ongoing.pop(pid, None)
        if started is not None and kind == "abort":
            model.aborted.append((pid, started[0], marker))
            model.discarded.update(started[1])
        return log
    n_batch[0] += 1
    values = [f"b{n_batch[0]}-{i}".encode() for i in range(n)]
    transactional = kind == "txn"
    producer = -1 if kind == "plain" else pid
    seq = model.sequences.get(pid, 0) if producer >= 0 else -1
    data = build_batch([RecordInput(None, v, T0) for v in values], base_timestamp=T0, producer_id=producer,
                       producer_epoch=0 if producer >= 0 else -1, base_sequence=seq, is_transactional=transactional)
    if kind == "idem" and pid in model.ongoing:
        with pytest.raises(InvalidTxnStateError):
            log.append(data)
        return log
    first = log.append(data).first_offset
    log.update_high_watermark(log.next_offset)
    if producer >= 0:
        model.sequences[pid] = seq + n
    start = len(model.records)
    model.records.extend((first + i, v, pid if transactional else None) for i, v in enumerate(values))
    if transactional:
        began, idxs = model.ongoing.get(pid, (first, []))
        model.ongoing[pid] = (began, idxs + list(range(start, start + n)))
    return log


def _read_committed(log: Log, start: int, max_bytes: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    position = start
    while position < log.last_stable_offset:
        region = log.read(position, max_bytes, max_offset=log.last_stable_offset)
        assert region is not None, f"nothing below the LSO {log.last_stable_offset} at {position}"
        aborted = log.aborted_transactions(position, region.end_offset)
        out += [(r.offset, r.value or b"") for r in committed_records(region.read_bytes(), aborted, position)]
        position = region.end_offset
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=ops, max_bytes=st.sampled_from([1, 200, 1 << 20]), data=st.data())
def test_read_committed_sees_exactly_the_committed_records(tmp_path_factory: pytest.TempPathFactory, script: list[Op],
                                                          max_bytes: int, data: st.DataObject) -> None:
    path = tmp_path_factory.mktemp("txn") / "t-0"
    log = _open(path, config=small_config(segment_bytes=600, index_interval_bytes=64))
    model = Model()
    counter = [0]
    try:
        for op in script:
            log = _apply(log, model, op, counter)
            assert log.last_stable_offset == model.lso(log)
            for pid, (first, _) in model.ongoing.items():
                assert log.ongoing_transaction_first_offset(pid) == first
        lso = log.last_stable_offset
        expected = [(off, v) for i, (off, v, _) in enumerate(model.records)
                    if off < lso and i not in model.discarded]
        assert _read_committed(log, log.log_start_offset, max_bytes) == expected
        start = data.draw(st.integers(0, log.next_offset), label="start")
        upper = data.draw(st.integers(start, log.next_offset + 1), label="upper")
        brute = [(pid, first) for pid, first, marker in model.aborted
                 if marker >= start and first < upper and start < upper]  # an empty range overlaps nothing
        assert log.aborted_transactions(start, upper) == brute
        if start <= lso:
            assert _read_committed(log, start, max_bytes) == [(o, v) for o, v in expected if o >= start]
    finally:
        log.close()
