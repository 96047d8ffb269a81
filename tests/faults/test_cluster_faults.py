"""Fault injection against a real 3-broker cluster on a real ZooKeeper: kill -9, SIGSTOP past the session
timeout, a lost controller, a follower down under load, divergent tails, an ISR below min.insync.replicas,
forged replica fetches and an unreachable ZooKeeper.

One ZooKeeper and one cluster per module (``zookeeper.session.timeout.ms=4000``); every test uses its own
topic (replication factor 3, ``min.insync.replicas=2``) and leaves all three brokers running. Producers are
confluent-kafka's, idempotent with acks=all unless a test says otherwise, and write unique values so loss and
duplication are visible. What the replicas hold is read from their data directories (``_replica_records``),
since no client can read from a follower. Every loop and wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from odradek.client.connection import BrokerConnection
from odradek.cluster.zk.server import ZooKeeperServer
from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode
from odradek.protocol.errors import KafkaError as OdradekError
from odradek.protocol.records import decode_records, iter_batches
from tests.broker.process import REPO_ROOT, free_port
from tests.cluster.brokers import Cluster, ClusterBroker, wait_until
from tests.cluster.zk_process import unique_chroot
from tests.cluster.zk_process import zookeeper as zookeeper  # the module's ZooKeeper server

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_S = 4.0  # zookeeper.session.timeout.ms of tests/cluster/brokers.py
MIN_ISR = {"min.insync.replicas": "2"}
REGISTERED = re.compile(r"registered as broker (\d+) in ZooKeeper \(broker epoch (\d+)\)")

Acked = tuple[int, int, bytes]  # (partition, offset, value)


# -- the cluster ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("faults"), unique_chroot(zookeeper)).start()
    try:
        yield c
    finally:
        for b in c.each():
            _resume(b)
        failures = c.stop()
    assert not failures, "\n".join(failures)


@pytest.fixture(autouse=True)
def _whole_cluster_after(cluster: Cluster) -> Iterator[None]:
    """Whatever a test stopped or killed runs again before the next test starts."""
    yield
    for b in cluster.each():
        _resume(b)
    for b in cluster.each():
        if not b.running:
            cluster.start_when_deregistered(b, 3 * SESSION_TIMEOUT_S)
    cluster.wait_for_brokers(len(cluster.brokers))


def _resume(b: ClusterBroker) -> None:
    if b.running:
        os.kill(b.pid, signal.SIGCONT)


def _stop_process(b: ClusterBroker) -> None:
    os.kill(b.pid, signal.SIGSTOP)


def _topic() -> str:
    return f"f-{uuid.uuid4().hex[:10]}"


def _new_leader(cluster: Cluster, topic: str, old: int, partition: int = 0, timeout_s: float = 30.0) -> int:
    return wait_until(lambda: (lead := cluster.leader_now(topic, partition)) not in (-1, old) and lead,
                      timeout_s=timeout_s, what=f"a leader other than broker {old} for {topic}-{partition}")


def _full_isr(cluster: Cluster, topic: str, partitions: int = 1, timeout_s: float = 60.0) -> None:
    wait_until(lambda: all(len(cluster.isr_now(topic, p)) == 3 for p in range(partitions)), timeout_s=timeout_s,
               what=f"a full ISR for {topic}")


def _broker_epochs(b: ClusterBroker) -> list[int]:
    """The broker epochs this broker logged registering with, oldest first."""
    return [int(m.group(2)) for m in REGISTERED.finditer(b.log()) if int(m.group(1)) == b.broker_id]


# -- clients ----------------------------------------------------------------------------------------------


def _producer(cluster: Cluster, **extra: object) -> Producer:
    conf: dict[str, object] = {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                               "enable.idempotence": True, "message.timeout.ms": 60000, "retry.backoff.ms": 50}
    conf.update(extra)
    return Producer(conf)


def _produce(cluster: Cluster, topic: str, values: list[bytes], partition: int = -1, **extra: object) -> list[Acked]:
    """Write ``values`` (to ``partition``, or where the partitioner says) and wait for every acknowledgement;
    the acks, failing on any error."""
    p = _producer(cluster, **extra)
    acked: list[Acked] = []
    errors: list[object] = []

    def on_ack(err: object, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=partition, on_delivery=on_ack)
        if i % 100 == 0:
            p.poll(0)
    assert p.flush(60) == 0, "every record answered"
    assert not errors, errors[:3]
    assert len(acked) == len(values)
    return acked


def _consume_all(cluster: Cluster, topic: str, expected: int, partitions: int = 1,
                 timeout_s: float = 60.0) -> list[Acked]:
    """Every committed record of ``topic`` from offset 0 (stops at ``expected`` records or the timeout)."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 8 << 20})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Acked] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            for msg in c.consume(1000, 0.5):
                if msg.error() is None:
                    out.append((msg.partition(), msg.offset(), msg.value()))
        return out
    finally:
        c.close()


