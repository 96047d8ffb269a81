"""A transaction's life after InitProducerId: adding partitions, verifying them, ending it, completing it.

Kafka's rules (``TransactionCoordinator``: handleAddPartitionsToTransaction,
handleVerifyPartitionsInTransaction, endTransactionWithTV1; ``TransactionMarkerChannelManager``),
for clients of transaction version 1. Checks, in order, for AddPartitionsToTxn/AddOffsetsToTxn and
EndTxn: empty id INVALID_REQUEST; partition loading COORDINATOR_LOAD_IN_PROGRESS; unknown id or
another producer id INVALID_PRODUCER_ID_MAPPING; another epoch PRODUCER_FENCED (a handler sends it as
INVALID_PRODUCER_EPOCH to clients too old to know it: ``replies.for_request_version``); a pending
transition CONCURRENT_TRANSACTIONS. Then:

- AddPartitions: PrepareCommit/PrepareAbort -> CONCURRENT_TRANSACTIONS; Ongoing and nothing new ->
  NONE, nothing written; else an Ongoing record with the union of partitions (a transaction starting
  from Empty/Complete* gets ``now`` as its start time), answered NONE once durable.
- AddOffsets: AddPartitions of the group's ``__consumer_offsets`` partition.
- Verify (KIP-890 part 1, AddPartitionsToTxn v4+ ``verify_only``, sent by a partition leader before
  it accepts a transactional produce): read-only. Prepare* -> CONCURRENT_TRANSACTIONS for every
  partition; else per partition NONE if it is in the transaction, TRANSACTION_ABORTABLE if not.
- EndTxn: Ongoing -> a PrepareCommit/PrepareAbort record; once durable the answer is NONE and the
  markers start. CompleteCommit + commit and CompleteAbort + abort -> NONE (a retry); the opposite ->
  INVALID_TXN_STATE; Prepare* -> CONCURRENT_TRANSACTIONS for a retry of the same outcome,
  INVALID_TXN_STATE for the other (reached only if no completion is pending: while markers are
  outstanding the pending check answers first, as in Kafka); Empty -> INVALID_TXN_STATE (Kafka's
  transaction version 1 does not accept EndTxn without partitions; clients do not send it).
- markers_written: the Complete record of the prepared transaction; a stale or repeated report
  (another producer id or epoch, not prepared, completion already under way) changes nothing.
"""

from __future__ import annotations

from odradek.coordinator.group.model import Ticket
from odradek.coordinator.group.records import OFFSETS_TOPIC
from odradek.coordinator.txn.effects import Effects, Reply
from odradek.coordinator.txn.model import TopicPartition, TxnMetadata, TxnState
from odradek.coordinator.txn.transitions import Transitions, add_partitions, prepare_end
from odradek.protocol.errors import ErrorCode

E = ErrorCode
S = TxnState


