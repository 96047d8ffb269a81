"""Append throughput of ``Log.append`` against raw ``os.write`` of the same bytes, same run.

Run (from the repository root)::

    PYTHONPATH=. python -m bench.log_append            # full: 2 GiB per batch size, 3 rounds (~10 min)
    PYTHONPATH=. python -m bench.log_append --quick    # 256 MiB per size, 1 round (~20 s)
    PYTHONPATH=. python -m bench.log_append --profile 16384   # cProfile of one log run, 16 KiB batches

What is measured, for batch sizes 16 KiB, 64 KiB, 256 KiB and 1 MiB:

- 8 distinct uncompressed v2 batches of exactly that size are built once with ``build_batch``
  (1000-byte random values). Before timing, a list of fresh ``bytearray`` copies totalling the run
  size is prepared: that is what the broker hands the log after reading a produce request from its
  socket (``Log.append`` rewrites baseOffset in place and would copy anything but a bytearray).
- **log**: ``Log.append(buf)`` for every buffer, into a new ``Log`` with the default config
  (segment.bytes 1 GiB, so a 2 GiB run rolls once; no fsync, no background flush). Opening and
  closing the log are outside the timed region; validation (CRC-32C), offset assignment, indexing
  and the roll are inside it.
- **raw**: ``os.write(fd, buf)`` of the same buffers to a plain file in the same directory: this
  machine's limit for getting these bytes into the page cache from Python. The goal compares to it.
- **raw+crc**: ``crc32c(buf)`` then ``os.write`` -- the floor for any log that validates the
  CRC-32C of each produced batch as Kafka does (informational).

Fairness: each run is cut into chunks (256 MiB full, 128 MiB quick). The three kinds write the same
chunk back to back (order rotated from chunk to chunk) into their own file/log, kept open for the
whole run, so a comparison spans seconds, not minutes: other sessions' load on this shared 2-CPU VM
comes and goes. Before each timed chunk, outside the timed region, ``os.sync()`` leaves no dirty
page behind (no writeback throttling) and ``_common.prewarm`` frees freshly backed memory (this VM
returns idle free memory to its host; see the prewarm docstring). Files are deleted after each
run. No fsync inside any timed region. Every loop ends after its count or ``--max-seconds`` per
kind and run, whichever comes first.

Figures: MB/s = 10^6 bytes/s, the median over all timed chunks of all rounds; "overall" is total
bytes / total time. Ratio = median over chunks of (log MB/s / raw MB/s) on the same chunk, timed
back to back; the goal is >= 0.8.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crc32c import crc32c

from bench._common import (
    DEFAULT_TMP_ROOT,
    CpuWatch,
    GiB,
    KiB,
    MiB,
    bytearrays,
    distinct_batches,
    human,
    machine_facts,
    mbps,
    median,
    prewarm,
    print_facts,
    scratch_dir,
    settle,
    verdict,
    wait_for_idle,
)
from odradek.storage.config import LogConfig
from odradek.storage.log import Log

SIZES = (16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB)
KINDS = ("raw", "raw+crc", "log")
GOAL = 0.8
CHECK_EVERY = 64  # iterations between deadline checks (same in every loop)


Chunk = tuple[int, float, int]  # bytes written, seconds, calls


class Sink:
    """Where one kind writes: a plain file (raw, raw+crc) or a Log."""

    def __init__(self, kind: str, d: Path) -> None:
        self.kind = kind
        self.lg: Log | None = None
        self.fd = -1
        self.path = d / f"{kind.replace('+', '_')}.bin"
        self.logdir = d / "bench-0"
        if kind == "log":
            self.lg = Log.open(self.logdir, LogConfig())
        else:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def timed(self, chunk: list[bytearray], deadline: float, profile: cProfile.Profile | None = None) -> Chunk:
        written = calls = 0
        fd, write, with_crc = self.fd, os.write, self.kind == "raw+crc"
        if profile is not None:
            profile.enable()
        t0 = time.perf_counter()
        for i in range(0, len(chunk), CHECK_EVERY):
            part = chunk[i : i + CHECK_EVERY]
            if self.lg is not None:
                append = self.lg.append
                for b in part:
                    written += append(b).size
            else:
                for b in part:
                    if with_crc:
                        crc32c(b)
                    k = write(fd, b)
                    while k < len(b):  # short write: finish it (never seen on a regular file)
                        k += write(fd, memoryview(b)[k:])
                    written += k
            calls += len(part)
            if time.perf_counter() > deadline:
                break
        dt = time.perf_counter() - t0
        if profile is not None:
            profile.disable()
        return written, dt, calls

    def close(self, expected: int) -> None:
        try:
            if self.lg is not None and self.lg.size != expected:
                raise AssertionError(f"log holds {self.lg.size} bytes, {expected} were appended")
        finally:
            if self.lg is not None:
                self.lg.close()
                shutil.rmtree(self.logdir, ignore_errors=True)
            if self.fd >= 0:
                os.close(self.fd)
                self.path.unlink(missing_ok=True)


def run_round(
    kinds: tuple[str, ...],
    d: Path,
    bufs: list[bytearray],
    chunk_bytes: int,
    max_seconds: float,
    first: int = 0,
    profile: cProfile.Profile | None = None,
) -> dict[str, list[Chunk]]:
    """Write every buffer once per kind, chunk by chunk, the kinds back to back on each chunk (order
    rotated from chunk to chunk); returns the timed chunks of each kind, aligned by index."""
    per_chunk = max(1, chunk_bytes // len(bufs[0]))
    out: dict[str, list[Chunk]] = {k: [] for k in kinds}
    sinks: dict[str, Sink] = {}
    deadline = time.perf_counter() + max_seconds * len(kinds)
    try:
        for k in kinds:
            sinks[k] = Sink(k, d)
        for n, c in enumerate(range(0, len(bufs), per_chunk)):
            chunk = bufs[c : c + per_chunk]
            r = (first + n) % len(kinds)
            for k in kinds[r:] + kinds[:r]:
                settle()
                prewarm(d, len(chunk) * len(chunk[0]) + 64 * MiB)
                out[k].append(sinks[k].timed(chunk, deadline, profile))
            if time.perf_counter() > deadline:
                break
    finally:
        for k, sink in sinks.items():
            sink.close(sum(len(b) for b in bufs[: sum(ch[2] for ch in out[k])]))
        settle()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="256 MiB per size, 1 round")
    ap.add_argument("--total-mib", type=int, help="bytes per run, MiB (default 2048, quick 256)")
    ap.add_argument("--chunk-mib", type=int, help="timed chunk, MiB (default 256, quick 128)")
    ap.add_argument("--rounds", type=int, help="rounds per size, each runs every kind once (default 3, quick 1)")
    ap.add_argument("--sizes", help="comma-separated batch sizes in bytes (default 16K,64K,256K,1M)")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="time bound of one run's timed chunks")
    ap.add_argument("--wait-idle", type=float, help="wait up to this many s for an idle machine (default 600, quick 0)")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help="scratch root (deleted after)")
    ap.add_argument("--profile", type=int, metavar="SIZE", help="only cProfile one log run at this batch size")
    args = ap.parse_args()
    total = (args.total_mib or (256 if args.quick else 2048)) * MiB
    chunk = (args.chunk_mib or (128 if args.quick else 256)) * MiB
    rounds = args.rounds or (1 if args.quick else 3)
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else SIZES

    args.tmp.mkdir(parents=True, exist_ok=True)
    print_facts(machine_facts(args.tmp))
    wait = args.wait_idle if args.wait_idle is not None else (0 if args.quick else 600)
    if wait > 0:
        print("# " + wait_for_idle(wait), flush=True)
    watch = CpuWatch()

    with scratch_dir(args.tmp, "log_append", 3 * total + chunk + 256 * MiB) as d:
        if args.profile:
            bufs = bytearrays(distinct_batches(args.profile), total)
            prof = cProfile.Profile()
            chunks = run_round(("log",), d, bufs, chunk, args.max_seconds, profile=prof)["log"]
            nbytes, secs, calls = (sum(x) for x in zip(*chunks, strict=True))
            print(
                f"profiled log run: {human(args.profile)} batches, {nbytes / MiB:.0f} MiB in {secs:.2f} s "
                f"({mbps(nbytes, secs):.0f} MB/s under cProfile, {secs / calls * 1e6:.1f} us/append)"
            )
            pstats.Stats(prof).sort_stats("tottime").print_stats(30)
            return

        print(
            f"# {total / GiB:.2f} GiB per run in {chunk // MiB} MiB timed chunks, {rounds} round(s) per size, "
            f"segment.bytes {human(LogConfig().segment_bytes)}; MB/s = 10^6 B/s"
        )
        print()
        cols = (
            f"{'batch':>7} | {'raw MB/s':>8} {'+crc':>6} {'log':>6} | {'ratio':>5} {'goal 0.8':>8} "
            f"{'IQR':>11} | {'overall raw':>11} {'log':>5} {'ratio':>5} | {'us/call raw':>11} {'+crc':>5} "
            f"{'log':>5} | other CPU"
        )
        print(cols)
        print("-" * len(cols))
        for size in sizes:
            bufs = bytearrays(distinct_batches(size), total)
            size_watch = CpuWatch()
            chunks: dict[str, list[tuple[int, float, int]]] = {k: [] for k in KINDS}
            for r in range(rounds):
                for kind, got in run_round(KINDS, d, bufs, chunk, args.max_seconds, first=r).items():
                    chunks[kind] += got
            del bufs
            med = {k: median([mbps(b, s) for b, s, _ in v]) for k, v in chunks.items()}
            overall = {k: mbps(sum(b for b, _, _ in v), sum(s for _, s, _ in v)) for k, v in chunks.items()}
            us = {k: sum(s for _, s, _ in v) / sum(c for _, _, c in v) * 1e6 for k, v in chunks.items()}
            pairs = zip(chunks["log"], chunks["raw"], strict=True)
            paired = sorted((lb / ls) / (rb / rs) for (lb, ls, _), (rb, rs, _) in pairs)
            ratio = median(paired)
            iqr = f"{paired[len(paired) // 4]:.2f}-{paired[3 * len(paired) // 4]:.2f}"
            print(
                f"{human(size):>7} | {med['raw']:>8.0f} {med['raw+crc']:>6.0f} {med['log']:>6.0f} | "
                f"{ratio:>5.3f} {verdict(ratio, GOAL):>8} {iqr:>11} | {overall['raw']:>11.0f} {overall['log']:>5.0f} "
                f"{overall['log'] / overall['raw']:>5.2f} | {us['raw']:>11.1f} {us['raw+crc']:>5.1f} "
                f"{us['log']:>5.1f} | {size_watch.other_share():>8.0%}",
                flush=True,
            )
        print()
        print(
            "MB/s: median over every timed chunk of every round; overall: total bytes / total time; "
            "ratio: median over chunks of log/raw timed back to back on the same chunk (IQR: its quartiles)"
        )
        print(
            f"other CPU: share of the {os.cpu_count()} CPUs used by other processes and kernel threads "
            f"(incl. writeback of our own os.sync) while that size ran; whole run {watch.other_share():.0%}"
        )


if __name__ == "__main__":
    main()
