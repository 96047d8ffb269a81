"""``odradek consume``: print a topic's records, as ``kafka-console-consumer.sh`` does.

Without ``--group`` the consumer is *assigned* partitions (all of the topic's, or ``--partition``'s)
and commits nothing: a generated ``group.id`` only satisfies confluent-kafka. With ``--group G`` it
*subscribes* as member of group G and commits as it goes.

Where to start (one of): ``--from-beginning``; ``--offset earliest|latest|N|-N`` (N is clamped into
the partition's offsets; -N means N records before the end); ``--timestamp MS`` (the first record at
or after MS, via offsets_for_times; the end for partitions with none). Default: the end (new records).

When to stop: ``--max-messages N``, ``--timeout-ms MS`` of silence, ``--exit-at-end`` (every partition
read to its end), or Ctrl-C. "Processed a total of N messages" goes to stderr, as Kafka's tool says.

Text output follows Kafka's DefaultMessageFormatter: optional ``CreateTime:ts``, ``Partition:p``,
``Offset:o``, headers ``k:v,k2:v2`` (or ``NO_HEADERS``) and key, each followed by ``--key-separator``
(tab), then the value and a newline; null prints as ``null``. ``--format json`` prints one object per
line: topic, partition, offset, timestamp, timestamp_type, key, key_encoding, value, value_encoding,
headers ([{key, value, value_encoding}]); an encoding is "utf8", or "base64" for bytes that are not
UTF-8.
"""

from __future__ import annotations

import argparse
import base64
import json
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from odradek.cli import _client
from odradek.cli._client import CliError

FORMATTER_PROPERTIES = {
    "print.key", "print.value", "print.timestamp", "print.partition", "print.offset", "print.headers",
    "key.separator", "line.separator", "headers.separator", "null.literal",
}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "consume",
        help="print records of a topic (like kafka-console-consumer.sh)",
        description="Print the records of a topic, one per line.",
        epilog="examples:\n"
        "  odradek consume --topic t --from-beginning --max-messages 10\n"
        "  odradek consume --topic t --partition 0 --offset 42 --print-key --print-offset\n"
        "  odradek consume --topic t --timestamp 1700000000000 --format json --exit-at-end",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--topic", required=True, help="topic to read")
    p.add_argument("--partition", type=_client.non_negative_int, action="append", default=[], metavar="P",
                   help="read only this partition (repeatable; default: all partitions)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", metavar="OFFSET", type=_parse_offset,
                       help="earliest, latest, an offset N (clamped into the log) or -N (N before the end)")
    start.add_argument("--timestamp", type=_client.non_negative_int, metavar="MS",
                       help="start at the first record with a timestamp >= MS (epoch milliseconds)")
    p.add_argument("--max-messages", type=_client.positive_int, metavar="N", help="stop after N records")
    p.add_argument("--timeout-ms", type=_client.positive_int, metavar="MS",
                   help="stop when no record arrives for MS milliseconds")
    p.add_argument("--exit-at-end", action="store_true", help="stop once every partition is read to its end")
    p.add_argument("--group", metavar="G", help="consume as a member of consumer group G (subscribe, commit)")
    out = p.add_argument_group("output")
    out.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json lines")
    out.add_argument("--print-key", action="store_true", help="print the key before the value")
    out.add_argument("--print-timestamp", action="store_true", help="print CreateTime:ts / LogAppendTime:ts")
    out.add_argument("--print-headers", action="store_true", help="print headers as k:v,k2:v2")
    out.add_argument("--print-partition", action="store_true", help="print Partition:p")
    out.add_argument("--print-offset", action="store_true", help="print Offset:o")
    out.add_argument("--key-separator", default=None, metavar="SEP", help="between printed fields (default tab)")
    out.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                     help="Kafka formatter property: print.key, print.value, print.timestamp, print.partition, "
                          "print.offset, print.headers, key.separator, line.separator, headers.separator, "
                          "null.literal")
    _client.add_common_options(p, extra_property_flag="--consumer-property")
    p.set_defaults(func=lambda args: _client.run_verb("consume", run, args))


def _parse_offset(text: str) -> str | int:
    t = text.strip().lower()
    if t in ("earliest", "latest"):
        return t
    try:
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not earliest, latest or an integer offset") from None


# -- formatting --------------------------------------------------------------------------------------


