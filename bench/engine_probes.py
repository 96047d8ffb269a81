"""Probes behind the findings in docs/performance.md: small experiments, not goals.

Run (from the repository root)::

    PYTHONPATH=. python -m bench.engine_probes lean-append   # Log.append vs a lean Python append vs os.write
    PYTHONPATH=. python -m bench.engine_probes crc           # CRC-32C of cold vs cached batches, with os.write
    PYTHONPATH=. python -m bench.engine_probes lookup        # Log.read lookups vs a ceiling-entry translate
    PYTHONPATH=. python -m bench.engine_probes page-reporting  # this VM's cost of touching idle memory
    PYTHONPATH=. python -m bench.engine_probes all --quick   # everything, small sizes

- **lean-append**: for 16 KiB and 64 KiB batches, per-call time of ``os.write`` (raw limit), of a
  minimal pure-Python append of one batch (header unpack, CRC-32C, checks, baseOffset stamp, one
  ``pwrite``, one mmap'd index entry) and of ``Log.append`` on the same fresh bytearrays; best of
  3, each after ``os.sync()`` + ``prewarm``. It bounds what trimming Python can win.
- **crc**: ``crc32c`` of 1 GiB of batches (cold: each buffer touched last long ago) vs one cached
  buffer, and ``os.write`` with and without a CRC pass first.
- **lookup**: a log of 100 MB and one of 10 GB (1 GB with --quick) of 16 KiB batches; 30,000
  uniformly random ``Log.read(offset, 1)`` against an emulated translate that takes the index
  entry *after* the floor entry and preads only the 61-byte header (falling back to the scan),
  plus raw ``pread`` of 61 and 4096 bytes at random batches. The emulation reads ``LogSegment``
  and ``OffsetIndex`` internals (``index._search``, ``log._bases``): it is a probe of a proposed
  change, and may need updating when the engine changes.
- **page-reporting**: writes 8 files of 512 MiB (256 MiB with --quick) into fresh memory, deletes
  them and writes them again at once, then again after 10 s idle: MB/s of each file.

Every loop is bounded in count; each probe checks free space and deletes its files.
"""

from __future__ import annotations

import argparse
import bisect
import mmap
import os
import random
import shutil
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crc32c import crc32c

from bench._common import (
    DEFAULT_TMP_ROOT,
    GB,
    MB,
    CpuWatch,
    GiB,
    KiB,
    MiB,
    bytearrays,
    distinct_batches,
    machine_facts,
    prewarm,
    print_facts,
    scratch_dir,
    settle,
)
from odradek.protocol import batch as rb
from odradek.storage.config import LogConfig
from odradek.storage.log import Log

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_ENTRY = struct.Struct(">II")


