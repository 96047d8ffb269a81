"""The transaction coordinator: InitProducerId, transactions and their markers over one replayable state.

``TransactionCoordinator`` is pure: every operation takes the time and returns ``Effects`` (records
to append to ``__transaction_state``, replies, transaction markers to write); the broker's runtime
does the I/O. This module adds what spans transactional ids: the periodic ``tick`` (aborting timed
out transactions, expiring idle transactional ids, retrying failed Complete appends), loading a
partition, DescribeTransactions and ListTransactions.

Invariants:
- State that survives a restart changes only through ``replay`` (``state.py``).
- Loading partition ``p``: ``begin_load(p, coordinator_epoch)`` (its ids answer
  COORDINATOR_LOAD_IN_PROGRESS), ``replay`` every record from the log start, ``finish_load(p, now)``,
  which returns the markers of every transaction found PrepareCommit/PrepareAbort (a broker that
  stopped between the two phases finishes them). Ongoing transactions keep their start time, so
  their timeout counts from when they started, not from the load.
- A timed-out transaction (Ongoing, ``start + timeout < now``, nothing pending) is aborted at a bumped
  epoch (Kafka's PrepareEpochFence), so its producer is fenced everywhere the markers land.
- A transactional id idle (``last update <= now - transactional.id.expiration.ms``) in Empty,
  CompleteCommit or CompleteAbort with nothing pending is removed by a tombstone.
"""

from __future__ import annotations

from odradek.coordinator.txn.effects import Effects, Reply, Write
from odradek.coordinator.txn.init_producer import InitProducerIdOps
from odradek.coordinator.txn.model import TxnState
from odradek.coordinator.txn.records import TxnKey, group_partitions
from odradek.coordinator.txn.replies import DescribedTransaction, ListedTransaction, ListTransactionsResult
from odradek.coordinator.txn.transactions import TransactionOps
from odradek.coordinator.txn.transitions import markers_for
from odradek.protocol.errors import ErrorCode

E = ErrorCode
S = TxnState


