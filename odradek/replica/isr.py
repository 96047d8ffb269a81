"""The leader's replication bookkeeping for one partition: followers' positions, the ISR, the high watermark.

Pure: no I/O, no clock (every method that needs time takes ``now_ms``), no locks. The replica manager owns one
``LeaderReplicaState`` per partition it leads, feeds it local appends and followers' fetches, sends the ISR
changes it proposes to ZooKeeper, and reports back whether the conditional write won (``isr_committed``) or
lost (``isr_failed``); a LeaderAndIsr from the controller while leading goes to ``update_assignment``.
Kafka's ``Partition``/``Replica`` (3.x) are the reference; the rules:

- A follower's position is the ``fetch_offset`` of its latest Fetch. Its ``last_caught_up_ms`` is the latest
  time at which it had everything the leader had: a fetch at ``fetch_offset >= leader end now`` sets it to the
  fetch time; else a fetch at ``fetch_offset >= leader end at the previous fetch`` sets it to the previous
  fetch's time. It never moves backwards.
- When leadership starts, ISR followers get ``last_caught_up_ms = now`` (benefit of the doubt), the others
  ``-1`` (never); every follower's log end is unknown (``-1``) until it fetches.
- The high watermark is the minimum log end over the *effective* ISR, the leader's own log end included.
  While an ISR change is pending the effective ISR is the maximal ISR (KIP-497: the union of the committed
  and the proposed ISR), so neither a follower about to join nor one about to leave is overtaken before
  ZooKeeper decides. A member whose log end is unknown holds the HW where it is. Members that are no longer
  assigned replicas (reassignment) are not waited for, as in Kafka.
- A follower outside the ISR may join once its log end is ``>= HW`` and ``>= epoch_start_offset`` (the
  leader's log end when its current epoch began), no change is pending, and it is an assigned replica.
- An ISR follower is out of sync when its log end differs from the leader's and
  ``now - last_caught_up_ms > lag_time_max_ms`` (Kafka's ``isCaughtUp``; an idle partition whose followers
  have everything never shrinks). Members that are not assigned replicas are always out of sync. While a
  change is pending no candidates are reported (Kafka's ``getOutOfSyncReplicas``).

Invariants (checked by tests/replica/test_isr_model.py):
- The leader is in ``isr``, in every proposed ISR and in every committed ISR; at most one change is pending.
- ``0 <= high_watermark <= local log end``, and the HW never moves backwards while leading.
- Every assigned member of the effective ISR whose log end is known has ``log end >= high_watermark``.
- A committed ISR is always a subset of the maximal ISR that was in force while it was pending, and nobody
  enters a proposed ISR without having reached the HW: so a record below the HW (an acknowledged acks=all
  write) is on every member of the committed ISR. (An ISR the controller sends through ``update_assignment``
  is trusted: it only ever writes ISRs a leader proposed, or a new leader's.)

Deliberate differences from Kafka: the HW does not also wait for non-ISR followers that are "caught up"
(Kafka's ``shouldWaitForReplicaToJoinIsr``); the plain ISR rule is used. ``isr_failed`` returns the new HW
when abandoning a pending expansion lets it advance (Kafka waits for the next fetch or append).

Not thread-safe: the event loop serialises access.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

__all__ = [
    "UNKNOWN_OFFSET",
    "FetchUpdate",
    "FollowerState",
    "IsrChangeError",
    "LeaderReplicaState",
    "PendingIsr",
    "StaleBrokerEpochError",
    "UnknownReplicaError",
    "follower_high_watermark",
    "truncation_offset",
]

UNKNOWN_OFFSET = -1
"""A log end or log start offset the leader has not learned yet (Kafka's ``UnifiedLog.UnknownOffset``)."""
NEVER = -1
"""A time that has not happened: no fetch yet, never caught up."""


class UnknownReplicaError(KafkaError):
    """A Fetch from a broker that is not an assigned follower of this partition.

    Carries NOT_LEADER_OR_FOLLOWER; a handler whose request carried the current leader epoch may prefer
    UNKNOWN_LEADER_EPOCH (Kafka does, so that a replica being added by a reassignment retries).
    """

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class StaleBrokerEpochError(KafkaError):
    """A Fetch from an older incarnation of a follower broker (its broker epoch is below one already seen)."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class IsrChangeError(Exception):
    """An ISR change that the leader's rules forbid (a caller's bug, not a wire error)."""


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower replica; every field is ``-1`` until learned."""

    replica_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = NEVER
    last_caught_up_ms: int = NEVER
    last_fetch_leader_end: int = UNKNOWN_OFFSET
    broker_epoch: int = -1

    def is_caught_up(self, leader_end: int, now_ms: int, lag_time_max_ms: int) -> bool:
        """Kafka's ``ReplicaState.isCaughtUp``: has the leader's end, or had it within the last lag window."""
        if self.log_end_offset == leader_end:
            return True
        return self.last_caught_up_ms != NEVER and now_ms - self.last_caught_up_ms <= lag_time_max_ms


