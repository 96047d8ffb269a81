"""``odradek transactions list|describe|describe-producers|find-hanging|abort``, as ``kafka-transactions.sh``.

The verb uses kafka-python's ``KafkaAdminClient``: confluent-kafka's AdminClient has no transaction
APIs. It sends ListTransactions (api 66), DescribeTransactions (api 65, to the transaction
coordinator found with FindCoordinator), DescribeProducers (api 61, to the partition leader, or to
``--broker-id``), WriteTxnMarkers (api 27, to the partition leader, for abort) and Metadata.

Output is a table per action, columns left-aligned and separated by at least two spaces; the header
is printed even when there are no rows, as kafka-transactions.sh does.

list (one row per transactional id, sorted; ``--state``, ``--producer-id``, ``--duration-filter``
and ``--transactional-id-pattern`` filter on the broker)::

    TransactionalId  Coordinator  ProducerId  TransactionState
    orders-tx-1      1            4000        Ongoing

describe (one row)::

    CoordinatorId  TransactionalId  ProducerId  ProducerEpoch  TransactionState  TransactionTimeoutMs
    CurrentTransactionStartTimeMs  TransactionDurationMs  TopicPartitions
    1  orders-tx-1  4000  0  Ongoing  60000  1700000000000  1520  orders-0,orders-1

describe-producers (one row per producer with state on the partition)::

    ProducerId  ProducerEpoch  LatestCoordinatorEpoch  LastSequence  LastTimestamp  CurrentTransactionStartOffset
    4000        0              -1                      2             1700000000000  17

find-hanging (one row per hanging transaction; ``Duration(min)`` counts from the producer's last
write)::

    Topic  Partition  ProducerId  ProducerEpoch  CoordinatorEpoch  StartOffset  LastTimestamp  Duration(min)

abort (writes an ABORT marker for one producer in one partition, ending a hanging transaction; the
producer is found by the offset where its open transaction starts, or named with its epochs)::

    Aborted the transaction of producer 4000 (epoch 0) in orders-0 that started at offset 17

Usage::

    odradek transactions list
    odradek transactions list --state Ongoing,PrepareCommit --duration-filter 60000
    odradek transactions list --transactional-id-pattern 'orders-.*'
    odradek transactions describe --transactional-id orders-tx-1
    odradek transactions describe-producers --topic orders --partition 0
    odradek transactions find-hanging --broker-id 1
    odradek transactions find-hanging --topic orders --max-transaction-timeout 5
    odradek transactions abort --topic orders --partition 0 --start-offset 17
    odradek transactions abort --topic orders --partition 0 --producer-id 4000 --producer-epoch 0 \
        --coordinator-epoch 0

Invariants:
- Values mean what kafka-transactions.sh prints: "None" where Kafka has no value (no transaction
  start time, no open transaction on the partition), -1 for an unknown coordinator epoch, and
  TopicPartitions written ``topic-partition`` joined by commas ("-" when there are none, so that
  every row has every column).
- TransactionDurationMs is now minus the start time, shown only while the transaction is open
  (Ongoing, PrepareCommit, PrepareAbort, PrepareEpochFence): a finished transaction keeps its last
  start time, and the age of that says nothing about a running transaction. A start time of 0 or
  less is no start time (the wire's "none" is -1; a broker may also send the epoch).
- A transaction is hanging, as in Kafka, when a partition has an open transaction of a producer
  (a CurrentTransactionStartOffset) whose last write is older than ``--max-transaction-timeout``
  minutes, and that producer's transactional id is unknown to the coordinators, or its
  transaction does not include that partition. Such a transaction holds back the partition's last
  stable offset (read_committed consumers) until it is aborted.
- abort with ``--start-offset`` takes the producer id, epoch and coordinator epoch (0 if the partition
  has seen none) from DescribeProducers, as kafka-transactions.sh does, and refuses if no open
  transaction starts there; the partition leader refuses an older epoch or coordinator epoch.
- Every wait is bounded: connecting by ``--request-timeout-ms``, each admin call by twice that plus
  5 s (a call may need a Metadata or FindCoordinator round trip before its own request).
- Failures are ``CliError``s (``odradek transactions: error: ...`` and a hint): exit code 1 for an
  unknown transactional id, an unreachable broker or a broker error; 2 for bad usage.
- ``--command-config``/``--client-property`` take librdkafka's (or Kafka's) property names like the
  other verbs; those kafka-python has an equivalent for are translated, the others are ignored with
  a warning. kafka-python's own log lines are shown only with ``--log-level DEBUG``.
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import kafka.errors as kerrors
from kafka import TopicPartition
from kafka.admin import AbortTransactionSpec

from odradek.cli import _client, _kafka_python
from odradek.cli._client import CliError
from odradek.cli._kafka_python import Admin
from odradek.cli.groups import print_table

T = TypeVar("T")

ACTIONS = ("list", "describe", "describe-producers", "find-hanging", "abort")

# Kafka's transaction states, as ListTransactions filters on them and the tools print them.
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
          "PrepareEpochFence")
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
_STATES_BY_LOWER = {s.lower(): s for s in STATES}

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCER_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                    "CurrentTransactionStartOffset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")

DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15  # Kafka's transaction.max.timeout.ms, in minutes
DESCRIBE_PRODUCERS_BATCH = 500  # partitions per DescribeProducers request in find-hanging
NONE = "None"

log = logging.getLogger("odradek.cli.transactions")


# -- parser ------------------------------------------------------------------------------------------


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "transactions",
        help="list and describe transactions and producer state, find and abort hanging transactions "
             "(like kafka-transactions.sh)",
        description="Inspect the transactional state of producers: transactions known to the transaction "
                    "coordinator, producer state on partitions, and hanging transactions.",
        epilog="examples:\n"
        "  odradek transactions list --state Ongoing\n"
        "  odradek transactions list --duration-filter 60000             # open for more than a minute\n"
        "  odradek transactions describe --transactional-id orders-tx-1\n"
        "  odradek transactions describe-producers --topic orders --partition 0\n"
        "  odradek transactions find-hanging --broker-id 1\n"
        "  odradek transactions abort --topic orders --partition 0 --start-offset 17",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    ls = actions.add_parser("list", help="list transactions (one row per transactional id)",
                            description="List the transactions the transaction coordinators know.")
    ls.add_argument("--state", action="append", default=[], metavar="STATE",
                    help="only transactions in these states, comma-separated or repeated, case-insensitive: "
                         + ", ".join(STATES))
    ls.add_argument("--producer-id", action="append", default=[], metavar="ID",
                    help="only transactions of these producer ids, comma-separated or repeated")
    ls.add_argument("--duration-filter", type=_client.non_negative_int, metavar="MS",
                    help="only transactions running for longer than MS milliseconds")
    ls.add_argument("--transactional-id-pattern", metavar="REGEX",
                    help="only transactional ids that this regular expression matches as a whole")

    ds = actions.add_parser("describe", help="describe the state of one transactional id",
                            description="Describe the state of a transactional id, as its coordinator holds it.")
    ds.add_argument("--transactional-id", required=True, metavar="ID", help="the transactional id")

    dp = actions.add_parser("describe-producers", help="describe the active producers of a partition",
                            description="Describe the state of the producers that wrote to a partition: "
                                        "their last sequence and timestamp, and where an open transaction starts.")
    dp.add_argument("--topic", required=True, metavar="NAME", help="topic name")
    dp.add_argument("--partition", required=True, type=_client.non_negative_int, metavar="N", help="partition")
    dp.add_argument("--broker-id", type=_client.non_negative_int, metavar="ID",
                    help="ask this broker (a replica) instead of the partition's leader")

    fh = actions.add_parser(
        "find-hanging", help="find transactions that hold back a partition's last stable offset",
        description="Find hanging transactions: open in a partition for longer than the maximum transaction "
                    "timeout while the transaction coordinator does not know them as open in that partition.")
    fh.add_argument("--broker-id", type=_client.non_negative_int, metavar="ID",
                    help="search the partitions this broker holds a replica of")
    fh.add_argument("--topic", metavar="NAME", help="search this topic's partitions")
    fh.add_argument("--partition", type=_client.non_negative_int, metavar="N",
                    help="search only this partition of --topic")
    fh.add_argument("--max-transaction-timeout", type=_client.non_negative_int,
                    default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN, metavar="MINUTES",
                    help="the brokers' transaction.max.timeout.ms, in minutes: open transactions whose last "
                         f"write is older are candidates (default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN})")

    ab = actions.add_parser(
        "abort", help="abort a hanging transaction in one partition",
        description="Abort an open transaction in one partition by writing its ABORT marker there (use "
                    "find-hanging first). Name the transaction by the offset where it starts (--start-offset) "
                    "or by its producer (--producer-id, --producer-epoch and --coordinator-epoch).")
    ab.add_argument("--topic", required=True, metavar="NAME", help="topic name")
    ab.add_argument("--partition", required=True, type=_client.non_negative_int, metavar="N", help="partition")
    ab.add_argument("--start-offset", type=_client.non_negative_int, metavar="OFFSET",
                    help="the offset where the transaction starts (CurrentTransactionStartOffset)")
    ab.add_argument("--producer-id", type=_client.non_negative_int, metavar="ID", help="the producer id")
    ab.add_argument("--producer-epoch", type=_client.non_negative_int, metavar="EPOCH", help="the producer epoch")
    ab.add_argument("--coordinator-epoch", type=_client.non_negative_int, metavar="EPOCH",
                    help="the coordinator epoch of the producer's last marker (LatestCoordinatorEpoch)")

    for sp in (ls, ds, dp, fh, ab):
        _client.add_common_options(sp)
        sp.set_defaults(func=lambda args: _client.run_verb("transactions", run, args))


def run(args: argparse.Namespace) -> int:
    _check_options(args)
    _kafka_python.quiet_kafka_python()
    admin = Admin(args, "transactions", error_from)
    try:
        return {"list": list_transactions, "describe": describe, "describe-producers": describe_producers,
                "find-hanging": find_hanging, "abort": abort}[args.action](admin, args)
    finally:
        admin.close()


def _check_options(args: argparse.Namespace) -> None:
    if args.action == "list":
        args.state = parse_states(args.state)
        args.producer_id = parse_producer_ids(args.producer_id)
        if args.transactional_id_pattern is not None:
            try:
                re.compile(args.transactional_id_pattern)
            except re.error as e:
                raise CliError(f"--transactional-id-pattern {args.transactional_id_pattern!r} is not a valid "
                               f"regular expression: {e}", "e.g. --transactional-id-pattern 'orders-.*'",
                               exit_code=2) from None
    elif args.action == "describe":
        if not args.transactional_id.strip():
            raise CliError("--transactional-id must not be empty", exit_code=2)
    elif args.action == "describe-producers":
        if not args.topic.strip():
            raise CliError("--topic must not be empty", exit_code=2)
    elif args.action == "find-hanging":
        if args.topic is None and args.broker_id is None:
            raise CliError("find-hanging needs --topic or --broker-id to limit the search",
                           "e.g. odradek transactions find-hanging --broker-id 1 (a single broker's id is "
                           "broker.id, 1 by default)", exit_code=2)
        if args.partition is not None and args.topic is None:
            raise CliError("--partition needs --topic", exit_code=2)
    elif args.action == "abort":
        named = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
        if args.start_offset is not None and any(v is not None for v in named):
            raise CliError("give either --start-offset or --producer-id/--producer-epoch/--coordinator-epoch, "
                           "not both", exit_code=2)
        if args.start_offset is None and any(v is None for v in named):
            raise CliError("abort needs --start-offset, or all of --producer-id, --producer-epoch and "
                           "--coordinator-epoch",
                           f"`odradek transactions describe-producers --topic {args.topic} --partition "
                           f"{args.partition}` shows them", exit_code=2)


def parse_states(items: Iterable[str]) -> list[str]:
    """``["ongoing,PrepareCommit", "Empty"]`` → Kafka's state names; a ``CliError`` naming them otherwise."""
    out: list[str] = []
    for word in _client.comma_words(items):
        state = _STATES_BY_LOWER.get(word.lower())
        if state is None:
            raise CliError(f"--state {word!r} is not a transaction state",
                           f"the states are: {', '.join(STATES)}", exit_code=2)
        if state not in out:
            out.append(state)
    return out


