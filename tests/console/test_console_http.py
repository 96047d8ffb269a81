"""The console over HTTP against a real broker, with data from a real client (confluent-kafka): pages show what
the broker holds, and actions change it."""

from __future__ import annotations

import html
import http.client
import json
import re
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from odradek.console import messages
from odradek.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tests.console.conftest import ConsoleServer


def _produce(
    server: ConsoleServer,
    topic: str,
    records: list[tuple[bytes | None, bytes, list[Any]]],
    *,
    partition: int | None = None,
    **config: Any,
) -> None:
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0, **config})
    for key, value, headers in records:
        kwargs: dict[str, Any] = {"key": key, "value": value, "headers": headers}
        if partition is not None:
            kwargs["partition"] = partition
        p.produce(topic, **kwargs)
    assert p.flush(30) == 0


def _create(server: ConsoleServer, name: str, partitions: int = 1, configs: str = "") -> None:
    status, doc = server.post("/api/topics", {"name": name, "partitions": str(partitions), "configs": configs})
    assert status == 200 and doc["ok"], doc


def _rows(body: str, attr: str) -> list[str]:
    return re.findall(rf'{attr}="([^"]*)"', body)


def _cell(body: str, row_attr: str, row: str, key: str) -> str:
    m = re.search(rf'<tr[^>]*{row_attr}="{re.escape(row)}"[^>]*>(.*?)</tr>', body, re.S)
    assert m, f"no row {row_attr}={row}"
    c = re.search(rf'data-k="{key}">([^<]*)<', m.group(1))
    assert c, f"no cell {key} in row {row}"
    return html.unescape(c.group(1)).strip()


def test_overview_shows_the_broker_controller_and_partition_health(console: ConsoleServer) -> None:
    _create(console, "health-a", 2)
    status, body = console.get("/")
    assert status == 200
    b = console.broker
    assert b.registry.cluster_id in body
    assert f'id="controller">{b.node_id}<' in body
    m = re.search(r'data-k="partitions">(\d+)<', body)
    assert m and int(m.group(1)) == sum(t.partitions for t in b.registry.topics.values())
    assert re.search(r'data-k="offline">0<', body)
    assert str(console.kafka.server.port) in body


def test_create_topic_form_redirects_to_the_new_topic_and_refuses_bad_input(console: ConsoleServer) -> None:
    status, doc = console.post(
        "/api/topics",
        {"name": "made-here", "partitions": "4", "configs": "retention.ms=3600000\ncleanup.policy=delete"},
    )
    assert status == 200 and doc == {"ok": True, "message": "created topic made-here", "topic": "made-here"}
    topic = console.broker.registry.get("made-here")
    assert topic is not None and topic.partitions == 4 and topic.configs["retention.ms"] == "3600000"
    status, body = console.get("/topics/made-here")
    assert status == 200 and _rows(body, "data-partition") == ["0", "1", "2", "3"]
    assert re.search(
        r'<tr data-config="retention.ms" class="override">\s*<td>retention.ms</td><td class="value">'
        r"3600000</td><td>topic override</td>",
        body,
    )
    # mistakes are answered with the broker's own message, never a 500
    status, doc = console.post("/api/topics", {"name": "made-here", "partitions": "1"})
    assert status == 400 and "already exists" in doc["error"]
    status, doc = console.post("/api/topics", {"name": "bad name!", "partitions": "1"})
    assert status == 400 and "characters" in doc["error"]
    status, doc = console.post("/api/topics", {"name": "x", "configs": "retention.ms=soon"})
    assert status == 400 and doc["ok"] is False
    # a plain form post (no JSON asked for) is redirected to the page with a notice
    req = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
    req.request(
        "POST", "/api/topics", "name=form-made&partitions=1", {"Content-Type": "application/x-www-form-urlencoded"}
    )
    r = req.getresponse()
    assert r.status == 303 and r.getheader("Location").startswith("/topics/form-made?notice=created")
    req.close()


def test_cross_site_posts_are_refused(console: ConsoleServer) -> None:
    status, _ = console.post("/api/topics", {"name": "csrf-topic"}, headers={"Origin": "http://evil.example"})
    assert status == 403
    assert console.broker.registry.get("csrf-topic") is None
    status, doc = console.post("/api/topics", {"name": "same-origin"}, headers={"Origin": console.url})
    assert status == 200 and doc["ok"]


