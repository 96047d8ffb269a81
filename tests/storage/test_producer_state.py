"""Idempotent producers' state in a partition log: retries, epochs, sequences, snapshots, expiry."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.clock import ManualClock
from odradek.protocol.errors import ErrorCode
from odradek.storage.log import Log
from odradek.storage.producer_state import (
    SNAPSHOT_SUFFIX,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
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
