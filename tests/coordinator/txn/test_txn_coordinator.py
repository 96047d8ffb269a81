"""The transaction coordinator as a pure state machine: Kafka's rules for InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, KIP-890 verification, markers, timeouts, expiry, loading and the admin APIs."""

from __future__ import annotations

import pytest

from odradek.coordinator.txn.config import TxnConfig
from odradek.coordinator.txn.model import TxnState
from odradek.coordinator.txn.records import TxnKey, TxnValue, decode_record, encode_value
from odradek.coordinator.txn.replies import InitProducerIdResult, for_request_version
from odradek.protocol.errors import ErrorCode
from tests.coordinator.txn.harness import Harness, durable

E = ErrorCode
S = TxnState


def started(h: Harness, tid: str = "t", *partitions: tuple[str, int]) -> tuple[int, int]:
    r = h.init(tid)
    assert r.error is E.NONE
    assert h.add(tid, r.producer_id, r.producer_epoch, *(partitions or (("orders", 0),))) is E.NONE
    return r.producer_id, r.producer_epoch


# -- InitProducerId ---------------------------------------------------------------------------------


def test_a_new_transactional_id_gets_a_producer_id_at_epoch_0_once_durable() -> None:
    h = Harness()
    h.now = 5
    assert h.init("t") == InitProducerIdResult(E.NONE, 1000, 0)
    meta = h.coord.txns["t"]
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.start_ms, meta.last_update_ms) == (S.EMPTY, 1000, 0,
                                                                                                       -1, 5)
    # exactly the bytes Kafka 4.x writes: value v1, null partitions, previous_producer_id (tag 0) = 1000
    [(_key, value)] = h.log[h.coord.partition_of("t")]
    assert value == bytes.fromhex("0001" "00000000000003e8" "0000" "0000ea60" "00" "00" "0000000000000005"
                                  "ffffffffffffffff" "01" "00" "08" "00000000000003e8")


def test_init_again_bumps_the_epoch_and_keeps_the_producer_id() -> None:
    h = Harness()
    h.init("t")
    assert h.init("t", timeout=30_000) == InitProducerIdResult(E.NONE, 1000, 1)
    assert h.coord.txns["t"].timeout_ms == 30_000


def test_idempotent_producers_get_a_fresh_id_and_nothing_is_written() -> None:
    h = Harness()
    assert h.init(None) == InitProducerIdResult(E.NONE, 1000, 0)
    assert h.init(None) == InitProducerIdResult(E.NONE, 1001, 0)
    assert not h.written


@pytest.mark.parametrize("tid, timeout, pid, epoch, error", [
    ("", 1000, -1, -1, E.INVALID_REQUEST),
    ("t", 0, -1, -1, E.INVALID_TRANSACTION_TIMEOUT),
    ("t", 900_001, -1, -1, E.INVALID_TRANSACTION_TIMEOUT),
    ("t", 1000, 5, -1, E.INVALID_REQUEST),
    ("t", 1000, -1, 3, E.INVALID_REQUEST),
])
def test_init_refuses_bad_requests(tid: str, timeout: int, pid: int, epoch: int, error: ErrorCode) -> None:
    h = Harness()
    assert h.init(tid, timeout, pid, epoch) == InitProducerIdResult(error)
    assert not h.written


def test_init_while_a_transaction_is_ongoing_fences_and_aborts_it() -> None:
    h = Harness()
    pid, epoch = started(h, "t", ("orders", 0), ("orders", 1))
    assert h.init("t") == InitProducerIdResult(E.CONCURRENT_TRANSACTIONS)
    meta = h.coord.txns["t"]
    assert (meta.state, meta.producer_epoch) == (S.PREPARE_ABORT, epoch + 1)
    [m] = h.markers
    assert (m.commit, m.producer_id, m.producer_epoch, m.partitions) == (False, pid, epoch + 1,
                                                                         (("orders", 0), ("orders", 1)))
    # the old instance is fenced; while the abort completes the new one must wait
    assert h.add("t", pid, epoch, ("orders", 2)) is E.PRODUCER_FENCED
    assert h.init("t") == InitProducerIdResult(E.CONCURRENT_TRANSACTIONS)
    h.write_markers()
    assert h.coord.txns["t"].state is S.COMPLETE_ABORT
    assert h.init("t") == InitProducerIdResult(E.NONE, pid, epoch + 2)


