"""TxnOffsetCommit and transaction markers in ``__consumer_offsets`` against an in-process broker.

Requests go through kio's classes for each version as in ``test_group_handlers.py``. A transaction's
end is played the way the transaction runtime does it (with the coordinator's verification off): a
COMMIT or ABORT marker appended to the group's partition of ``__consumer_offsets``
(``Log.append_marker``), then ``GroupRuntime.complete_txn``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.broker import group_runtime
from odradek.broker.group_runtime import OFFSETS_TOPIC
from odradek.coordinator.group.log_entries import DataRecord, TxnMarker
from odradek.coordinator.group.records import encode_key, encode_value
from odradek.protocol import apis
from odradek.protocol.batch import NO_SEQUENCE
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import ControlType, RecordInput, build_batch, build_control_batch, iter_batches
from odradek.storage.log import Log
from tests.broker.test_group_handlers import COMPACTING, Node, clean, commit, offsets_entries

E = ErrorCode
PID, EPOCH = 4000, 0


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    # The transaction coordinator's check that the offsets partition is in the transaction is off: these
    # tests play the transaction's end by hand (tests/broker/test_transactions.py runs the whole path).
    n = Node(tmp_path / "data", **{"transaction.partition.verification.enable": "false"})
    n.broker.create_topic("orders", 2)
    try:
        yield n
    finally:
        n.close()


def txn_commit(node: Node, version: int, group: str, offsets: dict[int, int], *, pid: int = PID, epoch: int = EPOCH,
               member_id: str = "", generation: int = -1, topic: str = "orders") -> dict[int, ErrorCode]:
    r = node.call(apis.TXN_OFFSET_COMMIT, version, {
        "transactional_id": "tx", "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": generation, "member_id": member_id, "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": "m"}
            for p, o in offsets.items()]}]})
    return {p.partition_index: p.error_code for t in r.topics for p in t.partitions}


def fetch(node: Node, group: str, *, require_stable: bool = False, version: int = 9,
          partitions: tuple[int, ...] | None = (0, 1)) -> tuple[ErrorCode, dict[int, tuple[int, ErrorCode]]]:
    topics = None if partitions is None else [{"name": "orders", "partition_indexes": list(partitions)}]
    if version >= 8:
        wanted = [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}]
        r = node.call(apis.OFFSET_FETCH, version, {"groups": wanted, "require_stable": require_stable})
        g = r.groups[0]
        error, parts = g.error_code, [p for t in g.topics for p in t.partitions]
    else:
        r = node.call(apis.OFFSET_FETCH, version, {"group_id": group, "topics": topics,
                                                   "require_stable": require_stable})
        error, parts = r.error_code, [p for t in r.topics for p in t.partitions]
    return error, {p.partition_index: (p.committed_offset, p.error_code) for p in parts}


def offsets_log(node: Node, group: str) -> tuple[int, Log]:
    groups = node.broker.groups
    coord = groups.coordinator
    assert coord is not None
    p = coord.partition_of(group)
    return p, node.broker.get_log(OFFSETS_TOPIC, p)


def end_txn(node: Node, group: str, commit: bool, *, pid: int = PID, epoch: int = EPOCH) -> None:
    """What the transaction runtime does for the group's partition: append the marker, then tell the groups."""
    p, lg = offsets_log(node, group)
    if hasattr(lg, "append_marker"):
        lg.append_marker(pid, epoch, commit, 0)
        lg.update_high_watermark(lg.next_offset)
    else:  # before the storage layer knows markers
        node.broker.append(OFFSETS_TOPIC, p, build_control_batch(
            ControlType.COMMIT if commit else ControlType.ABORT, producer_id=pid, producer_epoch=epoch,
            coordinator_epoch=0, timestamp=node.broker.clock.milliseconds()))
    node.broker.groups.complete_txn(p, pid, commit)


