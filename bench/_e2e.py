"""End-to-end latency probes on confluent-kafka: a paced producer and an assigned consumer, each in
its own process (own core, own GIL), both run by ``bench.broker_throughput``.

- ``produce``: ``rate`` records/s for ``seconds`` (open loop: each record is sent when it is due,
  by the schedule, not when the previous one was acknowledged; between records the process
  sleeps, it does not spin). Each value starts with ``time.monotonic_ns()`` taken right before
  ``produce()``, padded to ``size`` bytes. ``linger.ms`` as given (0: send at once), ``acks`` as given,
  idempotence off.
- ``consume``: assigned partition 0 from offset 0 (no group: ``group.id`` only satisfies the
  client, nothing is committed); for every record, latency = monotonic clock when ``poll()``
  returned the record minus the stamp in the value. CLOCK_MONOTONIC is one clock for the whole
  machine, so the two processes compare stamps directly. The first ``warmup`` records are dropped.
  It stops after ``count`` records or at ``max_seconds``; prints one line:
  ``n p50_us p99_us p999_us max_us mean_us``.

Run as ``python -m bench._e2e produce|consume --bootstrap H:P --topic T ...``.
"""

from __future__ import annotations

import argparse
import gc
import struct
import sys
import time


def produce(a: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": a.linger, "acks": a.acks,
                  "enable.idempotence": False, "log_level": 3})
    pad = b"x" * max(0, a.size - 8)
    pack = struct.Struct("<q").pack
    now = time.monotonic_ns
    total = int(a.rate * a.seconds)
    step = 1e9 / a.rate
    errors = [0]

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors[0] += 1

    gc.disable()
    t0 = now()
    deadline = t0 + int((a.seconds + 10) * 1e9)
    n = 0
    while n < total:
        t = now()
        if t > deadline:
            break
        due = min(total, int((t - t0) / step) + 1)
        while n < due:
            p.produce(a.topic, pack(now()) + pad, partition=0, on_delivery=on_delivery)
            n += 1
        p.poll(0)
        wait = (t0 + n * step - now()) / 1e9
        if wait > 0:
            time.sleep(wait)
    elapsed = (now() - t0) / 1e9  # the sending schedule only: flush() below waits for the last acks
    left = p.flush(30)
    print(f"{n} {elapsed:.3f} {errors[0]} {left}", flush=True)


def consume(a: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "bench-e2e", "enable.auto.commit": False,
                  "enable.auto.offset.store": False, "log_level": 3})
    c.assign([TopicPartition(a.topic, 0, 0)])
    unpack = struct.Struct("<q").unpack_from
    now = time.monotonic_ns
    lat: list[int] = []
    append = lat.append
    seen = 0
    gc.disable()
    print("ready", flush=True)
    deadline = now() + int(a.max_seconds * 1e9)
    poll = c.poll
    dump: list[int] | None = [] if a.dump else None
    while seen < a.count and now() < deadline:
        m = poll(0.1)  # returns as soon as one record is there (consume(n) would wait for n records)
        if m is None or m.error() is not None:
            continue
        t = now()
        seen += 1
        if seen > a.warmup:
            stamp = unpack(m.value())[0]
            append(t - stamp)
            if dump is not None:
                dump.append(stamp)
    c.close()
    if dump is not None:  # "produced_ns latency_ns" per record, in arrival order
        with open(a.dump, "w") as f:
            f.writelines(f"{s} {x}\n" for s, x in zip(dump, lat, strict=True))
    if not lat:
        print("0 nan nan nan nan nan", flush=True)
        return
    lat.sort()

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, round(p / 100 * (len(lat) - 1)))] / 1e3

    print(f"{len(lat)} {pct(50):.1f} {pct(99):.1f} {pct(99.9):.1f} {lat[-1] / 1e3:.1f} "
          f"{sum(lat) / len(lat) / 1e3:.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=["produce", "consume"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--rate", type=float, default=10_000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--acks", default="-1")
    ap.add_argument("--linger", type=float, default=0.0, help="producer linger.ms")
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=60)
    ap.add_argument("--dump", help="consume: write every record's stamp and latency (ns) to this file")
    a = ap.parse_args()
    (produce if a.role == "produce" else consume)(a)


if __name__ == "__main__":
    sys.exit(main())
