"""Producers' state in a partition log: retries, epochs, sequences, snapshots, expiry, and transactions
(start, markers, the last stable offset, restarts and truncation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.clock import ManualClock
from odradek.protocol.errors import ErrorCode, InvalidRecordError
from odradek.protocol.records import ControlType, build_control_batch
from odradek.storage.log import Log
from odradek.storage.producer_state import (
    SNAPSHOT_SUFFIX,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
)
from tests.storage.helpers import T0, all_records, batch, open_log, small_config

DAY = 86_400_000


def _open(path: Path, clock: ManualClock | None = None, **kwargs: object) -> Log:
    state = ProducerStateManager(path, path.name, expiration_ms=DAY)
    return open_log(path, clock=clock or ManualClock(T0), producer_state=state, **kwargs)


def _produce(log: Log, seq: int, n: int = 2, pid: int = 7, epoch: int = 0, tag: str = "v") -> tuple[int, int]:
    ts = log.clock.milliseconds()  # a producer's last write is its batches' timestamp, as in Kafka
    info = log.append(batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, tag=tag, ts=ts))
    return info.first_offset, info.last_offset


def test_a_retried_batch_gets_its_original_offsets_and_is_not_written_again(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    first = _produce(log, 0)
    second = _produce(log, 2)
    assert _produce(log, 0) == first and _produce(log, 2) == second
    assert log.next_offset == 4 and len(all_records(log)) == 4


def test_only_the_last_five_batches_are_remembered(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    for i in range(6):
        _produce(log, 2 * i)
    assert _produce(log, 2) == (2, 3)  # the second batch: still in the window of 5
    with pytest.raises(OutOfOrderSequenceError):
        _produce(log, 0)  # the first: out of the window, and not the next sequence either
    assert log.next_offset == 12


def test_sequence_gaps_and_old_epochs_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _produce(log, 0, epoch=3)
    with pytest.raises(OutOfOrderSequenceError, match="sent sequence 5 after 1") as gap:
        _produce(log, 5, epoch=3)
    assert gap.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(InvalidProducerEpochError, match="older than its current epoch 3") as old:
        _produce(log, 2, epoch=2)
    assert old.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(OutOfOrderSequenceError, match="a new epoch starts at 0"):
        _produce(log, 9, epoch=4)
    assert log.next_offset == 2
    assert _produce(log, 0, epoch=4) == (2, 3)  # a new epoch at 0 is fine
    assert _produce(log, 2, epoch=4) == (4, 5)


def test_unknown_producers_are_accepted_at_any_sequence_and_plain_batches_are_not_checked(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    assert _produce(log, 41, pid=99) == (0, 1)  # KIP-360: no state for 99 (never seen, or expired)
    log.append(batch(3))  # no producer id
    log.append(batch(3))
    assert _produce(log, 43, pid=99) == (8, 9)


def test_sequences_wrap_around(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _produce(log, 0x7FFFFFFF, n=1, pid=5)
    assert _produce(log, 0, n=1, pid=5) == (1, 1)


def test_two_batches_of_one_producer_in_one_append_must_follow_each_other(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    ok = batch(2, producer_id=3, producer_epoch=0, base_sequence=0) + batch(2, producer_id=3, producer_epoch=0,
                                                                             base_sequence=2)
    assert log.append(ok).last_offset == 3
    bad = batch(2, producer_id=3, producer_epoch=0, base_sequence=4) + batch(2, producer_id=3, producer_epoch=0,
                                                                              base_sequence=9)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(bad)
    assert log.next_offset == 4


@pytest.mark.parametrize("clean", [True, False])
def test_retries_are_still_recognised_after_a_restart(tmp_path: Path, clean: bool) -> None:
    path = tmp_path / "t-0"
    log = _open(path, config=small_config(segment_bytes=1024))
    for i in range(20):  # several segments, so rolls took snapshots
        _produce(log, 2 * i)
    end = log.next_offset
    if clean:
        log.close()
    else:
        log.flush()  # an unclean stop: no snapshot at close, the tail is read again
        for seg in log._segments:
            seg.close()
    assert list(path.glob("*" + SNAPSHOT_SUFFIX))
    reopened = _open(path, config=small_config(segment_bytes=1024), clean_shutdown=clean, recovery_point=end)
    assert _produce(reopened, 38) == (38, 39)  # the last batch, retried across the restart
    with pytest.raises(OutOfOrderSequenceError):
        _produce(reopened, 50)
    assert _produce(reopened, 40) == (40, 41)


def test_a_damaged_snapshot_is_skipped_and_the_log_read_instead(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = _open(path)
    _produce(log, 0)
    log.close()
    snaps = sorted(path.glob("*" + SNAPSHOT_SUFFIX))
    snaps[-1].write_bytes(b"\x00\x01garbage")
    reopened = _open(path, clean_shutdown=True)
    assert _produce(reopened, 0) == (0, 1)  # still a duplicate: rebuilt from the log's headers


def test_truncation_forgets_what_was_cut_and_snapshots_beyond_the_end(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = _open(path, config=small_config(segment_bytes=1024))
    for i in range(20):
        _produce(log, 2 * i)
    log.truncate_to(10)
    assert all(int(p.name[:20]) <= 10 for p in path.glob("*" + SNAPSHOT_SUFFIX))
    assert _produce(log, 10) == (10, 11)  # sequence 10 follows batch 8..9 again: appended, not a duplicate
    assert log.next_offset == 12


def test_silent_producers_expire(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = _open(tmp_path / "t-0", clock=clock)
    _produce(log, 0, pid=1)
    clock.advance(DAY // 2)
    _produce(log, 0, pid=2)
    clock.advance(DAY // 2 + 1)
    log.remove_expired_producers(clock.milliseconds())
    assert set(log.producer_state.producers) == {2}  # type: ignore[attr-defined]
    assert _produce(log, 0, pid=1, tag="again") == (4, 5)  # forgotten: a retry now appends


# -- transactions -------------------------------------------------------------------------------------


def _txn(log: Log, seq: int, n: int = 2, pid: int = 7, epoch: int = 0) -> tuple[int, int]:
    """A transactional batch; the high watermark follows the log end, as the broker moves it."""
    ts = log.clock.milliseconds()
    info = log.append(batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, ts=ts, tag="t",
                            is_transactional=True))
    log.update_high_watermark(log.next_offset)
    return info.first_offset, info.last_offset


def _plain(log: Log, n: int = 1) -> None:
    log.append(batch(n, ts=log.clock.milliseconds()))
    log.update_high_watermark(log.next_offset)


def _marker(log: Log, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    offset = log.append_marker(pid, epoch, commit, coordinator_epoch).first_offset
    log.update_high_watermark(log.next_offset)
    return offset


def test_a_transactional_batch_starts_a_transaction_that_holds_back_the_last_stable_offset(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _plain(log, 3)
    assert log.last_stable_offset == log.high_watermark == 3
    assert _txn(log, 0, pid=7) == (3, 4)
    _txn(log, 2, pid=7)  # the same transaction goes on: it still starts at 3
    _plain(log)
    assert log.ongoing_transaction_first_offset(7) == 3
    assert log.ongoing_transaction_first_offset(8) is None
    assert (log.last_stable_offset, log.high_watermark) == (3, 8)
    assert _txn(log, 0, pid=8) == (8, 9)
    assert log.ongoing_transaction_first_offset(8) == 8
    assert log.last_stable_offset == 3


def test_markers_end_transactions_and_the_last_stable_offset_moves_to_the_next_open_one(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _txn(log, 0, pid=1)  # 0..1
    _txn(log, 0, pid=2)  # 2..3
    assert _marker(log, 2, commit=True) == 4
    assert log.last_stable_offset == 0  # producer 1 is still open
    assert log.ongoing_transaction_first_offset(2) is None
    assert _marker(log, 1, commit=False) == 5
    assert log.last_stable_offset == log.high_watermark == 6
    assert log.ongoing_transaction_first_offset(1) is None
    assert log.aborted_transactions(0, 6) == [(1, 0)]


def test_a_non_transactional_batch_during_a_transaction_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _txn(log, 0)
    with pytest.raises(InvalidTxnStateError, match="non-transactional batch while its transaction") as refused:
        _produce(log, 2)
    assert refused.value.code == ErrorCode.INVALID_TXN_STATE
    assert log.next_offset == 2
    # One record set: its transactional batch would start a transaction the second batch breaks.
    both = batch(1, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True) + batch(
        1, producer_id=9, producer_epoch=0, base_sequence=1)
    with pytest.raises(InvalidTxnStateError):
        log.append(both)
    assert log.next_offset == 2 and log.ongoing_transaction_first_offset(9) is None
    _marker(log, 7, commit=True)
    assert _produce(log, 2) == (3, 4)  # the transaction is over: idempotent writes go on in sequence


def test_a_marker_without_an_ongoing_transaction_is_written_and_changes_nothing_else(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _plain(log, 2)
    assert _marker(log, 5, commit=False) == 2  # a producer never seen here (its data went elsewhere)
    assert log.next_offset == 3 and log.last_stable_offset == 3
    assert log.aborted_transactions(0, 3) == []
    assert not list((tmp_path / "t-0").glob("*.txnindex"))
    (entry,) = [p for p in log.active_producers() if p.producer_id == 5]
    assert (entry.producer_epoch, entry.current_txn_start_offset) == (0, -1)


def test_stale_markers_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _txn(log, 0, epoch=3)
    _marker(log, 7, commit=True, epoch=3, coordinator_epoch=5)
    _txn(log, 2, epoch=3)
    with pytest.raises(InvalidProducerEpochError, match="ABORT marker for producer 7 has epoch 2") as old:
        log.append_marker(7, 2, False, 5)
    assert old.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(TransactionCoordinatorFencedError, match="coordinator epoch 4, older than the epoch 5") as z:
        log.append_marker(7, 3, False, 4)
    assert z.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.next_offset == 5 and log.ongoing_transaction_first_offset(7) == 3
    assert _marker(log, 7, commit=False, epoch=3, coordinator_epoch=6) == 5
    (entry,) = log.active_producers()
    assert (entry.producer_epoch, entry.coordinator_epoch, entry.last_sequence) == (3, 6, 3)


def test_a_marker_with_a_bumped_epoch_fences_the_old_epoch(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _txn(log, 0, epoch=0)
    _marker(log, 7, commit=False, epoch=1)  # KIP-890: the coordinator ends the transaction with epoch + 1
    with pytest.raises(InvalidProducerEpochError):
        _txn(log, 2, epoch=0)
    with pytest.raises(OutOfOrderSequenceError):
        _txn(log, 5, epoch=1)  # the new epoch starts at sequence 0
    assert _txn(log, 0, epoch=1) == (3, 4)


def test_control_batches_appended_as_records_update_the_state_as_markers_do(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _txn(log, 0, pid=3)
    abort = build_control_batch(ControlType.ABORT, producer_id=3, producer_epoch=0, coordinator_epoch=2,
                                timestamp=T0)
    with pytest.raises(InvalidRecordError, match="clients may not produce control batches"):
        log.append(abort)
    info = log.append(abort, from_client=False)
    log.update_high_watermark(log.next_offset)
    assert info.first_offset == 2 and log.ongoing_transaction_first_offset(3) is None
    assert log.aborted_transactions(0, 3) == [(3, 0)]
    stale = build_control_batch(ControlType.COMMIT, producer_id=3, producer_epoch=0, coordinator_epoch=1,
                                timestamp=T0)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append(stale, from_client=False)


def test_a_completed_transaction_stays_unstable_until_the_high_watermark_passes_its_marker(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _txn(log, 0)
    log.append_marker(7, 0, True, 0)  # written, but not yet "replicated": the high watermark is still 2
    assert log.high_watermark == 2 and log.last_stable_offset == 0
    log.update_high_watermark(3)
    assert log.last_stable_offset == 3


def test_the_last_stable_offset_never_falls_below_the_log_start(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    _txn(log, 0)
    _plain(log, 3)
    log.delete_records_before(3)
    assert log.last_stable_offset == 3 and log.ongoing_transaction_first_offset(7) == 0


@pytest.mark.parametrize("clean", [True, False])
def test_ongoing_transactions_survive_a_restart(tmp_path: Path, clean: bool) -> None:
    path = tmp_path / "t-0"
    cfg = small_config(segment_bytes=1024)
    log = _open(path, config=cfg)
    _txn(log, 0, pid=1)
    for i in range(12):  # rolls: snapshots are taken while the transaction is open
        _produce(log, 2 * i, pid=2)
    _txn(log, 0, pid=3)
    _marker(log, 3, commit=False)
    end, hw = log.next_offset, log.high_watermark
    if clean:
        log.close()
    else:
        log.flush()
        for seg in log.segments:
            seg.close()
    reopened = _open(path, config=cfg, clean_shutdown=clean, recovery_point=end, high_watermark=hw)
    assert reopened.ongoing_transaction_first_offset(1) == 0
    assert reopened.ongoing_transaction_first_offset(3) is None
    assert reopened.last_stable_offset == 0
    assert reopened.aborted_transactions(0, end) == [(3, end - 3)]
    with pytest.raises(InvalidTxnStateError):
        _produce(reopened, 2, pid=1)
    _marker(reopened, 1, commit=True)
    assert reopened.last_stable_offset == reopened.next_offset


def test_truncation_reopens_or_forgets_transactions(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0", config=small_config(segment_bytes=1024))
    _plain(log, 2)
    _txn(log, 0)  # 2..3
    for i in range(10):
        _produce(log, 2 * i, pid=2)
    marker = _marker(log, 7, commit=False)
    assert log.aborted_transactions(0, log.next_offset) == [(7, 2)]
    log.truncate_to(marker)  # the marker is gone: the transaction is open again
    assert log.ongoing_transaction_first_offset(7) == 2 and log.last_stable_offset == 2
    assert log.aborted_transactions(0, log.next_offset) == []
    log.truncate_to(2)  # its first batch too: no transaction at all
    assert log.ongoing_transaction_first_offset(7) is None and log.last_stable_offset == 2


def test_producers_with_an_ongoing_transaction_never_expire(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = _open(tmp_path / "t-0", clock=clock)
    _txn(log, 0, pid=1)
    _produce(log, 0, pid=2)
    clock.advance(2 * DAY)
    log.remove_expired_producers(clock.milliseconds())
    assert [p.producer_id for p in log.active_producers()] == [1]
    assert log.last_stable_offset == 0
