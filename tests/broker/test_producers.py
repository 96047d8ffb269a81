"""InitProducerId and idempotent Produce through the broker's handlers (kio-encoded, every version)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.producer_ids import BLOCK_FILE, ProducerIdAllocator
from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode, StorageError
from tests.broker.test_group_handlers import Node
from tests.storage.helpers import batch

E = ErrorCode


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path / "data")
    yield n
    n.close()


def _init(node: Node, version: int = 4, transactional_id: str | None = None) -> Any:
    return node.call(apis.INIT_PRODUCER_ID, version, {"transactional_id": transactional_id,
                                                      "transaction_timeout": 60_000, "producer_id": -1,
                                                      "producer_epoch": -1})


def _produce(node: Node, records: bytes, topic: str = "orders") -> tuple[int, int]:
    r = node.call(apis.PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout": 1000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    p = r.responses[0].partition_responses[0]
    return int(p.error_code), int(p.base_offset)


@pytest.mark.parametrize("version", range(6))
def test_init_producer_id_gives_fresh_ids_at_epoch_zero(node: Node, version: int) -> None:
    first, second = _init(node, version), _init(node, version)
    assert (first.error_code, second.error_code) == (E.NONE, E.NONE)
    assert second.producer_id > first.producer_id >= 0
    assert first.producer_epoch == second.producer_epoch == 0


@pytest.mark.parametrize("version", range(6))
def test_a_transactional_id_keeps_its_producer_id_and_bumps_its_epoch(node: Node, version: int) -> None:
    first = _init(node, version, transactional_id="tx-1")
    second = _init(node, version, transactional_id="tx-1")
    other = _init(node, version, transactional_id="tx-2")
    assert (first.error_code, second.error_code, other.error_code) == (E.NONE, E.NONE, E.NONE)
    assert second.producer_id == first.producer_id != other.producer_id
    assert (first.producer_epoch, second.producer_epoch) == (0, 1)
    node.restart()  # the id's state is replayed from __transaction_state
    assert _init(node, version, transactional_id="tx-1").producer_epoch == 2


def test_producer_ids_never_repeat_across_restarts(node: Node) -> None:
    seen = {_init(node).producer_id for _ in range(5)}
    node.restart()
    after = {_init(node).producer_id for _ in range(5)}
    assert min(after) > max(seen)


def test_idempotent_produce_over_the_wire(node: Node) -> None:
    node.broker.create_topic("orders", 1)
    pid = _init(node).producer_id
    first = batch(3, producer_id=pid, producer_epoch=0, base_sequence=0)
    assert _produce(node, first) == (E.NONE, 0)
    assert _produce(node, first) == (E.NONE, 0)  # the retry: same offset, nothing appended
    assert _produce(node, batch(1, producer_id=pid, producer_epoch=0, base_sequence=7))[0] == \
        E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _produce(node, batch(1, producer_id=pid, producer_epoch=0, base_sequence=3)) == (E.NONE, 3)
    node.restart()  # the state survives in the snapshot written at close
    assert _produce(node, batch(1, producer_id=pid, producer_epoch=0, base_sequence=3)) == (E.NONE, 3)
    assert _produce(node, batch(1, producer_id=pid, producer_epoch=1, base_sequence=0)) == (E.NONE, 4)
    assert _produce(node, batch(1, producer_id=pid, producer_epoch=0, base_sequence=4))[0] == \
        E.INVALID_PRODUCER_EPOCH
    assert node.broker.get_log("orders", 0).next_offset == 5


def test_an_unreadable_producer_id_block_stops_the_broker_with_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / BLOCK_FILE).write_text("not a number")
    with pytest.raises(StorageError, match="producer-id-block is unreadable"):
        ProducerIdAllocator(tmp_path)


def test_allocation_survives_a_crash_without_reuse(tmp_path: Path) -> None:
    a = ProducerIdAllocator(tmp_path, block_size=10)
    ids = [a.next_producer_id() for _ in range(13)]
    b = ProducerIdAllocator(tmp_path, block_size=10)  # a crash: the rest of the block is skipped
    assert b.next_producer_id() == 20 and ids == list(range(13))