@dataclass(frozen=True, slots=True)
class PendingIsr:
    """An ISR change sent to ZooKeeper and not yet confirmed; ``maximal`` is current ∪ proposed (KIP-497)."""

    proposed: tuple[int, ...]
    maximal: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FetchUpdate:
    """The outcome of recording a follower's fetch.

    ``new_hw``: the high watermark, if this fetch moved it (complete delayed produces and fetches).
    ``expand_to``: an ISR with this follower added, if it has caught up and may join; pass it to ``propose_isr``.
    """

    new_hw: int | None = None
    expand_to: tuple[int, ...] | None = None


class LeaderReplicaState:
    """One partition while this broker leads it."""

    def __init__(
        self,
        local_id: int,
        leader_epoch: int,
        isr: tuple[int, ...],
        replicas: tuple[int, ...],
        local_log_end: int,
        high_watermark: int,
        now_ms: int,
        epoch_start_offset: int | None = None,
    ) -> None:
        """Start leading; ``epoch_start_offset`` defaults to ``local_log_end`` (where Kafka's new epoch starts)."""
        isr, replicas = tuple(isr), tuple(replicas)
        _check_unique("replicas", replicas)
        _check_unique("isr", isr)
        if local_id not in replicas:
            raise ValueError(f"broker {local_id} cannot lead a partition whose replicas {replicas} exclude it")
        if local_id not in isr:
            raise ValueError(f"broker {local_id} cannot lead with an ISR {isr} that excludes it")
        if leader_epoch < 0:
            raise ValueError(f"leader epoch must be >= 0, got {leader_epoch}")
        if not 0 <= high_watermark <= local_log_end:
            raise ValueError(
                f"high watermark {high_watermark} must lie between 0 and the local log end {local_log_end}"
            )
        start = local_log_end if epoch_start_offset is None else epoch_start_offset
        if not 0 <= start <= local_log_end:
            raise ValueError(f"epoch start offset {start} must lie between 0 and the local log end {local_log_end}")
        self.local_id = local_id
        self.leader_epoch = leader_epoch
        self.epoch_start_offset = start
        self.replicas = replicas
        self.isr = isr
        self.pending: PendingIsr | None = None
        self._local_log_end = local_log_end
        self._hw = high_watermark
        self._followers = {
            r: FollowerState(r, last_caught_up_ms=now_ms if r in isr else NEVER) for r in replicas if r != local_id
        }
        # With the leader alone in the ISR the HW can move at once (Kafka's makeLeader does the same).
        self._maybe_advance()

    def __repr__(self) -> str:
        return (
            f"LeaderReplicaState(local_id={self.local_id}, leader_epoch={self.leader_epoch}, isr={self.isr}, "
            f"pending={self.pending}, hw={self._hw}, log_end={self._local_log_end})"
        )

    # ---- reading -----------------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def local_log_end(self) -> int:
        return self._local_log_end

    def effective_isr(self) -> tuple[int, ...]:
        """The ISR the HW waits for: the maximal ISR while a change is pending, else the committed one."""
        return self.pending.maximal if self.pending is not None else self.isr

    def compute_high_watermark(self) -> int:
        """The HW the current log ends allow: min log end over the effective ISR, never below the current HW."""
        candidate = self._local_log_end
        for replica_id in self.effective_isr():
            follower = self._followers.get(replica_id)
            if follower is not None:  # the leader itself, or a member no longer assigned: not waited for
                candidate = min(candidate, follower.log_end_offset)
        return max(self._hw, candidate)

    def min_isr_satisfied(self, min_insync: int) -> bool:
        """``min.insync.replicas`` against the committed ISR, as Kafka checks it for acks=all."""
        return len(self.isr) >= min_insync

    def follower_states(self) -> list[FollowerState]:
        """Copies of every assigned follower's state, in assignment order."""
        return [dataclasses.replace(self._followers[r]) for r in self.replicas if r in self._followers]

    def follower_state(self, replica_id: int) -> FollowerState:
        """A copy of one follower's state; ``UnknownReplicaError`` if it is not an assigned follower."""
        return dataclasses.replace(self._follower(replica_id))

    def can_join_isr(self, replica_id: int) -> bool:
        """Has this assigned follower reached both the HW and the start of the current leader epoch?"""
        follower = self._followers.get(replica_id)
        if follower is None:
            return False
        end = follower.log_end_offset
        return end != UNKNOWN_OFFSET and end >= self._hw and end >= self.epoch_start_offset

    def shrink_candidates(self, now_ms: int, lag_time_max_ms: int) -> tuple[int, ...]:
        """ISR followers out of sync at ``now_ms`` (never the leader); empty while a change is pending."""
        if self.pending is not None:
            return ()
        out: list[int] = []
        for replica_id in self.isr:
            if replica_id == self.local_id:
                continue
            follower = self._followers.get(replica_id)
            if follower is None or not follower.is_caught_up(self._local_log_end, now_ms, lag_time_max_ms):
                out.append(replica_id)
        return tuple(out)

    # ---- events ------------------------------------------------------------------------------------------

    def on_local_append(self, log_end: int) -> int | None:
        """The leader's log now ends at ``log_end``; returns the new HW if it moved (an ISR of one)."""
        if log_end < self._local_log_end:
            raise ValueError(
                f"the leader's log end cannot move back from {self._local_log_end} to {log_end} while it leads; "
                "a truncating leader must give up leadership first"
            )
        self._local_log_end = log_end
        return self._maybe_advance()

    def on_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        log_start_offset: int,
        now_ms: int,
        leader_log_end: int,
        broker_epoch: int = -1,
    ) -> FetchUpdate:
        """Record a follower's Fetch at ``fetch_offset``; ``leader_log_end`` is the leader's log end as it arrived.

        The caller validates the offset against the log first (OFFSET_OUT_OF_RANGE is its answer).
        Raises ``UnknownReplicaError`` for a broker that is not an assigned follower and
        ``StaleBrokerEpochError`` for a broker epoch below one already seen from that follower.
        """
        follower = self._follower(replica_id)
        if broker_epoch != -1 and broker_epoch < follower.broker_epoch:
            raise StaleBrokerEpochError(
                f"fetch from broker {replica_id} with broker epoch {broker_epoch}, but epoch "
                f"{follower.broker_epoch} was seen already: the request comes from an older incarnation"
            )
        if leader_log_end < self._local_log_end:
            raise ValueError(
                f"leader log end {leader_log_end} given with the fetch is behind the recorded {self._local_log_end}"
            )
        if not 0 <= fetch_offset <= leader_log_end:
            raise ValueError(
                f"fetch offset {fetch_offset} of broker {replica_id} lies outside [0, {leader_log_end}]: "
                "answer OFFSET_OUT_OF_RANGE instead of recording it"
            )
        self._local_log_end = leader_log_end
        if fetch_offset >= leader_log_end:
            caught_up = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_end:
            caught_up = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        else:
            caught_up = follower.last_caught_up_ms
        follower.last_caught_up_ms = caught_up
        follower.log_end_offset = fetch_offset
        follower.log_start_offset = log_start_offset
        follower.last_fetch_leader_end = max(leader_log_end, follower.last_fetch_leader_end)
        follower.last_fetch_ms = now_ms
        if broker_epoch != -1:
            follower.broker_epoch = broker_epoch

        expand_to = None
        if self.pending is None and replica_id not in self.isr and self.can_join_isr(replica_id):
            expand_to = (*self.isr, replica_id)
        return FetchUpdate(new_hw=self._maybe_advance(), expand_to=expand_to)

    def propose_isr(self, new_isr: tuple[int, ...]) -> PendingIsr:
        """Mark ``new_isr`` as sent to ZooKeeper; the HW waits for the maximal ISR until it is decided.

        Refuses (``IsrChangeError``) while another change is pending, an ISR without the leader or with
        duplicates, an unchanged ISR, and adding a follower that is unassigned or has not reached both the HW
        and the epoch start (it would miss acknowledged records).
        """
        new_isr = tuple(new_isr)
        if self.pending is not None:
            raise IsrChangeError(
                f"ISR change to {self.pending.proposed} is still pending; wait for isr_committed or isr_failed"
            )
        self._check_isr_shape(new_isr)
        if set(new_isr) == set(self.isr):
            raise IsrChangeError(f"proposed ISR {new_isr} has the same members as the current ISR {self.isr}")
        for replica_id in new_isr:
            if replica_id not in self.isr and not self.can_join_isr(replica_id):
                raise IsrChangeError(
                    f"broker {replica_id} cannot join the ISR: {self._position(replica_id)}, but it must be an "
                    f"assigned replica that reached the high watermark {self._hw} and the epoch start "
                    f"{self.epoch_start_offset}"
                )
        self.pending = PendingIsr(proposed=new_isr, maximal=_union(self.isr, new_isr))
        return self.pending

    def isr_committed(self, isr: tuple[int, ...]) -> int | None:
        """ZooKeeper confirmed the pending change as ``isr``; returns the new HW if it moved (an ISR shrank).

        ``isr`` is normally the proposed ISR; it must contain the leader and lie within the maximal ISR.
        """
        isr = tuple(isr)
        if self.pending is None:
            raise IsrChangeError(f"ISR {isr} confirmed, but no ISR change is pending")
        self._check_isr_shape(isr)
        outside = [r for r in isr if r not in self.pending.maximal]
        if outside:
            raise IsrChangeError(
                f"confirmed ISR {isr} has {outside} outside the maximal ISR {self.pending.maximal}: "
                "the high watermark did not wait for them"
            )
        self.isr, self.pending = isr, None
        return self._maybe_advance()

    def isr_failed(self) -> int | None:
        """The conditional write lost: the committed ISR stays; returns the new HW if dropping the proposal moved it.

        A no-op when nothing is pending (a late answer after ``update_assignment`` already dropped the change).
        """
        if self.pending is None:
            return None
        self.pending = None
        return self._maybe_advance()

    def update_assignment(
        self,
        isr: tuple[int, ...],
        replicas: tuple[int, ...],
        *,
        leader_epoch: int | None = None,
        now_ms: int | None = None,
        epoch_start_offset: int | None = None,
    ) -> int | None:
        """The controller sent LeaderAndIsr for this partition while this broker leads it (Kafka's makeLeader).

        ``isr`` becomes the committed ISR and a pending change is abandoned (the controller's state supersedes
        it). Followers removed from ``replicas`` are dropped, new ones start unknown, kept ones keep what the
        leader knows of them. With a newer ``leader_epoch`` (``now_ms`` required then), as Kafka: the epoch
        starts at ``epoch_start_offset`` (default: the local log end) and every follower's timing restarts as
        at a leadership start, keeping its log end. ``None`` or the same epoch changes neither. Returns the new
        HW if it moved.
        """
        isr, replicas = tuple(isr), tuple(replicas)
        _check_unique("replicas", replicas)
        if self.local_id not in replicas:
            raise ValueError(f"broker {self.local_id} cannot lead a partition whose replicas {replicas} exclude it")
        self._check_isr_shape(isr)
        if leader_epoch is not None and leader_epoch < self.leader_epoch:
            raise ValueError(f"leader epoch {leader_epoch} is older than the current {self.leader_epoch}")
        epoch, start, reset_at = self.leader_epoch, self.epoch_start_offset, None
        if leader_epoch is not None and leader_epoch != self.leader_epoch:
            if now_ms is None:
                raise ValueError(f"a new leader epoch {leader_epoch} needs now_ms to restart the followers' timing")
            start = self._local_log_end if epoch_start_offset is None else epoch_start_offset
            if not 0 <= start <= self._local_log_end:
                raise ValueError(
                    f"epoch start offset {start} must lie between 0 and the local log end {self._local_log_end}"
                )
            epoch, reset_at = leader_epoch, now_ms
        followers: dict[int, FollowerState] = {}
        for replica_id in replicas:
            if replica_id == self.local_id:
                continue
            follower = self._followers.get(replica_id) or FollowerState(replica_id)
            if reset_at is not None:
                in_sync = replica_id in isr
                follower.last_fetch_leader_end = self._local_log_end
                follower.last_fetch_ms = reset_at if in_sync else NEVER
                follower.last_caught_up_ms = reset_at if in_sync else NEVER
            followers[replica_id] = follower
        self.leader_epoch, self.epoch_start_offset = epoch, start
        self._followers = followers
        self.replicas, self.isr, self.pending = replicas, isr, None
        return self._maybe_advance()

    # ---- internals ---------------------------------------------------------------------------------------

    def _maybe_advance(self) -> int | None:
        hw = self.compute_high_watermark()
        if hw == self._hw:
            return None
        self._hw = hw
        return hw

    def _follower(self, replica_id: int) -> FollowerState:
        follower = self._followers.get(replica_id)
        if follower is None:
            what = "the leader itself" if replica_id == self.local_id else "not an assigned replica"
            raise UnknownReplicaError(
                f"broker {replica_id} is {what} of this partition (replicas {self.replicas}, leader "
                f"{self.local_id}, epoch {self.leader_epoch}); it should refresh its metadata"
            )
        return follower

    def _position(self, replica_id: int) -> str:
        follower = self._followers.get(replica_id)
        if follower is None:
            return "it is not an assigned follower"
        if follower.log_end_offset == UNKNOWN_OFFSET:
            return "its log end is unknown (no fetch yet)"
        return f"its log end is {follower.log_end_offset}"

    def _check_isr_shape(self, isr: tuple[int, ...]) -> None:
        if len(set(isr)) != len(isr):
            raise IsrChangeError(f"ISR {isr} lists a broker twice")
        if self.local_id not in isr:
            raise IsrChangeError(f"ISR {isr} excludes the leader {self.local_id}; a leader never leaves its ISR")