def test_a_fence_whose_write_failed_keeps_the_producer_fenced_and_is_not_bumped_twice() -> None:
    h = Harness()
    pid, epoch = started(h)
    before = durable(h.coord)
    h.fail_writes = E.KAFKA_STORAGE_ERROR
    assert h.init("t") == InitProducerIdResult(E.NOT_COORDINATOR)
    assert durable(h.coord) == before and h.coord.txns["t"].state is S.ONGOING
    assert not h.markers
    assert h.add("t", pid, epoch, ("orders", 1)) is E.PRODUCER_FENCED  # the in-memory epoch was bumped
    h.fail_writes = None
    assert h.init("t") == InitProducerIdResult(E.CONCURRENT_TRANSACTIONS)
    assert h.coord.txns["t"].producer_epoch == epoch + 1
    h.write_markers()
    assert h.init("t") == InitProducerIdResult(E.NONE, pid, epoch + 2)


def test_init_during_prepare_answers_concurrent_transactions() -> None:
    h = Harness()
    pid, epoch = started(h)
    assert h.end("t", pid, epoch, True) is E.NONE
    assert h.init("t") == InitProducerIdResult(E.CONCURRENT_TRANSACTIONS)
    assert h.init("t", producer_id=pid, epoch=epoch) == InitProducerIdResult(E.CONCURRENT_TRANSACTIONS)


def _at_epoch(h: Harness, tid: str, pid: int, epoch: int, state: TxnState = S.EMPTY) -> None:
    """Load a transactional id at an epoch, as if read from the log."""
    p = h.coord.partition_of(tid)
    h.coord.begin_load(p)
    h.coord.replay(TxnKey(tid), TxnValue(pid, epoch, 60_000, state, None if state is S.EMPTY else (), 0, -1, pid))
    h.apply(h.coord.finish_load(p, h.now))


def test_epoch_exhaustion_rotates_to_a_new_producer_id() -> None:
    h = Harness()
    _at_epoch(h, "t", 7, 32765)
    assert h.init("t") == InitProducerIdResult(E.NONE, 7, 32766)
    assert h.init("t") == InitProducerIdResult(E.NONE, 1000, 0)
    meta = h.coord.txns["t"]
    assert (meta.previous_producer_id, meta.last_producer_epoch) == (7, -1)
    # a KIP-360 retry naming the old id: allowed (previous id, exhausted epoch) but nothing to return
    assert h.init("t", producer_id=7, epoch=32766) == InitProducerIdResult(E.PRODUCER_FENCED)


def test_kip360_rotation_retry_gets_the_new_producer_id_back() -> None:
    h = Harness()
    _at_epoch(h, "t", 7, 32765)
    assert h.init("t", producer_id=7, epoch=32765) == InitProducerIdResult(E.NONE, 7, 32766)
    assert h.init("t", producer_id=7, epoch=32766) == InitProducerIdResult(E.NONE, 1000, 0)
    # the response was lost; the producer retries with what it had
    assert h.init("t", producer_id=7, epoch=32766) == InitProducerIdResult(E.NONE, 1000, 0)


def test_kip360_recovery_with_the_current_or_the_previous_epoch() -> None:
    h = Harness()
    h.init("t")
    assert h.init("t", producer_id=1000, epoch=0) == InitProducerIdResult(E.NONE, 1000, 1)
    assert h.coord.txns["t"].last_producer_epoch == 0
    assert h.init("t", producer_id=1000, epoch=0) == InitProducerIdResult(E.NONE, 1000, 1)  # a retry: no bump
    assert h.init("t", producer_id=1000, epoch=5) == InitProducerIdResult(E.PRODUCER_FENCED)
    assert h.init("t", producer_id=999, epoch=1) == InitProducerIdResult(E.PRODUCER_FENCED)
    # after a restart the last epoch is gone (Kafka keeps it in memory only): the retry is fenced
    h.coord = h.rebuilt()
    assert h.init("t", producer_id=1000, epoch=0) == InitProducerIdResult(E.PRODUCER_FENCED)
    assert h.init("t", producer_id=1000, epoch=1) == InitProducerIdResult(E.NONE, 1000, 2)


def test_kip360_for_an_unknown_transactional_id_starts_afresh() -> None:
    h = Harness()
    assert h.init("gone", producer_id=55, epoch=3) == InitProducerIdResult(E.NONE, 1000, 0)


