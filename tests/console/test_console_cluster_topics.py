"""The topic pages of every broker of a real 3-broker cluster on ZooKeeper cover every partition, whichever broker
leads it: a topic's figures (start / end offsets, size), the message browser (from an offset, before the end, from a
timestamp, filtered, as JSON or hex, read_committed) and the live tail of a partition led by another broker, through
Fetch / ListOffsets / DescribeLogDirs requests to its leader."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition

from tests.cluster.brokers import Cluster, ClusterBroker, http_url, running_http_cluster, wait_until
from tests.cluster.zk_process import zookeeper as zookeeper
from tests.console.test_console_cluster_coordinators import get

pytestmark = pytest.mark.slow

TOPIC = "console-spread"
TXN_TOPIC = "console-spread-txn"
PARTITIONS = 6
RECORDS = 5  # per partition
BASE_MS = (int(time.time() * 1000) // 1000 - 3600) * 1000  # an hour ago: well inside retention


def ts_of(p: int, i: int) -> int:
    return BASE_MS + p * 1000 + i * 10


cluster = pytest.fixture(scope="module")(running_http_cluster)


@pytest.fixture(scope="module")
def leaders(cluster: Cluster) -> dict[int, int]:
    """A replication-factor-1 topic whose partitions are led by different brokers, RECORDS known records in each
    (key ``k{p}-{i}``, value ``v{p}-{i}``, header ``h=x{i}``, timestamp ``ts_of(p, i)``): partition -> leader."""
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            producer.produce(
                TOPIC, key=f"k{p}-{i}".encode(), value=f"v{p}-{i}".encode(), partition=p,
                headers=[("h", f"x{i}".encode())], timestamp=ts_of(p, i),
            )
    assert producer.flush(30) == 0
    out = {p: cluster.leader(TOPIC, p) for p in range(PARTITIONS)}
    assert len(set(out.values())) >= 2, out
    return out


def rows(body: str) -> list[tuple[int, int, str, str]]:
    """The browser's records: (partition, offset, key, value)."""
    table = body.split('id="messages"', 1)[1].split("</table>", 1)[0]
    return [
        (int(p), int(o), k, v)
        for o, p, k, v in re.findall(
            r'<tr data-offset="(\d+)" data-partition="(\d+)">.*?<td class="key"><pre>(.*?)</pre>.*?'
            r'<td class="value"><pre>(.*?)</pre>',
            table,
            re.S,
        )
    ]


def browse(b: ClusterBroker, query: str) -> tuple[list[tuple[int, int, str, str]], str]:
    status, body = get(b, f"/topics/{TOPIC}/messages?{query}")
    assert status == 200, body
    assert "peer-notice" not in body and 'class="error"' not in body, body
    return rows(body), body


def expected(p: int, offsets: range | list[int]) -> list[tuple[int, int, str, str]]:
    return [(p, i, f"k{p}-{i}", f"v{p}-{i}") for i in offsets]


def test_browser_from_every_broker_reads_every_partition(cluster: Cluster, leaders: dict[int, int]) -> None:
    for b in cluster.each():
        for p in range(PARTITIONS):
            found, body = browse(b, f"partition={p}")
            assert found == expected(p, range(RECORDS)), (b.broker_id, leaders[p], body)
            assert "no replica on this broker" not in body
        # from an offset, with a page limit and the next page's link
        found, body = browse(b, "partition=1&offset=2&limit=2")
        assert found == expected(1, [2, 3])
        assert 'href="?partition=1&offset=4&' in body
        # before the end
        assert browse(b, "partition=2&offset=-2")[0] == expected(2, [3, 4])
        # from a timestamp (the first record at or after it), and one past every record: nothing
        assert browse(b, f"partition=3&timestamp={ts_of(3, 2) + 5}")[0] == expected(3, [3, 4])
        assert browse(b, f"partition=3&timestamp={ts_of(5, RECORDS)}")[0] == []
        # filters: key, value, header
        assert browse(b, "partition=4&key=k4-3")[0] == expected(4, [3])
        assert browse(b, "partition=5&value=v5-1")[0] == expected(5, [1])
        assert browse(b, "partition=0&header=h%3Dx2")[0] == expected(0, [2])
        # every partition at once, by timestamp; a key filter across all of them
        found, _ = browse(b, "limit=1000")
        assert found == [r for p in range(PARTITIONS) for r in expected(p, range(RECORDS))]
        assert browse(b, "key=-4")[0] == [(p, 4, f"k{p}-4", f"v{p}-4") for p in range(PARTITIONS)]
        # hex, read_committed (nothing transactional here: the same records)
        found, _ = browse(b, "partition=1&offset=1&limit=1&format=hex")
        assert found == [(1, 1, b"k1-1".hex(" "), b"v1-1".hex(" "))]
        assert browse(b, "partition=2&isolation=read_committed")[0] == expected(2, range(RECORDS))


def test_topic_list_counts_every_partition_as_its_leader_has_it(cluster: Cluster, leaders: dict[int, int]) -> None:
    for b in cluster.each():  # each broker hosts only some of the partitions: the list still counts all of them
        status, body = get(b, f"/topics?q={TOPIC}")
        assert status == 200, body
        assert "peer-notice" not in body, body
        row = re.search(rf'<tr data-topic="{TOPIC}">.*?</tr>', body, re.S)
        assert row is not None, body
        cells = re.findall(r'<td class="num[^"]*">([^<]*)</td>', row.group(0))
        assert cells[2] == str(PARTITIONS * RECORDS), (b.broker_id, cells)  # messages
        assert cells[3].endswith(" B") and cells[3] != "0 B", cells  # size


