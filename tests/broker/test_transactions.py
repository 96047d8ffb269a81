"""The transaction APIs through the broker's handlers: the coordinator wired to ``__transaction_state``,
markers written to the data partitions, verification of transactional produce, failures and restarts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.group_runtime import OFFSETS_TOPIC
from odradek.broker.txn_runtime import TXN_STATE_TOPIC
from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode, StorageError
from odradek.protocol.records import ControlType, decode_records, iter_batches, parse_control_key
from odradek.storage.log import Log
from tests.broker.test_group_handlers import COMPACTING, Node, clean
from tests.storage.helpers import batch

E = ErrorCode
TXN_PROPS = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "2"}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path / "data", **TXN_PROPS)
    n.broker.create_topic("orders", 2)
    yield n
    n.close()


def _init(node: Node, tid: str, timeout_ms: int = 60_000, version: int = 4) -> tuple[int, int]:
    r = node.call(apis.INIT_PRODUCER_ID, version, {"transactional_id": tid, "transaction_timeout": timeout_ms,
                                                  "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == E.NONE
    return int(r.producer_id), int(r.producer_epoch)


def _add(node: Node, tid: str, pid: int, epoch: int, partitions: dict[str, list[int]], version: int = 3
         ) -> dict[tuple[str, int], ErrorCode]:
    topics = [{"name": t, "partitions": ps} for t, ps in partitions.items()]
    if version <= 3:
        r = node.call(apis.ADD_PARTITIONS_TO_TXN, version, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": topics})
        results = r.results_by_topic_v3_and_below
    else:
        r = node.call(apis.ADD_PARTITIONS_TO_TXN, version, {"transactions": [{
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "verify_only": False,
            "topics": topics}]})
        results = r.results_by_transaction[0].topic_results
    return {(t.name, p.partition_index): ErrorCode(p.partition_error_code) for t in results
            for p in t.results_by_partition}


def _end(node: Node, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> ErrorCode:
    r = node.call(apis.END_TXN, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                          "committed": commit})
    return ErrorCode(r.error_code)


def _produce(node: Node, tid: str | None, records: bytes, partition: int = 0, version: int = 9) -> ErrorCode:
    r = node.call(apis.PRODUCE, version, {"transactional_id": tid, "acks": -1, "timeout": 1000, "topic_data": [
        {"name": "orders", "partition_data": [{"index": partition, "records": records}]}]})
    return ErrorCode(r.responses[0].partition_responses[0].error_code)


def _txn_batch(pid: int, epoch: int, seq: int = 0, n: int = 2) -> bytes:
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def _markers(lg: Log) -> list[tuple[int, ControlType]]:
    """(producer id, COMMIT/ABORT) of every control batch in the log, in order."""
    out = []
    offset = lg.log_start_offset
    while offset < lg.next_offset:  # one segment per read
        region = lg.read(offset, 1 << 24)
        assert region is not None
        data = region.read_bytes()
        for pos, h in iter_batches(data):
            if h.is_control:
                rec = decode_records(data[pos:pos + h.size])[0]
                out.append((h.producer_id, parse_control_key(bytes(rec.key or b"")).type))
            offset = h.next_offset
    return out


def _describe(node: Node, tid: str) -> Any:
    return node.call(apis.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}).transaction_states[0]


def test_a_committed_transaction_writes_commit_markers_to_every_partition(node: Node) -> None:
    pid, epoch = _init(node, "t1")
    assert set(_add(node, "t1", pid, epoch, {"orders": [0, 1]}).values()) == {E.NONE}
    assert _describe(node, "t1").transaction_state == "Ongoing"
    assert _produce(node, "t1", _txn_batch(pid, epoch), 0) == E.NONE
    assert _produce(node, "t1", _txn_batch(pid, epoch), 1) == E.NONE
    lg0 = node.broker.get_log("orders", 0)
    assert lg0.last_stable_offset == 0  # the open transaction holds it back
    assert _end(node, "t1", pid, epoch, True) == E.NONE
    for p in (0, 1):
        lg = node.broker.get_log("orders", p)
        assert _markers(lg) == [(pid, ControlType.COMMIT)]
        assert lg.last_stable_offset == lg.next_offset == 3
    d = _describe(node, "t1")
    assert (d.error_code, d.transaction_state, d.producer_id) == (E.NONE, "CompleteCommit", pid)
    listed = node.call(apis.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": [],
                                                   "duration_filter": -1}).transaction_states
    assert [(t.transactional_id, t.transaction_state) for t in listed] == [("t1", "CompleteCommit")]
    assert _end(node, "t1", pid, epoch, True) == E.NONE  # a retry of a completed commit


def test_an_aborted_transaction_writes_abort_markers_and_is_listed_as_aborted(node: Node) -> None:
    pid, epoch = _init(node, "t1")
    _add(node, "t1", pid, epoch, {"orders": [0]})
    assert _produce(node, "t1", _txn_batch(pid, epoch), 0) == E.NONE
    assert _end(node, "t1", pid, epoch, False) == E.NONE
    lg = node.broker.get_log("orders", 0)
    assert _markers(lg) == [(pid, ControlType.ABORT)]
    assert lg.aborted_transactions(0, lg.next_offset) == [(pid, 0)]
    assert _describe(node, "t1").transaction_state == "CompleteAbort"
    assert _end(node, "t1", pid, epoch, True) == E.INVALID_TXN_STATE


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_unknown_partitions_fail_the_whole_add(node: Node, version: int) -> None:
    pid, epoch = _init(node, "t1")
    results = _add(node, "t1", pid, epoch, {"orders": [0, 7], "nope": [0]}, version)
    assert results == {("orders", 0): E.OPERATION_NOT_ATTEMPTED, ("orders", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
                       ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert _describe(node, "t1").transaction_state == "Empty"


@pytest.mark.parametrize(("version", "expected"), [(9, E.INVALID_TXN_STATE), (11, E.TRANSACTION_ABORTABLE)])
def test_a_transactional_write_to_a_partition_not_in_the_transaction_is_refused(
        node: Node, version: int, expected: ErrorCode) -> None:
    pid, epoch = _init(node, "t1")
    _add(node, "t1", pid, epoch, {"orders": [0]})
    assert _produce(node, "t1", _txn_batch(pid, epoch), 1, version) == expected
    assert node.broker.get_log("orders", 1).next_offset == 0
    assert _produce(node, "t1", _txn_batch(pid, epoch), 0, version) == E.NONE


def test_a_new_instance_fences_the_old_one_and_aborts_its_transaction(node: Node) -> None:
    pid, epoch = _init(node, "t1")
    _add(node, "t1", pid, epoch, {"orders": [0]})
    assert _produce(node, "t1", _txn_batch(pid, epoch), 0) == E.NONE
    r = node.call(apis.INIT_PRODUCER_ID, 4, {"transactional_id": "t1", "transaction_timeout": 60_000,
                                             "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == E.CONCURRENT_TRANSACTIONS  # the old transaction is being aborted: retry
    pid2, epoch2 = _init(node, "t1")
    assert (pid2, epoch2) == (pid, epoch + 2)  # one bump to fence and abort, one for the new instance
    lg = node.broker.get_log("orders", 0)
    assert _markers(lg) == [(pid, ControlType.ABORT)]
    assert _end(node, "t1", pid, epoch, True, version=3) == E.PRODUCER_FENCED
    assert _end(node, "t1", pid, epoch, True, version=1) == E.INVALID_PRODUCER_EPOCH
    assert _produce(node, "t1", _txn_batch(pid, epoch, seq=2), 0) == E.INVALID_PRODUCER_EPOCH


def test_add_offsets_puts_the_groups_offsets_partition_in_the_transaction(node: Node) -> None:
    pid, epoch = _init(node, "t1")
    r = node.call(apis.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "t1", "producer_id": pid,
                                               "producer_epoch": epoch, "group_id": "g"})
    assert r.error_code == E.NONE
    topics = {t.topic: list(t.partitions) for t in _describe(node, "t1").topics}
    assert list(topics) == ["__consumer_offsets"] and len(topics["__consumer_offsets"]) == 1
    assert _end(node, "t1", pid, epoch, True) == E.NONE
    lg = node.broker.get_log("__consumer_offsets", topics["__consumer_offsets"][0])
    assert _markers(lg) == [(pid, ControlType.COMMIT)]


def test_markers_that_cannot_be_written_are_retried_and_survive_a_restart(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    pid, epoch = _init(node, "t1")
    _add(node, "t1", pid, epoch, {"orders": [0, 1]})
    assert _produce(node, "t1", _txn_batch(pid, epoch), 0) == E.NONE
    real = Log.append_marker

    def full_disk(self: Log, *args: Any, **kwargs: Any) -> Any:
        if self.partition == 1:
            raise StorageError("No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Log, "append_marker", full_disk)
    assert _end(node, "t1", pid, epoch, True) == E.NONE  # answered once PrepareCommit is durable
    assert node.broker.txns.outstanding_markers() == {"t1": [("orders", 1)]}
    assert _describe(node, "t1").transaction_state == "PrepareCommit"
    node.broker.txns.tick()  # still failing: still outstanding
    assert node.broker.txns.outstanding_markers() == {"t1": [("orders", 1)]}
    r = node.call(apis.INIT_PRODUCER_ID, 4, {"transactional_id": "t1", "transaction_timeout": 60_000,
                                             "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == E.CONCURRENT_TRANSACTIONS
    node.restart()  # the broker stops with the marker unwritten; the load finds PrepareCommit
    assert _markers(node.broker.get_log("orders", 1)) == []
    monkeypatch.setattr(Log, "append_marker", real)
    node.restart()
    assert node.broker.txns.outstanding_markers() == {}
    # Each load wrote the markers again, to orders-0 too (harmless, as in Kafka: the transaction there has ended).
    assert set(_markers(node.broker.get_log("orders", 0))) == {(pid, ControlType.COMMIT)}
    assert _markers(node.broker.get_log("orders", 1)) == [(pid, ControlType.COMMIT)]
    assert node.broker.get_log("orders", 0).last_stable_offset == node.broker.get_log("orders", 0).next_offset
    assert _describe(node, "t1").transaction_state == "CompleteCommit"


def test_a_transaction_left_open_is_aborted_after_its_timeout(tmp_path: Path) -> None:
    n = Node(tmp_path / "data", **TXN_PROPS, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1"})
    try:
        n.broker.create_topic("orders", 1)
        pid, epoch = _init(n, "t1", timeout_ms=20)
        _add(n, "t1", pid, epoch, {"orders": [0]})
        assert _produce(n, "t1", _txn_batch(pid, epoch), 0) == E.NONE
        n.broker.txns.tick()
        time.sleep(0.05)
        n.broker.txns.tick()
        assert _markers(n.broker.get_log("orders", 0)) == [(pid, ControlType.ABORT)]
        d = _describe(n, "t1")
        assert (d.transaction_state, d.producer_epoch) == ("CompleteAbort", epoch + 1)
        assert _end(n, "t1", pid, epoch, True) == E.PRODUCER_FENCED
    finally:
        n.close()


def test_the_transaction_state_topic_is_internal(node: Node) -> None:
    _init(node, "t1")
    topic = node.broker.registry.get(TXN_STATE_TOPIC)
    assert topic is not None and topic.internal and topic.partitions == 3
    r = node.call(apis.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["t1", ""]})
    assert [c.error_code for c in r.coordinators] == [E.NONE, E.INVALID_REQUEST]
    assert r.coordinators[0].node_id == node.broker.node_id


def _txn_offset_commit(node: Node, tid: str, pid: int, epoch: int, group: str, offset: int) -> ErrorCode:
    r = node.call(apis.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                      "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return ErrorCode(r.topics[0].partitions[0].error_code)


def _committed(node: Node, group: str) -> int:
    r = node.call(apis.OFFSET_FETCH, 7, {"group_id": group, "topics": [{"name": "orders", "partition_indexes": [0]}],
                                         "require_stable": True})
    return int(r.topics[0].partitions[0].committed_offset)


def test_offsets_committed_in_a_transaction_become_visible_when_it_commits(node: Node) -> None:
    pid, epoch = _init(node, "t1")
    _add(node, "t1", pid, epoch, {"orders": [0]})
    # Without AddOffsetsToTxn the group's partition is not in the transaction: refused, nothing pending.
    assert _txn_offset_commit(node, "t1", pid, epoch, "g", 5) == E.INVALID_TXN_STATE
    r = node.call(apis.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "t1", "producer_id": pid,
                                               "producer_epoch": epoch, "group_id": "g"})
    assert r.error_code == E.NONE
    assert _txn_offset_commit(node, "t1", pid, epoch, "g", 5) == E.NONE
    assert _committed(node, "g") == -1  # pending until the transaction commits
    assert _end(node, "t1", pid, epoch, True) == E.NONE
    assert _committed(node, "g") == 5
    # The next transaction's offsets are aborted: the committed offset stays.
    node.call(apis.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "t1", "producer_id": pid, "producer_epoch": epoch,
                                           "group_id": "g"})
    assert _txn_offset_commit(node, "t1", pid, epoch, "g", 9) == E.NONE
    assert _end(node, "t1", pid, epoch, False) == E.NONE
    assert _committed(node, "g") == 5
    node.restart()
    assert _committed(node, "g") == 5


def test_both_internal_topics_stay_bounded_by_compaction_and_replay_to_the_same_state(tmp_path: Path) -> None:
    """Read-process-write transactions through the whole path: each produces, commits its group's offset in the
    transaction and ends (every fourth aborts). The cleaner compacts ``__transaction_state`` and
    ``__consumer_offsets``, and a restart finds the same transactional id and committed offset."""
    node = Node(tmp_path / "data", **{**TXN_PROPS, **COMPACTING, "transaction.state.log.num.partitions": "1",
                                      "transaction.state.log.segment.bytes": "4096"})
    try:
        node.broker.create_topic("orders", 1)
        pid, epoch = _init(node, "t1")
        committed = -1
        for i in range(60):
            assert set(_add(node, "t1", pid, epoch, {"orders": [0]}).values()) == {E.NONE}
            assert _produce(node, "t1", _txn_batch(pid, epoch, seq=2 * i)) == E.NONE
            r = node.call(apis.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "t1", "producer_id": pid,
                                                       "producer_epoch": epoch, "group_id": "g"})
            assert r.error_code == E.NONE
            assert _txn_offset_commit(node, "t1", pid, epoch, "g", 2 * i + 2) == E.NONE
            commit = i % 4 != 3
            assert _end(node, "t1", pid, epoch, commit) == E.NONE
            committed = 2 * i + 2 if commit else committed
        state, offsets = node.broker.get_log(TXN_STATE_TOPIC, 0), node.broker.get_log(OFFSETS_TOPIC, 0)
        assert state.size > 4 * 4096 and offsets.size > 2 * 4096
        assert clean(node) >= 2
        assert state.size < 2 * 4096 and offsets.size < 2 * 4096
        before = _describe(node, "t1")
        node.restart()
        assert _committed(node, "g") == committed == 118
        after = _describe(node, "t1")
        assert (after.transaction_state, after.producer_id, after.producer_epoch) == (
            before.transaction_state, before.producer_id, before.producer_epoch) == ("CompleteAbort", pid, epoch)
        assert _init(node, "t1") == (pid, epoch + 1)  # the id's producer survived: its epoch is bumped
    finally:
        node.close()
