"""The console of a broker in a two-broker cluster on a real ZooKeeper: brokers, the controller, replicas, ISR and
partition health come from the cluster's image, and topics are created through ZooKeeper."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from odradek.cluster.zk.server import ZooKeeperServer
from tests.cluster.zk_process import unique_chroot
from tests.cluster.zk_process import zookeeper as zookeeper
from tests.console.conftest import ConsoleServer

pytestmark = pytest.mark.slow


def _wait(condition: Callable[[], Any], what: str, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_cluster_overview_topic_replicas_and_health(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    chroot = unique_chroot(zookeeper)
    common = {
        "zookeeper.connect": chroot,
        "zookeeper.session.timeout.ms": "4000",
        "replica.lag.time.max.ms": "2000",
        "replica.fetch.wait.max.ms": "200",
        "offsets.topic.replication.factor": "2",
        "controlled.shutdown.enable": "false",
    }
    one = ConsoleServer(tmp_path_factory.mktemp("b1"), {"broker.id": "1", **common})
    two = ConsoleServer(tmp_path_factory.mktemp("b2"), {"broker.id": "2", **common})
    try:
        _wait(lambda: len(one.broker.cluster.brokers) == 2, "both brokers registered")

        def with_controller() -> str | None:
            b = one.get("/")[1]
            return None if 'id="controller">-1<' in b else b

        body = _wait(with_controller, "a controller")
        controller = one.broker.cluster.controller_id
        assert f'id="controller">{controller}<' in body
        assert len(re.findall(r"<tr>\s*<td class=\"num\">[12]</td>", body)) == 2
        status, doc = one.post("/api/topics", {"name": "replicated", "partitions": "2", "replication_factor": "2"})
        assert status == 200 and doc["ok"], doc
        status, body = one.get("/topics/replicated")
        rows = re.findall(r'<tr data-partition="(\d)">.*?<td>([\d, ]+)</td><td>([\d, ]*)</td>', body, re.S)
        assert [(p, sorted(r.split(", "))) for p, r, _ in rows] == [("0", ["1", "2"]), ("1", ["1", "2"])]
        assert all(sorted(isr.split(", ")) == ["1", "2"] for _, _, isr in rows)
        # a topic with one replica per partition, spread over both brokers: those led there are read from there
        status, doc = one.post("/api/topics", {"name": "spread", "partitions": "2", "replication_factor": "1"})
        assert status == 200 and doc["ok"], doc
        assignment = one.broker.cluster.assignments["spread"].replicas
        on_two = [p for p, r in sorted(assignment.items()) if r == (2,)]
        assert on_two, assignment  # the controller spreads partitions over the live brokers
        status, doc = two.post("/api/topics/spread/produce", {"partition": str(on_two[0]), "value": "there"})
        assert status == 200 and doc["ok"], doc
        status, body = _wait(lambda: (r := one.get("/topics/spread/messages")) and ">there<" in r[1] and r, "a record")
        assert status == 200 and "of this topic" not in body and "peer-notice" not in body
        # the second broker goes away: its partitions lose a replica of their ISR, or their leader for a moment
        two.close()
        two = None  # type: ignore[assignment]

        def unhealthy() -> str | None:
            b = one.get("/")[1]
            m = re.search(r'data-k="under-replicated">(\d+)<', b)
            return b if m and int(m.group(1)) >= 2 else None

        body = _wait(unhealthy, "under-replicated partitions on the overview", timeout_s=60)
        # the partitions whose only replica was there are offline
        assert re.search(rf'data-k="offline">{len(on_two)}<', body)
        assert "offline</span>" in one.get("/topics/spread")[1]
        assert 'href="/topics?unhealthy=1"' in body
        status, doc = one.post("/api/topics", {"name": "healthy", "partitions": "1", "replication_factor": "1"})
        assert status == 200 and doc["ok"], doc  # on the live broker
        assert re.findall(r'data-topic="([^"]+)"', one.get("/topics")[1]) == ["healthy", "replicated", "spread"]
        assert re.findall(r'data-topic="([^"]+)"', one.get("/topics?unhealthy=1")[1]) == ["replicated", "spread"]
        assert "under-replicated</span>" in one.get("/topics/replicated")[1]
    finally:
        one.close()
        if two is not None:
            two.close()
