"""``odradek produce``: one record per line of standard input, as ``kafka-console-producer.sh`` does.

Line format (Kafka's ``LineMessageReader`` properties, set with ``--property key=value``):

- ``parse.key=true``: ``key<key.separator>value``; ``key.separator`` defaults to a tab.
  ``--key-separator SEP`` is a shortcut for both.
- ``parse.headers=true``: ``headers<headers.delimiter>rest``, where ``headers`` is
  ``k1<headers.key.separator>v1<headers.separator>k2...``; defaults: delimiter tab, separator ``,``,
  key separator ``:``. A header without a key separator is an error (a null-valued header with
  ``ignore.error=true``).
- ``null.marker=X``: a key, value or header value equal to X is sent as null.
- ``ignore.error=true``: a line without a key separator is sent with a null key and the whole line
  as value, instead of being reported.

``--header k=v`` (repeatable) adds a header to every record, before the headers parsed from the line.

Errors are reported per record (``line N: ...`` on stderr) and the run goes on; the exit code is 1 if
any line could not be parsed or any record was not delivered. When stdin is not a terminal, progress
goes to stderr every ``--progress-interval-ms`` (and every ``--progress-every`` records if set).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from confluent_kafka import KafkaError, KafkaException, Producer

from odradek.cli import _client
from odradek.cli._client import CliError

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("all", "-1", "0", "1")
DEFAULT_DELIVERY_TIMEOUT_MS = 30_000

Header = tuple[str, bytes | None]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "produce",
        help="send lines of stdin as records (like kafka-console-producer.sh)",
        description="Send each line of standard input as one record.",
        epilog="examples:\n"
        "  echo hello | odradek produce --topic greetings\n"
        "  printf 'k1:v1\\nk2:v2\\n' | odradek produce --topic t --key-separator :\n"
        "  printf 'h1:a,h2:b\\tk\\tv\\n' | odradek produce --topic t --property parse.headers=true "
        "--property parse.key=true",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--topic", required=True, help="topic to send to")
    p.add_argument("--partition", type=_client.non_negative_int, metavar="P",
                   help="send every record to this partition (default: by key hash, or sticky for null keys)")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="line reader property: parse.key, key.separator, parse.headers, headers.delimiter, "
                        "headers.separator, headers.key.separator, null.marker, ignore.error")
    p.add_argument("--key-separator", metavar="SEP", help="parse a key before SEP on each line (sets parse.key=true)")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                   help="header added to every record, repeatable")
    p.add_argument("--compression-type", choices=COMPRESSION_TYPES, help="compress batches (default none)")
    p.add_argument("--acks", choices=ACKS, default="all", help="acknowledgements to wait for (default all)")
    p.add_argument("--linger-ms", type=_client.non_negative_int, default=5, metavar="MS",
                   help="how long to wait to fill a batch (default 5)")
    p.add_argument("--delivery-timeout-ms", type=_client.positive_int, default=DEFAULT_DELIVERY_TIMEOUT_MS,
                   metavar="MS", help=f"give up on a record after this long (default {DEFAULT_DELIVERY_TIMEOUT_MS})")
    p.add_argument("--progress-interval-ms", type=_client.non_negative_int, default=1000, metavar="MS",
                   help="when stdin is not a terminal, print progress to stderr this often (0: never; default 1000)")
    p.add_argument("--progress-every", type=_client.positive_int, metavar="N",
                   help="also print progress every N records")
    p.add_argument("--quiet", action="store_true", help="no progress or summary, only errors")
    _client.add_common_options(p, extra_property_flag="--producer-property")
    p.set_defaults(func=lambda args: _client.run_verb("produce", run, args))


# -- parsing lines -----------------------------------------------------------------------------------


class LineError(ValueError):
    """A line that does not have the configured shape."""


@dataclass(slots=True)
class LineReader:
    """Kafka's console producer line grammar (see the module docstring); pure, works on bytes."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False
    fixed_headers: list[Header] = field(default_factory=list)

    @classmethod
    def from_properties(cls, props: dict[str, str], fixed_headers: list[Header]) -> LineReader:
        known = {"parse.key", "key.separator", "parse.headers", "headers.delimiter", "headers.separator",
                 "headers.key.separator", "null.marker", "ignore.error"}
        unknown = sorted(set(props) - known)
        if unknown:
            raise CliError(f"unknown --property {', '.join(unknown)}",
                           f"the line reader properties are: {', '.join(sorted(known))}; client configs go in "
                           "--producer-property", exit_code=2)

        def flag(name: str) -> bool:
            value = props.get(name, "false").strip().lower()
            if value not in ("true", "false"):
                raise CliError(f"--property {name}={props[name]} must be true or false", exit_code=2)
            return value == "true"

        def sep(name: str, default: str) -> bytes:
            value = props.get(name, default)
            if not value:
                raise CliError(f"--property {name} must not be empty", exit_code=2)
            return value.encode()

        reader = cls(
            parse_key=flag("parse.key"),
            key_separator=sep("key.separator", "\t"),
            parse_headers=flag("parse.headers"),
            headers_delimiter=sep("headers.delimiter", "\t"),
            headers_separator=sep("headers.separator", ","),
            headers_key_separator=sep("headers.key.separator", ":"),
            null_marker=props["null.marker"].encode() if props.get("null.marker") else None,
            ignore_error=flag("ignore.error"),
            fixed_headers=fixed_headers,
        )
        if reader.parse_headers and reader.headers_separator == reader.headers_key_separator:
            raise CliError("headers.separator and headers.key.separator must differ", exit_code=2)
        return reader

    def parse(self, line: bytes, lineno: int) -> tuple[bytes | None, bytes | None, list[Header]]:
        """(key, value, headers) of one line without its line terminator; ``LineError`` if malformed."""
        headers = list(self.fixed_headers)
        rest = line
        if self.parse_headers:
            i = rest.find(self.headers_delimiter)
            if i < 0:
                if not self.ignore_error:
                    raise LineError(f"line {lineno}: no headers delimiter {_show(self.headers_delimiter)} found")
            else:
                headers.extend(self._headers(rest[:i], lineno))
                rest = rest[i + len(self.headers_delimiter):]
        key: bytes | None = None
        if self.parse_key:
            i = rest.find(self.key_separator)
            if i < 0:
                if not self.ignore_error:
                    raise LineError(f"line {lineno}: no key separator {_show(self.key_separator)} found")
            else:
                key, rest = rest[:i], rest[i + len(self.key_separator):]
                key = self._null(key)
        return key, self._null(rest), headers

    def _headers(self, text: bytes, lineno: int) -> Iterable[Header]:
        for pair in text.split(self.headers_separator):
            if not pair:
                continue
            i = pair.find(self.headers_key_separator)
            if i < 0:
                if self.ignore_error:
                    yield pair.decode("utf-8", "replace"), None
                    continue
                raise LineError(f"line {lineno}: no header key separator {_show(self.headers_key_separator)} "
                                f"in {_show(pair)}")
            hkey = pair[:i]
            if self.null_marker is not None and hkey == self.null_marker:
                raise LineError(f"line {lineno}: a header key equals the null marker; header keys cannot be null")
            yield hkey.decode("utf-8", "replace"), self._null(pair[i + len(self.headers_key_separator):])

    def _null(self, data: bytes) -> bytes | None:
        return None if self.null_marker is not None and data == self.null_marker else data