@pytest.mark.parametrize("version", range(6))
def test_pending_until_the_commit_marker_in_every_version(node: Node, version: int) -> None:
    assert txn_commit(node, version, "g", {0: 17, 1: 18, 5: 1}) == {0: E.NONE, 1: E.NONE,
                                                                    5: E.UNKNOWN_TOPIC_OR_PARTITION}
    assert fetch(node, "g") == (E.NONE, {0: (-1, E.NONE), 1: (-1, E.NONE)})
    assert fetch(node, "g", partitions=None) == (E.NONE, {})
    # the offsets are one transactional batch of the producer, without a sequence number
    _, lg = offsets_log(node, "g")
    data = lg.read(lg.log_start_offset, 1 << 20)
    assert data is not None
    [(_, header)] = list(iter_batches(data.read_bytes()))
    assert header.is_transactional and not header.is_control and header.record_count == 2
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, EPOCH, NO_SEQUENCE)
    end_txn(node, "g", commit=True)
    assert fetch(node, "g") == (E.NONE, {0: (17, E.NONE), 1: (18, E.NONE)})


def test_an_abort_marker_drops_them(node: Node) -> None:
    txn_commit(node, 3, "g", {0: 17})
    end_txn(node, "g", commit=False)
    assert fetch(node, "g", require_stable=True) == (E.NONE, {0: (-1, E.NONE), 1: (-1, E.NONE)})


@pytest.mark.parametrize("version", [7, 8, 9])
def test_require_stable_answers_unstable_offset_commit_per_partition(node: Node, version: int) -> None:
    r = node.call(apis.OFFSET_COMMIT, 9, {
        "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": "orders", "partitions": [
            {"partition_index": p, "committed_offset": 5, "committed_leader_epoch": -1, "committed_metadata": ""}
            for p in (0, 1)]}]})
    assert all(p.error_code == E.NONE for t in r.topics for p in t.partitions)
    txn_commit(node, 3, "g", {0: 17})
    assert fetch(node, "g", version=version, require_stable=True) == (
        E.NONE, {0: (-1, E.UNSTABLE_OFFSET_COMMIT), 1: (5, E.NONE)})
    assert fetch(node, "g", version=version) == (E.NONE, {0: (5, E.NONE), 1: (5, E.NONE)})
    end_txn(node, "g", commit=True)
    assert fetch(node, "g", version=version, require_stable=True) == (E.NONE, {0: (17, E.NONE), 1: (5, E.NONE)})


def test_member_fields_from_v3_are_checked(node: Node) -> None:
    assert txn_commit(node, 3, "fresh", {0: 1}, member_id="m", generation=4) == {0: E.ILLEGAL_GENERATION}
    assert txn_commit(node, 2, "", {0: 1}) == {0: E.INVALID_GROUP_ID}


def test_a_restart_keeps_them_pending_and_a_later_marker_applies_them(node: Node) -> None:
    txn_commit(node, 4, "g", {0: 17, 1: 18})
    txn_commit(node, 4, "other", {0: 3}, pid=PID + 1)
    node.restart()
    assert fetch(node, "g", require_stable=True) == (
        E.NONE, {0: (-1, E.UNSTABLE_OFFSET_COMMIT), 1: (-1, E.UNSTABLE_OFFSET_COMMIT)})
    end_txn(node, "g", commit=True)
    end_txn(node, "other", commit=False, pid=PID + 1)
    assert fetch(node, "g") == (E.NONE, {0: (17, E.NONE), 1: (18, E.NONE)})
    node.restart()  # and the markers replay to the same state
    assert fetch(node, "g", require_stable=True) == (E.NONE, {0: (17, E.NONE), 1: (18, E.NONE)})
    assert fetch(node, "other", require_stable=True) == (E.NONE, {0: (-1, E.NONE), 1: (-1, E.NONE)})


def test_a_marker_written_while_the_partition_loads_is_read_by_the_load(node: Node) -> None:
    txn_commit(node, 3, "g", {0: 17})
    node.broker.stop()
    node.broker = broker = type(node.broker)(node.broker.config)
    broker.start()
    to_load = broker.groups.start()
    loading: Any = txn_commit(node, 1, "g", {0: 1})
    assert loading == {0: E.COORDINATOR_NOT_AVAILABLE}  # v0/v1 clients do not retry LOAD_IN_PROGRESS
    assert txn_commit(node, 2, "g", {0: 1}) == {0: E.COORDINATOR_LOAD_IN_PROGRESS}
    end_txn(node, "g", commit=True)  # complete_txn is a no-op while loading: the load finds the marker
    node.loop.run_until_complete(broker.groups.load(to_load))
    assert fetch(node, "g", require_stable=True) == (E.NONE, {0: (17, E.NONE), 1: (-1, E.NONE)})


