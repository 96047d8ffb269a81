"""The console of every broker of a real 3-broker cluster on ZooKeeper shows every consumer group and transaction of
the cluster, whichever broker coordinates it: groups listed with their lag, a group's page, an offset reset (dry run
and executed) and a transaction's abort from a broker that is not the coordinator (or the partition's leader), and a
broker that does not answer shown as a notice."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.coordinator.group.records import partition_for
from tests.cluster.brokers import Cluster, ClusterBroker, http_url, running_http_cluster, wait_until
from tests.cluster.zk_process import zookeeper as zookeeper

pytestmark = pytest.mark.slow

TOPIC = "console-lag"
PARTITIONS = 3
RECORDS = 10  # per partition
OFFSETS_PARTITIONS = 5  # offsets.topic.num.partitions and transaction.state.log.num.partitions of CLUSTER_OVERRIDES


cluster = pytest.fixture(scope="module")(running_http_cluster)


def get(b: ClusterBroker, path: str, timeout: float = 30) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(http_url(b) + path, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def post(b: ClusterBroker, path: str, fields: dict[str, str]) -> tuple[int, Any]:
    req = urllib.request.Request(
        http_url(b) + path,
        data=urllib.parse.urlencode(fields).encode(),
        method="POST",
        headers={"Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, body = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read().decode()
    return status, json.loads(body)


def group_rows(body: str) -> dict[str, tuple[str, str, str]]:
    """/groups: group id -> (state, members, lag)."""
    rows = re.findall(
        r'<tr data-group="([^"]+)">.*?</td><td>([^<]*)</td><td>[^<]*</td>\s*<td class="num">(\d+)</td>'
        r'<td class="num" data-k="lag">([^<]*)</td>',
        body,
        re.S,
    )
    return {g: (state, members, lag) for g, state, members, lag in rows}


def offset_rows(body: str) -> dict[str, tuple[str, str, str]]:
    """A group page's partitions: "topic-partition" -> (committed, end, lag)."""
    rows = re.findall(
        r'<tr data-tp="([^"]+)">.*?data-k="committed">([^<]*)<.*?data-k="end">([^<]*)<.*?data-k="lag">([^<]*)<',
        body.split('id="offsets"', 1)[1].split("</table>", 1)[0],
        re.S,
    )
    return {tp: (c, e, lag) for tp, c, e, lag in rows}


def coordinator(cluster: Cluster, internal_topic: str, key: str) -> int:
    return cluster.leader(internal_topic, partition_for(key, OFFSETS_PARTITIONS))


def other_than(cluster: Cluster, broker_id: int) -> ClusterBroker:
    return next(b for b in cluster.each() if b.broker_id != broker_id)


