"""What ``/healthz`` and ``/readyz`` answer: is the broker alive, and is it ready for clients.

- Alive (``/healthz``): the event loop answers. Nothing else is checked: a liveness probe that fails for a slow
  ZooKeeper would get a healthy broker restarted.
- Ready (``/readyz``), every condition with the reason it gives when it fails:
  - the Kafka listeners serve (not yet started, or shutting down: "not serving");
  - not every log directory has failed (``broker.fatal``);
  - in a cluster: connected to ZooKeeper and registered there; the controller is known (the broker has the
    cluster's metadata); no partition this broker follows has left it out of its ISR ("catching up": Kafka's
    "is this broker caught up" check before a rolling restart moves on).

Pure reads of broker state on its loop: cheap (one pass over the partitions), no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.replica.partition import Role

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

_SHOWN = 5  # partitions named in a "catching up" reason


def readiness(broker: Broker) -> str | None:
    """None when ready, else why not (one line, for the 503's body and the operator)."""
    if broker.fatal is not None:
        return f"stopping: {broker.fatal}"
    if not broker.serving or broker.shutting_down:
        return "not serving: the broker is starting or shutting down"
    cluster = broker.cluster
    if broker.replicated:
        if cluster is None or cluster.zk is None or not cluster.zk.connected:
            return "not connected to ZooKeeper"
        if not cluster.registered:
            return "not registered in ZooKeeper"
        if cluster.shutting_down:
            return "in controlled shutdown"
        if cluster.controller_id < 0:
            return "no controller known yet: waiting for the cluster's metadata"
        behind = [
            p.name for p in broker.replicas.partitions() if p.role is Role.FOLLOWER and broker.node_id not in p.isr
        ]
        if behind:
            more = f" and {len(behind) - _SHOWN} more" if len(behind) > _SHOWN else ""
            return (
                f"catching up: {len(behind)} partition(s) this broker follows have it out of their ISR "
                f"({', '.join(sorted(behind)[:_SHOWN])}{more})"
            )
    return None
