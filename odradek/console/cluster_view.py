"""What the console shows of the cluster: brokers, the controller, and each partition's replicas and health.

One read model over both broker modes, so pages never ask which mode they are in:

- single node: this broker is the only broker and the controller; every partition is led here with one
  replica; a partition whose log directory failed is offline;
- cluster: brokers, assignments and partition states come from the ZooKeeper image this broker keeps
  (``cluster/member.py``), as Metadata answers them; a partition is offline without a live leader,
  under-replicated when its ISR is smaller than its replica set, under min ISR when below its topic's
  ``min.insync.replicas``.

Invariants: everything here reads in-memory state only (no disk, no ZooKeeper round trip), so it is cheap enough
to run on the event loop for every page view; the log figures (offsets, size) are those of the local replica,
absent (None) where this broker hosts none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.broker.broker import Broker
    from odradek.cluster.metadata import Topic


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None
    is_controller: bool
    is_self: bool


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int  # -1: no leader
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: bool
    start_offset: int | None  # the local replica's figures (None: not hosted here)
    end_offset: int | None  # high watermark
    size: int | None

    @property
    def under_replicated(self) -> bool:
        return not self.offline and len(self.isr) < len(self.replicas)

    @property
    def messages(self) -> int | None:
        if self.start_offset is None or self.end_offset is None:
            return None
        return max(self.end_offset - self.start_offset, 0)


@dataclass(frozen=True, slots=True)
class Health:
    partitions: int
    offline: int
    under_replicated: int
    under_min_isr: int


def brokers(b: Broker) -> list[BrokerInfo]:
    cluster = b.cluster
    if cluster is None:
        cfg = b.config
        return [BrokerInfo(b.node_id, cfg.advertised_host, cfg.advertised_port, cfg.rack, True, True)]
    out = []
    for node_id, reg in sorted(cluster.brokers.items()):
        e = reg.endpoint()
        out.append(
            BrokerInfo(node_id, e.host, e.port, reg.rack, node_id == cluster.controller_id, node_id == b.node_id)
        )
    return out


def controller_id(b: Broker) -> int:
    return b.node_id if b.cluster is None else b.cluster.controller_id


def cluster_id(b: Broker) -> str:
    return b.registry.cluster_id


def partition(b: Broker, topic: str, p: int) -> PartitionInfo:
    part = b.replicas.get(topic, p)
    lg = part.log if part is not None else None
    start, end, size = (lg.log_start_offset, lg.high_watermark, lg.size) if lg is not None else (None, None, None)
    cluster = b.cluster
    if cluster is None:
        offline = b.log_manager.is_offline(topic, p)
        return PartitionInfo(
            topic,
            p,
            -1 if offline else b.node_id,
            part.leader_epoch if part is not None else 0,
            (b.node_id,),
            () if offline else (b.node_id,),
            offline,
            start,
            end,
            size,
        )
    assignment = cluster.assignments.get(topic)
    replicas = tuple(assignment.replicas.get(p, ())) if assignment is not None else ()
    state = cluster.states.get((topic, p))
    if state is None:
        return PartitionInfo(topic, p, -1, -1, replicas, (), True, start, end, size)
    online = state.online and state.leader in cluster.brokers
    return PartitionInfo(
        topic,
        p,
        state.leader if online else -1,
        state.leader_epoch,
        replicas,
        tuple(state.isr),
        not online,
        start,
        end,
        size,
    )


def partitions(b: Broker, topic: Topic) -> list[PartitionInfo]:
    return [partition(b, topic.name, p) for p in range(topic.partitions)]


def min_isr(b: Broker, topic: Topic) -> int:
    """The topic's ``min.insync.replicas``: its override, else the default (read without building its config)."""
    override = topic.configs.get("min.insync.replicas")
    if override is not None and override.strip().isdigit():
        return int(override)
    return b.log_defaults.min_insync_replicas


def health(b: Broker) -> Health:
    """Partition health over every topic: in-memory state only (no log is looked at)."""
    total = offline = under = under_min = 0
    cluster = b.cluster
    for topic in list(b.registry.topics.values()):
        need = min_isr(b, topic)
        for p in range(topic.partitions):
            total += 1
            if cluster is None:
                if b.log_manager.is_offline(topic.name, p):
                    offline += 1
                    under_min += 1
                elif need > 1:
                    under_min += 1
                continue
            assignment = cluster.assignments.get(topic.name)
            replicas = assignment.replicas.get(p, ()) if assignment is not None else ()
            state = cluster.states.get((topic.name, p))
            if state is None or not state.online or state.leader not in cluster.brokers:
                offline += 1
                under_min += 1
                continue
            if len(state.isr) < len(replicas):
                under += 1
            if len(state.isr) < need:
                under_min += 1
    return Health(total, offline, under, under_min)
