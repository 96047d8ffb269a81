"""Injected time: every timeout, retention rule and roll decision asks a ``Clock`` for ``now``.

Invariants: ``milliseconds()`` is wall-clock epoch milliseconds (what Kafka timestamps use);
``ManualClock`` only moves when a test advances it.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int: ...


class SystemClock:
    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock for tests: starts at ``start_ms`` and moves only through ``advance``/``set``."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def milliseconds(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms

    def set(self, ms: int) -> None:
        self.now_ms = ms


SYSTEM_CLOCK = SystemClock()
