"""One partition on this broker: its log, its role (leader or follower), and the writes waiting for replication.

A ``Partition`` wraps the partition's ``Log`` with what replication adds (Kafka's ``Partition``):

- the role this broker has for it, from the latest ``LeaderAndIsr`` it applied: ``LEADER``, ``FOLLOWER``,
  or ``NONE`` (not applied yet, or this broker lost its ZooKeeper session: it serves nothing then);
- as leader, the followers' positions and the ISR (``replica/isr.py``: ``LeaderReplicaState``), the high
  watermark derived from them, and the acks=all writes waiting for the high watermark to pass them;
- as follower, the leader to fetch from and the leader epoch to fetch with.

Single-node mode (``replicated=False``) is the degenerate case: always leader of a one-replica ISR, the high
watermark follows every append, no leader epoch is stamped (as before replication existed).

Invariants:
- A leader stamps its leader epoch on every batch it appends (``Log.append(leader_epoch=...)``) and recorded
  the epoch's start offset in the epoch cache when it became leader; a follower learns epochs from the
  leader's batches.
- The high watermark never moves backwards while this broker leads, and is at most the log end offset.
- A state with an older leader epoch than the one applied is ignored (a late watch event).
- Every waiting acks=all write is answered exactly once: when the high watermark reaches it (success, or
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR is then below min.insync.replicas), when leadership is lost
  (NOT_LEADER_OR_FOLLOWER), or by its request's timeout (REQUEST_TIMED_OUT, by the caller).
- Not thread-safe: every method runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import logging

from odradek.cluster.model import NO_LEADER, LeaderAndIsr
from odradek.protocol.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from odradek.replica.isr import LeaderReplicaState
from odradek.storage.log import AppendInfo, Log

log = logging.getLogger(__name__)


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


_seq = itertools.count()


class Partition:
    def __init__(self, log_: Log, local_id: int, *, replicated: bool) -> None:
        self.log = log_
        self.topic = log_.topic
        self.index = log_.partition
        self.local_id = local_id
        self.replicated = replicated
        self.replicas: tuple[int, ...] = (local_id,)
        self.state: LeaderAndIsr | None = None
        self.leader_state: LeaderReplicaState | None = None
        # acks=all writes: heap of (required offset, seq, future)
        self._waiting: list[tuple[int, int, asyncio.Future[ErrorCode]]] = []
        if replicated:
            self.role = Role.NONE
            self.leader_id = NO_LEADER
            self.leader_epoch = -1
        else:
            self.role = Role.LEADER
            self.leader_id = local_id
            latest = log_.leader_epochs.latest_epoch
            self.leader_epoch = latest if latest is not None else 0

    def __repr__(self) -> str:
        return f"Partition({self.name}, {self.role.value}, leader={self.leader_id}, epoch={self.leader_epoch})"

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def isr(self) -> tuple[int, ...]:
        if not self.replicated:
            return (self.local_id,)
        if self.leader_state is not None:
            return self.leader_state.isr
        return self.state.isr if self.state is not None else ()

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    # -- role changes ------------------------------------------------------------------------------

    def make_leader(self, state: LeaderAndIsr, replicas: tuple[int, ...], now_ms: int) -> bool:
        """Become (or stay) leader with ``state``; True if the role or epoch changed."""
        changed = self.role is not Role.LEADER or state.leader_epoch != self.leader_epoch
        self.state, self.replicas = state, replicas
        if not changed:
            if self.leader_state is not None and self.leader_state.pending is None:
                self.leader_state.update_assignment(state.isr, replicas)
            return False
        lg = self.log
        lg.leader_epochs.assign(state.leader_epoch, lg.next_offset)
        self.role, self.leader_id, self.leader_epoch = Role.LEADER, self.local_id, state.leader_epoch
        self.leader_state = LeaderReplicaState(
            self.local_id, state.leader_epoch, state.isr, replicas, local_log_end=lg.next_offset,
            high_watermark=lg.high_watermark, now_ms=now_ms, epoch_start_offset=lg.next_offset)
        log.info("%s: leader at epoch %d, ISR %s, log end %d, high watermark %d", self.name, state.leader_epoch,
                 list(state.isr), lg.next_offset, lg.high_watermark)
        self._maybe_advance_hw(self.leader_state.compute_high_watermark())
        return True

    def make_follower(self, state: LeaderAndIsr, replicas: tuple[int, ...]) -> bool:
        """Follow ``state.leader`` (NO_LEADER: wait for one); True if the leader or epoch changed."""
        changed = (self.role is not Role.FOLLOWER or state.leader_epoch != self.leader_epoch
                   or state.leader != self.leader_id)
        self.state, self.replicas = state, replicas
        if not changed:
            return False
        was_leader = self.role is Role.LEADER
        self.role, self.leader_id, self.leader_epoch = Role.FOLLOWER, state.leader, state.leader_epoch
        self.leader_state = None
        if was_leader:
            self.fail_waiting(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        log.info("%s: follower of broker %d at epoch %d (log end %d, high watermark %d)", self.name, state.leader,
                 state.leader_epoch, self.log.next_offset, self.log.high_watermark)
        return True

    def make_none(self, reason: str) -> None:
        """Stop serving as leader or follower (lost ZooKeeper session, topic going away)."""
        if self.role is Role.NONE:
            return
        log.info("%s: no longer %s (%s)", self.name, self.role.value, reason)
        self.role, self.leader_state = Role.NONE, None
        self.leader_id = NO_LEADER
        self.fail_waiting(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    # -- checks ------------------------------------------------------------------------------------

    def check_leader(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_id} is not the leader of {self.name}"
                + (f" (broker {self.leader_id} is)" if self.leader_id >= 0 else "") + ": refresh metadata")

    def check_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's leader-epoch check of Fetch, ListOffsets and OffsetForLeaderEpoch (-1: no check)."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.name}: leader epoch {current_leader_epoch} is older than the current {self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"{self.name}: leader epoch {current_leader_epoch} is newer than this broker's {self.leader_epoch}")

    # -- appends (leader) --------------------------------------------------------------------------

    def append_as_leader(self, records: bytes | bytearray | memoryview, *, required_acks: int = 1) -> AppendInfo:
        """Validate and append a client's record set; acks=all is refused first if the ISR is too small."""
        self.check_leader()
        lg = self.log
        if not self.replicated:
            info = lg.append(records)
            lg.update_high_watermark(lg.next_offset)
            return info
        if required_acks == -1:
            self._check_min_isr()
        info = lg.append(records, leader_epoch=self.leader_epoch)
        self.after_leader_append()
        return info

    def append_marker_as_leader(self, producer_id: int, producer_epoch: int, commit: bool,
                                coordinator_epoch: int) -> AppendInfo:
        self.check_leader()
        lg = self.log
        info = lg.append_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                                leader_epoch=self.leader_epoch if self.replicated else None)
        if self.replicated:
            self.after_leader_append()
        else:
            lg.update_high_watermark(lg.next_offset)
        return info

    def after_leader_append(self) -> None:
        if self.leader_state is not None:
            self._maybe_advance_hw(self.leader_state.on_local_append(self.log.next_offset))

    def _check_min_isr(self) -> None:
        min_isr = self.log.config.min_insync_replicas
        if len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"{self.name}: the in-sync replicas {list(self.isr)} are fewer than min.insync.replicas={min_isr}; "
                "acks=all writes are refused until enough replicas have caught up")

    # -- waiting for replication -------------------------------------------------------------------

    def wait_for_offset(self, required_offset: int) -> asyncio.Future[ErrorCode]:
        """A future answered once the high watermark reaches ``required_offset`` (see the invariants)."""
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        if self.role is not Role.LEADER:
            fut.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif self.log.high_watermark >= required_offset:
            fut.set_result(self._completion_code())
        else:
            heapq.heappush(self._waiting, (required_offset, next(_seq), fut))
        return fut

    def _completion_code(self) -> ErrorCode:
        if self.replicated and len(self.isr) < self.log.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _maybe_advance_hw(self, new_hw: int | None) -> bool:
        if new_hw is None or new_hw <= self.log.high_watermark:
            return False
        self.log.update_high_watermark(new_hw)
        hw = self.log.high_watermark
        while self._waiting and self._waiting[0][0] <= hw:
            _, _, fut = heapq.heappop(self._waiting)
            if not fut.done():
                fut.set_result(self._completion_code())
        return True

    def fail_waiting(self, code: ErrorCode) -> None:
        waiting, self._waiting = self._waiting, []
        for _, _, fut in waiting:
            if not fut.done():
                fut.set_result(code)

    # -- replicating (follower) --------------------------------------------------------------------

    def append_as_follower(self, records: bytes | memoryview | None, leader_hw: int, leader_log_start: int) -> bool:
        """Append the leader's batches as they are (offsets and epochs kept); follow its high watermark
        (never past our own log end) and its log start. True if anything was appended."""
        lg = self.log
        appended = False
        if records:
            lg.append(records, from_client=False, assign_offsets=False)
            appended = True
        new_hw = min(leader_hw, lg.next_offset)
        if new_hw > lg.high_watermark:
            lg.update_high_watermark(new_hw)
        if leader_log_start > lg.log_start_offset:
            lg.delete_records_before(min(leader_log_start, lg.high_watermark))
        return appended

    def truncate_to(self, offset: int, reason: str) -> None:
        """Cut the log at ``offset`` (a follower whose tail diverges from its leader's, KIP-101/279)."""
        lg = self.log
        if offset >= lg.next_offset:  # no record to cut; an epoch that starts at the end may still go
            latest = lg.leader_epochs.latest_epoch
            lg.truncate_to(offset)
            if lg.leader_epochs.latest_epoch != latest:
                log.info("%s: dropping leader epoch %s, which starts at the log end %d and holds nothing (%s)",
                         self.name, latest, lg.next_offset, reason)
            return
        log.info("%s: truncating from %d to %d (%s)", self.name, lg.next_offset, offset, reason)
        lg.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int, reason: str) -> None:
        log.info("%s: replacing the whole log (was [%d, %d)) with an empty one at %d (%s)", self.name,
                 self.log.log_start_offset, self.log.next_offset, offset, reason)
        self.log.truncate_fully_and_start_at(offset)

    # -- followers' fetches (leader) ---------------------------------------------------------------

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int, now_ms: int,
                          broker_epoch: int = -1) -> tuple[bool, tuple[int, ...] | None]:
        """Record a follower's position; (high watermark moved, ISR to propose or None)."""
        ls = self.leader_state
        if ls is None:
            raise NotLeaderOrFollowerError(f"broker {self.local_id} is not the leader of {self.name}")
        update = ls.on_follower_fetch(replica_id, fetch_offset, log_start_offset, now_ms, self.log.next_offset,
                                      broker_epoch)
        moved = self._maybe_advance_hw(update.new_hw)
        return moved, update.expand_to

    def shrink_candidates(self, now_ms: int, lag_time_max_ms: int) -> tuple[int, ...]:
        ls = self.leader_state
        if ls is None or ls.pending is not None:
            return ()
        return ls.shrink_candidates(now_ms, lag_time_max_ms)

    def isr_committed(self, state: LeaderAndIsr) -> bool:
        """ZooKeeper accepted the ISR change; True if the high watermark moved."""
        self.state = state
        if self.leader_state is None:
            return False
        new_hw = self.leader_state.isr_committed(state.isr)
        if new_hw is None:
            new_hw = self.leader_state.compute_high_watermark()
        return self._maybe_advance_hw(new_hw)

    def isr_failed(self) -> bool:
        """The ISR change was not written; True if the high watermark moved (an abandoned expansion)."""
        if self.leader_state is None:
            return False
        return self._maybe_advance_hw(self.leader_state.isr_failed())


