"""The transaction coordinator's state, and the one way durable state changes: replaying ``__transaction_state``.

Durable state is one ``TxnMetadata`` per transactional id: exactly what the last record for that id
says. It changes only in ``replay(key, value)``, called for every record read while loading and for
every record the coordinator wrote, once durable. A restart that replays the topic therefore ends in
the durable state the coordinator had.

Beside it, in memory only, as in Kafka's ``TransactionMetadata``:

- ``pending``: the state a transactional id is moving to while a write for it is in flight, or --
  for a prepared transaction -- the Complete state it reaches once its markers are written (Kafka's
  ``pendingState``). Operations meeting a pending transition answer CONCURRENT_TRANSACTIONS.
- ``fenced``: the epoch an epoch fence (InitProducerId or a timeout aborting an Ongoing transaction)
  bumped to, from the moment the fence is decided until a record for the id is applied. Kafka bumps
  the in-memory epoch before the append and keeps it if the append fails (``hasFailedEpochFence``),
  so the fenced producer stays fenced and a retried fence does not bump twice.
- ``markers_done`` / ``completing``: prepared transactions whose markers are written, and those whose
  Complete record is being appended (a failed append is retried by ``tick``).

Invariants:
- ``replay`` of a value stores it and settles the in-memory fields of its id: a Prepare* value
  leaves the id pending its Complete state (its markers must be written, by whoever wrote it or by
  the load that found it); any other value clears ``pending``. A tombstone (or a Dead value) removes
  the id. Every value clears ``fenced``, ``markers_done`` and ``completing`` for its id.
- A partition in ``loading`` answers every operation on its ids with COORDINATOR_LOAD_IN_PROGRESS; in a
  cluster, a partition not in ``owned`` (this broker does not lead it) answers NOT_COORDINATOR.
- ``current(tid)`` is the metadata operations validate against: the durable metadata with a
  ``fenced`` epoch applied.
"""

from __future__ import annotations

import dataclasses

from odradek.coordinator.txn.allocator import ProducerIdAllocator
from odradek.coordinator.txn.config import TxnConfig
from odradek.coordinator.txn.model import NO_PRODUCER_EPOCH, TxnMetadata, TxnState, completion_of
from odradek.coordinator.txn.records import TxnKey, TxnValue, group_partitions, partition_for
from odradek.protocol.errors import ErrorCode


class TxnCoordinatorState:
    def __init__(self, config: TxnConfig, producer_ids: ProducerIdAllocator, num_partitions: int | None = None) -> None:
        self.config = config
        self.producer_ids = producer_ids
        self.num_partitions = num_partitions if num_partitions is not None else config.num_partitions
        if self.num_partitions <= 0:
            raise ValueError(f"__transaction_state needs at least one partition, got {self.num_partitions}")
        self.txns: dict[str, TxnMetadata] = {}
        self.loading: set[int] = set()
        # the partitions this broker coordinates; None = all of them (a single node)
        self.owned: set[int] | None = None
        self.coordinator_epochs: dict[int, int] = {}
        self.pending: dict[str, TxnState] = {}
        self.fenced: dict[str, int] = {}
        self.markers_done: set[str] = set()
        self.completing: set[str] = set()
        self._partition_cache: dict[str, int] = {}

    # -- lookups ------------------------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        part = self._partition_cache.get(transactional_id)
        if part is None:
            if len(self._partition_cache) > 100_000:  # bounded: ids from arbitrary clients
                self._partition_cache.clear()
            part = self._partition_cache[transactional_id] = partition_for(transactional_id, self.num_partitions)
        return part

    def unavailable(self, transactional_id: str | None) -> ErrorCode | None:
        """The error for any operation on ``transactional_id`` before looking at its metadata, or None."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        if self.owned is not None and self.partition_of(transactional_id) not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        if self.partition_of(transactional_id) in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    def current(self, transactional_id: str) -> TxnMetadata | None:
        meta = self.txns.get(transactional_id)
        epoch = self.fenced.get(transactional_id)
        if meta is None or epoch is None:
            return meta
        return dataclasses.replace(meta, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH)

    def ids_in(self, partition: int) -> list[str]:
        return sorted(tid for tid in self.txns if self.partition_of(tid) == partition)

    def coordinator_epoch(self, transactional_id: str) -> int:
        return self.coordinator_epochs.get(self.partition_of(transactional_id), 0)

    def max_producer_id(self) -> int:
        """The highest producer id any loaded transactional id uses or used (-1 if none): seeds an allocator."""
        return max((max(m.producer_id, m.previous_producer_id, m.next_producer_id) for m in self.txns.values()),
                   default=-1)

    # -- replay -------------------------------------------------------------------------------------

    def replay(self, key: TxnKey, value: TxnValue | None) -> None:
        """Apply one durable record: the only way the durable metadata changes."""
        tid = key.transactional_id
        self.fenced.pop(tid, None)
        self.markers_done.discard(tid)
        self.completing.discard(tid)
        if value is None or value.status is TxnState.DEAD:
            self.txns.pop(tid, None)
            self.pending.pop(tid, None)
            return
        self.txns[tid] = TxnMetadata(
            tid, value.producer_id, value.producer_epoch, value.timeout_ms, value.status, value.partition_set(),
            value.start_ms, value.last_update_ms, value.previous_producer_id, value.next_producer_id,
            value.client_transaction_version, value.last_producer_epoch)
        if value.status.is_prepare:
            self.pending[tid] = completion_of(value.status)
        else:
            self.pending.pop(tid, None)

    def forget(self, partition: int) -> None:
        """Drop everything about the ids of ``partition`` (before a reload, or when no longer its coordinator)."""
        for tid in [t for t in set(self.txns) | set(self.pending) | set(self.fenced) | self.markers_done
                    | self.completing if self.partition_of(t) == partition]:
            self.txns.pop(tid, None)
            self.pending.pop(tid, None)
            self.fenced.pop(tid, None)
            self.markers_done.discard(tid)
            self.completing.discard(tid)

    # -- records ------------------------------------------------------------------------------------

    @staticmethod
    def value_of(meta: TxnMetadata) -> TxnValue:
        return TxnValue(meta.producer_id, meta.producer_epoch, meta.timeout_ms, meta.state,
                        None if meta.state is TxnState.EMPTY else group_partitions(meta.partitions),
                        meta.last_update_ms, meta.start_ms, meta.previous_producer_id, meta.next_producer_id,
                        meta.client_transaction_version, meta.last_producer_epoch)
