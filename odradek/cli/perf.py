"""``odradek perf produce|consume``: load tests with kafka-producer-perf-test's and kafka-consumer-perf-test's
options and output, through confluent-kafka (what a librdkafka application would see).

``perf produce`` sends ``--num-records`` records of ``--record-size`` random upper-case letters (or lines of
``--payload-file``) to ``--topic``, at most ``--throughput`` records/s (-1: unlimited). While it runs it prints
a line per ``--reporting-interval`` (5 s) and, at the end, Kafka's summary::

    50000 records sent, 9998.0 records/sec (0.95 MB/sec), 3.1 ms avg latency, 41.0 ms max latency.
    100000 records sent, 9999.200064 records/sec (0.95 MB/sec), 2.95 ms avg latency, 41.00 ms max latency,
    2 ms 50th, 6 ms 95th, 11 ms 99th, 30 ms 99.9th.

(the summary is one line, wrapped here).
A record's latency is from ``produce()`` to its acknowledgement (librdkafka's ``Message.latency()``).

``perf consume`` reads ``--num-records`` records of ``--topic`` in a new consumer group and prints
kafka-consumer-perf-test's header and line (``--hide-header`` leaves the header out)::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
    fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec, e2e.latency.avg.ms, e2e.latency.max.ms, e2e.latency.p50.ms,
    e2e.latency.p95.ms, e2e.latency.p99.ms, e2e.latency.p99.9.ms
    2026-01-01 10:00:00:000, 2026-01-01 10:00:02:120, 9.5367, 4.4984, 10000, 4716.9811, 1020, 1100, 8.6697,
    9090.9091, 812.40, 1530.00, 790.00, 1400.00, 1500.00, 1530.00

(two lines, wrapped here).
The first ten columns are Kafka's; the ``e2e.latency`` columns (appended, so scripts that read Kafka's columns
by position still work) are the time from each record's timestamp to its receipt here, which measures
end-to-end latency when the records are being produced as they are consumed (e.g. alongside ``perf produce``).
``--show-detailed-stats`` prints Kafka's per-interval lines before the summary. Progress of the records read
goes to stderr as a bar, only when stderr is a terminal.

Invariants:
- stdout has only Kafka's lines; warnings and errors go to stderr.
- Every wait is bounded: produce waits for the last acknowledgements at most ``delivery.timeout.ms`` (plus a
  margin); consume stops when ``--timeout`` ms pass without a record (counted from the group's assignment, or
  from the start while none came), with a warning and exit code 1 if fewer than ``--num-records`` were read.
- A record that is not delivered is reported on stderr (the first few of each error) and is not counted;
  the exit code is then 1.
"""

from __future__ import annotations

import argparse
import random
import string
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer

from odradek.cli import _client, _progress
from odradek.cli._client import CliError
from odradek.cli.perf_stats import MB, Pacer, Stats

DEFAULT_DELIVERY_TIMEOUT_MS = 120_000
DEFAULT_REPORTING_INTERVAL_MS = 5_000
DEFAULT_CONSUME_TIMEOUT_MS = 10_000
ERRORS_SHOWN = 5
# How long one consume() call may wait for its batch: short, since it adds to the measured end-to-end latency.
CONSUME_WAIT_S = 0.05

