"""The crash-safe swap of cleaned segments into a log directory (Kafka's ``.cleaned`` / ``.swap`` steps).

A cleaned segment replaces a group of consecutive segments and is named after the first of them. Its files go
through these states (the log file always last, so its rename is the step that decides):

1. ``<base>.{index,timeindex,txnindex,log}.cleaned``: written and fsynced by the worker (``clean.py``).
2. ``commit``: each ``.cleaned`` renamed to ``.swap``, the log file last; the directory fsynced. Once
   ``<base>.log.swap`` exists the swap has happened, whatever else a crash leaves behind.
3. The replaced segments' files renamed ``*.deleted`` (``LogSegment.mark_deleted``; readers keep their handles).
4. ``finish``: each ``.swap`` renamed to its final name, the log file last; the directory fsynced.

``recover`` runs when a log opens, before its segments are listed, and leaves either the old segments or the new
one, never neither and never both:
- ``*.cleaned`` files and the worker's scratch directory are removed: a swap that never committed.
- For every ``<base>.log.swap``: the segments it replaced are those whose base offset lies in
  ``[base, the swap's next offset)`` (a replaced segment none of whose records survived may remain: its
  records are then simply still there, uncleaned). Their files are removed, and every ``<base>.*.swap`` takes
  its final name (an index already renamed in step 4 is the new one: step 3 moved the old one away first).
- Index ``.swap`` files without a ``<base>.log.swap`` belong to a commit cut short: removed.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from odradek.protocol import batch as rb
from odradek.storage.checkpoint import fsync_directory
from odradek.storage.cleaner.clean import CLEANED_SUFFIX, SCRATCH_DIR, SEGMENT_SUFFIXES
from odradek.storage.segment import LOG_SUFFIX, segment_name

log = logging.getLogger(__name__)

SWAP_SUFFIX = ".swap"


def _rename_all(directory: Path, base_offset: int, old_suffix: str, new_suffix: str) -> None:
    stem = segment_name(base_offset)
    for suffix in SEGMENT_SUFFIXES:
        src = directory / (stem + suffix + old_suffix)
        if src.exists():
            os.replace(src, directory / (stem + suffix + new_suffix))
    fsync_directory(directory)


def commit(directory: Path, base_offset: int) -> None:
    """Step 2: the cleaned segment at ``base_offset`` becomes the swap (decided once its log file is renamed)."""
    _rename_all(directory, base_offset, CLEANED_SUFFIX, SWAP_SUFFIX)


def finish(directory: Path, base_offset: int) -> None:
    """Step 4: the swap's files take their final names (after the replaced segments were renamed away)."""
    _rename_all(directory, base_offset, SWAP_SUFFIX, "")


def _next_offset(path: Path) -> int | None:
    """The offset after the last whole batch of ``path``; None if it holds none."""
    last = None
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        pos = 0
        while pos + rb.HEADER_SIZE <= size:
            header = rb.parse_header(os.pread(fd, rb.HEADER_SIZE, pos))
            if pos + header.size > size or header.batch_length < rb.MIN_BATCH_LENGTH:
                break
            last = header
            pos += header.size
    return None if last is None else last.next_offset


def recover(directory: Path) -> int:
    """Finish or undo whatever swap a crash interrupted in ``directory``; returns how many swaps it finished."""
    shutil.rmtree(directory / SCRATCH_DIR, ignore_errors=True)
    names = [p.name for p in directory.iterdir()]
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            (directory / name).unlink(missing_ok=True)
    swaps = sorted(int(n[: -len(LOG_SUFFIX + SWAP_SUFFIX)]) for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX))
    bases = sorted(int(n[: -len(LOG_SUFFIX)]) for n in names if n.endswith(LOG_SUFFIX) and n[:-4].isdigit())
    for base in swaps:
        stem = segment_name(base)
        end = _next_offset(directory / (stem + LOG_SUFFIX + SWAP_SUFFIX))
        end = base + 1 if end is None else max(end, base + 1)
        for old in bases:
            if base < old < end:
                for suffix in SEGMENT_SUFFIXES:
                    (directory / (segment_name(old) + suffix)).unlink(missing_ok=True)
        finish(directory, base)
        log.warning("%s: finished the swap of cleaned segment %s interrupted by a crash", directory.name, stem)
    for name in names:
        if name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            stem = name.split(".", 1)[0]
            if stem.isdigit() and int(stem) not in swaps:
                (directory / name).unlink(missing_ok=True)
    return len(swaps)
