"""A broker serving on 127.0.0.1 from an event loop in a daemon thread, for tests that need to look at its parts
(``on_loop`` runs a function where its handlers run) while real clients talk to it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest

from odradek.broker.broker import Broker
from odradek.broker.config import BrokerConfig
from odradek.broker.server import Server

T = TypeVar("T")
LOOPBACK = "127.0.0.1"


class InProcessBroker:
    def __init__(self, data: Path, props: dict[str, str] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="broker-loop", daemon=True)
        self.thread.start()
        config = BrokerConfig.from_properties({
            "log.dirs": str(data), "listeners": f"PLAINTEXT://{LOOPBACK}:0", "num.partitions": "1",
            "http.listeners": "", **(props or {}),  # no HTTP unless asked (tests start many brokers)
        })
        self.server = Server(self.on_loop(lambda: Broker(config)))  # its futures belong to that loop
        self._run(self.server.start())
        assert self.server.port
        self.address = (LOOPBACK, self.server.port)
        self.bootstrap = f"{LOOPBACK}:{self.server.port}"

    @property
    def broker(self) -> Broker:
        return self.server.broker

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def on_loop(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the broker's loop (where handlers run) and return its result."""
        done: Future[T] = Future()

        def call() -> None:
            try:
                done.set_result(fn())
            except BaseException as e:  # handed back to the test thread
                done.set_exception(e)

        self.loop.call_soon_threadsafe(call)
        return done.result(timeout=30)

    def close(self) -> None:
        try:
            self._run(self.server.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()


def serving(tmp_path_factory: pytest.TempPathFactory, name: str, props: dict[str, str]) -> Iterator[InProcessBroker]:
    """The body of a module-scoped broker fixture: ``yield from inprocess.serving(tmp_path_factory, "name", PROPS)``
    (data in a fresh temporary directory ``name``; closed at the end)."""
    b = InProcessBroker(tmp_path_factory.mktemp(name), props)
    try:
        yield b
    finally:
        b.close()