@dataclass(slots=True)
class TextFormat:
    print_key: bool = False
    print_value: bool = True
    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    def format(self, msg: Any) -> bytes:
        sep = self.key_separator
        parts: list[bytes] = []
        if self.print_timestamp:
            ts_type, ts = msg.timestamp()
            name = _TIMESTAMP_NAMES.get(ts_type)
            parts.append(f"{name}:{ts}".encode() if name else b"NO_TIMESTAMP")
        if self.print_partition:
            parts.append(b"Partition:%d" % msg.partition())
        if self.print_offset:
            parts.append(b"Offset:%d" % msg.offset())
        if self.print_headers:
            headers = msg.headers()
            if headers:
                parts.append(self.headers_separator.join(
                    k.encode() + b":" + (self.null_literal if v is None else v) for k, v in headers
                ))
            else:
                parts.append(b"NO_HEADERS")
        if self.print_key:
            key = msg.key()
            parts.append(self.null_literal if key is None else key)
        out = b"".join(part + sep for part in parts)
        if self.print_value:
            value = msg.value()
            out += self.null_literal if value is None else value
        return out + self.line_separator


_TIMESTAMP_NAMES = {TIMESTAMP_CREATE_TIME: "CreateTime", TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}


def _text_format(args: argparse.Namespace) -> TextFormat:
    props = _client.parse_properties(args.property, "--property")
    unknown = sorted(set(props) - FORMATTER_PROPERTIES)
    if unknown:
        raise CliError(f"unknown --property {', '.join(unknown)}",
                       f"the formatter properties are: {', '.join(sorted(FORMATTER_PROPERTIES))}; client configs "
                       "go in --consumer-property", exit_code=2)

    def flag(name: str, given: bool, default: bool = False) -> bool:
        if given:
            return True
        value = props.get(name)
        if value is None:
            return default
        if value.strip().lower() not in ("true", "false"):
            raise CliError(f"--property {name}={value} must be true or false", exit_code=2)
        return value.strip().lower() == "true"

    key_sep = args.key_separator if args.key_separator is not None else props.get("key.separator", "\t")
    return TextFormat(
        print_key=flag("print.key", args.print_key),
        print_value=flag("print.value", False, True),
        print_timestamp=flag("print.timestamp", args.print_timestamp),
        print_partition=flag("print.partition", args.print_partition),
        print_offset=flag("print.offset", args.print_offset),
        print_headers=flag("print.headers", args.print_headers),
        key_separator=key_sep.encode(),
        line_separator=props.get("line.separator", "\n").encode(),
        headers_separator=props.get("headers.separator", ",").encode(),
        null_literal=props.get("null.literal", "null").encode(),
    )


def _encoded(data: bytes | None) -> tuple[str | None, str]:
    if data is None:
        return None, "utf8"
    try:
        return data.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def json_line(msg: Any) -> bytes:
    ts_type, ts = msg.timestamp()
    key, key_enc = _encoded(msg.key())
    value, value_enc = _encoded(msg.value())
    headers = []
    for hk, hv in msg.headers() or []:
        text, enc = _encoded(hv)
        headers.append({"key": hk, "value": text, "value_encoding": enc})
    doc = {
        "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
        "timestamp": ts if ts_type in _TIMESTAMP_NAMES else None,
        "timestamp_type": _TIMESTAMP_NAMES.get(ts_type),
        "key": key, "key_encoding": key_enc, "value": value, "value_encoding": value_enc, "headers": headers,
    }
    return json.dumps(doc, ensure_ascii=False).encode() + b"\n"


# -- consuming ---------------------------------------------------------------------------------------


def run(args: argparse.Namespace, out: BinaryIO | None = None) -> int:
    fmt = _text_format(args)
    formatter = json_line if args.format == "json" else fmt.format
    if args.group and (args.partition or args.offset is not None or args.timestamp is not None):
        raise CliError("--group subscribes to the whole topic; it cannot be combined with --partition, "
                       "--offset or --timestamp", "drop --group to read chosen partitions from chosen offsets",
                       exit_code=2)
    fetch_wait = 100 if args.exit_at_end else 500
    reset = "earliest" if args.from_beginning or args.offset == "earliest" else "latest"
    conf = _client.base_config(
        args,
        **{
            "group.id": args.group or _client.generated_group_id("odradek-console-consumer"),
            "enable.auto.commit": bool(args.group),
            "enable.auto.offset.store": bool(args.group),
            "auto.offset.reset": reset,
            "enable.partition.eof": bool(args.exit_at_end),
            # the end is seen when a fetch comes back empty: with --exit-at-end, don't let it wait long
            "fetch.wait.max.ms": fetch_wait,
            # a long-polling fetch must not count as a timed-out request
            "socket.timeout.ms": max(args.request_timeout_ms, fetch_wait + 1000),
            "error_cb": _on_client_error,
        },
    )
    consumer = _client.make_client(Consumer, conf)
    previous = signal.signal(signal.SIGTERM, _interrupt) if _in_main_thread() else None
    try:
        return _consume(consumer, args, formatter, out if out is not None else sys.stdout.buffer)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        consumer.close()


