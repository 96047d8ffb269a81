"""Web console page times with 1,000 topics.

Run (from the repository root)::

    PYTHONPATH=. python -m bench.console            # 1,000 topics x 3 partitions, 30 requests per page
    PYTHONPATH=. python -m bench.console --quick    # 200 topics, 10 requests per page

Set-up (untimed): an in-process broker (``tests/broker/inprocess.py``: its event loop in a thread) with the console
served by aiohttp on that loop, as the broker's HTTP listener serves it (``odradek.console.setup``). ``--topics``
topics of 3 partitions are created through ``Broker.create_topic``; a confluent-kafka producer writes 10 records of
200 bytes to every partition, and 10,000 records (keyed, 200-byte JSON values) to ``bench-0000``; 20 consumer groups
commit offsets on ``bench-0000`` (one with a member that stays in the group).

Timed: ``--requests`` sequential GETs of each page from this process over loopback HTTP (keep-alive). Two figures
per page: **server** time, the handler's own time (a middleware around the console's handlers measures it with
``perf_counter`` and sends it as a ``Server-Timing`` header), and **total**, from sending the request to having read
the whole body (urllib, in this process). Figures are the median and the 95th percentile in milliseconds.

Also timed: the live tail's latency, from an append on the broker's loop (``ReplicaManager.append``, as Produce
appends) to the record's event read by a tail client, ``2 x --requests`` records one at a time.

Goals (issue 17): overview and topic pages < 300 ms server time; the first 100 messages of a topic < 200 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web
from confluent_kafka import Consumer, Producer, TopicPartition

from bench._common import engine_version, machine_facts, median, percentile, print_facts
from odradek import console
from tests.broker.inprocess import LOOPBACK, InProcessBroker

GOALS_MS = {"overview": 300.0, "topics": 300.0, "topic": 300.0, "messages": 200.0}


@web.middleware
async def server_timing(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    started = time.perf_counter()
    resp = await handler(request)
    resp.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.3f}"
    return resp


def start_console(kafka: InProcessBroker) -> tuple[web.AppRunner, int]:
    async def start() -> tuple[web.AppRunner, int]:
        app = web.Application(middlewares=[server_timing])
        console.setup(app, kafka.broker)
        runner = web.AppRunner(app, shutdown_timeout=2)
        await runner.setup()
        site = web.TCPSite(runner, LOOPBACK, 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    return kafka._run(start())


def fill(kafka: InProcessBroker, topics: int) -> None:
    b = kafka.broker
    started = time.monotonic()
    for i in range(topics):
        kafka.on_loop(lambda i=i: b.create_topic(f"bench-{i:04d}", 3))
    print(f"# created {topics} topics x 3 partitions in {time.monotonic() - started:.1f} s", flush=True)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    value = b"x" * 200
    for i in range(topics):
        for part in range(3):
            for _ in range(10):
                p.produce(f"bench-{i:04d}", value=value, partition=part)
        p.poll(0)
    for n in range(10_000):
        doc = json.dumps({"order": n, "customer": f"c-{n % 97}", "pad": "y" * 150}).encode()
        p.produce("bench-0000", key=f"c-{n % 97}".encode(), value=doc)
        if n % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    for g in range(20):
        c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"group-{g:02d}", "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("bench-0000", part, 100 * g) for part in range(3)], asynchronous=False)
        c.close()
    print(f"# filled in {time.monotonic() - started:.1f} s", flush=True)


def measure(port: int, path: str, n: int) -> tuple[list[float], list[float]]:
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=60)
    server: list[float] = []
    total: list[float] = []
    for _ in range(n + 1):  # the first request warms up (template compilation), untimed
        t0 = time.perf_counter()
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
        t1 = time.perf_counter()
        assert r.status == 200, (path, r.status, body[:200])
        timing = r.getheader("Server-Timing") or ""
        server.append(float(timing.split("dur=")[1]) if "dur=" in timing else float("nan"))
        total.append((t1 - t0) * 1000)
    conn.close()
    return server[1:], total[1:]


def tail_latency(kafka: InProcessBroker, port: int, topic: str, n: int) -> list[float]:
    """Milliseconds from an append (``ReplicaManager.append`` on the broker's loop, as Produce does it) to its event
    read by a live-tail client."""
    from odradek.protocol.records import build_batch

    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=60)
    conn.request("GET", f"/api/topics/{topic}/tail?partition=0")
    r = conn.getresponse()
    assert r.status == 200 and r.readline().startswith(b": tailing")
    out = []
    for i in range(n + 1):
        batch = build_batch([(None, f"tail-{i}".encode())])
        t0 = time.perf_counter()
        kafka.on_loop(lambda batch=batch: kafka.broker.replicas.append(topic, 0, batch))
        while not (line := r.readline()).startswith(b"data: "):
            assert line, "the tail ended"
        out.append((time.perf_counter() - t0) * 1000)
        assert json.loads(line[6:])["value"] == f"tail-{i}"
        r.readline()  # the blank line ending the event
        time.sleep(0.01)  # the tail is waiting again
    conn.close()
    return out[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 topics, 10 requests per page")
    ap.add_argument("--topics", type=int, default=None)
    ap.add_argument("--requests", type=int, default=None)
    args = ap.parse_args()
    topics = args.topics or (200 if args.quick else 1000)
    n = args.requests or (10 if args.quick else 30)
    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        print_facts({**machine_facts(Path(tmp)), "engine": engine_version()})
        kafka = InProcessBroker(Path(tmp), {"num.partitions": "3", "group.initial.rebalance.delay.ms": "0"})
        try:
            fill(kafka, topics)
            member = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "group-live"})
            member.subscribe(["bench-0000"])
            for _ in range(20):
                member.poll(0.1)
            runner, port = start_console(kafka)
            mid = f"bench-{topics // 2:04d}"
            pages = [
                ("overview", "/"),
                ("topics", "/topics"),
                ("topics", f"/topics?page={max(topics // 100, 1)}"),
                ("topics", "/topics?q=bench-00"),
                ("topics", "/topics?unhealthy=1"),
                ("topic", f"/topics/{mid}"),
                ("topic", "/topics/bench-0000"),
                ("messages", "/topics/bench-0000/messages"),
                ("messages", "/topics/bench-0000/messages?partition=1"),
                ("messages", "/topics/bench-0000/messages?partition=1&offset=3000&format=json"),
                ("messages", f"/topics/{mid}/messages"),
                ("filtered", "/topics/bench-0000/messages?partition=0&key=c-42"),
                ("groups", "/groups"),
                ("group", "/groups/group-05"),
                ("transactions", "/transactions"),
                ("security", "/security"),
            ]
            print(f"# {topics} topics, {topics * 3} partitions; {n} requests per page; milliseconds")
            print(f"{'kind':<13} {'page':<66} {'server p50':>10} {'p95':>7} {'total p50':>10} {'p95':>7} goal")
            for kind, path in pages:
                server, total = measure(port, path, n)
                goal = GOALS_MS.get(kind)
                verdict = (
                    "" if goal is None else ("met" if percentile(server, 95) < goal else "NOT met") + f" (<{goal:.0f})"
                )
                print(
                    f"{kind:<13} {path:<66} {median(server):>10.2f} {percentile(server, 95):>7.2f} "
                    f"{median(total):>10.2f} {percentile(total, 95):>7.2f} {verdict}",
                    flush=True,
                )
            lat = tail_latency(kafka, port, "bench-0001", n * 2)
            print(
                f"# live tail: append -> event at the client, {len(lat)} records: p50 {median(lat):.2f} ms, "
                f"p95 {percentile(lat, 95):.2f} ms",
                flush=True,
            )
            member.close()
            kafka._run(runner.cleanup())
        finally:
            kafka.close()


if __name__ == "__main__":
    main()
