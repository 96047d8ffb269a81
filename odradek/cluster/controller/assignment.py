"""Replica placement for new topics and new partitions, as Kafka's ZooKeeper-mode controller places them.

This is the rule of Kafka's ``AdminUtils.assignReplicasToBrokers`` (and, for CreatePartitions, of
``AdminZkClient.createNewPartitionsAssignment``), re-derived here:

- Brokers are taken in id order. With racks, they are re-ordered so that racks alternate: racks sorted by name,
  brokers of each rack sorted by id, then one broker from each rack in turn (``rack_alternated_brokers``).
- Partition ``p``'s first replica (its preferred leader) is ``order[(p + start) % n]``: leaders go round-robin, so
  no broker leads more than one partition more than any other.
- The other replicas follow the first at a shift that grows by one every ``n`` partitions, so that the partitions
  a broker leads have their followers spread over the other brokers. With racks, a candidate is skipped while it
  sits in a rack that already holds a replica of the partition and some rack holds none, which spreads each
  partition over ``min(replication_factor, racks)`` racks.
- Without a fixed ``start_index`` both the start and the first shift are drawn at random, as Kafka draws them.

Observation used below: with every broker in one rack, the rack-aware walk picks exactly the brokers the
rack-unaware one picks (the rack check never skips and the first ``RF - 1`` shifts are distinct), so both are one
walk here, the rack-unaware case running over a single anonymous rack.

Invariants of every result: each partition gets ``replication_factor`` distinct brokers, all from ``brokers``;
the result is a pure function of the arguments (and of ``rng`` when no ``start_index`` is given).
Either every broker has a rack or none has: a mix is rejected, as Kafka rejects it in ZooKeeper mode.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from odradek.protocol.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    KafkaError,
)

__all__ = [
    "InvalidReplicaAssignmentError",
    "add_partitions_assignment",
    "assign_replicas",
    "rack_alternated_brokers",
]


class InvalidReplicaAssignmentError(KafkaError):
    """Replicas cannot be placed on these brokers (here: only some of the brokers have a rack)."""

    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    start_partition_id: int = 0,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """Place ``partitions`` partitions of ``replication_factor`` replicas each on ``brokers`` (id -> rack or None).

    Returns partition id -> replicas (preferred leader first) for ids ``start_partition_id`` onwards.
    ``start_index`` fixes both the leaders' starting position and the followers' first shift (Kafka's
    ``fixedStartIndex``); when None both are drawn from ``rng`` (a fresh ``random.Random`` when None).
    """
    if partitions < 1:
        raise InvalidPartitionsError(f"Number of partitions must be larger than 0 (got {partitions}).")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(
            f"Replication factor must be larger than 0 (got {replication_factor})."
        )
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}."
        )
    if start_index is not None and start_index < 0:
        raise ValueError(f"start_index must be >= 0 or None for a random start, got {start_index}")
    without_rack = sorted(b for b, rack in brokers.items() if rack is None)
    if not without_rack:
        racks: dict[int, str] = {b: rack for b, rack in brokers.items() if rack is not None}
        order = rack_alternated_brokers(racks)
    elif len(without_rack) == len(brokers):
        racks = {b: "" for b in brokers}
        order = sorted(brokers)
    else:
        raise InvalidReplicaAssignmentError(
            "Not all brokers have rack information for replica rack aware assignment: "
            f"broker(s) {', '.join(map(str, without_rack))} have no broker.rack. "
            "Set broker.rack on every broker or on none, or give the replica assignment explicitly."
        )
    n = len(order)
    if start_index is None:
        rng = rng if rng is not None else random.Random()
        start = rng.randrange(n)
        shift = rng.randrange(n)
    else:
        start = shift = start_index
    rack_count = len(set(racks.values()))
    result: dict[int, tuple[int, ...]] = {}
    for partition in range(max(0, start_partition_id), max(0, start_partition_id) + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        result[partition] = _replicas_of(order, racks, rack_count, first, shift * rack_count, replication_factor)
    return result


def _replicas_of(
    order: list[int], racks: Mapping[int, str], rack_count: int, first: int, shift: int, replication_factor: int
) -> tuple[int, ...]:
    """One partition's replicas: ``order[first]``, then followers walked at ``shift``, racks spread first."""
    n = len(order)
    leader = order[first]
    chosen = [leader]
    used_racks = {racks[leader]}
    k = 0
    for _ in range(replication_factor - 1):
        # Within n - 1 steps the walk meets every other broker once, so an acceptable one is always met:
        # an unused broker exists (RF <= n) and, while a rack holds no replica, an unused broker of that rack.
        for _ in range(n - 1):
            broker = order[(first + 1 + (shift + k) % (n - 1)) % n]
            k += 1
            rack = racks[broker]
            if broker not in chosen and (rack not in used_racks or len(used_racks) == rack_count):
                chosen.append(broker)
                used_racks.add(rack)
                break
        else:  # pragma: no cover - unreachable by the argument above
            raise AssertionError(f"no broker left for replica {len(chosen) + 1} of {replication_factor}")
    return tuple(chosen)


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Broker ids ordered so racks alternate: racks by name, each rack's brokers by id, one per rack in turn.

    ``{0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}`` -> ``[0, 3, 1, 5, 4, 2]``.
    """
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    columns = [by_rack[name] for name in sorted(by_rack)]
    depth = max((len(c) for c in columns), default=0)
    return [column[row] for row in range(depth) for column in columns if row < len(column)]


def add_partitions_assignment(
    existing: Mapping[int, tuple[int, ...]], new_total: int, brokers: Mapping[int, str | None]
) -> dict[int, tuple[int, ...]]:
    """Replicas for the partitions a CreatePartitions request adds, ids ``len(existing)`` .. ``new_total - 1``.

    Kafka's rule: the replication factor is partition 0's; the walk continues the topic's pattern, starting at the
    position (in id order) of the first broker whose id is >= partition 0's first replica.
    """
    if 0 not in existing or sorted(existing) != list(range(len(existing))):
        raise KafkaError(
            f"Unexpected existing replica assignment: partitions must be numbered 0..n-1, got {sorted(existing)}. "
            "The topic's assignment in ZooKeeper is damaged; repair it before adding partitions."
        )
    current = len(existing)
    if new_total < current:
        raise InvalidPartitionsError(
            f"Topic currently has {current} partitions, which is higher than the requested {new_total}."
        )
    if new_total == current:
        raise InvalidPartitionsError(f"Topic already has {current} partitions.")
    first_replica = existing[0][0]
    ids = sorted(brokers)
    start = next((i for i, b in enumerate(ids) if b >= first_replica), 0)
    return assign_replicas(
        brokers, new_total - current, len(existing[0]), start_index=start, start_partition_id=current
    )
