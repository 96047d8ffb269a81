"""Committed offsets across broker crashes: SIGKILL in the middle of a stream of commits, with the log
cleaner compacting ``__consumer_offsets`` (tiny segments, any dirty ratio) every 100 ms.

What is promised: every commit the client saw acknowledged is there after the restart, and nothing
newer than the last commit attempted; the group's offsets load from the topic as they were. The
kills land at random points, so over the rounds they hit commits in flight and cleaning passes in
progress (a pass swaps its result in by renames; one cut short leaves files the next start discards).
"""

from __future__ import annotations

import random
import re
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat.conftest import BrokerProcess

pytestmark = pytest.mark.slow

TOPIC = "crash-orders"
GROUP = "crash-group"
ROUNDS = 4
CLEANED = re.compile(r"__consumer_offsets-\d+: cleaned up to offset")


def _consumer(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                     "socket.timeout.ms": 2000, "session.timeout.ms": 6000})


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_acknowledged_commits_survive_sigkill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", tmp_path / "broker.log", {
        "offsets.topic.segment.bytes": "4096", "offsets.topic.num.partitions": "2",
        "group.initial.rebalance.delay.ms": "0", "log.cleaner.backoff.ms": "100",
        "log.cleaner.min.cleanable.ratio": "0.01", "log.cleaner.dedupe.buffer.size": str(1 << 20)})
    broker.start()
    rng = random.Random(20261123)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(timeout=20)
        consumer = _consumer(broker.bootstrap)
        acked = attempted = 0
        # First the cleaner compacts __consumer_offsets once, uninterrupted (its worker process starts and loads
        # its compiled kernel first: on a loaded machine that can outlast the kills' delays), so the point of the
        # test is established before the crashes start landing in passes.
        deadline = time.monotonic() + 90
        while not CLEANED.search(broker.log_path.read_text(errors="replace")) and time.monotonic() < deadline:
            attempted += 1
            consumer.commit(offsets=[TopicPartition(TOPIC, p, attempted) for p in range(3)], asynchronous=False)
            acked = attempted
        orphans: list[int] = []
        watched: list[int] = []
        for _ in range(ROUNDS):
            restarted = threading.Event()

            def crash_and_restart(delay: float = rng.uniform(0.3, 1.2), done: threading.Event = restarted) -> None:
                time.sleep(delay)
                assert broker.proc is not None
                workers = _children(broker.proc.pid)  # the cleaner's worker processes
                broker.kill()  # SIGKILL: no flush, no clean-shutdown marker
                deadline = time.monotonic() + 5
                while any(_alive(w) for w in workers) and time.monotonic() < deadline:
                    time.sleep(0.02)
                orphans.extend(w for w in workers if _alive(w))
                watched.extend(workers)
                time.sleep(0.3)
                broker.start()
                done.set()

            crasher = threading.Thread(target=crash_and_restart)
            crasher.start()
            deadline = time.monotonic() + 30
            # Commit until the broker is back (a commit in flight at the crash may block until then).
            while not restarted.is_set() and time.monotonic() < deadline:
                attempted += 1
                offsets = [TopicPartition(TOPIC, p, attempted) for p in range(3)]
                try:
                    consumer.commit(offsets=offsets, asynchronous=False)
                    acked = attempted
                except KafkaException:
                    pass
            crasher.join(30)
            assert restarted.is_set(), "the broker was not restarted"
            committed = _committed(broker.bootstrap)
            assert all(acked <= c <= attempted for c in committed), (acked, attempted, committed)
            # every partition was committed by the same requests: they agree unless the kill cut a batch
            assert len(set(committed)) == 1, committed
        consumer.close()
        log = broker.log_path.read_text(errors="replace")
        assert CLEANED.search(log), \
            "the cleaner never compacted __consumer_offsets: the test lost its point"
        assert watched, "no cleaner worker ran at any of the kills: the test lost its point"
        assert not orphans, (f"cleaner workers {orphans} outlived the SIGKILLed broker: they would go on writing "
                             "*.cleaned files into a log directory the restarted broker uses")
        assert "Traceback" not in log
    finally:
        broker.kill()


def _committed(bootstrap: str) -> list[int]:
    """The group's committed offsets, read by a fresh client (retrying while the coordinator loads)."""
    deadline = time.monotonic() + 30
    while True:
        c = _consumer(bootstrap)
        try:
            result = c.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=10)
            return [tp.offset for tp in result]
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
        finally:
            c.close()