def _check_exactly_once(cluster: Cluster, topic: str, acked: list[Acked], partitions: int = 1) -> None:
    """Every acknowledged record once, at its acknowledged offset; each partition's offsets dense from 0."""
    got = _consume_all(cluster, topic, len(acked), partitions)
    for p in range(partitions):
        offsets = sorted(o for q, o, _ in got if q == p)
        expected = sum(1 for q, _, _ in acked if q == p)
        assert offsets == list(range(expected)), f"{topic}-{p}: offsets dense, {len(offsets)} read, {expected} acked"
    values = [v for _, _, v in got]
    assert len(set(values)) == len(values), "no record twice"
    assert set(acked) <= set(got), f"{len(set(acked) - set(got))} acknowledged records missing or moved"


class Load:
    """An idempotent acks=all producer writing unique values from its own thread until ``stop()``.

    Bounded: at most ``max_records`` records and ``max_s`` seconds. ``acked`` and ``errors`` fill from the
    producer's delivery callbacks (on the load's thread).
    """

    def __init__(self, cluster: Cluster, topic: str, *, max_records: int = 200_000, max_s: float = 150.0,
                 **extra: object) -> None:
        self.topic = topic
        # batches stay below the cluster's 256 KiB segments (a larger one is refused) however much piles up
        self.producer = _producer(cluster, **{"batch.size": 100_000, **extra})
        self.acked: list[Acked] = []
        self.errors: list[object] = []
        self.sent = 0
        self._max_records = max_records
        self._max_s = max_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{topic}", daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _on_ack(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def _run(self) -> None:
        deadline = time.monotonic() + self._max_s
        while not self._stop.is_set() and time.monotonic() < deadline and self.sent < self._max_records:
            for _ in range(10):
                try:
                    self.producer.produce(self.topic, value=f"{self.topic}-{self.sent}".encode(),
                                          on_delivery=self._on_ack)
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0.01)

    def wait_for_progress(self, count: int = 300, timeout_s: float = 30.0) -> None:
        """Wait until ``count`` more records than now are acknowledged."""
        target = len(self.acked) + count
        wait_until(lambda: len(self.acked) >= target or self.errors, timeout_s=timeout_s,
                   what=f"{count} more acknowledged records on {self.topic}")
        assert not self.errors, self.errors[:3]

    def finish(self) -> list[Acked]:
        """Stop writing, wait for every answer; the acknowledged records (fails on any delivery error)."""
        self.__exit__()
        assert self.producer.flush(60) == 0, "every record answered"
        assert not self.errors, self.errors[:3]
        assert len(self.acked) == self.sent
        return self.acked


# -- what a replica holds -----------------------------------------------------------------------------------


def _replica_records(b: ClusterBroker, topic: str, partition: int = 0) -> list[tuple[int, int, bytes | None]] | None:
    """``(offset, leader epoch, value)`` of every record in the broker's segment files for the partition.

    Read from its data directory while it runs: None when a file changed under the reader (a segment rolled or
    deleted, a batch half written), so callers poll.
    """
    directory = b.data_dir / f"{topic}-{partition}"
    out: list[tuple[int, int, bytes | None]] = []
    try:
        for segment in sorted(directory.glob("*.log")):
            data = segment.read_bytes()
            for pos, h in iter_batches(data, allow_partial_tail=True):
                batch = data[pos:pos + h.size]
                out.extend((r.offset, h.partition_leader_epoch, r.value) for r in decode_records(batch))
    except (OSError, OdradekError):
        return None
    return out


