"""The broker's data directories: open, recover, create and delete partition logs; checkpoints.

Layout of each directory in ``log.dirs``::

    .lock                              flock()ed while a broker owns the directory
    .kafka_cleanshutdown               present only after a clean shutdown (removed at startup)
    recovery-point-offset-checkpoint   topic partition offset: everything below is fsynced
    log-start-offset-checkpoint        topic partition offset: first offset still visible
    replication-offset-checkpoint      topic partition offset: the high watermark
    cleaner-offset-checkpoint          topic partition offset: where the cleaner's next pass starts (compacted
                                       logs only; cleaner/cleaner.py)
    <topic>-<partition>/               one partition log each (see log.py, docs/log-format.md)

Invariants:
- Two managers (or brokers) never own the same directory at once: the second fails at startup
  with ``DataDirLockedError`` and touches nothing.
- Every checkpoint is replaced atomically (``checkpoint.write_atomically``).
- The clean-shutdown marker is written only after every log is flushed and every checkpoint
  written, and removed at startup before any write, so its presence proves the files are whole and
  lets startup skip scanning; startup time then does not depend on how much data is stored.
- A deleted log's directory is first renamed ``<name>.<uuid>-delete`` so a crash mid-delete never
  leaves a half-deleted log that would be opened again.

A failed directory (Kafka's offline log dir): a disk failure (``OSError``: EIO, ENOSPC...) of any log's
writes, of a checkpoint, or while loading the directory at startup takes the *whole directory* offline, as
Kafka does: its logs are closed and forgotten (their partitions are *offline* here: ``offline_partitions``),
nothing more is written there (no checkpoint, no clean-shutdown marker, no new log), and the listeners
(``on_dir_failure``: the replica manager) are told once. The other directories go on. The directory
comes back only with a restart of the broker once the disk is repaired. Every directory offline is fatal:
``all_offline`` tells the broker to stop.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from odradek.clock import SYSTEM_CLOCK, Clock
from odradek.protocol.errors import KafkaError, StorageError
from odradek.storage.checkpoint import OffsetCheckpointFile, fsync_directory, write_atomically
from odradek.storage.cleaner.cleaner import CleanerConfig, LogCleaner
from odradek.storage.config import MINUTES, LogConfig
from odradek.storage.log import Log, is_io_error, parse_log_dir_name
from odradek.storage.producer_state import ProducerStateHook

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
DELETE_DIR_SUFFIX = "-delete"

TopicPartition = tuple[str, int]


class DataDirLockedError(StorageError):
    """Another broker (or LogManager) holds this data directory."""


class LogExistsError(KafkaError):
    pass


class LogManager:
    """Owns the partition logs in one or more data directories."""

    def __init__(
        self,
        log_dirs: Sequence[Path | str],
        default_config: LogConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        topic_config: Callable[[str], LogConfig] | None = None,
        producer_state_factory: Callable[[Path, str], ProducerStateHook] | None = None,
        producer_expiration_check_interval_ms: int = 600_000,
        retention_check_interval_ms: int = 5 * MINUTES,
        checkpoint_interval_ms: int = 1 * MINUTES,
        background_flush: bool = True,
        cleaner_config: CleanerConfig | None = None,
    ) -> None:
        if not log_dirs:
            raise StorageError("no log directory given: set log.dirs")
        self.log_dirs = [Path(d).resolve() for d in log_dirs]
        self.default_config = default_config or LogConfig()
        self.clock = clock
        self._topic_config = topic_config
        self._producer_state_factory = producer_state_factory
        self.producer_expiration_check_interval_ms = producer_expiration_check_interval_ms
        self._last_producer_expiration_ms = clock.milliseconds()
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._locks: list[int] = []
        self._lock = threading.RLock()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="odradek-flush") if background_flush else None
        self._last_retention_ms = 0
        self._last_checkpoint_ms = 0
        self.started = False
        self.offline_dirs: dict[Path, str] = {}  # directory -> why it went offline
        self._offline: dict[TopicPartition, Path] = {}  # partitions whose log is in an offline directory
        # told (from whichever thread saw the failure) once per directory: (directory, its partitions, why)
        self.on_dir_failure: list[Callable[[Path, list[TopicPartition], str], None]] = []
        self.cleaner = LogCleaner(cleaner_config or CleanerConfig(), self._cleaner_logs, clock=clock)

    # -- startup ---------------------------------------------------------------------------------

    def startup(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Lock every directory, then open (recovering where needed) every log found in them."""
        for d in self.log_dirs:
            self._lock_dir(d)
        started = time.monotonic()
        for d in self.log_dirs:
            try:
                self._load_dir(d, progress)
            except DataDirLockedError:
                raise
            except (StorageError, OSError) as e:
                if not is_io_error(e):
                    raise
                self.fail_dir(d, e)
        if self.all_offline:
            self._release_locks()
            raise StorageError(f"every log directory failed ({self._offline_reasons()}): repair the disks and "
                               "restart the broker")
        self.started = True
        self.checkpoint()
        self.cleaner.start()
        log.info("loaded %d partition logs from %d directories in %.0f ms", len(self._logs), len(self.log_dirs),
                 (time.monotonic() - started) * 1000)

    def _load_dir(self, d: Path, progress: Callable[[int, int], None] | None) -> None:
        clean = (d / CLEAN_SHUTDOWN_FILE).exists()
        recovery = OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).read()
        starts = OffsetCheckpointFile(d / LOG_START_CHECKPOINT).read()
        hws = OffsetCheckpointFile(d / HIGH_WATERMARK_CHECKPOINT).read()
        candidates = sorted(p for p in d.iterdir() if p.is_dir())
        for n, sub in enumerate(candidates, 1):
            if sub.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(sub, ignore_errors=True)
                continue
            tp = parse_log_dir_name(sub.name)
            if tp is None:
                continue
            if tp in self._logs:
                raise StorageError(f"partition {sub.name} exists in two log directories: "
                                   f"{self._dir_of[tp]} and {d}; remove one")
            if not clean:
                log.info("recovering %s after an unclean shutdown", sub)
            self._adopt(tp, d, Log.open(
                sub,
                self.config_for(tp[0]),
                clock=self.clock,
                clean_shutdown=clean,
                recovery_point=recovery.get(tp, 0),
                log_start_offset=starts.get(tp, 0),
                high_watermark=hws.get(tp, 0),
                producer_state=self._producer_state(sub),
                schedule=self._schedule,
            ))
            if progress is not None:
                progress(n, len(candidates))
        if clean:
            (d / CLEAN_SHUTDOWN_FILE).unlink()
            fsync_directory(d)

    def _adopt(self, tp: TopicPartition, d: Path, lg: Log) -> Log:
        lg.on_io_error = lambda e: self.fail_dir(d, e)
        self._logs[tp] = lg
        self._dir_of[tp] = d
        return lg

    # -- failed directories ----------------------------------------------------------------------

    def fail_dir(self, d: Path, error: BaseException) -> None:
        """Take ``d`` offline after a disk failure (idempotent; any thread): close and forget its logs, remember
        their partitions as offline, tell the listeners."""
        why = f"{type(error.__cause__ or error).__name__}: {error}"
        with self._lock:
            if d in self.offline_dirs or d not in self.log_dirs:
                return
            self.offline_dirs[d] = why
            gone = [tp for tp, owner in self._dir_of.items() if owner == d]
            doomed = [self._logs.pop(tp) for tp in gone]
            for tp in gone:
                del self._dir_of[tp]
                self._offline[tp] = d
            for tp in _partition_dirs(d):  # logs not loaded yet (a failure during startup): offline as well
                if tp not in self._logs:
                    self._offline.setdefault(tp, d)
            offline = sorted(tp for tp, owner in self._offline.items() if owner == d)
        log.error("log directory %s failed (%s): its %d partitions are offline on this broker; the other "
                  "directories go on. Repair the disk, then restart the broker", d, why, len(offline))
        for lg in doomed:
            lg.on_io_error = None
            try:
                lg.close()
            except Exception as e:  # the disk is failing: closing may fail too, nothing more to save there
                log.debug("closing %s in the failed directory: %s", lg.name, e)
        for listener in list(self.on_dir_failure):
            try:
                listener(d, offline, why)
            except Exception:
                log.exception("reacting to the failure of %s failed", d)

    @property
    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    @property
    def all_offline(self) -> bool:
        return not self.online_dirs

    def is_offline(self, topic: str, partition: int) -> bool:
        """Whether the partition's log is in a failed directory of this broker."""
        return (topic, partition) in self._offline

    def offline_partitions(self) -> list[TopicPartition]:
        with self._lock:
            return sorted(self._offline)

    def _offline_reasons(self) -> str:
        return "; ".join(f"{d}: {why}" for d, why in self.offline_dirs.items())

    def _lock_dir(self, d: Path) -> None:
        try:
            d.mkdir(parents=True, exist_ok=True)
            fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(f"cannot use log directory {d}: {e}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            self._release_locks()
            raise DataDirLockedError(
                f"log directory {d} is in use by another broker (its {LOCK_FILE} is locked): "
                "stop that broker or choose another log.dirs"
            ) from None
        self._locks.append(fd)

    def _release_locks(self) -> None:
        for fd in self._locks:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._locks.clear()

    def _producer_state(self, directory: Path) -> ProducerStateHook | None:
        """The producer state of the log in ``directory`` (named ``<topic>-<partition>``)."""
        return self._producer_state_factory(directory, directory.name) if self._producer_state_factory else None

    def _schedule(self, task: Callable[[], None]) -> None:
        if self._executor is None:
            task()
            return

        def run() -> None:
            try:
                task()
            except Exception:
                log.exception("background flush failed")

        self._executor.submit(run)

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_config(topic) if self._topic_config else self.default_config

    # -- logs ------------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def logs(self) -> Iterator[Log]:
        return iter(list(self._logs.values()))

    def create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """Create an empty log in the directory holding the fewest logs."""
        self._check_started()
        with self._lock:
            tp = (topic, partition)
            if tp in self._logs:
                raise LogExistsError(f"partition {topic}-{partition} already exists")
            if tp in self._offline:
                raise StorageError(f"the log of {topic}-{partition} is in the failed log directory "
                                   f"{self._offline[tp]}: it stays offline on this broker until a restart")
            online = self.online_dirs
            if not online:
                raise StorageError(f"every log directory failed ({self._offline_reasons()})")
            counts = {d: 0 for d in online}
            for owner in self._dir_of.values():
                counts[owner] += 1
            d = min(online, key=lambda x: counts[x])
            try:
                created = Log.open(
                    d / f"{topic}-{partition}",
                    config or self.config_for(topic),
                    clock=self.clock,
                    producer_state=self._producer_state(d / f"{topic}-{partition}"),
                    schedule=self._schedule,
                )
            except StorageError as e:
                if is_io_error(e):
                    self.fail_dir(d, e)
                raise
            return self._adopt(tp, d, created)

    def _cleaner_logs(self) -> Iterator[tuple[TopicPartition, Path, Log]]:
        with self._lock:
            items = [(tp, self._dir_of[tp], lg) for tp, lg in self._logs.items()]
        return iter(items)

    def dir_of(self, topic: str, partition: int) -> Path | None:
        """The log directory holding the partition's log, None if there is none here."""
        return self._dir_of.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        with self._lock:
            return self.get_log(topic, partition) or self.create_log(topic, partition, config)

    def delete_log(self, topic: str, partition: int) -> None:
        """Remove the log and all its files."""
        with self._lock:
            tp = (topic, partition)
            victim = self._logs.pop(tp, None)
            d = self._dir_of.pop(tp, None)
        if victim is None or d is None:
            raise KeyError(f"no log for {topic}-{partition}")
        victim.close()
        doomed = d / f"{victim.directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        try:
            os.replace(victim.directory, doomed)
            fsync_directory(d)
            shutil.rmtree(doomed)
        except OSError as e:
            raise StorageError(f"cannot delete log {victim.directory}: {e}") from e
        self.checkpoint()

    def forget_offline(self, topic: str, partition: int) -> None:
        """This broker is no longer a replica of an offline partition: stop reporting it (its files stay in
        the failed directory; a restart after the repair deletes them as any foreign log)."""
        with self._lock:
            self._offline.pop((topic, partition), None)

    def _check_started(self) -> None:
        if not self.started:
            raise StorageError("the log manager has not started (call startup())")

    # -- periodic work ---------------------------------------------------------------------------

    def tick(self) -> None:
        """Periodic duties, called by the broker's scheduler: flush.ms, retention, delayed file
        deletion and checkpoints, each at its own interval."""
        now = self.clock.milliseconds()
        retention_due = now - self._last_retention_ms >= self.retention_check_interval_ms
        for lg in self.logs():
            try:
                lg.maybe_flush()
                if retention_due:
                    lg.delete_retained_segments()
                lg.purge_deleted()
            except KafkaError as e:
                if not is_io_error(e):  # a disk failure took the directory offline (fail_dir logged it)
                    log.exception("periodic maintenance of %s failed", lg.name)
        if retention_due:
            self._last_retention_ms = now
        if now - self._last_producer_expiration_ms >= self.producer_expiration_check_interval_ms:
            self._last_producer_expiration_ms = now
            for lg in self.logs():
                lg.remove_expired_producers(now)
        if now - self._last_checkpoint_ms >= self.checkpoint_interval_ms:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Write recovery points, log start offsets and high watermarks of every directory."""
        failed: list[tuple[Path, StorageError]] = []
        with self._lock:
            for d in self.online_dirs:
                mine = {tp: lg for tp, lg in self._logs.items() if self._dir_of[tp] == d}
                try:
                    OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).write(
                        {tp: lg.recovery_point for tp, lg in mine.items()})
                    OffsetCheckpointFile(d / LOG_START_CHECKPOINT).write(
                        {tp: lg.log_start_offset for tp, lg in mine.items()})
                    OffsetCheckpointFile(d / HIGH_WATERMARK_CHECKPOINT).write(
                        {tp: lg.high_watermark for tp, lg in mine.items()})
                except StorageError as e:
                    if not is_io_error(e):
                        raise
                    failed.append((d, e))
            self._last_checkpoint_ms = self.clock.milliseconds()
        for d, e in failed:
            self.fail_dir(d, e)

    def flush_all(self) -> None:
        for lg in self.logs():
            try:
                lg.flush()
            except StorageError as e:
                if not is_io_error(e):  # a disk failure took its directory offline: the others are flushed
                    raise

    # -- shutdown --------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints, mark the shutdown clean, unlock."""
        self.cleaner.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if not self.started:
            self._release_locks()
            return
        self.flush_all()
        self.checkpoint()
        for lg in self.logs():
            lg.close()
        for d in self.online_dirs:  # a failed directory must be recovered (scanned) at the next start
            write_atomically(d / CLEAN_SHUTDOWN_FILE, b"")
        self._logs.clear()
        self._dir_of.clear()
        self._release_locks()
        self.started = False


def _partition_dirs(d: Path) -> list[TopicPartition]:
    """The partitions whose log directories ``d`` holds, as far as it can still be listed."""
    try:
        names = [p.name for p in d.iterdir()]
    except OSError:
        return []
    return [tp for name in names if not name.endswith(DELETE_DIR_SUFFIX) and (tp := parse_log_dir_name(name))]


