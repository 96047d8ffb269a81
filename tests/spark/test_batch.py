"""Batch reads and writes through Spark (local[2]) against a real broker process."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat.conftest import BrokerProcess

pytestmark = pytest.mark.slow  # a JVM and a broker process


def _topic(broker: BrokerProcess, partitions: int = 3) -> str:
    name = f"spark-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=20)
    return name


def _produce(broker: BrokerProcess, topic: str, n: int, partitions: int = 3, start: int = 0,
             timestamp: int | None = None) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False})
    for i in range(start, start + n):
        kwargs: dict[str, Any] = {"headers": [("i", str(i).encode())]}
        if timestamp is not None:
            kwargs["timestamp"] = timestamp + i
        p.produce(topic, value=b"v%d" % i, key=b"k%d" % i, partition=i % partitions, **kwargs)
    assert p.flush(20) == 0


def _read(spark: Any, broker: BrokerProcess, **options: str) -> Any:
    reader = spark.read.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_every_record_once_across_partitions(spark: Any, spark_broker: BrokerProcess) -> None:
    topic = _topic(spark_broker)
    _produce(spark_broker, topic, 900)
    df = _read(spark, spark_broker, subscribe=topic, minPartitions="8")
    assert df.rdd.getNumPartitions() >= 8
    rows = df.select("partition", "offset", "key", "value", "topic", "timestampType").collect()
    assert len(rows) == 900 and len({(r.partition, r.offset) for r in rows}) == 900
    assert {r.value for r in rows} == {b"v%d" % i for i in range(900)}
    assert {r.topic for r in rows} == {topic} and {r.timestampType for r in rows} == {0}
    for p in range(3):
        assert sorted(r.offset for r in rows if r.partition == p) == list(range(300))


def test_offsets_options_select_exact_ranges(spark: Any, spark_broker: BrokerProcess) -> None:
    topic = _topic(spark_broker)
    _produce(spark_broker, topic, 300)
    df = _read(spark, spark_broker, assign=f'{{"{topic}": [0, 2]}}',
               startingOffsets=f'{{"{topic}": {{"0": 10, "2": -2}}}}',
               endingOffsets=f'{{"{topic}": {{"0": 20, "2": -1}}}}')
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 20)] + [(2, o) for o in range(100)]
    pattern = _read(spark, spark_broker, subscribePattern=f"{topic[:-3]}.*", endingOffsets="latest")
    assert pattern.filter(pattern.topic == topic).count() == 300


def test_timestamp_bounds_and_headers(spark: Any, spark_broker: BrokerProcess) -> None:
    topic = _topic(spark_broker, partitions=1)
    base = 1_700_000_000_000
    _produce(spark_broker, topic, 100, partitions=1, timestamp=base)
    df = _read(spark, spark_broker, subscribe=topic, startingTimestamp=str(base + 40),
               endingTimestamp=str(base + 60), includeHeaders="true")
    rows = df.orderBy("offset").collect()
    assert [r.offset for r in rows] == list(range(40, 60))
    assert rows[0].headers[0].key == "i" and rows[0].headers[0].value == b"40"
    assert int(rows[0].timestamp.timestamp() * 1000) == base + 40
    by_partition = _read(spark, spark_broker, subscribe=topic,
                         startingOffsetsByTimestamp=f'{{"{topic}": {{"0": {base + 95}}}}}')
    assert by_partition.count() == 5


def test_fail_on_data_loss_both_ways(spark: Any, spark_broker: BrokerProcess) -> None:
    topic = _topic(spark_broker, partitions=1)
    _produce(spark_broker, topic, 100, partitions=1)
    admin = AdminClient({"bootstrap.servers": spark_broker.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 50)])
    for f in futures.values():
        f.result(timeout=20)
    start = f'{{"{topic}": {{"0": 10}}}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        _read(spark, spark_broker, subscribe=topic, startingOffsets=start).count()
    lenient = _read(spark, spark_broker, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert sorted(r.offset for r in lenient.select("offset").collect()) == list(range(50, 100))


def test_write_then_read_back(spark: Any, spark_broker: BrokerProcess) -> None:
    topic = _topic(spark_broker)
    other = _topic(spark_broker, partitions=1)
    rows = [(f"k{i}", f"value {i}", topic if i % 2 else other, i % 3 if i % 2 else 0) for i in range(200)]
    df = spark.createDataFrame(rows, "key string, value string, topic string, partition int")
    df.write.format("odradek").option("kafka.bootstrap.servers", spark_broker.bootstrap).mode("append").save()
    deadline = time.monotonic() + 20
    back = _read(spark, spark_broker, subscribe=f"{topic},{other}")
    got = back.select("topic", "partition", "key", "value").collect()
    while len(got) < 200 and time.monotonic() < deadline:
        got = back.select("topic", "partition", "key", "value").collect()
    assert sorted((r.key.decode(), r.value.decode(), r.topic, r.partition) for r in got) == sorted(rows)
    only = spark.createDataFrame([(b"x",)], "value binary")
    only.write.format("odradek").option("kafka.bootstrap.servers", spark_broker.bootstrap) \
        .option("topic", other).mode("append").save()
    assert _read(spark, spark_broker, subscribe=other).count() == 101


def test_write_without_a_topic_is_refused(spark: Any, spark_broker: BrokerProcess) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="topic"):
        df.write.format("odradek").option("kafka.bootstrap.servers", spark_broker.bootstrap).mode("append").save()