def _identical_replicas(cluster: Cluster, topic: str, partition: int = 0,
                        timeout_s: float = 30.0) -> list[tuple[int, int, bytes | None]]:
    """Wait until every broker's copy of the partition holds the same records (offsets, epochs, values)."""

    def same() -> list[tuple[int, int, bytes | None]] | None:
        copies = [_replica_records(b, topic, partition) for b in cluster.each()]
        if any(c is None for c in copies) or any(c != copies[0] for c in copies):
            return None
        return copies[0] or None

    return wait_until(same, timeout_s=timeout_s, what=f"identical replicas of {topic}-{partition}")


# -- 1. kill -9 of the leader, round after round -------------------------------------------------------------


def test_kill_9_of_the_leader_round_after_round_loses_nothing_acknowledged(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, config=MIN_ISR)
    with Load(cluster, topic) as load:
        for _ in range(4):
            load.wait_for_progress()
            leader = cluster.leader_now(topic)
            cluster.brokers[leader].kill()
            _new_leader(cluster, topic, leader)
            load.wait_for_progress()  # the producer carries on with the new leader
            cluster.start_when_deregistered(cluster.brokers[leader], 3 * SESSION_TIMEOUT_S)
            _full_isr(cluster, topic)
        acked = load.finish()
    assert len(acked) >= 8 * 300
    _check_exactly_once(cluster, topic, acked)
    # every killed leader dropped whatever it had beyond the new leader's log
    assert len(_identical_replicas(cluster, topic)) == len(acked)


# -- 2. a leader stopped past its session timeout (a zombie) -------------------------------------------------


def test_a_leader_stopped_past_its_session_rejoins_as_a_follower_and_loses_nothing(cluster: Cluster) -> None:
    topic = _topic()
    partitions = 4  # the stopped broker leads one or two of them
    cluster.create_topic(topic, partitions=partitions, config=MIN_ISR)
    zombie = cluster.brokers[cluster.leader_now(topic)]
    led = [p for p in range(partitions) if cluster.leader_now(topic, p) == zombie.broker_id]
    epochs_before = _broker_epochs(zombie)
    # Requests to the stopped leader time out after 5 s instead of 30 s, so the producer moves on sooner.
    with Load(cluster, topic, **{"request.timeout.ms": 5000, "socket.timeout.ms": 5000}) as load:
        load.wait_for_progress()
        _stop_process(zombie)
        stopped_at = time.monotonic()
        try:
            new_leaders = {p: _new_leader(cluster, topic, zombie.broker_id, p) for p in led}
            assert time.monotonic() - stopped_at >= SESSION_TIMEOUT_S * 0.75, "a leader moved before its session ended"
            load.wait_for_progress()
        finally:
            _resume(zombie)
        # It learns that its session expired, registers again with a new broker epoch, and follows.
        wait_until(lambda: len(_broker_epochs(zombie)) > len(epochs_before), timeout_s=30,
                   what=f"broker {zombie.broker_id} registering again")
        epochs = _broker_epochs(zombie)
        assert epochs[-1] > epochs_before[-1], f"a new broker epoch: {epochs}"
        for p, leader in new_leaders.items():
            zombie.wait_for_log(f"{topic}-{p}: follower of broker {leader}", timeout=30)
        _full_isr(cluster, topic, partitions)
        load.wait_for_progress()
        acked = load.finish()
    # Registered again, it acts on the partition states as they are now, never on those it had before: it does
    # not lead its old partitions again, not even for a moment.
    rejoined = zombie.log().split(f"registered as broker {zombie.broker_id} in ZooKeeper "
                                  f"(broker epoch {epochs[-1]})", 1)[1]
    assert f"{topic}-" not in "".join(line for line in rejoined.splitlines(True) if "leader at epoch" in line)
    assert {p: cluster.leader_now(topic, p) for p in led} == new_leaders
    _check_exactly_once(cluster, topic, acked, partitions)
    for p in range(partitions):
        _identical_replicas(cluster, topic, p)


