"""InitProducerId: give a transactional producer its producer id and a new epoch, fencing every older instance.

Kafka's rules (``TransactionCoordinator.handleInitProducerId`` and ``prepareInitProducerIdTransit``),
checked in this order:

1. Only one of producer id / epoch given (-1 for the other): INVALID_REQUEST. No transactional id: an
   idempotent producer; a fresh producer id at epoch 0, nothing written. Empty id: INVALID_REQUEST.
2. Timeout not in (0, transaction.max.timeout.ms]: INVALID_TRANSACTION_TIMEOUT. Partition loading:
   COORDINATOR_LOAD_IN_PROGRESS.
3. Unknown id: a new producer id from the allocator, at epoch -1, then bumped to 0 below.
4. A write pending for the id: CONCURRENT_TRANSACTIONS.
5. KIP-360: a request carrying a producer id and epoch must name the current producer id, or the
   previous one with an exhausted epoch (a retry after a rotation), unless the id has no epoch yet;
   otherwise PRODUCER_FENCED.
6. PrepareCommit/PrepareAbort: CONCURRENT_TRANSACTIONS (the client retries once markers are written).
7. Empty/Complete*: the epoch exhausted (32766) and the request's epoch, if any, the current one ->
   rotate to a new producer id at epoch 0. Otherwise bump the epoch: no epoch in the request -> epoch
   + 1, last epoch -1; the current epoch -> epoch + 1, last epoch = current; the last epoch -> a retry
   of a bump that succeeded: the current epoch again; anything else: PRODUCER_FENCED. An Empty record
   is written; the answer (id, epoch) goes out once it is durable.
8. Ongoing: fence the running transaction (epoch + 1, unless a failed fence already bumped it),
   write PrepareAbort at the fenced epoch, answer CONCURRENT_TRANSACTIONS once that is durable and
   send the abort markers. The client retries and gets the next epoch after the abort completes.

Invariant: the reply to a ticket is sent exactly once -- immediately for an error found before any
write, else when the write lands or fails.
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.coordinator.group.model import Ticket
from odradek.coordinator.txn.effects import Effects, Reply
from odradek.coordinator.txn.model import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnState, epoch_exhausted
from odradek.coordinator.txn.replies import InitProducerIdResult
from odradek.coordinator.txn.transitions import Transitions, bump_epoch, new_metadata, rotate_producer_id
from odradek.protocol.errors import ErrorCode

E = ErrorCode
S = TxnState


def _failed(ticket: Ticket) -> Callable[[ErrorCode], list[Reply]]:
    def replies(error: ErrorCode) -> list[Reply]:
        return [(ticket, InitProducerIdResult(error))]
    return replies


class InitProducerIdOps(Transitions):
    def init_producer_id(self, ticket: Ticket, transactional_id: str | None, transaction_timeout_ms: int,
                         producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH, *,
                         now: int) -> Effects:
        """InitProducerId; the reply is an ``InitProducerIdResult``."""
        fx = Effects()
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return fx.reply(ticket, InitProducerIdResult(E.INVALID_REQUEST))
        if transactional_id is None:
            return fx.reply(ticket, InitProducerIdResult(E.NONE, self.producer_ids.next_producer_id(), 0))
        if transactional_id == "":
            return fx.reply(ticket, InitProducerIdResult(E.INVALID_REQUEST))
        if not 0 < transaction_timeout_ms <= self.config.max_timeout_ms:
            return fx.reply(ticket, InitProducerIdResult(E.INVALID_TRANSACTION_TIMEOUT))
        error = self.unavailable(transactional_id)
        if error is not None:
            return fx.reply(ticket, InitProducerIdResult(error))
        if transactional_id in self.pending:
            return fx.reply(ticket, InitProducerIdResult(E.CONCURRENT_TRANSACTIONS))
        meta = self.current(transactional_id)
        if meta is None:
            meta = new_metadata(transactional_id, self.producer_ids.next_producer_id(), transaction_timeout_ms, now)
        expected = producer_id != NO_PRODUCER_ID
        if expected and not (meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id
                             or (producer_id == meta.previous_producer_id and epoch_exhausted(producer_epoch))):
            return fx.reply(ticket, InitProducerIdResult(E.PRODUCER_FENCED))

        if meta.state.is_prepare:
            return fx.reply(ticket, InitProducerIdResult(E.CONCURRENT_TRANSACTIONS))
        if meta.state is S.ONGOING:
            aborting = self.fence(meta, now)
            fx.notes.append(f"transactional id {transactional_id}: InitProducerId fences epoch {meta.producer_epoch}, "
                            f"aborting its ongoing transaction at epoch {aborting.producer_epoch}")
            fx.writes.append(self.propose(aborting, [(ticket, InitProducerIdResult(E.CONCURRENT_TRANSACTIONS))],
                                          _failed(ticket), then_markers=True))
            return fx
        if meta.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            fx.warnings.append(f"transactional id {transactional_id} is in state {meta.state.display_name}, "
                               "which is never written; refusing InitProducerId")
            return fx.reply(ticket, InitProducerIdResult(E.UNKNOWN_SERVER_ERROR))

        if epoch_exhausted(meta.producer_epoch) and (not expected or producer_epoch == meta.producer_epoch):
            new_id = self.producer_ids.next_producer_id()
            nxt = rotate_producer_id(meta, new_id, meta.producer_epoch if expected else NO_PRODUCER_EPOCH,
                                     transaction_timeout_ms, now)
            fx.notes.append(f"transactional id {transactional_id}: epochs of producer id {meta.producer_id} "
                            f"exhausted, now producer id {new_id}")
        elif epoch_exhausted(meta.producer_epoch):
            # Kafka's prepareIncrementProducerEpoch refuses to run on an exhausted epoch (IllegalStateException)
            return fx.reply(ticket, InitProducerIdResult(E.UNKNOWN_SERVER_ERROR))
        elif not expected:
            nxt = bump_epoch(meta, meta.producer_epoch + 1, NO_PRODUCER_EPOCH, transaction_timeout_ms, now)
        elif meta.producer_epoch == NO_PRODUCER_EPOCH or producer_epoch == meta.producer_epoch:
            nxt = bump_epoch(meta, meta.producer_epoch + 1, meta.producer_epoch, transaction_timeout_ms, now)
        elif producer_epoch == meta.last_producer_epoch:
            nxt = bump_epoch(meta, meta.producer_epoch, meta.last_producer_epoch, transaction_timeout_ms, now)
        else:
            return fx.reply(ticket, InitProducerIdResult(E.PRODUCER_FENCED))
        ok: list[Reply] = [(ticket, InitProducerIdResult(E.NONE, nxt.producer_id, nxt.producer_epoch))]
        fx.writes.append(self.propose(nxt, ok, _failed(ticket)))
        return fx
