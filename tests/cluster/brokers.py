"""A cluster of real ``odradek serve`` processes on one ZooKeeper, for tests.

Each broker is a ``BrokerProcess`` (tests/broker/process.py) with ``broker.id`` and ``zookeeper.connect``
overrides; its port is kept across restarts so clients' bootstrap lists stay valid. Metadata questions are
asked with confluent-kafka's admin client (a real Kafka client). Every wait is bounded and polls.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster.zk.server import ZooKeeperServer
from tests.broker.process import BrokerProcess, free_port
from tests.cluster.zk_process import unique_chroot
from tests.cluster.zk_process import wait_until as zk_wait_until

T = TypeVar("T")

CLUSTER_OVERRIDES = [
    "zookeeper.session.timeout.ms=4000",
    "replica.lag.time.max.ms=3000",
    "replica.fetch.wait.max.ms=200",
    "replica.fetch.backoff.ms=100",
    "log.segment.bytes=262144",
    "offsets.topic.replication.factor=3",
    "transaction.state.log.replication.factor=3",
    "transaction.state.log.min.isr=2",
    "offsets.topic.num.partitions=5",
    "transaction.state.log.num.partitions=5",
]


def wait_until(condition: Callable[[], T], *, timeout_s: float = 20.0, what: str = "condition") -> T:
    return zk_wait_until(condition, timeout_s=timeout_s, what=what)


def running_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-broker cluster on its own chroot of the module's ZooKeeper, stopped (cleanly) at the end; use as
    ``cluster = pytest.fixture(scope="module")(running_cluster)``."""
    yield from serving(Cluster(tmp_path_factory.mktemp("cluster"), unique_chroot(zookeeper)))


def running_http_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """``running_cluster`` whose brokers also serve HTTP (``/metrics``, the console) on a free port each (see
    ``http_url``); use as ``cluster = pytest.fixture(scope="module")(running_http_cluster)``."""
    c = Cluster(tmp_path_factory.mktemp("http-cluster"), unique_chroot(zookeeper),
                overrides=["http.listeners=http://127.0.0.1:0"])
    yield from serving(c)


def http_url(b: ClusterBroker) -> str:
    """The broker's HTTP address as its log says (the last start's: port 0 is a new port each start)."""
    b.wait_for_log("HTTP on http://127.0.0.1:")
    return re.findall(r"HTTP on (http://127\.0\.0\.1:\d+)", b.log())[-1]


def serving(c: Cluster) -> Iterator[Cluster]:
    """The body of a module's cluster fixture: start ``c``, yield it, stop it cleanly at the end (``yield from
    serving(c)``); a broker that does not exit with 0 fails the module."""
    c.start()
    try:
        yield c
    finally:
        failures = c.stop()
    assert not failures, "\n".join(failures)


def serving_with_listener(c: Cluster, ports: dict[int, int],
                          wrap_for: Callable[[int], Callable[[list[str]], list[str]]]) -> Iterator[Cluster]:
    """``serving(c)`` with a second listener on every broker: a free port each (recorded in ``ports`` by broker id)
    and the broker's command rewritten by ``wrap_for(port)`` (e.g. ``tests.broker.scram_listeners.scram_wrap``)."""
    for b in c.brokers.values():
        ports[b.broker_id] = free_port()
        b.wrap = wrap_for(ports[b.broker_id])
    yield from serving(c)


class ClusterBroker(BrokerProcess):
    """A broker that keeps its port across restarts."""

    def __init__(self, broker_id: int, base: Path, zk_connect: str, overrides: list[str]) -> None:
        super().__init__(base / f"broker-{broker_id}", base / f"broker-{broker_id}.log",
                         [f"broker.id={broker_id}", f"zookeeper.connect={zk_connect}", *overrides], port=free_port())
        self.broker_id = broker_id

    def start(self) -> ClusterBroker:
        super().start()
        return self


class Cluster:
    def __init__(self, base: Path, zk_connect: str, size: int = 3, overrides: list[str] | None = None) -> None:
        self.base = base
        self.zk_connect = zk_connect
        extra = [*CLUSTER_OVERRIDES, *(overrides or [])]
        self.brokers = {i: ClusterBroker(i, base, zk_connect, extra) for i in range(1, size + 1)}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{b.host}:{b.fixed_port}" for b in self.brokers.values())

    def start(self) -> Cluster:
        for b in self.brokers.values():
            b.start()
        self.wait_for_brokers(len(self.brokers))
        return self

    def stop(self) -> list[str]:
        failures = []
        for b in self.brokers.values():
            if b.running:
                code = b.stop()
                if code != 0:
                    failures.append(f"broker {b.broker_id} exited with {code}:\n{b.log()[-3000:]}")
            else:
                b.kill()
        return failures

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000})

    def metadata(self) -> Any:
        return self.admin().list_topics(timeout=10)

    def wait_for_brokers(self, count: int) -> None:
        wait_until(lambda: len(self.metadata().brokers) == count and self.metadata().controller_id >= 0,
                   what=f"{count} brokers and a controller in the metadata")

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3,
                     config: dict[str, str] | None = None) -> None:
        admin = self.admin()  # kept alive until the future is answered
        futures = admin.create_topics([NewTopic(name, partitions, replication_factor, config=config or {})],
                                      operation_timeout=20)
        futures[name].result(timeout=30)
        wait_until(lambda: all(p.leader >= 0 and len(p.isrs) == replication_factor
                               for p in self.partitions(name).values()) and len(self.partitions(name)) == partitions,
                   what=f"leaders and full ISRs for {name}")

    def partitions(self, topic: str) -> dict[int, Any]:
        md = self.metadata().topics.get(topic)
        return dict(md.partitions) if md is not None and md.error is None else {}

    def leader(self, topic: str, partition: int = 0) -> int:
        return int(self.partitions(topic)[partition].leader)

    def isr(self, topic: str, partition: int = 0) -> list[int]:
        return sorted(self.partitions(topic)[partition].isrs)

    def each(self) -> Iterator[ClusterBroker]:
        return iter(self.brokers.values())

    # -- the same questions while brokers fail: an unanswered one is "unknown", not an error ---------------

    def live_ids(self) -> set[int]:
        """The registered brokers (empty while no broker answers)."""
        try:
            return set(self.metadata().brokers)
        except Exception:
            return set()

    def leader_now(self, topic: str, partition: int = 0) -> int:
        """The partition's leader, -1 when none or unknown."""
        try:
            return int(self.partitions(topic)[partition].leader)
        except Exception:
            return -1

    def isr_now(self, topic: str, partition: int = 0) -> list[int]:
        """The partition's ISR, empty when unknown."""
        try:
            return self.isr(topic, partition)
        except Exception:
            return []

    def controller_now(self) -> int:
        """The controller's id, -1 when unknown."""
        try:
            return int(self.metadata().controller_id)
        except Exception:
            return -1

    def start_when_deregistered(self, b: ClusterBroker, timeout_s: float) -> None:
        """Restart a killed broker once its old ZooKeeper session has expired (before that its id is taken)."""
        wait_until(lambda: b.broker_id not in self.live_ids(), timeout_s=timeout_s,
                   what=f"broker {b.broker_id}'s old session to expire")
        b.start()
