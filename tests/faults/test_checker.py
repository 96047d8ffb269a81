"""Unit tests for the fault suite's history checker (tests/faults/checker.py): hand-made histories,
one per anomaly kind, and a property test over randomly generated consistent histories."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.faults.checker import (
    History,
    Isolation,
    Outcome,
    Read,
    Report,
    Send,
    Txn,
    check,
    unavailable_windows,
)


def ok(producer: str, seq: int, partition: int, offset: int, t: float = 0.0, txn: str | None = None) -> Send:
    return Send(producer, seq, f"{producer}-{seq}".encode(), partition, "ok", offset, t, t + 0.01, txn)


def fail(producer: str, seq: int, t: float = 0.0, txn: str | None = None) -> Send:
    return Send(producer, seq, f"{producer}-{seq}".encode(), None, "fail", None, t, t + 0.01, txn)


def timeout(producer: str, seq: int, t: float = 0.0, txn: str | None = None) -> Send:
    return Send(producer, seq, f"{producer}-{seq}".encode(), None, "timeout", None, t, t + 0.01, txn)


def rd(s: Send, consumer: str = "c0", isolation: Isolation = "read_uncommitted", at: float = 1.0) -> Read:
    assert s.partition is not None and s.offset is not None
    return Read(consumer, s.partition, s.offset, s.value, at, isolation)


def final_of(*sends: Send) -> dict[int, list[tuple[int, bytes]]]:
    """``final`` holding exactly the given ok sends at their acked positions."""
    out: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for s in sends:
        assert s.partition is not None and s.offset is not None
        out[s.partition].append((s.offset, s.value))
    return {p: sorted(v) for p, v in out.items()}


def only(report: Report, *kinds: str) -> None:
    """Exactly the given anomaly kinds were reported (and the report renders)."""
    found = {k for k, n in report.anomaly_counts.items() if n}
    assert found == set(kinds), report.summary()
    assert report.ok is (not kinds)
    json.dumps(report.as_dict())
    report.summary()


def clean_history() -> tuple[History, list[Send]]:
    sends = [ok("a", 0, 0, 0, 0.0), ok("b", 0, 1, 0, 0.1), ok("a", 1, 0, 1, 0.2), ok("b", 1, 1, 1, 0.3)]
    return History(sends, [rd(s) for s in sends], [], final_of(*sends)), sends


def test_clean_history_passes() -> None:
    h, _ = clean_history()
    r = check(h)
    only(r)
    assert r.info["sends_ok"] == 4 and r.info["reads"] == 4 and r.info["final_records"] == 4
    assert r.info["final_partitions"] == 2 and r.info["final_unknown_values"] == 0
    assert r.unavailable == []
    assert r.summary().startswith("history check: OK")


def test_empty_history_passes() -> None:
    r = check(History([], [], [], {}))
    only(r)
    assert r.unavailable == []


def test_lost() -> None:
    sends = [ok("a", 0, 0, 0), ok("a", 1, 0, 1), ok("a", 2, 0, 2)]
    r = check(History(sends, [], [], final_of(sends[0], sends[2])))
    only(r, "lost")
    (lost,) = r.lost
    assert (lost.value, lost.producer, lost.seq, lost.partition, lost.offset) == (b"a-1", "a", 1, 0, 1)
    assert "absent from final" in r.summary()


def test_an_ok_without_offset_must_be_present_once_in_its_partition() -> None:
    known = ok("a", 0, 0, 0)
    unknown = Send("a", 1, b"a-1", 0, "ok", None, 0.1, 0.2)  # librdkafka: persisted, offset not known
    there = {0: [(0, known.value), (1, unknown.value)]}
    only(check(History([known, unknown], [], [], there)))
    only(check(History([known, unknown], [], [], {0: [(0, known.value)]})), "lost")
    only(check(History([known, unknown], [], [], {0: [(0, known.value), (1, b"a-1"), (2, b"a-1")]})), "duplicated")
    only(check(History([known, unknown], [], [], {0: [(0, known.value)], 1: [(0, b"a-1")]})), "moved")
    only(check(History([known, unknown], [], [], {0: [(0, b"a-1"), (1, known.value)]})), "moved", "order")


def test_moved_is_not_lost() -> None:
    sends = [ok("a", 0, 0, 0), ok("a", 1, 0, 1)]
    final = {0: [(0, b"a-0")], 1: [(0, b"a-1")]}
    r = check(History(sends, [], [], final))
    only(r, "moved")
    (m,) = r.moved
    assert (m.value, m.partition, m.offset, m.found) == (b"a-1", 0, 1, ((1, 0),))


def test_duplicated() -> None:
    sends = [ok("a", 0, 0, 0), ok("a", 1, 0, 1)]
    final = {0: [(0, b"a-0"), (1, b"a-1")], 1: [(0, b"a-0")]}
    r = check(History(sends, [], [], final))
    only(r, "duplicated")
    (d,) = r.duplicated
    assert (d.value, d.producer, d.found) == (b"a-0", "a", ((0, 0), (1, 0)))


def test_duplicated_within_a_partition_is_not_also_an_order_violation() -> None:
    sends = [ok("a", 0, 0, 0), ok("a", 1, 0, 1)]
    final = {0: [(0, b"a-0"), (1, b"a-1"), (2, b"a-0")]}
    only(check(History(sends, [], [], final)), "duplicated")


def test_duplicate_copy_elsewhere_is_not_an_order_violation() -> None:
    """The order check uses the copy at the acked position; the stray copy is only a duplicate."""
    sends = [ok("a", 0, 1, 0), ok("a", 1, 0, 0), ok("a", 2, 0, 1)]
    final = {0: [(0, b"a-1"), (1, b"a-2"), (2, b"a-0")], 1: [(0, b"a-0")]}
    r = check(History(sends, [], [], final))
    only(r, "duplicated")
    assert r.duplicated[0].found == ((0, 2), (1, 0))


def test_vanished_read_then_lost() -> None:
    sends = [ok("a", 0, 0, 0), ok("a", 1, 0, 1)]
    reads = [rd(sends[0]), rd(sends[1], consumer="c1", at=2.5)]
    r = check(History(sends, reads, [], final_of(sends[0])))
    only(r, "lost", "vanished")
    (v,) = r.vanished
    assert (v.value, v.consumer, v.partition, v.offset, v.at_s, v.now, v.found) == (b"a-1", "c1", 0, 1, 2.5, None, ())


def test_vanished_offset_reused_by_another_value() -> None:
    """Jepsen's inconsistent offsets: a consumer saw x at 0:1, final has y there."""
    x = ok("a", 0, 0, 1)
    y = timeout("b", 0)
    reads = [Read("c0", 0, 1, x.value, 1.0, "read_uncommitted")]
    r = check(History([x, y], reads, [], {0: [(1, y.value)]}))
    only(r, "lost", "vanished")
    assert r.vanished[0].now == y.value
    assert r.info["timeouts_present"] == 1


