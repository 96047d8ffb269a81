"""The message browser's reading of a partition led by another broker (``messages.read_remote``) over a stand-in
leader answering Fetch: a start clamped into the leader's log, pages across several answers, the limit and next
offset, a filter, the high watermark of the first answer as the end, and read_committed's aborted transactions."""

from __future__ import annotations

import asyncio

from odradek.console.messages import Filter, Page, read_remote
from odradek.console.peers import Fetched
from odradek.protocol.records import RecordInput, build_batch

BATCH = 4  # records per batch


class Leader:
    """Batches of BATCH records (value ``v{offset}``) from ``start`` to ``end``; each answer is one batch, whole."""

    def __init__(self, start: int, end: int, *, aborted: dict[int, int] | None = None) -> None:
        self.start, self.end = start, end
        self.aborted = aborted or {}  # first offset of an aborted transactional batch -> its producer id
        self.asked: list[int] = []

    def batch(self, base: int) -> bytes:
        records = [RecordInput(f"k{o}".encode(), f"v{o}".encode()) for o in range(base, min(base + BATCH, self.end))]
        pid = self.aborted.get(base)
        if pid is None:
            return build_batch(records, base_offset=base)
        return build_batch(records, base_offset=base, producer_id=pid, producer_epoch=0, base_sequence=0,
                           is_transactional=True)

    async def fetch(self, offset: int) -> Fetched:
        self.asked.append(offset)
        if not self.start <= offset <= self.end:
            return Fetched(b"", self.end, self.end, self.start, out_of_range=True)
        if offset == self.end:
            return Fetched(b"", self.end, self.end, self.start)
        base = offset - (offset - self.start) % BATCH
        aborted = tuple((pid, first) for first, pid in self.aborted.items() if first == base)
        return Fetched(self.batch(base), self.end, self.end, self.start, aborted)


def read(leader: Leader, start: int, limit: int, filt: Filter | None = None, **kw: object) -> Page:
    return asyncio.run(read_remote(leader.fetch, 0, start, limit, filt, **kw))  # type: ignore[arg-type]


def test_pages_across_answers_from_a_start_inside_a_batch() -> None:
    leader = Leader(0, 10)
    page = read(leader, 2, 5)
    assert [m.offset for m in page.messages] == [2, 3, 4, 5, 6]
    assert [m.value for m in page.messages] == [f"v{o}".encode() for o in range(2, 7)]
    assert page.next_offset == 7 and page.end_offset == 10
    page = read(leader, 7, 100)
    assert [m.offset for m in page.messages] == [7, 8, 9] and page.next_offset == 10


def test_a_start_outside_the_log_is_clamped_into_it() -> None:
    leader = Leader(4, 12)
    page = read(leader, 0, 2)
    assert [m.offset for m in page.messages] == [4, 5] and leader.asked == [0, 4]
    page = read(Leader(4, 12), 1 << 62, 10)  # past the end: an empty page at the end
    assert page.messages == [] and page.next_offset == 12


def test_a_filter_scans_on_and_the_end_is_the_first_answers() -> None:
    leader = Leader(0, 12)
    page = read(leader, 0, 10, Filter(value="v9"))
    assert [m.offset for m in page.messages] == [9] and page.next_offset == 12
    page = read(leader, 0, 10, Filter(value="v9"), max_scan_bytes=1)  # one answer, then the scan bound
    assert page.messages == [] and page.stopped_early and page.next_offset == 4


def test_read_committed_leaves_out_an_aborted_transaction() -> None:
    leader = Leader(0, 12, aborted={4: 7})
    page = read(leader, 0, 100, committed=True)
    assert [m.offset for m in page.messages] == [0, 1, 2, 3, 8, 9, 10, 11]
    page = read(leader, 0, 100)
    assert [m.offset for m in page.messages] == list(range(12))


def test_a_leader_that_does_not_answer_is_a_notice() -> None:
    """The topic page's figures and the browser over brokers 2 and 3, 3 not answering: notices, no error."""
    from types import SimpleNamespace
    from typing import Any

    from odradek.console import messages, routes, topics
    from odradek.console.cluster_view import PartitionInfo
    from odradek.console.peers import PeerError, Peers

    leaders = {("t", 0): 2, ("t", 1): 3}
    b: Any = SimpleNamespace(
        node_id=1,
        cluster=SimpleNamespace(brokers={1: None, 2: None, 3: None},
                                states={tp: SimpleNamespace(leader=lead) for tp, lead in leaders.items()}),
        replicas=SimpleNamespace(get=lambda t, p: None),
    )
    peers = Peers(b)
    stand_in = Leader(0, 6)

    async def send(broker_id: int, api_key: int, request: Any, **_: Any) -> Any:
        raise PeerError(broker_id, f"broker {broker_id} did not answer")

    async def fetch(broker_id: int, topic: str, partition: int, offset: int, **_: Any) -> Fetched:
        if broker_id == 3:
            raise PeerError(3, "broker 3 did not answer Fetch")
        return await stand_in.fetch(offset)

    peers.send = send  # type: ignore[method-assign]
    peers.fetch = fetch  # type: ignore[method-assign]
    parts = [PartitionInfo("t", p, leaders[("t", p)], 0, (leaders[("t", p)],), (leaders[("t", p)],), False,
                           None, None, None) for p in (0, 1)]
    shown, notices = asyncio.run(topics.leaders_figures(b, peers, parts))
    assert [(p.start_offset, p.end_offset, p.size) for p in shown] == [(None, None, None)] * 2
    assert notices and all("did not answer" in n for n in notices)
    found, nexts, stopped, notices = asyncio.run(
        routes._read_cluster(b, peers, "t", [0, 1], None, None, 100, messages.Filter(), False))
    assert [m.offset for m in found] == list(range(6)) and nexts == {0: 6} and not stopped
    assert notices == ["broker 3 did not answer Fetch"]
