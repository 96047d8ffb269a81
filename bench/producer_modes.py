"""Produce throughput by producer mode (issue 6): plain, idempotent and transactional, same run.

    python -m bench.producer_modes               # 3 rounds x 3 modes x 2 sizes, ~1 GB each (~6 min)
    python -m bench.producer_modes --quick       # 1 round, ~100 MB each

Each run: a fresh ``odradek serve`` and topic, librdkafka's ``rdkafka_performance -P`` to partition 0
with acks=-1 (idempotence requires it; the plain runs use it too, so only the mode differs), then the
broker stops and its data is removed. The transactional producer commits a transaction every 100 ms
(the issue's setting; ``bench/_kafka.py`` adds transactions to the tool). After the transactional run
the same data is consumed from the start with ``isolation.level=read_committed`` and
``read_uncommitted`` (order alternating by round). Modes alternate order from round to round. Beside
them, raw TCP into a file in the same run (``bench/_raw_net.py``), the limit any broker's produce path
meets. Figures are medians of the rounds; the issue's goals: idempotent / plain >= 0.9,
transactional / plain >= 0.7.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import DEFAULT_TMP_ROOT, GiB, machine_facts, median, print_facts, scratch_dir, wait_for_idle
from bench._kafka import build_rdkafka_performance
from bench.broker_throughput import (
    TOPIC,
    Run,
    _drop,
    consume_once,
    count_for,
    make_broker,
    phase_raw_tcp,
    produce_once,
)

MODES = ("plain", "idempotent", "transactional")
GOALS = {"idempotent": 0.9, "transactional": 0.7}
TRANSACTION_MS = 100
ISOLATIONS = ("read_committed", "read_uncommitted")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--tmp", type=Path, default=DEFAULT_TMP_ROOT)
    a = ap.parse_args()
    rounds = a.rounds or (1 if a.quick else 3)
    sizes = tuple(int(s) for s in a.sizes.split(","))
    tool = build_rdkafka_performance()
    a.tmp.mkdir(parents=True, exist_ok=True)
    facts = machine_facts(a.tmp)
    facts["librdkafka"] = tool.librdkafka
    print_facts(facts)
    if not a.quick:
        print("# " + wait_for_idle(300), flush=True)
    results: dict[tuple[str, int], list[Run]] = collections.defaultdict(list)
    consumed: dict[tuple[str, int], list[Run]] = collections.defaultdict(list)
    raws: list[float] = []
    n = 0
    with scratch_dir(a.tmp, "producer_modes", 4 * GiB) as scratch:
        for r in range(rounds):
            raws.append(phase_raw_tcp(scratch, (256 if a.quick else 1024) * 1024 * 1024, a.max_seconds))
            print(f"#   round {r + 1}: raw tcp->file {raws[-1]:.0f} MB/s", flush=True)
            order = MODES if r % 2 == 0 else MODES[::-1]
            for size in sizes:
                for mode in order:
                    n += 1
                    b = make_broker("odradek", scratch, None, n)
                    count = count_for(size, a.quick)
                    try:
                        b.start()
                        b.create_topic(TOPIC)
                        run = produce_once(tool, b, size, "-1", count, a.max_seconds, scratch,
                                           idempotent=mode == "idempotent",
                                           transaction_ms=TRANSACTION_MS if mode == "transactional" else 0,
                                           warmup=True)
                        if mode == "transactional":
                            for iso in ISOLATIONS if r % 2 == 0 else ISOLATIONS[::-1]:
                                c = consume_once(tool, b, count, a.max_seconds, isolation=iso)
                                consumed[(iso, size)].append(c)
                                print(f"#   round {r + 1}: {size} B consume {iso}: {c.rps:,.0f} rec/s "
                                      f"{c.mbps:.0f} MB/s", flush=True)
                    finally:
                        _drop(b)
                    results[(mode, size)].append(run)
                    print(f"#   round {r + 1}: {size} B {mode}: {run.rps:,.0f} rec/s {run.mbps:.0f} MB/s, broker "
                          f"{run.broker_cores:.2f} cores", flush=True)
    raw = median(raws)
    print(f"\n## Produce by mode (acks=-1, median of {rounds} round(s)); raw TCP->file {raw:.0f} MB/s\n")
    print("| size | plain rec/s (MB/s) | idempotent rec/s (MB/s) | idempotent / plain (goal >= 0.9) | "
          f"transactional ({TRANSACTION_MS} ms) rec/s (MB/s) | transactional / plain (goal >= 0.7) | "
          "transactional MB/s / raw |")
    print("|---|---|---|---|---|---|---|")
    for size in sizes:
        rps = {m: median([x.rps for x in results[(m, size)]]) for m in MODES}
        mb = {m: median([x.mbps for x in results[(m, size)]]) for m in MODES}
        cells = [f"{size} B", f"{rps['plain']:,.0f} ({mb['plain']:.0f})"]
        for m in ("idempotent", "transactional"):
            ratio = rps[m] / rps["plain"] if rps["plain"] else float("nan")
            cells += [f"{rps[m]:,.0f} ({mb[m]:.0f})",
                      f"**{ratio:.2f}** ({'met' if ratio >= GOALS[m] else 'NOT met'})"]
        cells.append(f"{mb['transactional'] / raw:.2f}")
        print("| " + " | ".join(cells) + " |")
    print("\n## Consuming the transactional data (median rec/s (MB/s))\n")
    print("| size | read_committed | read_uncommitted | committed / uncommitted |")
    print("|---|---|---|---|")
    for size in sizes:
        rc = median([x.rps for x in consumed[("read_committed", size)]])
        ru = median([x.rps for x in consumed[("read_uncommitted", size)]])
        rcm = median([x.mbps for x in consumed[("read_committed", size)]])
        rum = median([x.mbps for x in consumed[("read_uncommitted", size)]])
        print(f"| {size} B | {rc:,.0f} ({rcm:.0f}) | {ru:,.0f} ({rum:.0f}) | {rc / ru if ru else float('nan'):.2f} |")


if __name__ == "__main__":
    main()