def test_a_failed_init_append_is_answered_with_kafkas_error_and_changes_nothing() -> None:
    h = Harness()
    h.fail_writes = E.REQUEST_TIMED_OUT
    assert h.init("t") == InitProducerIdResult(E.COORDINATOR_NOT_AVAILABLE)
    assert not h.coord.txns and not h.coord.pending
    h.fail_writes = E.MESSAGE_TOO_LARGE
    assert h.init("t") == InitProducerIdResult(E.UNKNOWN_SERVER_ERROR)
    h.fail_writes = None
    assert h.init("t").error is E.NONE


def test_only_one_write_per_transactional_id_is_in_flight() -> None:
    h = Harness()
    fx = h.coord.init_producer_id(999, "t", 1000, now=0)  # not applied yet: the append is in flight
    assert h.init("t") == InitProducerIdResult(E.CONCURRENT_TRANSACTIONS)
    h.apply(fx)
    assert h.reply(999) == InitProducerIdResult(E.NONE, 1000, 0)


# -- AddPartitionsToTxn / AddOffsetsToTxn / verification -----------------------------------------------


def test_add_partitions_starts_the_transaction_and_repeats_write_nothing() -> None:
    h = Harness()
    r = h.init("t")
    h.now = 40
    assert h.add("t", r.producer_id, r.producer_epoch, ("orders", 0)) is E.NONE
    meta = h.coord.txns["t"]
    assert (meta.state, meta.start_ms, meta.partitions) == (S.ONGOING, 40, frozenset({("orders", 0)}))
    n = len(h.written)
    h.now = 50
    assert h.add("t", r.producer_id, r.producer_epoch, ("orders", 0)) is E.NONE
    assert len(h.written) == n
    assert h.add("t", r.producer_id, r.producer_epoch, ("orders", 0), ("audit", 3)) is E.NONE
    meta = h.coord.txns["t"]
    assert (meta.start_ms, meta.last_update_ms, len(meta.partitions)) == (40, 50, 2)


@pytest.mark.parametrize("tid, pid, epoch, error", [
    ("unknown", 1000, 1, E.INVALID_PRODUCER_ID_MAPPING),
    ("t", 1001, 1, E.INVALID_PRODUCER_ID_MAPPING),
    ("t", 1000, 0, E.PRODUCER_FENCED),
    ("t", 1000, 2, E.PRODUCER_FENCED),
    ("", 1000, 1, E.INVALID_REQUEST),
])
def test_add_partitions_errors(tid: str, pid: int, epoch: int, error: ErrorCode) -> None:
    h = Harness()
    h.init("t")
    h.init("t")  # producer 1000 at epoch 1
    n = len(h.written)
    assert h.add(tid, pid, epoch, ("o", 0)) is error
    assert len(h.written) == n
    assert h.add("t", 1000, 1, ("o", 0)) is E.NONE


def test_older_clients_are_told_invalid_producer_epoch() -> None:
    assert for_request_version(E.PRODUCER_FENCED, "AddPartitionsToTxn", 1) is E.INVALID_PRODUCER_EPOCH
    assert for_request_version(E.PRODUCER_FENCED, "AddPartitionsToTxn", 2) is E.PRODUCER_FENCED
    assert for_request_version(E.PRODUCER_FENCED, "InitProducerId", 3) is E.INVALID_PRODUCER_EPOCH
    assert for_request_version(E.PRODUCER_FENCED, "EndTxn", 1) is E.INVALID_PRODUCER_EPOCH
    assert for_request_version(E.PRODUCER_FENCED, "TxnOffsetCommit", 2) is E.INVALID_PRODUCER_EPOCH
    assert for_request_version(E.CONCURRENT_TRANSACTIONS, "EndTxn", 0) is E.CONCURRENT_TRANSACTIONS


def test_add_during_prepare_is_concurrent_and_after_completion_starts_anew() -> None:
    h = Harness()
    pid, epoch = started(h)
    h.end("t", pid, epoch, True)
    assert h.add("t", pid, epoch, ("orders", 1)) is E.CONCURRENT_TRANSACTIONS
    h.write_markers()
    h.now = 99
    assert h.add("t", pid, epoch, ("orders", 1)) is E.NONE
    meta = h.coord.txns["t"]
    assert (meta.state, meta.start_ms, meta.partitions) == (S.ONGOING, 99, frozenset({("orders", 1)}))


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    h = Harness()
    r = h.init("t")
    t = h.call("add_offsets", "t", r.producer_id, r.producer_epoch, "my-group", 17)
    assert h.reply(t) is E.NONE
    assert h.coord.txns["t"].partitions == frozenset({("__consumer_offsets", 17)})
    t = h.call("add_offsets", "t", r.producer_id, r.producer_epoch + 1, "my-group", 17)
    assert h.reply(t) is E.PRODUCER_FENCED


