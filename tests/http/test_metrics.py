"""``/metrics`` against what real clients did: produce, consume and commit with confluent-kafka, then scrape and
compare each figure with what the test knows it produced, fetched and committed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.http.collector import render, snapshot
from odradek.quota.entity import CLIENT_ID, PRODUCER_BYTE_RATE
from tests.broker import inprocess
from tests.http.scrape import get, metrics, value

N = 200
VALUE_SIZE = 100
RECORD_OVERHEAD = 24  # a record's own varints and attributes (no key, no headers), generously
BATCH_OVERHEAD = 61  # a v2 batch header


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[inprocess.InProcessBroker]:
    yield from inprocess.serving(tmp_path_factory, "http-metrics", {"http.listeners": "http://127.0.0.1:0"})


@pytest.fixture(scope="module")
def url(node: inprocess.InProcessBroker) -> str:
    [bound] = node.broker.http_urls
    assert not bound.endswith(":0")
    return bound


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "none", "acks": "all"})
    for i in range(n):
        p.produce(topic, b"%0*d" % (VALUE_SIZE, i))
    assert p.flush(30) == 0


def _consume(bootstrap: str, topic: str, group: str, n: int) -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
    assert got == n
    return c


def test_produce_consume_and_commit_show_in_the_figures(node: inprocess.InProcessBroker, url: str) -> None:
    topic, group = "http-metrics-traffic", "http-metrics-group"
    _produce(node.bootstrap, topic, N)
    s = metrics(url)
    assert value(s, "odradek_topic_messages_in_total", topic=topic) == N
    bytes_in = value(s, "odradek_topic_bytes_in_total", topic=topic)
    assert bytes_in is not None
    assert N * VALUE_SIZE < bytes_in <= N * (VALUE_SIZE + RECORD_OVERHEAD) + N * BATCH_OVERHEAD
    assert value(s, "odradek_topic_produce_requests_total", topic=topic) >= 1
    assert value(s, "odradek_topic_failed_produce_requests_total", topic=topic) == 0
    assert value(s, "odradek_log_end_offset", topic=topic, partition="0") == N
    assert value(s, "odradek_log_high_watermark", topic=topic, partition="0") == N
    assert value(s, "odradek_log_start_offset", topic=topic, partition="0") == 0
    size = value(s, "odradek_log_size_bytes", topic=topic, partition="0")
    assert size == bytes_in  # batches are stored as produced
    assert value(s, "odradek_log_segments", topic=topic, partition="0") == 1
    assert value(s, "odradek_partition_in_sync_replicas", topic=topic, partition="0") == 1
    produces = value(s, "odradek_requests_total", request="Produce")
    assert produces is not None and produces >= 1
    # every produce was answered (single node: none deferred): one total-time observation per request
    assert value(s, "odradek_request_total_time_seconds_count", request="Produce") == produces
    assert value(s, "odradek_request_total_time_seconds_bucket", request="Produce", le="+Inf") == produces
    assert value(s, "odradek_request_queue_time_seconds_count", request="Produce") == produces

    c = _consume(node.bootstrap, topic, group, N)
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 150)], asynchronous=False)
        s = metrics(url)
        bytes_out = value(s, "odradek_topic_bytes_out_total", topic=topic)
        assert bytes_out is not None and bytes_in <= bytes_out < 2 * bytes_in  # every batch at least once
        assert value(s, "odradek_topic_fetch_requests_total", topic=topic) >= 1
        assert value(s, "odradek_consumer_group_committed_offset", group=group, topic=topic, partition="0") == 150
        assert value(s, "odradek_consumer_group_lag", group=group, topic=topic, partition="0") == N - 150
        assert value(s, "odradek_connections", listener="PLAINTEXT") >= 1
        assert value(s, "odradek_requests_total", request="OffsetCommit") >= 1
        members = [
            v
            for (name, labels), v in s.items()
            if name == "odradek_consumer_group_members" and ("group", group) in labels
        ]
        assert members == [1]
    finally:
        c.close()


def test_broker_wide_figures_of_a_single_node(node: inprocess.InProcessBroker, url: str) -> None:
    _produce(node.bootstrap, "http-metrics-wide", 3)
    s = metrics(url)
    partitions = value(s, "odradek_partitions")
    assert partitions is not None and partitions >= 1
    assert value(s, "odradek_leader_partitions") == partitions  # a single node leads everything it has
    assert value(s, "odradek_under_replicated_partitions") == 0
    assert value(s, "odradek_under_min_isr_partitions") == 0
    assert value(s, "odradek_offline_partitions") == 0
    assert value(s, "odradek_active_controller") == 1
    assert value(s, "odradek_isr_shrinks_total") == 0
    assert value(s, "odradek_cleaner_uncleanable_partitions") == 0
    [data_dir] = node.broker.config.log_dirs
    assert value(s, "odradek_log_dir_offline", dir=str(data_dir.resolve())) == 0
    assert value(s, "odradek_log_dir_total_bytes", dir=str(data_dir.resolve())) > 0
    info = [labels for (name, labels) in s if name == "odradek_broker_info"]
    assert info and ("node_id", "1") in info[0]


def test_a_refused_produce_is_counted_as_failed(node: inprocess.InProcessBroker, url: str) -> None:
    _consume(node.bootstrap, "http-metrics-traffic", "http-metrics-other", N).close()  # __consumer_offsets exists
    p = Producer({"bootstrap.servers": node.bootstrap, "message.timeout.ms": 5000, "retries": 0})
    errors: list[object] = []
    p.produce("__consumer_offsets", b"x", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    p.flush(10)
    assert errors and errors[0] is not None  # internal topic: INVALID_TOPIC_EXCEPTION
    s = metrics(url)
    assert value(s, "odradek_topic_failed_produce_requests_total", topic="__consumer_offsets") >= 1
    assert value(s, "odradek_topic_messages_in_total", topic="__consumer_offsets") == 0
    # Kafka's ErrorsPerSec: the error code in the produce response, by name
    assert value(s, "odradek_request_errors_total", request="Produce", error="INVALID_TOPIC_EXCEPTION") >= 1
    # and the codes of responses built from entities (Metadata: NONE for each topic and partition asked about)
    assert value(s, "odradek_request_errors_total", request="Metadata", error="NONE") >= 1


def test_metrics_are_gzipped_for_clients_that_ask(node: inprocess.InProcessBroker, url: str) -> None:
    import gzip
    import urllib.request

    request = urllib.request.Request(url + "/metrics", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=10) as r:
        raw = r.read()
        encoding = r.headers.get("Content-Encoding")
    assert encoding == "gzip"  # the body is past the 16 KiB threshold (every API's histograms)
    assert "odradek_broker_info" in gzip.decompress(raw).decode()
    status, headers, body = get(url + "/metrics")  # not asked: plain
    assert status == 200 and "Content-Encoding" not in headers and len(body) >= 16 * 1024


def test_render_of_a_snapshot_is_prometheus_text(node: inprocess.InProcessBroker) -> None:
    snap = node._run(snapshot(node.broker))
    text = render(snap).decode()
    assert "# TYPE odradek_request_total_time_seconds histogram" in text
    assert "# HELP odradek_topic_messages_in_total" in text and "MessagesInPerSec" in text


def test_throttle_time_of_a_client_over_its_quota(tmp_path: Path) -> None:
    b = inprocess.InProcessBroker(tmp_path, {"http.listeners": "http://127.0.0.1:0"})
    try:
        [url] = b.broker.http_urls
        # 1,000 B/s over the quota's 11 one-second windows: the rate is measured over at least 10 s, so the third
        # 4 KB record (12 KB in all) is over it by 2 s of throttle, the earlier ones are not
        b._run(b.broker.alter_client_quota(((CLIENT_ID, "slow-producer"),), {PRODUCER_BYTE_RATE: "1000"}))
        p = Producer({"bootstrap.servers": b.bootstrap, "client.id": "slow-producer", "linger.ms": 0})
        for i in range(3):
            p.produce("http-metrics-quota", b"%05d" % i + b"x" * 4000)
            assert p.flush(30) == 0
        s = metrics(url)
        throttled = {
            dict(labels)["type"]: v
            for (name, labels), v in s.items()
            if name == "odradek_quota_throttle_time_seconds_total" and dict(labels)["client_id"] == "slow-producer"
        }
        assert 0 < throttled.get("produce", 0) < 5  # seconds: about 2 (see above)
        responses = [
            v
            for (name, labels), v in s.items()
            if name == "odradek_quota_throttled_responses_total" and ("client_id", "slow-producer") in labels
        ]
        assert sum(responses) >= 1
    finally:
        b.close()
