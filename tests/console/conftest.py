"""A broker with the web console, for the console's tests.

``console``: one in-process broker per module (``tests/broker/inprocess.py``: its event loop in a thread) whose
console is served by aiohttp on 127.0.0.1, on the broker's own loop, as the broker's HTTP listener serves it.
``console.url`` is the console's base URL, ``console.bootstrap`` the broker's Kafka address. (Once the HTTP
listener is merged, this can serve ``odradek.http.app.build_app(broker)`` instead of a bare application.)

``browser``: one headless Chromium per module (Debian's ``/usr/bin/chromium`` driven by Playwright); the tests
that use it are skipped when either is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from odradek import console as console_package
from tests.broker.inprocess import LOOPBACK, InProcessBroker

CHROMIUM = os.environ.get("ODRADEK_CHROMIUM", "/usr/bin/chromium")


class ConsoleServer:
    def __init__(self, data: Path, props: dict[str, str] | None = None, *, lag_sample_interval_ms: int = 200) -> None:
        self.kafka = InProcessBroker(data, props)
        self.bootstrap = self.kafka.bootstrap
        self.broker = self.kafka.broker
        self.runner: web.AppRunner | None = None
        self.port = self.run(self._start(lag_sample_interval_ms))
        self.url = f"http://{LOOPBACK}:{self.port}"

    def run(self, coro: Any) -> Any:
        """Run a coroutine on the broker's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.kafka.loop).result(timeout=60)

    async def _start(self, interval_ms: int) -> int:
        app = web.Application()
        console_package.setup(app, self.broker, lag_sample_interval_ms=interval_ms)
        self.runner = web.AppRunner(app, shutdown_timeout=2)
        await self.runner.setup()
        site = web.TCPSite(self.runner, LOOPBACK, 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def get(self, path: str) -> tuple[int, str]:
        """GET ``path``: (status, body)."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path: str, fields: dict[str, str], *, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """POST a form to ``path`` asking for JSON: (status, decoded JSON or text)."""
        data = urllib.parse.urlencode(fields).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method="POST", headers={"Accept": "application/json", **(headers or {})}
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                status, body = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read().decode()
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body

    def on_loop(self, fn: Any) -> Any:
        return self.kafka.on_loop(fn)

    def close(self) -> None:
        try:
            if self.runner is not None:
                self.run(self.runner.cleanup())
        finally:
            self.kafka.close()


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    server = ConsoleServer(
        tmp_path_factory.mktemp("console"), {"num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}
    )
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield b
        finally:
            b.close()