def _check_unique(what: str, ids: tuple[int, ...]) -> None:
    if len(set(ids)) != len(ids):
        raise ValueError(f"{what} {ids} lists a broker twice")


def _union(first: Iterable[int], second: Iterable[int]) -> tuple[int, ...]:
    out = list(first)
    out.extend(r for r in second if r not in out)
    return tuple(out)


# ---- the follower's side ---------------------------------------------------------------------------------


def follower_high_watermark(leader_hw: int, local_log_end: int) -> int:
    """A follower's HW: the leader's, but never beyond what the follower holds."""
    return min(leader_hw, local_log_end)


def truncation_offset(
    local_end_for_epoch: tuple[int, int],
    diverging_epoch: int,
    diverging_end_offset: int,
    local_log_end: int,
    *,
    high_watermark: int | None = None,
) -> int:
    """Where a follower truncates after the leader reported a diverging epoch (KIP-279/KIP-320).

    ``(diverging_epoch, diverging_end_offset)`` is the leader's answer (Fetch's DivergingEpoch or
    OffsetForLeaderEpoch); ``local_end_for_epoch`` is the follower's own
    ``LeaderEpochCache.end_offset_for(diverging_epoch, local_log_end)``. As Kafka's fetcher:

    - the leader knows no end offset (``UNDEFINED_EPOCH_OFFSET``): truncate to the follower's
      ``high_watermark`` (required then);
    - the leader sent no epoch, or the follower knows no epoch <= it: the leader's end offset;
    - the follower has the leader's epoch: min(leader's end offset, the follower's end of that epoch);
    - the follower only has an older epoch: the follower's end of that older epoch — an intermediate point;
      the follower then fetches with its new latest epoch and the leader checks again.

    Never above ``local_log_end``.
    """
    if diverging_end_offset == UNDEFINED_EPOCH_OFFSET:
        if high_watermark is None:
            raise ValueError(
                "the leader knows no end offset for the diverging epoch: pass the follower's high_watermark, "
                "the offset to truncate to in that case"
            )
        return min(high_watermark, local_log_end)
    follower_epoch, follower_end = local_end_for_epoch
    if diverging_epoch == UNDEFINED_EPOCH or follower_end == UNDEFINED_EPOCH_OFFSET:
        return min(diverging_end_offset, local_log_end)
    if follower_epoch != diverging_epoch:
        return min(follower_end, local_log_end)
    return min(follower_end, diverging_end_offset, local_log_end)
