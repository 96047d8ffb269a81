"""Progress bars of long CLI work (reset-offsets over many partitions, dump-log of large files, reassignments,
perf runs), drawn by tqdm.

Invariants:
- A bar is drawn on stderr, and only when stderr is a terminal (tqdm's ``disable=None``): stdout, which scripts
  parse, never carries progress, and a redirected stderr (a log file, a CI job) gets no bar lines either.
- ``ODRADEK_PROGRESS=0`` turns bars off, ``=1`` forces them on (e.g. to watch a run whose stderr is a pipe).
- A bar removes itself when done (``leave=False``), so what stays on the terminal is the command's output.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tqdm import tqdm

PROGRESS_ENV = "ODRADEK_PROGRESS"


def enabled() -> bool | None:
    """tqdm's ``disable`` argument: True (off) or False (on) when ``ODRADEK_PROGRESS`` says so; None (on only
    for a terminal) otherwise."""
    setting = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if setting in ("0", "false", "no", "off"):
        return True
    if setting in ("1", "true", "yes", "on"):
        return False
    return None


def bar(total: int | None = None, desc: str | None = None, unit: str = "it", **kwargs: Any) -> tqdm:  # type: ignore[type-arg]
    """A progress bar on stderr (use it as a context manager; ``update(n)`` as work is done)."""
    return tqdm(
        total=total, desc=desc, unit=unit, file=sys.stderr, disable=enabled(), leave=False, dynamic_ncols=True, **kwargs
    )
