"""InitProducerId (v0-6): a producer id and epoch, for idempotent and for transactional producers.

Without a ``transactional_id`` every call gets a fresh producer id at epoch 0, as Kafka's broker
does (a client that bumps its epoch after an error, KIP-360, also gets a fresh id when it has no
transactional id). With one, the transaction coordinator answers (``coordinator/txn/init_producer.py``):
the id's producer id with a bumped epoch, fencing older instances.

Invariants: ``transaction_timeout_ms`` is not checked for idempotent producers (Kafka ignores it);
ids come from ``ProducerIdAllocator``, which never repeats one; PRODUCER_FENCED goes to clients older
than v4 as INVALID_PRODUCER_EPOCH (KIP-588).

Authorization, as Kafka's: a transactional id needs WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an
idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679; else
CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.authorization import idempotent_producer_error, transactional_id_error
from odradek.broker.context import RequestContext
from odradek.coordinator.txn.replies import InitProducerIdResult, for_request_version
from odradek.protocol.entities import millis
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.security.acl import AclOperation

log = logging.getLogger(__name__)


def _answer(error: ErrorCode, producer_id: int = -1, producer_epoch: int = -1) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": error, "producer_id": producer_id, "producer_epoch": producer_epoch}


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> dict[str, Any]:
    tid = request.transactional_id
    denied = idempotent_producer_error(ctx) if tid is None else transactional_id_error(ctx, AclOperation.WRITE, tid)
    if denied:
        return _answer(denied)
    if tid is None:
        try:
            pid = ctx.broker.producer_ids.next_producer_id()
        except (OSError, KafkaError) as e:
            log.error("cannot allocate a producer id: %s", e)
            return _answer(ErrorCode.KAFKA_STORAGE_ERROR)
        return _answer(ErrorCode.NONE, pid, 0)
    timeout_ms = millis(request.transaction_timeout)
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    try:
        result: InitProducerIdResult = await ctx.broker.txns.call(
            lambda c, ticket, now: c.init_producer_id(ticket, tid, timeout_ms, pid, epoch, now=now))
    except KafkaError as e:
        return _answer(e.code)
    if result.error is ErrorCode.NONE:
        log.info("transactional id %s: producer id %d epoch %d for %s", tid, result.producer_id,
                 result.producer_epoch, ctx.peer)
    return _answer(for_request_version(result.error, "InitProducerId", ctx.version), result.producer_id,
                   result.producer_epoch)
