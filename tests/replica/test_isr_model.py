"""A model-based property test of the leader's ISR and high-watermark bookkeeping.

A hypothesis ``RuleBasedStateMachine`` drives one ``LeaderReplicaState`` through random local appends,
follower fetches (each follower's log only grows, never past the leader's end), time passing, shrink and
arbitrary ISR proposals, ZooKeeper confirming or refusing them, and re-elections by the controller. The model
keeps each replica's *true* log end and checks, after every step:

- the HW never decreases, lies within the leader's log, and is exactly as high as the plain ISR rule allows;
- every member of the effective ISR holds everything below the HW, and every known log end agrees;
- the leader is always in the committed, proposed and maximal ISR;
- durability: whenever the HW moved, the committed ISR of that moment is remembered, and every one of its
  members still holds every record below that HW (no acknowledged acks=all write is missing from any
  ISR member);
- shrink candidates and expansion offers are exactly those Kafka's rules name.
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from odradek.replica.isr import IsrChangeError, LeaderReplicaState, PendingIsr

LAG = 10_000
START_MS = 1_700_000_000_000
REPLICAS = (0, 1, 2, 3)
NEVER = -1


class IsrMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = START_MS
        self.epoch = 0
        # Model of each follower as the leader should see it (Kafka's ReplicaState).
        self.reported: dict[int, int] = {}
        self.last_fetch: dict[int, int] = {}
        self.last_fetch_leader_end: dict[int, int] = {}
        self.last_caught_up: dict[int, int] = {}
        # What each replica really holds; the leader's entry is its log end.
        self.true_end: dict[int, int] = {}
        self.acked: list[tuple[int, frozenset[int]]] = []

    # -- setup -----------------------------------------------------------------------------------

    @initialize(data=st.data())
    def start_leading(self, data: st.DataObject) -> None:
        self.leader = data.draw(st.sampled_from(REPLICAS), label="leader")
        followers = [r for r in REPLICAS if r != self.leader]
        in_isr = data.draw(st.lists(st.sampled_from(followers), unique=True), label="followers in the ISR")
        self.isr: tuple[int, ...] = (self.leader, *in_isr)
        self.pending: PendingIsr | None = None
        self.leader_end = data.draw(st.integers(0, 50), label="leader log end")
        hw = data.draw(st.integers(0, self.leader_end), label="checkpointed HW")
        self.epoch_start = data.draw(st.integers(0, self.leader_end), label="epoch start")
        self.epoch = data.draw(st.integers(0, 5), label="leader epoch")
        self.true_end[self.leader] = self.leader_end
        for r in followers:
            # ISR members held everything committed under the previous leader; nobody holds more than
            # the new leader (the model does not truncate followers).
            low = hw if r in self.isr else 0
            self.true_end[r] = data.draw(st.integers(low, self.leader_end), label=f"true end of {r}")
            self.reported[r] = NEVER
            self.last_fetch[r] = NEVER
            self.last_fetch_leader_end[r] = NEVER
            self.last_caught_up[r] = self.now if r in self.isr else NEVER
        self.sut = LeaderReplicaState(
            self.leader,
            self.epoch,
            self.isr,
            REPLICAS,
            self.leader_end,
            hw,
            self.now,
            epoch_start_offset=self.epoch_start,
        )
        self.hw = hw
        self._note_hw()

    # -- helpers ---------------------------------------------------------------------------------

    def _effective(self) -> tuple[int, ...]:
        return self.pending.maximal if self.pending is not None else self.isr

    def _expected_hw(self) -> int:
        ends = [self.leader_end] + [self.reported[r] for r in self._effective() if r != self.leader]
        return max(self.hw, min(ends))

    def _note_hw(self) -> None:
        """Check the SUT's HW against the rule and remember who had to hold the records below it."""
        expected = self._expected_hw()
        assert self.sut.high_watermark == expected, (self.sut, expected)
        if expected != self.hw or not self.acked:
            if self.acked:
                event("HW moved")
            self.acked.append((expected, frozenset(self.isr)))
        self.hw = expected

    def _may_join(self, r: int) -> bool:
        end = self.reported[r]
        return end != NEVER and end >= self.hw and end >= self.epoch_start

    def _subset_with_leader(self, data: st.DataObject, pool: tuple[int, ...], label: str) -> tuple[int, ...]:
        others = [r for r in pool if r != self.leader]
        chosen = data.draw(st.lists(st.sampled_from(others), unique=True) if others else st.just([]), label=label)
        return (self.leader, *chosen)

    # -- the leader's log ------------------------------------------------------------------------

    @rule(n=st.integers(1, 20))
    def append(self, n: int) -> None:
        self.leader_end += n
        self.true_end[self.leader] = self.leader_end
        moved = self.sut.on_local_append(self.leader_end)
        assert moved == (None if self._expected_hw() == self.hw else self._expected_hw())
        self._note_hw()

    @rule(ms=st.integers(0, 2 * LAG))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    # -- followers -------------------------------------------------------------------------------

    @rule(data=st.data())
    def follower_fetches(self, data: st.DataObject) -> None:
        r = data.draw(st.sampled_from([x for x in REPLICAS if x != self.leader]), label="follower")
        offset = data.draw(st.integers(self.true_end[r], self.leader_end), label="fetch offset")
        if offset == self.leader_end:
            event("fetch at the leader's end")
        self.true_end[r] = offset
        # Kafka's caught-up rule, applied to the model.
        if offset >= self.leader_end:
            self.last_caught_up[r] = max(self.last_caught_up[r], self.now)
        elif offset >= self.last_fetch_leader_end[r]:
            self.last_caught_up[r] = max(self.last_caught_up[r], self.last_fetch[r])
        self.last_fetch_leader_end[r] = max(self.last_fetch_leader_end[r], self.leader_end)
        self.last_fetch[r] = self.now
        self.reported[r] = offset

        update = self.sut.on_follower_fetch(r, offset, 0, self.now, self.leader_end)

        offered = self.pending is None and r not in self.isr and self._may_join(r)
        assert update.expand_to == ((*self.isr, r) if offered else None)
        expected = self._expected_hw()
        assert update.new_hw == (None if expected == self.hw else expected)
        self._note_hw()
        if offered:
            event("expansion offered")
            if data.draw(st.booleans(), label="propose the expansion"):
                self._propose(update.expand_to)

    # -- ISR changes -----------------------------------------------------------------------------

    def _propose(self, new_isr: tuple[int, ...]) -> None:
        valid = (
            self.pending is None
            and set(new_isr) != set(self.isr)
            and all(r in self.isr or self._may_join(r) for r in new_isr)
        )
        if not valid:
            try:
                self.sut.propose_isr(new_isr)
            except IsrChangeError:
                event("proposal refused")
                return
            raise AssertionError(f"proposal {new_isr} should have been refused by {self.sut}")
        pending = self.sut.propose_isr(new_isr)
        maximal = (*self.isr, *(r for r in new_isr if r not in self.isr))
        assert pending == PendingIsr(proposed=new_isr, maximal=maximal)
        self.pending = pending
        event("proposal accepted")
        self._note_hw()

    @rule()
    def shrink(self) -> None:
        candidates = self.sut.shrink_candidates(self.now, LAG)
        if self.pending is not None:
            assert candidates == ()
            return
        expected = tuple(
            r
            for r in self.isr
            if r != self.leader
            and self.reported[r] != self.leader_end
            and (self.last_caught_up[r] == NEVER or self.now - self.last_caught_up[r] > LAG)
        )
        assert candidates == expected, (candidates, expected, self.sut.follower_states())
        if candidates:
            event("shrink proposed")
            self._propose(tuple(r for r in self.isr if r not in candidates))

    @rule(data=st.data())
    def propose_anything(self, data: st.DataObject) -> None:
        self._propose(self._subset_with_leader(data, REPLICAS, "proposed ISR"))

    @precondition(lambda self: self.pending is not None)
    @rule(data=st.data())
    def zookeeper_confirms(self, data: st.DataObject) -> None:
        assert self.pending is not None
        outsiders = [r for r in REPLICAS if r not in self.pending.maximal]
        if outsiders and data.draw(st.booleans(), label="try an ISR beyond the maximal one"):
            bogus = (*self.pending.proposed, data.draw(st.sampled_from(outsiders), label="outsider"))
            try:
                self.sut.isr_committed(bogus)
            except IsrChangeError:
                event("commit beyond the maximal ISR refused")
            else:
                raise AssertionError(f"{bogus} lies beyond the maximal ISR {self.pending.maximal} yet was accepted")
        if data.draw(st.booleans(), label="as proposed"):
            isr = self.pending.proposed
        else:  # the controller may settle on another ISR within the maximal one
            isr = self._subset_with_leader(data, self.pending.maximal, "confirmed ISR")
        moved = self.sut.isr_committed(isr)
        self.isr, self.pending = isr, None
        expected = self._expected_hw()
        assert moved == (None if expected == self.hw else expected)
        self._note_hw()

    @precondition(lambda self: self.pending is not None)
    @rule()
    def zookeeper_refuses(self) -> None:
        moved = self.sut.isr_failed()
        self.pending = None
        expected = self._expected_hw()
        assert moved == (None if expected == self.hw else expected)
        self._note_hw()

    @rule(data=st.data())
    def controller_reelects(self, data: st.DataObject) -> None:
        # The controller resends this broker's leadership with a new epoch and the ISR it holds: the committed
        # one, or the pending proposal if that write reached ZooKeeper but its answer was lost.
        isr = self.pending.proposed if self.pending is not None and data.draw(st.booleans()) else self.isr
        self.epoch += 1
        self.sut.update_assignment(isr, REPLICAS, leader_epoch=self.epoch, now_ms=self.now)
        self.isr, self.pending, self.epoch_start = isr, None, self.leader_end
        for r in REPLICAS:
            if r == self.leader:
                continue
            self.last_fetch_leader_end[r] = self.leader_end
            self.last_fetch[r] = self.now if r in isr else NEVER
            self.last_caught_up[r] = self.now if r in isr else NEVER
        self._note_hw()

    @rule(data=st.data())
    def controller_resends_the_same_epoch(self, data: st.DataObject) -> None:
        # Same epoch (e.g. a reassignment step): the ISR is replaced, timing and epoch start stay.
        isr = self.pending.proposed if self.pending is not None and data.draw(st.booleans()) else self.isr
        self.sut.update_assignment(isr, REPLICAS)
        self.isr, self.pending = isr, None
        self._note_hw()

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def isr_and_pending_agree_with_the_model(self) -> None:
        assert self.sut.isr == self.isr
        assert self.sut.pending == self.pending
        assert self.sut.effective_isr() == self._effective()
        assert self.leader in self.sut.isr and self.leader in self.sut.effective_isr()
        if self.pending is not None:
            assert self.leader in self.pending.proposed
            assert set(self.pending.maximal) == set(self.isr) | set(self.pending.proposed)

    @invariant()
    def hw_is_monotonic_and_within_the_leaders_log(self) -> None:
        hw = self.sut.high_watermark
        assert hw == self.hw  # _note_hw already required it never to go below the previous value
        assert 0 <= hw <= self.leader_end
        assert self.sut.compute_high_watermark() == hw
        assert all(earlier <= later for (earlier, _), (later, _) in zip(self.acked, self.acked[1:], strict=False))

    @invariant()
    def effective_isr_holds_everything_below_the_hw(self) -> None:
        hw = self.sut.high_watermark
        for r in self.sut.effective_isr():
            assert self.true_end[r] >= hw, f"replica {r} holds {self.true_end[r]} records, HW is {hw}"
        for state in self.sut.follower_states():
            assert state.log_end_offset == self.reported[state.replica_id]
            assert state.last_caught_up_ms == self.last_caught_up[state.replica_id]
            if state.replica_id in self.sut.effective_isr() and state.log_end_offset != NEVER:
                assert state.log_end_offset >= hw

    @invariant()
    def no_acknowledged_write_is_missing_from_an_isr_member(self) -> None:
        for hw, isr in self.acked:
            for r in isr:
                assert self.true_end[r] >= hw, f"record {hw - 1} acknowledged with ISR {set(isr)} is not on {r}"
        # The committed ISR of now holds everything acknowledged so far, too.
        for r in self.isr:
            assert self.true_end[r] >= self.hw


IsrMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestIsrModel = IsrMachine.TestCase
