"""``odradek dump-log``: print what segment and index files hold, as ``kafka-dump-log.sh`` does.

Reads files directly (the broker need not run): segments (``.log``), offset and time indexes,
aborted-transaction indexes (``.txnindex``) and producer snapshots (``.snapshot``). Every batch is
CRC-checked; the dump stops at the first invalid batch and says where the valid log ends, which is
where recovery would cut it. With ``--print-data-log`` a transaction marker shows its outcome and
coordinator epoch instead of its raw key and value.

A large segment (16 MiB or more) shows a progress bar of the bytes dumped on stderr when stderr is a
terminal and stdout is not (``odradek dump-log --files big.log > dump.txt``); see ``_progress.py``.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from odradek.cli import _progress
from odradek.protocol import batch as rb
from odradek.protocol.compression import Compression
from odradek.protocol.errors import KafkaError
from odradek.protocol.records import ControlType, decode_records, parse_control_key, parse_end_txn_marker
from odradek.storage import txn_index
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.cleaner.batch_filter import has_delete_horizon
from odradek.storage.cleaner.cleaner import CLEANER_CHECKPOINT, CLEANER_METRICS
from odradek.storage.producer_state import read_snapshot

# A segment smaller than this is dumped without a progress bar (it is over at once).
PROGRESS_MIN_BYTES = 16 * 1024 * 1024


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "dump-log",
        help="print the batches of .log segments and the entries of index and snapshot files",
        description="Print the contents of segment (.log), offset index (.index), time index (.timeindex), "
        "aborted-transaction index (.txnindex) and producer snapshot (.snapshot) files, checking every "
        "batch's CRC; also the log cleaner's progress (cleaner-offset-checkpoint) and its metrics "
        "(log-cleaner-metrics, in the first data directory).",
    )
    p.add_argument("--files", nargs="+", required=True, type=Path, help="files to dump")
    p.add_argument("--print-data-log", action="store_true", help="also print each record's key and value")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    status = 0
    for path in args.files:
        print(f"Dumping {path}", file=out)
        if not path.is_file():
            print(f"error: {path} is not a file", file=sys.stderr)
            status = 1
        elif path.name == CLEANER_CHECKPOINT:
            status |= dump_cleaner_checkpoint(path, out)
        elif path.name == CLEANER_METRICS:
            print(path.read_text(), end="", file=out)
        elif path.suffix == ".log":
            status |= dump_segment(path, args.print_data_log, out)
        elif path.suffix == ".index":
            dump_index(path, ">II", "offset: {base_plus_a} position: {b}", out)
        elif path.suffix == ".timeindex":
            dump_index(path, ">qI", "timestamp: {a} offset: {base_plus_b}", out)
        elif path.suffix == txn_index.TXN_INDEX_SUFFIX:
            status |= dump_txn_index(path, out)
        elif path.suffix == ".snapshot":
            status |= dump_snapshot(path, out)
        else:
            print(f"error: {path}: not a .log, .index, .timeindex, .txnindex or .snapshot file, nor a "
                  f"{CLEANER_CHECKPOINT} or {CLEANER_METRICS} file", file=sys.stderr)
            status = 1
    return status


def dump_txn_index(path: Path, out: TextIO) -> int:
    """One line per aborted transaction; a torn last entry is reported (the broker rebuilds such a file)."""
    data = path.read_bytes()
    whole = len(data) - len(data) % txn_index.ENTRY_SIZE
    for version, pid, first, last, lso in txn_index.ENTRY.iter_unpack(data[:whole]):
        print(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
              f"lastStableOffset: {lso}", file=out)
    if whole != len(data):
        print(f"torn entry: the last {len(data) - whole} bytes are not a whole {txn_index.ENTRY_SIZE}-byte entry",
              file=out)
        return 1
    return 0


def dump_snapshot(path: Path, out: TextIO) -> int:
    """One line per producer: epoch, transaction state and its last batch."""
    try:
        entries = read_snapshot(path)
    except ValueError as e:
        print(f"unreadable snapshot: {e} (the broker skips it and reads the log instead)", file=out)
        return 1
    for e in entries:
        txn_first = e.current_txn_first_offset if e.current_txn_first_offset >= 0 else "None"
        print(f"producerId: {e.producer_id} producerEpoch: {e.epoch} coordinatorEpoch: {e.coordinator_epoch} "
              f"currentTxnFirstOffset: {txn_first} lastTimestamp: {e.timestamp} firstSequence: {e.first_sequence} "
              f"lastSequence: {e.last_sequence} lastOffset: {e.last_offset} offsetDelta: {e.offset_delta}",
              file=out)
    return 0


def dump_index(path: Path, fmt: str, template: str, out: TextIO) -> None:
    """Print each entry; the relative offset is shown absolute (the file name is the base offset)."""
    entry = struct.Struct(fmt)
    base = int(path.stem)
    data = path.read_bytes()
    for pos in range(0, len(data) - entry.size + 1, entry.size):
        a, b = entry.unpack_from(data, pos)
        if a == 0 and b == 0 and pos:
            break  # the preallocated, unused tail of an active segment's index
        print(template.format(a=a, b=b, base_plus_a=base + a, base_plus_b=base + b), file=out)


def dump_cleaner_checkpoint(path: Path, out: TextIO) -> int:
    """Where the cleaner's next pass starts in each compacted partition."""
    try:
        entries = OffsetCheckpointFile(path).read()
    except KafkaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for (topic, partition), offset in sorted(entries.items()):
        print(f"{topic}-{partition} cleaned up to offset {offset}", file=out)
    return 0


