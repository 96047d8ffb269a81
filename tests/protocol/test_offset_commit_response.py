"""The hand-laid OffsetCommit response reads back with kio's reader in every supported version."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from odradek.protocol import apis, offset_commit_response

VERSIONS = range(apis.SUPPORTED[apis.OFFSET_COMMIT].min_version, apis.SUPPORTED[apis.OFFSET_COMMIT].max_version + 1)

results = st.dictionaries(
    st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)),
    st.sampled_from([0, 3, 12, 22, 25, 27, 82]),
    max_size=30,
)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40, deadline=None)
@given(results=results, throttle=st.integers(0, 10_000))
def test_reads_back_with_kio(version: int, results: dict[tuple[str, int], int], throttle: int) -> None:
    body = offset_commit_response.encode(version, results, throttle_ms=throttle)
    response, size = entity_reader(apis.response_class(apis.OFFSET_COMMIT, version))(body, 0)
    assert size == len(body)
    got = {(t.name, p.partition_index): int(p.error_code) for t in response.topics for p in t.partitions}
    assert got == results
    if version >= 3:
        assert response.throttle_time == datetime.timedelta(milliseconds=throttle)