def test_a_marker_appended_during_the_read_of_a_loading_partition_is_not_missed(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    txn_commit(node, 3, "g", {0: 17})
    node.broker.stop()
    node.broker = broker = type(node.broker)(node.broker.config)
    broker.start()
    to_load = broker.groups.start()
    target, _ = offsets_log(node, "g")

    async def read_then_marker(fn: Any, lg: Log, *args: Any) -> Any:
        entries = fn(lg, *args)  # what the worker thread read ...
        if lg.name.endswith(f"-{target}"):
            end_txn(node, "g", commit=True)  # ... and a marker that landed while it did
        return entries

    monkeypatch.setattr(group_runtime.asyncio, "to_thread", read_then_marker)
    node.loop.run_until_complete(broker.groups.load(to_load))
    assert fetch(node, "g", require_stable=True) == (E.NONE, {0: (17, E.NONE), 1: (-1, E.NONE)})


def test_deleting_the_group_drops_pending_offsets(node: Node) -> None:
    txn_commit(node, 3, "g", {0: 17})
    deleted = node.call(apis.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert deleted.results[0].error_code == E.NONE
    end_txn(node, "g", commit=True)
    assert fetch(node, "g") == (E.NONE, {0: (-1, E.NONE), 1: (-1, E.NONE)})
    described = node.call(apis.DESCRIBE_GROUPS, 5, {"groups": ["g"], "include_authorized_operations": False})
    assert described.groups[0].group_state == "Dead"


def test_a_fenced_producer_epoch_is_refused(node: Node) -> None:
    txn_commit(node, 3, "g", {0: 17}, epoch=5)
    end_txn(node, "g", commit=True, epoch=5)
    assert txn_commit(node, 3, "g", {0: 99}, epoch=4) == {0: E.INVALID_PRODUCER_EPOCH}
    assert fetch(node, "g", require_stable=True) == (E.NONE, {0: (17, E.NONE), 1: (-1, E.NONE)})


def test_compaction_keeps_pending_offsets_and_the_topic_bounded_once_they_settle(tmp_path: Path) -> None:
    node = Node(tmp_path / "data", **{**COMPACTING, "transaction.partition.verification.enable": "false"})
    try:
        node.broker.create_topic("orders", 2)

        def plain(partition: int, offset: int) -> None:
            assert commit(node, "g", {partition: offset}, metadata="x" * 20) == [E.NONE]

        def transactional(pid: int) -> list[DataRecord]:
            return [e for e in offsets_entries(node) if isinstance(e, DataRecord) and e.producer_id == pid]

        def markers(pid: int) -> list[TxnMarker]:
            return [e for e in offsets_entries(node) if isinstance(e, TxnMarker) and e.producer_id == pid]

        plain(1, 1)
        plain(0, 5)
        assert txn_commit(node, 3, "g", {0: 17}) == {0: E.NONE}
        _, lg = offsets_log(node, "g")
        pending_at = lg.next_offset - 1
        for i in range(300):  # ~40 KB of plain commits while the transaction is open
            plain(1, i)
        clean(node)  # nothing at or after the open transaction is cleaned (the last stable offset)
        assert lg.next_offset - pending_at > 300 and lg.size > 8 * 4096
        assert [e.value.offset for e in transactional(PID) if e.value is not None] == [17]
        assert fetch(node, "g", require_stable=True)[1][0] == (-1, E.UNSTABLE_OFFSET_COMMIT)
        node.restart()
        _, lg = offsets_log(node, "g")
        assert fetch(node, "g", require_stable=True)[1] == {0: (-1, E.UNSTABLE_OFFSET_COMMIT), 1: (299, E.NONE)}
        end_txn(node, "g", commit=True)  # 17 was written after the plain 5: it becomes the committed offset
        assert fetch(node, "g", require_stable=True)[1] == {0: (17, E.NONE), 1: (299, E.NONE)}
        assert txn_commit(node, 3, "g", {0: 99}, pid=PID + 1) == {0: E.NONE}
        end_txn(node, "g", commit=False, pid=PID + 1)
        for i in range(300):
            plain(1, 1000 + i)
        assert clean(node) >= 1
        assert lg.size < 2 * 4096
        # the committed transaction's record is its key's latest: it stays, and so does its marker
        assert len(transactional(PID)) == 1 and [m.commit for m in markers(PID)] == [True]
        assert not transactional(PID + 1)  # the aborted transaction's batch is gone
        node.restart()
        assert fetch(node, "g", require_stable=True)[1] == {0: (17, E.NONE), 1: (1299, E.NONE)}
        plain(0, 40)  # supersedes the transactional record: then its marker may go too
        for i in range(40):
            plain(1, 2000 + i)
        clean(node)
        for i in range(40):  # a second pass: the markers' delete horizon (delete.retention.ms=0) has passed
            plain(1, 3000 + i)
        clean(node)
        assert not transactional(PID) and not markers(PID) and not markers(PID + 1)
        node.restart()
        assert fetch(node, "g", require_stable=True)[1] == {0: (40, E.NONE), 1: (3039, E.NONE)}
    finally:
        node.close()


def test_txn_offset_commit_is_advertised(node: Node) -> None:
    versions = node.call(apis.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    [row] = [k for k in versions.api_keys if k.api_key == apis.TXN_OFFSET_COMMIT]
    assert (row.min_version, row.max_version) == (0, 4)  # v5 is KIP-890's second phase, not offered


@pytest.mark.parametrize("marker_before_upgrade", [False, True])
def test_a_copy_left_by_an_earlier_version_s_rewrite_does_not_outlive_a_later_committed_offset(
        tmp_path: Path, marker_before_upgrade: bool) -> None:
    """Earlier versions rewrote the topic: copies of the committed offsets appended after a pending
    transactional offset, each naming its original's offset in a header. A COMMIT then applies the pending
    offset over the older copy, though the copy sits later in the log, where compaction would keep it alone:
    the runtime appends the committed offset again after it."""
    node = Node(tmp_path / "data", **{**COMPACTING, "transaction.partition.verification.enable": "false"})
    try:
        node.broker.create_topic("orders", 2)
        assert commit(node, "g", {0: 5}, metadata="x" * 20) == [E.NONE]
        assert txn_commit(node, 3, "g", {0: 17}) == {0: E.NONE}
        [original] = [e for e in offsets_entries(node) if isinstance(e, DataRecord) and e.producer_id < 0]
        p, lg = offsets_log(node, "g")
        lg.roll()  # as the old rewrite appended its copies
        copy = RecordInput(encode_key(original.key), encode_value(original.value), None,
                           ((group_runtime.ORIGIN_HEADER, struct.pack(">q", original.record_offset)),))
        node.broker.append(OFFSETS_TOPIC, p, build_batch([copy], base_timestamp=node.broker.clock.milliseconds()))
        if marker_before_upgrade:
            lg.append_marker(PID, EPOCH, True, 0)
            lg.update_high_watermark(lg.next_offset)
        node.restart()  # the upgrade: the log as an earlier version left it
        if not marker_before_upgrade:
            assert fetch(node, "g")[1][0] == (5, E.NONE)
            end_txn(node, "g", commit=True)
        assert fetch(node, "g")[1][0] == (17, E.NONE)  # 17 was written after the copy's original
        for i in range(100):
            assert commit(node, "g", {1: i}, metadata="x" * 20) == [E.NONE]
        assert clean(node) >= 1
        node.restart()
        assert fetch(node, "g", require_stable=True)[1] == {0: (17, E.NONE), 1: (99, E.NONE)}
        offsets = [e for e in offsets_entries(node) if isinstance(e, DataRecord) and e.key == original.key]
        assert [(e.value.offset if e.value else None) for e in offsets] == [17]  # compacted to the committed one
    finally:
        node.close()
