"""The web console built into the broker: cluster overview, topics, a message browser with a live tail, consumer
groups with lag, transactions, quotas and ACLs, and the admin actions that go with them.

``setup(app, broker)`` adds the console to the broker's HTTP application (``odradek/http/``, which serves it on
the broker's event loop next to ``/metrics`` and the health checks). The console is a client of the broker's
parts, as the request handlers are: it reads their in-memory state and calls the same admin paths the Kafka
handlers call; nothing in the broker imports it. In a cluster, what other brokers coordinate or lead (groups,
offsets, transactions, producers) it asks them for with Kafka requests (``peers``), as an admin client would.

Modules: ``cluster_view`` (brokers, partitions, health), ``topics`` (list, detail, create/delete/configs),
``messages`` (browsing and producing records), ``tail`` (live tail over server-sent events), ``groups`` (members,
lag, offset reset), ``peers`` (requests to the other brokers of a cluster), ``lag_history`` (lag samples for the
chart), ``admin`` (transactions, producers, quotas, ACLs), ``access`` (the ACLs each page and action needs),
``routes`` (the HTTP handlers and templates). Design notes: ``docs/console.md``.

Invariants:
- nothing blocks the event loop: pages read in-memory state; log reads run in worker threads; requests to other
  brokers are awaited, each bounded in time, and one that is not answered becomes a notice on the page;
- lists are paginated or bounded, so a page costs the same with 1,000 topics as with 10 (apart from sorting
  names);
- the lag sampler runs every ``LAG_SAMPLE_INTERVAL_MS`` while the application runs and keeps bounded history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aiohttp import web

from odradek.console import groups
from odradek.console.lag_history import LagHistory
from odradek.console.peers import Peers
from odradek.console.routes import BROKER, HISTORY, PEERS, add_routes

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

__all__ = ["LAG_SAMPLE_INTERVAL_MS", "setup"]

log = logging.getLogger(__name__)

LAG_SAMPLE_INTERVAL_MS = 5_000


def setup(app: web.Application, broker: Broker, *, lag_sample_interval_ms: int = LAG_SAMPLE_INTERVAL_MS) -> None:
    """Register the console's pages (``/``, ``/topics``, ``/groups`` ...), actions (``/api/...``) and static files
    (``/static/...``) on ``app``, and its lag sampler on the application's lifetime."""
    app[BROKER] = broker
    app[HISTORY] = LagHistory(interval_ms=lag_sample_interval_ms)
    app[PEERS] = Peers(broker)
    add_routes(app)
    app.cleanup_ctx.append(_lag_sampler)


async def _lag_sampler(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.get_running_loop().create_task(_sample_forever(app[BROKER], app[HISTORY], app[PEERS]))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await app[PEERS].close()


async def _sample_forever(b: Broker, history: LagHistory, peers: Peers) -> None:
    while True:
        try:
            if b.started and b.topics is not None:
                if peers.clustered:
                    lags = await groups.total_lags_cluster(b, peers, history.max_groups)
                else:
                    lags = groups.total_lags(b)
                history.sample(b.clock.milliseconds(), lags)
        except Exception:  # a sample is not worth stopping the sampler for
            log.exception("console: could not sample consumer lag")
        await asyncio.sleep(history.interval_ms / 1000)