def test_edit_configs_and_delete_a_topic(console: ConsoleServer) -> None:
    _create(console, "editable", 1, "retention.ms=1000")
    status, doc = console.post("/api/topics/editable/configs", {"set": "segment.ms=60000", "delete": "retention.ms"})
    assert status == 200 and doc["overrides"] == {"segment.ms": "60000"}
    assert console.broker.registry.get("editable").configs == {"segment.ms": "60000"}
    status, doc = console.post("/api/topics/editable/configs", {"set": "segment.ms=-5"})
    assert status == 400
    status, doc = console.post("/api/topics/editable/partitions", {"count": "3"})
    assert status == 200 and console.broker.registry.get("editable").partitions == 3
    status, doc = console.post("/api/topics/editable/delete", {"confirm": "wrong"})
    assert status == 400 and "confirm" in doc["error"]
    assert console.broker.registry.get("editable") is not None
    status, doc = console.post("/api/topics/editable/delete", {"confirm": "editable"})
    assert status == 200 and doc["ok"]
    assert console.broker.registry.get("editable") is None
    assert console.get("/topics/editable")[0] == 404
    status, doc = console.post("/api/topics/__consumer_offsets/delete", {"confirm": "__consumer_offsets"})
    assert status == 400


def test_topic_list_is_paginated_and_filtered(console: ConsoleServer) -> None:
    for i in range(60):
        console.on_loop(lambda i=i: console.broker.create_topic(f"page-{i:03d}", 1))
    status, body = console.get("/topics?q=page-")
    assert status == 200
    names = _rows(body, "data-topic")
    assert names == [f"page-{i:03d}" for i in range(50)]
    assert "page 1 of 2" in body
    status, body = console.get("/topics?q=page-&page=2")
    assert _rows(body, "data-topic") == [f"page-{i:03d}" for i in range(50, 60)]
    status, body = console.get("/topics?q=page-05")
    assert _rows(body, "data-topic") == [f"page-{i:03d}" for i in range(50, 60)]


def test_message_browser_from_offset_timestamp_with_filters_and_formats(console: ConsoleServer) -> None:
    _create(console, "browse", 2)
    records = [
        (
            f"user-{i % 3}".encode(),
            json.dumps({"n": i, "kind": "odd" if i % 2 else "even"}).encode(),
            [("source", b"web" if i < 10 else b"app")],
        )
        for i in range(30)
    ]
    _produce(console, "browse", records, partition=0)
    _produce(console, "browse", [(b"other", b"\x00\xffbinary", [])], partition=1)
    status, body = console.get("/topics/browse/messages?partition=0&limit=5")
    assert status == 200
    assert _rows(body, "data-offset") == ["0", "1", "2", "3", "4"]
    assert '{"n": 0, "kind": "even"}' in html.unescape(body)
    assert 'href="?partition=0&offset=5&' in body  # the next page
    status, body = console.get("/topics/browse/messages?partition=0&offset=27")
    assert _rows(body, "data-offset") == ["27", "28", "29"]
    status, body = console.get("/topics/browse/messages?partition=0&offset=-2")
    assert _rows(body, "data-offset") == ["28", "29"]
    # filters: key, value, header (name=value)
    status, body = console.get("/topics/browse/messages?partition=0&key=user-1")
    assert _rows(body, "data-offset") == [str(i) for i in range(30) if i % 3 == 1]
    status, body = console.get("/topics/browse/messages?partition=0&value=odd&header=source%3Dapp")
    assert _rows(body, "data-offset") == [str(i) for i in range(10, 30) if i % 2]
    # all partitions at once, and formats
    status, body = console.get("/topics/browse/messages?format=hex&limit=100")
    assert len(_rows(body, "data-offset")) == 31 and "00 ff 62 69 6e" in body
    status, body = console.get("/topics/browse/messages?partition=0&format=json&limit=1")
    assert "&#34;kind&#34;: &#34;even&#34;" in body and "\n  " in body  # indented JSON
    # from a timestamp: everything was written after t0, nothing after the far future
    status, body = console.get("/topics/browse/messages?partition=0&timestamp=0&limit=3")
    assert _rows(body, "data-offset") == ["0", "1", "2"]
    status, body = console.get(f"/topics/browse/messages?partition=0&timestamp={int(time.time() * 1000) + 3600_000}")
    assert _rows(body, "data-offset") == []
    status, body = console.get("/topics/browse/messages?partition=0&timestamp=yesterday")
    assert status == 200 and "neither epoch milliseconds" in html.unescape(body)