class LeanLog:
    """The least Python work an append of one v2 batch needs: the floor for trimming Log.append."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        index_fd = os.open(str(path) + ".index", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(index_fd, 10 * MiB)
        self.index = mmap.mmap(index_fd, 10 * MiB)
        os.close(index_fd)
        self.path = path
        self.pos = self.next_offset = self.entries = 0

    def append(self, b: bytearray) -> tuple[int, int]:
        (_, length, _, magic, crc, attrs, lod, _, _, _, _, _, count) = _HEADER.unpack_from(b, 0)
        if magic != 2 or length + 12 != len(b) or crc32c(memoryview(b)[21:]) != crc or count != lod + 1 or attrs & 0x20:
            raise ValueError("invalid batch")
        first = self.next_offset
        _I64.pack_into(b, 0, first)
        os.pwrite(self.fd, b, self.pos)
        _ENTRY.pack_into(self.index, self.entries * 8, lod, self.pos)
        self.entries += 1
        self.pos += len(b)
        self.next_offset = first + lod + 1
        return first, first + lod

    def close(self) -> None:
        self.index.close()
        os.close(self.fd)
        self.path.unlink()
        Path(str(self.path) + ".index").unlink()


def _per_call(d: Path, bufs: list[bytearray], fn: Callable[[bytearray], object]) -> float:
    settle()
    prewarm(d, len(bufs) * len(bufs[0]) + 64 * MiB)
    t = time.perf_counter()
    for b in bufs:
        fn(b)
    return (time.perf_counter() - t) / len(bufs) * 1e6


def lean_append(d: Path, quick: bool) -> None:
    print("\n## lean-append: us per call, best of 3 (ratio to raw)")
    total = 64 * MiB if quick else 256 * MiB
    for size in (16 * KiB, 64 * KiB):
        bufs = bytearrays(distinct_batches(size), total)
        best = {"raw os.write": 1e9, "lean Python append": 1e9, "Log.append": 1e9}
        for _ in range(3):
            fd = os.open(d / "raw", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            best["raw os.write"] = min(best["raw os.write"], _per_call(d, bufs, lambda b, fd=fd: os.write(fd, b)))
            os.close(fd)
            (d / "raw").unlink()
            lean = LeanLog(d / "lean")
            best["lean Python append"] = min(best["lean Python append"], _per_call(d, bufs, lean.append))
            lean.close()
            lg = Log.open(d / "probe-0", LogConfig())
            best["Log.append"] = min(best["Log.append"], _per_call(d, bufs, lg.append))
            lg.close()
            shutil.rmtree(d / "probe-0")
        raw = best["raw os.write"]
        print(
            f"{size // KiB:>4} KiB: " + " | ".join(f"{k} {v:.2f} us ({raw / v:.2f})" for k, v in best.items()),
            flush=True,
        )


def crc(d: Path, quick: bool) -> None:
    print("\n## crc: us per batch")
    total = 256 * MiB if quick else 1 * GiB
    for size in (16 * KiB, 1 * MiB):
        bufs = bytearrays(distinct_batches(size), total)
        hot = bytearray(bufs[0])
        n = max(100, (64 * MiB) // size)
        t = time.perf_counter()
        for _ in range(n):
            crc32c(memoryview(hot)[21:])
        hot_us = (time.perf_counter() - t) / n * 1e6
        cold_us = _per_call(d, bufs, lambda b: crc32c(memoryview(b)[21:]))
        fd = os.open(d / "raw", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        w = min(_per_call(d, bufs, lambda b, fd=fd: os.write(fd, b)) for _ in range(2))
        cw = min(_per_call(d, bufs, lambda b, fd=fd: (crc32c(memoryview(b)[21:]), os.write(fd, b))) for _ in range(2))
        os.close(fd)
        (d / "raw").unlink()
        print(
            f"{size // KiB:>5} KiB: CRC cold {cold_us:.1f} us, CRC cached {hot_us:.1f} us, "
            f"os.write {w:.1f} us, CRC then os.write {cw:.1f} us (+{cw - w:.1f})",
            flush=True,
        )


def lookup(d: Path, quick: bool) -> None:
    print("\n## lookup: us per random lookup, best of 3 passes of 30,000")
    batch = 16 * KiB
    batches = distinct_batches(batch)

    def alt_translate(lg: Log, target: int) -> tuple[int, rb.BatchHeader] | None:
        seg = lg.segments[bisect.bisect_right(lg._bases, target) - 1]
        idx = seg.index
        n = idx._search(target - seg.base_offset, 0)
        if n + 1 < idx.entries:
            _, pos = idx.entry(n + 1)
            header = rb.parse_header(os.pread(seg.fd, rb.HEADER_SIZE, pos))
            if header.base_offset <= target:
                return pos, header
        return seg.translate_offset(target)

    def best(fn: Callable[[object], object], items: list) -> float:
        out = 1e9
        for _ in range(3):
            t = time.perf_counter()
            for x in items:
                fn(x)
            out = min(out, (time.perf_counter() - t) / len(items) * 1e6)
        return out

    for label, target in (("100 MB", 100 * MB), ("1 GB" if quick else "10 GB", (1 if quick else 10) * GB)):
        lg = Log.open(d / "lookup-0", LogConfig())
        try:
            t0 = time.perf_counter()
            while lg.size < target:
                if time.perf_counter() - t0 > 1800:
                    raise SystemExit(f"filling the log took over 1800 s; stopped at {lg.size} bytes")
                for b in bytearrays(batches, min(256 * MiB, target - lg.size + batch)):
                    lg.append(b)
            lg.flush()
            settle()
            rng = random.Random(1)
            offsets = [rng.randrange(lg.log_start_offset, lg.next_offset) for _ in range(30_000)]
            for off in offsets[:500]:
                found = alt_translate(lg, off)
                region = lg.read(off, 1)
                if found is None or region is None or found[0] != region.position:
                    raise AssertionError(f"emulated translate disagrees with Log.read at offset {off}")
            segs = lg.segments
            sizes = [s.size // batch for s in segs]
            targets = [
                (segs[j].fd, rng.randrange(sizes[j]) * batch)
                for j in rng.choices(range(len(segs)), weights=sizes, k=30_000)
            ]
            print(
                f"{label:>6} stored ({len(segs)} segments): "
                f"Log.read {best(lambda o, lg=lg: lg.read(o, 1), offsets):.2f} | "
                f"ceiling-entry translate {best(lambda o, lg=lg: alt_translate(lg, o), offsets):.2f} | "
                f"pread 61 B {best(lambda t: os.pread(t[0], 61, t[1]), targets):.2f} | "
                f"pread 4 KiB {best(lambda t: os.pread(t[0], 4096, t[1]), targets):.2f}",
                flush=True,
            )
        finally:
            lg.close()
            shutil.rmtree(d / "lookup-0", ignore_errors=True)


def page_reporting(d: Path, quick: bool) -> None:
    print("\n## page-reporting: MB/s of each file written with os.write, 1 MiB at a time")
    n_files, per_file = 8, (256 if quick else 512)
    buf = bytearray(os.urandom(MiB))

    def write_all() -> list[int]:
        rates = []
        for i in range(n_files):
            fd = os.open(d / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            t = time.perf_counter()
            for _ in range(per_file):
                os.write(fd, buf)
            rates.append(round(per_file * MiB / (time.perf_counter() - t) / MB))
            os.close(fd)
        settle()
        return rates

    def delete_all() -> None:
        for i in range(n_files):
            (d / f"f{i}").unlink(missing_ok=True)

    try:
        settle()
        print("fresh memory:            ", write_all(), flush=True)
        delete_all()
        print("rewritten at once:       ", write_all(), flush=True)
        delete_all()
        time.sleep(10)
        print("rewritten after 10 s idle:", write_all(), flush=True)
    finally:
        delete_all()


PROBES = {"lean-append": lean_append, "crc": crc, "lookup": lookup, "page-reporting": page_reporting}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("probe", choices=[*PROBES, "all"])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help="scratch root (deleted after)")
    args = ap.parse_args()
    args.tmp.mkdir(parents=True, exist_ok=True)
    print_facts(machine_facts(args.tmp))
    watch = CpuWatch()
    need = (1 if args.quick else 10) * GB + GB if args.probe in ("lookup", "all") else 5 * GB
    with scratch_dir(args.tmp, "engine_probes", need) as d:
        for name, probe in PROBES.items():
            if args.probe in (name, "all"):
                probe(d, args.quick)
    print(f"\nother CPU use during the run: {watch.other_share():.0%} of {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
