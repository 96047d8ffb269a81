"""Options of the test suite (the partition-tolerance suite's length: tests/faults/test_partitions.py)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("odradek")
    group.addoption("--jepsen-rounds", type=int, default=1,
                    help="times the partition-tolerance suite runs its whole fault schedule (default 1)")
    group.addoption("--jepsen-seed", type=int, default=1, help="seed of the fault choices after the first round")
    group.addoption("--jepsen-report", default=None, help="write the suite's history check (JSON) to this file")