# -- 3. the controller killed ---------------------------------------------------------------------------------


def test_a_killed_controller_is_replaced_and_leader_failures_are_still_handled(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, partitions=3, config=MIN_ISR)
    old_controller = cluster.metadata().controller_id
    cluster.brokers[old_controller].kill()
    controller = wait_until(lambda: (c := cluster.controller_now()) not in (-1, old_controller) and c,
                            timeout_s=30, what="another controller")
    # partitions the dead controller led have new leaders
    for p in range(3):
        wait_until(lambda p=p: cluster.leader_now(topic, p) not in (-1, old_controller), timeout_s=30,
                   what=f"a live leader for {topic}-{p}")
    cluster.start_when_deregistered(cluster.brokers[old_controller], 3 * SESSION_TIMEOUT_S)
    _full_isr(cluster, topic, partitions=3)
    assert cluster.controller_now() == controller, "the controller does not move back"
    # a leader failure under the new controller: a partition led by another broker than the controller
    partition = next(p for p in range(3) if cluster.leader_now(topic, p) != controller)
    victim = cluster.leader_now(topic, partition)
    cluster.brokers[victim].kill()
    _new_leader(cluster, topic, victim, partition)
    acked = _produce(cluster, topic, [f"after-{i}".encode() for i in range(50)], partition=partition)
    cluster.start_when_deregistered(cluster.brokers[victim], 3 * SESSION_TIMEOUT_S)
    _full_isr(cluster, topic, partitions=3)
    got = _consume_all(cluster, topic, 50, partitions=3)
    assert sorted(got) == sorted(acked)


# -- 4. a follower down under many MB of writes -----------------------------------------------------------------


def test_a_follower_down_under_many_megabytes_catches_up_to_the_leaders_log_end(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, config=MIN_ISR)
    leader = cluster.leader_now(topic)
    follower = cluster.brokers[next(b for b in (1, 2, 3) if b != leader)]
    follower.kill()
    wait_until(lambda: follower.broker_id not in cluster.isr_now(topic), timeout_s=30,
               what="the dead follower out of the ISR")
    pad = b"x" * 10_000
    # ~16 MB, in batches below the cluster's 256 KiB segments (a larger batch is refused)
    acked = _produce(cluster, topic, [f"{topic}-{i}-".encode() + pad for i in range(1600)], **{"batch.size": 200_000})
    assert cluster.isr_now(topic) == sorted(b for b in (1, 2, 3) if b != follower.broker_id)
    cluster.start_when_deregistered(follower, 3 * SESSION_TIMEOUT_S)
    _full_isr(cluster, topic)
    records = _identical_replicas(cluster, topic, timeout_s=60)
    assert [o for o, _, _ in records] == list(range(1600)), "the follower's log ends where the leader's does"
    assert {v for _, _, v in records} == {v for _, _, v in acked}


# -- 5. a divergent tail truncated after failover -------------------------------------------------------------------