def parse_producer_ids(items: Iterable[str]) -> list[int]:
    out: list[int] = []
    for word in _client.comma_words(items):
        try:
            pid = int(word)
        except ValueError:
            pid = -1
        if pid < 0:
            raise CliError(f"--producer-id {word!r} is not a producer id (a non-negative integer)",
                           "`odradek transactions list` shows the producer ids", exit_code=2)
        if pid not in out:
            out.append(pid)
    return out




_APIS = {
    "list transactions": "ListTransactions (api 66)",
    "describe transactional id": "DescribeTransactions (api 65)",
    "describe producers": "DescribeProducers (api 61)",
    "abort the transaction": "WriteTxnMarkers (api 27)",
}


def error_from(e: BaseException, args: argparse.Namespace, what: str, subject: str | None = None) -> CliError:
    """A ``CliError`` for a failed operation ``what`` (e.g. "describe producers of orders-0")."""
    if isinstance(e, CliError):
        return e
    if isinstance(e, _kafka_python.UNREACHABLE):
        return _kafka_python.generic_error(e, args, what)
    code = getattr(e, "errno", None)
    if isinstance(e, kerrors.UnsupportedVersionError):
        api = next((name for prefix, name in _APIS.items() if what.startswith(prefix)), "this request")
        return CliError(f"cannot {what}: the broker at {args.bootstrap_server} does not support {api}",
                        "this needs a broker that implements Kafka's transaction tooling APIs (KIP-664)", code=code)
    if isinstance(e, kerrors.TransactionalIdNotFoundError):
        return not_found(subject or "?")
    if isinstance(e, kerrors.UnknownTopicOrPartitionError):
        topic = subject or "NAME"
        return CliError(f"cannot {what}: the topic or partition does not exist (UNKNOWN_TOPIC_OR_PARTITION)",
                        f"`odradek topics describe --topic {topic}` shows its partitions", code=code)
    if isinstance(e, kerrors.InvalidProducerEpochError | kerrors.TransactionCoordinatorFencedError):
        return CliError(f"cannot {what}: {_kafka_python.describe_error(e)}",
                        "the partition has seen a newer epoch of this producer or of its coordinator: "
                        "`odradek transactions describe-producers` shows its ProducerEpoch and LatestCoordinatorEpoch",
                        code=code)
    if isinstance(e, kerrors.CoordinatorLoadInProgressError | kerrors.CoordinatorNotAvailableError):
        return CliError(f"cannot {what}: {_kafka_python.describe_error(e)}",
                        "the transaction coordinator is starting up; retry in a few seconds", code=code)
    return CliError(f"cannot {what}: {_kafka_python.describe_error(e)}", code=code)


