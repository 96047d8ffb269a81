"""The health of a partition as the operators' tools classify it (kafka-topics.sh's describe filters, Kafka's
UnderReplicatedPartitions / UnderMinIsrPartitions / OfflinePartitionsCount): pure, over Metadata values."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

UNDER_REPLICATED = "under-replicated"
UNDER_MIN_ISR = "under-min-isr"
AT_MIN_ISR = "at-min-isr"
UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    leader: int  # -1: none
    replicas: Sequence[int]
    isr: Sequence[int]
    min_isr: int

    def flags(self, live: Collection[int]) -> set[str]:
        """Kafka's meanings: under-replicated when the ISR is smaller than the replica set; under (at) min ISR
        when it is smaller than (equal to) ``min.insync.replicas``; unavailable when there is no live leader."""
        out = set()
        if len(self.isr) < len(self.replicas):
            out.add(UNDER_REPLICATED)
        if len(self.isr) < self.min_isr:
            out.add(UNDER_MIN_ISR)
        elif len(self.isr) == self.min_isr:
            out.add(AT_MIN_ISR)
        if self.leader < 0 or self.leader not in live:
            out.add(UNAVAILABLE)
        return out
