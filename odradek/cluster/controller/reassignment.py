"""Partition reassignment (KIP-455), as Kafka's ZooKeeper-mode controller carries it out. Pure functions.

A reassignment moves a partition from its original replicas (ORS) to target replicas (TRS). While it runs,
``/brokers/topics/<t>`` lists the full set RS = TRS + (ORS - TRS) as the partition's replicas, with
``adding_replicas`` = TRS - ORS and ``removing_replicas`` = ORS - TRS beside it. Every broker of RS hosts the
partition, so the new replicas create their logs and fetch from the leader, which adds them to the ISR once
they have caught up. When every target replica is in the ISR the controller completes it:

1. the state: ISR = ISR ∩ TRS, and a new leader from TRS (the first one in target order that is live and in the
   ISR) when the current one is not in TRS or not live; the leader epoch moves on by one either way, so the
   removed replicas' fetches are fenced;
2. the assignment: replicas = TRS, no adding or removing; the removed replicas stop and delete their logs.

Invariants:
- ORS is always recoverable from the znode (RS minus adding), so a new reassignment of a partition already
  being reassigned starts from ORS, as Kafka's does, and a cancellation is a reassignment back to ORS.
- Completion never leaves the ISR empty and never elects outside the ISR: it waits until every target
  replica is in the ISR, and the ISR always holds the leader.
- A step is decided from the image alone; a controller that fails between the two writes leaves a
  reassignment whose state is already complete, which the next controller finishes with the second write.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from odradek.cluster.model import LeaderAndIsr, TopicAssignment

__all__ = ["Completion", "PartitionReassignment", "complete", "reassign", "reassignment_of"]


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """One partition's replicas as the topic znode lists them: ``replicas`` (RS), ``adding``, ``removing``."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def in_progress(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """ORS: the replicas before the reassignment (all of them when none runs)."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        """TRS: the replicas after it (all of them when none runs)."""
        return tuple(r for r in self.replicas if r not in self.removing)


def reassignment_of(assignment: TopicAssignment, partition: int) -> PartitionReassignment:
    return PartitionReassignment(assignment.replicas[partition], assignment.adding.get(partition, ()),
                                 assignment.removing.get(partition, ()))


def reassign(current: PartitionReassignment, target: Sequence[int] | None) -> PartitionReassignment:
    """The znode's lists for moving to ``target`` (None: cancel, i.e. move back to the original replicas).

    Starts from ORS even when a reassignment is already running: replicas it was adding that the new target
    does not want are dropped (they delete their logs)."""
    origin = current.original
    goal = origin if target is None else tuple(target)
    full = tuple(dict.fromkeys((*goal, *origin)))
    return PartitionReassignment(full, tuple(r for r in full if r not in origin),
                                 tuple(r for r in full if r not in goal))


@dataclass(frozen=True, slots=True)
class Completion:
    """The writes that finish a reassignment: ``state`` (None when it needs no change) then ``replicas``."""

    state: LeaderAndIsr | None
    replicas: tuple[int, ...]


def complete(current: PartitionReassignment, state: LeaderAndIsr, live: Collection[int],
             controller_epoch: int) -> Completion | None:
    """The completion of a running reassignment, or None while a target replica is not in the ISR yet (or no
    target replica may lead)."""
    if not current.in_progress:
        return None
    target = current.target
    if any(r not in state.isr for r in target):
        return None
    isr = tuple(r for r in state.isr if r in target)
    if state.leader in target and state.leader in live:
        if isr == state.isr:
            return Completion(None, target)
        return Completion(state.new_leader(state.leader, isr, controller_epoch), target)
    leader = next((r for r in target if r in live and r in isr), None)
    if leader is None:
        return None  # no live target replica: wait for one to come back
    return Completion(state.new_leader(leader, isr, controller_epoch), target)
