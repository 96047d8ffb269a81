"""The ``odradek`` command: one sub-command per verb, named as Kafka's tools name them."""

from __future__ import annotations

import argparse
import logging
import sys

from odradek.cli import (
    acls,
    cluster,
    configs,
    consume,
    dump_log,
    groups,
    leader_election,
    log_dirs,
    produce,
    reassign,
    serve,
    topics,
    transactions,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="odradek", description="Odradek: a Kafka-compatible event streaming platform")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.add_parser(sub)
    dump_log.add_parser(sub)
    topics.add_parser(sub)
    produce.add_parser(sub)
    consume.add_parser(sub)
    configs.add_parser(sub)
    groups.add_parser(sub)
    transactions.add_parser(sub)
    cluster.add_parser(sub)
    reassign.add_parser(sub)
    leader_election.add_parser(sub)
    log_dirs.add_parser(sub)
    acls.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
