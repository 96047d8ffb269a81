"""Streaming reads through Spark (local[2]): micro-batches from the checkpoint, admission control,
new partitions, data loss, and exactly-once output into a file sink across restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.compat.conftest import BrokerProcess
from tests.spark.test_batch import _produce, _topic

pytestmark = pytest.mark.slow


def _run(spark: Any, broker: BrokerProcess, topic: str, out: Path, **options: str) -> int:
    """One Trigger.AvailableNow run into Parquet; returns how many micro-batches it took."""
    reader = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (reader.load().select("partition", "offset", "value").writeStream.format("parquet")
             .option("path", str(out / "data")).option("checkpointLocation", str(out / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the streaming query did not finish"
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return sum(1 for p in query.recentProgress if p["numInputRows"] > 0)


def _output(spark: Any, out: Path) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in spark.read.parquet(str(out / "data")).collect())


def test_restarts_continue_from_the_checkpoint_without_duplicates(spark: Any, spark_broker: BrokerProcess,
                                                                   tmp_path: Path) -> None:
    topic = _topic(spark_broker, partitions=2)
    _produce(spark_broker, topic, 100, partitions=2)
    assert _run(spark, spark_broker, topic, tmp_path, maxOffsetsPerTrigger="30") == 4  # 30+30+30+10
    assert _output(spark, tmp_path) == [(p, o) for p in range(2) for o in range(50)]
    _produce(spark_broker, topic, 40, partitions=2, start=100)
    _run(spark, spark_broker, topic, tmp_path, maxOffsetsPerTrigger="30")
    assert _output(spark, tmp_path) == [(p, o) for p in range(2) for o in range(70)]


def test_new_partitions_are_read_from_their_beginning(spark: Any, spark_broker: BrokerProcess,
                                                      tmp_path: Path) -> None:
    topic = _topic(spark_broker, partitions=1)
    _produce(spark_broker, topic, 10, partitions=1)
    _run(spark, spark_broker, topic, tmp_path)
    admin = AdminClient({"bootstrap.servers": spark_broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=20)
    _produce(spark_broker, topic, 20, partitions=2, start=10)
    _run(spark, spark_broker, topic, tmp_path)
    assert _output(spark, tmp_path) == [(0, o) for o in range(20)] + [(1, o) for o in range(10)]


def test_data_removed_before_it_was_read(spark: Any, spark_broker: BrokerProcess, tmp_path: Path) -> None:
    topic = _topic(spark_broker, partitions=1)
    _produce(spark_broker, topic, 10, partitions=1)
    _run(spark, spark_broker, topic, tmp_path)
    _produce(spark_broker, topic, 30, partitions=1, start=10)
    admin = AdminClient({"bootstrap.servers": spark_broker.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 25)]).values():
        f.result(timeout=20)
    with pytest.raises(Exception, match="failOnDataLoss"):
        _run(spark, spark_broker, topic, tmp_path)
    _run(spark, spark_broker, topic, tmp_path, failOnDataLoss="false")
    assert _output(spark, tmp_path) == [(0, o) for o in [*range(10), *range(25, 40)]]


def test_streaming_options_are_checked(spark: Any, spark_broker: BrokerProcess, tmp_path: Path) -> None:
    topic = _topic(spark_broker, partitions=1)
    with pytest.raises(Exception, match="ending offsets are for batch queries"):
        _run(spark, spark_broker, topic, tmp_path, endingOffsets="latest")


def test_killed_in_the_middle_of_a_batch_the_file_sink_has_each_record_once(
        spark: Any, spark_broker: BrokerProcess, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    topic = _topic(spark_broker, partitions=2)
    _produce(spark_broker, topic, 400, partitions=2)
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo))
    cmd = [sys.executable, "-m", "tests.spark.stream_job", spark_broker.bootstrap, topic, str(tmp_path)]
    job = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        commits = tmp_path / "checkpoint" / "commits"
        deadline = time.monotonic() + 120
        # let two micro-batches commit, then kill while the next one is running
        while time.monotonic() < deadline and len(list(commits.glob("[0-9]*")) if commits.exists() else []) < 2:
            time.sleep(0.1)
        assert job.poll() is None, "the streaming job ended before it could be killed"
        offsets = tmp_path / "checkpoint" / "offsets"
        while time.monotonic() < deadline and len(list(offsets.glob("[0-9]*"))) <= len(list(commits.glob("[0-9]*"))):
            time.sleep(0.02)
        time.sleep(0.2)
        job.send_signal(signal.SIGKILL)
        job.wait(30)
    finally:
        if job.poll() is None:
            job.kill()
    assert len(list((tmp_path / "checkpoint" / "commits").glob("[0-9]*"))) < 10, "the kill came too late"
    rerun = subprocess.run([*cmd, "available-now"], cwd=repo, env=env, capture_output=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr.decode(errors="replace")[-3000:]
    assert _output(spark, tmp_path) == [(p, o) for p in range(2) for o in range(200)]


def test_streaming_write_to_a_topic(spark: Any, spark_broker: BrokerProcess, tmp_path: Path) -> None:
    source = _topic(spark_broker, partitions=2)
    target = _topic(spark_broker, partitions=1)
    _produce(spark_broker, source, 60, partitions=2)
    query = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", spark_broker.bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").load()
             .selectExpr("key", "upper(cast(value as string)) as value").writeStream.format("odradek")
             .option("kafka.bootstrap.servers", spark_broker.bootstrap).option("topic", target)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    back = (spark.read.format("odradek").option("kafka.bootstrap.servers", spark_broker.bootstrap)
            .option("subscribe", target).load().collect())
    assert sorted(r.value for r in back) == sorted(b"V%d" % i for i in range(60))


def test_killed_streaming_writes_to_a_topic_leave_each_record_once(
        spark: Any, spark_broker: BrokerProcess, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as TP

    source = _topic(spark_broker, partitions=2)
    target = _topic(spark_broker, partitions=2)
    _produce(spark_broker, source, 400, partitions=2)
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo))
    cmd = [sys.executable, "-m", "tests.spark.stream_job", spark_broker.bootstrap, source, str(tmp_path),
           f"to-topic={target}"]
    commits = tmp_path / "checkpoint" / "commits"
    offsets = tmp_path / "checkpoint" / "offsets"

    def count(d: Path) -> int:
        return len(list(d.glob("[0-9]*"))) if d.exists() else 0

    for round_ in range(2):  # kill twice inside a running micro-batch
        job = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            goal = count(commits) + 2
            while time.monotonic() < deadline and count(commits) < goal:
                time.sleep(0.1)
            assert job.poll() is None, "the streaming job ended before it could be killed"
            while time.monotonic() < deadline and count(offsets) <= count(commits):
                time.sleep(0.02)
            time.sleep(0.3 + 0.2 * round_)
            job.send_signal(signal.SIGKILL)
            job.wait(30)
        finally:
            if job.poll() is None:
                job.kill()
    assert count(commits) < 10, "the kills came too late"
    rerun = subprocess.run([*cmd, "available-now"], cwd=repo, env=env, capture_output=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr.decode(errors="replace")[-3000:]

    def read(isolation: str) -> list[bytes]:
        c = Consumer({"bootstrap.servers": spark_broker.bootstrap, "group.id": f"check-{isolation}",
                      "isolation.level": isolation, "enable.auto.commit": False})
        c.assign([TP(target, p, OFFSET_BEGINNING) for p in range(2)])
        got: list[bytes] = []
        quiet = time.monotonic()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and time.monotonic() - quiet < 2:
            msgs = [m.value() for m in c.consume(500, timeout=0.2) if m.error() is None]
            if msgs:
                got += msgs
                quiet = time.monotonic()
        c.close()
        return got

    committed = read("read_committed")
    expected = [b"v%d" % i for i in range(400)]
    assert sorted(committed) == sorted(expected), f"{len(committed)} records, {len(set(committed))} distinct"
    assert len(read("read_uncommitted")) >= 400
