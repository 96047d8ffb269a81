"""History checker for the partition-tolerance (Jepsen-style) fault suite: a pure function, no I/O.

The suite runs idempotent producers (``acks=all``) writing globally unique values, optionally
transactional producers, and consumers reading while faults are injected. It records every produce
attempt as the client saw it (:class:`Send`), every transaction's fate (:class:`Txn`), every record a
consumer saw (:class:`Read`), and finally, after healing, each partition read from the beginning
(``History.final``). :func:`check` compares these and returns a :class:`Report`.

Why these checks: Jepsen's Kafka analyses keep finding the same families of failure.

- Kafka (2013): acknowledged writes were lost when the in-sync replica set shrank to a lone leader
  that was then partitioned away and a lagging replica took over the partition.
- Redpanda (2022): under faults, acknowledged writes were lost or duplicated, one offset held
  different values at different times ("inconsistent offsets"), and read_committed consumers saw
  records of aborted transactions.
- Bufstream (2024): rare loss of acknowledged writes and transactional anomalies (aborted reads,
  writes leaking into the wrong transaction), several rooted in Kafka's own transaction protocol,
  plus long stalls in which clients made no progress.

What each check means (positions are ``partition:offset``):

``lost``
    A send acknowledged ``ok`` (outside a transaction, or in a committed one), or any value of a
    committed transaction, is absent from ``final``. ``acks=all`` promises durability once the
    client has the ack; a value missing after healing is the 2013 Kafka failure.
``moved``
    An ``ok`` value is in ``final`` but not at the acknowledged partition:offset. The client was told
    one position and the log says another, so some reader was (or will be) told a lie.
``duplicated``
    A value appears more than once in ``final`` (across all partitions). Idempotent producers must
    write each value at most once, even after retries of timed-out sends.
``vanished``
    A consumer read a value at partition:offset during the run and that position no longer holds
    that value in ``final``: either the record was read and then lost (truncated away after an
    unclean election), or the offset was reused by another value (Redpanda's inconsistent offsets).
    Values of aborted transactions are skipped (a broker may remove them, and read_committed reads
    of them are reported as ``aborted_reads``), as are values of transactions of unknown outcome
    read by read_uncommitted consumers unless that transaction is known to have committed, and
    values of failed sends (reported as ``aborted_reads``).
``order``
    Idempotent producers keep order within a partition. Per producer and partition, ``ok`` sends
    taken in ``seq`` order must have strictly increasing acknowledged offsets (``where="ack"``), and
    in ``final`` that producer's values must appear in ``seq`` order (``where="final"``, for every
    value whose send is known, whatever its outcome). Of a duplicated value only one copy counts
    (the one at its acknowledged position if any, else the first in partition:offset order), the
    rest being ``duplicated``; adjacent pairs are compared, so one displaced value yields one
    violation.
``failed_present``
    A send the client was definitely told failed is present in ``final`` (``reason="failed_send"``),
    or, when ``final`` was read read_committed, a value of an aborted transaction is present there
    (``reason="aborted_txn"``). Definite failures must mean "not written".
``aborted_reads``
    A read_committed consumer saw a value of an aborted transaction, or any consumer saw the value
    of a failed send.
``partial_txns``
    A transaction of unknown outcome that is known to have committed, yet not all of its values are
    in ``final``. It is known to have committed when a read_committed consumer saw one of its
    values, or when ``final`` was read read_committed and holds any of its values (so with a
    read_committed ``final`` this is simply "all or none"). With a read_uncommitted ``final`` and no
    such read, a partial unknown transaction is not flagged: an aborted transaction may legitimately
    have left some records in the log and not others.

Committed transactions' missing values are reported as ``lost`` (with ``txn`` set). Values of
aborted transactions, and of transactions of unknown outcome, are never ``lost``: they may be
absent. A send whose ``txn`` has no :class:`Txn` record counts as part of a transaction of unknown
outcome.

Information, not anomalies: sends by outcome, how many timed-out sends ended up present or absent
(a timed-out send may be either, but at most once, which ``duplicated`` covers), counts of
transactions, reads and final records, values in ``final`` that nobody sent, and the unavailability
windows: maximal intervals longer than ``unavailable_gap_s`` between the first send's start and the
last send's end in which no send completed ``ok``.

Everything is a dictionary lookup or a sort, so histories of a million sends check in seconds.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, ClassVar, Literal

Outcome = Literal["ok", "fail", "timeout"]
TxnOutcome = Literal["committed", "aborted", "unknown"]
Isolation = Literal["read_committed", "read_uncommitted"]
Pos = tuple[int, int]
"""A record's position: (partition, offset)."""