def test_topic_page_shows_the_leaders_figures(cluster: Cluster, leaders: dict[int, int]) -> None:
    for b in cluster.each():
        status, body = get(b, f"/topics/{TOPIC}")
        assert status == 200, body
        assert "peer-notice" not in body, body
        found = re.findall(
            r'<tr data-partition="(\d+)">.*?<td class="num">([^<]*)</td><td class="num" data-k="end">([^<]*)</td>'
            r'\s*<td class="num">([^<]*)</td><td class="num">([^<]*)</td>',
            body,
            re.S,
        )
        assert [(int(p), s, e, m) for p, s, e, m, _ in found] == [
            (p, "0", str(RECORDS), str(RECORDS)) for p in range(PARTITIONS)
        ], (b.broker_id, body)
        assert all(size.endswith(" B") and size != "0 B" for *_, size in found), found


def test_read_committed_leaves_out_an_aborted_transaction_led_elsewhere(cluster: Cluster) -> None:
    cluster.create_topic(TXN_TOPIC, partitions=1, replication_factor=1)
    leader = cluster.leader(TXN_TOPIC, 0)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "console-spread-txn"})
    producer.init_transactions(30)
    for value, commit in (("c1", True), ("a1", False), ("c2", True)):
        producer.begin_transaction()
        producer.produce(TXN_TOPIC, value=value.encode(), partition=0)
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    def values(b: ClusterBroker, isolation: str) -> list[str]:
        status, body = get(b, f"/topics/{TXN_TOPIC}/messages?partition=0&isolation={isolation}")
        assert status == 200 and "peer-notice" not in body, body
        return [v for *_, v in rows(body)]

    # the last commit's marker is written after commit_transaction returns: wait for it on the leader's own console
    wait_until(lambda: values(cluster.brokers[leader], "read_committed") == ["c1", "c2"], what="the last marker")
    for b in cluster.each():
        assert values(b, "read_uncommitted") == ["c1", "a1", "c2"], b.broker_id
        assert values(b, "read_committed") == ["c1", "c2"], b.broker_id


def _tailing(b: ClusterBroker, topic: str, p: int, records: int) -> tuple[threading.Thread, list[str]]:
    """A live tail of ``topic``-``p`` on ``b``'s console, its lines read by a thread until ``records`` records or a
    failure event came; returned once the tail is long-polling."""
    lines: list[str] = []
    opened = threading.Event()

    def follow() -> None:
        with urllib.request.urlopen(f"{http_url(b)}/api/topics/{topic}/tail?partition={p}", timeout=60) as r:
            for raw in r:
                line = raw.decode().strip()
                lines.append(line)
                if line.startswith(": tailing"):
                    opened.set()
                if line.startswith("event: failure") or len(_events(lines)) == records:
                    return

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    assert opened.wait(30)
    time.sleep(1)  # the tail has asked the leader for its end and is long-polling from there
    return t, lines


def _events(lines: list[str]) -> list[dict[str, object]]:
    return [json.loads(x[6:]) for x in lines if x.startswith("data: ")]


def test_tail_of_a_partition_led_elsewhere(cluster: Cluster, leaders: dict[int, int]) -> None:
    b = next(x for x in cluster.each() if any(lead != x.broker_id for lead in leaders.values()))
    p = next(q for q, lead in leaders.items() if lead != b.broker_id)
    t, lines = _tailing(b, TOPIC, p, 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(TOPIC, key=b"tail-key", value=b"tail-value", partition=p)
    assert producer.flush(30) == 0
    t.join(30)
    events = _events(lines)
    assert events, f"no event from broker {b.broker_id}'s tail of partition {p} (led by {leaders[p]})"
    assert events[0]["partition"] == p and events[0]["offset"] == RECORDS
    assert events[0]["key"] == "tail-key" and events[0]["value"] == "tail-value"


def test_a_tail_goes_on_when_the_partition_it_follows_comes_to_be_led_by_its_broker(cluster: Cluster) -> None:
    """The tail of a partition led elsewhere, on a broker holding a replica of it: a reassignment leaves that broker
    the only replica (the leader's goes: its Fetch is refused), and the tail goes on from the local log, no
    failure, no record lost. (While the old leader keeps a replica, it serves the tail's Fetch as a follower.)"""
    topic = "console-tail-moves"
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    first = cluster.leader(topic)
    (here,) = [r for r in cluster.partitions(topic)[0].replicas if r != first]
    t, lines = _tailing(cluster.brokers[here], topic, 0, 2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic, value=b"led elsewhere", partition=0)
    assert producer.flush(30) == 0
    wait_until(lambda: bool(_events(lines)), what="the first record on the tail")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20000)
    try:
        tp = KTopicPartition(topic, 0)
        assert admin.alter_partition_reassignments({tp: [here]}) == {tp: None}
    finally:
        admin.close()
    wait_until(lambda: list(cluster.partitions(topic)[0].replicas) == [here] and cluster.leader(topic) == here,
               what=f"broker {here} the only replica of {topic}-0")
    gone = cluster.brokers[first].data_dir
    wait_until(lambda: not list(gone.glob(f"{topic}-0")), what=f"broker {first}'s replica deleted")
    producer.produce(topic, value=b"led here", partition=0)
    assert producer.flush(30) == 0
    t.join(30)
    assert not any(x.startswith("event: failure") for x in lines), lines
    assert [(e["offset"], e["value"]) for e in _events(lines)] == [(0, "led elsewhere"), (1, "led here")], lines
