"""A producer or consumer of one real client library, run in a process of its own, that reports its progress.

``python -m tests.compat.quota_load produce|consume CLIENT BOOTSTRAP TOPIC CLIENT_ID SECONDS`` produces 1 KB
records as fast as the client takes them (or consumes the topic from the start) for SECONDS, and prints one JSON
line at the end: ``{"marks": [[seconds, bytes acknowledged or consumed], ...], "throttle_ms": max throttle time
the client reported}`` (marks every 0.25 s). A process per client keeps the clients from sharing one GIL, which
would make a quota'd and an unquoted client slow each other down in the test rather than in the broker.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

VALUE = b"q" * 1000
# Consumers fetch at most 64 KB at a time: a throttled fetch is answered empty (Kafka's rule), so a fetch as large
# as a quota window's worth would make a consumer wait out throttles for data it never got, and read well under
# its quota with short windows.
FETCH_BYTES = 65536
# Producers send requests of at most 128 KB, for the same kind of reason: the quota lets a request through whole
# while the client is under its quota, so requests as large as the quota's window's worth (kafka-python piles up to
# 1 MB into a request while it is muted) make the rate overshoot in waves as windows expire (Kafka's windows behave
# alike; a model of the broker's arithmetic gives 1.27 x a 1 MB/s quota for 1 MB requests over 3 windows of 1 s, and
# 1.00 x for requests up to 128 KB).
REQUEST_BYTES = 131072
MARK_EVERY = 0.25


def _marks() -> tuple[list[list[float]], Any]:
    marks: list[list[float]] = []
    t0 = time.monotonic()

    def mark(total: int, force: bool = False) -> None:
        now = time.monotonic() - t0
        if force or not marks or now - marks[-1][0] >= MARK_EVERY:
            marks.append([now, total])
    return marks, mark


def _max_throttle(metrics: dict[str, dict[str, Any]]) -> float:
    """kafka-python's largest ``throttle-time-max`` (its connections' metrics, per client and per node)."""
    values = [v for group in metrics.values() for k, v in group.items() if k.endswith("throttle-time-max")]
    return max([float(v) for v in values if isinstance(v, int | float) and v == v] or [0.0])


def produce_confluent(bootstrap: str, topic: str, client_id: str, seconds: float) -> dict[str, Any]:
    from confluent_kafka import Producer

    throttles = [0.0]
    acked = [0]
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 65536,
                  "message.max.bytes": REQUEST_BYTES, "queue.buffering.max.kbytes": 8192,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time * 1000)})

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked[0] += len(msg.value())
    marks, mark = _marks()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            p.produce(topic, VALUE, callback=delivered)
        except BufferError:
            p.poll(0.005)
        p.poll(0)
        mark(acked[0])
    p.poll(0)
    mark(acked[0], force=True)
    return {"marks": marks, "throttle_ms": max(throttles)}


def produce_kafka_python(bootstrap: str, topic: str, client_id: str, seconds: float) -> dict[str, Any]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5, batch_size=65536,
                      max_request_size=REQUEST_BYTES, max_block_ms=200, acks=1)
    acked = [0]

    def ok(_: Any) -> None:
        acked[0] += len(VALUE)
    marks, mark = _marks()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            p.send(topic, VALUE).add_callback(ok)
        except Exception:  # buffer full: the quota holds the sender back
            time.sleep(0.005)
        mark(acked[0])
    mark(acked[0], force=True)
    return {"marks": marks, "throttle_ms": _max_throttle(p.metrics())}


def produce_aiokafka(bootstrap: str, topic: str, client_id: str, seconds: float) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        from aiokafka import AIOKafkaProducer

        p = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5, max_batch_size=65536,
                             max_request_size=REQUEST_BYTES, acks=1)
        await p.start()
        acked = [0]
        marks, mark = _marks()
        deadline = time.monotonic() + seconds
        pending: set[asyncio.Future[Any]] = set()

        def done(f: asyncio.Future[Any]) -> None:
            pending.discard(f)
            if not f.cancelled() and f.exception() is None:
                acked[0] += len(VALUE)
        while time.monotonic() < deadline:
            fut = await p.send(topic, VALUE)
            pending.add(fut)
            fut.add_done_callback(done)
            if len(pending) > 2000:
                await asyncio.wait(pending, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
            mark(acked[0])
        mark(acked[0], force=True)
        return {"marks": marks, "throttle_ms": 0.0}  # the process exits without waiting for the rest
    return asyncio.run(run())


def consume_confluent(bootstrap: str, topic: str, client_id: str, seconds: float) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    throttles = [0.0]
    c = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"quota-{client_id}",
                  "enable.auto.commit": False, "fetch.max.bytes": FETCH_BYTES,
                  "max.partition.fetch.bytes": FETCH_BYTES, "message.max.bytes": FETCH_BYTES,
                  "queued.max.messages.kbytes": 2048,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time * 1000)})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    marks, mark = _marks()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in c.consume(500, timeout=0.05):
            if m.error() is None and m.value() is not None:
                got += len(m.value())
        mark(got)
    mark(got, force=True)
    return {"marks": marks, "throttle_ms": max(throttles)}


def consume_kafka_python(bootstrap: str, topic: str, client_id: str, seconds: float) -> dict[str, Any]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                      fetch_max_bytes=FETCH_BYTES, max_partition_fetch_bytes=FETCH_BYTES)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    got = 0
    marks, mark = _marks()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for records in c.poll(timeout_ms=50).values():
            got += sum(len(r.value) for r in records if r.value is not None)
        mark(got)
    mark(got, force=True)
    return {"marks": marks, "throttle_ms": _max_throttle(c.metrics())}


def consume_aiokafka(bootstrap: str, topic: str, client_id: str, seconds: float) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                             fetch_max_bytes=FETCH_BYTES, max_partition_fetch_bytes=FETCH_BYTES)
        await c.start()
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = 0
        marks, mark = _marks()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            batches = await c.getmany(timeout_ms=50)
            got += sum(len(r.value) for records in batches.values() for r in records if r.value is not None)
            mark(got)
        mark(got, force=True)
        return {"marks": marks, "throttle_ms": 0.0}
    return asyncio.run(run())


RUNNERS = {
    ("produce", "confluent"): produce_confluent, ("produce", "kafka-python"): produce_kafka_python,
    ("produce", "aiokafka"): produce_aiokafka, ("consume", "confluent"): consume_confluent,
    ("consume", "kafka-python"): consume_kafka_python, ("consume", "aiokafka"): consume_aiokafka,
}


def bytes_at(marks: list[list[float]], t: float) -> float:
    """The bytes done at ``t`` seconds, interpolated between the marks around it."""
    before = max((m for m in marks if m[0] <= t), key=lambda m: m[0], default=marks[0])
    after = min((m for m in marks if m[0] >= t), key=lambda m: m[0], default=marks[-1])
    if after[0] == before[0]:
        return float(before[1])
    return before[1] + (after[1] - before[1]) * (t - before[0]) / (after[0] - before[0])


def rate_over_periods(marks: list[list[float]], start: float, span: float, period: float) -> float:
    """Bytes per second over ``span`` seconds, averaged over every start between ``start`` and
    ``start + period`` (in steps of a twentieth of the period).

    A client held to a quota moves in waves as the quota's windows expire: a burst every ``period`` (the
    windows' whole span) and a slower climb between them. A rate read between two fixed marks then depends
    on whether each mark falls just before or just after a burst; averaged over one whole period of start
    times (``span`` a whole number of periods) it does not.
    """
    steps = 20
    starts = [start + period * i / steps for i in range(steps)]
    return sum((bytes_at(marks, s + span) - bytes_at(marks, s)) / span for s in starts) / steps

if __name__ == "__main__":
    verb, client, bootstrap, topic, client_id, secs = sys.argv[1:7]
    print(json.dumps(RUNNERS[(verb, client)](bootstrap, topic, client_id, float(secs))), flush=True)
    os._exit(0)  # records still queued behind a quota are not waited for
