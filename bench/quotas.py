"""Client quotas: what they cost when not exceeded, and how closely they hold a client to its quota.

Run (from the repository root)::

    python -m bench.quotas            # full (~8 min once the machine is free)
    python -m bench.quotas --quick    # smoke test (~3 min)

What is measured:

- **step**: the quota step's own cost per request, in process (``phase_step``): exact where the end-to-end runs
  below are at the mercy of a shared machine's noise.
- **overhead**: produce (1 KiB records, acks=1, ``rdkafka_performance`` as ``bench.broker_throughput``) and
  consume (the records produced, from the beginning, 5 runs' worth at a time: a single run's 1 GB is read in
  under half a second, too short to judge) against one broker without quotas and one where every client-id
  has quotas it never reaches (``<default>`` client-id: producer_byte_rate and consumer_byte_rate 10 GB/s,
  request_percentage 10,000), so every request goes through the quota step. Runs alternate between the two
  brokers; the figure is the median of ``--rounds`` runs each. Goal: with quotas >= 0.97x without. Beside them,
  this machine's loopback TCP limit measured in the same run, and the broker's CPU seconds per GB moved (a
  steadier view of the quota step's cost than throughput on a shared machine).
- **accuracy**: a confluent-kafka producer (or consumer) in a process of its own (``tests.compat.quota_load``)
  pushes as fast as it can against a client-id quota of 1, 10 and 100 MB/s, with Kafka's default windows
  (``quota.window.num`` 11 of 1 s). Kafka's windows let a client run free until ``quota * 10 s`` is used, and its
  throttling then comes in waves as old windows expire (the first window after the burst is its trough); so the
  first 11 s are skipped and the rest is cut in 10 s windows, each reported as measured rate / quota, with their
  mean, and beside them the rate over the whole run, first burst included. Consumers read 64 KB fetches from a
  pre-filled topic (1 and 10 MB/s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import DEFAULT_TMP_ROOT, REPO, machine_facts, print_facts, scratch_dir, verdict
from bench._kafka import Broker, build_rdkafka_performance
from bench.broker_throughput import TOPIC, consume_once, phase_raw_tcp, produce_once, wait_for_quiet_machine

MB = 1_000_000
GENEROUS = {"producer_byte_rate": 10_000 * MB, "consumer_byte_rate": 10_000 * MB, "request_percentage": 10_000}


def alter_quota(b: Broker, client_id: str | None, quotas: dict[str, float]) -> None:
    """``odradek configs alter`` for a client-id (None: the default client-id)."""
    entity = ["--entity-default"] if client_id is None else ["--entity-name", client_id]
    out = subprocess.run([sys.executable, "-m", "odradek.cli.main", "configs", "alter", "--entity-type", "clients",
                          *entity, "--add-config", ",".join(f"{k}={v:g}" for k, v in quotas.items()),
                          "--bootstrap-server", b.bootstrap], capture_output=True, text=True, timeout=60, cwd=REPO)
    if out.returncode:
        raise RuntimeError(out.stderr)


def phase_overhead(a: argparse.Namespace, scratch: Path) -> dict[str, float]:
    tool = build_rdkafka_performance()
    raw = phase_raw_tcp(scratch, 2_000 * MB, 60)
    print(f"# raw loopback TCP: {raw:,.0f} MB/s", flush=True)
    brokers = {name: Broker("odradek", scratch / name).start() for name in ("free", "quotas")}
    try:
        for b in brokers.values():
            b.create_topic(TOPIC)
        alter_quota(brokers["quotas"], None, GENEROUS)
        produced: dict[str, list[float]] = {n: [] for n in brokers}
        consumed: dict[str, list[float]] = {n: [] for n in brokers}
        cpu: dict[tuple[str, str], list[float]] = {(w, n): [] for w in ("produce", "consume") for n in brokers}
        for i in range(a.rounds):
            for name in (("free", "quotas") if i % 2 == 0 else ("quotas", "free")):
                run = produce_once(tool, brokers[name], 1024, "1", a.count, 120, scratch)
                produced[name].append(run.mbps)
                cpu["produce", name].append(run.broker_cores * run.seconds / (run.mbps * run.seconds / 1000))
        consume_count = a.count * min(a.rounds, 5)  # a run of a few seconds: one of a.count lasts ~0.4 s
        for i in range(a.rounds):
            for name in (("free", "quotas") if i % 2 == 0 else ("quotas", "free")):
                run = consume_once(tool, brokers[name], consume_count, 120)
                consumed[name].append(run.mbps)
                cpu["consume", name].append(run.broker_cores * run.seconds / (run.mbps * run.seconds / 1000))
    finally:
        for b in brokers.values():
            b.stop()
    out = {}
    for what, runs in (("produce", produced), ("consume", consumed)):
        free, quota = statistics.median(runs["free"]), statistics.median(runs["quotas"])
        out[what] = quota / free
        print(f"# {what} 1 KiB: quotas configured, not exceeded {quota:,.0f} MB/s vs none {free:,.0f} MB/s "
              f"(medians of {a.rounds}; raw TCP {raw:,.0f} MB/s) = {quota / free:.3f}x "
              f"(goal >= 0.97: {verdict(quota / free, 0.97)})", flush=True)
        print(f"#   runs without: {', '.join(f'{x:,.0f}' for x in runs['free'])}; with: "
              f"{', '.join(f'{x:,.0f}' for x in runs['quotas'])}", flush=True)
        cpu_free, cpu_quota = statistics.median(cpu[what, "free"]), statistics.median(cpu[what, "quotas"])
        print(f"#   broker CPU per GB moved (medians): with quotas {cpu_quota:.3f} s vs none {cpu_free:.3f} s "
              f"= {cpu_quota / cpu_free:.3f}x", flush=True)
    return out


def phase_step(a: argparse.Namespace, scratch: Path) -> float:
    """The quota step's own cost, in process: a 16 KB Produce request dispatched (decoded, appended, answered)
    without quotas and with generous ones, blocks of requests alternating, the loop time charged as the server
    does. Exact where the end-to-end runs are noisy: the difference is what the quota step adds per request."""
    import asyncio

    from odradek.broker.broker import Broker as InProcess
    from odradek.broker.config import BrokerConfig
    from odradek.broker.context import RequestContext
    from odradek.broker.dispatch import dispatch
    from odradek.broker.throttle import Timed, charge_loop_time
    from odradek.protocol import apis, entities
    from odradek.protocol.records import build_batch
    from odradek.quota.entity import CLIENT_ID, entity

    async def run() -> dict[bool, list[float]]:
        b = InProcess(BrokerConfig.from_properties({"log.dirs": str(scratch / "step"), "num.partitions": "1",
                                                    "listeners": "PLAINTEXT://127.0.0.1:0"}))
        b.start()
        try:
            b.create_topic("step", 1)
            batch = build_batch([(None, b"x" * 1000) for _ in range(16)])
            request = entities.build(apis.request_class(apis.PRODUCE, 9), {
                "transactional_id": None, "acks": 1, "timeout": 10_000,
                "topic_data": [{"name": "step", "partition_data": [{"index": 0, "records": batch}]}]})
            frame = apis.encode_request(apis.PRODUCE, 9, 1, request, "bench")[4:]
            state: dict[str, object] = {}
            out: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(a.rounds):
                for on in (False, True):
                    b.quotas.update({entity([(CLIENT_ID, None)]): GENEROUS} if on else {})
                    started = time.perf_counter()
                    for _ in range(2000):
                        if b.quotas.enabled:  # as the server runs it (broker/server.py)
                            timed = Timed(dispatch(lambda h: RequestContext(b, h, "127.0.0.1:1", state), frame))
                            await timed
                            charge_loop_time(b.quotas, state, timed.seconds)
                        else:
                            await dispatch(lambda h: RequestContext(b, h, "127.0.0.1:1", state), frame)
                    out[on].append((time.perf_counter() - started) / 2000 * 1e6)
            return out
        finally:
            b.stop()

    runs = asyncio.run(run())
    free, quota = statistics.median(runs[False]), statistics.median(runs[True])
    print(f"# quota step, in process: a 16 KB Produce request takes {quota:.1f} us with quotas configured vs "
          f"{free:.1f} us without (medians of {a.rounds} blocks of 2,000): +{quota - free:.1f} us per request; "
          f"{(quota - free) / 1000:.3f} us per KB on a 1 MB request", flush=True)
    return quota - free


def _load(verb: str, b: Broker, topic: str, client_id: str, seconds: float) -> list[list[float]]:
    out = subprocess.run([sys.executable, "-m", "tests.compat.quota_load", verb, "confluent", b.bootstrap, topic,
                          client_id, str(seconds)], capture_output=True, text=True, timeout=seconds + 120, cwd=REPO)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    marks: list[list[float]] = json.loads(out.stdout.strip().splitlines()[-1])["marks"]
    return marks


def _windows(marks: list[list[float]], quota: float, skip: float, window: float, count: int) -> list[float]:
    def at(t: float) -> list[float]:
        return min(marks, key=lambda m: abs(m[0] - t))
    ratios = []
    for i in range(count):
        a, b = at(skip + i * window), at(skip + (i + 1) * window)
        ratios.append((b[1] - a[1]) / (b[0] - a[0]) / quota)
    return ratios


def phase_accuracy(a: argparse.Namespace, scratch: Path) -> dict[str, list[float]]:
    skip, window = 11.0, 10.0
    seconds = skip + window * a.windows + 0.5
    b = Broker("odradek", scratch / "accuracy", overrides=[f"log.segment.bytes={256 << 20}"]).start()
    results: dict[str, list[float]] = {}
    overall: dict[str, float] = {}
    try:
        for mbps in a.produce_quotas:
            client_id = f"producer-{mbps}"
            topic = f"acc-{client_id}"
            b.create_topic(topic)
            alter_quota(b, client_id, {"producer_byte_rate": mbps * MB})
            marks = _load("produce", b, topic, client_id, seconds)
            results[f"produce {mbps} MB/s"] = _windows(marks, mbps * MB, skip, window, a.windows)
            overall[f"produce {mbps} MB/s"] = _windows(marks, mbps * MB, 0.0, seconds - 0.5, 1)[0]
        fill_topic = "acc-consume"
        b.create_topic(fill_topic)
        need = int(max(a.consume_quotas) * MB * seconds * 1.2)
        _fill(b, fill_topic, need)
        for mbps in a.consume_quotas:
            client_id = f"consumer-{mbps}"
            alter_quota(b, client_id, {"consumer_byte_rate": mbps * MB})
            marks = _load("consume", b, fill_topic, client_id, seconds)
            results[f"consume {mbps} MB/s"] = _windows(marks, mbps * MB, skip, window, a.windows)
            overall[f"consume {mbps} MB/s"] = _windows(marks, mbps * MB, 0.0, seconds - 0.5, 1)[0]
    finally:
        b.stop()
    for name, ratios in results.items():
        print(f"# accuracy {name}: measured / quota per 10 s window from {skip:.0f} s: "
              f"{', '.join(f'{r:.2f}' for r in ratios)} (mean {statistics.mean(ratios):.2f}); over the whole "
              f"{seconds - 0.5:.0f} s run, first burst included: {overall[name]:.2f}", flush=True)
    return results


def _fill(b: Broker, topic: str, nbytes: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 65536, "log_level": 3})
    value = b"f" * 1000
    for _ in range(nbytes // len(value)):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120):
        raise RuntimeError("filling the consume topic did not finish")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=("step", "overhead", "accuracy"), default=None)
    ap.add_argument("--tmp-root", type=Path, default=DEFAULT_TMP_ROOT)
    ap.add_argument("--wait", type=float, default=0.0, help="wait up to this many seconds for an idle machine")
    a = ap.parse_args()
    a.rounds = 3 if a.quick else 7
    a.count = 200_000 if a.quick else 1_000_000
    a.windows = 1 if a.quick else 4
    a.produce_quotas = (1, 10) if a.quick else (1, 10, 100)
    a.consume_quotas = (1,) if a.quick else (1, 10)
    print_facts(machine_facts(a.tmp_root))
    print(f"# command: python -m bench.quotas {' '.join(sys.argv[1:])}", flush=True)
    if a.wait:
        wait_for_quiet_machine(a.wait)
    started = time.monotonic()
    with scratch_dir(a.tmp_root, "bench-quotas", 6_000 * MB) as scratch:
        if a.only in (None, "step"):
            phase_step(a, scratch)
        if a.only in (None, "overhead"):
            phase_overhead(a, scratch)
        if a.only in (None, "accuracy"):
            phase_accuracy(a, scratch)
    print(f"# done in {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
