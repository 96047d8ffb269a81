"""Progress bars of long CLI work (reset-offsets over many partitions, describing many groups, dump-log of large
files, perf consume), drawn by tqdm.

Invariants:
- A bar is drawn on stderr, and only when stderr is a terminal: stdout, which scripts parse, never carries
  progress, and a redirected stderr (a log file, a CI job) gets no bar lines either.
- A bar beside output that streams while the work goes on (dump-log's lines) is drawn only when stdout is not
  that terminal too (``odradek dump-log ... > out.txt``): on a terminal the lines themselves show the progress,
  and a bar would be torn by them.
- Work of fewer than ``min_total`` steps gets no bar (it is over before a bar would help).
- ``ODRADEK_PROGRESS=0`` turns bars off, ``=1`` forces them on (e.g. to watch a run whose stderr is a pipe).
- A bar removes itself when done (``leave=False``), so what stays on the terminal is the command's output.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tqdm import tqdm

PROGRESS_ENV = "ODRADEK_PROGRESS"


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def wanted(total: int | None = None, *, min_total: int = 0, beside_output: bool = False) -> bool:
    """Whether a bar is drawn (see the invariants)."""
    setting = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if setting in ("0", "false", "no", "off"):
        return False
    if setting in ("1", "true", "yes", "on"):
        return True
    if total is not None and total < min_total:
        return False
    return _isatty(sys.stderr) and not (beside_output and _isatty(sys.stdout))


def bar(
    total: int | None = None,
    desc: str | None = None,
    unit: str = "it",
    *,
    min_total: int = 0,
    beside_output: bool = False,
    **kwargs: Any,
) -> tqdm:  # type: ignore[type-arg]
    """A progress bar on stderr (use it as a context manager; ``update(n)`` as work is done)."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        disable=not wanted(total, min_total=min_total, beside_output=beside_output),
        leave=False,
        dynamic_ncols=True,
        **kwargs,
    )