# --------------------------------------------------------------------------------------------------
# The history


@dataclass(frozen=True, slots=True)
class Send:
    """One produce attempt as the client saw it.

    ``seq`` orders a producer's sends as issued. For ``ok``, ``partition`` and ``offset`` are the
    acknowledged position; ``offset`` may be None when the client was told "written" without an offset
    (librdkafka infers that an earlier batch was persisted when a later one of the same idempotent producer
    succeeds): such a value must be present exactly once, anywhere in its partition. ``fail``: the client
    was told the value was definitely not written.
    ``timeout``: indeterminate. ``txn`` names the transaction the send belonged to, if any.
    """

    producer: str
    seq: int
    value: bytes
    partition: int | None
    outcome: Outcome
    offset: int | None
    start_s: float
    end_s: float
    txn: str | None = None


@dataclass(frozen=True, slots=True)
class Txn:
    """A transaction's values and its fate as its producer saw it."""

    txn: str
    producer: str
    outcome: TxnOutcome
    values: frozenset[bytes]


@dataclass(frozen=True, slots=True)
class Read:
    """A record a consumer saw during the run."""

    consumer: str
    partition: int
    offset: int
    value: bytes
    at_s: float
    isolation: Isolation


@dataclass(frozen=True, slots=True)
class History:
    """Everything the suite recorded. ``final`` maps partition to its (offset, value) records read
    from the beginning after healing, with isolation ``final_isolation``."""

    sends: list[Send]
    reads: list[Read]
    txns: list[Txn]
    final: dict[int, list[tuple[int, bytes]]]
    final_isolation: Isolation = "read_uncommitted"


# --------------------------------------------------------------------------------------------------
# Anomaly records


def _text(value: bytes, limit: int | None = None) -> str:
    """A value for humans and JSON: UTF-8 where it is, backslash escapes where not."""
    s = value.decode("utf-8", "backslashreplace")
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return s


def _v(value: bytes) -> str:
    return repr(_text(value, 48))


def _pos(pos: Pos | tuple[int | None, int | None]) -> str:
    return f"{pos[0]}:{pos[1]}"


def _where(found: Iterable[Pos]) -> str:
    found = list(found)
    return ", ".join(_pos(p) for p in found) if found else "nowhere"


def _from(producer: str | None, seq: int | None, txn: str | None) -> str:
    parts = []
    if producer is not None:
        parts.append(f"from {producer}")
    if seq is not None:
        parts.append(f"seq {seq}")
    if txn is not None:
        parts.append(f"txn {txn}")
    return " ".join(parts) if parts else "from unknown sender"


@dataclass(frozen=True, slots=True)
class Lost:
    """An acknowledged value (or a committed transaction's value) absent from ``final``.
    ``partition``/``offset`` are the acknowledged position, None if the value was never acked."""

    value: bytes
    producer: str | None
    seq: int | None
    partition: int | None
    offset: int | None
    txn: str | None = None

    def describe(self) -> str:
        acked = f"acked at {_pos((self.partition, self.offset))}" if self.partition is not None else "never acked"
        why = f"; txn {self.txn} committed" if self.txn is not None else ""
        return f"{_v(self.value)} {_from(self.producer, self.seq, None)} {acked}{why}; absent from final"


@dataclass(frozen=True, slots=True)
class Moved:
    """An acknowledged value present in ``final``, but not at its acknowledged position."""

    value: bytes
    producer: str
    seq: int
    partition: int
    offset: int | None
    found: tuple[Pos, ...]

    def describe(self) -> str:
        return (
            f"{_v(self.value)} {_from(self.producer, self.seq, None)} acked at "
            f"{_pos((self.partition, self.offset))}; found at {_where(self.found)}"
        )