def commit(cluster: Cluster, group_id: str, offsets: dict[int, int]) -> None:
    """An admin-style commit (no subscription): the group stays Empty with these committed offsets."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group_id, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(TOPIC, p, off) for p, off in offsets.items()], asynchronous=False)
    finally:
        c.close()


def committed(cluster: Cluster, group_id: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group_id, "enable.auto.commit": False})
    try:
        found = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=20)
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}
    finally:
        c.close()


@pytest.fixture(scope="module")
def groups(cluster: Cluster) -> dict[str, dict[int, int]]:
    """Groups with known commits on a topic of RECORDS records per partition, their coordinators spread over the
    brokers: group id -> committed offset per partition."""
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            producer.produce(TOPIC, value=f"r{i}".encode(), partition=p)
    assert producer.flush(30) == 0
    commit(cluster, "console-seed", {0: 1})  # creates __consumer_offsets
    wait_until(
        lambda: len(cluster.partitions("__consumer_offsets")) == OFFSETS_PARTITIONS
        and all(p.leader >= 0 for p in cluster.partitions("__consumer_offsets").values()),
        what="__consumer_offsets' leaders",
    )
    leaders = {p: cluster.leader("__consumer_offsets", p) for p in range(OFFSETS_PARTITIONS)}
    chosen: dict[int, list[str]] = {}
    for i in range(200):
        gid = f"console-g{i}"
        broker = leaders[partition_for(gid, OFFSETS_PARTITIONS)]
        if len(chosen.setdefault(broker, [])) < 2:
            chosen[broker].append(gid)
    assert len(chosen) >= 2, f"__consumer_offsets led by {leaders}: the groups' coordinators must differ"
    out: dict[str, dict[int, int]] = {}
    for n, gid in enumerate(g for ids in chosen.values() for g in ids):
        offsets = {p: (n + p) % (RECORDS + 1) for p in range(PARTITIONS)}
        commit(cluster, gid, offsets)
        out[gid] = offsets
    return out


def lag_of(offsets: dict[int, int]) -> int:
    return sum(RECORDS - off for off in offsets.values())


def test_every_broker_lists_every_group_with_its_lag(cluster: Cluster, groups: dict[str, dict[int, int]]) -> None:
    coordinators = {gid: coordinator(cluster, "__consumer_offsets", gid) for gid in groups}
    for b in cluster.each():
        assert any(c != b.broker_id for c in coordinators.values())  # some are coordinated elsewhere
        status, body = get(b, "/groups?q=console-g")
        assert status == 200, body
        rows = group_rows(body)
        assert set(rows) == set(groups), (b.broker_id, rows)
        for gid, offsets in groups.items():
            state, members, lag = rows[gid]
            assert (state, members, lag) == ("Empty", "0", str(lag_of(offsets))), (b.broker_id, gid, rows[gid])
        assert "peer-notice" not in body
        status, body = get(b, "/")
        assert status == 200
        count = int(re.search(r'id="group-count"><a href="/groups">(\d+)<', body).group(1))  # type: ignore[union-attr]
        assert count == len(groups) + 1  # and console-seed


def test_group_page_and_members_from_a_broker_that_does_not_coordinate_it(
    cluster: Cluster, groups: dict[str, dict[int, int]]
) -> None:
    gid = "console-active"
    elsewhere = other_than(cluster, coordinator(cluster, "__consumer_offsets", gid))
    consumer = Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": gid, "client.id": "console-member",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    try:
        consumer.subscribe([TOPIC])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < PARTITIONS * RECORDS and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                seen += 1
        assert seen == PARTITIONS * RECORDS
        consumer.commit(offsets=[TopicPartition(TOPIC, p, RECORDS - p) for p in range(PARTITIONS)],
                        asynchronous=False)

        def page() -> str | None:
            status, body = get(elsewhere, f"/groups/{gid}")
            return body if status == 200 and 'id="group-state">Stable<' in body else None

        body = wait_until(page, what="the group Stable on another broker's console")
        assert "console-member" in body
        assert re.search(r"<td>console-lag-0, console-lag-1, console-lag-2</td>", body), body
        assert offset_rows(body) == {f"{TOPIC}-{p}": (str(RECORDS - p), str(RECORDS), str(p)) for p in range(3)}
        assert re.search(r'id="total-lag">3<', body)
        # an active group cannot be reset, from any broker
        status, doc = post(elsewhere, f"/api/groups/{gid}/reset", {"mode": "to_earliest", "execute": "1"})
        assert status == 400 and "inactive" in doc["error"] and "Stable" in doc["error"], doc
    finally:
        consumer.close()
    status, _ = get(elsewhere, "/groups/console-no-such-group")
    assert status == 404


def test_lag_chart_of_a_group_coordinated_elsewhere(cluster: Cluster, groups: dict[str, dict[int, int]]) -> None:
    for b in cluster.each():
        reset_one = next(iter(groups))  # its lag changed with the reset: not this one
        gid = next(g for g in groups if g != reset_one and coordinator(cluster, "__consumer_offsets", g) != b.broker_id)

        def charted(b: ClusterBroker = b, gid: str = gid) -> str | None:
            status, body = get(b, f"/groups/{gid}")
            return body if status == 200 and 'id="lag-chart"' in body else None

        body = wait_until(charted, what=f"a lag chart of {gid} on broker {b.broker_id}")  # sampled every 5 s
        assert f'aria-label="lag over time, max {lag_of(groups[gid]) or 1}"' in body


def test_offset_reset_dry_run_and_executed_from_a_broker_that_does_not_coordinate_it(
    cluster: Cluster, groups: dict[str, dict[int, int]]
) -> None:
    gid = next(iter(groups))
    before = groups[gid]
    elsewhere = other_than(cluster, coordinator(cluster, "__consumer_offsets", gid))
    status, doc = post(elsewhere, f"/api/groups/{gid}/reset", {"mode": "to_earliest"})
    assert status == 200 and doc["ok"] and not doc["executed"], doc
    planned = {o["partition"]: o["offset"] for o in doc["offsets"] if o["topic"] == TOPIC}
    assert planned == {p: 0 for p in before if before[p] >= 0}
    assert committed(cluster, gid) == before  # a dry run changes nothing
    status, doc = post(elsewhere, f"/api/groups/{gid}/reset", {"mode": "shift_by", "value": "-1", "topic": TOPIC})
    assert status == 200 and not doc["executed"]
    assert {o["partition"]: o["offset"] for o in doc["offsets"]} == {p: max(o - 1, 0) for p, o in before.items()}

    status, doc = post(elsewhere, f"/api/groups/{gid}/reset",
                       {"mode": "to_offset", "value": "4", "topic": TOPIC, "execute": "1"})
    assert status == 200 and doc["ok"] and doc["executed"], doc
    assert committed(cluster, gid) == {p: 4 for p in range(PARTITIONS)}
    for b in cluster.each():  # every console sees the new offsets and lag
        status, body = get(b, f"/groups/{gid}")
        assert status == 200
        assert offset_rows(body) == {f"{TOPIC}-{p}": ("4", str(RECORDS), str(RECORDS - 4)) for p in range(3)}
    groups[gid] = {p: 4 for p in range(PARTITIONS)}


def test_an_open_transaction_is_seen_from_every_broker_and_aborted_from_one_that_does_not_lead(
    cluster: Cluster, groups: dict[str, dict[int, int]]
) -> None:
    tid = "console-txn"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                         "transaction.timeout.ms": 600_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"open", partition=1)
    assert producer.flush(30) == 0
    leader = cluster.leader(TOPIC, 1)

    def open_row(b: ClusterBroker) -> str | None:
        status, body = get(b, "/transactions")
        assert status == 200, body
        row = re.search(rf'<tr data-tid="{tid}">(.*?)</tr>', body, re.S)
        return body if row and "<td>Ongoing</td>" in row.group(1) and f"{TOPIC}-1" in row.group(1) else None

    for b in cluster.each():
        body = wait_until(lambda b=b: open_row(b), what=f"the ongoing transaction on broker {b.broker_id}")
        start = re.search(rf'<tr data-tp="{TOPIC}-1" data-start="(\d+)">', body)
        assert start and int(start.group(1)) == RECORDS, body  # the open transaction's first offset
        assert "peer-notice" not in body

    elsewhere = other_than(cluster, leader)
    status, doc = post(elsewhere, "/api/transactions/abort",
                       {"topic": TOPIC, "partition": "1", "start_offset": str(RECORDS + 5)})
    assert status == 400 and "no open transaction starts at offset" in doc["error"], doc
    status, doc = post(elsewhere, "/api/transactions/abort",
                       {"topic": TOPIC, "partition": "1", "start_offset": str(RECORDS)})
    assert status == 200 and doc["ok"], doc
    for b in cluster.each():
        status, body = get(b, "/transactions")
        assert f'data-tp="{TOPIC}-1"' not in body, (b.broker_id, body)
    try:
        producer.abort_transaction(30)
    except Exception:  # the coordinator's own abort after an operator's: the producer may be told it was fenced
        pass


def test_a_broker_that_does_not_answer_is_a_notice(cluster: Cluster, groups: dict[str, dict[int, int]]) -> None:
    asking = next(iter(cluster.each()))
    stopped = other_than(cluster, asking.broker_id)
    gid = next((g for g in groups if coordinator(cluster, "__consumer_offsets", g) == stopped.broker_id), None)
    status, body = get(asking, "/groups")  # the console's connections to the others are open
    assert status == 200
    paths = ["/groups", "/transactions", *([f"/groups/{gid}"] if gid is not None else [])]
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        # at once: the stopped broker's ZooKeeper session (4 s) would end before a second page's timeout (5 s)
        with ThreadPoolExecutor(len(paths)) as pool:
            pages = dict(zip(paths, pool.map(lambda path: get(asking, path, timeout=60), paths), strict=True))
        took = time.monotonic() - started
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    for path, (status, body) in pages.items():
        assert status == 200, (path, body)
        assert "peer-notice" in body and f"broker {stopped.broker_id} did not answer" in body, (path, body)
    assert took < 20, took
    if gid is not None:
        assert 'id="group-state">Unknown<' in pages[f"/groups/{gid}"][1]
    wait_until(lambda: len(cluster.live_ids()) == 3, timeout_s=60, what="the stopped broker back")
    wait_until(lambda: "peer-notice" not in get(asking, "/groups")[1], timeout_s=60, what="no notice any more")
