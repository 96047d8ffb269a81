"""Click stream: a page-view generator, and a streaming job of event-time windowed aggregates.

``generate`` produces JSON page views (user, session, url, page, referrer, user agent, event time) keyed by
user id. Event times follow a clock that runs at ``--event-rate`` events per second (by default the send
rate, so event time tracks wall-clock time), each set back by a lateness: mostly under two seconds, one
event in seven up to ``--max-lateness`` seconds, so the topic holds events out of event-time order.

``aggregate`` reads the topic with ``spark.readStream.format("odradek")`` and computes, per page and per
event-time window (1 minute), the page views and distinct users and sessions, with a watermark (2 minutes):
a window is emitted once, when the watermark passes its end, and events older than the watermark are
dropped. Each micro-batch's new rows go (``foreachBatch``) to an output topic, keyed by ``page@window
start``, with the row as JSON, and to Parquet under ``OUTPUT/batch_id=N/`` (overwritten if the batch is
retried, so the Parquet output holds each row once; the topic may get a retried batch's rows twice, with
the same keys).

    python -m pipelines.clickstream generate --bootstrap-server localhost:9092 --topic clicks --events 10000 --rate 50
    python -m pipelines.clickstream aggregate --bootstrap-server localhost:9092 --topic clicks \\
        --output-topic clicks-per-minute --output /data/clicks-per-minute --checkpoint /data/checkpoints/clicks
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

SITE = "https://shop.example.com"
PAGES = ["/", "/search", "/category/shoes", "/category/jackets", "/category/bags", "/product/1042",
         "/product/2210", "/product/3177", "/product/4051", "/cart", "/checkout", "/account", "/help"]
WEIGHTS = [20, 12, 8, 6, 5, 7, 6, 5, 4, 6, 3, 2, 1]
EXTERNAL = ["https://www.google.com/", "https://www.bing.com/", "https://duckduckgo.com/",
            "https://t.co/", "https://www.facebook.com/", ""]
USER_AGENTS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 "
    "Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/18.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Mobile "
    "Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0",
]
SESSION_GAP_MS = 30 * 60 * 1000

EVENT_SCHEMA = ("user_id STRING, session_id STRING, url STRING, page STRING, referrer STRING, "
                "user_agent STRING, event_time TIMESTAMP")


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def generate_events(n: int, *, start_ms: int, event_rate: float, max_lateness: float = 60.0, users: int = 200,
                    seed: int | None = None) -> list[dict[str, Any]]:
    """``n`` page views; event ``i`` happens at ``start_ms + i / event_rate`` seconds less its lateness."""
    rng = random.Random(seed)
    sessions: dict[str, tuple[str, int, str]] = {}  # user -> (session id, last event clock, last page)
    agents = {f"u{u:05d}": rng.choice(USER_AGENTS) for u in range(users)}
    events = []
    for i in range(n):
        clock = start_ms + int(i * 1000 / event_rate)
        user = f"u{rng.randrange(users):05d}"
        session = sessions.get(user)
        if session is None or clock - session[1] > SESSION_GAP_MS or rng.random() < 0.03:
            session_id, referrer = f"s{rng.getrandbits(48):012x}", rng.choice(EXTERNAL)
        else:
            session_id, referrer = session[0], SITE + session[2]
        page = rng.choices(PAGES, WEIGHTS)[0]
        sessions[user] = (session_id, clock, page)
        late = rng.uniform(0, 2.0) if rng.random() < 6 / 7 else rng.uniform(0, max_lateness)
        events.append({"user_id": user, "session_id": session_id, "url": SITE + page, "page": page,
                       "referrer": referrer, "user_agent": agents[user],
                       "event_time": _iso(clock - int(late * 1000))})
    return events


def produce(events: list[dict[str, Any]], bootstrap: str, topic: str, *, rate: float = 0.0,
            client: dict[str, str] | None = None, log: Callable[[str], None] = print) -> int:
    """Send ``events`` (keyed by user id) at ``rate`` per second (0: as fast as possible); returns how many."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **(client or {})})
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    started = last_report = time.monotonic()
    for i, event in enumerate(events):
        if rate > 0:
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        while True:
            try:
                producer.produce(topic, key=event["user_id"].encode(), value=json.dumps(event).encode(),
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        now = time.monotonic()
        if now - last_report >= 1.0:
            last_report = now
            log(f"sent {i + 1}/{len(events)} events ({(i + 1) / (now - started):.0f}/s), "
                f"event time {event['event_time']}")
    remaining = producer.flush(60)
    if remaining or failed:
        raise RuntimeError(f"{remaining} events undelivered, {len(failed)} failed: {failed[:3]}")
    log(f"sent {len(events)} events to {topic} in {time.monotonic() - started:.1f} s")
    return len(events)


def aggregates(events: Any, *, window: str = "1 minute", watermark: str = "2 minutes") -> Any:
    """Views, distinct users and distinct sessions per page and event-time window, from the raw records."""
    from pyspark.sql import functions as F

    parsed = events.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e")).select("e.*")
    return (parsed.where(F.col("event_time").isNotNull() & F.col("page").isNotNull())
            .withWatermark("event_time", watermark)
            .groupBy(F.window("event_time", window), "page")
            .agg(F.count(F.lit(1)).alias("views"), F.size(F.collect_set("user_id")).alias("users"),
                 F.size(F.collect_set("session_id")).alias("sessions"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "page", "views", "users", "sessions"))


def _progress_listener(log: Callable[[str], None]) -> Any:
    """A listener printing one line per micro-batch: events read, the watermark, the batch time."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            log(f"query {event.name} started (id {event.id})")

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            log(f"micro-batch {p.batchId}: {p.numInputRows} events read, watermark "
                f"{p.eventTime.get('watermark', '-')}, {p.batchDuration} ms")

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            log(f"query {event.id} stopped" + (f": {event.exception}" if event.exception else ""))

    return Progress()


def run_aggregate(spark: Any, bootstrap: str, topic: str, output_topic: str, output: str, checkpoint: str, *,
                  window: str = "1 minute", watermark: str = "2 minutes", starting_offsets: str = "earliest",
                  max_offsets_per_trigger: int | None = None, available_now: bool = False,
                  trigger_interval: str = "10 seconds", kafka_options: dict[str, str] | None = None,
                  log: Callable[[str], None] = print) -> Any:
    """Start the streaming job; with ``available_now`` wait until it has processed what is there.

    Returns the ``StreamingQuery`` (still running unless ``available_now``).
    """
    from pyspark.sql import functions as F

    client = dict(kafka_options or {})
    reader = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", starting_offsets))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    for k, v in client.items():
        reader = reader.option(f"kafka.{k}", v)
    rows = aggregates(reader.load(), window=window, watermark=watermark)

    def write_batch(batch: Any, batch_id: int) -> None:
        batch = batch.persist()
        try:
            n = batch.count()
            if n:
                out = batch.select(
                    F.concat_ws("@", "page", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ssXXX")).alias("key"),
                    F.to_json(F.struct(*batch.columns)).alias("value"))
                writer = out.write.format("odradek").option("kafka.bootstrap.servers", bootstrap) \
                    .option("topic", output_topic)
                for k, v in client.items():
                    writer = writer.option(f"kafka.{k}", v)
                writer.mode("append").save()
                batch.write.mode("overwrite").parquet(f"{output.rstrip('/')}/batch_id={batch_id}")
                span = batch.agg(F.min("window_start"), F.max("window_start")).first()
                log(f"batch {batch_id}: {n} window aggregates (windows {span[0]:%H:%M}..{span[1]:%H:%M}) "
                    f"-> {output_topic}, {output}")
            else:
                log(f"batch {batch_id}: no window closed")
        finally:
            batch.unpersist()

    query = (rows.writeStream.outputMode("append").foreachBatch(write_batch)
             .option("checkpointLocation", checkpoint).queryName(f"clickstream-{topic}"))
    query = query.trigger(availableNow=True) if available_now else query.trigger(processingTime=trigger_interval)
    listener = _progress_listener(log)
    spark.streams.addListener(listener)
    started = query.start()
    if available_now:
        try:
            started.awaitTermination()
        finally:
            spark.streams.removeListener(listener)
        if started.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {started.exception()}")
        progress = started.recentProgress
        log(f"done: {sum(p['numInputRows'] for p in progress)} events in {len(progress)} micro-batches, "
            f"watermark {progress[-1]['eventTime'].get('watermark') if progress else None}")
    return started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.clickstream", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="produce page-view events to a topic")
    agg = commands.add_parser("aggregate", help="the streaming job: windowed aggregates to a topic and Parquet")
    for p in (gen, agg):
        p.add_argument("--bootstrap-server", required=True, help="host:port of the broker")
        p.add_argument("--topic", default="clicks", help="the page-view topic (default clicks)")
        p.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                       help="client option (repeatable)")
    gen.add_argument("--events", type=int, default=1000, help="how many events (default 1000)")
    gen.add_argument("--rate", type=float, default=100.0, help="events sent per second, 0 for unlimited")
    gen.add_argument("--event-rate", type=float, default=None,
                     help="events per second of event time (default: --rate, or 10 if --rate is 0)")
    gen.add_argument("--start", default=None, help="event time of the first event, ISO 8601 (default now)")
    gen.add_argument("--max-lateness", type=float, default=60.0, help="seconds (default 60)")
    gen.add_argument("--users", type=int, default=200)
    gen.add_argument("--seed", type=int, default=None)
    agg.add_argument("--output-topic", required=True)
    agg.add_argument("--output", required=True, help="Parquet output directory")
    agg.add_argument("--checkpoint", required=True, help="checkpoint directory of the streaming query")
    agg.add_argument("--window", default="1 minute")
    agg.add_argument("--watermark", default="2 minutes")
    agg.add_argument("--starting-offsets", default="earliest", help="for the first run (default earliest)")
    agg.add_argument("--max-offsets-per-trigger", type=int, default=None)
    agg.add_argument("--trigger-interval", default="10 seconds")
    agg.add_argument("--shuffle-partitions", type=int, default=8,
                     help="partitions of the aggregation state, fixed by the checkpoint's first run (default 8)")
    agg.add_argument("--available-now", action="store_true", help="process what is in the topic, then stop")
    args = parser.parse_args(argv)
    client = dict(kv.split("=", 1) for kv in args.kafka_option)

    if args.command == "generate":
        if args.start:
            start = dt.datetime.fromisoformat(args.start.replace("Z", "+00:00"))
            start_ms = int((start if start.tzinfo else start.replace(tzinfo=dt.UTC)).timestamp() * 1000)
        else:
            start_ms = int(time.time() * 1000)
        event_rate = args.event_rate or args.rate or 10.0
        events = generate_events(args.events, start_ms=start_ms, event_rate=event_rate,
                                 max_lateness=args.max_lateness, users=args.users, seed=args.seed)
        produce(events, args.bootstrap_server, args.topic, rate=args.rate, client=client)
        return 0

    from pipelines import spark_session

    spark = spark_session("odradek-clickstream")
    spark.sparkContext.setLogLevel("WARN")
    spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    try:
        query = run_aggregate(spark, args.bootstrap_server, args.topic, args.output_topic, args.output,
                              args.checkpoint, window=args.window, watermark=args.watermark,
                              starting_offsets=args.starting_offsets,
                              max_offsets_per_trigger=args.max_offsets_per_trigger,
                              available_now=args.available_now, trigger_interval=args.trigger_interval,
                              kafka_options=client)
        if not args.available_now:
            try:
                query.awaitTermination()
            except KeyboardInterrupt:
                print("stopping")
                query.stop()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
