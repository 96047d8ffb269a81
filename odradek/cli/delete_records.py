"""``odradek delete-records``: delete the records of partitions below an offset, as ``kafka-delete-records.sh``.

The partitions and offsets come from Kafka's JSON file (``--offset-json-file``)::

    {"partitions": [{"topic": "orders", "partition": 0, "offset": 3}], "version": 1}

or, for one partition, from ``--topic T --partition P --offset O``. Offset ``-1`` means the high watermark
(every record). The records below the offset are gone: the partition's log start offset (its low watermark)
moves up to it, and a consumer reading from the beginning starts there. The output is kafka-delete-records'::

    Executing records delete operation
    Records delete operation completed:
    partition: orders-0<TAB>low_watermark: 3

Invariants:
- The file is checked before anything is sent: JSON with a ``partitions`` list of objects with a string
  ``topic``, a non-negative ``partition`` and an integer ``offset`` >= -1, each partition once; otherwise
  exit code 2 and nothing is deleted.
- One DeleteRecords request per leader (confluent-kafka's ``AdminClient.delete_records``); a partition's
  failure is printed on its line (``partition: t-0<TAB>error: ...``) and makes the exit code 1, the others
  are still reported.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from odradek.cli import _client
from odradek.cli._client import CliError

EXAMPLE = '{"partitions": [{"topic": "orders", "partition": 0, "offset": 3}], "version": 1}'


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "delete-records",
        help="delete the records of partitions below an offset (like kafka-delete-records.sh)",
        description="Delete every record below the given offset of each partition (-1: every record).",
        epilog="examples:\n"
        "  odradek delete-records --offset-json-file offsets.json\n"
        f"      with offsets.json: {EXAMPLE}\n"
        "  odradek delete-records --topic orders --partition 0 --offset 3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--offset-json-file",
        type=Path,
        metavar="FILE",
        help="JSON file of the partitions and offsets, as kafka-delete-records.sh takes it",
    )
    p.add_argument("--topic", help="the topic (instead of --offset-json-file)")
    p.add_argument("--partition", type=_client.non_negative_int, help="the partition of --topic")
    p.add_argument(
        "--offset", type=int, help="delete the records below this offset of --topic/--partition (-1: every record)"
    )
    _client.add_common_options(p)
    p.set_defaults(func=lambda args: _client.run_verb("delete-records", run, args))


def parse_offsets(doc: Any, source: str) -> list[TopicPartition]:
    """The partitions and offsets of a kafka-delete-records JSON document (``CliError``, exit code 2, if invalid)."""
    hint = f"the file looks like {EXAMPLE}"
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise CliError(f'{source} has no "partitions" list', hint, exit_code=2)
    out: list[TopicPartition] = []
    seen: set[tuple[str, int]] = set()
    twice: list[str] = []
    for i, entry in enumerate(doc["partitions"]):
        if not isinstance(entry, dict):
            raise CliError(f"{source}: partitions[{i}] is not an object", hint, exit_code=2)
        topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
        if not isinstance(topic, str) or not topic:
            raise CliError(f'{source}: partitions[{i}] has no "topic" name', hint, exit_code=2)
        if not _is_int(partition) or partition < 0:
            raise CliError(
                f'{source}: partitions[{i}] (topic {topic!r}) has no "partition" number >= 0', hint, exit_code=2
            )
        if not _is_int(offset) or offset < -1:
            raise CliError(f'{source}: partitions[{i}] ({topic}-{partition}) has no "offset" >= -1', hint, exit_code=2)
        if (topic, partition) in seen:
            twice.append(f"{topic}-{partition}")
        seen.add((topic, partition))
        out.append(TopicPartition(topic, partition, offset))
    if twice:
        raise CliError(f"{source} names a partition more than once: {', '.join(twice)}", exit_code=2)
    if not out:
        raise CliError(f"{source} names no partition", hint, exit_code=2)
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def requested(args: argparse.Namespace) -> list[TopicPartition]:
    simple = (args.topic, args.partition, args.offset)
    if args.offset_json_file is not None:
        if any(v is not None for v in simple):
            raise CliError("--offset-json-file cannot be combined with --topic/--partition/--offset", exit_code=2)
        path: Path = args.offset_json_file
        return parse_offsets(_client.read_json(path, f"the file looks like {EXAMPLE}"), str(path))
    if any(v is None for v in simple):
        raise CliError(
            "delete-records needs --offset-json-file, or --topic, --partition and --offset",
            "e.g. --topic orders --partition 0 --offset 3",
            exit_code=2,
        )
    if args.offset < -1:
        raise CliError(f"--offset {args.offset} is invalid: offsets are >= 0, or -1 for every record", exit_code=2)
    return [TopicPartition(args.topic, args.partition, args.offset)]


def run(args: argparse.Namespace) -> int:
    partitions = requested(args)
    admin = _client.make_client(AdminClient, _client.base_config(args))
    _client.check_reachable(admin, args)
    print("Executing records delete operation")
    futures = admin.delete_records(
        partitions, request_timeout=_client.timeout_s(args), operation_timeout=_client.timeout_s(args)
    )
    by_key = {(tp.topic, tp.partition): f for tp, f in futures.items()}
    lines: list[str] = []
    status = 0
    for tp in partitions:
        name = f"{tp.topic}-{tp.partition}"
        try:
            result = _client.wait(
                by_key[(tp.topic, tp.partition)], args, f"delete the records of {name}", subject=tp.topic
            )
        except CliError as e:
            lines.append(f"partition: {name}\terror: {e.message}")
            status = 1
            continue
        lines.append(f"partition: {name}\tlow_watermark: {result.low_watermark}")
    print("Records delete operation completed:")
    for line in lines:
        print(line)
    return status
