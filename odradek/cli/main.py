"""The ``odradek`` command: one sub-command per verb, named as Kafka's tools name them.

Invariants:
- ``odradek --version`` prints ``odradek <version>`` (the installed distribution's version) and exits 0.
- A reader that closes stdout early (``odradek configs describe ... | head -1``) ends the command quietly with
  exit code 141 (128 + SIGPIPE, what a shell reports for a tool killed by SIGPIPE): no traceback, no error
  line. This is the recipe of Python's ``signal`` documentation: the rest of the output is sent to
  ``/dev/null`` so the interpreter's final flush cannot fail again.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib import metadata

from odradek.cli import (
    acls,
    cluster,
    configs,
    consume,
    delete_records,
    dump_log,
    get_offsets,
    groups,
    leader_election,
    log_dirs,
    perf,
    produce,
    reassign,
    serve,
    topics,
    transactions,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="odradek", description="Odradek: a Kafka-compatible event streaming platform")
    parser.add_argument("--version", action="version", version=f"odradek {version()}")
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
    get_offsets.add_parser(sub)
    delete_records.add_parser(sub)
    perf.add_parser(sub)
    return parser


def version() -> str:
    """The installed odradek's version ("unknown" when run from a tree that was never installed)."""
    try:
        return metadata.version("odradek")
    except metadata.PackageNotFoundError:
        return "unknown"


SIGPIPE_EXIT = 141


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here rather than in the interpreter's final flush
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return SIGPIPE_EXIT


if __name__ == "__main__":
    sys.exit(main())
