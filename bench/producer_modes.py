"""Produce throughput by producer mode (issue 6): plain beside idempotent, same broker build, same run.

    python -m bench.producer_modes               # 3 rounds x 2 modes x 2 sizes, ~1 GB each (~4 min)
    python -m bench.producer_modes --quick       # 1 round, ~100 MB each

Each run: a fresh ``odradek serve`` and topic, librdkafka's ``rdkafka_performance -P`` to partition 0
with acks=-1 (idempotence requires it; the plain runs use it too, so only idempotence differs), then
the broker stops and its data is removed. Modes alternate order from round to round. Beside them, raw
TCP into a file on this machine in the same run (``bench/_raw_net.py``), the limit any broker's
produce path meets. The figure is the median of the rounds; the goal in the issue is idempotent /
plain >= 0.9. Transactional produce joins this table once transactions are wired to the broker.
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
from bench.broker_throughput import TOPIC, Run, _drop, count_for, make_broker, phase_raw_tcp, produce_once

MODES = ("plain", "idempotent")
GOAL = 0.9


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
                    try:
                        b.start()
                        b.create_topic(TOPIC)
                        run = produce_once(tool, b, size, "-1", count_for(size, a.quick), a.max_seconds, scratch,
                                           idempotent=mode == "idempotent")
                    finally:
                        _drop(b)
                    results[(mode, size)].append(run)
                    print(f"#   round {r + 1}: {size} B {mode}: {run.rps:,.0f} rec/s {run.mbps:.0f} MB/s, broker "
                          f"{run.broker_cores:.2f} cores", flush=True)
    raw = median(raws)
    print(f"\n## Produce by mode (acks=-1, median of {rounds} round(s)); raw TCP->file {raw:.0f} MB/s\n")
    print("| size | plain rec/s (MB/s) | idempotent rec/s (MB/s) | idempotent / plain (goal >= 0.9) | "
          "idempotent MB/s / raw |")
    print("|---|---|---|---|---|")
    for size in sizes:
        plain = median([x.rps for x in results[("plain", size)]])
        idem = median([x.rps for x in results[("idempotent", size)]])
        pm = median([x.mbps for x in results[("plain", size)]])
        im = median([x.mbps for x in results[("idempotent", size)]])
        ratio = idem / plain if plain else float("nan")
        print(f"| {size} B | {plain:,.0f} ({pm:.0f}) | {idem:,.0f} ({im:.0f}) | **{ratio:.2f}** "
              f"({'met' if ratio >= GOAL else 'NOT met'}) | {im / raw:.2f} |")


if __name__ == "__main__":
    main()
