"""WriteTxnMarkers through the broker's handler: an operator's abort ends a hanging transaction (one the
coordinator never heard of), and each partition of the request gets its own error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from tests.broker.test_group_handlers import Node
from tests.storage.helpers import batch

E = ErrorCode
PID = 4242  # never handed out by InitProducerId: the coordinator knows nothing of this producer


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    # Without verification a transactional batch is accepted without AddPartitionsToTxn: the way a
    # hanging transaction came about in Kafka before KIP-890.
    n = Node(tmp_path / "data", **{"transaction.partition.verification.enable": "false"})
    n.broker.create_topic("orders", 2)
    yield n
    n.close()


def _produce(node: Node, records: bytes, partition: int = 0) -> None:
    r = node.call(apis.PRODUCE, 9, {"transactional_id": "ghost", "acks": -1, "timeout": 1000, "topic_data": [
        {"name": "orders", "partition_data": [{"index": partition, "records": records}]}]})
    assert r.responses[0].partition_responses[0].error_code == E.NONE


def _markers(node: Node, *markers: dict[str, Any]) -> dict[tuple[int, str, int], ErrorCode]:
    r = node.call(apis.WRITE_TXN_MARKERS, 1, {"markers": list(markers)})
    return {(m.producer_id, t.name, p.partition_index): ErrorCode(p.error_code)
            for m in r.markers for t in m.topics for p in t.partitions}


def _marker(pid: int, epoch: int, commit: bool, coordinator_epoch: int, **partitions: list[int]) -> dict[str, Any]:
    return {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
            "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]}


def test_an_abort_ends_a_hanging_transaction_and_releases_the_last_stable_offset(node: Node) -> None:
    lg = node.broker.get_log("orders", 0)
    _produce(node, batch(3, producer_id=PID, producer_epoch=2, base_sequence=0, is_transactional=True))
    _produce(node, batch(2))  # plain records after it are held back too
    assert lg.last_stable_offset == 0 and lg.next_offset == 5

    assert _markers(node, _marker(PID, 2, False, 0, orders=[0])) == {(PID, "orders", 0): E.NONE}
    assert lg.next_offset == 6 and lg.last_stable_offset == 6
    assert lg.aborted_transactions(0, 6) == [(PID, 0)]
    assert [p.current_txn_start_offset for p in lg.active_producers()] == [-1]
    assert node.broker.txns.outstanding_markers() == {}  # the coordinator was not involved


def test_each_partition_gets_its_own_error(node: Node) -> None:
    _produce(node, batch(1, producer_id=PID, producer_epoch=3, base_sequence=0, is_transactional=True))
    assert _markers(node, _marker(PID, 3, False, 5, orders=[0])) == {(PID, "orders", 0): E.NONE}
    _produce(node, batch(1, producer_id=PID, producer_epoch=3, base_sequence=1, is_transactional=True))
    results = _markers(
        node,
        _marker(PID, 2, False, 5, orders=[0]),  # an older producer epoch
        _marker(PID + 1, 0, True, 0, orders=[1, 7], missing=[0]),  # unknown partitions fail alone
        _marker(-1, 0, False, 0, orders=[1]),
    )
    assert results == {
        (PID, "orders", 0): E.INVALID_PRODUCER_EPOCH,
        (PID + 1, "orders", 1): E.NONE,  # no open transaction there: written, ends nothing
        (PID + 1, "orders", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
        (PID + 1, "missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        (-1, "orders", 1): E.INVALID_REQUEST,
    }
    # a coordinator epoch older than the one of the producer's last marker: a zombie coordinator
    assert _markers(node, _marker(PID, 3, True, 4, orders=[0])) == {(PID, "orders", 0):
                                                                    E.TRANSACTION_COORDINATOR_FENCED}
    lg = node.broker.get_log("orders", 0)
    assert lg.last_stable_offset == 2  # still open: the refused markers wrote nothing
    assert _markers(node, _marker(PID, 3, True, 5, orders=[0])) == {(PID, "orders", 0): E.NONE}
    assert lg.last_stable_offset == lg.next_offset == 4