def test_vanished_unacked_value() -> None:
    """A timed-out send a consumer saw must stay where it was seen."""
    t = timeout("a", 0)
    r = check(History([t], [Read("c0", 0, 5, t.value, 1.0, "read_committed")], [], {}))
    only(r, "vanished")


def test_order_violation_in_acks() -> None:
    sends = [ok("a", 0, 0, 0), ok("a", 1, 0, 2), ok("a", 2, 0, 1), ok("b", 0, 0, 3)]
    final = {0: [(0, b"a-0"), (1, b"a-2"), (2, b"a-1"), (3, b"b-0")]}
    r = check(History(sends, [], [], final))
    only(r, "order")
    kinds = sorted((o.where, o.prev_seq, o.next_seq) for o in r.order)
    assert kinds == [("ack", 1, 2), ("final", 2, 1)]


def test_order_violation_in_final_only() -> None:
    """Acks in order, but in final an earlier timed-out send landed after a later acked one."""
    sends = [ok("a", 0, 0, 0), ok("a", 1, 0, 1), timeout("a", 2), ok("a", 3, 0, 2)]
    final = {0: [(0, b"a-0"), (1, b"a-1"), (2, b"a-3"), (3, b"a-2")]}
    r = check(History(sends, [], [], final))
    only(r, "order")
    (o,) = r.order
    assert (o.where, o.producer, o.partition, o.prev_seq, o.prev_offset, o.next_seq, o.next_offset) == (
        "final",
        "a",
        0,
        3,
        2,
        2,
        3,
    )


def test_order_is_per_producer_and_partition() -> None:
    """Interleaving between producers, and across partitions, is fine."""
    sends = [ok("a", 0, 0, 1), ok("b", 0, 0, 0), ok("a", 1, 1, 0), ok("a", 2, 0, 2)]
    only(check(History(sends, [], [], final_of(*sends))))


