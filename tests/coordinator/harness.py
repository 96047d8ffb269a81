"""A synchronous stand-in for the broker's group runtime: applies Effects the way ``broker/group_runtime.py``
does (records appended to an in-memory log per partition, replayed with their offsets and producer ids,
then replies delivered), with time passed explicitly. Transaction markers are emulated as the runtime
appends them, and compaction as the log cleaner applies its rules (``compact``). Tests drive the real
``GroupCoordinator`` through it."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from odradek.coordinator.group import consumer_protocol as cp
from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.coordinator import GroupCoordinator
from odradek.coordinator.group.effects import Effects
from odradek.coordinator.group.log_entries import NO_PRODUCER_ID, DataRecord, LogEntry, TxnMarker
from odradek.coordinator.group.records import Key
from odradek.protocol.errors import ErrorCode

E = ErrorCode


def subscription(*topics: str) -> bytes:
    return cp.encode_subscription(cp.Subscription(tuple(topics)))


def assignment(*partitions: tuple[str, tuple[int, ...]]) -> bytes:
    return cp.encode_assignment(cp.Assignment(tuple(partitions)))


class Harness:
    def __init__(self, config: GroupConfig | None = None, partitions: int = 3, *, fail_writes: bool = False) -> None:
        self.config = config or GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100)
        ids = itertools.count(1)
        self.coord = GroupCoordinator(self.config, partitions, new_member_id=lambda cid: f"{cid}-{next(ids)}")
        # an entry's offset is its index; None: an entry compaction removed (offsets never change)
        self.log: dict[int, list[LogEntry | None]] = defaultdict(list)
        self.replies: dict[int, Any] = {}
        self.tickets = itertools.count(1)
        self.now = 0
        self.fail_writes = fail_writes
        self.warnings: list[str] = []

    def apply(self, fx: Effects) -> None:
        self.warnings.extend(fx.warnings)
        for w in fx.writes:
            if self.fail_writes:
                if w.on_failure is not None:
                    self._deliver(w.on_failure(E.KAFKA_STORAGE_ERROR))
                continue
            log = self.log[w.partition]
            for key, value in w.records:
                log.append(DataRecord(key, value, len(log), w.producer_id))
                self.coord.replay(key, value, record_offset=len(log) - 1, producer_id=w.producer_id)
            self._deliver(w.replies)
        self._deliver(fx.replies)

    def _deliver(self, replies: list[tuple[int, Any]]) -> None:
        for ticket, payload in replies:
            assert ticket not in self.replies, f"ticket {ticket} answered twice"
            self.replies[ticket] = payload

    def call(self, method: str, **kwargs: Any) -> int:
        """Start an operation that answers a ticket; returns the ticket (its reply may come later)."""
        ticket = next(self.tickets)
        self.apply(getattr(self.coord, method)(ticket, now=self.now, **kwargs) if method != "delete_group"
                   else self.coord.delete_group(ticket, **kwargs))
        return ticket

    def reply(self, ticket: int) -> Any:
        return self.replies.get(ticket)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.apply(self.coord.tick(self.now))

    # -- protocol helpers ---------------------------------------------------------------------------

    def join(self, group: str, member_id: str = "", *, client: str = "c", instance: str | None = None,
             protocols: list[tuple[str, bytes]] | None = None, session: int = 1000, rebalance: int = 2000,
             version: int = 9) -> int:
        return self.call("join", group_id=group, member_id=member_id, group_instance_id=instance,
                         protocol_type="consumer", protocols=protocols or [("range", subscription("t"))],
                         session_timeout_ms=session, rebalance_timeout_ms=rebalance, client_id=client,
                         client_host="/127.0.0.1", require_known_member_id=version >= 4,
                         supports_skip_assignment=version >= 9)

    def sync(self, group: str, member_id: str, generation: int,
             assignments: list[tuple[str, bytes]] | None = None, instance: str | None = None) -> int:
        return self.call("sync", group_id=group, generation_id=generation, member_id=member_id,
                         group_instance_id=instance, protocol_type=None, protocol_name=None,
                         assignments=assignments or [])

    def heartbeat(self, group: str, member_id: str, generation: int, instance: str | None = None) -> ErrorCode:
        return self.coord.heartbeat(group_id=group, generation_id=generation, member_id=member_id,
                                    group_instance_id=instance, now=self.now)

    def leave(self, group: str, *members: tuple[str, str | None]) -> list[ErrorCode]:
        _, errors, fx = self.coord.leave(group_id=group, members=list(members), now=self.now)
        self.apply(fx)
        return errors

    def commit(self, group: str, offsets: dict[tuple[str, int], int], *, member_id: str = "", generation: int = -1,
               metadata: str = "", instance: str | None = None) -> dict[tuple[str, int], ErrorCode]:
        requests = [(tp[0], tp[1], o, -1, metadata) for tp, o in offsets.items()]
        t = self.call("commit", group_id=group, generation_id=generation, member_id=member_id,
                      group_instance_id=instance, offsets=requests,
                      retention_ms=-1, partition_exists=lambda topic, p: topic.startswith("t") and p < 8)
        result: dict[tuple[str, int], ErrorCode] = self.reply(t)
        return result

    def txn_commit(self, group: str, producer_id: int, offsets: dict[tuple[str, int], int], *, member_id: str = "",
                   generation: int = -1, instance: str | None = None, metadata: str = "", epoch: int = 0
                   ) -> dict[tuple[str, int], ErrorCode]:
        requests = [(tp[0], tp[1], o, -1, metadata) for tp, o in offsets.items()]
        t = self.call("txn_commit", group_id=group, producer_id=producer_id, producer_epoch=epoch,
                      generation_id=generation, member_id=member_id, group_instance_id=instance, offsets=requests,
                      partition_exists=lambda topic, p: topic.startswith("t") and p < 8)
        result: dict[tuple[str, int], ErrorCode] = self.reply(t)
        return result

    def marker(self, group: str, producer_id: int, commit: bool) -> None:
        """The transaction coordinator's marker in ``group``'s partition, appended then replayed."""
        partition = self.coord.partition_of(group)
        self.log[partition].append(TxnMarker(producer_id, commit))
        self.coord.replay_marker(partition, producer_id, commit)

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        error, found = self.coord.fetch_offsets(group, None)
        assert error == E.NONE
        return {tp: e.offset for tp, e, _ in found if e is not None}

    def compact(self, partition: int, *, horizon_passed: bool = False) -> None:
        """As the log cleaner compacts ``partition`` (``odradek/storage/cleaner/clean.py``), over everything below
        its last stable offset (the first record of a transaction whose marker is not written yet): the records
        of aborted transactions go, and every record that is not the latest of its key (aborted ones do not
        count). With ``horizon_passed`` (``delete.retention.ms`` after the cleaning that first saw them) the
        tombstones go too, and the markers whose transaction has no record left. Offsets never change.

        A little more eager than the cleaner (it keeps the active segment, and a marker one pass longer), so
        that whatever replays the same here replays the same after any real cleaning."""
        log = self.log[partition]
        open_txns: dict[int, list[int]] = {}  # producer -> offsets of its records still awaiting a marker
        txn_of_marker: dict[int, list[int]] = {}
        aborted: set[int] = set()
        for offset, entry in enumerate(log):
            if isinstance(entry, TxnMarker):
                records = txn_of_marker[offset] = open_txns.pop(entry.producer_id, [])
                if not entry.commit:
                    aborted.update(records)
            elif entry is not None and entry.producer_id != NO_PRODUCER_ID:
                open_txns.setdefault(entry.producer_id, []).append(offset)
        stable = min((records[0] for records in open_txns.values()), default=len(log))
        latest: dict[Key, int] = {}
        for offset in range(stable):
            entry = log[offset]
            if isinstance(entry, DataRecord) and offset not in aborted:
                latest[entry.key] = offset
        for offset in range(stable):
            entry = log[offset]
            if isinstance(entry, DataRecord) and (offset in aborted or latest[entry.key] != offset
                                                  or (horizon_passed and entry.value is None)):
                log[offset] = None
        if horizon_passed:
            for offset, records in txn_of_marker.items():
                if offset < stable and all(log[r] is None for r in records):
                    log[offset] = None

    def stable_group(self, group: str, n: int) -> list[tuple[str, int]]:
        """Join ``n`` members (two-step JoinGroup v4+), sync with one partition each; returns (member id, gen)."""
        ids = []
        for i in range(n):
            first = self.reply(self.join(group, client=f"c{i}"))
            assert first["error_code"] == E.MEMBER_ID_REQUIRED
            ids.append(first["member_id"])
        tickets = [self.join(group, mid) for mid in ids]
        replies = [self.reply(t) for t in tickets]
        assert all(r is not None and r["error_code"] == E.NONE for r in replies), replies
        gen = replies[0]["generation_id"]
        leader = replies[0]["leader"]
        plan = [(mid, assignment(("t", (i,)))) for i, mid in enumerate(ids)]
        syncs = [self.sync(group, mid, gen, plan if mid == leader else None) for mid in ids if mid != leader]
        syncs.append(self.sync(group, leader, gen, plan))
        assert all(self.reply(t)["error_code"] == E.NONE for t in syncs)
        return [(mid, gen) for mid in ids]

    def rebuilt(self) -> GroupCoordinator:
        """A fresh coordinator that replayed everything this one wrote (a broker restart)."""
        fresh = GroupCoordinator(self.config, self.coord.num_partitions)
        for p, entries in self.log.items():
            fresh.begin_load(p)
            for entry in entries:
                if entry is not None:
                    fresh.replay_entry(p, entry)
            fresh.finish_load(p, self.now)
        return fresh
