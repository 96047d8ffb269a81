"""Replication throttles (Kafka's replication quotas, KIP-73), so that a reassignment or a catching-up
follower does not starve clients.

- ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` (dynamic broker configs,
  bytes/s, default unlimited) cap what a leader sends to, and a follower fetches for, *throttled* replicas.
- The topic configs ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``
  name them: ``partition:broker`` pairs, or ``*`` for every replica of the topic. A leader throttles
  partition P when ``P:<its id>`` is listed on the leader side; a follower when ``P:<its id>`` is listed on
  the follower side.
- Only replicas outside the ISR are ever throttled (as Kafka's ``shouldLeaderThrottle`` and
  ``shouldFollowerThrottle``): in-sync replicas, which acks=all writes wait for, never are.
- When the measured rate (``replication.quota.window.num`` windows of
  ``replication.quota.window.size.seconds``) is above the limit, a leader answers a throttled partition
  without records and a follower leaves it out of its fetch; both record the bytes they do move.

Invariants: a check is a dictionary lookup and a few integer operations (the topic's spec is parsed only
when it changes); an unlimited rate never throttles.
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.clock import Clock
from odradek.quota.rate import WindowedRate

ALL = "*"
UNLIMITED = 2**63 - 1  # Kafka's default rate (Long.MaxValue)


def parse_throttled_replicas(key: str, spec: str) -> frozenset[tuple[int, int]] | None:
    """The (partition, broker) pairs of a ``*.replication.throttled.replicas`` value; None for ``*`` (all).
    Raises ValueError with Kafka's expectation for anything else."""
    text = spec.strip()
    if text == ALL:
        return None
    pairs = set()
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        partition, sep, broker = item.partition(":")
        if not (sep and partition.strip().isdigit() and broker.strip().isdigit()):
            raise ValueError(f"{key}={spec!r} is invalid: use * or a list of partition:broker pairs, "
                             "e.g. 0:101,0:102,1:101")
        pairs.add((int(partition), int(broker)))
    return frozenset(pairs)


class ReplicationThrottle:
    """One side (leader or follower) of this broker's replication quota."""

    def __init__(self, broker_id: int, spec_of: Callable[[str], str], clock: Clock, *, rate: int = UNLIMITED,
                 windows: int = 11, window_ms: int = 1000) -> None:
        """``spec_of(topic)``: the topic's ``*.replication.throttled.replicas`` value for this side."""
        self.broker_id = broker_id
        self.spec_of = spec_of
        self.limit = rate
        self._rate = WindowedRate(clock, windows=windows, window_ms=window_ms)
        self._parsed: dict[str, tuple[str, frozenset[tuple[int, int]] | None]] = {}

    def set_rate(self, rate: int) -> None:
        self.limit = rate

    def is_throttled(self, topic: str, partition: int) -> bool:
        """Whether this broker's replica of ``topic``-``partition`` is listed for this side."""
        if self.limit >= UNLIMITED:
            return False
        spec = self.spec_of(topic)
        if not spec:
            return False
        cached = self._parsed.get(topic)
        if cached is None or cached[0] != spec:
            try:
                cached = (spec, parse_throttled_replicas("throttled replicas", spec))
            except ValueError:
                cached = (spec, frozenset())  # validated when set; an unreadable stored value throttles nothing
            self._parsed[topic] = cached
        pairs = cached[1]
        return pairs is None or (partition, self.broker_id) in pairs

    def exceeded(self) -> bool:
        return self.limit < UNLIMITED and self._rate.rate() > self.limit

    def record(self, amount: int) -> None:
        if self.limit < UNLIMITED and amount > 0:
            self._rate.record(amount)

    def holds_back(self, topic: str, partition: int, in_sync: bool) -> bool:
        """Whether a throttled replica outside the ISR must wait now (the quota is used up)."""
        return not in_sync and self.is_throttled(topic, partition) and self.exceeded()
