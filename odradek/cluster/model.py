"""The nouns of a replicated cluster, shared by the ZooKeeper store, the controller and the replicas.

Plain frozen values, no I/O. Their ZooKeeper encodings live in ``cluster/zk/layout.py``.

Invariants:
- ``LeaderAndIsr.leader`` is ``NO_LEADER`` (-1) for an offline partition; otherwise it is in ``isr``
  (unless chosen by an unclean election, where ``isr == (leader,)`` anyway).
- ``isr`` is a tuple with no duplicates, in the order the controller or leader wrote it.
- ``leader_epoch`` only grows for a partition; every leader change bumps it by one.
- ``zk_version`` is the version of the znode the value was read from (or written as), -1 when unknown:
  every update of a partition's state is conditional on it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

NO_LEADER = -1
UNKNOWN_VERSION = -1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener as brokers register it: ``PLAINTEXT://host:port``."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker: what it wrote to ``/brokers/ids/<id>``; ``epoch`` is that znode's creation zxid."""

    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    epoch: int = -1
    # Set by the broker itself when it asks the controller to move its leaderships away (controlled shutdown).
    shutting_down: bool = False
    # Partitions whose log is in a failed log directory of this broker (Kafka's offline replicas): the
    # controller treats the broker as dead for these partitions only.
    offline_replicas: frozenset[TopicPartition] = frozenset()

    def endpoint(self, listener: str | None = None) -> Endpoint:
        """The endpoint of ``listener`` (the first one when None); KeyError if it has none by that name."""
        if listener is None:
            return self.endpoints[0]
        for e in self.endpoints:
            if e.listener == listener:
                return e
        raise KeyError(f"broker {self.broker_id} has no listener named {listener}")

    def address(self, listener: str) -> Endpoint:
        """Where to reach this broker on ``listener``, or on its first listener if it has none by that name."""
        try:
            return self.endpoint(listener)
        except KeyError:
            return self.endpoints[0]


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """The state of one partition, as ``/brokers/topics/<t>/partitions/<p>/state`` holds it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = UNKNOWN_VERSION

    @property
    def online(self) -> bool:
        return self.leader != NO_LEADER

    def with_isr(self, isr: tuple[int, ...]) -> LeaderAndIsr:
        """Same leader and epoch, another ISR (a leader's ISR change keeps the leader epoch, as Kafka's)."""
        return LeaderAndIsr(self.leader, self.leader_epoch, isr, self.controller_epoch, self.zk_version)

    def new_leader(self, leader: int, isr: tuple[int, ...], controller_epoch: int) -> LeaderAndIsr:
        """A leader change: the epoch moves on by one."""
        return LeaderAndIsr(leader, self.leader_epoch + 1, isr, controller_epoch, self.zk_version)


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """``/brokers/topics/<t>``: the topic id and each partition's replicas (preferred leader first); during a
    reassignment, ``replicas`` is the full set and ``adding``/``removing`` (partitions with a reassignment
    only) say which of them are arriving and leaving (``cluster/controller/reassignment.py``)."""

    name: str
    topic_id: uuid.UUID
    replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    zk_version: int = UNKNOWN_VERSION
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        return len(self.replicas)

    @property
    def replication_factor(self) -> int:
        return len(self.replicas[0]) if self.replicas else 0
