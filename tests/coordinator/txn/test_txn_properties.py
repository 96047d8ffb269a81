"""Random interleavings of producers' requests, failed appends, marker completions, time, restarts and
compaction of ``__transaction_state``: the coordinator never answers a ticket twice or leaves one unanswered,
never leaves a prepared transaction without markers on their way, and its durable state is always exactly what
replaying the bytes it wrote gives, compacted or not."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator.txn.config import TxnConfig
from odradek.coordinator.txn.model import TxnState, completion_of
from odradek.coordinator.txn.records import decode_record
from odradek.protocol.errors import ErrorCode
from tests.coordinator.txn.harness import Harness, durable

E = ErrorCode
S = TxnState
TIDS = ("a", "b", "c")
KINDS = (("init",) * 3 + ("init_kip360",) + ("add",) * 4 + ("add_offsets",) + ("commit",) * 3 + ("abort",) * 2
         + ("verify",) + ("markers",) * 3 + ("advance",) * 2 + ("fail_on", "fail_off", "fail_off", "restart")
         + ("compact",))
action = st.tuples(st.sampled_from(KINDS), st.sampled_from(TIDS), st.integers(0, 3), st.booleans())
CONFIG = TxnConfig(max_timeout_ms=5000, transactional_id_expiration_ms=3000, abort_timed_out_interval_ms=100,
                   remove_expired_interval_ms=500, num_partitions=2)


def _check(h: Harness, issued: set[int]) -> None:
    assert durable(h.rebuilt()) == durable(h.coord)
    # every request is answered once its append resolved (no transaction version 1 reply waits for markers)
    assert all(t in h.replies for t in issued)
    queued = {(m.transactional_id, m.producer_id, m.producer_epoch) for m in h.markers}
    for tid, meta in h.coord.txns.items():
        if meta.state.is_prepare:
            assert h.coord.pending.get(tid) is completion_of(meta.state)
            assert (tid, meta.producer_id, meta.producer_epoch) in queued or tid in h.coord.markers_done
        else:
            assert tid not in h.coord.pending  # appends resolve synchronously here
        assert meta.state not in (S.DEAD, S.PREPARE_EPOCH_FENCE)
        assert meta.state is not S.EMPTY or not meta.partitions


@settings(max_examples=250, deadline=None)
@given(st.lists(action, min_size=10, max_size=60))
def test_random_interleavings(actions: list[tuple[str, str, int, bool]]) -> None:
    h = Harness(CONFIG, partitions=2)
    known: dict[str, tuple[int, int]] = {}  # tid -> (producer id, epoch) the client last got
    issued: set[int] = set()
    for kind, tid, n, flag in actions:
        pid, epoch = known.get(tid, (1000, 0))
        if flag and n == 0 and kind not in ("init", "init_kip360"):
            epoch -= 1  # sometimes a stale (fenced) producer
        if kind in ("init", "init_kip360"):
            kip360 = kind == "init_kip360" and tid in known
            t = h.call("init_producer_id", tid, 300 + 300 * n, *(known[tid] if kip360 else (-1, -1)))
            issued.add(t)
            r = h.reply(t)
            if r is not None and r.error is E.NONE:
                known[tid] = (r.producer_id, r.producer_epoch)
        elif kind == "add":
            issued.add(h.call("add_partitions", tid, pid, epoch, [("t", n), ("u", n % 2)]))
        elif kind == "add_offsets":
            issued.add(h.call("add_offsets", tid, pid, epoch, "g", n))
        elif kind in ("commit", "abort"):
            issued.add(h.call("end_txn", tid, pid, epoch, kind == "commit"))
        elif kind == "verify":
            result = h.coord.verify_partitions(tid, pid, epoch, [("t", n)])
            assert set(result) == {("t", n)}
        elif kind == "markers":
            h.write_markers()
        elif kind == "advance":
            h.advance(700 if flag else 60 * (n + 1))
        elif kind == "fail_on":
            h.fail_writes = E.KAFKA_STORAGE_ERROR if flag else E.REQUEST_TIMED_OUT
        elif kind == "fail_off":
            h.fail_writes = None
        elif kind == "compact":  # flag: the tombstones' delete horizon has passed
            h.compact(horizon_passed=flag)
        elif kind == "restart":
            h.coord = fresh = h.rebuilt()
            h.markers.clear()  # markers in flight die with the broker; the load starts them again
            for p in range(fresh.num_partitions):
                fresh.begin_load(p)
                for kb, vb in h.log.get(p, []):
                    decoded = decode_record(kb, vb)
                    assert decoded is not None
                    fresh.replay(*decoded)
                h.apply(fresh.finish_load(p, h.now))
        _check(h, issued)
    # once appends succeed and markers are written, no transaction stays prepared
    h.fail_writes = None
    for _ in range(3):
        h.advance(100)
        h.write_markers()
    assert not any(m.state.is_prepare for m in h.coord.txns.values())
    _check(h, issued)
