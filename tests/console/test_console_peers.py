"""The cluster-wide transactions page's model (``admin.cluster_transactions``) over stand-in brokers: open
transactions from every partition's leader, Kafka's hanging rule over the coordinators' answers, and no transaction
called hanging while a coordinator does not answer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from odradek.console import admin
from odradek.console.peers import PeerError, Peers
from odradek.protocol.errors import ErrorCode

NOW = 1_000_000
MAX_TIMEOUT = 60_000


def _broker() -> Any:
    """Broker 1 of three: it leads nothing and coordinates no transaction; 2 leads t-0 and t-1, 3 leads t-2."""
    coordinator = SimpleNamespace(
        list_transactions=lambda **_: SimpleNamespace(error=ErrorCode.NONE, transactions=()),
        describe=lambda ids: [],
    )
    leaders = {("t", 0): 2, ("t", 1): 2, ("t", 2): 3}
    return SimpleNamespace(
        node_id=1,
        cluster=SimpleNamespace(
            brokers={1: None, 2: None, 3: None},
            states={tp: SimpleNamespace(leader=leader) for tp, leader in leaders.items()},
        ),
        replicas=SimpleNamespace(partitions=lambda: []),
        config=SimpleNamespace(values={"transaction.max.timeout.ms": MAX_TIMEOUT}),
        clock=SimpleNamespace(milliseconds=lambda: NOW),
        txns=SimpleNamespace(view=lambda: coordinator),
    )


def _open(pid: int, start: int, last: int = 0) -> Any:
    return SimpleNamespace(producer_id=pid, producer_epoch=0, coordinator_epoch=0, current_txn_start_offset=start,
                           last_timestamp=last)


class StandIns(Peers):
    """Peers answering from fixed tables; a broker in ``down`` does not answer."""

    def __init__(self, broker: Any, down: frozenset[int] = frozenset()) -> None:
        super().__init__(broker)
        self.down = down
        self.asked_producers: dict[int, list[tuple[str, int]]] = {}

    async def transactions(self, broker_id: int) -> list[dict[str, Any]]:
        if broker_id in self.down:
            raise PeerError(broker_id, f"broker {broker_id} did not answer ListTransactions in time")
        if broker_id != 3:
            return []
        return [{"transactional_id": "known", "producer_id": 7, "producer_epoch": 0, "state": "Ongoing",
                 "timeout_ms": 60_000, "start_ms": 0, "partitions": (("t", 0),)}]

    async def producers(self, broker_id: int, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], Any]:
        self.asked_producers[broker_id] = sorted(partitions)
        table = {("t", 0): [_open(7, 5)], ("t", 1): [_open(8, 9)], ("t", 2): [_open(9, 3, last=NOW)]}
        return {tp: table[tp] for tp in partitions}


def test_open_and_hanging_transactions_over_every_leader_and_coordinator() -> None:
    peers = StandIns(_broker())
    found = asyncio.run(admin.cluster_transactions(peers.broker, peers))
    assert peers.asked_producers == {2: [("t", 0), ("t", 1)], 3: [("t", 2)]}
    assert [t.transactional_id for t in found.transactions] == ["known"]
    assert [(p.topic, p.partition, p.producer_id, p.start_offset) for p in found.producers] == [
        ("t", 0, 7, 5), ("t", 1, 8, 9), ("t", 2, 9, 3)]
    # pid 7's coordinator lists t-0 (not hanging); pid 9 wrote just now (within the timeout); pid 8 is hanging
    assert [(h.topic, h.partition, h.producer_id, h.start_offset) for h in found.hanging] == [("t", 1, 8, 9)]
    assert found.notices == []


def test_no_transaction_is_hanging_while_a_coordinator_does_not_answer() -> None:
    peers = StandIns(_broker(), down=frozenset({3}))
    found = asyncio.run(admin.cluster_transactions(peers.broker, peers))
    assert found.hanging == []
    assert len(found.producers) == 3
    assert found.notices[0] == "broker 3 did not answer ListTransactions in time"
    assert "hanging transactions are not shown" in found.notices[1]
