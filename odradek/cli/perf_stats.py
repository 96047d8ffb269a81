"""What ``odradek perf`` measures, without I/O: latencies and sizes per window and overall, and the pace of a
target throughput. Times are given by the caller (``now`` in seconds from any monotonic clock), so tests are
instant.

``Stats`` follows kafka-producer-perf-test's ``Stats``: every ``record`` adds one record's latency and size
to the current window and to the totals; when a window of ``window_s`` has passed, ``record`` returns the
window's ``Summary`` (the caller prints it) and starts the next one. The final summary has the latency
percentiles, taken as Kafka takes them: the sorted latencies' element at ``int(p * count)``.

``Pacer`` follows Kafka's ``ThroughputThrottler``: ``delay(sent, now)`` is how long to wait so that ``sent``
records take at least ``sent / records_per_s`` seconds from the start; a negative rate never waits.

Invariants:
- Latencies are kept in milliseconds as floats, all of them (a perf run's count fits in memory: 8 bytes per
  record, in an ``array``); percentiles of no records are 0.
- ``MB`` is 1024 * 1024 bytes, as Kafka's tools print it.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

MB = 1024 * 1024
PERCENTILES = (0.5, 0.95, 0.99, 0.999)


@dataclass(frozen=True)
class Summary:
    """Records, bytes and latencies over ``elapsed_s``; ``percentiles`` (ms) only in the final summary."""

    records: int
    bytes: int
    elapsed_s: float
    latency_avg_ms: float
    latency_max_ms: float
    percentiles: tuple[float, ...] = ()

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def window_line(self) -> str:
        """kafka-producer-perf-test's progress line."""
        return (
            f"{self.records} records sent, {self.records_per_s:.1f} records/sec ({self.mb_per_s:.2f} MB/sec), "
            f"{self.latency_avg_ms:.1f} ms avg latency, {self.latency_max_ms:.1f} ms max latency."
        )

    def final_line(self) -> str:
        """kafka-producer-perf-test's summary line (percentiles in whole ms, as Kafka prints them)."""
        p50, p95, p99, p999 = (int(p) for p in self.percentiles)
        return (
            f"{self.records} records sent, {self.records_per_s:f} records/sec ({self.mb_per_s:.2f} MB/sec), "
            f"{self.latency_avg_ms:.2f} ms avg latency, {self.latency_max_ms:.2f} ms max latency, "
            f"{p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th."
        )


def percentiles(latencies_ms: array[float], points: tuple[float, ...] = PERCENTILES) -> tuple[float, ...]:
    """The latencies at ``points`` (0..1): the sorted latencies' element at ``int(p * count)`` (Kafka's choice)."""
    if not latencies_ms:
        return tuple(0.0 for _ in points)
    ordered = sorted(latencies_ms)
    return tuple(ordered[min(int(p * len(ordered)), len(ordered) - 1)] for p in points)


class Stats:
    """Latencies and sizes of the records of one perf run, by window and overall."""

    def __init__(self, start: float, window_s: float = 5.0) -> None:
        self.start = start
        self.window_s = window_s
        self.latencies_ms: array[float] = array("d")
        self.bytes = 0
        self.latency_sum_ms = 0.0
        self.latency_max_ms = 0.0
        self._window_start = start
        self._window = [0, 0, 0.0, 0.0]  # records, bytes, latency sum, latency max

    @property
    def records(self) -> int:
        return len(self.latencies_ms)

    def record(self, latency_ms: float, size: int, now: float) -> Summary | None:
        """Count one record; the summary of the window it closed, if it closed one."""
        self.latencies_ms.append(latency_ms)
        self.bytes += size
        self.latency_sum_ms += latency_ms
        self.latency_max_ms = max(self.latency_max_ms, latency_ms)
        w = self._window
        w[0] += 1
        w[1] += size
        w[2] += latency_ms
        w[3] = max(w[3], latency_ms)
        if now - self._window_start < self.window_s:
            return None
        done = Summary(int(w[0]), int(w[1]), now - self._window_start, w[2] / w[0], w[3])
        self._window_start = now
        self._window = [0, 0, 0.0, 0.0]
        return done

    def total(self, now: float) -> Summary:
        """Everything recorded since ``start``, with the latency percentiles."""
        n = self.records
        return Summary(
            n,
            self.bytes,
            now - self.start,
            self.latency_sum_ms / n if n else 0.0,
            self.latency_max_ms,
            percentiles(self.latencies_ms),
        )


class Pacer:
    """Holds a run to ``records_per_s`` (negative: as fast as possible)."""

    def __init__(self, records_per_s: float, start: float) -> None:
        if records_per_s == 0:
            raise ValueError("a throughput of 0 records/s would never send anything")
        self.records_per_s = records_per_s
        self.start = start

    def delay(self, sent: int, now: float) -> float:
        """Seconds to wait before sending more, ``sent`` records having been sent by ``now``."""
        if self.records_per_s < 0:
            return 0.0
        return max(0.0, self.start + sent / self.records_per_s - now)
