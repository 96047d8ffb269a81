"""The hand-written Fetch response encoder must produce what kio's generated reader decodes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from kio.serial import entity_reader

from odradek.protocol import apis
from odradek.protocol import fetch_response as fr


@dataclass
class FakeRegion:
    data: bytes

    @property
    def length(self) -> int:
        return len(self.data)


def flatten(chunks: list[object]) -> bytes:
    return b"".join(c.data if isinstance(c, FakeRegion) else c for c in chunks)  # type: ignore[misc]


@pytest.mark.parametrize("version", range(apis.SUPPORTED[apis.FETCH].min_version,
                                          apis.SUPPORTED[apis.FETCH].max_version + 1))
def test_every_version_decodes_with_kio(version: int) -> None:
    tid = uuid.uuid4()
    region = FakeRegion(b"R" * 300)
    topics = [
        fr.TopicData("orders", tid, [
            fr.PartitionData(0, 0, 10, 9, 2, None, region),
            fr.PartitionData(3, 1, -1, -1, -1, [(5, 7), (6, 8)], None),
            fr.PartitionData(4, 0, 5, 5, 0, [], b"xyz"),
        ]),
        fr.TopicData("other", uuid.uuid4(), []),
    ]
    chunks = fr.encode(version, topics, error_code=0, session_id=42, throttle_ms=3)
    assert region in chunks  # the region is passed through, not copied
    body = flatten(chunks)
    value, size = entity_reader(apis.response_class(apis.FETCH, version))(body, 0)
    assert size == len(body)
    t = value.responses[0]
    if version >= 13:
        assert t.topic_id == tid
    else:
        assert t.topic == "orders"
    p0, p1, p2 = t.partitions
    assert p0.records == region.data and p0.high_watermark == 10 and p0.last_stable_offset == 9
    assert p1.error_code == 1 and [(a.producer_id, a.first_offset) for a in p1.aborted_transactions] == [(5, 7), (6, 8)]
    assert p2.records == b"xyz" and tuple(p2.aborted_transactions) == ()
    if version >= 5:
        assert p0.log_start_offset == 2
    if version >= 7:
        assert value.session_id == 42
    assert value.responses[1].partitions == ()
