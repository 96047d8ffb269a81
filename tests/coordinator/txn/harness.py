"""A synchronous stand-in for a transaction coordinator runtime: appends each write's records to an in-memory
log per partition (as bytes, the way they would reach disk), replays them, delivers replies, and queues the
marker effects until the test says the markers are written. Tests drive the real ``TransactionCoordinator``."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from odradek.coordinator.txn.allocator import SequentialProducerIds
from odradek.coordinator.txn.config import TxnConfig
from odradek.coordinator.txn.coordinator import TransactionCoordinator
from odradek.coordinator.txn.effects import Effects, Record, TxnMarkers
from odradek.coordinator.txn.records import decode_record, encode_key, encode_value
from odradek.protocol.errors import ErrorCode

E = ErrorCode


class Harness:
    def __init__(self, config: TxnConfig | None = None, partitions: int = 3, *, first_producer_id: int = 1000) -> None:
        self.config = config or TxnConfig(num_partitions=partitions)
        self.ids = SequentialProducerIds(first_producer_id)
        self.coord = TransactionCoordinator(self.config, self.ids, partitions)
        self.log: dict[int, list[tuple[bytes, bytes | None]]] = defaultdict(list)
        self.written: list[Record] = []
        self.replies: dict[int, Any] = {}
        self.markers: list[TxnMarkers] = []
        self.tickets = itertools.count(1)
        self.now = 0
        self.fail_writes: ErrorCode | None = None  # set: every append fails with this error
        self.warnings: list[str] = []

    # -- the runtime --------------------------------------------------------------------------------

    def apply(self, fx: Effects) -> None:
        self.warnings.extend(fx.warnings)
        for w in fx.writes:
            if self.fail_writes is not None:
                assert w.on_failure is not None
                self._deliver(w.on_failure(self.fail_writes))
                continue
            for key, value in w.records:
                self.log[w.partition].append((encode_key(key), encode_value(value)))
                self.written.append((key, value))
                self.coord.replay(key, value)
            self._deliver(w.replies)
            self.markers.extend(w.markers)
        self._deliver(fx.replies)
        self.markers.extend(fx.markers)

    def _deliver(self, replies: list[tuple[int, Any]]) -> None:
        for ticket, payload in replies:
            assert ticket not in self.replies, f"ticket {ticket} answered twice"
            self.replies[ticket] = payload

    def write_markers(self) -> list[TxnMarkers]:
        """Write every queued marker set and report it written; returns what was written."""
        done, self.markers = self.markers, []
        for m in done:
            self.apply(self.coord.markers_written(m.transactional_id, m.producer_id, m.producer_epoch, now=self.now))
        return done

    def call(self, method: str, *args: Any, **kwargs: Any) -> int:
        """Start an operation that answers a ticket; returns the ticket (its reply may come later)."""
        ticket = next(self.tickets)
        self.apply(getattr(self.coord, method)(ticket, *args, now=self.now, **kwargs))
        return ticket

    def reply(self, ticket: int) -> Any:
        return self.replies.get(ticket)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.apply(self.coord.tick(self.now))

    # -- client helpers -----------------------------------------------------------------------------

    def init(self, tid: str | None, timeout: int = 60_000, producer_id: int = -1, epoch: int = -1) -> Any:
        return self.reply(self.call("init_producer_id", tid, timeout, producer_id, epoch))

    def add(self, tid: str, pid: int, epoch: int, *partitions: tuple[str, int]) -> Any:
        return self.reply(self.call("add_partitions", tid, pid, epoch, list(partitions)))

    def end(self, tid: str, pid: int, epoch: int, commit: bool) -> Any:
        return self.reply(self.call("end_txn", tid, pid, epoch, commit))

    def compact(self, *, horizon_passed: bool = False) -> None:
        """As the log cleaner compacts ``__transaction_state`` (it holds no transactions of its own): the latest
        record of every key; with ``horizon_passed`` (``delete.retention.ms`` after the cleaning that first saw
        them) not even the tombstones. Offsets never change, so only the order of what is left matters here."""
        for p, records in self.log.items():
            latest = {kb: i for i, (kb, _) in enumerate(records)}
            self.log[p] = [(kb, vb) for i, (kb, vb) in enumerate(records)
                           if latest[kb] == i and not (horizon_passed and vb is None)]

    def rebuilt(self) -> TransactionCoordinator:
        """A fresh coordinator that replayed the bytes this one wrote (a broker restart)."""
        fresh = TransactionCoordinator(self.config, SequentialProducerIds(0), self.coord.num_partitions)
        for p, records in self.log.items():
            fresh.begin_load(p)
            for kb, vb in records:
                decoded = decode_record(kb, vb)
                assert decoded is not None
                fresh.replay(*decoded)
            fresh.finish_load(p, self.now)
        return fresh


def durable(coord: TransactionCoordinator) -> dict[str, tuple[object, ...]]:
    return {tid: meta.durable() for tid, meta in coord.txns.items()}