def _show(data: bytes) -> str:
    return repr(data.decode("utf-8", "replace"))


def _fixed_headers(items: list[str]) -> list[Header]:
    out: list[Header] = []
    for item in items:
        k, v = _client.split_key_value(item, "--header")
        out.append((k, v.encode()))
    return out


# -- sending -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    read: int = 0
    sent: int = 0
    delivered: int = 0
    failed: int = 0
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return (f"{self.read} lines read, {self.delivered} records delivered, {self.failed} failed "
                f"({self.delivered / elapsed:,.0f} records/s)")


def run(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    props = _client.parse_properties(args.property, "--property")
    if args.key_separator is not None:
        if not args.key_separator:
            raise CliError("--key-separator must not be empty", exit_code=2)
        props["parse.key"] = "true"
        props["key.separator"] = args.key_separator
    reader = LineReader.from_properties(props, _fixed_headers(args.header))
    overrides: dict[str, Any] = {
        "acks": args.acks,
        "linger.ms": args.linger_ms,
        "message.timeout.ms": args.delivery_timeout_ms,
        "error_cb": _on_client_error,
    }
    if args.compression_type:
        overrides["compression.type"] = args.compression_type
    producer = _client.make_client(Producer, _client.base_config(args, **overrides))
    _check_topic(producer, args)

    source = stdin if stdin is not None else sys.stdin.buffer
    interactive = _isatty(source)
    show_progress = not args.quiet and not interactive
    tally = Tally()
    try:
        _send_lines(producer, args, reader, source, tally, show_progress, interactive)
    except KeyboardInterrupt:
        print("odradek produce: interrupted; delivering what was read", file=sys.stderr)
        _flush(producer, args, tally)
        return 130
    _flush(producer, args, tally)
    if not args.quiet and (tally.failed or (show_progress and time.monotonic() - tally.started >= 1)):
        print(f"odradek produce: done: {tally.line()}", file=sys.stderr)
    return 1 if tally.failed else 0


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _on_client_error(err: KafkaError) -> None:
    if err.fatal():
        print(f"odradek produce: error: {err.str()}", file=sys.stderr)
    else:
        _client.client_log.debug("client error: %s", err.str())


def _check_topic(producer: Producer, args: argparse.Namespace) -> None:
    """Fail fast when the broker is unreachable, the topic unknown or ``--partition`` out of range."""
    md = _client.check_reachable(producer, args, args.topic)
    topic = md.topics.get(args.topic)
    if topic is None or topic.error is not None:
        err = topic.error if topic is not None else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        raise _client.error_from_kafka(KafkaException(err), args, f"produce to topic '{args.topic}'",
                                       subject=args.topic)
    if args.partition is not None and args.partition not in topic.partitions:
        raise CliError(
            f"topic '{args.topic}' has no partition {args.partition} (it has {len(topic.partitions)})",
            f"use --partition 0..{len(topic.partitions) - 1}, or add partitions with "
            f"`odradek topics alter --topic {args.topic} --partitions N`",
        )


def _send_lines(producer: Producer, args: argparse.Namespace, reader: LineReader, source: BinaryIO,
                tally: Tally, show_progress: bool, interactive: bool) -> None:
    """Send every line; at a terminal, wait for each record's delivery so errors show right away."""
    interval = args.progress_interval_ms / 1000
    next_report = time.monotonic() + interval
    every = args.progress_every
    extra: dict[str, Any] = {} if args.partition is None else {"partition": args.partition}
    for raw in source:
        tally.read += 1
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        try:
            key, value, headers = reader.parse(line, tally.read)
        except LineError as e:
            tally.failed += 1
            print(f"odradek produce: error: {e}; the line was not sent", file=sys.stderr)
            continue
        callback = _delivery_callback(tally, tally.read)
        while True:
            try:
                producer.produce(args.topic, value=value, key=key, headers=headers or None,
                                 on_delivery=callback, **extra)
                break
            except BufferError:
                producer.poll(0.1)  # the local queue is full: wait for deliveries
            except KafkaException as e:
                tally.failed += 1
                err = e.args[0] if e.args else e
                msg = err.str() if isinstance(err, KafkaError) else str(err)
                print(f"odradek produce: error: line {tally.read}: not sent: {msg}", file=sys.stderr)
                callback = None
                break
        if callback is not None:
            tally.sent += 1
        if interactive:
            producer.flush(args.delivery_timeout_ms / 1000 + 5)
        else:
            producer.poll(0)
        if show_progress:
            now = time.monotonic()
            if (interval and now >= next_report) or (every and tally.read % every == 0):
                print(f"odradek produce: {tally.line()}", file=sys.stderr)
                next_report = now + interval


def _delivery_callback(tally: Tally, lineno: int) -> Any:
    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            tally.delivered += 1
        else:
            tally.failed += 1
            print(f"odradek produce: error: line {lineno}: not delivered to {msg.topic()}: "
                  f"{err.str()} ({err.name()})", file=sys.stderr)

    return on_delivery


def _flush(producer: Producer, args: argparse.Namespace, tally: Tally) -> None:
    """Wait for outstanding deliveries, bounded by the delivery timeout (plus a margin)."""
    remaining = producer.flush(args.delivery_timeout_ms / 1000 + 5)
    if remaining:
        tally.failed += remaining
        print(f"odradek produce: error: {remaining} records were still undelivered after "
              f"{args.delivery_timeout_ms / 1000:g}s", file=sys.stderr)