class TransactionOps(Transitions):
    def _producer_error(self, transactional_id: str, producer_id: int,
                        producer_epoch: int) -> tuple[ErrorCode | None, TxnMetadata | None]:
        error = self.unavailable(transactional_id)
        if error is not None:
            return error, None
        meta = self.current(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING, None
        if meta.producer_epoch != producer_epoch:
            return E.PRODUCER_FENCED, None
        return None, meta

    def _writable(self, transactional_id: str, producer_id: int,
                  producer_epoch: int) -> tuple[ErrorCode | None, TxnMetadata | None]:
        """``_producer_error``, and CONCURRENT_TRANSACTIONS while a write of this id is in flight."""
        error, meta = self._producer_error(transactional_id, producer_id, producer_epoch)
        if error is None and transactional_id in self.pending:
            return E.CONCURRENT_TRANSACTIONS, meta
        return error, meta

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------------

    def add_partitions(self, ticket: Ticket, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: list[TopicPartition] | set[TopicPartition] | frozenset[TopicPartition], *,
                       now: int) -> Effects:
        """AddPartitionsToTxn for one transaction; the reply is an ``ErrorCode`` for all its partitions."""
        fx = Effects()
        error, meta = self._writable(transactional_id, producer_id, producer_epoch)
        if error is not None or meta is None:
            return fx.reply(ticket, error)
        wanted = frozenset(partitions)
        if meta.state.is_prepare:
            return fx.reply(ticket, E.CONCURRENT_TRANSACTIONS)
        if meta.state is S.ONGOING and wanted <= meta.partitions:
            return fx.reply(ticket, E.NONE)
        if meta.state not in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            fx.warnings.append(f"transactional id {transactional_id} is in state {meta.state.display_name}, "
                               "which is never written; refusing AddPartitionsToTxn")
            return fx.reply(ticket, E.INVALID_TXN_STATE)

        def failed(err: ErrorCode) -> list[Reply]:
            return [(ticket, err)]

        fx.writes.append(self.propose(add_partitions(meta, wanted, now), [(ticket, E.NONE)], failed))
        return fx

    def add_offsets(self, ticket: Ticket, transactional_id: str, producer_id: int, producer_epoch: int,
                    group_id: str, offsets_partition: int, *, now: int) -> Effects:
        """AddOffsetsToTxn: adds ``__consumer_offsets``-``offsets_partition`` (the group's partition, which the
        caller computes with the offsets topic's partition count); the reply is an ``ErrorCode``."""
        fx = self.add_partitions(ticket, transactional_id, producer_id, producer_epoch,
                                 [(OFFSETS_TOPIC, offsets_partition)], now=now)
        fx.notes.append(f"transactional id {transactional_id}: offsets of group {group_id!r} "
                        f"({OFFSETS_TOPIC}-{offsets_partition}) requested in its transaction")
        return fx

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[TopicPartition] | set[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 verification: for each partition NONE if it is in the ongoing transaction, else the error."""
        error, meta = self._producer_error(transactional_id, producer_id, producer_epoch)
        if error is None and meta is not None and meta.state.is_prepare:
            error = E.CONCURRENT_TRANSACTIONS
        if error is not None or meta is None:
            return {tp: error or E.UNKNOWN_SERVER_ERROR for tp in partitions}
        return {tp: E.NONE if tp in meta.partitions else E.TRANSACTION_ABORTABLE for tp in partitions}

    # -- EndTxn -------------------------------------------------------------------------------------

    def end_txn(self, ticket: Ticket, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, *,
                now: int) -> Effects:
        """EndTxn (transaction version 1); the reply is an ``ErrorCode``."""
        fx = Effects()
        error, meta = self._writable(transactional_id, producer_id, producer_epoch)
        if error is not None or meta is None:
            return fx.reply(ticket, error)
        state = meta.state
        if state is S.ONGOING:
            def failed(err: ErrorCode) -> list[Reply]:
                return [(ticket, err)]

            fx.writes.append(self.propose(prepare_end(meta, commit, now), [(ticket, E.NONE)], failed,
                                          then_markers=True))
            return fx
        if state is S.COMPLETE_COMMIT or state is S.COMPLETE_ABORT:
            same = (state is S.COMPLETE_COMMIT) == commit
            return fx.reply(ticket, E.NONE if same else E.INVALID_TXN_STATE)
        if state.is_prepare:
            same = (state is S.PREPARE_COMMIT) == commit
            return fx.reply(ticket, E.CONCURRENT_TRANSACTIONS if same else E.INVALID_TXN_STATE)
        if state is not S.EMPTY:
            fx.warnings.append(f"transactional id {transactional_id} is in state {state.display_name}, "
                               "which is never written; refusing EndTxn")
        return fx.reply(ticket, E.INVALID_TXN_STATE)

    # -- markers ------------------------------------------------------------------------------------

    def markers_written(self, transactional_id: str, producer_id: int, producer_epoch: int, *, now: int) -> Effects:
        """The runtime wrote every marker of this prepared transaction: append its Complete record."""
        fx = Effects()
        meta = self.txns.get(transactional_id)
        if (meta is None or not meta.state.is_prepare or meta.producer_id != producer_id
                or meta.producer_epoch != producer_epoch or self.partition_of(transactional_id) in self.loading):
            fx.notes.append(f"transactional id {transactional_id}: markers of producer {producer_id} epoch "
                            f"{producer_epoch} reported written, but that transaction is no longer prepared here")
            return fx
        if transactional_id in self.markers_done:
            return fx  # a repeated report: the Complete record is on its way
        self.markers_done.add(transactional_id)
        fx.writes.append(self.propose_complete(meta, now))
        return fx
