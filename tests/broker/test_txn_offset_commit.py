"""TxnOffsetCommit and transaction markers in ``__consumer_offsets`` against an in-process broker.

Requests go through kio's classes for each version as in ``test_group_handlers.py``. A transaction's
end is played the way the transaction runtime does it (with the coordinator's verification off): a
COMMIT or ABORT marker appended to the group's partition of ``__consumer_offsets``
(``Log.append_marker``), then ``GroupRuntime.complete_txn``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.broker import group_runtime
from odradek.broker.group_runtime import OFFSETS_TOPIC
from odradek.protocol import apis
from odradek.protocol.batch import NO_SEQUENCE
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import ControlType, build_control_batch, iter_batches
from odradek.storage.log import Log
from tests.broker.test_group_handlers import Node

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


def test_rewrites_keep_pending_offsets_and_the_topic_bounded_once_they_settle(tmp_path: Path) -> None:
    node = Node(tmp_path / "data", **{"offsets.topic.segment.bytes": "4096", "offsets.topic.num.partitions": "1",
                                      "transaction.partition.verification.enable": "false"})
    try:
        node.broker.create_topic("orders", 2)

        def plain(offset: int) -> None:
            r = node.call(apis.OFFSET_COMMIT, 9, {
                "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": "orders", "partitions": [{"partition_index": 1, "committed_offset": offset,
                                                              "committed_leader_epoch": -1,
                                                              "committed_metadata": "x" * 20}]}]})
            assert r.topics[0].partitions[0].error_code == E.NONE

        plain(1)
        r = node.call(apis.OFFSET_COMMIT, 9, {
            "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                          "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        assert r.topics[0].partitions[0].error_code == E.NONE
        assert txn_commit(node, 3, "g", {0: 17}) == {0: E.NONE}
        _, lg = offsets_log(node, "g")
        pending_at = lg.next_offset - 1
        for i in range(300):  # ~30 KB of plain commits: many rewrites while the transaction is open
            plain(i)
        assert lg.log_start_offset <= pending_at  # kept for replay
        assert fetch(node, "g", require_stable=True)[1][0] == (-1, E.UNSTABLE_OFFSET_COMMIT)
        node.restart()
        _, lg = offsets_log(node, "g")
        assert fetch(node, "g", require_stable=True)[1] == {0: (-1, E.UNSTABLE_OFFSET_COMMIT), 1: (299, E.NONE)}
        end_txn(node, "g", commit=True)  # the rewritten copy of offset 5 is older than the pending 17
        assert fetch(node, "g", require_stable=True)[1] == {0: (17, E.NONE), 1: (299, E.NONE)}
        for i in range(300):
            plain(1000 + i)
        assert lg.log_start_offset > pending_at and lg.size < 3 * 4096
        node.restart()
        assert fetch(node, "g", require_stable=True)[1] == {0: (17, E.NONE), 1: (1299, E.NONE)}
    finally:
        node.close()


def test_txn_offset_commit_is_advertised(node: Node) -> None:
    versions = node.call(apis.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    [row] = [k for k in versions.api_keys if k.api_key == apis.TXN_OFFSET_COMMIT]
    assert (row.min_version, row.max_version) == (0, 4)  # v5 is KIP-890's second phase, not offered
