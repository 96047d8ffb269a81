"""Produce latency on a broker with many partitions: the cyclic GC's full collections, with and without the heap
settler (``odradek/broker/heap.py``), beside this machine's loopback round trip measured in the same run.

Run (from the repository root)::

    python -m bench.partition_scale                      # 10,000 partitions, 30 s of load each way (~3 min)
    python -m bench.partition_scale --partitions 2000 --seconds 10

What is measured: a fresh ``odradek serve`` creates ``--partitions`` partitions (topics of 1,000) through
CreateTopics, waits 5 s (the settler's 2 s quiet delay and its collection are over), then a confluent-kafka producer
sends 100 B records (acks=1, linger.ms 1) round-robin over the first topic's partitions at ~10,000 a second for
``--seconds``; each record's latency is send -> delivery report. *settler*: ``odradek serve`` as shipped;
*without*: the same with ``HeapSettler.settle`` replaced by a no-op in the broker process (what a broker whose
partitions were created at run time did before). Raw limit: a 100-byte ping-pong over loopback TCP between two
processes (the floor any request's round trip stands on). Results go to docs/performance.md ("Many partitions:
full garbage collections").
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import DEFAULT_TMP_ROOT, machine_facts, percentile, print_facts, scratch_dir
from bench._kafka import Broker, free_port

_NO_SETTLE = (
    "import sys; from odradek.broker import heap; heap.HeapSettler.settle = lambda self: None; "
    "from odradek.cli.main import main; sys.argv[0] = 'odradek'; sys.exit(main())"
)


def _echo(port: int, n: int) -> None:
    with socket.create_server(("127.0.0.1", port)) as srv:
        conn, _ = srv.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(n):
                data = conn.recv(100)
                if not data:
                    return
                conn.sendall(data)


def loopback_round_trips(n: int = 20_000) -> list[float]:
    """Seconds per 100-byte ping-pong over loopback TCP, another process echoing."""
    port = free_port()
    p = multiprocessing.Process(target=_echo, args=(port, n), daemon=True)
    p.start()
    for _ in range(100):
        try:
            s = socket.create_connection(("127.0.0.1", port))
            break
        except OSError:
            time.sleep(0.05)
    else:
        raise RuntimeError("the echo process did not listen")
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    msg = b"x" * 100
    with s:
        for _ in range(n):
            t = time.perf_counter()
            s.sendall(msg)
            got = 0
            while got < 100:
                got += len(s.recv(100 - got))
            out.append(time.perf_counter() - t)
    p.join(5)
    return out


def produce_latencies(partitions: int, seconds: float, *, settle: bool, tmp: Path) -> list[float]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = Broker("odradek", tmp / ("settler" if settle else "without"))
    if not settle:
        broker.launcher = ["-c", _NO_SETTLE]
    broker.start(timeout=60)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        topics = max(1, partitions // 1000)
        futures = admin.create_topics([NewTopic(f"scale-{i}", partitions // topics, 1) for i in range(topics)],
                                      operation_timeout=600, request_timeout=600)
        for f in futures.values():
            f.result(timeout=900)
        time.sleep(5)
        per_topic = partitions // topics
        latencies: list[float] = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1, "acks": 1, "log_level": 0})
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            t0 = time.perf_counter()
            producer.produce("scale-0", b"x" * 100, partition=n % per_topic,
                             on_delivery=lambda err, _m, t0=t0: latencies.append(time.perf_counter() - t0)
                             if err is None else None)
            n += 1
            producer.poll(0)
            if n % 50 == 0:
                time.sleep(0.005)
        producer.flush(60)
        return latencies
    finally:
        broker.stop()


def _line(name: str, xs: list[float]) -> str:
    ms = [x * 1000 for x in xs]
    return (f"  {name:<34} p50 {percentile(ms, 50):6.2f}  p99 {percentile(ms, 99):7.2f}  "
            f"p99.9 {percentile(ms, 99.9):7.2f}  max {max(ms):7.1f} ms  ({len(ms):,} samples)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=30.0)
    a = ap.parse_args()
    print_facts(machine_facts(DEFAULT_TMP_ROOT))
    raw = loopback_round_trips()
    print(f"# {a.partitions:,} partitions, {a.seconds:.0f} s of produce (100 B, acks=1, ~10,000 records/s)")
    print(_line("raw: loopback TCP round trip", raw))
    with scratch_dir(DEFAULT_TMP_ROOT, "partition-scale", 1 << 30) as d:
        for settle in (False, True):
            lat = produce_latencies(a.partitions, a.seconds, settle=settle, tmp=d)
            print(_line("produce, " + ("heap settler" if settle else "without the settler"), lat), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