def test_produce_from_the_console_uses_kafkas_partitioner(console: ConsoleServer) -> None:
    _create(console, "produced", 6)
    status, doc = console.post(
        "/api/topics/produced/produce", {"key": "alice", "value": "hello", "headers": "trace=abc\nflag"}
    )
    assert status == 200 and doc["ok"]
    # where confluent-kafka's murmur2 partitioner (the Java client's default) puts the same key
    p = Producer({"bootstrap.servers": console.bootstrap, "partitioner": "murmur2_random"})
    landed: dict[bytes, int] = {}
    keys = (b"alice", b"bob", b"carol", b"dave", b"eve")
    for key in keys:
        p.produce(
            "produced", key=key, value=b"x", on_delivery=lambda err, msg: landed.__setitem__(msg.key(), msg.partition())
        )
    p.flush(30)
    assert landed == {k: messages.default_partition(k, 6) for k in keys}
    assert len(set(landed.values())) > 1
    assert doc["partition"] == landed[b"alice"]
    status, body = console.get(f"/topics/produced/messages?partition={doc['partition']}&offset={doc['offset']}&limit=1")
    assert "hello" in body and "<b>trace</b>: abc" in body and "<b>flag</b>: null" in body
    console.on_loop(console.broker.groups.ensure_started)  # creates __consumer_offsets
    status, doc = console.post("/api/topics/__consumer_offsets/produce", {"value": "x"})
    assert status == 400 and "internal" in doc["error"]


def _consume(server: ConsoleServer, group: str, topic: str, count: int) -> None:
    c = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
            if got == count:
                c.commit(message=m, asynchronous=False)
    assert got == count
    c.close()


def test_group_page_shows_lag_and_resets_offsets_with_a_dry_run(console: ConsoleServer) -> None:
    _create(console, "lagged", 1)
    _produce(console, "lagged", [(None, f"v{i}".encode(), []) for i in range(20)])
    _consume(console, "billing", "lagged", 7)
    status, body = console.get("/groups")
    assert 'data-group="billing"' in body and _cell(body, "data-group", "billing", "lag") == "13"
    status, body = console.get("/groups/billing")
    assert _cell(body, "data-tp", "lagged-0", "committed") == "7"
    assert _cell(body, "data-tp", "lagged-0", "end") == "20"
    assert _cell(body, "data-tp", "lagged-0", "lag") == "13"  # end - committed
    assert re.search(r'id="group-state">Empty<', body)
    # dry run changes nothing
    status, doc = console.post("/api/groups/billing/reset", {"topic": "lagged", "mode": "shift_by", "value": "-5"})
    assert (
        status == 200
        and doc["executed"] is False
        and doc["offsets"] == [{"topic": "lagged", "partition": 0, "offset": 2}]
    )
    assert _cell(console.get("/groups/billing")[1], "data-tp", "lagged-0", "committed") == "7"
    status, doc = console.post("/api/groups/billing/reset", {"mode": "to_offset", "value": "99", "execute": "1"})
    assert status == 200 and doc["executed"] and doc["offsets"][0]["offset"] == 20 and doc["notes"]
    body = console.get("/groups/billing")[1]
    assert _cell(body, "data-tp", "lagged-0", "committed") == "20" and _cell(body, "data-tp", "lagged-0", "lag") == "0"
    status, doc = console.post("/api/groups/billing/reset", {"mode": "to_datetime", "value": "0", "execute": "1"})
    assert status == 200 and doc["offsets"][0]["offset"] == 0
    status, doc = console.post("/api/groups/billing/reset", {"mode": "to_offset", "value": "x"})
    assert status == 400
    assert console.get("/groups/nobody")[0] == 404


def test_reset_is_refused_while_the_group_has_members(console: ConsoleServer) -> None:
    _create(console, "busy", 1)
    _produce(console, "busy", [(None, b"v", [])])
    c = Consumer({"bootstrap.servers": console.bootstrap, "group.id": "busy-group", "auto.offset.reset": "earliest"})
    c.subscribe(["busy"])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            c.poll(0.2)
            g = console.broker.groups.view().groups.get("busy-group")
            if g is not None and g.state.value == "Stable":
                break
        status, body = console.get("/groups/busy-group")
        assert re.search(r'id="group-state">Stable<', body)
        members = re.search(r'<table id="members">(.*?)</table>', body, re.S)
        assert members and "<td>busy-0</td>" in members.group(1)  # the member's assignment, decoded
        status, doc = console.post("/api/groups/busy-group/reset", {"topic": "busy", "mode": "to_earliest"})
        assert status == 400 and "inactive" in doc["error"] and "Stable" in doc["error"]
    finally:
        c.close()


def test_live_tail_pushes_new_records_woken_by_the_broker(console: ConsoleServer) -> None:
    _create(console, "tailed", 2)
    _produce(console, "tailed", [(None, b"before", [])], partition=0)
    conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
    conn.request("GET", "/api/topics/tailed/tail")
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream")
    assert r.readline().startswith(b": tailing")
    events: list[dict[str, Any]] = []

    def read() -> None:
        while len(events) < 3:
            line = r.readline()
            if not line:
                return
            if line.startswith(b"data: "):
                events.append(json.loads(line[6:]))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(0.3)
    started = time.monotonic()
    _produce(console, "tailed", [(b"k", b"after-1", [("h", b"1")])], partition=0)
    _produce(console, "tailed", [(None, b"after-2", [])], partition=1)
    _produce(console, "tailed", [(None, b"after-3", [])], partition=0)
    reader.join(timeout=20)
    took = time.monotonic() - started
    conn.close()
    assert [e["value"] for e in sorted(events, key=lambda e: e["value"])] == ["after-1", "after-2", "after-3"]
    first = next(e for e in events if e["value"] == "after-1")
    assert first["partition"] == 0 and first["offset"] == 1 and first["key"] == "k" and first["headers"] == [["h", "1"]]
    assert took < 5  # woken by the append, not by the 10 s keepalive


