"""Compaction in a 3-broker cluster: every replica cleans its own log (as Kafka), a follower that was away while
its leader cleaned fetches across the cleaned range, and whichever replica leads afterwards, a reader from the
beginning gets the latest value of every key at the offset its producer was given."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from odradek.cluster.zk.server import ZooKeeperServer
from tests.cluster.brokers import Cluster, serving, wait_until
from tests.cluster.zk_process import unique_chroot

pytestmark = pytest.mark.slow

OVERRIDES = ["log.cleaner.backoff.ms=200", f"log.cleaner.dedupe.buffer.size={4 << 20}"]
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01",
             "min.insync.replicas": "2", "delete.retention.ms": "100"}
KEYS = 40

Model = dict[bytes, tuple[int, bytes | None]]  # key -> (offset, value) of its latest record


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from serving(Cluster(tmp_path_factory.mktemp("compaction"), unique_chroot(zookeeper), overrides=OVERRIDES))


def _produce(cluster: Cluster, topic: str, rounds: int, tag: str, model: Model, tombstones: int = 0) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "batch.size": 8000})
    acked: list[tuple[bytes, bytes | None, int]] = []

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        acked.append((msg.key(), msg.value(), msg.offset()))  # type: ignore[attr-defined]

    for r in range(rounds):
        for k in range(KEYS):
            p.produce(topic, key=b"key-%02d" % k, value=b"%s round %d " % (tag.encode(), r) + os.urandom(80),
                      partition=0, on_delivery=on_delivery)
        p.poll(0)
    for k in range(tombstones):
        p.produce(topic, key=b"key-%02d" % k, value=None, partition=0, on_delivery=on_delivery)
    assert p.flush(60) == 0
    for key, value, offset in sorted(acked, key=lambda a: a[2]):
        model[key] = (offset, value)


def _cleaned_up_to(cluster: Cluster, broker_id: int, topic: str) -> int:
    found = re.findall(rf"{re.escape(topic)}-0: cleaned up to offset (\d+)", cluster.brokers[broker_id].log())
    return max(map(int, found), default=-1)


def _active_base(cluster: Cluster, broker_id: int, topic: str) -> int:
    d = cluster.brokers[broker_id].data_dir / f"{topic}-0"
    return max((int(f.name[:-4]) for f in d.glob("*.log")), default=0)


def _read_state(cluster: Cluster, topic: str, last_offset: int) -> Model:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    state: Model = {}
    offsets: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while not offsets or offsets[-1] < last_offset:
            assert time.monotonic() < deadline, f"read up to {offsets[-1] if offsets else None} of {last_offset}"
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            offsets.append(m.offset())
            state[m.key()] = (m.offset(), m.value())
    finally:
        c.close()
    assert offsets == sorted(set(offsets))
    return state


def _live(model: Model) -> dict[bytes, tuple[int, bytes | None]]:
    return {k: v for k, v in model.items() if v[1] is not None}


def test_replicas_clean_independently_and_agree_across_leader_changes(cluster: Cluster) -> None:
    topic = f"compacted-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: [1, 2, 3]}, topic_configs=COMPACTED)])
    finally:
        admin.close()
    wait_until(lambda: cluster.partitions(topic) and len(cluster.isr(topic)) == 3, what=f"a full ISR for {topic}")
    model: Model = {}
    _produce(cluster, topic, 4, "first", model)
    b3 = cluster.brokers[3]
    assert b3.stop() == 0
    _produce(cluster, topic, 12, "while 3 was away", model, tombstones=5)
    _produce(cluster, topic, 4, "after the tombstones", model)
    for b in (1, 2):  # each replica cleans its own log
        wait_until(lambda b=b: _cleaned_up_to(cluster, b, topic) >= _active_base(cluster, b, topic) > 0,  # type: ignore[misc]
                   timeout_s=60, what=f"broker {b} to clean {topic}")
    b3.start()  # it fetches from its log end, across the range its leader has cleaned
    wait_until(lambda: len(cluster.isr(topic)) == 3, timeout_s=60, what="broker 3 back in the ISR")
    last = max(o for o, _ in model.values())
    assert {k: v for k, v in _read_state(cluster, topic, last).items() if v[1] is not None} == _live(model)
    wait_until(lambda: _cleaned_up_to(cluster, 3, topic) >= 0, timeout_s=60, what="broker 3 to clean its own log")

    leaders = [cluster.leader(topic)]
    stopped = []
    for victim in (1, 2):  # broker 1 leads; then 2 or 3; then 3, the replica that fetched across cleaned ranges
        b = cluster.brokers[victim]
        assert b.stop() == 0
        stopped.append(b)
        wait_until(lambda: cluster.leader_now(topic) not in (-1, *[s.broker_id for s in stopped]), timeout_s=60,
                   what="a new leader")
        leaders.append(cluster.leader(topic))
        state = _read_state(cluster, topic, last)
        assert {k: v for k, v in state.items() if v[1] is not None} == _live(model), f"leader {leaders[-1]}"
    assert leaders[-1] == 3, f"leaders {leaders}"
    for b in stopped:
        b.start()
    wait_until(lambda: len(cluster.isr_now(topic)) == 3, timeout_s=60, what="a full ISR again")