def test_verify_partitions_says_which_partitions_are_in_the_transaction() -> None:
    h = Harness()
    pid, epoch = started(h, "t", ("orders", 0))
    v = h.coord.verify_partitions
    assert v("t", pid, epoch, [("orders", 0), ("orders", 1)]) == {("orders", 0): E.NONE,
                                                                 ("orders", 1): E.TRANSACTION_ABORTABLE}
    assert v("t", pid, epoch + 1, [("orders", 0)]) == {("orders", 0): E.PRODUCER_FENCED}
    assert v("t", pid + 1, epoch, [("orders", 0)]) == {("orders", 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert v("nope", pid, epoch, [("orders", 0)]) == {("orders", 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert v("", pid, epoch, [("orders", 0)]) == {("orders", 0): E.INVALID_REQUEST}
    h.end("t", pid, epoch, False)
    assert v("t", pid, epoch, [("orders", 0)]) == {("orders", 0): E.CONCURRENT_TRANSACTIONS}
    h.write_markers()
    assert v("t", pid, epoch, [("orders", 0)]) == {("orders", 0): E.TRANSACTION_ABORTABLE}
    n = len(h.written)
    v("t", pid, epoch, [("orders", 0)])
    assert len(h.written) == n


# -- EndTxn and markers -------------------------------------------------------------------------------


def test_commit_prepares_then_markers_complete_it() -> None:
    h = Harness()
    pid, epoch = started(h, "t", ("orders", 1), ("audit", 0))
    assert h.end("t", pid, epoch, True) is E.NONE  # answered once PrepareCommit is durable
    assert h.coord.txns["t"].state is S.PREPARE_COMMIT
    [m] = h.markers
    assert (m.transactional_id, m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch, m.partitions,
            m.txn_partition) == ("t", pid, epoch, True, 0, (("audit", 0), ("orders", 1)), h.coord.partition_of("t"))
    assert h.end("t", pid, epoch, True) is E.CONCURRENT_TRANSACTIONS
    assert h.end("t", pid, epoch, False) is E.CONCURRENT_TRANSACTIONS  # the completion is pending (as Kafka)
    h.now = 70
    h.write_markers()
    meta = h.coord.txns["t"]
    assert (meta.state, meta.partitions, meta.last_update_ms, meta.producer_epoch) == (S.COMPLETE_COMMIT,
                                                                                        frozenset(), 70, epoch)
    assert h.end("t", pid, epoch, True) is E.NONE  # a retry of the same outcome
    assert h.end("t", pid, epoch, False) is E.INVALID_TXN_STATE


def test_abort_completes_and_a_commit_retry_is_refused() -> None:
    h = Harness()
    pid, epoch = started(h)
    assert h.end("t", pid, epoch, False) is E.NONE
    assert h.markers[0].commit is False
    h.write_markers()
    assert h.coord.txns["t"].state is S.COMPLETE_ABORT
    assert h.end("t", pid, epoch, False) is E.NONE
    assert h.end("t", pid, epoch, True) is E.INVALID_TXN_STATE


def test_end_txn_errors() -> None:
    h = Harness()
    r = h.init("t")
    assert h.end("t", r.producer_id, r.producer_epoch, False) is E.INVALID_TXN_STATE  # Empty: transaction v1
    assert h.end("t", r.producer_id, r.producer_epoch, True) is E.INVALID_TXN_STATE
    assert h.end("t", r.producer_id, r.producer_epoch + 1, True) is E.PRODUCER_FENCED
    assert h.end("t", r.producer_id + 1, r.producer_epoch, True) is E.INVALID_PRODUCER_ID_MAPPING
    assert h.end("x", r.producer_id, r.producer_epoch, True) is E.INVALID_PRODUCER_ID_MAPPING
    assert h.end("", r.producer_id, r.producer_epoch, True) is E.INVALID_REQUEST


def test_a_failed_prepare_append_leaves_the_transaction_ongoing_and_sends_no_markers() -> None:
    h = Harness()
    pid, epoch = started(h)
    h.fail_writes = E.NOT_ENOUGH_REPLICAS
    assert h.end("t", pid, epoch, True) is E.COORDINATOR_NOT_AVAILABLE
    assert h.coord.txns["t"].state is S.ONGOING and not h.markers and "t" not in h.coord.pending
    h.fail_writes = None
    assert h.end("t", pid, epoch, True) is E.NONE


def test_a_failed_complete_append_is_retried_by_tick() -> None:
    h = Harness()
    pid, epoch = started(h)
    h.end("t", pid, epoch, True)
    h.fail_writes = E.KAFKA_STORAGE_ERROR
    h.write_markers()
    assert h.coord.txns["t"].state is S.PREPARE_COMMIT
    assert h.end("t", pid, epoch, True) is E.CONCURRENT_TRANSACTIONS
    h.fail_writes = None
    h.advance(1)
    assert h.coord.txns["t"].state is S.COMPLETE_COMMIT


def test_stale_or_repeated_marker_reports_change_nothing() -> None:
    h = Harness()
    pid, epoch = started(h)
    fx = h.coord.markers_written("t", pid, epoch, now=0)
    assert not fx.writes  # not prepared
    h.end("t", pid, epoch, True)
    assert not h.coord.markers_written("t", pid, epoch + 1, now=0).writes
    first = h.coord.markers_written("t", pid, epoch, now=0)
    assert len(first.writes) == 1
    assert not h.coord.markers_written("t", pid, epoch, now=0).writes  # the Complete record is on its way
    h.apply(first)
    assert h.coord.txns["t"].state is S.COMPLETE_COMMIT


# -- timeouts and expiry ------------------------------------------------------------------------------


def test_a_timed_out_transaction_is_aborted_at_a_bumped_epoch() -> None:
    h = Harness(TxnConfig(abort_timed_out_interval_ms=100, num_partitions=3))
    r = h.init("t", timeout=1000)
    h.now = 10
    h.add("t", r.producer_id, r.producer_epoch, ("orders", 0))
    h.advance(0)  # schedules the checks
    assert not h.coord.abort_timed_out(1010).writes  # start + timeout == now: not yet (strictly older)
    h.advance(1001)
    meta = h.coord.txns["t"]
    assert (meta.state, meta.producer_epoch) == (S.PREPARE_ABORT, r.producer_epoch + 1)
    assert h.markers[0].producer_epoch == r.producer_epoch + 1 and not h.markers[0].commit
    assert h.add("t", r.producer_id, r.producer_epoch, ("orders", 1)) is E.PRODUCER_FENCED
    h.write_markers()
    assert h.coord.txns["t"].state is S.COMPLETE_ABORT
    assert h.end("t", r.producer_id, r.producer_epoch, True) is E.PRODUCER_FENCED


def test_idle_transactional_ids_expire_with_a_tombstone() -> None:
    cfg = TxnConfig(transactional_id_expiration_ms=5000, remove_expired_interval_ms=1000, num_partitions=3)
    h = Harness(cfg)
    h.init("idle")
    started(h, "busy")
    h.advance(0)
    h.advance(4000)
    assert "idle" in h.coord.txns
    h.advance(1000)
    assert "idle" not in h.coord.txns and "busy" in h.coord.txns  # Ongoing never expires
    assert h.written[-1] == (TxnKey("idle"), None)
    assert h.coord.describe(["idle"])[0].error is E.TRANSACTIONAL_ID_NOT_FOUND
    for horizon_passed in (False, True):  # compacted, with its tombstone or without: the id stays gone
        h.compact(horizon_passed=horizon_passed)
        assert set(h.rebuilt().txns) == {"busy"}
    assert h.init("idle") == InitProducerIdResult(E.NONE, 1002, 0)  # a new producer id


def test_a_failed_expiry_keeps_the_id_for_the_next_round() -> None:
    h = Harness(TxnConfig(transactional_id_expiration_ms=10, num_partitions=3))
    h.init("t")
    h.fail_writes = E.KAFKA_STORAGE_ERROR
    h.apply(h.coord.expire_transactional_ids(100))
    assert "t" in h.coord.txns and "t" not in h.coord.pending
    h.fail_writes = None
    h.apply(h.coord.expire_transactional_ids(100))
    assert "t" not in h.coord.txns


# -- loading ------------------------------------------------------------------------------------------


def test_loading_answers_load_in_progress() -> None:
    h = Harness()
    pid, epoch = started(h)
    p = h.coord.partition_of("t")
    h.coord.begin_load(p)
    assert h.init("t") == InitProducerIdResult(E.COORDINATOR_LOAD_IN_PROGRESS)
    assert h.add("t", pid, epoch, ("o", 1)) is E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.end("t", pid, epoch, True) is E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.coord.verify_partitions("t", pid, epoch, [("o", 1)]) == {("o", 1): E.COORDINATOR_LOAD_IN_PROGRESS}
    assert h.coord.describe(["t"])[0].error is E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.coord.list_transactions().error is E.COORDINATOR_LOAD_IN_PROGRESS


def test_a_restart_between_prepare_and_complete_writes_the_markers_again() -> None:
    h = Harness()
    pid, epoch = started(h, "t", ("orders", 3))
    h.end("t", pid, epoch, True)
    h.markers.clear()  # the broker stopped before writing them
    fresh = h.rebuilt()
    assert fresh.txns["t"].state is S.PREPARE_COMMIT
    h.coord = fresh
    p = fresh.partition_of("t")
    fresh.begin_load(p, coordinator_epoch=4)
    for kb, vb in h.log[p]:
        decoded = decode_record(kb, vb)
        assert decoded is not None
        fresh.replay(*decoded)
    assert h.init("t") == InitProducerIdResult(E.COORDINATOR_LOAD_IN_PROGRESS)
    h.apply(fresh.finish_load(p, h.now))
    [m] = h.markers
    assert (m.commit, m.partitions, m.coordinator_epoch, m.producer_epoch) == (True, (("orders", 3),), 4, epoch)
    assert h.end("t", pid, epoch, True) is E.CONCURRENT_TRANSACTIONS
    h.write_markers()
    assert fresh.txns["t"].state is S.COMPLETE_COMMIT


def test_an_ongoing_transaction_times_out_from_its_start_after_a_restart() -> None:
    h = Harness(TxnConfig(abort_timed_out_interval_ms=10, num_partitions=3))
    r = h.init("t", timeout=1000)
    h.now = 100
    h.add("t", r.producer_id, r.producer_epoch, ("o", 0))
    h.now = 1050
    h.coord = h.rebuilt()
    assert h.coord.txns["t"].start_ms == 100
    assert not h.coord.abort_timed_out(1100).writes
    h.apply(h.coord.abort_timed_out(1101))
    assert h.coord.txns["t"].state is S.PREPARE_ABORT


def test_unload_forgets_the_partition() -> None:
    h = Harness()
    started(h)
    h.coord.unload(h.coord.partition_of("t"))
    assert "t" not in h.coord.txns


# -- DescribeTransactions / ListTransactions --------------------------------------------------------------


def test_describe() -> None:
    h = Harness()
    h.now = 3
    pid, epoch = started(h, "t", ("b", 1), ("a", 2), ("b", 0))
    [d, missing, bad] = h.coord.describe(["t", "nope", ""])
    assert (d.error, d.state, d.producer_id, d.producer_epoch, d.timeout_ms, d.start_ms, d.topics) == (
        E.NONE, "Ongoing", pid, epoch, 60_000, 3, (("a", (2,)), ("b", (0, 1))))
    assert missing.error is E.TRANSACTIONAL_ID_NOT_FOUND and bad.error is E.INVALID_REQUEST


def test_list_with_filters() -> None:
    h = Harness()
    h.init("a")
    h.now = 100
    started(h, "b")
    lst = h.coord.list_transactions
    assert [t.transactional_id for t in lst().transactions] == ["a", "b"]
    assert [t.state for t in lst(["Ongoing"]).transactions] == ["Ongoing"]
    r = lst(["Ongoing", "Bogus"])
    assert r.unknown_state_filters == ("Bogus",) and [t.transactional_id for t in r.transactions] == ["b"]
    assert [t.transactional_id for t in lst(producer_id_filter=[1000]).transactions] == ["a"]
    assert [t.transactional_id for t in lst(["Empty"], [1001]).transactions] == []
    # KIP-994: only transactions running longer than the duration
    assert [t.transactional_id for t in lst(["Ongoing"], duration_filter_ms=50, now=200).transactions] == ["b"]
    assert [t.transactional_id for t in lst(["Ongoing"], duration_filter_ms=100, now=200).transactions] == []
    assert h.coord.list is not None and h.coord.list().error is E.NONE


def test_written_records_encode_as_kafka_does() -> None:
    h = Harness()
    pid, epoch = started(h, "t", ("orders", 0))
    h.end("t", pid, epoch, True)
    h.write_markers()
    states = [v.status for _, v in h.written if v is not None]
    assert states == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    complete = h.written[-1][1]
    assert complete is not None and complete.partitions == () and complete.start_ms == 0
    raw = encode_value(complete)
    assert raw is not None and raw[16:18] == b"\x04\x01"  # CompleteCommit, an empty (not null) array