def not_found(transactional_id: str) -> CliError:
    return CliError(f"transactional id '{transactional_id}' does not exist (TRANSACTIONAL_ID_NOT_FOUND)",
                    "`odradek transactions list` shows the transactional ids there are; an id exists once a "
                    "producer with that transactional.id has called init_transactions",
                    code=kerrors.TransactionalIdNotFoundError.errno)


# -- list --------------------------------------------------------------------------------------------


def list_transactions(admin: Admin, args: argparse.Namespace) -> int:
    by_broker: dict[int, list[Any]] = admin.call("list transactions", lambda c: c.list_transactions(
        producer_id_filters=args.producer_id or None, state_filters=args.state or None,
        duration_filter_ms=args.duration_filter, transactional_id_pattern=args.transactional_id_pattern))
    rows = sorted(((t.transactional_id, broker, t.producer_id, _state(t.state))
                   for broker, listings in by_broker.items() for t in listings),
                  key=lambda r: (r[0], r[1]))
    print_table(LIST_HEADERS, rows)
    return 0


def _state(state: Any) -> str:
    return str(getattr(state, "value", state))


# -- describe ----------------------------------------------------------------------------------------


def describe(admin: Admin, args: argparse.Namespace) -> int:
    tid = args.transactional_id
    result: dict[str, Any] = admin.call(f"describe transactional id '{tid}'",
                                        lambda c: c.describe_transactions([tid]), subject=tid)
    d = result.get(tid)
    if d is None:
        raise not_found(tid)
    print_table(DESCRIBE_HEADERS, [describe_row(tid, d, now_ms=int(time.time() * 1000))])
    return 0


