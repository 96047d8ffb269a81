"""The hand-written Produce response encoder must produce what kio's generated reader decodes."""

from __future__ import annotations

import pytest
from kio.serial import entity_reader

from odradek.protocol import apis
from odradek.protocol import produce_response as pr


@pytest.mark.parametrize("version", range(apis.SUPPORTED[apis.PRODUCE].min_version,
                                          apis.SUPPORTED[apis.PRODUCE].max_version + 1))
def test_every_version_decodes_with_kio(version: int) -> None:
    topics = [
        ("orders", [pr.PartitionResult(0, 0, 42, 1_700_000_000_123, 7, None),
                    pr.PartitionResult(1, 10, -1, -1, -1, "batch too large: é")]),
        ("empty", []),
    ]
    body = pr.encode(version, topics, throttle_ms=5)
    value, size = entity_reader(apis.response_class(apis.PRODUCE, version))(body, 0)
    assert size == len(body)
    t = value.responses[0]
    assert t.name == "orders" and value.responses[1].partition_responses == ()
    p0, p1 = t.partition_responses
    assert (p0.index, p0.error_code, p0.base_offset) == (0, 0, 42)
    assert round(p0.log_append_time.timestamp() * 1000) == 1_700_000_000_123
    assert p1.error_code == 10 and p1.base_offset == -1 and p1.log_append_time is None
    if version >= 5:
        assert p0.log_start_offset == 7
    if version >= 8:
        assert p1.error_message == "batch too large: é" and p0.error_message is None
    assert value.throttle_time.total_seconds() * 1000 == 5
