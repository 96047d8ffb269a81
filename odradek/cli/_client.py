"""What the client verbs (topics, produce, consume, configs) share: options, client configs, errors.

Every verb talks to the broker through confluent-kafka (librdkafka), never through a hand-written
client, so what these commands do is what a Kafka application would see.

Invariants:
- Every wait is bounded: connecting, each admin request and each flush use ``--request-timeout-ms``
  (or a verb's own documented limit), so a verb never hangs on an unreachable broker.
- Failures become ``CliError``: what went wrong and what to do about it; ``run_verb`` prints it as
  ``odradek <verb>: error: ...`` plus a ``hint:`` line and returns exit code 1 (2 for bad usage).
- librdkafka's own log lines go to the ``odradek.client`` logger and are shown only with
  ``--log-level DEBUG``: the verbs report the errors that matter themselves.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from odradek.broker import config_sources
from odradek.broker.config import ConfigError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "ODRADEK_BOOTSTRAP_SERVER"
DEFAULT_REQUEST_TIMEOUT_MS = 10_000

client_log = logging.getLogger("odradek.client")


class CliError(Exception):
    """A failure to report to the user: ``message`` says what went wrong, ``hint`` what to do."""

    def __init__(self, message: str, hint: str | None = None, *, exit_code: int = 1, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code
        self.code = code  # the Kafka error code behind it, if any


# -- options ---------------------------------------------------------------------------------------


def add_common_options(p: argparse.ArgumentParser, *, extra_property_flag: str | None = None) -> None:
    """``--bootstrap-server``, ``--request-timeout-ms``, ``--command-config`` and pass-through properties."""
    g = p.add_argument_group("connection")
    g.add_argument(
        "--bootstrap-server", metavar="HOST:PORT", default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
        help=f"broker(s) to connect to, comma-separated (default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP})",
    )
    g.add_argument(
        "--request-timeout-ms", type=positive_int, default=DEFAULT_REQUEST_TIMEOUT_MS, metavar="MS",
        help="how long to wait for the broker to connect and answer each request "
             f"(default {DEFAULT_REQUEST_TIMEOUT_MS})",
    )
    g.add_argument("--command-config", type=Path, metavar="FILE",
                   help="properties file of client configs (librdkafka names, e.g. security.protocol=SSL)")
    flags = ["--client-property"] + ([extra_property_flag] if extra_property_flag else [])
    g.add_argument(*flags, dest="client_properties", action="append", default=[], metavar="KEY=VALUE",
                   help="one client config (librdkafka names), repeatable")


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return n


def non_negative_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return n


def comma_words(items: Iterable[str]) -> list[str]:
    """The non-empty, stripped words of a repeatable comma-separated option: ``["a, b", "c"]`` → a, b, c."""
    return [w for item in items for w in (part.strip() for part in item.split(",")) if w]


def split_key_value(item: str, option: str) -> tuple[str, str]:
    """``key=value`` → (key, value); the value may itself contain ``=``."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise CliError(f"{option} {item!r} is not KEY=VALUE", f"write it as {option} name=value", exit_code=2)
    return key.strip(), value


def read_properties(path: Path) -> dict[str, str]:
    """A Java ``.properties`` file (``--command-config``), read as the broker reads ``server.properties``
    (``config_sources.read_properties``: separators, escapes, continuations, ``#``/``!`` comments)."""
    try:
        return config_sources.read_properties(path)
    except ConfigError as e:
        raise CliError(str(e), "check the --command-config path and its key=value lines", exit_code=2) from None