CONSUMER_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)
LATENCY_HEADER = (
    "e2e.latency.avg.ms, e2e.latency.max.ms, e2e.latency.p50.ms, e2e.latency.p95.ms, "
    "e2e.latency.p99.ms, e2e.latency.p99.9.ms"
)
DETAIL_HEADER = (
    "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
    "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "perf",
        help="producer and consumer load tests (like kafka-*-perf-test.sh)",
        description="Load tests with the options and output of Kafka's perf-test tools.",
    )
    verbs = p.add_subparsers(dest="perf_command", required=True, metavar="{produce,consume}")

    prod = verbs.add_parser(
        "produce",
        help="send records as fast as allowed and report throughput and latency",
        description="Send --num-records records and print throughput and latency (kafka-producer-perf-test).",
        epilog="example:\n  odradek perf produce --topic perf --num-records 100000 --record-size 100 --throughput -1 "
        "--producer-props acks=all linger.ms=5",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prod.add_argument("--topic", required=True, help="topic to send to")
    prod.add_argument("--num-records", type=_client.positive_int, required=True, metavar="N", help="records to send")
    size = prod.add_mutually_exclusive_group(required=True)
    size.add_argument(
        "--record-size",
        type=_client.positive_int,
        metavar="BYTES",
        help="size of each record's value (random upper-case letters)",
    )
    size.add_argument(
        "--payload-file",
        type=Path,
        metavar="FILE",
        help="file of payloads, one per --payload-delimiter; each record takes one at random",
    )
    prod.add_argument(
        "--payload-delimiter",
        default="\\n",
        metavar="TEXT",
        help="what separates the payloads of --payload-file (default: a new line)",
    )
    prod.add_argument(
        "--throughput",
        type=_throughput,
        default=-1.0,
        metavar="N",
        help="records per second at most; -1 (the default): as fast as possible",
    )
    _add_config_options(prod, "producer", "producer configs (librdkafka names), e.g. acks=all linger.ms=5")
    _add_reporting_interval(prod, "how often a progress line is printed")
    _client.add_common_options(prod)
    prod.set_defaults(func=lambda args: _client.run_verb("perf produce", run_produce, args))

    cons = verbs.add_parser(
        "consume",
        help="read records as fast as possible and report throughput",
        description="Read --num-records records in a new consumer group and print kafka-consumer-perf-test's "
        "summary, with end-to-end latency columns appended.",
        epilog="example:\n  odradek perf consume --topic perf --num-records 100000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cons.add_argument("--topic", required=True, help="topic to read")
    cons.add_argument(
        "--num-records",
        "--messages",
        dest="num_records",
        type=_client.positive_int,
        required=True,
        metavar="N",
        help="records to read",
    )
    cons.add_argument("--group", help="consumer group (default: a new perf-consumer-... group)")
    cons.add_argument("--from-latest", action="store_true", help="start at the end of the log, not the beginning")
    cons.add_argument(
        "--timeout",
        type=_client.positive_int,
        default=DEFAULT_CONSUME_TIMEOUT_MS,
        metavar="MS",
        help=f"give up after this long without a record (default {DEFAULT_CONSUME_TIMEOUT_MS})",
    )
    cons.add_argument(
        "--fetch-size",
        type=_client.positive_int,
        metavar="BYTES",
        help="bytes to fetch per partition per request (max.partition.fetch.bytes)",
    )
    cons.add_argument(
        "--show-detailed-stats", action="store_true", help="print a line of statistics per --reporting-interval"
    )
    _add_reporting_interval(cons, "interval of --show-detailed-stats")
    cons.add_argument("--hide-header", action="store_true", help="leave out the header line")
    _add_config_options(cons, "consumer", "consumer configs (librdkafka names)")
    _client.add_common_options(cons)
    cons.set_defaults(func=lambda args: _client.run_verb("perf consume", run_consume, args))


def _add_config_options(parser: argparse.ArgumentParser, role: str, props_help: str) -> None:
    """``--<role>-props`` and ``--<role>.config`` (Kafka's perf-test names), read by ``client_config``."""
    parser.add_argument(f"--{role}-props", nargs="+", action="extend", default=[], metavar="KEY=VALUE", help=props_help)
    parser.add_argument(
        f"--{role}.config", dest="perf_config", type=Path, metavar="FILE", help=f"properties file of {role} configs"
    )


def _add_reporting_interval(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--reporting-interval",
        type=_client.positive_int,
        default=DEFAULT_REPORTING_INTERVAL_MS,
        metavar="MS",
        help=f"{what} (default {DEFAULT_REPORTING_INTERVAL_MS})",
    )


def _throughput(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value == 0 or (value < 0 and value != -1):
        raise argparse.ArgumentTypeError(f"{text!r}: the throughput is positive, or -1 for unlimited")
    return value


def client_config(args: argparse.Namespace, props: list[str], option: str, **defaults: Any) -> dict[str, Any]:
    """``base_config`` with the perf tools' own ``--*.config`` file and ``--*-props`` on top (they win)."""
    conf = _client.base_config(args, **defaults)
    if args.perf_config is not None:
        conf.update(_client.read_properties(args.perf_config))
    conf.update(_client.parse_properties(props, option))
    return conf


def payloads(args: argparse.Namespace, rng: random.Random) -> list[bytes]:
    """The values to send: one of ``--record-size`` random letters (Kafka's), or the payloads of the file."""
    if args.payload_file is None:
        return ["".join(rng.choices(string.ascii_uppercase, k=args.record_size)).encode()]
    try:
        text = args.payload_file.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as e:
        raise CliError(f"cannot read --payload-file {args.payload_file}: {e}", exit_code=2) from None
    delimiter = args.payload_delimiter.encode().decode("unicode_escape")
    out = [p.encode() for p in text.split(delimiter) if p]
    if not out:
        raise CliError(f"--payload-file {args.payload_file} has no payloads", exit_code=2)
    return out


class _Errors:
    """Undelivered records: counted, the first ``ERRORS_SHOWN`` of each kind printed on stderr."""

    def __init__(self) -> None:
        self.count = 0
        self.by_kind: dict[str, int] = {}

    def add(self, err: KafkaError) -> None:
        self.count += 1
        kind = err.name()
        seen = self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        if seen <= ERRORS_SHOWN:
            print(f"odradek perf produce: a record was not delivered: {err.str()} ({kind})", file=sys.stderr)


def run_produce(args: argparse.Namespace) -> int:
    conf = client_config(
        args, args.producer_props, "--producer-props", **{"delivery.timeout.ms": DEFAULT_DELIVERY_TIMEOUT_MS}
    )
    rng = random.Random()
    values = payloads(args, rng)
    producer = _client.make_client(Producer, conf)
    _client.check_reachable(producer, args, args.topic)
    clock: Callable[[], float] = time.monotonic
    start = clock()
    stats = Stats(start, args.reporting_interval / 1000)
    pacer = Pacer(args.throughput, start)
    errors = _Errors()

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.add(err)
            return
        latency = msg.latency()
        window = stats.record((latency or 0.0) * 1000, len(msg.value() or b""), clock())
        if window is not None:
            print(window.window_line(), flush=True)

    single = values[0] if len(values) == 1 else None
    for sent in range(args.num_records):
        value = single if single is not None else rng.choice(values)
        while True:
            try:
                producer.produce(args.topic, value, on_delivery=delivered)
                break
            except BufferError:  # librdkafka's queue is full: serve acknowledgements until there is room
                producer.poll(0.05)
        producer.poll(0)
        while (wait := pacer.delay(sent + 1, clock())) > 0:
            producer.poll(wait)  # serves acknowledgements while it waits (and returns early when it served one)
    timeout_s = float(conf.get("delivery.timeout.ms", DEFAULT_DELIVERY_TIMEOUT_MS)) / 1000 + 5
    remaining = producer.flush(timeout_s)
    total = stats.total(clock())
    print(total.final_line(), flush=True)
    if remaining:
        print(
            f"odradek perf produce: {remaining} records were still unacknowledged after {timeout_s:g}s", file=sys.stderr
        )
    if errors.count:
        print(f"odradek perf produce: {errors.count} of {args.num_records} records were not delivered", file=sys.stderr)
    return 1 if errors.count or remaining else 0


def _java_time(epoch_s: float) -> str:
    """kafka-consumer-perf-test's time format (``yyyy-MM-dd HH:mm:ss:SSS``, local time)."""
    t = datetime.fromtimestamp(epoch_s)
    return t.strftime("%Y-%m-%d %H:%M:%S:") + f"{t.microsecond // 1000:03d}"


def consumer_line(start_s: float, end_s: float, records: int, nbytes: int, rebalance_ms: float) -> str:
    """kafka-consumer-perf-test's ten columns (after the time column(s))."""
    elapsed = max(end_s - start_s, 1e-9)
    mb = nbytes / MB
    fetch_ms = max(elapsed * 1000 - rebalance_ms, 0.0)
    fetch_s = fetch_ms / 1000
    return (
        f"{mb:.4f}, {mb / elapsed:.4f}, {records}, {records / elapsed:.4f}, {int(rebalance_ms)}, {int(fetch_ms)}, "
        f"{mb / fetch_s if fetch_s > 0 else 0.0:.4f}, {records / fetch_s if fetch_s > 0 else 0.0:.4f}"
    )


def run_consume(args: argparse.Namespace) -> int:
    group = args.group or _client.generated_group_id("perf-consumer")
    defaults: dict[str, Any] = {
        "group.id": group,
        "enable.auto.commit": True,
        "auto.offset.reset": "latest" if args.from_latest else "earliest",
    }
    if args.fetch_size is not None:
        defaults["max.partition.fetch.bytes"] = args.fetch_size
    consumer = _client.make_client(Consumer, client_config(args, args.consumer_props, "--consumer-props", **defaults))
    try:
        return _consume(consumer, args)
    finally:
        consumer.close()


def _consume(consumer: Consumer, args: argparse.Namespace) -> int:
    md = _client.check_reachable(consumer, args, args.topic)
    t = md.topics.get(args.topic)
    if t is None or t.error is not None:
        raise CliError(
            f"topic '{args.topic}' does not exist",
            "list the topics with `odradek topics list`",
            code=KafkaError.UNKNOWN_TOPIC_OR_PART,
        )
    start_wall, start = time.time(), time.monotonic()
    joined: list[float] = []
    consumer.subscribe([args.topic], on_assign=lambda c, parts: joined.append(time.monotonic()))
    stats = Stats(start)
    records = nbytes = 0
    last_record = start
    interval_s = args.reporting_interval / 1000
    next_report = start + interval_s
    last_report = (start, 0, 0)
    if args.show_detailed_stats and not args.hide_header:
        print(DETAIL_HEADER, flush=True)
    with _progress.bar(total=args.num_records, desc=f"perf consume {args.topic}", unit="rec") as bar:
        while records < args.num_records:
            batch = consumer.consume(num_messages=min(500, args.num_records - records), timeout=CONSUME_WAIT_S)
            now = time.monotonic()
            got = 0
            for msg in batch:
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise _client.error_from_kafka(msg.error(), args, f"read {args.topic}", subject=args.topic)
                size = len(msg.value() or b"") + len(msg.key() or b"")
                _, ts_ms = msg.timestamp()
                stats.record(max(time.time() * 1000 - ts_ms, 0.0) if ts_ms > 0 else 0.0, size, now)
                nbytes += size
                got += 1
            records += got
            bar.update(got)
            if got:
                last_record = now
            elif now - max(last_record, joined[0] if joined else start) > args.timeout / 1000:
                print(
                    f"odradek perf consume: warning: exiting after {records} of {args.num_records} records: "
                    f"no record for --timeout {args.timeout} ms",
                    file=sys.stderr,
                )
                break
            if args.show_detailed_stats and now >= next_report:
                t0, r0, b0 = last_report
                rebalance_ms = max(0.0, min(now, joined[0] if joined else now) - t0) * 1000  # before the assignment
                print(
                    f"{_java_time(start_wall + now - start)}, 0, "
                    + consumer_line(t0, now, records - r0, nbytes - b0, rebalance_ms),
                    flush=True,
                )
                last_report = (now, records, nbytes)
                next_report = now + interval_s
    end = time.monotonic()
    rebalance_ms = (joined[0] - start) * 1000 if joined else 0.0
    if not args.hide_header:
        print(f"{CONSUMER_HEADER}, {LATENCY_HEADER}")
    total = stats.total(end)
    print(
        f"{_java_time(start_wall)}, {_java_time(start_wall + end - start)}, "
        + consumer_line(start, end, records, nbytes, rebalance_ms)
        + f", {total.latency_avg_ms:.2f}, {total.latency_max_ms:.2f}, "
        + ", ".join(f"{v:.2f}" for v in total.percentiles)
    )
    return 0 if records >= args.num_records else 1