def test_failed_present() -> None:
    good = ok("a", 0, 0, 0)
    bad = fail("a", 1)
    r = check(History([good, bad], [], [], {0: [(0, good.value), (1, bad.value)]}))
    only(r, "failed_present")
    (f,) = r.failed_present
    assert (f.value, f.reason, f.found) == (b"a-1", "failed_send", ((0, 1),))


def test_failed_send_read_is_an_aborted_read() -> None:
    good = ok("a", 0, 0, 0)
    bad = fail("a", 1)
    reads = [Read("c0", 0, 1, bad.value, 1.0, "read_uncommitted")]
    r = check(History([good, bad], reads, [], final_of(good)))
    only(r, "aborted_reads")
    assert r.aborted_reads[0].reason == "failed_send"


def test_aborted_txn() -> None:
    """Aborted values: fine to read read_uncommitted, to be present in a read_uncommitted final or
    absent from it; an anomaly read read_committed."""
    sends = [ok("t", 0, 0, 0, txn="T1"), ok("t", 1, 1, 0, txn="T1"), ok("a", 0, 0, 1)]
    txns = [Txn("T1", "t", "aborted", frozenset({b"t-0", b"t-1"}))]
    ru_reads = [rd(s) for s in sends]
    only(check(History(sends, ru_reads, txns, final_of(*sends))))
    only(check(History(sends, ru_reads, txns, final_of(sends[2]))))
    only(check(History(sends, ru_reads, txns, final_of(sends[2]), "read_committed")))
    r = check(History(sends, [rd(sends[0], isolation="read_committed")], txns, final_of(*sends)))
    only(r, "aborted_reads")
    assert (r.aborted_reads[0].reason, r.aborted_reads[0].txn) == ("aborted_txn", "T1")


def test_aborted_txn_visible_in_read_committed_final() -> None:
    sends = [ok("t", 0, 0, 0, txn="T1"), ok("a", 0, 0, 1)]
    txns = [Txn("T1", "t", "aborted", frozenset({b"t-0"}))]
    r = check(History(sends, [], txns, final_of(*sends), "read_committed"))
    only(r, "failed_present")
    assert (r.failed_present[0].reason, r.failed_present[0].txn) == ("aborted_txn", "T1")


def test_committed_txn_complete_passes() -> None:
    sends = [ok("t", 0, 0, 0, txn="T1"), ok("t", 1, 1, 0, txn="T1")]
    txns = [Txn("T1", "t", "committed", frozenset({b"t-0", b"t-1"}))]
    reads = [rd(s, isolation="read_committed") for s in sends]
    only(check(History(sends, reads, txns, final_of(*sends), "read_committed")))


def test_committed_txn_missing_a_value() -> None:
    """A committed txn's value that was never acked individually (its send timed out) is lost."""
    sends = [ok("t", 0, 0, 0, txn="T1"), timeout("t", 1, txn="T1")]
    txns = [Txn("T1", "t", "committed", frozenset({b"t-0", b"t-1"}))]
    r = check(History(sends, [], txns, final_of(sends[0])))
    only(r, "lost")
    (lost,) = r.lost
    assert (lost.value, lost.txn, lost.partition, lost.offset) == (b"t-1", "T1", None, None)


def test_committed_txn_acked_value_lost_is_reported_once() -> None:
    sends = [ok("t", 0, 0, 0, txn="T1"), ok("t", 1, 1, 0, txn="T1")]
    txns = [Txn("T1", "t", "committed", frozenset({b"t-0", b"t-1"}))]
    r = check(History(sends, [], txns, final_of(sends[0])))
    only(r, "lost")
    assert [(x.value, x.partition, x.offset, x.txn) for x in r.lost] == [(b"t-1", 1, 0, "T1")]


def test_partial_unknown_txn_in_read_committed_final() -> None:
    sends = [ok("t", 0, 0, 0, txn="T1"), ok("t", 1, 1, 0, txn="T1"), ok("t", 2, 1, 1, txn="T1")]
    txns = [Txn("T1", "t", "unknown", frozenset({b"t-0", b"t-1", b"t-2"}))]
    r = check(History(sends, [], txns, final_of(sends[0]), "read_committed"))
    only(r, "partial_txns")
    (p,) = r.partial_txns
    assert (p.txn, p.present, p.missing) == ("T1", (b"t-0",), (b"t-1", b"t-2"))
    # all or none is fine
    only(check(History(sends, [], txns, final_of(*sends), "read_committed")))
    only(check(History(sends, [], txns, {}, "read_committed")))