def test_an_old_leaders_unacknowledged_tail_is_truncated_to_the_new_leaders_log(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, config=MIN_ISR)
    committed = _produce(cluster, topic, [f"base-{i}".encode() for i in range(100)])
    old = cluster.brokers[cluster.leader_now(topic)]
    followers = [b for b in cluster.each() if b is not old]
    for f in followers:
        _stop_process(f)
    try:
        # A fetch a follower sent just before it stopped is answered within replica.fetch.wait.max.ms (200 ms)
        # and would carry the tail: let those answers go out empty before the tail is written.
        time.sleep(0.5)
        tail = [f"tail-{i}".encode() for i in range(50)]
        _produce(cluster, topic, tail, acks="1", **{"enable.idempotence": False})
        wait_until(lambda: len(_replica_records(old, topic) or []) == 150, timeout_s=5,
                   what="the tail on the old leader's disk")
        old.kill()
    finally:
        for f in followers:
            _resume(f)
    new_leader = _new_leader(cluster, topic, old.broker_id)
    assert new_leader in {f.broker_id for f in followers}
    after = _produce(cluster, topic, [f"after-{i}".encode() for i in range(100)])
    cluster.start_when_deregistered(old, 3 * SESSION_TIMEOUT_S)
    _full_isr(cluster, topic)
    records = _identical_replicas(cluster, topic)
    values = [v for _, _, v in records]
    assert [o for o, _, _ in records] == list(range(200)), "offsets dense"
    assert values == [v for _, _, v in committed] + [v for _, _, v in after]
    assert not any(v is not None and v.startswith(b"tail-") for v in values), "the unacknowledged tail is gone"
    old.wait_for_log(f"{topic}-0: truncating from 150 to 100", timeout=5)


# -- 6. the ISR below min.insync.replicas ---------------------------------------------------------------------------


