"""InitProducerId (v0-5): a producer id and epoch for an idempotent producer.

Without a ``transactional_id`` every call gets a fresh producer id at epoch 0, as Kafka's broker
does (a client that bumps its epoch after an error, KIP-360, also gets a fresh id when it has no
transactional id). With one, the transaction coordinator answers; until it exists here, the answer
is COORDINATOR_NOT_AVAILABLE, as FindCoordinator's for transactions.

Invariants: ``transaction_timeout_ms`` is not checked for idempotent producers (Kafka ignores it);
the id comes from ``ProducerIdAllocator``, which never repeats one.
"""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if request.transactional_id is not None:
        return {"throttle_time": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "producer_id": -1,
                "producer_epoch": -1}
    try:
        pid = ctx.broker.producer_ids.next_producer_id()
    except (OSError, KafkaError) as e:
        log.error("cannot allocate a producer id: %s", e)
        return {"throttle_time": 0, "error_code": ErrorCode.KAFKA_STORAGE_ERROR, "producer_id": -1,
                "producer_epoch": -1}
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "producer_id": pid, "producer_epoch": 0}