class TransactionCoordinator(InitProducerIdOps, TransactionOps):
    _next_abort_check: int | None = None
    _next_expiry_check: int | None = None

    # -- loading ------------------------------------------------------------------------------------

    def begin_load(self, partition: int, coordinator_epoch: int = 0) -> None:
        """Start loading ``partition`` (this broker now leads it at ``coordinator_epoch``): a reload starts empty."""
        self.loading.add(partition)
        self.coordinator_epochs[partition] = coordinator_epoch
        self.forget(partition)

    def finish_load(self, partition: int, now: int) -> Effects:
        """Serve ``partition``; the Effects restart the markers of transactions found prepared."""
        self.loading.discard(partition)
        fx = Effects()
        for tid in self.ids_in(partition):
            meta = self.txns[tid]
            if meta.state.is_prepare:
                fx.markers.append(markers_for(meta, self.coordinator_epochs.get(partition, 0), partition))
                fx.notes.append(f"transactional id {tid}: {meta.state.display_name} found on load; "
                                "writing its markers again")
        return fx

    def unload(self, partition: int) -> None:
        """This broker no longer coordinates ``partition``: forget its ids (their markers may be dropped)."""
        self.loading.discard(partition)
        self.coordinator_epochs.pop(partition, None)
        if self.owned is not None:
            self.owned.discard(partition)
        self.forget(partition)

    # -- periodic work ------------------------------------------------------------------------------

    def tick(self, now: int) -> Effects:
        """Retry failed Complete appends now; abort timed-out transactions and expire idle ids on their intervals."""
        fx = Effects()
        for tid in sorted(self.markers_done - self.completing):
            meta = self.txns.get(tid)
            if meta is not None and meta.state.is_prepare and self.partition_of(tid) not in self.loading:
                fx.writes.append(self.propose_complete(meta, now))
        if self._next_abort_check is None:
            self._next_abort_check = now + self.config.abort_timed_out_interval_ms
        elif now >= self._next_abort_check:
            self._next_abort_check = now + self.config.abort_timed_out_interval_ms
            fx.add(self.abort_timed_out(now))
        if self._next_expiry_check is None:
            self._next_expiry_check = now + self.config.remove_expired_interval_ms
        elif now >= self._next_expiry_check:
            self._next_expiry_check = now + self.config.remove_expired_interval_ms
            fx.add(self.expire_transactional_ids(now))
        return fx

    def abort_timed_out(self, now: int) -> Effects:
        """Abort, at a bumped epoch, every Ongoing transaction that has run longer than its timeout."""
        fx = Effects()
        for tid in sorted(self.txns):
            meta = self.current(tid)
            if (meta is None or meta.state is not S.ONGOING or tid in self.pending
                    or self.partition_of(tid) in self.loading or not meta.start_ms + meta.timeout_ms < now):
                continue
            aborting = self.fence(meta, now)
            fx.notes.append(f"transactional id {tid}: transaction of producer {meta.producer_id} timed out after "
                            f"{meta.timeout_ms} ms; aborting it at epoch {aborting.producer_epoch}")
            fx.writes.append(self.propose(aborting, [], then_markers=True))
        return fx

    def expire_transactional_ids(self, now: int) -> Effects:
        """Tombstone every transactional id idle for transactional.id.expiration.ms (one append per partition)."""
        fx = Effects()
        by_partition: dict[int, list[str]] = {}
        cutoff = now - self.config.transactional_id_expiration_ms
        for tid in sorted(self.txns):
            meta = self.txns[tid]
            part = self.partition_of(tid)
            if (meta.state.expiration_allowed and tid not in self.pending and part not in self.loading
                    and meta.last_update_ms <= cutoff):
                by_partition.setdefault(part, []).append(tid)
        for part, tids in sorted(by_partition.items()):
            for tid in tids:
                self.pending[tid] = S.DEAD

            def failed(error: ErrorCode, tids: list[str] = tids) -> list[Reply]:
                for t in tids:
                    if self.pending.get(t) is S.DEAD:
                        del self.pending[t]
                return []

            fx.writes.append(Write(part, [(TxnKey(t), None) for t in tids], [], failed))
            fx.notes.append(f"expiring {len(tids)} transactional id(s) idle for "
                            f"{self.config.transactional_id_expiration_ms} ms: {', '.join(tids)}")
        return fx

    # -- DescribeTransactions / ListTransactions ----------------------------------------------------

    def describe(self, transactional_ids: list[str]) -> list[DescribedTransaction]:
        out = []
        for tid in transactional_ids:
            error = self.unavailable(tid)
            meta = self.current(tid) if error is None else None
            if error is None and (meta is None or meta.state is S.DEAD):
                error = E.TRANSACTIONAL_ID_NOT_FOUND
            if error is not None or meta is None:
                out.append(DescribedTransaction(tid, error or E.UNKNOWN_SERVER_ERROR))
                continue
            out.append(DescribedTransaction(tid, E.NONE, meta.state.display_name, meta.timeout_ms, meta.start_ms,
                                            meta.producer_id, meta.producer_epoch, group_partitions(meta.partitions)))
        return out

    def list_transactions(self, states_filter: list[str] | set[str] | tuple[str, ...] = (),
                          producer_id_filter: list[int] | set[int] | tuple[int, ...] = (),
                          duration_filter_ms: int = -1, *, now: int = 0) -> ListTransactionsResult:
        """ListTransactions: every transactional id, filtered by state names, producer ids and (KIP-994) by
        having run longer than ``duration_filter_ms``. While any partition loads: COORDINATOR_LOAD_IN_PROGRESS."""
        if self.loading:
            return ListTransactionsResult(E.COORDINATOR_LOAD_IN_PROGRESS)
        unknown = tuple(name for name in states_filter if S.from_name(name) is None)
        states = {s for s in (S.from_name(name) for name in states_filter) if s is not None}
        pids = set(producer_id_filter)
        listed = []
        for tid in sorted(self.txns):
            meta = self.current(tid)
            assert meta is not None
            if meta.state is S.DEAD:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if states_filter and meta.state not in states:
                continue
            if duration_filter_ms >= 0 and now - meta.start_ms <= duration_filter_ms:
                continue
            listed.append(ListedTransaction(tid, meta.producer_id, meta.state.display_name))
        return ListTransactionsResult(E.NONE, unknown, tuple(listed))

    list = list_transactions  # short alias; assigned last so that ``list`` above still means the builtin