def read_json(path: Path, hint: str | None = None) -> Any:
    """A JSON file a verb takes as input (a reassignment plan, a list of partitions): usage errors otherwise."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}", exit_code=2) from None
    except json.JSONDecodeError as e:
        raise CliError(f"{path} is not JSON: {e}", hint, exit_code=2) from None


# -- client configuration --------------------------------------------------------------------------


def _librdkafka_log_level() -> int:
    return 7 if logging.getLogger().isEnabledFor(logging.DEBUG) else 0


def base_config(args: argparse.Namespace, **overrides: Any) -> dict[str, Any]:
    """The librdkafka config every client of a verb starts from; user properties win over defaults."""
    timeout = args.request_timeout_ms
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "socket.timeout.ms": max(timeout, 10),
        "socket.connection.setup.timeout.ms": max(timeout, 1000),
        "reconnect.backoff.max.ms": 1000,
        "logger": client_log,
        "log_level": _librdkafka_log_level(),
    }
    conf.update(overrides)
    if args.command_config is not None:
        conf.update(read_properties(args.command_config))
    for item in args.client_properties:
        key, value = split_key_value(item, "--client-property")
        conf[key] = value
    return conf


def make_client(cls: Callable[[dict[str, Any]], Any], conf: dict[str, Any]) -> Any:
    """``cls(conf)`` (AdminClient, Producer or Consumer), with a bad config reported as a usage error."""
    try:
        return cls(conf)
    except (KafkaException, ValueError, TypeError) as e:
        err = e.args[0] if e.args else e
        text = err.str() if isinstance(err, KafkaError) else str(err)
        raise CliError(f"invalid client configuration: {text}",
                       "check --client-property/--command-config (librdkafka's property names)",
                       exit_code=2) from None


def generated_group_id(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def timeout_s(args: argparse.Namespace) -> float:
    return args.request_timeout_ms / 1000


# -- errors ----------------------------------------------------------------------------------------

_UNREACHABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._RESOLVE,
    KafkaError.REQUEST_TIMED_OUT,
}


def unreachable(args: argparse.Namespace, detail: str | None = None) -> CliError:
    seconds = args.request_timeout_ms / 1000
    msg = f"cannot reach a broker at {args.bootstrap_server} within {seconds:g}s"
    if detail:
        msg += f" ({detail})"
    return CliError(
        msg,
        f"is a broker running there? Start one with `odradek serve`, or point --bootstrap-server "
        f"(or ${BOOTSTRAP_ENV}) at a running broker; --request-timeout-ms sets how long to wait",
    )


_HINTS: dict[int, str] = {
    KafkaError.TOPIC_ALREADY_EXISTS: "pick another name, or add --if-not-exists to ignore existing topics",
    KafkaError.UNKNOWN_TOPIC_OR_PART: "list the topics with `odradek topics list`, or create it with "
    "`odradek topics create --topic {subject}`",
    KafkaError.UNKNOWN_TOPIC_ID: "list the topics with `odradek topics list`",
    KafkaError.INVALID_PARTITIONS: "the partition count must be positive, and when altering, larger than "
    "the current one (partitions can be added, never removed)",
    KafkaError.INVALID_REPLICATION_FACTOR: "this cluster has one broker: use --replication-factor 1 (or omit it)",
    KafkaError.INVALID_CONFIG: "see `odradek configs describe --entity-type topics --entity-name {subject}` "
    "for the config keys and their current values",
    KafkaError.TOPIC_EXCEPTION: "topic names are 1-249 characters of ASCII letters, digits, '.', '_' "
    "and '-'",
    KafkaError.POLICY_VIOLATION: "the broker's policy forbids this change",
    KafkaError.UNSUPPORTED_VERSION: "the broker does not support this operation (yet)",
    KafkaError.MSG_SIZE_TOO_LARGE: "raise the topic's max.message.bytes, or send smaller records",
    KafkaError.RECORD_LIST_TOO_LARGE: "lower batch.size with --producer-property batch.size=N",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "the client is not authorized for this topic",
    KafkaError._MSG_TIMED_OUT: "the broker did not acknowledge the record in time; check that it is running, "
    "or raise --delivery-timeout-ms",
}


def error_from_kafka(err: KafkaError | KafkaException | BaseException, args: argparse.Namespace,
                     what: str, *, subject: str | None = None) -> CliError:
    """A ``CliError`` for a failed operation ``what`` (e.g. "create topic 't'")."""
    kerr = err.args[0] if isinstance(err, KafkaException) and err.args else err
    if isinstance(kerr, KafkaError):
        code = kerr.code()
        if code in _UNREACHABLE:
            e = unreachable(args, f"{what}: {kerr.str()}")
            e.code = code
            return e
        hint = _HINTS.get(code)
        if hint is not None:
            hint = hint.replace("{subject}", subject or "NAME")
        return CliError(f"cannot {what}: {kerr.str()} ({kerr.name()})", hint, code=code)
    return CliError(f"cannot {what}: {err}")


def wait(future: Future[Any], args: argparse.Namespace, what: str, *, subject: str | None = None) -> Any:
    """The result of an admin future, bounded by the request timeout (plus a margin for librdkafka)."""
    try:
        return future.result(timeout=timeout_s(args) + 5)
    except FutureTimeout:
        raise unreachable(args, f"no answer to {what}") from None
    except KafkaException as e:
        raise error_from_kafka(e, args, what, subject=subject) from None


def check_reachable(client: Any, args: argparse.Namespace, topic: str | None = None) -> Any:
    """Cluster metadata (of ``topic`` alone when given), or ``CliError`` when no broker answers in time.

    Works with an AdminClient, a Producer or a Consumer (they all have ``list_topics``).
    """
    try:
        return client.list_topics(topic=topic, timeout=timeout_s(args))
    except KafkaException as e:
        raise error_from_kafka(e, args, "fetch metadata") from None


def run_verb(name: str, func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run ``func``, printing a ``CliError`` (or Ctrl-C) the way every client verb does."""
    try:
        return func(args)
    except CliError as e:
        report(name, e)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"odradek {name}: interrupted", file=sys.stderr)
        return 130


def report(name: str, e: CliError) -> None:
    print(f"odradek {name}: error: {e.message}", file=sys.stderr)
    if e.hint:
        print(f"  hint: {e.hint}", file=sys.stderr)


def parse_pairs(items: Iterable[str], option: str) -> dict[str, str]:
    """Repeatable ``KEY=VALUE`` options, each of which may also be a comma-separated list."""
    out: dict[str, str] = {}
    for item in items:
        for part in split_config_list(item):
            key, value = split_key_value(part, option)
            out[key] = value
    return out


def parse_properties(items: Iterable[str], option: str) -> dict[str, str]:
    """Repeatable ``KEY=VALUE`` options taken literally (a value may contain commas or ``=``)."""
    return dict(split_key_value(item, option) for item in items)


def split_config_list(text: str) -> list[str]:
    """Split ``k=v,k2=v2`` on commas; ``[a,b]`` keeps its commas (kafka-configs.sh's list syntax), and so does a
    value whose next comma-separated part is not ``key=value`` (``cleanup.policy=compact,delete``, as
    kafka-topics.sh takes it)."""
    parts: list[str] = []
    depth = 0
    current = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    out: list[str] = []
    for part in parts:
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep and out:  # a comma inside the previous value: cleanup.policy=compact,delete (kafka-topics)
            out[-1] = f"{out[-1]},{part}"
            continue
        if sep and value.startswith("[") and value.endswith("]"):
            part = f"{key}={value[1:-1]}"
        out.append(part)
    return out
