"""A read_committed consumer's filtering, as Kafka's clients do it (not a test module).

Given the batches of one fetch answer and its aborted-transaction list, keep the records a
read_committed consumer delivers: a transactional batch of a producer is dropped from the first
offset of one of its aborted transactions until that producer's ABORT marker; control batches are
never delivered. Kafka's Java consumer (``CompletedFetch``) and librdkafka do the same.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from odradek.protocol.records import Record, decode_records, iter_batches
from odradek.storage.producer_state import read_marker


def committed_records(raw: bytes, aborted: Sequence[tuple[int, int]] | None, position: int) -> list[Record]:
    """Records at or after ``position`` that a read_committed consumer delivers from one fetch answer."""
    queue = [(first, pid) for pid, first in aborted or ()]
    heapq.heapify(queue)
    aborted_producers: set[int] = set()
    out: list[Record] = []
    for pos, header in iter_batches(raw, allow_partial_tail=True):
        data = raw[pos : pos + header.size]
        pid = header.producer_id
        if pid >= 0:
            while queue and queue[0][0] <= header.last_offset:
                aborted_producers.add(heapq.heappop(queue)[1])
            if header.is_control:
                marker = read_marker(data)
                if marker is not None and not marker.commit:
                    aborted_producers.discard(pid)
                continue
            if header.is_transactional and pid in aborted_producers:
                continue
        if header.is_control:
            continue
        out.extend(r for r in decode_records(data) if r.offset >= position)
    return out