@dataclass(frozen=True, slots=True)
class Duplicated:
    """A value appearing more than once in ``final``."""

    value: bytes
    producer: str | None
    seq: int | None
    outcome: Outcome | None
    found: tuple[Pos, ...]

    def describe(self) -> str:
        sent = f", send outcome {self.outcome}" if self.outcome is not None else ""
        copies = f"{len(self.found)} copies at {_where(self.found)}"
        return f"{_v(self.value)} {_from(self.producer, self.seq, None)}{sent}; {copies}"


@dataclass(frozen=True, slots=True)
class Vanished:
    """A value a consumer read at (partition, offset) that is no longer there in ``final``.
    ``now`` is what ``final`` holds at that position (None: nothing); ``found`` is where the value
    is now."""

    value: bytes
    consumer: str
    partition: int
    offset: int
    at_s: float
    isolation: Isolation
    now: bytes | None
    found: tuple[Pos, ...]

    def describe(self) -> str:
        now = f"now holds {_v(self.now)}" if self.now is not None else "now holds nothing"
        return (
            f"{_v(self.value)} read by {self.consumer} ({self.isolation}) at {_pos((self.partition, self.offset))} "
            f"t={self.at_s:.3f}s; {now}; value found at {_where(self.found)}"
        )


@dataclass(frozen=True, slots=True)
class OrderViolation:
    """Two of a producer's values on one partition out of order.

    ``where="ack"``: ``prev`` has the lower seq but was acked at an offset not below ``next``'s.
    ``where="final"``: ``prev`` is at the lower offset in ``final`` but has the higher seq.
    """

    where: Literal["ack", "final"]
    producer: str
    partition: int
    prev_seq: int
    prev_offset: int
    prev_value: bytes
    next_seq: int
    next_offset: int
    next_value: bytes

    def describe(self) -> str:
        if self.where == "ack":
            return (
                f"{self.producer} on partition {self.partition}: seq {self.prev_seq} ({_v(self.prev_value)}) acked at "
                f"offset {self.prev_offset}, later seq {self.next_seq} ({_v(self.next_value)}) acked at offset "
                f"{self.next_offset}"
            )
        return (
            f"{self.producer} on partition {self.partition}: final offset {self.prev_offset} holds seq {self.prev_seq} "
            f"({_v(self.prev_value)}), later offset {self.next_offset} holds earlier seq {self.next_seq} "
            f"({_v(self.next_value)})"
        )


@dataclass(frozen=True, slots=True)
class FailedPresent:
    """A value that must be absent from ``final`` but is present: a definitely failed send, or
    (read_committed ``final`` only) a value of an aborted transaction."""

    value: bytes
    producer: str | None
    seq: int | None
    txn: str | None
    reason: Literal["failed_send", "aborted_txn"]
    found: tuple[Pos, ...]

    def describe(self) -> str:
        why = "send failed definitely" if self.reason == "failed_send" else "txn aborted, final read_committed"
        return f"{_v(self.value)} {_from(self.producer, self.seq, self.txn)}: {why}; present at {_where(self.found)}"


@dataclass(frozen=True, slots=True)
class AbortedRead:
    """A consumer saw a value it must never see: a failed send's, or (read_committed) an aborted
    transaction's."""

    value: bytes
    consumer: str
    partition: int
    offset: int
    at_s: float
    isolation: Isolation
    reason: Literal["failed_send", "aborted_txn"]
    txn: str | None

    def describe(self) -> str:
        if self.reason == "failed_send":
            why = "value of a definitely failed send"
        else:
            why = f"value of aborted txn {self.txn}"
        return (
            f"{_v(self.value)} read by {self.consumer} ({self.isolation}) at {_pos((self.partition, self.offset))} "
            f"t={self.at_s:.3f}s: {why}"
        )


@dataclass(frozen=True, slots=True)
class PartialTxn:
    """A transaction of unknown outcome known to have committed (``evidence``) with some of its
    values missing from ``final``."""

    txn: str
    producer: str | None
    evidence: str
    present: tuple[bytes, ...]
    missing: tuple[bytes, ...]

    def describe(self) -> str:
        shown = ", ".join(_v(v) for v in self.missing[:5]) + (", …" if len(self.missing) > 5 else "")
        return (
            f"txn {self.txn} ({self.producer or 'unknown producer'}), outcome unknown but committed ({self.evidence}): "
            f"{len(self.present)} of {len(self.present) + len(self.missing)} values in final; missing {shown}"
        )