def test_acks_all_waits_while_the_isr_is_below_min_insync_replicas(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, config=MIN_ISR)
    leader = cluster.leader_now(topic)
    down = [b for b in cluster.each() if b.broker_id != leader]
    for b in down:
        b.kill()
    wait_until(lambda: cluster.isr_now(topic) == [leader], timeout_s=30, what="an ISR of the leader alone")
    # Without retries the refusal itself is seen: NOT_ENOUGH_REPLICAS.
    refused: list[Any] = []
    p0 = _producer(cluster, **{"enable.idempotence": False, "retries": 0, "message.timeout.ms": 5000})
    p0.produce(topic, value=b"refused", on_delivery=lambda err, msg: refused.append(err))
    p0.flush(10)
    assert refused and refused[0] is not None and refused[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, refused
    # An idempotent producer keeps retrying (up to message.timeout.ms): nothing is acknowledged meanwhile.
    waiting: list[Any] = []
    p1 = _producer(cluster)
    p1.produce(topic, value=b"waited", on_delivery=lambda err, msg: waiting.append((err, msg.offset())))
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        p1.poll(0.1)
    assert not waiting, "acks=all was acknowledged with the ISR below min.insync.replicas"
    # acks=1 is served by the leader alone.
    one = _produce(cluster, topic, [f"one-{i}".encode() for i in range(20)], acks="1",
                   **{"enable.idempotence": False})
    for b in down:
        cluster.start_when_deregistered(b, 3 * SESSION_TIMEOUT_S)
    _full_isr(cluster, topic)
    assert p1.flush(30) == 0
    assert len(waiting) == 1 and waiting[0][0] is None, waiting
    after = _produce(cluster, topic, [f"after-{i}".encode() for i in range(20)])
    got = _consume_all(cluster, topic, 41)
    assert sorted(v for _, _, v in got) == sorted([v for _, _, v in one] + [b"waited"] + [v for _, _, v in after])
    assert [v for _, _, v in _identical_replicas(cluster, topic)] == [v for _, _, v in sorted(got)]


# -- 7. replica fetches from an unknown replica and a stale broker epoch ---------------------------------------------


def test_fetches_from_an_unknown_replica_or_a_stale_broker_epoch_are_refused(cluster: Cluster) -> None:
    topic = _topic()
    cluster.create_topic(topic, config=MIN_ISR)
    _produce(cluster, topic, [f"v{i}".encode() for i in range(30)])
    leader = cluster.brokers[cluster.leader_now(topic)]
    follower = next(b for b in cluster.each() if b is not leader)
    epoch = _broker_epochs(follower)[-1]
    before = (cluster.isr_now(topic), _watermarks(cluster, topic))
    log_before = len(leader.log())

    async def fetch(replica_id: int, replica_epoch: int) -> Any:
        conn = BrokerConnection("127.0.0.1", leader.fixed_port, client_id="faults")
        await conn.connect()
        try:
            md = await conn.send(apis.METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
                                 version=12)
            topic_id = md.topics[0].topic_id
            response = await conn.send(apis.FETCH, {
                "replica_state": {"replica_id": replica_id, "replica_epoch": replica_epoch},
                "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic_id": topic_id, "partitions": [{
                    "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                    "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [], "rack_id": "",
            }, version=15, timeout_ms=10_000)
        finally:
            await conn.close()
        assert response.error_code == 0
        return response.responses[0].partitions[0]

    unknown = asyncio.run(fetch(99, 1))
    assert unknown.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert not unknown.records
    stale = asyncio.run(fetch(follower.broker_id, epoch - 1))
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert not stale.records
    # nothing changed: the same ISR and watermarks, and the real follower still fetches (an acks=all write works)
    assert (cluster.isr_now(topic), _watermarks(cluster, topic)) == before
    _produce(cluster, topic, [b"still"])
    assert cluster.isr_now(topic) == [1, 2, 3]
    assert "Traceback" not in leader.log()[log_before:]


def _watermarks(cluster: Cluster, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"w-{uuid.uuid4().hex[:6]}"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


# -- 8. ZooKeeper unreachable at start -------------------------------------------------------------------------------


def test_an_unreachable_zookeeper_at_start_exits_with_a_clear_message(tmp_path: Path) -> None:
    closed = free_port()  # nothing listens there
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    cmd = [sys.executable, "-m", "odradek.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--data-dir", str(tmp_path / "data"), "--override", f"zookeeper.connect=127.0.0.1:{closed}",
           "--override", "zookeeper.connection.timeout.ms=2000", "--override", "http.listeners="]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        opened = False
        while proc.poll() is None and time.monotonic() - started < 30:
            with socket.socket() as s:
                s.settimeout(0.2)
                opened = opened or s.connect_ex(("127.0.0.1", port)) == 0
            time.sleep(0.05)
        assert proc.poll() is not None, "the broker did not give up within 30 s"
    finally:
        if proc.poll() is None:
            proc.kill()
        output = proc.communicate(timeout=10)[0].decode(errors="replace")
    assert time.monotonic() - started < 20
    assert proc.returncode != 0
    assert not opened, "the client port was opened"
    assert "Traceback" not in output, output
    assert re.search(rf"cannot start: .*ZooKeeper at 127\.0\.0\.1:{closed}", output), output


# -- 9. a rolling restart --------------------------------------------------------------------------------------


def test_a_rolling_restart_loses_nothing_and_clients_see_only_retriable_errors(cluster: Cluster) -> None:
    """Every broker in turn stopped with SIGTERM (controlled shutdown) and started again once it has exited,
    while an idempotent acks=all producer and a group consumer run: nothing acknowledged is lost or
    duplicated, no delivery fails, and the consumer sees no fatal error."""
    topic = _topic()
    cluster.create_topic(topic, partitions=3, config=MIN_ISR)
    consumer_errors: list[Any] = []
    read: list[bytes] = []
    stop = threading.Event()

    def consume() -> None:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"roll-{topic}",
                      "auto.offset.reset": "earliest", "enable.auto.commit": True})
        try:
            c.subscribe([topic])
            deadline = time.monotonic() + 200
            while not stop.is_set() and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is None:
                    continue
                if m.error() is not None:
                    consumer_errors.append(m.error())
                else:
                    read.append(m.value())
        finally:
            c.close()

    reader = threading.Thread(target=consume, name=f"consume-{topic}", daemon=True)
    reader.start()
    try:
        with Load(cluster, topic) as load:
            for b in cluster.each():
                load.wait_for_progress()
                assert b.stop() == 0, f"broker {b.broker_id} exited uncleanly:\n{b.log()[-2000:]}"
                load.wait_for_progress()  # the cluster keeps acknowledging without it
                b.start()
                _full_isr(cluster, topic, partitions=3)
            load.wait_for_progress()
            acked = load.finish()
    finally:
        stop.set()
        reader.join(timeout=30)
    assert not [e for e in consumer_errors if e.fatal()], consumer_errors[:3]
    _check_exactly_once(cluster, topic, acked, partitions=3)
    assert len(acked) >= 4 * 300
