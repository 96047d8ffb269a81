"""ListOffsets through real clients: earliest/latest and offsets_for_times, across several segments."""

from __future__ import annotations

import os
import time

import pytest

from tests.compat.clients import Client, Rec
from tests.compat.conftest import BrokerProcess, create_topic

pytestmark = pytest.mark.slow  # a real broker process and real clients

T0 = (int(time.time()) - 7200) * 1000


def test_earliest_and_latest(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name, partitions=3)
    assert client.earliest_latest(topic_name, [0, 1, 2]) == ({0: 0, 1: 0, 2: 0}, {0: 0, 1: 0, 2: 0})
    counts = {0: 7, 1: 0, 2: 30}
    for p, n in counts.items():
        if n:
            client.produce(topic_name, [Rec(value=b"v%d" % i, partition=p) for i in range(n)])
    assert client.earliest_latest(topic_name, [0, 1, 2]) == ({0: 0, 1: 0, 2: 0}, counts)


def test_offsets_for_times(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker, topic_name, partitions=2)
    # Partition 0: 240 records of ~1 KB, 10 ms apart, in batches of 40: several 64 KiB segments.
    # Two records share each timestamp from 100 on, so lookups must return the first of them.
    stamps = [T0 + 10 * i if i < 100 else T0 + 1000 + 10 * ((i - 100) // 2) for i in range(240)]
    records = [Rec(value=os.urandom(1000), timestamp=ts, partition=0) for ts in stamps]
    for chunk in range(0, 240, 40):
        client.produce(topic_name, records[chunk:chunk + 40])
    # Partition 1: a few records whose timestamps go backwards (CreateTime is the producer's).
    p1 = [T0 + 5000, T0 + 3000, T0 + 9000, T0 + 4000]
    client.produce(topic_name, [Rec(value=b"p1", timestamp=ts, partition=1) for ts in p1])

    def expected(ts: int) -> int | None:
        return next((i for i, s in enumerate(stamps) if s >= ts), None)

    queries = [T0 - 1, T0, T0 + 1, T0 + 555, T0 + 990, T0 + 1000, T0 + 1005, T0 + 1010, T0 + 1500,
               stamps[-1], stamps[-1] + 1]
    for ts in queries:
        got = client.offsets_for_times(topic_name, {0: ts, 1: ts})
        p1_expected = next((i for i, s in enumerate(p1) if s >= ts), None)
        assert got == {0: expected(ts), 1: p1_expected}, f"timestamp T0+{ts - T0}"
    assert client.earliest_latest(topic_name, [0, 1]) == ({0: 0, 1: 0}, {0: 240, 1: 4})


def test_admin_list_offsets(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    """The admin ListOffsets: earliest, latest, by timestamp and max timestamp (KIP-734, ListOffsets v7+)."""
    create_topic(broker, topic_name, partitions=2)
    stamps = [T0 + 100, T0 + 300, T0 + 200, T0 + 300, T0 + 50]  # the max, 300, first at offset 1
    client.produce(topic_name, [Rec(value=b"v", timestamp=ts, partition=0) for ts in stamps])
    try:
        got = client.admin_list_offsets(topic_name, {0: "earliest", 1: "earliest"})
    except NotImplementedError as e:
        pytest.skip(str(e))
    assert {p: o for p, (o, _) in got.items()} == {0: 0, 1: 0}
    got = client.admin_list_offsets(topic_name, {0: "latest", 1: "latest"})
    assert {p: o for p, (o, _) in got.items()} == {0: 5, 1: 0}
    got = client.admin_list_offsets(topic_name, {0: T0 + 150})
    assert got == {0: (1, T0 + 300)}
    got = client.admin_list_offsets(topic_name, {0: "max_timestamp"})
    assert got == {0: (1, T0 + 300)}


def test_out_of_range_start_resets_to_earliest(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    """A fetch past the log end gets OFFSET_OUT_OF_RANGE; the client resets (auto.offset.reset=earliest)."""
    create_topic(broker, topic_name)
    client.produce(topic_name, [Rec(value=b"r%d" % i) for i in range(10)])
    got = client.consume(topic_name, [0], start=1000, count=10)
    assert [(g.offset, g.value) for g in got] == [(i, b"r%d" % i) for i in range(10)]


def test_delete_records(client: Client, broker: BrokerProcess, topic_name: str) -> None:
    """DeleteRecords moves the log start: earliest, offsets_for_times and consumers all follow it."""
    create_topic(broker, topic_name, partitions=2)
    records = [Rec(value=os.urandom(1000), timestamp=T0 + i, partition=0) for i in range(200)]
    for chunk in range(0, 200, 40):  # several 64 KiB segments: whole ones can go
        client.produce(topic_name, records[chunk:chunk + 40])
    client.produce(topic_name, [Rec(value=b"one", partition=1)])
    assert client.delete_records(topic_name, {0: 130, 1: 1}) == {0: 130, 1: 1}
    assert client.earliest_latest(topic_name, [0, 1]) == ({0: 130, 1: 1}, {0: 200, 1: 1})
    assert client.offsets_for_times(topic_name, {0: T0}) == {0: 130}
    assert client.offsets_for_times(topic_name, {0: T0 + 150}) == {0: 150}
    got = client.consume(topic_name, [0], start=0, count=70)  # below the start: reset to earliest
    assert [(g.offset, g.value) for g in got] == [(130 + i, r.value) for i, r in enumerate(records[130:])]
    client.produce(topic_name, [Rec(value=b"after", partition=0)])
    assert client.earliest_latest(topic_name, [0]) == ({0: 130}, {0: 201})
