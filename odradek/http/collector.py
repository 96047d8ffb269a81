"""``/metrics``: the broker's state and counters as Prometheus metric families, computed at scrape time.

A scrape has two steps:

1. ``snapshot`` (on the broker's event loop, where the state lives): copies the numbers into plain tuples, one
   pass over the partitions (yielding to the loop every ``_CHUNK`` partitions so that a scrape of a large broker
   never holds it long) and one over the consumer groups. Nothing is formatted here.
2. ``render`` (in a worker thread): a custom prometheus_client ``Collector`` (``SnapshotCollector``) turns the
   snapshot into metric families and ``generate_latest`` writes Prometheus' text format; the free and total bytes
   of each log directory are read there too (``statvfs``), off the loop.

Names are ``odradek_*``; each family's HELP names the Kafka MBean it corresponds to, and docs/metrics.md maps
every one. Times are in seconds, sizes in bytes (Prometheus conventions), counters end in ``_total``.

Invariants: the hot path never sees prometheus_client (it bumps plain ints, ``metrics/broker_metrics.py``);
a snapshot is consistent per object (read in one loop step), not across the whole broker; counters only grow.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from odradek.metrics.histogram import BOUNDS, Histogram
from odradek.protocol import apis
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.broker import Broker

_CHUNK = 2000  # partitions copied per loop step
_RENDERING = threading.Lock()
_SWITCH_INTERVAL_S = 0.0005
_GC_PAUSE = threading.Lock()
_gc_pausers = 0  # scrapes under way (guarded by _GC_PAUSE)
_gc_was_enabled = False


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while any scrape is under way (see ``scrape``)."""
    global _gc_pausers, _gc_was_enabled
    with _GC_PAUSE:
        if not _gc_pausers:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _GC_PAUSE:
            _gc_pausers -= 1
            if not _gc_pausers and _gc_was_enabled:
                gc.enable()


_LE = (*(repr(b) for b in BOUNDS), "+Inf")


@dataclass(slots=True)
class PartitionRow:
    topic: str
    partition: str
    leader: bool
    replicas: int
    isr: int
    min_isr: int
    size: int
    segments: int
    log_start: int
    log_end: int
    high_watermark: int


@dataclass(slots=True)
class Snapshot:
    node_id: str
    cluster_id: str
    requests: list[
        tuple[
            str,
            int,
            tuple[tuple[int, int], ...],  # (error code, count)
            tuple[tuple[int, ...], int, float],
            tuple[tuple[int, ...], int, float],
            tuple[tuple[int, ...], int, float],
            tuple[tuple[int, ...], int, float],
        ]
    ] = field(default_factory=list)
    topics: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    partitions: list[PartitionRow] = field(default_factory=list)
    offline_partitions: int = 0
    isr_shrinks: int = 0
    isr_expands: int = 0
    replication_bytes: tuple[int, int] = (0, 0)  # (in, out)
    active_controller: int = 0
    controller_id: int = -1
    connections: list[tuple[str, int, int]] = field(default_factory=list)
    throttles: list[tuple[str, str, str, int, int]] = field(default_factory=list)
    cleaner: dict[str, float] = field(default_factory=dict)
    groups: list[tuple[str, str, int]] = field(default_factory=list)  # (group, state, members)
    offsets: list[tuple[str, str, str, int, int | None]] = field(default_factory=list)  # ..., committed, end
    log_dirs: list[tuple[str, bool]] = field(default_factory=list)  # (directory, offline)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _hist(h: Histogram) -> tuple[tuple[int, ...], int, float]:
    return (tuple(h.counts), h.count, h.sum)


