"""The aiohttp application of the HTTP listener: ``/metrics``, ``/healthz``, ``/readyz``, then the console.

``build_app(broker)`` registers the three endpoints and, when the ``odradek.console`` package is importable, lets it
add its own routes under ``/`` (``odradek.console.setup(app, broker)``: pages, ``/static/...``, ``/api/...``). With
``auth`` (security on: ``http/auth.py``) every route, the console's included, needs HTTP Basic credentials of a
SASL user; ``/healthz`` too, since probes can send them (Kubernetes' httpGet takes headers).

Invariants: handlers run on the broker's loop and never block it (``/metrics`` formats in a worker thread:
``http/collector.py``); ``/readyz`` answers 503 with the reason in a one-line text body.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from odradek.http.auth import BasicAuth
from odradek.http.collector import scrape
from odradek.http.health import readiness

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

BROKER: web.AppKey[Broker] = web.AppKey("odradek.broker")
# request key: the authenticated user when security is on (the console may show it); web.RequestKey from aiohttp 3.12
USER: Any = web.RequestKey("odradek.user", str) if hasattr(web, "RequestKey") else "odradek.user"
_GZIP_AT = 16 * 1024  # bodies at least this long go gzip'ed to clients that accept it (Prometheus does)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(broker: Broker, *, auth: BasicAuth | None = None) -> web.Application:
    middlewares = [_basic_auth(auth)] if auth is not None else []
    app = web.Application(middlewares=middlewares)
    app[BROKER] = broker
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    try:
        import odradek.console as console
    except ImportError:
        console = None  # type: ignore[assignment]
    if console is not None:
        console.setup(app, broker)
    return app


async def metrics(request: web.Request) -> web.Response:
    body = await scrape(request.app[BROKER])
    headers = {}
    if len(body) >= _GZIP_AT and "gzip" in request.headers.get("Accept-Encoding", ""):
        body = await asyncio.to_thread(gzip.compress, body, 1)
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4, **headers})


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    why = readiness(request.app[BROKER])
    if why is not None:
        return web.Response(status=503, text=f"not ready: {why}\n")
    return web.Response(text="ready\n")


def _basic_auth(auth: BasicAuth) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        user = await auth.user(request.headers.get("Authorization"))
        if user is None:
            return web.Response(
                status=401,
                text="authentication required: HTTP Basic with a SASL user of the broker\n",
                headers={"WWW-Authenticate": 'Basic realm="odradek", charset="UTF-8"'},
            )
        request[USER] = user
        return await handler(request)

    return check