# --------------------------------------------------------------------------------------------------
# The report


def _jsonable(x: Any) -> Any:
    if isinstance(x, bytes):
        return _text(x)
    if isinstance(x, (list, tuple, set, frozenset)):
        return [_jsonable(i) for i in x]
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _jsonable(getattr(x, f.name)) for f in dataclasses.fields(x)}
    return x


@dataclass(frozen=True, slots=True)
class Report:
    """What :func:`check` found. Anomaly lists are in a deterministic order (by partition, offset or
    producer/seq as fits); ``info`` holds counts; ``unavailable`` the windows with no ``ok`` send."""

    ANOMALY_KINDS: ClassVar[tuple[str, ...]] = (
        "lost",
        "moved",
        "duplicated",
        "vanished",
        "order",
        "failed_present",
        "aborted_reads",
        "partial_txns",
    )

    lost: list[Lost] = field(default_factory=list)
    moved: list[Moved] = field(default_factory=list)
    duplicated: list[Duplicated] = field(default_factory=list)
    vanished: list[Vanished] = field(default_factory=list)
    order: list[OrderViolation] = field(default_factory=list)
    failed_present: list[FailedPresent] = field(default_factory=list)
    aborted_reads: list[AbortedRead] = field(default_factory=list)
    partial_txns: list[PartialTxn] = field(default_factory=list)
    info: dict[str, int] = field(default_factory=dict)
    unavailable: list[tuple[float, float]] = field(default_factory=list)
    unavailable_gap_s: float = 1.0

    @property
    def ok(self) -> bool:
        """True when no anomaly of any kind was found (info and unavailability do not count)."""
        return not any(getattr(self, kind) for kind in self.ANOMALY_KINDS)

    @property
    def anomaly_counts(self) -> dict[str, int]:
        return {kind: len(getattr(self, kind)) for kind in self.ANOMALY_KINDS}

    def summary(self, limit: int = 5) -> str:
        """Multi-line text: verdict, counts, the first ``limit`` anomalies of each kind, and the
        unavailability windows. Positions are partition:offset."""
        counts = self.anomaly_counts
        total = sum(counts.values())
        lines: list[str] = []
        if total == 0:
            lines.append("history check: OK, no anomalies")
        else:
            kinds = ", ".join(f"{k} {n}" for k, n in counts.items() if n)
            lines.append(f"history check: FAILED, {total} anomalies ({kinds})")
        i = self.info
        lines.append(
            f"sends: {i.get('sends', 0)} (ok {i.get('sends_ok', 0)}, fail {i.get('sends_fail', 0)}, "
            f"timeout {i.get('sends_timeout', 0)}: {i.get('timeouts_present', 0)} present, "
            f"{i.get('timeouts_absent', 0)} absent)"
        )
        lines.append(
            f"txns: {i.get('txns', 0)} (committed {i.get('txns_committed', 0)}, aborted {i.get('txns_aborted', 0)}, "
            f"unknown {i.get('txns_unknown', 0)}); reads: {i.get('reads', 0)}; final: {i.get('final_records', 0)} "
            f"records in {i.get('final_partitions', 0)} partitions"
            + (f", {i['final_unknown_values']} values nobody sent" if i.get("final_unknown_values") else "")
        )
        for kind, n in counts.items():
            if not n:
                continue
            lines.append(f"{kind} ({n}):")
            for rec in getattr(self, kind)[:limit]:
                lines.append(f"  - {rec.describe()}")
            if n > limit:
                lines.append(f"  … and {n - limit} more")
        if self.unavailable:
            spent = sum(b - a for a, b in self.unavailable)
            lines.append(
                f"unavailable (no ok send completed for > {self.unavailable_gap_s:g}s): "
                f"{len(self.unavailable)} windows, {spent:.3f}s in all"
            )
            for a, b in self.unavailable[:limit]:
                lines.append(f"  - {a:.3f}s to {b:.3f}s ({b - a:.3f}s)")
            if len(self.unavailable) > limit:
                lines.append(f"  … and {len(self.unavailable) - limit} more")
        else:
            lines.append(f"unavailable: no window longer than {self.unavailable_gap_s:g}s without an ok send")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able dict: values as text (UTF-8, undecodable bytes backslash-escaped), positions
        and windows as lists."""
        out: dict[str, Any] = {"ok": self.ok, "anomaly_counts": self.anomaly_counts}
        for kind in self.ANOMALY_KINDS:
            out[kind] = _jsonable(getattr(self, kind))
        out["info"] = dict(self.info)
        out["unavailable"] = [[a, b] for a, b in self.unavailable]
        out["unavailable_gap_s"] = self.unavailable_gap_s
        return out


# --------------------------------------------------------------------------------------------------
# The checker


class _Final:
    """``final`` indexed: where each value is, what each position holds."""

    __slots__ = ("at", "extra", "first", "ordered", "records")

    def __init__(self, final: dict[int, list[tuple[int, bytes]]]) -> None:
        self.first: dict[bytes, Pos] = {}
        self.extra: dict[bytes, list[Pos]] = {}
        self.at: dict[int, dict[int, bytes]] = {}
        self.ordered: dict[int, list[tuple[int, bytes]]] = {}
        self.records = 0
        for partition in sorted(final):
            records = sorted(final[partition], key=lambda r: r[0])
            self.ordered[partition] = records
            self.records += len(records)
            at = self.at[partition] = {}
            for offset, value in records:
                at.setdefault(offset, value)
                pos = (partition, offset)
                if value in self.first:
                    self.extra.setdefault(value, []).append(pos)
                else:
                    self.first[value] = pos

    def positions(self, value: bytes) -> tuple[Pos, ...]:
        first = self.first.get(value)
        if first is None:
            return ()
        more = self.extra.get(value)
        return (first, *more) if more else (first,)

    def holds(self, partition: int, offset: int) -> bytes | None:
        at = self.at.get(partition)
        return None if at is None else at.get(offset)


def _index_sends(sends: list[Send]) -> dict[bytes, Send]:
    by_value: dict[bytes, Send] = {}
    for s in sends:
        if s.value in by_value:
            raise ValueError(f"value {s.value!r} sent twice; the suite must send unique values")
        if s.outcome == "ok" and s.partition is None:
            raise ValueError(f"ok send of {s.value!r} has no acknowledged partition")
        if s.outcome not in ("ok", "fail", "timeout"):
            raise ValueError(f"send of {s.value!r} has unknown outcome {s.outcome!r}")
        by_value[s.value] = s
    return by_value


def _index_txns(
    txns: list[Txn], sends: list[Send]
) -> tuple[dict[str, TxnOutcome], dict[str, set[bytes]], dict[str, str], dict[bytes, str]]:
    """Outcome, values and producer of each transaction, and the transaction of each value."""
    outcome: dict[str, TxnOutcome] = {}
    values: dict[str, set[bytes]] = {}
    producer: dict[str, str] = {}
    txn_of: dict[bytes, str] = {}
    for t in txns:
        if t.txn in outcome:
            raise ValueError(f"transaction {t.txn!r} recorded twice")
        if t.outcome not in ("committed", "aborted", "unknown"):
            raise ValueError(f"transaction {t.txn!r} has unknown outcome {t.outcome!r}")
        outcome[t.txn] = t.outcome
        values[t.txn] = set(t.values)
        producer[t.txn] = t.producer
        for v in t.values:
            if txn_of.setdefault(v, t.txn) != t.txn:
                raise ValueError(f"value {v!r} belongs to transactions {txn_of[v]!r} and {t.txn!r}")
    for s in sends:
        if s.txn is None:
            continue
        if txn_of.setdefault(s.value, s.txn) != s.txn:
            raise ValueError(f"send of {s.value!r} names txn {s.txn!r} but the value belongs to {txn_of[s.value]!r}")
        if s.txn not in outcome:  # no Txn record: outcome unknown
            outcome[s.txn] = "unknown"
            producer[s.txn] = s.producer
        values.setdefault(s.txn, set()).add(s.value)
    return outcome, values, producer, txn_of


def unavailable_windows(sends: Iterable[Send], gap_s: float) -> list[tuple[float, float]]:
    """Intervals longer than ``gap_s``, between the first send's start and the last send's end, in
    which no send completed ``ok`` (bounded by ok completions or by those two instants)."""
    start = end = None
    oks: list[float] = []
    for s in sends:
        start = s.start_s if start is None else min(start, s.start_s)
        end = s.end_s if end is None else max(end, s.end_s)
        if s.outcome == "ok":
            oks.append(s.end_s)
    if start is None or end is None:
        return []
    oks.sort()
    windows: list[tuple[float, float]] = []
    prev = start
    for t in (*oks, end):
        if t - prev > gap_s:
            windows.append((prev, t))
        prev = max(prev, t)
    return windows


def _representative(s: Send, fin: _Final) -> Pos:
    """The copy of a duplicated value that the order check considers."""
    if s.outcome == "ok" and s.partition is not None and s.offset is not None:
        acked = (s.partition, s.offset)
        if acked in fin.positions(s.value):
            return acked
    return fin.first[s.value]


def check(history: History, *, unavailable_gap_s: float = 1.0) -> Report:
    """Check ``history`` and report every anomaly found (see the module docstring).

    Raises ValueError if the history breaks the suite's own rules (a value sent twice, an ``ok``
    send without a position, a value in two transactions).
    """
    sends = history.sends
    by_value = _index_sends(sends)
    txn_outcome, txn_values, txn_producer, txn_of = _index_txns(history.txns, sends)
    fin = _Final(history.final)
    final_rc = history.final_isolation == "read_committed"

    def outcome_of(value: bytes) -> TxnOutcome | None:
        t = txn_of.get(value)
        return None if t is None else txn_outcome[t]

    # Unknown-outcome transactions known to have committed, with the evidence.
    committed_evidence: dict[str, str] = {}
    for r in history.reads:
        t = txn_of.get(r.value)
        if t is not None and r.isolation == "read_committed" and txn_outcome[t] == "unknown":
            committed_evidence.setdefault(
                t, f"{_v(r.value)} read by {r.consumer} read_committed at {_pos((r.partition, r.offset))}"
            )
    if final_rc:
        for t, vals in txn_values.items():
            if txn_outcome[t] == "unknown" and t not in committed_evidence:
                present = min((v for v in vals if v in fin.first), default=None)
                if present is not None:
                    committed_evidence[t] = f"{_v(present)} in read_committed final"

    # 1. lost and moved
    lost: list[Lost] = []
    moved: list[Moved] = []
    counts = {"ok": 0, "fail": 0, "timeout": 0}
    timeouts_present = 0
    for s in sends:
        counts[s.outcome] += 1
        if s.outcome == "timeout":
            timeouts_present += s.value in fin.first
        if s.outcome != "ok":
            continue
        assert s.partition is not None
        found = fin.positions(s.value)
        if not found:
            if outcome_of(s.value) in (None, "committed"):
                lost.append(Lost(s.value, s.producer, s.seq, s.partition, s.offset, txn_of.get(s.value)))
        elif (s.partition, s.offset) not in found if s.offset is not None else \
                all(p != s.partition for p, _ in found):
            moved.append(Moved(s.value, s.producer, s.seq, s.partition, s.offset, found))
    # 8a. committed transactions: every value present (acked ones were handled above)
    for t in sorted(txn_values):
        if txn_outcome[t] != "committed":
            continue
        for v in sorted(txn_values[t]):
            s = by_value.get(v)
            if v in fin.first or (s is not None and s.outcome == "ok"):
                continue
            lost.append(Lost(v, s.producer if s else txn_producer.get(t), s.seq if s else None, None, None, t))

    # 2. duplicated
    duplicated: list[Duplicated] = []
    for v in fin.extra:
        s = by_value.get(v)
        duplicated.append(
            Duplicated(v, s.producer if s else None, s.seq if s else None, s.outcome if s else None, fin.positions(v))
        )
    duplicated.sort(key=lambda d: d.found)

    # 3. vanished and 7. aborted reads
    vanished: list[Vanished] = []
    aborted_reads: list[AbortedRead] = []
    for r in history.reads:
        s = by_value.get(r.value)
        t = txn_of.get(r.value)
        state = None if t is None else txn_outcome[t]
        if s is not None and s.outcome == "fail":
            aborted_reads.append(
                AbortedRead(r.value, r.consumer, r.partition, r.offset, r.at_s, r.isolation, "failed_send", t)
            )
            continue
        if state == "aborted":
            if r.isolation == "read_committed":
                aborted_reads.append(
                    AbortedRead(r.value, r.consumer, r.partition, r.offset, r.at_s, r.isolation, "aborted_txn", t)
                )
            continue
        if state == "unknown" and r.isolation == "read_uncommitted" and t not in committed_evidence:
            continue
        now = fin.holds(r.partition, r.offset)
        if now != r.value:
            vanished.append(
                Vanished(r.value, r.consumer, r.partition, r.offset, r.at_s, r.isolation, now, fin.positions(r.value))
            )

    # 4. order, in acknowledgements and in final
    order: list[OrderViolation] = []
    acked: dict[tuple[str, int], list[tuple[int, int, bytes]]] = defaultdict(list)
    for s in sends:
        if s.outcome == "ok" and s.offset is not None:  # an ok without offset: its order is checked in final
            assert s.partition is not None
            acked[(s.producer, s.partition)].append((s.seq, s.offset, s.value))
    for (producer, partition), items in sorted(acked.items()):
        items.sort()
        for (pseq, poff, pval), (nseq, noff, nval) in pairwise(items):
            if noff <= poff:
                order.append(OrderViolation("ack", producer, partition, pseq, poff, pval, nseq, noff, nval))
    for partition, records in fin.ordered.items():
        last: dict[str, tuple[int, int, bytes]] = {}
        for offset, value in records:
            s = by_value.get(value)
            if s is None or (value in fin.extra and _representative(s, fin) != (partition, offset)):
                continue
            prev = last.get(s.producer)
            if prev is not None and s.seq <= prev[0]:
                order.append(
                    OrderViolation("final", s.producer, partition, prev[0], prev[1], prev[2], s.seq, offset, value)
                )
            last[s.producer] = (s.seq, offset, value)

    # 5. failed sends (and, read_committed, aborted transactions) present in final
    failed_present: list[FailedPresent] = []
    for s in sends:
        if s.outcome == "fail" and s.value in fin.first:
            failed_present.append(
                FailedPresent(s.value, s.producer, s.seq, txn_of.get(s.value), "failed_send", fin.positions(s.value))
            )
    if final_rc:
        for t in sorted(txn_values):
            if txn_outcome[t] != "aborted":
                continue
            for v in sorted(txn_values[t]):
                s = by_value.get(v)
                if v not in fin.first or (s is not None and s.outcome == "fail"):
                    continue
                failed_present.append(
                    FailedPresent(
                        v,
                        s.producer if s else txn_producer.get(t),
                        s.seq if s else None,
                        t,
                        "aborted_txn",
                        fin.positions(v),
                    )
                )

    # 8b. unknown-outcome transactions known to have committed must be complete
    partial: list[PartialTxn] = []
    for t in sorted(committed_evidence):
        vals = txn_values[t]
        present = tuple(sorted(v for v in vals if v in fin.first))
        if len(present) < len(vals):
            missing = tuple(sorted(v for v in vals if v not in fin.first))
            partial.append(PartialTxn(t, txn_producer.get(t), committed_evidence[t], present, missing))

    # info
    txn_counts = {"committed": 0, "aborted": 0, "unknown": 0}
    for o in txn_outcome.values():
        txn_counts[o] += 1
    info = {
        "sends": len(sends),
        "sends_ok": counts["ok"],
        "sends_fail": counts["fail"],
        "sends_timeout": counts["timeout"],
        "timeouts_present": timeouts_present,
        "timeouts_absent": counts["timeout"] - timeouts_present,
        "txns": len(txn_outcome),
        "txns_committed": txn_counts["committed"],
        "txns_aborted": txn_counts["aborted"],
        "txns_unknown": txn_counts["unknown"],
        "reads": len(history.reads),
        "final_records": fin.records,
        "final_partitions": len(fin.ordered),
        "final_unknown_values": sum(1 for v in fin.first if v not in by_value and v not in txn_of),
    }

    return Report(
        lost=lost,
        moved=moved,
        duplicated=duplicated,
        vanished=vanished,
        order=order,
        failed_present=failed_present,
        aborted_reads=aborted_reads,
        partial_txns=partial,
        info=info,
        unavailable=unavailable_windows(sends, unavailable_gap_s),
        unavailable_gap_s=unavailable_gap_s,
    )