async def snapshot(broker: Broker) -> Snapshot:
    """Copy what ``/metrics`` shows out of the broker (on its loop; see the module)."""
    registry = broker.topics
    snap = Snapshot(str(broker.node_id), getattr(registry, "cluster_id", "") or "")
    m = broker.metrics
    for key, r in list(m.apis.items()):
        spec = apis.SUPPORTED.get(key)
        name = spec.name if spec is not None else str(key)
        snap.requests.append(
            (name, r.requests, tuple(r.errors.items()), _hist(r.queue), _hist(r.local), _hist(r.remote),
             _hist(r.total))
        )
    for name, t in list(m.topics.items()):
        snap.topics.append(
            (
                name,
                (
                    t.messages_in,
                    t.bytes_in,
                    t.bytes_out,
                    t.produce_requests,
                    t.failed_produce_requests,
                    t.fetch_requests,
                    t.failed_fetch_requests,
                ),
            )
        )
    for listener, n in list(m.connections.items()):
        snap.connections.append((listener, n, m.connections_created.get(listener, 0)))
    snap.throttles = [(*k, v[0], v[1]) for k, v in list(m.throttles.items())]
    replicas = broker.replicas
    snap.isr_shrinks, snap.isr_expands = replicas.isr_shrinks, replicas.isr_expands
    snap.replication_bytes = (m.replication_bytes_in, m.replication_bytes_out)
    parts = list(replicas.partitions())
    rows = snap.partitions
    for i in range(0, len(parts), _CHUNK):
        if i:
            await asyncio.sleep(0)
        for p in parts[i : i + _CHUNK]:
            lg = p.log
            segments = lg.segments
            rows.append(
                PartitionRow(
                    p.topic,
                    str(p.index),
                    p.is_leader,
                    len(p.replicas),
                    len(p.isr),
                    lg.config.min_insync_replicas,
                    sum(s.size for s in segments),
                    len(segments),
                    lg.log_start_offset,
                    lg.next_offset,
                    lg.high_watermark,
                )
            )
    cluster = broker.cluster
    controller = broker.controller
    if cluster is not None:
        snap.controller_id = cluster.controller_id
        if controller is not None and controller.active:
            snap.active_controller = 1
            snap.offline_partitions = sum(1 for s in list(cluster.states.values()) if not s.online)
    elif not broker.replicated:
        snap.active_controller = 1  # a single node is its own controller
        snap.controller_id = broker.node_id
        snap.offline_partitions = len(broker.log_manager.offline_partitions())
    lm = broker.log_manager
    snap.log_dirs = [(str(d), d in lm.offline_dirs) for d in lm.log_dirs]
    cs = lm.cleaner.stats
    snap.cleaner = {
        "passes": cs.passes,
        "bytes_read": cs.bytes_read,
        "bytes_written": cs.bytes_written,
        "max_clean_seconds": cs.max_clean_seconds,
        "max_buffer_utilization": cs.max_buffer_utilization,
        "max_compaction_delay_seconds": cs.max_compaction_delay_ms / 1000,
        "max_dirty_ratio": cs.max_dirty_ratio,
        "uncleanable": len(cs.uncleanable),
        "since_last_run": (broker.clock.milliseconds() - cs.last_pass_ms) / 1000 if cs.last_pass_ms >= 0 else -1,
    }
    coordinator = broker.groups.coordinator
    if coordinator is not None:
        ends = {(r.topic, r.partition): r.high_watermark for r in rows}
        owned = coordinator.owned
        for group in list(coordinator.groups.values()):
            if owned is not None and coordinator.partition_of(group.group_id) not in owned:
                continue
            snap.groups.append((group.group_id, group.state.name, len(group.members)))
            for (topic, partition), entry in list(group.offsets.items()):
                snap.offsets.append(
                    (group.group_id, topic, str(partition), entry.offset, ends.get((topic, str(partition))))
                )
    return snap


