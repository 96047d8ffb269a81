"""The log cleaner of a broker: which log to clean next, who cleans it, and where its progress is kept (Kafka's
``LogCleaner`` and ``LogCleanerManager``).

Execution model: cleaning is CPU-heavy (every record of a compacted log is read at each pass: a compiled kernel,
``compiled_pass``, with the reference Python code for what it leaves), and the broker's event loop must not wait
on it. So each of the ``log.cleaner.threads`` cleaner threads owns one worker *process* (spawned on first use, at
nice 19 so that the broker's threads win the CPU; it loads the kernel, then says "ready"; numba is imported by
workers only, never by the broker): the thread plans a pass from
a consistent view of the log (``Log.cleaning_view``), sends the task to its worker (``clean.clean`` writes
``*.cleaned`` files), waits without holding any lock, and swaps the result in under the log's lock
(``Log.replace_with_cleaned``: renames only). The worker's memory is its offset map
(``log.cleaner.dedupe.buffer.size`` / threads) plus a few I/O buffers (``compiled_pass``).

Choosing a log (``LogCleanerManager.grabFilthiestCompactedLog``): among the logs whose cleanup.policy includes
compact and which no thread is cleaning, those whose dirty ratio reaches ``min.cleanable.dirty.ratio`` or whose
oldest dirty record waited past ``max.compaction.lag.ms``; the dirtiest first. Nothing to do: sleep
``log.cleaner.backoff.ms`` (or until woken).

Invariants:
- ``cleaner-offset-checkpoint`` of each log directory maps a partition to the first offset not yet cleaned (the
  end of its last pass). It is rewritten (atomically) after each pass; a missing or damaged file means "clean
  from the start" (a warning, never a failure); entries of logs no longer in the directory are dropped.
- A log is cleaned by at most one thread at a time. A pass whose segments changed meanwhile (truncated, deleted
  by retention, the log deleted or closed) is thrown away whole: nothing is swapped in, the checkpoint stays.
- A log whose data the cleaner cannot read (a corrupt batch) is marked uncleanable and skipped until restart
  (Kafka's uncleanable partitions). A disk failure of a pass (ENOSPC, EIO... while the worker writes its
  ``.cleaned`` files) goes to the log's ``on_io_error``: its manager takes the directory offline, as Kafka's.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.protocol.errors import CorruptRecordError, StorageError
from odradek.storage.checkpoint import OffsetCheckpointFile, write_atomically
from odradek.storage.cleaner.clean import CleanResult, CleanTask, clean, discard_cleaned
from odradek.storage.cleaner.planning import Cleanable, compaction_overdue

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANER_METRICS = "log-cleaner-metrics"  # Kafka's LogCleaner gauges, rewritten after each pass (dump-log shows it)
TopicPartition = tuple[str, int]
_PR_SET_PDEATHSIG = 1
WORKER_NICENESS = 19  # the lowest priority: the broker's threads win any contended CPU


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` keys, with Kafka's defaults."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = float("inf")
    backoff_ms: int = 15_000

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"log.cleaner.threads={self.threads} is invalid: it must be at least 1")
        if self.dedupe_buffer_size // self.threads < 1024 * 1024:
            raise ValueError(f"log.cleaner.dedupe.buffer.size={self.dedupe_buffer_size} is too small: each of the "
                             f"{self.threads} cleaner threads needs at least 1 MiB")
        if self.io_buffer_size < 4096:
            raise ValueError(f"log.cleaner.io.buffer.size={self.io_buffer_size} is invalid: at least 4096")


@dataclass(slots=True)
class CleanerStats:
    """What operators watch (Kafka's LogCleaner metrics), for logs and tools."""

    passes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    last_pass_ms: int = -1  # when the last pass ended (-1: never)
    max_clean_seconds: float = 0.0  # of the last run of passes, as Kafka's max-clean-time-secs
    max_buffer_utilization: float = 0.0
    max_compaction_delay_ms: int = 0  # how far past max.compaction.lag.ms a log was when cleaned
    max_dirty_ratio: float = 0.0
    uncleanable: dict[TopicPartition, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Target:
    tp: TopicPartition
    directory: Path  # the data directory holding the log
    log: Any  # odradek.storage.log.Log (not imported: the log imports the cleaner package)


class _Worker:
    """One worker process and the pipe to it."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, os.getpid()), name="odradek-cleaner-worker",
                                   daemon=True)
        self.process.start()
        child.close()
        self.ready = False  # the worker says "ready" once its compiled kernel is loaded

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the worker has loaded its compiled kernel (tools and benchmarks); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while not self.ready and self.conn.poll(max(0.0, deadline - time.monotonic())):
            kind, _ = self.conn.recv()
            self.ready = kind == "ready"
        return self.ready

    def run(self, task: CleanTask, stopping: threading.Event) -> CleanResult:
        self.conn.send(task)
        while True:
            while not self.conn.poll(0.2):
                if stopping.is_set():
                    raise _Stopped
                if not self.process.is_alive():
                    raise StorageError(f"the cleaner worker process died (exit code {self.process.exitcode})")
            kind, value = self.conn.recv()
            if kind == "ready":
                self.ready = True
                continue
            if kind == "ok":
                assert isinstance(value, CleanResult)
                return value
            raise _WorkerError(*value)

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(5)
        self.conn.close()


class _Stopped(Exception):
    pass


class _WorkerError(Exception):
    def __init__(self, kind: str, message: str, corrupt: bool, errno: int | None = None) -> None:
        super().__init__(f"{kind}: {message}")
        self.corrupt = corrupt
        self.errno = errno


# A worker's write failing with one of these is a failure of the disk: the log's directory goes offline, as
# Kafka's cleaner reports an IOException to its LogDirFailureChannel (ENOENT is not: the log was deleted meanwhile).
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, errno.EROFS, errno.EDQUOT})


def _errno_of(e: BaseException) -> int | None:
    if isinstance(e, OSError):
        return e.errno
    return e.__cause__.errno if isinstance(e.__cause__, OSError) else None


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when the broker dies (prctl PR_SET_PDEATHSIG): a worker outliving a
    killed broker would go on writing ``.cleaned`` files beside the restarted broker's cleaner."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the broker died before the call above
        os._exit(1)


def _worker_main(conn: multiprocessing.connection.Connection, parent: int) -> None:
    """A worker process: clean each task received until the pipe closes."""
    _die_with_parent(parent)
    try:
        os.nice(WORKER_NICENESS)
    except OSError:
        pass
    from odradek.storage.cleaner.compiled_pass import warm_up  # numba: in workers only, not in the broker

    warm_up()  # a pass sent meanwhile waits in the pipe
    conn.send(("ready", None))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        try:
            answer: tuple[str, Any] = ("ok", clean(task))
        except Exception as e:  # reported to the cleaner thread, which decides
            answer = ("error", (type(e).__name__, str(e), isinstance(e, CorruptRecordError), _errno_of(e)))
        try:
            conn.send(answer)
        except OSError:  # the broker's end is closed: it is exiting (a killed broker closes its files before the
            os._exit(1)  # kernel sends the death signal), and nobody waits for this pass


def plan_pass(lg: Any, view: Any, c: Cleanable, now_ms: int, *, memory_bytes: int, load_factor: float = 0.9,
              io_buffer_bytes: int = 512 * 1024,
              max_io_bytes_per_second: float = float("inf")) -> tuple[CleanTask, tuple[Any, ...]]:
    """The task of a pass over ``lg`` (a ``Log``) cleaning what ``c`` allows of ``view`` (its ``cleaning_view``),
    and the log's segments the task covers (whole segments below the first uncleanable offset)."""
    fu = c.first_uncleanable  # (an empty active segment starting there has next_offset == fu too: not covered)
    summaries = tuple(s for s in view.summaries if s.base_offset < fu and s.next_offset <= fu)
    cfg = lg.config
    task = CleanTask(
        directory=str(lg.directory), name=lg.name, segments=summaries, first_dirty=c.first_dirty,
        first_uncleanable=c.first_uncleanable, aborted=view.aborted, producer_last_offsets=view.producer_last_offsets,
        config=cfg, now_ms=now_ms, delete_retention_ms=cfg.delete_retention_ms, memory_bytes=memory_bytes,
        load_factor=load_factor, io_buffer_bytes=io_buffer_bytes, max_io_bytes_per_second=max_io_bytes_per_second)
    return task, view.segments[: len(summaries)]


def swap_in(lg: Any, segments: tuple[Any, ...], result: CleanResult) -> bool:
    """Swap each cleaned segment of ``result`` in for the ones of ``segments`` it replaces; False (the rest
    discarded) at the first the log refuses because it changed meanwhile."""
    by_base = {s.base_offset: s for s in segments}
    for k, cleaned in enumerate(result.segments):
        if not lg.replace_with_cleaned([by_base[b] for b in cleaned.replaces], cleaned):
            for rest in result.segments[k + 1 :]:
                discard_cleaned(lg.directory, rest.base_offset)
            return False
    return True


class LogCleaner:
    """Cleans the compacted logs that ``logs()`` yields; see the module docstring."""

    def __init__(self, config: CleanerConfig, logs: Callable[[], Iterator[tuple[TopicPartition, Path, Any]]], *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self._logs = logs
        self.clock = clock
        self.stats = CleanerStats()
        self._lock = threading.Lock()
        self._in_progress: set[TopicPartition] = set()
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._workers: list[_Worker | None] = [None] * config.threads

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if not self.config.enable or self._threads:
            return
        self._stopping.clear()
        for i in range(self.config.threads):
            t = threading.Thread(target=self._run, args=(i,), name=f"odradek-cleaner-{i}", daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self) -> None:
        """Stop the threads and their workers (a pass under way is abandoned: its files are removed)."""
        self._stopping.set()
        self._wake.set()
        for t in self._threads:
            t.join(30)
        self._threads.clear()
        for w in self._workers:
            if w is not None:
                w.stop()
        self._workers = [None] * self.config.threads

    def wake(self) -> None:
        """Look for work now (a log's config changed, a test wants a pass)."""
        self._wake.set()

    # -- checkpoints -------------------------------------------------------------------------------

    def _checkpoint_of(self, directory: Path) -> dict[TopicPartition, int]:
        with self._lock:
            cp = self._checkpoints.get(directory)
            if cp is None:
                try:
                    cp = OffsetCheckpointFile(directory / CLEANER_CHECKPOINT).read()
                except StorageError as e:
                    log.warning("%s is unreadable (%s): every compacted log of %s is cleaned from its start",
                                CLEANER_CHECKPOINT, e, directory)
                    cp = {}
                self._checkpoints[directory] = cp
            return cp

    def first_dirty_offset(self, directory: Path, tp: TopicPartition) -> int | None:
        return self._checkpoint_of(directory).get(tp)

    def _record_progress(self, directory: Path, tp: TopicPartition, offset: int) -> None:
        cp = self._checkpoint_of(directory)
        with self._lock:
            cp[tp] = offset
            live = {t for t, d, _ in self._logs() if d == directory}
            entries = {t: o for t, o in cp.items() if t in live}
            self._checkpoints[directory] = entries
        OffsetCheckpointFile(directory / CLEANER_CHECKPOINT).write(entries)

    # -- choosing ----------------------------------------------------------------------------------

    def _grab_filthiest(self) -> tuple[_Target, Any, Any, bool] | None:
        now = self.clock.milliseconds()
        best: tuple[float, _Target, Any, Any, bool] | None = None
        with self._lock:
            busy = set(self._in_progress)
        max_ratio = 0.0
        for tp, directory, lg in self._logs():
            cfg = lg.config
            if not cfg.compact or tp in busy or tp in self.stats.uncleanable or lg.closed:
                continue
            view = lg.cleaning_view()
            if len(view.segments) < 2:
                continue
            c = view.cleanable(self.first_dirty_offset(directory, tp), now, cfg.min_compaction_lag_ms)
            if c.first_uncleanable <= c.first_dirty or c.dirty_bytes == 0:
                continue
            max_ratio = max(max_ratio, c.dirty_ratio)
            overdue = compaction_overdue(view.summaries, c.first_dirty, now_ms=now,
                                         max_compaction_lag_ms=cfg.max_compaction_lag_ms)
            if c.dirty_ratio < cfg.min_cleanable_dirty_ratio and not overdue:
                continue
            score = 2.0 if overdue else c.dirty_ratio  # overdue logs first, as Kafka
            if best is None or score > best[0]:
                best = (score, _Target(tp, directory, lg), view, c, overdue)
        self.stats.max_dirty_ratio = max_ratio
        if best is None:
            return None
        _, target, view, c, overdue = best
        with self._lock:
            if target.tp in self._in_progress:
                return None
            self._in_progress.add(target.tp)
        return target, view, c, overdue

    # -- cleaning ----------------------------------------------------------------------------------

    def _run(self, index: int) -> None:
        while not self._stopping.is_set():
            did = False
            try:
                did = self.clean_once(index)
            except _Stopped:
                return
            except Exception:
                log.exception("the log cleaner failed; it goes on after log.cleaner.backoff.ms")
            if not did:
                self._wake.wait(self.config.backoff_ms / 1000)
                self._wake.clear()

    def _worker(self, index: int) -> _Worker:
        w = self._workers[index]
        if w is None or not w.process.is_alive():
            if w is not None:
                w.stop()
            w = self._workers[index] = _Worker()
        return w

    def clean_once(self, index: int = 0, *, in_process: bool = False) -> bool:
        """Clean the filthiest log, if any is due; True if one was cleaned. ``in_process`` runs the pass in this
        thread instead of a worker (tests and tools)."""
        grabbed = self._grab_filthiest()
        if grabbed is None:
            return False
        target, view, c, overdue = grabbed
        try:
            self._clean(index, target, view, c, overdue, in_process)
        finally:
            with self._lock:
                self._in_progress.discard(target.tp)
        return True

    def _clean(self, index: int, target: _Target, view: Any, c: Any, overdue: bool, in_process: bool) -> None:
        lg = target.log
        cfg = lg.config
        now = self.clock.milliseconds()
        task, segments = plan_pass(
            lg, view, c, now, memory_bytes=self.config.dedupe_buffer_size // self.config.threads,
            load_factor=self.config.io_buffer_load_factor, io_buffer_bytes=self.config.io_buffer_size,
            max_io_bytes_per_second=self.config.io_max_bytes_per_second / self.config.threads)
        if overdue:
            oldest = next((s.earliest_timestamp if s.earliest_timestamp >= 0 else s.largest_timestamp
                           for s in task.segments if s.next_offset > c.first_dirty), -1)
            if oldest >= 0:
                delay = now - oldest - cfg.max_compaction_lag_ms
                self.stats.max_compaction_delay_ms = max(self.stats.max_compaction_delay_ms, delay)
        try:
            result = clean(task) if in_process else self._worker(index).run(task, self._stopping)
        except (_WorkerError, CorruptRecordError, OSError, StorageError) as e:  # a worker's, or in process
            if isinstance(e, CorruptRecordError) or (isinstance(e, _WorkerError) and e.corrupt):
                self._mark_uncleanable(target.tp, str(e))
                self._publish(target.directory)
                return
            if lg.closed:  # deleted or moved while it was cleaned: nothing to report
                log.info("%s: cleaning pass abandoned: the log was closed meanwhile (%s)", lg.name, e)
                return
            self._maybe_disk_failure(lg, e, e.errno if isinstance(e, _WorkerError) else _errno_of(e))
            raise
        if not swap_in(lg, segments, result):
            log.info("%s: cleaning pass thrown away: the log changed while it was cleaned", lg.name)
            return
        self._record_progress(target.directory, target.tp, result.end_offset)
        self._account(lg.name, c, result)
        self._publish(target.directory)

    @staticmethod
    def _maybe_disk_failure(lg: Any, e: BaseException, code: int | None) -> None:
        """Tell the log (so its manager takes the directory offline) about a disk failure of the pass."""
        if code in _DISK_ERRNOS and not lg.closed and lg.on_io_error is not None:
            failure = StorageError(f"{lg.name}: the log cleaner could not write its cleaned segment: {e}")
            failure.__cause__ = OSError(code, os.strerror(code))
            lg.on_io_error(failure)

    def _mark_uncleanable(self, tp: TopicPartition, why: str) -> None:
        self.stats.uncleanable[tp] = why
        log.error("%s-%d is uncleanable: %s. It is skipped until the broker restarts; its data are served as they "
                  "are (dump it with odradek dump-log to find the damage)", tp[0], tp[1], why)

    def _account(self, name: str, c: Any, result: CleanResult) -> None:
        s = result.stats
        st = self.stats
        st.passes += 1
        st.bytes_read += s.bytes_read
        st.bytes_written += s.bytes_written
        st.last_pass_ms = self.clock.milliseconds()
        st.max_clean_seconds = s.seconds
        st.max_buffer_utilization = s.map_utilization
        rate = s.bytes_read / s.seconds / 1e6 if s.seconds > 0 else 0.0
        log.info(
            "%s: cleaned up to offset %d in %.2f s (%.1f MB/s): %d of %d records kept, %.1f MB read, %.1f MB "
            "written (%.0f%% of the log was dirty); %d tombstones, %d transaction markers, %d aborted batches and %d "
            "records without a key removed; offset map %.1f%% full (%d keys); throttled %.2f s; "
            "uncleanable partitions %d, max compaction delay %.1f s",
            name, result.end_offset, s.seconds, rate, s.records_kept, s.records_read, s.bytes_read / 1e6,
            s.bytes_written / 1e6, 100 * c.dirty_ratio, s.tombstones_removed, s.markers_removed,
            s.aborted_batches_removed, s.keyless_removed, 100 * s.map_utilization, s.map_records,
            s.throttled_seconds, len(st.uncleanable), st.max_compaction_delay_ms / 1000)

    def _publish(self, directory: Path) -> None:
        """The gauges as ``name value`` lines in ``directory``/log-cleaner-metrics (atomically), with the
        uncleanable partitions and why: what ``odradek dump-log`` shows an operator."""
        lines = [f"{k} {v:g}" for k, v in self.metrics().items()]
        lines += [f"uncleanable {t}-{p}: {why}" for (t, p), why in sorted(self.stats.uncleanable.items())]
        try:
            write_atomically(directory / CLEANER_METRICS, ("\n".join(lines) + "\n").encode())
        except StorageError as e:
            log.warning("cannot write %s in %s: %s", CLEANER_METRICS, directory, e)

    def metrics(self) -> dict[str, float]:
        """Kafka's LogCleaner gauges, by their names."""
        st = self.stats
        now = self.clock.milliseconds()
        return {
            "uncleanable-partitions-count": float(len(st.uncleanable)),
            "max-clean-time-secs": st.max_clean_seconds,
            "max-compaction-delay-secs": st.max_compaction_delay_ms / 1000,
            "max-buffer-utilization-percent": 100 * st.max_buffer_utilization,
            "max-dirty-percent": 100 * st.max_dirty_ratio,
            "cleaner-recopy-percent": 100 * st.bytes_written / st.bytes_read if st.bytes_read else 0.0,
            "time-since-last-run-ms": float(now - st.last_pass_ms) if st.last_pass_ms >= 0 else -1.0,
        }


def wait_for_passes(cleaner: LogCleaner, passes: int, timeout_s: float) -> bool:
    """Block until the cleaner completed ``passes`` passes in all (tools and tests); False on timeout."""
    deadline = time.monotonic() + timeout_s
    while cleaner.stats.passes < passes:
        if time.monotonic() > deadline:
            return False
        cleaner.wake()
        time.sleep(0.05)
    return True
