"""The leader-epoch cache of one partition: which leader epoch began at which offset.

Kafka's LeaderEpochFileCache. Each entry ``(epoch, start_offset)`` says that the records from
``start_offset`` up to the next entry's start offset (or the log end) were written by the leader of
``epoch``. Followers and consumers use it through OffsetForLeaderEpoch to find where their copy of
the log diverges from the leader's.

On disk: ``<partition dir>/leader-epoch-checkpoint`` in Kafka's checkpoint format (see
``checkpoint.py``), entry lines ``epoch start_offset``::

    0
    2
    0 0
    3 1200

Invariants:
- Entries are sorted by epoch; epochs and start offsets are both strictly increasing, and both are
  non-negative. A file that breaks this raises ``CheckpointError`` naming the line.
- Every change is written to the checkpoint atomically before it becomes visible in memory: if the
  write fails (``StorageError``) the cache is unchanged, in memory and on disk. Changes are rare
  (leadership changes, truncation, log start advancing), so writing synchronously is cheap; nothing
  is buffered and there is no ``flush``.
- Operations that change nothing do not touch the file. A cache that was never changed has no file.
- Not thread-safe: the partition log serialises access.

Deliberate differences from Kafka's current LeaderEpochFileCache (which asynchronously flushes
truncations; we flush everything synchronously):
- ``assign`` with an epoch lower than the latest is ignored with a warning (Kafka up to 1.x did
  this; later Kafka truncates the higher epochs instead). Assigning the latest epoch again is a
  no-op even with a lower start offset (later Kafka moves that epoch's start back).
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path

from odradek.storage.checkpoint import (
    CheckpointError,
    encode_checkpoint,
    parse_int,
    read_checkpoint_lines,
    write_atomically,
)

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_FILENAME",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "LeaderEpochCache",
]

LEADER_EPOCH_CHECKPOINT_FILENAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
"""Wire value of "no epoch" in OffsetForLeaderEpoch (and of an unset partition leader epoch)."""
UNDEFINED_EPOCH_OFFSET = -1
"""Wire value of "no end offset" in OffsetForLeaderEpoch."""

logger = logging.getLogger(__name__)


class LeaderEpochCache:
    """Leader epoch -> start offset for one partition, persisted in ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self._load()

    def __repr__(self) -> str:
        return f"LeaderEpochCache({str(self.path)!r}, entries={self.entries!r})"

    # ---- reading -------------------------------------------------------------------------------

    @property
    def entries(self) -> list[tuple[int, int]]:
        """A copy of the entries, ``(epoch, start_offset)`` in increasing order."""
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the record at ``offset``: the last entry starting at or before it.

        ``None`` if the cache is empty or ``offset`` lies before the first entry's start.
        """
        i = bisect.bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` as OffsetForLeaderEpoch answers for ``requested_epoch``.

        As Kafka's ``LeaderEpochFileCache.endOffsetFor``:
        - ``requested_epoch`` is ``UNDEFINED_EPOCH``, the cache is empty, or ``requested_epoch``
          is above the latest epoch -> ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``;
        - ``requested_epoch`` is the latest epoch -> ``(latest, log_end_offset)``;
        - otherwise the end offset is the start offset of the first epoch above
          ``requested_epoch``, and the epoch is the largest known epoch <= ``requested_epoch``;
          if there is none (``requested_epoch`` predates the first entry, e.g. after the log
          start advanced), the epoch returned is ``requested_epoch`` itself, so that the asker
          truncates to the first known epoch's start rather than falling back to its high
          watermark.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        end_offset = self._starts[higher]
        if higher == 0:
            return requested_epoch, end_offset
        return self._epochs[higher - 1], end_offset

    # ---- changing ------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` began at ``start_offset``.

        - the latest epoch again: no-op;
        - an epoch lower than the latest: ignored, with a warning (records arrived out of order);
        - a higher epoch: appended, after removing the entries that start at or after
          ``start_offset`` (a new leader's log replaced them).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry (epoch={epoch}, start_offset={start_offset})")
        latest = self.latest_epoch
        if latest is not None and epoch <= latest:
            if epoch < latest:
                logger.warning(
                    "%s: ignoring leader epoch %d starting at offset %d: it is lower than the latest "
                    "epoch %d, which implies records arrived out of order",
                    self.path,
                    epoch,
                    start_offset,
                    latest,
                )
            return
        keep = bisect.bisect_left(self._starts, start_offset)
        removed = self.entries[keep:]
        if len(removed) > 1 or (removed and removed[0][1] != start_offset):
            # One removed entry with the same start offset is the expected case (an epoch that
            # wrote nothing); anything else means data of those epochs was discarded.
            logger.warning(
                "%s: leader epoch %d starting at offset %d truncates conflicting entries %s",
                self.path,
                epoch,
                start_offset,
                removed,
            )
        self._replace([*self._epochs[:keep], epoch], [*self._starts[:keep], start_offset])

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove the entries starting at or after ``end_offset`` (the log was truncated to it).

        A negative ``end_offset`` (an undefined offset) changes nothing, as in Kafka.
        """
        if end_offset < 0:
            return
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            self._replace(self._epochs[:keep], self._starts[:keep])

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget what lies before ``start_offset`` (the log start offset advanced to it).

        The last entry starting at or before ``start_offset`` is kept, moved to start there; the
        entries before it are removed. An entry starting exactly at ``start_offset`` is unchanged.
        """
        covering = bisect.bisect_right(self._starts, start_offset) - 1
        if covering < 0 or (covering == 0 and self._starts[0] == start_offset):
            return
        self._replace(self._epochs[covering:], [start_offset, *self._starts[covering + 1 :]])

    def clear(self) -> None:
        """Remove every entry; the checkpoint is rewritten empty."""
        self._replace([], [])

    # ---- persistence ---------------------------------------------------------------------------

    def _replace(self, epochs: list[int], starts: list[int]) -> None:
        lines = [f"{e} {s}" for e, s in zip(epochs, starts, strict=True)]
        write_atomically(self.path, encode_checkpoint(lines))
        self._epochs, self._starts = epochs, starts

    def _load(self) -> None:
        lines = read_checkpoint_lines(self.path)
        if lines is None:
            return
        epochs: list[int] = []
        starts: list[int] = []
        for number, line in lines:
            epoch, start = self._parse_entry(number, line)
            if epochs and (epoch <= epochs[-1] or start <= starts[-1]):
                raise CheckpointError(
                    f"{self.path}: line {number}: entry ({epoch}, {start}) does not follow "
                    f"({epochs[-1]}, {starts[-1]}); epochs and start offsets must both increase"
                )
            epochs.append(epoch)
            starts.append(start)
        self._epochs, self._starts = epochs, starts

    def _parse_entry(self, number: int, line: str) -> tuple[int, int]:
        fields = line.split(" ")
        if len(fields) != 2:
            raise CheckpointError(
                f"{self.path}: line {number}: expected 'epoch start_offset', found {line!r}"
            )
        epoch = parse_int(self.path, number, fields[0])
        start = parse_int(self.path, number, fields[1])
        if epoch < 0 or start < 0:
            raise CheckpointError(f"{self.path}: line {number}: negative epoch or start offset in {line!r}")
        return epoch, start