def test_unknown_txn_proved_committed_by_a_read_committed_read() -> None:
    """With a read_uncommitted final, a partial unknown txn might just be aborted, unless a
    read_committed consumer saw it."""
    sends = [ok("t", 0, 0, 0, txn="T1"), timeout("t", 1, txn="T1")]
    txns = [Txn("T1", "t", "unknown", frozenset({b"t-0", b"t-1"}))]
    only(check(History(sends, [], txns, final_of(sends[0]))))
    r = check(History(sends, [rd(sends[0], isolation="read_committed")], txns, final_of(sends[0])))
    only(r, "partial_txns")
    assert r.partial_txns[0].missing == (b"t-1",)


def test_unknown_txn_read_uncommitted_then_gone_is_not_vanished() -> None:
    sends = [ok("t", 0, 0, 0, txn="T1")]
    txns = [Txn("T1", "t", "unknown", frozenset({b"t-0"}))]
    only(check(History(sends, [rd(sends[0])], txns, {}, "read_committed")))


def test_send_with_txn_but_no_txn_record_is_unknown() -> None:
    sends = [ok("t", 0, 0, 0, txn="T9"), ok("t", 1, 0, 1, txn="T9")]
    r = check(History(sends, [], [], final_of(sends[0]), "read_committed"))
    only(r, "partial_txns")
    assert r.info["txns_unknown"] == 1


def test_timeouts_present_once_are_fine_twice_duplicated() -> None:
    sends = [ok("a", 0, 0, 0), timeout("a", 1), timeout("a", 2), ok("a", 3, 0, 2)]
    once = {0: [(0, b"a-0"), (1, b"a-1"), (2, b"a-3")]}
    r = check(History(sends, [], [], once))
    only(r)
    assert (r.info["sends_timeout"], r.info["timeouts_present"], r.info["timeouts_absent"]) == (2, 1, 1)
    twice = {0: [(0, b"a-0"), (1, b"a-1"), (2, b"a-3")], 1: [(0, b"a-1")]}
    r = check(History(sends, [], [], twice))
    only(r, "duplicated")
    assert (r.duplicated[0].value, r.duplicated[0].outcome) == (b"a-1", "timeout")
    assert r.info["timeouts_present"] == 1


def test_unavailability_windows() -> None:
    def s(seq: int, start: float, end: float, outcome: Outcome = "ok") -> Send:
        acked = outcome == "ok"
        return Send("a", seq, b"%d" % seq, 0 if acked else None, outcome, seq if acked else None, start, end)

    sends = [
        s(0, 0.0, 0.5),
        s(1, 0.4, 1.0),
        s(2, 1.1, 4.0, "timeout"),
        s(3, 1.2, 3.5),  # gap 1.0 -> 3.5
        s(4, 3.6, 3.7),
        s(5, 3.8, 3.9, "fail"),
        s(6, 4.0, 4.2),
        s(7, 4.3, 9.0, "timeout"),  # trailing gap 4.2 -> 9.0
    ]
    assert unavailable_windows(sends, 1.0) == [(1.0, 3.5), (4.2, 9.0)]
    assert unavailable_windows(sends, 3.0) == [(4.2, 9.0)]
    assert unavailable_windows(sends, 10.0) == []
    # leading gap, and no ok sends at all
    assert unavailable_windows([s(0, 0.0, 5.0, "timeout"), s(1, 2.0, 6.0)], 1.0) == [(0.0, 6.0)]
    assert unavailable_windows([s(0, 0.0, 5.0, "timeout"), s(1, 2.0, 3.0)], 1.0) == [(0.0, 3.0), (3.0, 5.0)]
    assert unavailable_windows([s(0, 1.0, 3.0, "fail")], 1.0) == [(1.0, 3.0)]
    r = check(History(sends, [], [], {0: [(o, b"%d" % o) for o in (0, 1, 3, 4, 6)]}), unavailable_gap_s=1.0)
    only(r)
    assert r.unavailable == [(1.0, 3.5), (4.2, 9.0)]
    assert (r.info["sends_ok"], r.info["sends_fail"], r.info["sends_timeout"]) == (5, 1, 2)
    assert "2.500s" in r.summary() and "4.800s" in r.summary()