def dump_segment(path: Path, print_data: bool, out: TextIO) -> int:
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        with _progress.bar(total=size, desc=path.name, unit="B", unit_scale=True, min_total=PROGRESS_MIN_BYTES,
                           beside_output=True) as bar:
            return _dump_batches(fd, size, print_data, out, bar.update)


def _dump_batches(fd: int, size: int, print_data: bool, out: TextIO, advanced: Callable[[int], object]) -> int:
    pos = 0
    while pos < size:
        prefix = os.pread(fd, rb.LOG_OVERHEAD, pos)
        if len(prefix) < rb.LOG_OVERHEAD:
            break
        _, length = rb.read_prefix(prefix)
        data = os.pread(fd, max(length + rb.LOG_OVERHEAD, 0), pos)
        try:
            h = rb.check_batch(data)
        except KafkaError as e:
            print(f"invalid batch at position {pos}: {e}", file=out)
            print(f"the valid log ends at position {pos} of {size} bytes", file=out)
            return 1
        ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
        print(
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
            f"deleteHorizonMs: {h.base_timestamp if has_delete_horizon(h) else 'OptionalLong.empty'} "
            f"position: {pos} {ts_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {Compression(h.compression).name.lower()} crc: {h.crc} isvalid: true",
            file=out,
        )
        if print_data:
            for r in decode_records(data):
                if h.is_control:
                    print(f"| offset: {r.offset} {ts_type}: {r.timestamp} {describe_control(r.key, r.value)}",
                          file=out)
                    continue
                key = r.key.decode("utf-8", "replace") if r.key is not None else "null"
                value = r.value.decode("utf-8", "replace") if r.value is not None else "null"
                headers = ",".join(f"{k}:{(v or b'').decode('utf-8', 'replace')}" for k, v in r.headers)
                print(
                    f"| offset: {r.offset} {ts_type}: {r.timestamp} keySize: {len(r.key or b'')} "
                    f"valueSize: {len(r.value or b'')} headerKeys: [{headers}] key: {key} payload: {value}",
                    file=out,
                )
        advanced(h.size)
        pos += h.size
    return 0


def describe_control(key: bytes | None, value: bytes | None) -> str:
    """What a control record says: a transaction marker's outcome and coordinator epoch, or its type."""
    try:
        kind = parse_control_key(key).type
        if kind in (ControlType.COMMIT, ControlType.ABORT):
            return f"endTxnMarker: {kind.name} coordinatorEpoch: {parse_end_txn_marker(value)}"
        return f"controlType: {kind.name}"
    except KafkaError as e:
        return f"invalid control record: {e}"
