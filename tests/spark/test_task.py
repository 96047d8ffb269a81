"""A Spark task's read of one range, outside Spark: the fetch reader against the confluent-kafka reader."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.spark import fetcher
from odradek.spark.offsets import DataLossError, OffsetRange
from odradek.spark.task import RangePartition, fetch_reader_applies, fetch_settings, read_consumed, read_fetched
from tests.compat.conftest import BrokerProcess

pytestmark = pytest.mark.slow  # a broker process

READERS: dict[str, Callable[[RangePartition], Iterator[pa.RecordBatch]]] = {
    "fetch": read_fetched, "consumer": read_consumed}


def _topic(broker: BrokerProcess, partitions: int = 2) -> str:
    name = f"task-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=20)
    return name


def _rows(reader: Callable[[RangePartition], Iterator[pa.RecordBatch]], part: RangePartition) -> list[dict[str, Any]]:
    return [row for batch in reader(part) for row in batch.to_pylist()]


def _part(broker: BrokerProcess, topic: str, partition: int, start: int, end: int, *, headers: bool = True,
          fail: bool = True, **client: str) -> RangePartition:
    return RangePartition({"bootstrap.servers": broker.bootstrap, **client}, OffsetRange(topic, partition, start, end),
                          headers, fail, 5_000)


def test_both_readers_give_the_same_rows_for_every_codec(spark_broker: BrokerProcess) -> None:
    topic = _topic(spark_broker)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": spark_broker.bootstrap, "compression.type": codec, "linger.ms": 5})
        for i in range(1000):
            p.produce(topic, partition=i % 2, value=None if i % 97 == 0 else b"v%d" % i,
                      key=None if i % 3 else b"k%d" % i,
                      headers=[("h", b"x"), ("none", None)] if i % 5 == 0 else None)
        assert p.flush(20) == 0
    for start, end in ((0, 2500), (13, 2400), (999, 1001), (2499, 2500)):
        part = _part(spark_broker, topic, 1, start, end)
        fetched = _rows(read_fetched, part)
        assert [r["offset"] for r in fetched] == list(range(start, end))
        assert fetched == _rows(read_consumed, part)
    no_headers = _part(spark_broker, topic, 0, 0, 2500, headers=False)
    assert _rows(read_fetched, no_headers) == _rows(read_consumed, no_headers)


def test_read_committed_both_readers_leave_out_aborted_transactions(spark_broker: BrokerProcess) -> None:
    topic = _topic(spark_broker, partitions=1)
    plain = Producer({"bootstrap.servers": spark_broker.bootstrap, "linger.ms": 0})
    txn = Producer({"bootstrap.servers": spark_broker.bootstrap, "transactional.id": f"t-{topic}",
                    "linger.ms": 0})
    txn.init_transactions(30)
    committed: list[bytes] = []
    for round_ in range(6):
        txn.begin_transaction()
        for i in range(30):
            value = b"r%d-%d" % (round_, i)
            txn.produce(topic, partition=0, value=value)
            if i % 10 == 0:  # plain records between the transaction's batches
                plain.produce(topic, partition=0, value=b"plain-" + value)
                assert plain.flush(10) == 0
                committed.append(b"plain-" + value)
            txn.flush(10)
        if round_ % 2:
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)
            committed += [b"r%d-%d" % (round_, i) for i in range(30)]
    watermarks = Consumer({"bootstrap.servers": spark_broker.bootstrap, "group.id": "x"})
    end = watermarks.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    watermarks.close()
    uncommitted = _rows(read_fetched, _part(spark_broker, topic, 0, 0, end))
    assert len(uncommitted) == 6 * 30 + 6 * 3  # read_uncommitted: aborted records too, markers never
    for start in (0, 17, 95):
        part = _part(spark_broker, topic, 0, start, end, **{"isolation.level": "read_committed"})
        fetched = _rows(read_fetched, part)
        assert fetched == [r for r in uncommitted if r["offset"] >= start and r["value"] in committed]
        assert fetched == _rows(read_consumed, part)
    whole = _rows(read_fetched, _part(spark_broker, topic, 0, 0, end, **{"isolation.level": "read_committed"}))
    assert sorted(r["value"] for r in whole) == sorted(committed)


def test_batches_larger_than_the_fetch_size_still_arrive(spark_broker: BrokerProcess) -> None:
    topic = _topic(spark_broker, partitions=1)
    p = Producer({"bootstrap.servers": spark_broker.bootstrap, "linger.ms": 50})
    for i in range(200):
        p.produce(topic, value=b"%d" % i + b"x" * 500)
    assert p.flush(20) == 0
    part = _part(spark_broker, topic, 0, 0, 200, **{"max.partition.fetch.bytes": "1024"})
    assert [r["offset"] for r in _rows(read_fetched, part)] == list(range(200))


@pytest.mark.parametrize("reader", READERS)
def test_data_loss_both_ways(spark_broker: BrokerProcess, reader: str) -> None:
    topic = _topic(spark_broker, partitions=1)
    p = Producer({"bootstrap.servers": spark_broker.bootstrap})
    for i in range(100):
        p.produce(topic, value=b"v%d" % i)
        p.flush(10)  # one batch per record, so deleting records removes batches
    admin = AdminClient({"bootstrap.servers": spark_broker.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 50)]).values():
        f.result(timeout=20)
    read = READERS[reader]
    with pytest.raises(DataLossError, match=r"\[10, 100\).*failOnDataLoss=false"):
        _rows(read, _part(spark_broker, topic, 0, 10, 100))
    lenient = _part(spark_broker, topic, 0, 10, 100, fail=False)
    assert [r["offset"] for r in _rows(read, lenient)] == list(range(50, 100))
    # planned past the log end (the log was truncated after planning)
    with pytest.raises(DataLossError, match="the log ends at 100"):
        _rows(read, _part(spark_broker, topic, 0, 90, 120))
    lenient = _part(spark_broker, topic, 0, 90, 120, fail=False)
    assert [r["offset"] for r in _rows(read, lenient)] == list(range(90, 100))


def test_a_dead_bootstrap_server_is_skipped(spark_broker: BrokerProcess) -> None:
    topic = _topic(spark_broker, partitions=1)
    p = Producer({"bootstrap.servers": spark_broker.bootstrap})
    p.produce(topic, value=b"one")
    assert p.flush(10) == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: connection refused
        part = RangePartition({"bootstrap.servers": f"{dead},{spark_broker.bootstrap}"},
                              OffsetRange(topic, 0, 0, 1), False, True, 5_000)
        assert [r["value"] for r in _rows(read_fetched, part)] == [b"one"]


def test_no_reachable_broker_fails_after_bounded_retries() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = ("127.0.0.1", s.getsockname()[1])
        settings = fetcher.Settings(timeout_s=1, max_retries=2, backoff_s=0.01)
        with fetcher.PartitionFetcher([address], "t", 0, settings) as f, \
                pytest.raises(fetcher.FetchError, match=r"failed 3 times.*no bootstrap server answered"):
            f.fetch(0)


def test_which_reader_and_settings() -> None:
    assert fetch_reader_applies({"bootstrap.servers": "h:1"})
    assert fetch_reader_applies({"security.protocol": "PLAINTEXT"})
    assert not fetch_reader_applies({"security.protocol": "SASL_SSL"})
    assert not fetch_reader_applies({"ssl.ca.location": "/ca.pem"})
    assert fetch_reader_applies({"isolation.level": "read_committed"})
    assert fetch_settings({}).isolation_level == 0
    assert fetch_settings({"isolation.level": "READ_COMMITTED"}).isolation_level == 1
    with pytest.raises(ValueError, match=r"kafka.isolation.level='serializable' must be read_uncommitted or"):
        fetch_settings({"isolation.level": "serializable"})
    s = fetch_settings({"client.id": "me", "request.timeout.ms": "5000", "fetch.wait.max.ms": "10",
                        "max.partition.fetch.bytes": "65536"})
    assert (s.client_id, s.timeout_s, s.max_wait_ms, s.partition_max_bytes) == ("me", 5.0, 10, 65536)
    with pytest.raises(ValueError, match=r"kafka.max.partition.fetch.bytes='lots' must be an integer"):
        fetch_settings({"max.partition.fetch.bytes": "lots"})
    assert fetcher.parse_bootstrap("PLAINTEXT://a:1, [::1]:2") == [("a", 1), ("::1", 2)]
    with pytest.raises(ValueError, match="is not host:port"):
        fetcher.parse_bootstrap("nohost")
