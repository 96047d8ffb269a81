"""``/readyz`` and the replication figures of ``/metrics`` in a real 3-broker cluster on ZooKeeper: every broker ready
once it has the cluster's metadata; a killed follower makes its leaders' partitions under-replicated (an ISR
shrink), and once it is back and caught up it is ready again (an ISR expansion)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.cluster.brokers import Cluster, ClusterBroker, http_url, running_http_cluster, wait_until
from tests.cluster.zk_process import zookeeper as zookeeper
from tests.http.scrape import get, metrics, value

pytestmark = pytest.mark.slow

TOPIC = "http-ready"


cluster = pytest.fixture(scope="module")(running_http_cluster)


def ready(b: ClusterBroker) -> bool:
    try:
        return get(http_url(b) + "/readyz", timeout=5)[0] == 200
    except OSError:
        return False


def test_every_broker_is_ready_and_one_is_the_controller(cluster: Cluster) -> None:
    for b in cluster.each():
        wait_until(lambda b=b: ready(b), what=f"broker {b.broker_id} ready")
    controllers = [value(metrics(http_url(b)), "odradek_active_controller") for b in cluster.each()]
    assert sorted(controllers) == [0, 0, 1]
    known = {value(metrics(http_url(b)), "odradek_controller_id") for b in cluster.each()}
    assert known == {cluster.controller_now()}


def test_a_killed_follower_shrinks_isrs_and_is_ready_again_once_caught_up(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, partitions=3, replication_factor=3)
    leaders = {cluster.leader(TOPIC, p) for p in range(3)}
    victim = next(b for b in cluster.each() if b.broker_id != cluster.controller_now())
    others = [b for b in cluster.each() if b is not victim]
    victim_leads = victim.broker_id in leaders

    def figures(name: str) -> float:
        return sum(value(metrics(http_url(b)), name) or 0 for b in others)

    # replication traffic is counted apart from consumers', as Kafka's Replication{In,Out}PerSec
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce(TOPIC, value=b"r" * 1000, partition=i % 3)
    assert producer.flush(30) == 0
    wait_until(
        lambda: sum(value(metrics(http_url(b)), "odradek_replication_bytes_in_total") or 0 for b in cluster.each())
        >= 2 * 30 * 1000,  # each record appended by two followers
        what="followers' replication bytes in",
    )
    out = sum(value(metrics(http_url(b)), "odradek_replication_bytes_out_total") or 0 for b in cluster.each())
    assert out >= 2 * 30 * 1000
    assert sum(value(metrics(http_url(b)), "odradek_topic_bytes_out_total", topic=TOPIC) or 0
               for b in cluster.each()) == 0  # no consumer read it

    shrinks_before = figures("odradek_isr_shrinks_total")
    victim.kill()
    # its partitions' leaders drop it from their ISRs after replica.lag.time.max.ms (3 s here)
    wait_until(
        lambda: figures("odradek_under_replicated_partitions") >= 3 - (1 if victim_leads else 0),
        timeout_s=30,
        what="under-replicated partitions on the surviving leaders",
    )
    assert figures("odradek_isr_shrinks_total") > shrinks_before or victim_leads
    for b in others:
        assert ready(b), f"broker {b.broker_id} (not following anything out of its ISR) stays ready"

    expands_before = figures("odradek_isr_expands_total")
    cluster.start_when_deregistered(victim, timeout_s=30)
    wait_until(lambda: ready(victim), timeout_s=60, what="the restarted broker ready (caught up)")
    wait_until(
        lambda: figures("odradek_under_replicated_partitions") == 0,
        timeout_s=30,
        what="no under-replicated partition left",
    )
    assert figures("odradek_isr_expands_total") > expands_before
