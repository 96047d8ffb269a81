"""Constant time: append and lookup cost with 100 MB stored vs 10 GB stored; clean reopen time.

Run (from the repository root)::

    PYTHONPATH=. python -m bench.log_scale            # full: 100 MB vs 10 GB (~5 min, 10 GB of disk)
    PYTHONPATH=. python -m bench.log_scale --quick    # 100 MB vs 1 GB (~1 min)

One partition log, created through a ``LogManager`` with the default config (segment.bytes 1 GiB,
index.interval.bytes 4 KiB, background flush on roll, as the broker runs it), is filled with
16 KiB uncompressed v2 batches to 100 MB, measured, filled on to 10 GB (``--large-gb``), measured
again. Filling is untimed (its rate is printed for information). At each size:

1. **append latency**: ``Log.append`` of fresh 16 KiB bytearrays, each call timed; beside it the
   raw limit, ``os.write`` of the same buffers to a plain file in the same directory, also per
   call. ``--blocks`` (6) alternating raw/log block pairs of ``--appends``/6 calls each. Before
   every block (untimed) the log is flushed, ``os.sync()`` leaves nothing dirty and
   ``_common.prewarm`` provides backed memory (see there: this VM hands idle memory back to its
   host).
2. **random lookups**: ``Log.read(offset, 1)`` (min_one: the one batch holding the offset) at
   offsets drawn uniformly from the whole log, each timed; beside it the raw limit, ``os.pread`` of
   one 61-byte batch header at a uniformly random batch of the same files. Alternating blocks as
   above. The log is read through once first (untimed) so it is in the page cache -- warm-cache
   figures; ``fincore`` shows the share of the log resident.
3. **clean reopen**: ``LogManager.shutdown()`` (timed for information; it fsyncs what is dirty),
   then a new ``LogManager.startup()`` on the same directory (timed; the goal is < 1 s), then
   one ``Log.read`` at a random offset (timed). Measuring continues on the reopened log.

Throughput of a block = calls / summed call times; the figure is the median over blocks (a block
hit by a stall of this shared VM does not decide it; the pooled figure over all calls is printed
too). Ratios are 10 GB figure / 100 MB figure of throughput (appends/s, lookups/s); the goal is
>= 0.9.
Every loop is bounded in count and by ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    DEFAULT_TMP_ROOT,
    GB,
    MB,
    CpuWatch,
    KiB,
    MiB,
    bytearrays,
    distinct_batches,
    machine_facts,
    mbps,
    median,
    percentile,
    prewarm,
    print_facts,
    scratch_dir,
    settle,
    verdict,
    wait_for_idle,
)
from odradek.protocol.batch import HEADER_SIZE
from odradek.storage.log import Log
from odradek.storage.manager import LogManager

BATCH = 16 * KiB
GOAL_RATIO = 0.9
GOAL_REOPEN_S = 1.0
TOPIC = "scale"
CHECK_EVERY = 64


FILL_MAX_SECONDS = 1800.0


def fill(lg: Log, batches: list[bytes], target: int) -> tuple[int, float]:
    """Append until the log holds ``target`` bytes (untimed work, rate reported); gives up after
    ``FILL_MAX_SECONDS`` (the disk would be far slower than this machine's ~330 MB/s)."""
    t0 = time.perf_counter()
    start = lg.size
    while lg.size < target:
        if time.perf_counter() - t0 > FILL_MAX_SECONDS:
            raise SystemExit(f"filling the log took over {FILL_MAX_SECONDS:.0f} s; stopped at {lg.size} bytes")
        for b in bytearrays(batches, min(256 * MiB, max(BATCH, target - lg.size))):
            lg.append(b)
    return lg.size - start, time.perf_counter() - t0


def resident(files: list[str]) -> str:
    try:
        out = subprocess.run(
            ["fincore", "-b", "-n", "-r", "-o", "RES,SIZE", *files], capture_output=True, text=True, timeout=60
        ).stdout.split()
        res = sum(int(x) for x in out[0::2])
        size = sum(int(x) for x in out[1::2])
        return f"{res / size:.0%} of {size / GB:.2f} GB resident" if size else "?"
    except (OSError, ValueError, subprocess.SubprocessError):
        return "fincore unavailable"


Blocks = list[list[int]]  # per-call nanoseconds, one list per timed block


def time_appends(
    lg: Log, d: Path, batches: list[bytes], count: int, blocks: int, max_seconds: float
) -> tuple[Blocks, Blocks]:
    """Per-call ns of raw os.write and of Log.append, in ``blocks`` alternating pairs of blocks."""
    raw_ns: Blocks = []
    log_ns: Blocks = []
    ns = time.perf_counter_ns
    per_block = max(1, count // blocks)
    deadline = time.perf_counter() + max_seconds
    for _ in range(blocks):
        bufs = bytearrays(batches, per_block * BATCH)
        # raw
        path = d / "raw.bin"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        settle()
        prewarm(d, per_block * BATCH + 64 * MiB)
        write = os.write
        lat: list[int] = []
        for i in range(0, len(bufs), CHECK_EVERY):
            for b in bufs[i : i + CHECK_EVERY]:
                t = ns()
                write(fd, b)
                lat.append(ns() - t)
            if time.perf_counter() > deadline:
                break
        raw_ns.append(lat)
        os.close(fd)
        path.unlink()
        # log
        lg.flush()
        settle()
        prewarm(d, per_block * BATCH + 64 * MiB)
        append = lg.append
        lat = []
        for i in range(0, len(bufs), CHECK_EVERY):
            for b in bufs[i : i + CHECK_EVERY]:
                t = ns()
                append(b)
                lat.append(ns() - t)
            if time.perf_counter() > deadline:
                break
        log_ns.append(lat)
        if time.perf_counter() > deadline:
            break
    lg.flush()
    settle()
    return raw_ns, log_ns


def time_lookups(lg: Log, count: int, blocks: int, max_seconds: float, seed: int) -> tuple[Blocks, Blocks, str]:
    """Per-call ns of raw header preads and of Log.read at uniformly random offsets (warm cache),
    in ``blocks`` alternating pairs of blocks."""
    files = [str(s.log_path) for s in lg.segments]
    chunk = bytearray(8 * MiB)
    for f in files:  # read the whole log once: warm page cache
        fd = os.open(f, os.O_RDONLY)
        try:
            while os.readv(fd, [chunk]):
                pass
        finally:
            os.close(fd)
    res = resident(files)
    rng = random.Random(seed)
    lo, hi = lg.log_start_offset, lg.next_offset
    ns = time.perf_counter_ns
    log_ns: Blocks = []
    raw_ns: Blocks = []
    read = lg.read
    pread = os.pread
    per_block = max(1, count // blocks)
    deadline = time.perf_counter() + max_seconds
    fds = [os.open(f, os.O_RDONLY) for f in files]
    try:
        sizes = [os.fstat(fd).st_size // BATCH for fd in fds]
        for _ in range(blocks):
            offsets = [rng.randrange(lo, hi) for _ in range(per_block)]
            targets = [
                (fds[j], rng.randrange(sizes[j]) * BATCH)
                for j in rng.choices(range(len(fds)), weights=sizes, k=per_block)
            ]
            lat: list[int] = []
            for i in range(0, per_block, CHECK_EVERY):
                for off in offsets[i : i + CHECK_EVERY]:
                    t = ns()
                    region = read(off, 1)
                    lat.append(ns() - t)
                    if region is None or region.first_offset > off:
                        raise AssertionError(f"lookup of offset {off} returned {region}")
                if time.perf_counter() > deadline:
                    break
            log_ns.append(lat)
            lat = []
            for i in range(0, per_block, CHECK_EVERY):
                for fd, pos in targets[i : i + CHECK_EVERY]:
                    t = ns()
                    pread(fd, HEADER_SIZE, pos)
                    lat.append(ns() - t)
                if time.perf_counter() > deadline:
                    break
            raw_ns.append(lat)
            if time.perf_counter() > deadline:
                break
    finally:
        for fd in fds:
            os.close(fd)
    return raw_ns, log_ns, res


def reopen(mgr: LogManager, data: Path, seed: int) -> tuple[LogManager, Log, float, float, float]:
    before = mgr.get_log(TOPIC, 0)
    assert before is not None
    end, size = before.next_offset, before.size
    t0 = time.perf_counter()
    mgr.shutdown()
    t_shutdown = time.perf_counter() - t0
    mgr2 = LogManager([data])
    t0 = time.perf_counter()
    mgr2.startup()
    t_startup = time.perf_counter() - t0
    lg = mgr2.get_log(TOPIC, 0)
    if lg is None or lg.next_offset != end or lg.size != size:
        raise AssertionError("the reopened log differs from the one shut down")
    off = random.Random(seed).randrange(lg.log_start_offset, lg.next_offset)
    t0 = time.perf_counter()
    region = lg.read(off, 1)
    t_first = time.perf_counter() - t0
    if region is None:
        raise AssertionError("no batch after reopen")
    return mgr2, lg, t_shutdown, t_startup, t_first


def rate(ns_list: list[int]) -> float:
    """calls per second over the summed call times."""
    return len(ns_list) / (sum(ns_list) / 1e9) if ns_list else float("nan")


def block_rate(blocks: Blocks) -> float:
    """Median over blocks of each block's calls per second: one block hit by a stall of this
    shared VM does not decide the figure."""
    return median([rate(b) for b in blocks if b])


def pooled(blocks: Blocks) -> list[int]:
    return [x for b in blocks for x in b]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="large size 1 GB instead of 10 GB, fewer calls")
    ap.add_argument("--small-mb", type=int, default=100, help="small size, MB (default 100)")
    ap.add_argument("--large-gb", type=float, help="large size, GB (default 10, quick 1)")
    ap.add_argument("--appends", type=int, help="timed appends per size (default 6144, quick 3072)")
    ap.add_argument("--lookups", type=int, help="timed lookups per size (default 30000, quick 10000)")
    ap.add_argument("--blocks", type=int, default=6, help="alternating raw/log block pairs per phase")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="time bound of each timed phase")
    ap.add_argument("--wait-idle", type=float, help="wait up to this many s for an idle machine (default 600, quick 0)")
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT, help="scratch root (deleted after)")
    args = ap.parse_args()
    small = args.small_mb * MB
    large = int((args.large_gb or (1 if args.quick else 10)) * GB)
    n_app = args.appends or (3072 if args.quick else 6144)
    n_look = args.lookups or (10000 if args.quick else 30000)

    args.tmp.mkdir(parents=True, exist_ok=True)
    print_facts(machine_facts(args.tmp))
    wait = args.wait_idle if args.wait_idle is not None else (0 if args.quick else 600)
    if wait > 0:
        print("# " + wait_for_idle(wait), flush=True)
    watch = CpuWatch()
    batches = distinct_batches(BATCH)
    results: dict[str, dict[str, float | str]] = {}

    with scratch_dir(args.tmp, "log_scale", large + 2 * n_app * BATCH + GB) as d:
        data = d / "data"
        mgr = LogManager([data])
        mgr.startup()
        try:
            lg = mgr.create_log(TOPIC, 0)
            for label, target in (("small", small), ("large", large)):
                nbytes, secs = fill(lg, batches, target)
                lg.flush()
                settle()
                print(
                    f"# filled to {lg.size / GB:.2f} GB in {len(lg.segments)} segment(s): +{nbytes / GB:.2f} GB "
                    f"in {secs:.1f} s ({mbps(nbytes, secs):.0f} MB/s, includes background fsync on roll)",
                    flush=True,
                )
                stored = lg.size
                raw_lb, log_lb, res = time_lookups(lg, n_look, args.blocks, args.max_seconds, seed=1)
                raw_ab, log_ab = time_appends(lg, d, batches, n_app, args.blocks, args.max_seconds)
                raw_l, log_l, raw_a, log_a = pooled(raw_lb), pooled(log_lb), pooled(raw_ab), pooled(log_ab)
                mgr, lg, t_down, t_up, t_first = reopen(mgr, data, seed=2)
                results[label] = {
                    "stored": stored,
                    "segments": len(lg.segments),
                    "resident": res,
                    "app_raw_rate": block_rate(raw_ab),
                    "app_log_rate": block_rate(log_ab),
                    "app_raw_mean": rate(raw_a),
                    "app_log_mean": rate(log_a),
                    "app_raw_p50": percentile(raw_a, 50) / 1e3,
                    "app_log_p50": percentile(log_a, 50) / 1e3,
                    "app_raw_p99": percentile(raw_a, 99) / 1e3,
                    "app_log_p99": percentile(log_a, 99) / 1e3,
                    "n_app": len(log_a),
                    "look_raw_rate": block_rate(raw_lb),
                    "look_log_rate": block_rate(log_lb),
                    "look_raw_mean": rate(raw_l),
                    "look_log_mean": rate(log_l),
                    "look_raw_p50": percentile(raw_l, 50) / 1e3,
                    "look_log_p50": percentile(log_l, 50) / 1e3,
                    "look_raw_p99": percentile(raw_l, 99) / 1e3,
                    "look_log_p99": percentile(log_l, 99) / 1e3,
                    "n_look": len(log_l),
                    "shutdown": t_down,
                    "startup": t_up,
                    "first_read": t_first,
                }
                r = results[label]
                print(
                    f"# {label}: {stored / GB:.2f} GB stored, lookups on warm cache ({res}); "
                    f"appends {r['n_app']}, lookups {r['n_look']}; reopen {t_up * 1e3:.0f} ms",
                    flush=True,
                )
        finally:
            mgr.shutdown()

    s, g = results["small"], results["large"]
    sl, gl = f"{s['stored'] / MB:.0f} MB", f"{g['stored'] / GB:.1f} GB"
    print()
    cols = f"{'figure':<34} | {sl + ' stored':>14} | {gl + ' stored':>14} | {'ratio':>5} | goal"
    print(cols)
    print("-" * len(cols))

    def row(name: str, a: float, b: float, fmt: str, goal: str = "", ratio: float | None = None) -> None:
        rs = f"{ratio:>5.2f}" if ratio is not None else " " * 5
        print(f"{name:<34} | {a:>14{fmt}} | {b:>14{fmt}} | {rs} | {goal}")

    ra = g["app_log_rate"] / s["app_log_rate"]
    row(
        "append 16 KiB: log appends/s",
        s["app_log_rate"],
        g["app_log_rate"],
        ",.0f",
        f">= {GOAL_RATIO}: {verdict(ra, GOAL_RATIO)}",
        ra,
    )
    row(
        "  raw os.write calls/s (limit)",
        s["app_raw_rate"],
        g["app_raw_rate"],
        ",.0f",
        "",
        g["app_raw_rate"] / s["app_raw_rate"],
    )
    row(
        "  log appends/s, all calls pooled",
        s["app_log_mean"],
        g["app_log_mean"],
        ",.0f",
        "",
        g["app_log_mean"] / s["app_log_mean"],
    )
    row("  log p50 / p99 us", s["app_log_p50"], g["app_log_p50"], ".1f")
    row("", s["app_log_p99"], g["app_log_p99"], ".1f")
    row("  raw p50 / p99 us", s["app_raw_p50"], g["app_raw_p50"], ".1f")
    row("", s["app_raw_p99"], g["app_raw_p99"], ".1f")
    rl = g["look_log_rate"] / s["look_log_rate"]
    row(
        "random lookup: Log.read/s",
        s["look_log_rate"],
        g["look_log_rate"],
        ",.0f",
        f">= {GOAL_RATIO}: {verdict(rl, GOAL_RATIO)}",
        rl,
    )
    row(
        "  raw header pread/s (limit)",
        s["look_raw_rate"],
        g["look_raw_rate"],
        ",.0f",
        "",
        g["look_raw_rate"] / s["look_raw_rate"],
    )
    row(
        "  Log.read/s, all calls pooled",
        s["look_log_mean"],
        g["look_log_mean"],
        ",.0f",
        "",
        g["look_log_mean"] / s["look_log_mean"],
    )
    row("  log p50 / p99 us", s["look_log_p50"], g["look_log_p50"], ".1f")
    row("", s["look_log_p99"], g["look_log_p99"], ".1f")
    row("  raw p50 / p99 us", s["look_raw_p50"], g["look_raw_p50"], ".1f")
    row("", s["look_raw_p99"], g["look_raw_p99"], ".1f")
    row(
        "clean reopen: startup ms",
        s["startup"] * 1e3,
        g["startup"] * 1e3,
        ".1f",
        f"< {GOAL_REOPEN_S * 1e3:.0f} ms: {verdict(GOAL_REOPEN_S, g['startup'])}",
    )
    row("  shutdown ms (fsyncs, info)", s["shutdown"] * 1e3, g["shutdown"] * 1e3, ".1f")
    row("  first read after reopen us", s["first_read"] * 1e6, g["first_read"] * 1e6, ".1f")
    row("segments", s["segments"], g["segments"], ".0f")
    print()
    print(
        "ratio = large / small; throughput = calls / summed call time, median over blocks (pooled: all "
        "calls of all blocks); lookups on a warm page cache"
    )
    print(
        f"other CPU use during the run (other processes and kernel threads, incl. writeback): "
        f"{watch.other_share():.0%} of {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