def test_transactions_page_lists_open_transactions(console: ConsoleServer) -> None:
    _create(console, "txn-topic", 1)
    p = Producer({"bootstrap.servers": console.bootstrap, "transactional.id": "tx-console"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("txn-topic", value=b"pending")
    p.flush(30)
    try:
        status, body = console.get("/transactions")
        assert status == 200
        assert 'data-tid="tx-console"' in body and "Ongoing" in body and "txn-topic-0" in body
        m = re.search(r"<table id=\"producers\">(.*?)</table>", body, re.S)
        assert m and "txn-topic-0" in m.group(1)
        m = re.search(r"<table id=\"hanging\">(.*?)</table>", body, re.S)
        assert m and "None." in m.group(1)  # open, but its coordinator still drives it
    finally:
        p.commit_transaction(30)
    status, body = console.get("/transactions")
    assert "CompleteCommit" in body


def test_security_page_without_an_authorizer_shows_quotas(console: ConsoleServer) -> None:
    from odradek.quota.entity import entity

    console.run(console.broker.alter_client_quota(entity([("user", "alice")]), {"producer_byte_rate": "1024"}))
    status, body = console.get("/security")
    assert status == 200 and "user &#39;alice&#39;" in body and "producer_byte_rate = 1024" in body
    assert 'id="no-authorizer"' in body


@pytest.mark.parametrize("path", ["/", "/topics", "/groups", "/transactions", "/security", "/static/console.js"])
def test_every_page_answers(console: ConsoleServer, path: str) -> None:
    assert console.get(path)[0] == 200


def test_hanging_transaction_is_shown(console: ConsoleServer) -> None:
    """A transaction no coordinator knows (a producer id the coordinator never gave out), open for two hours."""
    from odradek.protocol.records import RecordInput, build_batch

    _create(console, "hung", 1)
    old = int(time.time() * 1000) - 2 * 3600_000
    batch = build_batch(
        [RecordInput(None, b"stuck")],
        base_timestamp=old,
        producer_id=987_654,
        producer_epoch=3,
        base_sequence=0,
        is_transactional=True,
    )
    console.on_loop(lambda: console.broker.replicas.append("hung", 0, batch))
    status, body = console.get("/transactions")
    m = re.search(r'<table id="hanging">(.*?)</table>', body, re.S)
    assert (
        status == 200
        and m
        and "hung-0" in m.group(1)
        and "987654" in m.group(1)
        and '<td class="num">120</td>' in m.group(1)
    )
    # the stuck transaction holds back read_committed readers; the browser shows what read_uncommitted sees
    assert 'data-offset="0"' in console.get("/topics/hung/messages")[1]
    assert 'data-offset="0"' not in console.get("/topics/hung/messages?isolation=read_committed")[1]
    status, doc = console.post("/api/transactions/abort", {"topic": "hung", "partition": "0", "start_offset": "1"})
    assert status == 400 and "no open transaction starts at offset 1 in hung-0" in doc["error"]
    status, doc = console.post("/api/transactions/abort", {"topic": "hung", "partition": "0", "start_offset": "0"})
    assert status == 200 and doc["producer_id"] == 987_654 and doc["producer_epoch"] == 3
    m = re.search(r'<table id="hanging">(.*?)</table>', console.get("/transactions")[1], re.S)
    assert m and "hung-0" not in m.group(1)
    lg = console.broker.get_log("hung", 0)
    assert lg.last_stable_offset == lg.high_watermark == 2  # the record and its ABORT marker
    assert _rows(console.get("/topics/hung/messages?isolation=read_committed")[1], "data-offset") == []


def test_tail_ends_when_its_topic_is_deleted(console: ConsoleServer) -> None:
    _create(console, "short-lived", 1)
    conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
    conn.request("GET", "/api/topics/short-lived/tail?partition=0")
    r = conn.getresponse()
    assert r.readline().startswith(b": tailing")
    status, doc = console.post("/api/topics/short-lived/delete", {"confirm": "short-lived"})
    assert status == 200 and doc["ok"]
    # the tail notices at its next wake-up (here a notification; at the latest its 10 s keepalive)
    console.on_loop(lambda: console.broker.notify("short-lived", 0))
    started = time.monotonic()
    rest = r.read()  # the stream ends
    assert time.monotonic() - started < 5 and b"data:" not in rest
    conn.close()
    assert console.get("/api/topics/nowhere/tail")[0] == 404


def test_acls_are_listed_with_an_authorizer(tmp_path: Any) -> None:
    server = ConsoleServer(
        tmp_path,
        {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "allow.everyone.if.no.acl.found": "true"},
    )
    try:
        store = server.broker.acl_store
        assert store is not None
        binding = AclBinding(
            ResourcePattern(ResourceType.TOPIC, "orders", PatternType.PREFIXED),
            AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
        )
        assert server.run(store.create([binding])) == [None]
        status, body = server.get("/security")
        m = re.search(r'<table id="acls">(.*?)</table>', body, re.S)
        assert status == 200 and m
        assert re.search(
            r"<td>TOPIC</td><td>orders</td><td>PREFIXED</td><td>User:alice</td>\s*<td>\*</td>"
            r"<td>READ</td><td>ALLOW</td>",
            m.group(1),
        )
    finally:
        server.close()


def _commit_offset(server: ConsoleServer, group: str, topic: str) -> None:
    """Commit offset 0 of ``topic``'s partition 0 for ``group`` (a group without members, as an admin client does)."""
    server.run(
        server.broker.groups.call(
            lambda c, ticket, now: c.commit(
                ticket,
                group_id=group,
                generation_id=-1,
                member_id="",
                group_instance_id=None,
                offsets=[(topic, 0, 0, -1, "")],
                retention_ms=-1,
                partition_exists=lambda t, p: True,
                now=now,
            )
        )
    )


def test_group_list_is_paginated_and_filtered(console: ConsoleServer) -> None:
    _create(console, "many-groups", 1)
    for i in range(55):
        _commit_offset(console, f"paged-{i:02d}", "many-groups")
    status, body = console.get("/groups?q=paged-")
    assert status == 200 and _rows(body, "data-group") == [f"paged-{i:02d}" for i in range(50)]
    assert "page 1 of 2" in body
    assert _rows(console.get("/groups?q=paged-&page=2")[1], "data-group") == [f"paged-{i:02d}" for i in range(50, 55)]
    assert _rows(console.get("/groups?q=paged-3")[1], "data-group") == [f"paged-3{i}" for i in range(10)]


def test_read_committed_browsing_leaves_out_aborted_and_open_transactions(console: ConsoleServer) -> None:
    _create(console, "isolated", 1)
    p = Producer({"bootstrap.servers": console.bootstrap, "transactional.id": "tx-isolated"})
    p.init_transactions(30)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True), ([b"open"], None)):
        p.begin_transaction()
        for v in values:
            p.produce("isolated", value=v, partition=0)
        p.flush(30)
        if commit is True:
            p.commit_transaction(30)
        elif commit is False:
            p.abort_transaction(30)

    def values(query: str) -> list[str]:
        body = console.get(f"/topics/isolated/messages?partition=0{query}")[1]
        return re.findall(r'<td class="value"><pre>([^<]*)</pre>', body)

    try:
        assert values("") == ["c1", "c2", "a1", "a2", "c3", "open"]
        assert values("&isolation=read_committed") == ["c1", "c2", "c3"]
        assert values("&isolation=read_committed&offset=3") == ["c3"]  # a1, a2 (offsets 3, 4) were aborted
    finally:
        p.abort_transaction(30)
    assert values("&isolation=read_committed") == ["c1", "c2", "c3"]