def describe_row(tid: str, d: Any, *, now_ms: int) -> tuple[Any, ...]:
    """The describe table's row for a kafka-python ``TransactionDescription``."""
    state = _state(d.state)
    start = d.transaction_start_time_ms
    start_text = str(start) if start > 0 else NONE
    duration = str(max(now_ms - start, 0)) if start > 0 and state in OPEN_STATES else NONE
    return (d.coordinator_id, tid, d.producer_id, d.producer_epoch, state, d.transaction_timeout_ms, start_text,
            duration, format_partitions(d.topic_partitions))


def format_partitions(tps: Iterable[Any]) -> str:
    return ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(tps, key=lambda tp: (tp.topic, tp.partition))) \
        or "-"


# -- describe-producers ------------------------------------------------------------------------------


def describe_producers(admin: Admin, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    on = f" on broker {args.broker_id}" if args.broker_id is not None else ""
    result: dict[Any, Any] = admin.call(f"describe producers of {tp.topic}-{tp.partition}{on}",
                                        lambda c: c.describe_producers([tp], broker_id=args.broker_id),
                                        subject=args.topic)
    state = result.get(tp)
    producers = list(state.active_producers) if state is not None else []
    print_table(PRODUCER_HEADERS, [producer_row(p) for p in sorted(producers, key=lambda p: p.producer_id)])
    return 0


def producer_row(p: Any) -> tuple[Any, ...]:
    """The describe-producers row of a kafka-python ``ProducerState``."""
    start = p.current_transaction_start_offset
    return (p.producer_id, p.producer_epoch, p.coordinator_epoch if p.coordinator_epoch >= 0 else -1,
            p.last_sequence, p.last_timestamp, start if start >= 0 else NONE)


# -- find-hanging ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A producer's open transaction in one partition, as DescribeProducers reports it."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int


def open_candidates(states: Mapping[Any, Sequence[Any]], *, now_ms: int,
                    max_timeout_ms: int) -> list[OpenTransaction]:
    """The open transactions (a start offset) whose producer last wrote more than ``max_timeout_ms`` ago.

    ``states``: TopicPartition → the partition's kafka-python ``ProducerState``s. A transaction the
    coordinator still drives ends within the timeout, so only older ones can be hanging.
    """
    out = []
    for tp, producers in states.items():
        for p in producers:
            if p.current_transaction_start_offset >= 0 and now_ms - p.last_timestamp > max_timeout_ms:
                out.append(OpenTransaction(tp.topic, tp.partition, p.producer_id, p.producer_epoch,
                                           p.coordinator_epoch, p.current_transaction_start_offset, p.last_timestamp))
    return sorted(out, key=lambda o: (o.topic, o.partition, o.producer_id))


def hanging(candidates: Iterable[OpenTransaction], transactional_ids: Mapping[int, str],
            descriptions: Mapping[str, Any]) -> list[OpenTransaction]:
    """The candidates the coordinator does not know as open in their partition (Kafka's rule).

    ``transactional_ids``: producer id → transactional id (ListTransactions); ``descriptions``:
    transactional id → its ``TransactionDescription``, or None when the coordinator does not know it.
    A transaction whose coordinator lists the partition (Ongoing, or Prepare* with its marker not yet
    written) is not hanging: the coordinator will still write the marker.
    """
    out = []
    for c in candidates:
        tid = transactional_ids.get(c.producer_id)
        d = descriptions.get(tid) if tid is not None else None
        if d is None or not any(tp.topic == c.topic and tp.partition == c.partition for tp in d.topic_partitions):
            out.append(c)
    return out


def find_hanging(admin: Admin, args: argparse.Namespace) -> int:
    partitions = _partitions_to_search(admin, args)
    now_ms = int(time.time() * 1000)
    states: dict[Any, Sequence[Any]] = {}
    on = f" on broker {args.broker_id}" if args.broker_id is not None else ""
    for i in range(0, len(partitions), DESCRIBE_PRODUCERS_BATCH):
        batch = partitions[i:i + DESCRIBE_PRODUCERS_BATCH]
        result: dict[Any, Any] = admin.call(f"describe producers of {len(batch)} partitions{on}",
                                            lambda c, b=batch: c.describe_producers(b, broker_id=args.broker_id),
                                            subject=args.topic)
        states.update({tp: list(s.active_producers) for tp, s in result.items()})
    candidates = open_candidates(states, now_ms=now_ms, max_timeout_ms=args.max_transaction_timeout * 60_000)
    found: list[OpenTransaction] = []
    if candidates:
        pids = sorted({c.producer_id for c in candidates})
        by_broker: dict[int, list[Any]] = admin.call(
            "list transactions of the open transactions' producers",
            lambda c: c.list_transactions(producer_id_filters=pids))
        tids = {t.producer_id: t.transactional_id for listings in by_broker.values() for t in listings
                if t.producer_id in pids}
        descriptions: dict[str, Any] = {}
        for tid in sorted(set(tids.values())):
            try:
                descriptions[tid] = admin.call(f"describe transactional id '{tid}'",
                                               lambda c, t=tid: c.describe_transactions([t]), subject=tid).get(tid)
            except CliError as e:
                if e.code != kerrors.TransactionalIdNotFoundError.errno:
                    raise
                descriptions[tid] = None
        found = hanging(candidates, tids, descriptions)
    print_table(HANGING_HEADERS, [hanging_row(o, now_ms) for o in found])
    return 0


def hanging_row(o: OpenTransaction, now_ms: int) -> tuple[Any, ...]:
    return (o.topic, o.partition, o.producer_id, o.producer_epoch, o.coordinator_epoch if o.coordinator_epoch >= 0
            else -1, o.start_offset, o.last_timestamp, max(now_ms - o.last_timestamp, 0) // 60_000)


def _partitions_to_search(admin: Admin, args: argparse.Namespace) -> list[Any]:
    """``--topic`` (and ``--partition``), else every partition with a replica on ``--broker-id``."""
    if args.topic is not None and args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    what = f"describe topic '{args.topic}'" if args.topic is not None else "describe the topics"
    topics: list[dict[str, Any]] = admin.call(
        what, lambda c: c.describe_topics([args.topic] if args.topic is not None else None), subject=args.topic)
    out = []
    for t in topics:
        if t.get("error_code", 0):
            err = kerrors.for_code(t["error_code"])
            raise error_from(err(), args, f"describe topic '{t.get('name')}'", t.get("name"))
        for p in t.get("partitions") or ():
            if args.broker_id is None or args.broker_id in (p.get("replica_nodes") or ()):
                out.append(TopicPartition(t["name"], p["partition_index"]))
    return sorted(out, key=lambda tp: (tp.topic, tp.partition))


# -- abort -------------------------------------------------------------------------------------------


def abort(admin: Admin, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    where = f"{tp.topic}-{tp.partition}"
    started = ""
    if args.start_offset is not None:
        result: dict[Any, Any] = admin.call(f"describe producers of {where}",
                                            lambda c: c.describe_producers([tp]), subject=args.topic)
        state = result.get(tp)
        match = [p for p in (state.active_producers if state is not None else ())
                 if p.current_transaction_start_offset == args.start_offset]
        if not match:
            raise CliError(f"no open transaction starts at offset {args.start_offset} in {where}",
                           f"`odradek transactions describe-producers --topic {tp.topic} --partition {tp.partition}` "
                           "shows where open transactions start (CurrentTransactionStartOffset)")
        p = match[0]
        pid, epoch, coordinator_epoch = p.producer_id, p.producer_epoch, max(p.coordinator_epoch, 0)
        started = f" that started at offset {args.start_offset}"
    else:
        pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    spec = AbortTransactionSpec(tp, pid, epoch, coordinator_epoch)
    admin.call(f"abort the transaction of producer {pid} (epoch {epoch}) in {where}",
               lambda c: c.abort_transaction(spec), subject=args.topic)
    print(f"Aborted the transaction of producer {pid} (epoch {epoch}) in {where}{started}")
    return 0