def _interrupt(_signum: int, _frame: Any) -> None:
    """SIGTERM ends the run as Ctrl-C does: stop polling, print the total, close the consumer."""
    raise KeyboardInterrupt


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _on_client_error(err: KafkaError) -> None:
    if err.fatal():
        print(f"odradek consume: error: {err.str()}", file=sys.stderr)
    else:
        _client.client_log.debug("client error: %s", err.str())


def _partitions(consumer: Consumer, args: argparse.Namespace) -> list[int]:
    md = _client.check_reachable(consumer, args, args.topic)
    topic = md.topics.get(args.topic)
    if topic is None or topic.error is not None:
        err = topic.error if topic is not None else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        raise _client.error_from_kafka(KafkaException(err), args, f"consume topic '{args.topic}'", subject=args.topic)
    available = sorted(topic.partitions)
    if not args.partition:
        return available
    missing = [p for p in args.partition if p not in topic.partitions]
    if missing:
        raise CliError(
            f"topic '{args.topic}' has no partition {', '.join(map(str, missing))} (it has {len(available)})",
            f"use --partition 0..{len(available) - 1}",
        )
    return sorted(set(args.partition))


def _start_positions(consumer: Consumer, args: argparse.Namespace, partitions: list[int]) -> list[TopicPartition]:
    t = args.topic
    if args.timestamp is not None:
        try:
            found = consumer.offsets_for_times([TopicPartition(t, p, args.timestamp) for p in partitions],
                                               timeout=_client.timeout_s(args))
        except KafkaException as e:
            raise _client.error_from_kafka(e, args, "look up offsets for --timestamp", subject=t) from None
        for tp in found:
            if tp.error is not None:
                what = f"look up offsets for --timestamp in partition {tp.partition}"
                raise _client.error_from_kafka(KafkaException(tp.error), args, what, subject=t)
        return [TopicPartition(t, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END) for tp in found]
    if args.from_beginning or args.offset == "earliest":
        return [TopicPartition(t, p, OFFSET_BEGINNING) for p in partitions]
    if args.offset is None or args.offset == "latest":
        return [TopicPartition(t, p, OFFSET_END) for p in partitions]
    out = []
    for p in partitions:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=_client.timeout_s(args))
        except KafkaException as e:
            raise _client.error_from_kafka(e, args, f"read the offsets of partition {p}", subject=t) from None
        wanted = args.offset if args.offset >= 0 else high + args.offset
        out.append(TopicPartition(t, p, min(max(wanted, low), high)))
    return out


def _consume(consumer: Consumer, args: argparse.Namespace, formatter: Any, out: BinaryIO) -> int:
    assigned = True
    if args.group:
        _client.check_reachable(consumer, args, None)
        assigned = False

        def on_assign(_consumer: Consumer, _partitions: list[TopicPartition]) -> None:
            nonlocal assigned
            assigned = True

        consumer.subscribe([args.topic], on_assign=on_assign)
        pending_eof: set[int] = set()
    else:
        partitions = _partitions(consumer, args)
        consumer.assign(_start_positions(consumer, args, partitions))
        pending_eof = set(partitions)
    interactive = _isatty(out)
    count = 0
    status = 0
    idle_limit = args.timeout_ms / 1000 if args.timeout_ms else None
    last_message = started = time.monotonic()
    try:
        while args.max_messages is None or count < args.max_messages:
            wait = 0.5 if idle_limit is None else max(min(0.5, last_message + idle_limit - time.monotonic()), 0)
            msg = consumer.poll(wait)
            if not assigned and time.monotonic() - started > _client.timeout_s(args):
                raise CliError(
                    f"group '{args.group}' was given no partitions within {_client.timeout_s(args):g}s",
                    "other members may hold every partition, or the group is still rebalancing: check "
                    f"`odradek groups describe --group {args.group}`, or consume without --group to read "
                    "the partitions directly",
                )
            if msg is None:
                if idle_limit is not None and time.monotonic() - last_message >= idle_limit:
                    break
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    pending_eof.discard(msg.partition())
                    if args.exit_at_end and not pending_eof and not args.group:
                        break
                    continue
                print(f"odradek consume: error: {err.str()} ({err.name()})", file=sys.stderr)
                if err.fatal() or err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                    status = 1
                    break
                continue
            last_message = time.monotonic()
            count += 1
            out.write(formatter(msg))
            if interactive:
                out.flush()
        out.flush()
    except BrokenPipeError:
        _silence_stdout()  # the reader (e.g. `head`) has gone: stop quietly
    except KeyboardInterrupt:
        pass
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return status


def _silence_stdout() -> None:
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