def test_stopping_the_console_ends_open_tails_at_once(tmp_path: Any) -> None:
    server = ConsoleServer(tmp_path, {"num.partitions": "1"})
    try:
        server.on_loop(lambda: server.broker.create_topic("followed", 1))
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("GET", "/api/topics/followed/tail")
        r = conn.getresponse()
        assert r.readline().startswith(b": tailing")
        started = time.monotonic()
        assert server.runner is not None
        server.run(server.runner.cleanup())
        server.runner = None
        assert time.monotonic() - started < 1.5  # not the 10 s keepalive, nor the 2 s shutdown timeout
        conn.close()
    finally:
        server.close()


def test_with_an_authorizer_the_console_needs_the_acls_kafka_apis_need(tmp_path: Any) -> None:
    """The console's user here is ANONYMOUS (no HTTP authentication without SASL listeners)."""
    server = ConsoleServer(tmp_path, {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    try:
        for name in ("open-a", "open-b", "secret"):
            server.on_loop(lambda name=name: server.broker.create_topic(name, 1))
        store = server.broker.acl_store
        assert store is not None

        def allow(rtype: ResourceType, name: str, pattern: PatternType, *ops: AclOperation) -> list[AclBinding]:
            return [
                AclBinding(
                    ResourcePattern(rtype, name, pattern),
                    AccessControlEntry("User:ANONYMOUS", "*", op, AclPermissionType.ALLOW),
                )
                for op in ops
            ]

        acls = [
            *allow(
                ResourceType.TOPIC,
                "open-",
                PatternType.PREFIXED,
                AclOperation.DESCRIBE,
                AclOperation.READ,
                AclOperation.WRITE,
            ),
            *allow(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, AclOperation.DESCRIBE),
        ]
        assert server.run(store.create(acls)) == [None] * len(acls)
        assert server.get("/")[0] == 200
        status, body = server.get("/topics")
        assert status == 200 and _rows(body, "data-topic") == ["open-a", "open-b"]
        assert server.get("/topics/open-a")[0] == 200 and server.get("/topics/open-a/messages")[0] == 200
        assert server.get("/topics/secret")[0] == 403
        assert server.get("/topics/secret/messages")[0] == 403
        assert server.get("/api/topics/secret/tail")[0] == 403
        status, doc = server.post("/api/topics/open-a/produce", {"value": "allowed"})
        assert status == 200 and doc["ok"]
        status, doc = server.post("/api/topics/secret/produce", {"value": "no"})
        assert status == 403 and doc["error"] == "User:ANONYMOUS may not WRITE topic 'secret'"
        status, doc = server.post("/api/topics/open-a/delete", {"confirm": "open-a"})
        assert status == 403 and server.broker.registry.get("open-a") is not None
        assert server.post("/api/topics", {"name": "open-c"})[0] == 403
        assert server.post("/api/topics/open-a/configs", {"set": "retention.ms=1"})[0] == 403
        assert server.post("/api/groups/g/reset", {"mode": "to_earliest", "topic": "open-a"})[0] == 403
        abort = {"topic": "open-a", "partition": "0", "start_offset": "0"}
        assert server.post("/api/transactions/abort", abort)[0] == 403
    finally:
        server.close()


def test_group_ids_with_any_characters_have_working_links(console: ConsoleServer) -> None:
    _create(console, "odd-ids", 1)
    group = "team/a b?&<x>"
    _commit_offset(console, group, "odd-ids")
    status, body = console.get("/groups?q=team")
    link = re.search(r'<a href="(/groups/[^"]+)">', body)
    assert status == 200 and link and "&lt;x&gt;" in body and "<x>" not in body
    status, body = console.get(html.unescape(link.group(1)))
    assert status == 200 and re.search(r'id="group-id">team/a b\?&amp;&lt;x&gt;<', body)


# -- managing quotas and ACLs -------------------------------------------------------------------------------


def _quota_configs(server: ConsoleServer, *components: tuple[str, str | None]) -> dict[str, str]:
    from odradek.quota.entity import entity

    return server.broker.client_quota_configs().get(entity(components), {})


def test_quotas_are_set_and_removed_from_the_console(
    console: ConsoleServer, capsys: pytest.CaptureFixture[str]
) -> None:
    from odradek.cli.main import main

    status, doc = console.post("/api/quotas", {"user": "carol", "key": "producer_byte_rate", "value": "2048"})
    assert status == 200 and doc["configs"] == {"producer_byte_rate": "2048"}
    assert doc["message"] == "set producer_byte_rate=2048 for user 'carol'"
    status, doc = console.post(
        "/api/quotas", {"user": "carol", "client_id": "<default>", "key": "request_percentage", "value": "50"}
    )
    assert status == 200 and _quota_configs(console, ("user", "carol"), ("client-id", None)) == {
        "request_percentage": "50.0"
    }
    status, body = console.get("/security")
    m = re.search(r'<tr data-entity="user &#39;carol&#39;">(.*?)</tr>', body, re.S)
    assert status == 200 and m and "producer_byte_rate = 2048" in m.group(1) and 'class="remove-quota' in m.group(1)
    assert 'id="set-quota"' in body
    # a real client sees it through DescribeClientQuotas (kafka-python, as `odradek configs describe` sends it)
    capsys.readouterr()
    argv = ["configs", "describe", "--bootstrap-server", console.bootstrap, "--entity-type", "users"]
    assert main([*argv, "--entity-name", "carol"]) == 0
    assert capsys.readouterr().out.strip() == "Quota configs for user-principal 'carol' are producer_byte_rate=2048.0"
    # mistakes: the AlterClientQuotas handler's own messages, and nothing changes
    for fields, message in (
        ({"value": "-5"}, "producer_byte_rate must be a positive number, got -5.0"),
        ({"value": "1.5"}, "producer_byte_rate must be a whole number, got 1.5"),
        ({"value": "lots"}, "producer_byte_rate must be a number, got 'lots'"),
        ({"key": "bytes_per_day"}, "'bytes_per_day' is not a quota config of user 'carol'"),
        ({"ip": "10.0.0.1"}, "a quota entity is a user, a client-id, a user with a client-id, or an ip"),
        ({"user": ""}, "name the entity"),
    ):
        form = {"user": "carol", "key": "producer_byte_rate", "value": "4096", **fields}
        status, doc = console.post("/api/quotas", form)
        assert status == 400 and doc["ok"] is False and message in doc["error"], (fields, doc)
    assert _quota_configs(console, ("user", "carol")) == {"producer_byte_rate": "2048"}
    # a plain form post goes back to the page, which shows the error
    req = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
    req.request(
        "POST",
        "/api/quotas",
        "user=carol&key=producer_byte_rate&value=-1",
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    r = req.getresponse()
    location = r.getheader("Location")
    assert r.status == 303 and location.startswith("/security?error=")
    req.close()
    status, body = console.get(location)
    assert status == 200 and '<p class="error" role="alert">producer_byte_rate must be a positive number' in body
    # remove, per key
    status, doc = console.post("/api/quotas/remove", {"user": "carol", "key": "producer_byte_rate"})
    assert status == 200 and doc["configs"] == {} and _quota_configs(console, ("user", "carol")) == {}
    status, doc = console.post("/api/quotas/remove", {"user": "carol", "key": "producer_byte_rate"})
    assert status == 400 and doc["error"] == "producer_byte_rate is not set for user 'carol'"
    assert 'data-entity="user &#39;carol&#39;"' not in console.get("/security")[1]
    status, doc = console.post(
        "/api/quotas/remove", {"user": "carol", "client_id": "<default>", "key": "request_percentage"}
    )
    assert status == 200 and _quota_configs(console, ("user", "carol"), ("client-id", None)) == {}


def test_cross_site_quota_and_acl_posts_are_refused(console: ConsoleServer) -> None:
    evil = {"Origin": "http://evil.example"}
    form = {"user": "mallory", "key": "producer_byte_rate", "value": "1"}
    assert console.post("/api/quotas", form, headers=evil)[0] == 403
    assert _quota_configs(console, ("user", "mallory")) == {}
    acl = {"principal": "User:mallory", "operation": "ALL", "permission": "ALLOW", "resource_type": "TOPIC",
           "name": "*", "pattern_type": "LITERAL"}
    assert console.post("/api/acls", acl, headers=evil)[0] == 403
    assert console.post("/api/acls/remove", acl, headers=evil)[0] == 403


def test_acls_cannot_be_managed_without_an_authorizer(console: ConsoleServer) -> None:
    status, body = console.get("/security")
    assert status == 200 and 'id="no-authorizer"' in body and 'id="add-acl"' not in body
    acl = {"principal": "User:alice", "operation": "READ", "permission": "ALLOW", "resource_type": "TOPIC",
           "name": "t", "pattern_type": "LITERAL"}
    status, doc = console.post("/api/acls", acl)
    assert status == 400 and doc["error"].startswith("No Authorizer is configured on the broker")


def test_acls_are_added_and_removed_from_the_console(tmp_path: Any) -> None:
    from confluent_kafka.admin import AclBindingFilter as ClientFilter
    from confluent_kafka.admin import AclOperation as ClientOperation
    from confluent_kafka.admin import AclPermissionType as ClientPermission
    from confluent_kafka.admin import AdminClient, ResourcePatternType
    from confluent_kafka.admin import ResourceType as ClientResourceType

    server = ConsoleServer(
        tmp_path,
        {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "allow.everyone.if.no.acl.found": "true"},
    )
    try:
        authorizer = server.broker.authorizer
        assert authorizer is not None
        status, body = server.get("/security")
        assert status == 200 and 'id="add-acl"' in body
        assert authorizer.authorize("bob", "10.0.0.9", AclOperation.READ, ResourceType.TOPIC, "orders-1")
        acl = {"principal": "User:alice", "host": "", "operation": "READ", "permission": "ALLOW",
               "resource_type": "TOPIC", "name": "orders-", "pattern_type": "PREFIXED"}
        status, doc = server.post("/api/acls", acl)
        assert status == 200 and doc["message"] == (
            "added ACL: ALLOW User:alice READ from host * on TOPIC PREFIXED 'orders-'"
        )
        # enforced: alice may read the topics it covers; bob, who may do anything where no ACL applies, may not
        assert authorizer.authorize("alice", "10.0.0.9", AclOperation.READ, ResourceType.TOPIC, "orders-1")
        assert not authorizer.authorize("alice", "10.0.0.9", AclOperation.WRITE, ResourceType.TOPIC, "orders-1")
        assert not authorizer.authorize("bob", "10.0.0.9", AclOperation.READ, ResourceType.TOPIC, "orders-1")
        # listed on the page, and by a real client's DescribeAcls
        status, body = server.get("/security")
        row = re.search(r'<tr data-acl="TOPIC orders- PREFIXED User:alice \* READ ALLOW">(.*?)</tr>', body, re.S)
        assert status == 200 and row and 'action="/api/acls/remove"' in row.group(1)
        admin_client = AdminClient({"bootstrap.servers": server.bootstrap})
        described = admin_client.describe_acls(
            ClientFilter(ClientResourceType.ANY, None, ResourcePatternType.ANY, None, None, ClientOperation.ANY,
                         ClientPermission.ANY)
        ).result(timeout=30)
        assert [(b.name, b.principal, b.host, b.operation.name, b.permission_type.name) for b in described] == [
            ("orders-", "User:alice", "*", "READ", "ALLOW")
        ]
        # what Kafka refuses is refused with its message, and nothing is added
        for fields, message in (
            ({"principal": "alice"}, "Invalid principal: expected a string in format principalType:principalName"),
            ({"resource_type": "CLUSTER", "name": "c"}, "The only valid name for the CLUSTER resource is"),
            ({"name": ""}, "Invalid empty resource name"),
            ({"operation": "FLY"}, "unknown operation 'FLY'"),
            ({"pattern_type": "MATCH"}, "unknown pattern type 'MATCH'"),
        ):
            status, doc = server.post("/api/acls", {**acl, **fields})
            assert status == 400 and message in doc["error"], (fields, doc)
        assert len(authorizer.acls()) == 1
        # removed: exactly that binding
        other = {**acl, "permission": "DENY", "principal": "User:carl"}
        assert server.post("/api/acls", other)[0] == 200
        status, doc = server.post("/api/acls/remove", {**acl, "host": "*"})
        assert status == 200 and doc["message"].startswith("removed ACL: ALLOW User:alice READ")
        assert [b.entry.principal for b in authorizer.acls()] == ["User:carl"]
        assert server.post("/api/acls/remove", {**acl, "host": "*"}) == (
            400, {"ok": False, "error": "no such ACL: ResourcePattern(resourceType=TOPIC, name=orders-, "
                  "patternType=PREFIXED) (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"})
        assert server.post("/api/acls/remove", other)[0] == 200
        assert authorizer.acls() == []
        assert authorizer.authorize("bob", "10.0.0.9", AclOperation.READ, ResourceType.TOPIC, "orders-1")
        assert "No ACLs." in server.get("/security")[1]
    finally:
        server.close()


def test_managing_quotas_and_acls_needs_the_acls_kafka_apis_need(tmp_path: Any) -> None:
    """CreateAcls/DeleteAcls need ALTER on the cluster, AlterClientQuotas ALTER_CONFIGS; the user is ANONYMOUS."""
    server = ConsoleServer(tmp_path, {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    try:
        store, authorizer = server.broker.acl_store, server.broker.authorizer
        assert store is not None and authorizer is not None

        def grant(op: AclOperation) -> None:
            binding = AclBinding(
                ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                AccessControlEntry("User:ANONYMOUS", "*", op, AclPermissionType.ALLOW),
            )
            assert server.run(store.create([binding])) == [None]

        grant(AclOperation.DESCRIBE)
        status, body = server.get("/security")
        assert status == 200 and 'id="add-acl"' not in body and 'id="set-quota"' not in body
        acl = {"principal": "User:eve", "operation": "ALL", "permission": "ALLOW", "resource_type": "TOPIC",
               "name": "*", "pattern_type": "LITERAL"}
        status, doc = server.post("/api/acls", acl)
        assert status == 403 and doc["error"] == "User:ANONYMOUS may not ALTER the cluster"
        assert len(authorizer.acls()) == 1
        quota = {"user": "eve", "key": "consumer_byte_rate", "value": "100"}
        status, doc = server.post("/api/quotas", quota)
        assert status == 403 and doc["error"] == "User:ANONYMOUS may not ALTER_CONFIGS the cluster"
        assert server.post("/api/quotas/remove", quota)[0] == 403
        assert _quota_configs(server, ("user", "eve")) == {}
        grant(AclOperation.ALTER)
        assert 'id="add-acl"' in server.get("/security")[1]
        assert server.post("/api/acls", acl)[0] == 200 and len(authorizer.acls()) == 3
        assert server.post("/api/acls/remove", acl)[0] == 200 and len(authorizer.acls()) == 2
        assert server.post("/api/quotas", quota)[0] == 403
        grant(AclOperation.ALTER_CONFIGS)
        assert 'id="set-quota"' in server.get("/security")[1]
        assert server.post("/api/quotas", quota)[0] == 200
        assert _quota_configs(server, ("user", "eve")) == {"consumer_byte_rate": "100"}
    finally:
        server.close()
