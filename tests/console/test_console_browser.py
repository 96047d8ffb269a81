"""The console in headless Chromium (Debian's, driven by Playwright): the main pages render what the broker holds
and the main actions work from their forms. Each test saves a screenshot under its tmp_path; the assertions are on
the rendered DOM."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from tests.console.conftest import ConsoleServer


@pytest.fixture
def page(browser: Any, console: ConsoleServer) -> Iterator[Any]:
    context = browser.new_context(base_url=console.url, viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    try:
        yield pg
    finally:
        context.close()


def _shot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000
    return path


def _produce(server: ConsoleServer, topic: str, values: list[bytes], *, partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
    for i, v in enumerate(values):
        p.produce(topic, key=f"key-{i}".encode(), value=v, partition=partition)
    assert p.flush(30) == 0


def test_overview(page: Any, console: ConsoleServer, tmp_path: Path) -> None:
    page.goto("/")
    assert page.locator("h1").first.inner_text() == "Cluster"
    assert page.locator("#cluster-id").inner_text() == console.broker.registry.cluster_id
    assert page.locator("#controller").inner_text() == str(console.broker.node_id)
    assert page.locator('#health [data-k="offline"]').inner_text() == "0"
    assert "controller (this broker)" in page.locator("#brokers").inner_text()
    _shot(page, tmp_path, "overview")


def test_create_topic_from_the_form_then_delete_it(page: Any, console: ConsoleServer, tmp_path: Path) -> None:
    page.goto("/topics")
    form = page.locator("#create-topic")
    form.locator('[name="name"]').fill("browser-made")
    form.locator('[name="partitions"]').fill("3")
    form.locator('[name="configs"]').fill("retention.ms=7200000")
    form.locator("button").click()
    page.wait_for_url("**/topics/browser-made?notice=*")
    assert page.locator(".notice").inner_text() == "created topic browser-made"
    assert page.locator("#partitions tr[data-partition]").count() == 3
    assert page.locator('#configs tr[data-config="retention.ms"] .value').inner_text() == "7200000"
    _shot(page, tmp_path, "topic-created")
    page.goto("/topics?q=browser")
    assert page.locator("#topics tr[data-topic]").all_inner_texts()[0].startswith("browser-made")
    _shot(page, tmp_path, "topics")
    page.goto("/topics/browser-made")
    page.locator('#delete-topic [name="confirm"]').fill("browser-made")
    page.locator("#delete-topic button").click()
    page.wait_for_url("**/topics?notice=*")
    assert page.locator(".notice").inner_text() == "deleted topic browser-made"
    assert console.broker.registry.get("browser-made") is None


def test_message_browser_shows_produced_values_and_filters(page: Any, console: ConsoleServer, tmp_path: Path) -> None:
    console.on_loop(lambda: console.broker.create_topic("shown", 1))
    _produce(
        console, "shown", [f'{{"order": {i}, "item": "{"apple" if i % 2 else "pear"}"}}'.encode() for i in range(12)]
    )
    page.goto("/topics/shown/messages")
    values = page.locator("#messages td.value").all_inner_texts()
    assert values == [f'{{"order": {i}, "item": "{"apple" if i % 2 else "pear"}"}}' for i in range(12)]
    page.locator('#browse [name="value"]').fill("apple")
    page.locator('#browse [name="format"]').select_option("json")
    page.locator("#browse button").click()
    page.wait_for_url("**value=apple**")
    offsets = [
        int(o)
        for o in page.locator("#messages tr[data-offset]").evaluate_all("rows => rows.map(r => r.dataset.offset)")
    ]
    assert offsets == [1, 3, 5, 7, 9, 11]
    assert '"item": "apple"' in page.locator("#messages td.value").first.inner_text()
    _shot(page, tmp_path, "messages")


def test_live_tail_and_produce_form(page: Any, console: ConsoleServer, tmp_path: Path) -> None:
    console.on_loop(lambda: console.broker.create_topic("live", 1))
    page.goto("/topics/live/messages")
    page.locator("#tail-toggle").click()
    page.wait_for_function("document.getElementById('tail-status').textContent === 'following'")
    _produce(console, "live", [b"first live value", b"second live value"])
    page.wait_for_function("document.querySelectorAll('#tail tbody tr').length >= 2")
    assert page.locator("#tail tbody td pre").all_inner_texts().count("second live value") == 1
    _shot(page, tmp_path, "live-tail")
    # the produce form: the record comes back through the tail as well as the browser
    form = page.locator("#produce")
    form.locator('[name="key"]').fill("from-browser")
    form.locator('[name="value"]').fill("typed in the console")
    form.locator("button").click()
    page.wait_for_url("**/messages?notice=*")
    assert page.locator(".notice").inner_text() == "produced to partition 0 at offset 2"
    assert "typed in the console" in page.locator("#messages").inner_text()


def test_group_page_shows_lag_chart_and_dry_run(page: Any, console: ConsoleServer, tmp_path: Path) -> None:
    console.on_loop(lambda: console.broker.create_topic("consumed", 2))
    _produce(console, "consumed", [b"v"] * 10, partition=0)
    _produce(console, "consumed", [b"v"] * 4, partition=1)
    c = Consumer(
        {
            "bootstrap.servers": console.bootstrap,
            "group.id": "shipping",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe(["consumed"])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 14 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen += 1
    from confluent_kafka import TopicPartition

    c.commit(offsets=[TopicPartition("consumed", 0, 6), TopicPartition("consumed", 1, 1)], asynchronous=False)
    c.close()
    time.sleep(0.5)  # a lag sample or two (every 200 ms in these tests)
    page.goto("/groups")
    assert page.locator('#groups tr[data-group="shipping"] [data-k="lag"]').inner_text() == "7"
    page.locator('#groups a:text-is("shipping")').click()
    page.wait_for_url("**/groups/shipping")
    for tp, committed, end in (("consumed-0", 6, 10), ("consumed-1", 1, 4)):
        row = page.locator(f'#offsets tr[data-tp="{tp}"]')
        assert row.locator('[data-k="committed"]').inner_text() == str(committed)
        assert row.locator('[data-k="end"]').inner_text() == str(end)
        assert row.locator('[data-k="lag"]').inner_text() == str(end - committed)
    assert page.locator("#total-lag").inner_text() == "7"
    assert page.locator("#lag-chart svg polyline").count() == 1
    form = page.locator("#reset")
    form.locator('[name="mode"]').select_option("to_latest")
    form.locator("button").click()
    page.wait_for_selector("#reset-plan")
    assert page.locator("#reset-title").inner_text() == "Dry run: nothing changed"
    assert page.locator('#reset-plan tr[data-tp="consumed-0"] [data-k="new"]').inner_text() == "10"
    assert page.locator('#offsets tr[data-tp="consumed-0"] [data-k="committed"]').inner_text() == "6"
    _shot(page, tmp_path, "group")


def test_add_and_remove_an_acl_from_the_form(browser: Any, tmp_path: Path) -> None:
    from odradek.security.acl import AclOperation, ResourceType

    (tmp_path / "broker").mkdir()
    server = ConsoleServer(
        tmp_path / "broker",
        {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "allow.everyone.if.no.acl.found": "true"},
    )
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        authorizer = server.broker.authorizer
        assert authorizer is not None
        page.goto("/security")
        form = page.locator("#add-acl")
        assert form.locator('[name="host"]').input_value() == "*"
        form.locator('[name="principal"]').fill("User:alice")
        form.locator('[name="operation"]').select_option("WRITE")
        form.locator('[name="permission"]').select_option("ALLOW")
        form.locator('[name="resource_type"]').select_option("TOPIC")
        form.locator('[name="name"]').fill("payments")
        form.locator('[name="pattern_type"]').select_option("LITERAL")
        form.locator("button").click()
        page.wait_for_url("**/security?notice=*")
        assert page.locator(".notice").inner_text() == (
            "added ACL: ALLOW User:alice WRITE from host * on TOPIC LITERAL 'payments'"
        )
        row = page.locator('#acls tr[data-acl="TOPIC payments LITERAL User:alice * WRITE ALLOW"]')
        assert row.count() == 1
        assert authorizer.authorize("alice", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "payments")
        assert not authorizer.authorize("bob", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "payments")
        _shot(page, tmp_path, "acl-added")
        # a mistake comes back as the broker's message on the page
        form = page.locator("#add-acl")
        form.locator('[name="principal"]').fill("alice")
        form.locator('[name="name"]').fill("payments")
        form.locator("button").click()
        page.wait_for_url("**/security?error=*")
        assert "Invalid principal" in page.locator(".error").inner_text()
        assert len(authorizer.acls()) == 1
        page.locator('#acls tr[data-acl="TOPIC payments LITERAL User:alice * WRITE ALLOW"] button').click()
        page.wait_for_url("**/security?notice=removed*")
        assert page.locator("#acls tr[data-acl]").count() == 0
        assert authorizer.acls() == []
        _shot(page, tmp_path, "acl-removed")
    finally:
        context.close()
        server.close()
