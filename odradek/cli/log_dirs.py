"""``odradek log-dirs --describe``, as ``kafka-log-dirs.sh``: each broker's log directories with the partitions
they hold (size, offset lag), as JSON, through kafka-python's ``KafkaAdminClient`` (DescribeLogDirs, api 35;
confluent-kafka's AdminClient has none).

Output, as Kafka's tool prints it (plus each directory's total and usable bytes)::

    Querying brokers for log directories information
    Received log directory information from brokers 1,2,3
    {"brokers":[{"broker":1,"logDirs":[{"logDir":"/data/1","error":null,"totalBytes":..,"usableBytes":..,
      "partitions":[{"partition":"orders-0","size":123,"offsetLag":0,"isFuture":false}]}]}],"version":1}

Usage::

    odradek log-dirs --describe
    odradek log-dirs --describe --broker-list 1,2 --topic-list orders,payments
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kafka.errors import for_code

from odradek.cli import _client, _kafka_python
from odradek.cli._client import CliError
from odradek.cli._kafka_python import Admin


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("log-dirs", help="describe the brokers' log directories (like kafka-log-dirs.sh)",
                       description="Describe each broker's log directories and the partitions in them.")
    p.add_argument("--describe", action="store_true", required=True, help="describe the log directories")
    p.add_argument("--broker-list", metavar="IDS", help="only these brokers, e.g. 1,2 (default: all)")
    p.add_argument("--topic-list", metavar="TOPICS", help="only these topics' partitions, e.g. a,b (default: all)")
    _client.add_common_options(p)
    p.set_defaults(func=lambda args: _client.run_verb("log-dirs", run, args))


def run(args: argparse.Namespace) -> int:
    try:
        brokers = [int(x) for x in _client.comma_words([args.broker_list])] if args.broker_list else None
    except ValueError:
        raise CliError(f"--broker-list {args.broker_list!r} must be broker ids separated by commas",
                       exit_code=2) from None
    topics = _client.comma_words([args.topic_list]) if args.topic_list else None
    _kafka_python.quiet_kafka_python()
    admin = Admin(args, "log-dirs")
    try:
        print("Querying brokers for log directories information")
        described: list[dict[str, Any]] = admin.call("describe log directories", lambda c: c.describe_log_dirs(
            topic_partitions=topics, brokers=brokers))
    finally:
        admin.close()
    print("Received log directory information from brokers "
          + ",".join(str(b["broker"]) for b in sorted(described, key=lambda b: b["broker"])))
    print(json.dumps(to_kafka_json(described), separators=(",", ":")))
    return 0


def to_kafka_json(described: list[dict[str, Any]]) -> dict[str, Any]:
    """kafka-python's answer in the JSON shape kafka-log-dirs.sh prints."""
    out = []
    for b in sorted(described, key=lambda b: b["broker"]):
        dirs = []
        for d in b["log_dirs"]:
            code = int(d["error_code"])
            dirs.append({
                "logDir": d["log_dir"], "error": None if code == 0 else for_code(code).__name__,
                "totalBytes": d.get("total_bytes", -1), "usableBytes": d.get("usable_bytes", -1),
                "partitions": [{"partition": f"{t['name']}-{p['partition_index']}", "size": p["partition_size"],
                                "offsetLag": p["offset_lag"], "isFuture": p["is_future_key"]}
                               for t in d["topics"] for p in t["partitions"]]})
        out.append({"broker": b["broker"], "logDirs": dirs})
    return {"brokers": out, "version": 1}
