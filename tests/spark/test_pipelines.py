"""The pipelines (pipelines/) end to end on a small data set, in-process with the test SparkSession."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from pipelines import clickstream, offline_load
from tests.compat.conftest import BrokerProcess
from tests.spark.test_batch import _produce, _topic

pytestmark = pytest.mark.slow


def test_offline_load_reruns_continue_exactly_where_the_last_stopped(spark: Any, spark_broker: BrokerProcess,
                                                                     tmp_path: Path) -> None:
    topic = _topic(spark_broker, partitions=3)
    out = str(tmp_path / "out")
    day = 86_400_000
    base = 1_700_000_000_000  # 2023-11-14T22:13:20Z: records 0..99 on that day, 100.. the next ones
    _produce(spark_broker, topic, 300, timestamp=base)
    first = offline_load.run(spark, spark_broker.bootstrap, topic, out, log=lambda _: None)
    assert first.ranges == {p: (0, 100) for p in range(3)} and first.total == 300

    (tmp_path / "out" / "date=2023-11-14" / "part-orphan.parquet").write_bytes(b"from a run that died")
    _produce(spark_broker, topic, 150, start=300, timestamp=base + day - 300)
    second = offline_load.run(spark, spark_broker.bootstrap, topic, out, log=lambda _: None)
    assert second.ranges == {p: (100, 150) for p in range(3)} and second.total == 150
    assert second.removed_orphans == ["date=2023-11-14/part-orphan.parquet"]
    assert offline_load.run(spark, spark_broker.bootstrap, topic, out, log=lambda _: None).total == 0

    rows = spark.read.parquet(out).select("partition", "offset", "value", "date").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in range(3) for o in range(150)]
    assert sorted(r.value for r in rows) == sorted(b"v%d" % i for i in range(450))
    by_date: dict[str, int] = defaultdict(int)
    for r in rows:
        by_date[str(r.date)] += 1
    assert by_date == {"2023-11-14": 300, "2023-11-15": 150}
    runs = offline_load.committed_runs(spark, out)
    assert [r["run_id"] for r in runs] == sorted([first.run_id, second.run_id])
    assert runs[-1]["ranges"] == {str(p): [100, 150] for p in range(3)}


def _expected(events: list[dict[str, Any]], watermark_ms: int) -> dict[tuple[str, str], tuple[int, int, int]]:
    """Per (window start, page): views, users, sessions, for the 1-minute windows closed by the watermark."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        t = dt.datetime.fromisoformat(e["event_time"].replace("Z", "+00:00"))
        start = t.replace(second=0, microsecond=0)
        if (start + dt.timedelta(minutes=1)).timestamp() * 1000 <= watermark_ms:
            groups[(start.strftime("%Y-%m-%dT%H:%M"), e["page"])].append(e)
    return {k: (len(v), len({e["user_id"] for e in v}), len({e["session_id"] for e in v})) for k, v in groups.items()}


def test_clickstream_windowed_aggregates_match_the_generated_events(spark: Any, spark_broker: BrokerProcess,
                                                                    tmp_path: Path) -> None:
    clicks = _topic(spark_broker, partitions=2)
    aggregates_topic = _topic(spark_broker, partitions=1)
    start_ms = 1_700_000_012_345
    # 2 events per second of event time: 250 s; lateness up to 30 s, under the 1-minute watermark delay and
    # under what the micro-batches (at most 200 records, split over both partitions) run ahead of each
    # other, so no event arrives behind the watermark.
    events = clickstream.generate_events(500, start_ms=start_ms, event_rate=2.0, max_lateness=30.0, users=40,
                                         seed=7)
    assert clickstream.produce(events, spark_broker.bootstrap, clicks, log=lambda _: None,
                               client={"batch.size": "8192"})  # the test broker's 16 KiB segments == 500
    lines: list[str] = []
    clickstream.run_aggregate(spark, spark_broker.bootstrap, clicks, aggregates_topic, str(tmp_path / "agg"),
                              str(tmp_path / "checkpoint"), window="1 minute", watermark="1 minute",
                              max_offsets_per_trigger=200, available_now=True, log=lines.append)
    assert any(line.startswith("batch ") for line in lines) and lines[-1].startswith("done: 500 events")

    max_event = max(dt.datetime.fromisoformat(e["event_time"].replace("Z", "+00:00")) for e in events)
    expected = _expected(events, int(max_event.timestamp() * 1000) - 60_000)
    assert len(expected) > 10

    parquet = spark.read.parquet(str(tmp_path / "agg")).collect()
    got = {(r.window_start.strftime("%Y-%m-%dT%H:%M"), r.page): (r.views, r.users, r.sessions) for r in parquet}
    assert len(parquet) == len(got) and got == expected

    consumer = Consumer({"bootstrap.servers": spark_broker.bootstrap, "group.id": f"t-{aggregates_topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([aggregates_topic])
    from_topic: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 30
    try:
        while len(from_topic) < len(expected) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                from_topic[msg.key().decode()] = json.loads(msg.value())
    finally:
        consumer.close()
    got_topic = {(v["window_start"][:16], v["page"]): (v["views"], v["users"], v["sessions"])
                 for v in from_topic.values()}
    assert got_topic == expected
    assert all(k == f"{v['page']}@{v['window_start'][:19]}Z" for k, v in from_topic.items())
