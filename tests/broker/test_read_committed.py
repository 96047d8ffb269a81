"""Transactions as readers see them, over the wire against an in-process broker: Fetch with
read_committed / read_uncommitted (last stable offset, aborted-transaction lists, long polls,
fetch sessions), ListOffsets by isolation level, and DescribeProducers.

The broker runs its real server on an event loop in a background thread; tests talk to it through
raw sockets (``tests/broker/wire.py``) and write transaction markers in-process on that loop, as
the transaction coordinator does: ``Log.append_marker``, then the high watermark, then ``notify``.
Transactional batches are produced with a transactional id and partition verification off, so no
coordinator round trip is needed to open a transaction in a partition.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import RecordInput, build_batch, iter_batches
from tests.broker import inprocess, wire
from tests.broker.wire import Conn
from tests.storage.txn_reader import committed_records

T = TypeVar("T")
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
TXN_ID = "txn-tests"
T0 = int(time.time() * 1000)  # records as old as the markers (stamped now): no segment.ms roll between them


class InProcessBroker(inprocess.InProcessBroker):
    def __init__(self, data: Path) -> None:
        super().__init__(data, {"transaction.partition.verification.enable": "false"})

    def create_topic(self, name: str, partitions: int = 1) -> None:
        self.on_loop(lambda: self.broker.create_topic(name, partitions))

    def marker(self, topic: str, partition: int, producer_id: int, commit: bool, *, epoch: int = 0,
               coordinator_epoch: int = 0) -> int:
        """Write a COMMIT/ABORT marker as the transaction coordinator does; its offset."""
        def write() -> int:
            lg = self.broker.get_log(topic, partition)
            offset = lg.append_marker(producer_id, epoch, commit, coordinator_epoch).first_offset
            lg.update_high_watermark(lg.next_offset)
            self.broker.notify(topic, partition)
            return int(offset)
        return self.on_loop(write)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    n = InProcessBroker(tmp_path_factory.mktemp("read_committed") / "data")
    try:
        yield n
    finally:
        n.close()


@pytest.fixture
def conn(node: InProcessBroker) -> Iterator[Conn]:
    with Conn(node.address) as c:
        yield c


_topics = iter(range(1_000_000))


def _topic(node: InProcessBroker, partitions: int = 1) -> str:
    name = f"rc-{next(_topics)}"
    node.create_topic(name, partitions)
    return name


# -- requests ------------------------------------------------------------------------------------------


@dataclass
class Producer:
    producer_id: int
    epoch: int = 0
    sequence: int = 0


def _records(values: list[bytes], producer: Producer | None, transactional: bool) -> bytes:
    data = build_batch([RecordInput(None, v, T0) for v in values], base_timestamp=T0,
                       producer_id=producer.producer_id if producer else -1,
                       producer_epoch=producer.epoch if producer else -1,
                       base_sequence=producer.sequence if producer else -1, is_transactional=transactional)
    if producer is not None:
        producer.sequence += len(values)
    return data


def _produce(conn: Conn, topic: str, values: list[bytes], producer: Producer | None = None,
             transactional: bool = False) -> tuple[int, int]:
    body = wire.produce_values(topic, 0, _records(values, producer, transactional), acks=-1)
    body["transactional_id"] = TXN_ID if transactional else None
    r = conn.request(apis.PRODUCE, wire.PRODUCE_V, body)
    p = r.responses[0].partition_responses[0]
    return int(p.error_code), int(p.base_offset)


def _fetch(conn: Conn, topic: str, offset: int, isolation: int, *, version: int = wire.FETCH_V,
           timeout: float = 10.0, **kw: Any) -> Any:
    values = wire.fetch_values({(topic, 0): offset}, **kw)
    values["isolation_level"] = isolation
    if version >= 13:  # topics by id
        values["topics"][0]["topic_id"] = wire.metadata(conn, [topic]).topics[0].topic_id
    r = conn.request(apis.FETCH, version, values, timeout=timeout)
    if version >= 7:
        assert r.error_code == 0
    (t,) = r.responses
    (p,) = t.partitions
    assert int(p.error_code) == 0, p.error_code
    return p


def _aborted(p: Any) -> list[tuple[int, int]] | None:
    if p.aborted_transactions is None:
        return None
    return [(int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions]


def _latest(conn: Conn, topic: str, isolation: int, timestamp: int = wire.LATEST) -> tuple[int, int]:
    values = wire.list_offsets_values(topic, [0], timestamp)
    values["isolation_level"] = isolation
    r = conn.request(apis.LIST_OFFSETS, wire.LIST_OFFSETS_V, values)
    p = r.topics[0].partitions[0]
    assert int(p.error_code) == 0
    return int(p.offset), int(p.timestamp)


def _consume(conn: Conn, topic: str, start: int, isolation: int, *, partition_max_bytes: int = 10 << 20,
             version: int = wire.FETCH_V) -> tuple[list[tuple[int, bytes]], int]:
    """What a consumer delivers from ``start`` until a fetch brings nothing; and where it stopped."""
    out: list[tuple[int, bytes]] = []
    position = start
    for _ in range(10_000):
        p = _fetch(conn, topic, position, isolation, version=version, partition_max_bytes=partition_max_bytes,
                   max_bytes=partition_max_bytes)
        raw = p.records or b""
        if not raw:
            return out, position
        batches = list(iter_batches(raw, allow_partial_tail=True))
        # read_uncommitted: no list, so only control batches are dropped (as clients do at both levels)
        out += [(r.offset, r.value or b"") for r in committed_records(raw, _aborted(p), position)]
        position = batches[-1][1].next_offset
    raise AssertionError("the consumer never caught up")


# -- fetch -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 12, 13])
def test_read_committed_stops_at_the_last_stable_offset_and_lists_aborts(node: InProcessBroker, conn: Conn,
                                                                         version: int) -> None:
    topic = _topic(node)
    a = Producer(1001)
    assert _produce(conn, topic, [b"p0", b"p1"]) == (0, 0)
    assert _produce(conn, topic, [b"a2", b"a3"], a, transactional=True) == (0, 2)
    assert _produce(conn, topic, [b"p4"]) == (0, 4)

    rc = _fetch(conn, topic, 0, READ_COMMITTED, version=version)
    assert (rc.high_watermark, rc.last_stable_offset) == (5, 2)
    assert [r.offset for r in wire.records_of(rc.records)] == [0, 1]  # nothing of the open transaction
    assert _aborted(rc) == []

    ru = _fetch(conn, topic, 0, READ_UNCOMMITTED, version=version)
    assert (ru.high_watermark, ru.last_stable_offset) == (5, 2)  # the real LSO at both levels, as Kafka
    assert [r.offset for r in wire.records_of(ru.records)] == [0, 1, 2, 3, 4]
    assert _aborted(ru) is None

    assert _latest(conn, topic, READ_UNCOMMITTED)[0] == 5
    assert _latest(conn, topic, READ_COMMITTED)[0] == 2

    assert node.marker(topic, 0, a.producer_id, commit=False) == 5
    rc = _fetch(conn, topic, 0, READ_COMMITTED, version=version)
    assert (rc.high_watermark, rc.last_stable_offset) == (6, 6)
    assert _aborted(rc) == [(1001, 2)]
    assert [(r.offset, r.value) for r in committed_records(rc.records, _aborted(rc), 0)] == [
        (0, b"p0"), (1, b"p1"), (4, b"p4")]
    assert _latest(conn, topic, READ_COMMITTED)[0] == _latest(conn, topic, READ_UNCOMMITTED)[0] == 6
    # The list covers only what the answer holds: the first batch alone ends before the transaction.
    assert _aborted(_fetch(conn, topic, 0, READ_COMMITTED, version=version, partition_max_bytes=1)) == []
    assert _aborted(_fetch(conn, topic, 4, READ_COMMITTED, version=version)) == [(1001, 2)]  # its marker: 5


def test_the_aborted_list_covers_only_the_returned_range(node: InProcessBroker, conn: Conn) -> None:
    topic = _topic(node)
    a, b = Producer(2001), Producer(2002)
    _produce(conn, topic, [b"a0"], a, transactional=True)  # 0
    _produce(conn, topic, [b"x1"])  # 1
    node.marker(topic, 0, a.producer_id, commit=False)  # 2
    _produce(conn, topic, [b"b3"], b, transactional=True)  # 3
    node.marker(topic, 0, b.producer_id, commit=False)  # 4
    first_batch_only = _fetch(conn, topic, 0, READ_COMMITTED, partition_max_bytes=1)
    assert [r.offset for r in wire.records_of(first_batch_only.records)] == [0]
    assert _aborted(first_batch_only) == [(2001, 0)]
    everything = _fetch(conn, topic, 0, READ_COMMITTED)
    assert _aborted(everything) == [(2001, 0), (2002, 3)]
    assert [r.value for r in committed_records(everything.records, _aborted(everything), 0)] == [b"x1"]


def test_idempotent_writes_during_a_transaction_are_refused(node: InProcessBroker, conn: Conn) -> None:
    topic = _topic(node)
    a = Producer(3001)
    _produce(conn, topic, [b"t0"], a, transactional=True)
    assert _produce(conn, topic, [b"x"], a)[0] == ErrorCode.INVALID_TXN_STATE
    a.sequence -= 1  # not written
    node.marker(topic, 0, a.producer_id, commit=True)
    assert _produce(conn, topic, [b"x"], a) == (0, 2)


def test_a_long_poll_waits_until_the_last_stable_offset_moves(node: InProcessBroker, conn: Conn) -> None:
    topic = _topic(node)
    a = Producer(4001)
    _produce(conn, topic, [b"t0", b"t1"], a, transactional=True)
    # Only undecided data: a read_committed poll waits its full time and returns nothing.
    started = time.monotonic()
    p = _fetch(conn, topic, 0, READ_COMMITTED, max_wait_ms=300)
    assert time.monotonic() - started >= 0.25 and not p.records and p.last_stable_offset == 0

    answer: dict[str, Any] = {}

    def poll() -> None:
        with Conn(node.address) as other:
            began = time.monotonic()
            answer["p"] = _fetch(other, topic, 0, READ_COMMITTED, max_wait_ms=8_000, timeout=15)
            answer["took"] = time.monotonic() - began

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.3)
    _produce(conn, topic, [b"t2"], a, transactional=True)  # wakes the poll, which must keep waiting
    time.sleep(0.3)
    assert poller.is_alive()
    node.marker(topic, 0, a.producer_id, commit=True)
    poller.join(timeout=10)
    assert not poller.is_alive()
    assert answer["took"] < 5, answer["took"]
    got = answer["p"]
    assert got.last_stable_offset == 4
    assert [r.value for r in committed_records(got.records, _aborted(got), 0)] == [b"t0", b"t1", b"t2"]


def test_an_incremental_fetch_session_reports_a_moved_last_stable_offset(node: InProcessBroker,
                                                                          conn: Conn) -> None:
    topic = _topic(node)
    a = Producer(5001)
    _produce(conn, topic, [b"t0"], a, transactional=True)
    values = wire.fetch_values({(topic, 0): 0}, session_epoch=0)
    values["isolation_level"] = READ_COMMITTED
    first = conn.request(apis.FETCH, wire.FETCH_V, values)
    assert first.session_id and first.responses[0].partitions[0].last_stable_offset == 0
    values = wire.fetch_values({}, session_id=first.session_id, session_epoch=1)
    values["isolation_level"] = READ_COMMITTED
    assert conn.request(apis.FETCH, wire.FETCH_V, values).responses == ()  # nothing changed
    node.marker(topic, 0, a.producer_id, commit=True)
    values["session_epoch"] = 2
    (t,) = conn.request(apis.FETCH, wire.FETCH_V, values).responses
    (p,) = t.partitions
    assert p.last_stable_offset == p.high_watermark == 2
    assert [r.value for r in committed_records(p.records, _aborted(p), 0)] == [b"t0"]


# -- list offsets ----------------------------------------------------------------------------------------


def test_list_offsets_by_timestamp_never_points_past_the_last_stable_offset(node: InProcessBroker,
                                                                            conn: Conn) -> None:
    topic = _topic(node)
    a = Producer(6001)
    _produce(conn, topic, [b"p0"])
    _produce(conn, topic, [b"t1"], a, transactional=True)
    assert _latest(conn, topic, READ_UNCOMMITTED, timestamp=T0) == (0, T0)
    assert _latest(conn, topic, READ_COMMITTED, timestamp=T0) == (0, T0)
    assert _latest(conn, topic, READ_UNCOMMITTED, timestamp=T0 + 1) == (-1, -1)
    two = build_batch([RecordInput(None, b"later", T0 + 10)], base_timestamp=T0 + 10, producer_id=a.producer_id,
                      producer_epoch=0, base_sequence=a.sequence, is_transactional=True)
    body = wire.produce_values(topic, 0, two, acks=-1)
    body["transactional_id"] = TXN_ID
    conn.request(apis.PRODUCE, wire.PRODUCE_V, body)
    assert _latest(conn, topic, READ_UNCOMMITTED, timestamp=T0 + 5) == (2, T0 + 10)
    assert _latest(conn, topic, READ_COMMITTED, timestamp=T0 + 5) == (-1, -1)  # found at 2, but LSO is 1
    max_timestamp = -3  # its record is at 2, past the LSO: none found, as Kafka answers
    assert _latest(conn, topic, READ_UNCOMMITTED, timestamp=max_timestamp) == (2, T0 + 10)
    assert _latest(conn, topic, READ_COMMITTED, timestamp=max_timestamp) == (-1, -1)
    node.marker(topic, 0, a.producer_id, commit=True)
    assert _latest(conn, topic, READ_COMMITTED, timestamp=T0 + 5) == (2, T0 + 10)


# -- the property: a read_committed consumer sees exactly the committed records ------------------------------


@dataclass
class Model:
    expected: list[tuple[int, bytes]] = field(default_factory=list)  # committed or plain, by offset
    pending: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)  # open transactions' records
    everything: list[tuple[int, bytes]] = field(default_factory=list)


wire_ops = st.lists(st.one_of(
    st.tuples(st.just("plain"), st.just(0), st.integers(1, 3)),
    st.tuples(st.just("txn"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("commit"), st.integers(0, 2), st.just(0)),
    st.tuples(st.just("abort"), st.integers(0, 2), st.just(0)),
), min_size=1, max_size=25)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=wire_ops, partition_max_bytes=st.sampled_from([1, 150, 1 << 20]), version=st.sampled_from([4, 12]))
def test_read_committed_consumers_see_exactly_the_committed_records(node: InProcessBroker, conn: Conn,
                                                                    script: list[tuple[str, int, int]],
                                                                    partition_max_bytes: int, version: int) -> None:
    topic = _topic(node)
    producers = [Producer(7000 + i) for i in range(3)]
    model = Model()
    counter = 0
    for kind, who, n in script:
        if kind in ("commit", "abort"):
            node.marker(topic, 0, producers[who].producer_id, commit=kind == "commit")
            records = model.pending.pop(who, [])
            if kind == "commit":
                model.expected = sorted(model.expected + records)
            continue
        values = [f"v{counter + i}".encode() for i in range(n)]
        counter += n
        transactional = kind == "txn"
        error, first = _produce(conn, topic, values, producers[who] if transactional else None, transactional)
        assert error == 0
        records = [(first + i, v) for i, v in enumerate(values)]
        model.everything += records
        if transactional:
            model.pending.setdefault(who, []).extend(records)
        else:
            model.expected.extend(records)
    lso = min([recs[0][0] for recs in model.pending.values()] + [_latest(conn, topic, READ_UNCOMMITTED)[0]])
    assert _latest(conn, topic, READ_COMMITTED)[0] == lso
    seen, stopped = _consume(conn, topic, 0, READ_COMMITTED, partition_max_bytes=partition_max_bytes,
                             version=version)
    assert seen == [(o, v) for o, v in sorted(model.expected) if o < lso]
    assert stopped <= lso
    everything, _ = _consume(conn, topic, 0, READ_UNCOMMITTED, partition_max_bytes=partition_max_bytes,
                             version=version)
    assert everything == model.everything


# -- describe producers ---------------------------------------------------------------------------------


def test_describe_producers_lists_each_producers_state(node: InProcessBroker, conn: Conn) -> None:
    topic = _topic(node, partitions=2)
    txn, idem = Producer(8001, epoch=3), Producer(8002, epoch=1)
    _produce(conn, topic, [b"x"])
    _produce(conn, topic, [b"t1", b"t2"], txn, transactional=True)
    _produce(conn, topic, [b"i3"], idem)
    r = conn.request(apis.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": topic, "partition_indexes": [0, 1, 7]}, {"name": "no-such-topic", "partition_indexes": [0]}]})
    (t, missing) = r.topics
    p0, p1, p7 = t.partitions
    assert (p0.partition_index, p0.error_code, p1.error_code) == (0, ErrorCode.NONE, ErrorCode.NONE)
    states = {s.producer_id: s for s in p0.active_producers}
    assert set(states) == {8001, 8002} and p1.active_producers == ()
    s = states[8001]
    assert (s.producer_epoch, s.last_sequence, s.current_txn_start_offset, s.coordinator_epoch) == (3, 1, 1, -1)
    assert s.last_timestamp == T0
    s = states[8002]
    assert (s.producer_epoch, s.last_sequence, s.current_txn_start_offset) == (1, 0, -1)
    assert p7.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and p7.error_message
    assert missing.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    node.marker(topic, 0, txn.producer_id, commit=True, epoch=3, coordinator_epoch=4)
    r = conn.request(apis.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
    s = {s.producer_id: s for s in r.topics[0].partitions[0].active_producers}[8001]
    assert (s.current_txn_start_offset, s.coordinator_epoch) == (-1, 4)


def test_describe_producers_is_advertised(conn: Conn) -> None:
    versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in wire.api_versions(conn).api_keys}
    assert versions[apis.DESCRIBE_PRODUCERS] == (0, 0)