def test_summary_and_as_dict() -> None:
    sends = [ok("a", i, 0, i) for i in range(10)]
    r = check(History(sends, [], [], {0: [(0, b"a-0"), (1, b"\xff\x00")]}))
    assert not r.ok and len(r.lost) == 9
    text = r.summary(limit=3)
    assert text.startswith("history check: FAILED, 9 anomalies (lost 9)")
    assert "… and 6 more" in text
    d = json.loads(json.dumps(r.as_dict()))
    assert d["ok"] is False and d["anomaly_counts"]["lost"] == 9
    assert d["lost"][0] == {"value": "a-1", "producer": "a", "seq": 1, "partition": 0, "offset": 1, "txn": None}
    assert d["info"]["final_unknown_values"] == 1


def test_rejects_broken_histories() -> None:
    with pytest.raises(ValueError, match="sent twice"):
        check(History([ok("a", 0, 0, 0), ok("a", 0, 0, 1)], [], [], {}))
    with pytest.raises(ValueError, match="no acknowledged"):
        check(History([Send("a", 0, b"x", None, "ok", None, 0.0, 1.0)], [], [], {}))
    with pytest.raises(ValueError, match="belongs to"):
        txns = [Txn("A", "a", "committed", frozenset({b"x"})), Txn("B", "a", "aborted", frozenset({b"x"}))]
        check(History([], [], txns, {}))


# --------------------------------------------------------------------------------------------------
# Property: any consistent history passes; dropping one acked value is exactly one loss.


@st.composite
def consistent_histories(draw: st.DrawFn) -> History:
    n_producers = draw(st.integers(1, 4))
    n_partitions = draw(st.integers(1, 4))
    steps = draw(
        st.lists(
            st.tuples(
                st.integers(0, n_producers - 1),
                st.integers(0, n_partitions - 1),
                st.sampled_from(["ok", "ok", "ok", "fail", "timeout_in", "timeout_out"]),
                st.floats(0.0, 2.0),
                st.booleans(),
            ),
            min_size=1,
            max_size=60,
        )
    )
    next_offset = [draw(st.integers(0, 3)) for _ in range(n_partitions)]
    seqs = [0] * n_producers
    final: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(n_partitions)}
    sends: list[Send] = []
    reads: list[Read] = []
    t = 0.0
    for producer, partition, kind, dt, read_it in steps:
        seq = seqs[producer]
        seqs[producer] += 1
        value = f"p{producer}-{seq}".encode()
        start, t = t, t + dt
        if kind == "fail":
            sends.append(Send(f"p{producer}", seq, value, None, "fail", None, start, t))
            continue
        if kind == "timeout_out":
            sends.append(Send(f"p{producer}", seq, value, None, "timeout", None, start, t))
            continue
        offset = next_offset[partition]
        next_offset[partition] += draw(st.integers(1, 2))  # gaps, as control records leave
        final[partition].append((offset, value))
        if kind == "ok":
            sends.append(Send(f"p{producer}", seq, value, partition, "ok", offset, start, t))
        else:
            sends.append(Send(f"p{producer}", seq, value, None, "timeout", None, start, t))
        if read_it:
            reads.append(Read("c", partition, offset, value, t, "read_uncommitted"))
    return History(sends, reads, [], final)


@settings(max_examples=200, deadline=None)
@given(consistent_histories(), st.data())
def test_property_consistent_history_passes_and_any_drop_is_lost(h: History, data: st.DataObject) -> None:
    r = check(h)
    assert r.ok, r.summary()
    assert r.info["final_records"] == sum(len(v) for v in h.final.values())
    acked = [s for s in h.sends if s.outcome == "ok"]
    if not acked:
        return
    victim = data.draw(st.sampled_from(acked))
    assert victim.partition is not None
    final = {p: [rec for rec in recs if rec[1] != victim.value] for p, recs in h.final.items()}
    r = check(History(h.sends, h.reads, h.txns, final))
    assert [x.value for x in r.lost] == [victim.value], r.summary()
    assert (r.lost[0].partition, r.lost[0].offset) == (victim.partition, victim.offset)
    assert not (r.moved or r.duplicated or r.order or r.failed_present or r.aborted_reads or r.partial_txns)
    assert all(v.value == victim.value for v in r.vanished)