def render(snap: Snapshot) -> bytes:
    """Prometheus' text format (0.0.4) of a snapshot; for a worker thread (one render at a time).

    The interpreter's switch interval is shortened meanwhile, so that the event loop waits at most
    ``_SWITCH_INTERVAL_S`` (not 5 ms) for the GIL whenever it has work."""
    with _RENDERING:
        interval = sys.getswitchinterval()
        sys.setswitchinterval(_SWITCH_INTERVAL_S)
        try:
            with _cyclic_gc_paused():
                return generate_latest(SnapshotCollector(snap))  # type: ignore[arg-type]
        finally:
            sys.setswitchinterval(interval)


class SnapshotCollector(Collector):
    """The metric families of one ``Snapshot`` (prometheus_client's custom collector)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        s = self.snap
        info = GaugeMetricFamily(
            "odradek_broker_info", "This broker (value 1): its node id and cluster id", labels=["node_id", "cluster_id"]
        )
        info.add_metric([s.node_id, s.cluster_id], 1)
        yield info
        yield from self._requests()
        yield from self._topics()
        yield from self._partitions()
        yield from self._cluster()
        yield from self._connections_and_quotas()
        yield from self._cleaner()
        yield from self._groups()
        yield from self._log_dirs()

    def _requests(self) -> Iterator[Metric]:
        mbean = "kafka.network:type=RequestMetrics,name={},request=<api>"
        requests = CounterMetricFamily(
            "odradek_requests", f"Requests decoded, per API ({mbean.format('RequestsPerSec')})", labels=["request"]
        )
        errors = CounterMetricFamily(
            "odradek_request_errors",
            "Error codes in responses, per API and error, NONE included; a handler that failed (the connection "
            f"closed) counts as UNKNOWN_SERVER_ERROR ({mbean.format('ErrorsPerSec')},error=<error>)",
            labels=["request", "error"],
        )
        times = [
            HistogramMetricFamily(
                "odradek_request_queue_time_seconds",
                "From the request's frame read to its handler called: decoding, quotas "
                f"({mbean.format('RequestQueueTimeMs')})",
                labels=["request"],
            ),
            HistogramMetricFamily(
                "odradek_request_local_time_seconds",
                f"Time in the request's handler, a fetch's long poll included ({mbean.format('LocalTimeMs')})",
                labels=["request"],
            ),
            HistogramMetricFamily(
                "odradek_request_remote_time_seconds",
                f"Time an acks=all produce waited for its replicas after its handler ({mbean.format('RemoteTimeMs')})",
                labels=["request"],
            ),
            HistogramMetricFamily(
                "odradek_request_total_time_seconds",
                f"From the request's frame read to its response ready ({mbean.format('TotalTimeMs')})",
                labels=["request"],
            ),
        ]
        for name, n, err, *hists in self.snap.requests:
            requests.add_metric([name], n)
            for code, count in err:
                errors.add_metric([name, _error_name(code)], count)
            for family, (counts, _count, total) in zip(times, hists, strict=True):
                running = 0
                buckets = []
                for le, c in zip(_LE, counts, strict=True):
                    running += c
                    buckets.append((le, running))
                family.add_metric([name], buckets, total)
        yield requests
        yield errors
        yield from times

    def _topics(self) -> Iterator[Metric]:
        mbean = "kafka.server:type=BrokerTopicMetrics,name={},topic=<topic>"
        families = [
            CounterMetricFamily(
                "odradek_topic_messages_in",
                f"Records appended by producers ({mbean.format('MessagesInPerSec')})",
                labels=["topic"],
            ),
            CounterMetricFamily(
                "odradek_topic_bytes_in",
                f"Record batch bytes appended by producers ({mbean.format('BytesInPerSec')})",
                labels=["topic"],
            ),
            CounterMetricFamily(
                "odradek_topic_bytes_out",
                f"Record batch bytes sent to consumers, replication excluded ({mbean.format('BytesOutPerSec')})",
                labels=["topic"],
            ),
            CounterMetricFamily(
                "odradek_topic_produce_requests",
                f"Produce requests naming the topic ({mbean.format('TotalProduceRequestsPerSec')})",
                labels=["topic"],
            ),
            CounterMetricFamily(
                "odradek_topic_failed_produce_requests",
                "Produce requests with an error for a "
                f"partition of the topic ({mbean.format('FailedProduceRequestsPerSec')})",
                labels=["topic"],
            ),
            CounterMetricFamily(
                "odradek_topic_fetch_requests",
                f"Consumer fetch requests naming the topic ({mbean.format('TotalFetchRequestsPerSec')})",
                labels=["topic"],
            ),
            CounterMetricFamily(
                "odradek_topic_failed_fetch_requests",
                "Consumer fetch requests with an error for a "
                f"partition of the topic ({mbean.format('FailedFetchRequestsPerSec')})",
                labels=["topic"],
            ),
        ]
        for topic, values in self.snap.topics:
            for family, v in zip(families, values, strict=True):
                family.add_metric([topic], v)
        yield from families

    def _partitions(self) -> Iterator[Metric]:
        s = self.snap
        tp = ["topic", "partition"]
        log = "kafka.log:type=Log,name={},topic=<topic>,partition=<p>"
        size = GaugeMetricFamily(
            "odradek_log_size_bytes", f"Bytes in the partition's segments ({log.format('Size')})", labels=tp
        )
        end = GaugeMetricFamily(
            "odradek_log_end_offset", f"Offset of the next record ({log.format('LogEndOffset')})", labels=tp
        )
        start = GaugeMetricFamily(
            "odradek_log_start_offset", f"First offset kept ({log.format('LogStartOffset')})", labels=tp
        )
        hw = GaugeMetricFamily(
            "odradek_log_high_watermark",
            "Offset up to which records are committed (consumers "
            "read below it; Kafka's kafka.cluster:type=Partition has none)",
            labels=tp,
        )
        segments = GaugeMetricFamily(
            "odradek_log_segments", f"Segments of the log ({log.format('NumLogSegments')})", labels=tp
        )
        part = "kafka.cluster:type=Partition,name={},topic=<topic>,partition=<p>"
        isr = GaugeMetricFamily(
            "odradek_partition_in_sync_replicas",
            f"In-sync replicas of a partition led here ({part.format('InSyncReplicasCount')})",
            labels=tp,
        )
        replicas = GaugeMetricFamily(
            "odradek_partition_replicas",
            f"Replicas of a partition led here ({part.format('ReplicasCount')})",
            labels=tp,
        )
        leaders = under = under_min = 0
        for r in s.partitions:
            labels = [r.topic, r.partition]
            size.add_metric(labels, r.size)
            end.add_metric(labels, r.log_end)
            start.add_metric(labels, r.log_start)
            hw.add_metric(labels, r.high_watermark)
            segments.add_metric(labels, r.segments)
            if r.leader:
                leaders += 1
                isr.add_metric(labels, r.isr)
                replicas.add_metric(labels, r.replicas)
                under += r.isr < r.replicas
                under_min += r.isr < r.min_isr
        rm = "kafka.server:type=ReplicaManager,name={}"
        yield GaugeMetricFamily(
            "odradek_partitions",
            f"Partitions with a replica here ({rm.format('PartitionCount')})",
            value=len(s.partitions),
        )
        yield GaugeMetricFamily(
            "odradek_leader_partitions", f"Partitions led here ({rm.format('LeaderCount')})", value=leaders
        )
        yield GaugeMetricFamily(
            "odradek_under_replicated_partitions",
            f"Partitions led here with fewer in-sync replicas than replicas ({rm.format('UnderReplicatedPartitions')})",
            value=under,
        )
        yield GaugeMetricFamily(
            "odradek_under_min_isr_partitions",
            "Partitions led here with fewer in-sync replicas "
            f"than min.insync.replicas ({rm.format('UnderMinIsrPartitionCount')})",
            value=under_min,
        )
        yield CounterMetricFamily(
            "odradek_isr_shrinks",
            f"ISR shrinks this broker made as a leader ({rm.format('IsrShrinksPerSec')})",
            value=s.isr_shrinks,
        )
        yield CounterMetricFamily(
            "odradek_isr_expands",
            f"ISR expansions this broker made as a leader ({rm.format('IsrExpandsPerSec')})",
            value=s.isr_expands,
        )
        bt = "kafka.server:type=BrokerTopicMetrics,name={}"
        yield CounterMetricFamily(
            "odradek_replication_bytes_in",
            f"Record batch bytes a follower here appended from its leaders ({bt.format('ReplicationBytesInPerSec')})",
            value=s.replication_bytes[0],
        )
        yield CounterMetricFamily(
            "odradek_replication_bytes_out",
            f"Record batch bytes sent to followers' fetches ({bt.format('ReplicationBytesOutPerSec')})",
            value=s.replication_bytes[1],
        )
        yield from (size, end, start, hw, segments, isr, replicas)

    def _cluster(self) -> Iterator[Metric]:
        s = self.snap
        kc = "kafka.controller:type=KafkaController,name={}"
        yield GaugeMetricFamily(
            "odradek_active_controller",
            f"1 on the active controller (a single node is its own), else 0 ({kc.format('ActiveControllerCount')})",
            value=s.active_controller,
        )
        yield GaugeMetricFamily(
            "odradek_controller_id",
            "The controller's broker id as this broker knows it (-1: none)",
            value=s.controller_id,
        )
        yield GaugeMetricFamily(
            "odradek_offline_partitions",
            "Partitions without a leader, reported by the active "
            f"controller only, as Kafka does ({kc.format('OfflinePartitionsCount')})",
            value=s.offline_partitions,
        )

    def _connections_and_quotas(self) -> Iterator[Metric]:
        sm = "kafka.server:type=socket-server-metrics,listener=<listener>"
        open_ = GaugeMetricFamily(
            "odradek_connections", f"Open connections ({sm} connection-count)", labels=["listener"]
        )
        created = CounterMetricFamily(
            "odradek_connections_created", f"Connections accepted ({sm} connection-creation-total)", labels=["listener"]
        )
        for listener, n, total in self.snap.connections:
            open_.add_metric([listener], n)
            created.add_metric([listener], total)
        q = ["type", "user", "client_id"]
        throttle = CounterMetricFamily(
            "odradek_quota_throttle_time_seconds",
            "Throttle time given to clients over a quota (kafka.server:"
            "type=Produce|Fetch|Request,user=<u>,client-id=<c> throttle-time)",
            labels=q,
        )
        throttled = CounterMetricFamily(
            "odradek_quota_throttled_responses", "Responses that carried a throttle time", labels=q
        )
        for kind, user, client, count, ms in self.snap.throttles:
            throttle.add_metric([kind, user, client], ms / 1000)
            throttled.add_metric([kind, user, client], count)
        yield from (open_, created, throttle, throttled)

    def _cleaner(self) -> Iterator[Metric]:
        c = self.snap.cleaner
        lc = "kafka.log:type=LogCleaner,name={}"
        yield CounterMetricFamily("odradek_cleaner_passes", "Cleaning passes done", value=c["passes"])
        yield CounterMetricFamily("odradek_cleaner_read_bytes", "Bytes the cleaner read", value=c["bytes_read"])
        yield CounterMetricFamily("odradek_cleaner_written_bytes", "Bytes the cleaner wrote", value=c["bytes_written"])
        yield GaugeMetricFamily(
            "odradek_cleaner_max_clean_time_seconds",
            f"Longest pass of the last run ({lc.format('max-clean-time-secs')})",
            value=c["max_clean_seconds"],
        )
        yield GaugeMetricFamily(
            "odradek_cleaner_max_buffer_utilization_ratio",
            f"Fullest offset map of the last run ({lc.format('max-buffer-utilization-percent')} / 100)",
            value=c["max_buffer_utilization"],
        )
        yield GaugeMetricFamily(
            "odradek_cleaner_max_compaction_delay_seconds",
            f"How far past max.compaction.lag.ms a log was when cleaned ({lc.format('max-compaction-delay-secs')})",
            value=c["max_compaction_delay_seconds"],
        )
        yield GaugeMetricFamily(
            "odradek_cleaner_max_dirty_ratio",
            "Dirtiest log's dirty ratio at the last check "
            "(kafka.log:type=LogCleanerManager,name=max-dirty-percent / 100)",
            value=c["max_dirty_ratio"],
        )
        yield GaugeMetricFamily(
            "odradek_cleaner_uncleanable_partitions",
            "Logs the cleaner gave up on until restart "
            "(kafka.log:type=LogCleanerManager,name=uncleanable-partitions-count)",
            value=c["uncleanable"],
        )
        yield GaugeMetricFamily(
            "odradek_cleaner_seconds_since_last_pass",
            f"Since the last pass ended (-1: none yet) ({lc.format('time-since-last-run-ms')} / 1000)",
            value=c["since_last_run"],
        )

    def _groups(self) -> Iterator[Metric]:
        gtp = ["group", "topic", "partition"]
        committed = GaugeMetricFamily(
            "odradek_consumer_group_committed_offset",
            "A group's committed offset, exported by its coordinator (Kafka exports none)",
            labels=gtp,
        )
        lag = GaugeMetricFamily(
            "odradek_consumer_group_lag",
            "High watermark minus committed offset, where the "
            "coordinator hosts the partition (as kafka-consumer-groups --describe shows LAG)",
            labels=gtp,
        )
        members = GaugeMetricFamily(
            "odradek_consumer_group_members", "Members of a group coordinated here", labels=["group", "state"]
        )
        for group, state, n in self.snap.groups:
            members.add_metric([group, state], n)
        for group, topic, partition, offset, end in self.snap.offsets:
            committed.add_metric([group, topic, partition], offset)
            if end is not None:
                lag.add_metric([group, topic, partition], max(end - offset, 0))
        yield from (committed, lag, members)

    def _log_dirs(self) -> Iterator[Metric]:
        offline = GaugeMetricFamily(
            "odradek_log_dir_offline",
            "1 for a failed log directory (kafka.log:type=LogManager,name=LogDirectoryOffline,logDirectory=<d>)",
            labels=["dir"],
        )
        free = GaugeMetricFamily(
            "odradek_log_dir_free_bytes", "Bytes free on a log directory's file system", labels=["dir"]
        )
        total = GaugeMetricFamily(
            "odradek_log_dir_total_bytes", "Size of a log directory's file system", labels=["dir"]
        )
        for d, is_offline in self.snap.log_dirs:
            offline.add_metric([d], int(is_offline))
            try:
                st = os.statvfs(d)
            except OSError:
                continue
            free.add_metric([d], st.f_bavail * st.f_frsize)
            total.add_metric([d], st.f_blocks * st.f_frsize)
        yield from (offline, free, total)


async def scrape(broker: Broker) -> bytes:
    """The ``/metrics`` body: the snapshot on the loop, the rest in a worker thread.

    The cyclic garbage collector is off from the snapshot's first row to the last formatted sample: a scrape makes
    short-lived objects by the hundred thousand (a row per partition, a sample per series), all freed by reference
    counting. With the collector on, those alive across a collection are promoted towards the oldest generation,
    and every few scrapes they set off a full collection, which scans the whole broker's heap while holding the
    GIL: 255 ms of a stalled event loop with 10,000 partitions (100 ms with 6,000), measured from a garbage
    collector callback in the broker. Off, they never reach a collection at all."""
    with _cyclic_gc_paused():
        snap = await snapshot(broker)
        return await asyncio.to_thread(render, snap)
