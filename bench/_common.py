"""Shared helpers of the storage benchmarks: machine facts, batches of an exact size, scratch
directories that are always removed, bounded timing loops and small statistics.

Not a benchmark itself. Every benchmark script imports this module after putting the repository
root on ``sys.path`` (so ``python bench/<name>.py`` works as well as ``python -m bench.<name>``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from odradek.protocol.batch import check_batch  # noqa: E402
from odradek.protocol.records import build_batch  # noqa: E402

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
MB = 1_000_000
GB = 1_000_000_000

DEFAULT_TMP_ROOT = Path("/work/bench-tmp")


# -- machine -------------------------------------------------------------------------------------


def machine_facts(path: Path) -> dict[str, str]:
    """nproc, CPU model, RAM, Python, kernel, and the filesystem holding ``path``."""
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    fs = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True, timeout=10).stdout
        rows = out.strip().splitlines()
        if len(rows) >= 2:
            cols = rows[1].split()
            fs = f"{cols[1]} on {cols[0]} (mounted at {cols[-1]})"
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "ram": mem,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": platform.release(),
        "filesystem": fs,
        "engine": engine_version(),
        "command": " ".join(["python", *sys.argv]),
    }


def engine_version() -> str:
    """git HEAD of the repository plus a digest of odradek/**/*.py as they are on disk (the engine is
    edited while benchmarks run, so HEAD alone does not say what was measured)."""
    import hashlib

    head = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = (
            subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "?"
        )
    h = hashlib.sha256()
    for f in sorted((REPO / "odradek").rglob("*.py")):
        h.update(f.relative_to(REPO).as_posix().encode())
        h.update(f.read_bytes())
    return f"HEAD {head}, odradek/**/*.py sha256 {h.hexdigest()[:12]}"


def print_facts(facts: dict[str, str]) -> None:
    for k, v in facts.items():
        print(f"# {k:<10} {v}")
    sys.stdout.flush()


# -- batches -------------------------------------------------------------------------------------


def make_batch(size: int, seed: int, *, value_len: int = 1000) -> bytes:
    """One uncompressed v2 batch of exactly ``size`` bytes: records with ``value_len``-byte random
    values (null keys), the last record's value stretched so the batch hits the size."""
    rng = random.Random(seed)
    ts = int(time.time() * 1000)

    def build(n_full: int, last_len: int) -> bytes:
        values = [rng.randbytes(value_len) for _ in range(n_full)]
        if last_len >= 0:
            values.append(rng.randbytes(last_len))
        return build_batch([(None, v) for v in values], base_timestamp=ts)

    one = len(build(1, -1))
    per_record = one - 61
    n_full = max(0, (size - 61) // per_record - 1)
    base = len(build(n_full, -1)) if n_full else 61
    guess = size - base - 4
    for last in range(max(0, guess - 8), guess + 9):
        b = build(n_full, last)
        if len(b) == size:
            check_batch(b)
            return b
    raise ValueError(f"cannot build a batch of exactly {size} bytes")


def distinct_batches(size: int, count: int = 8) -> list[bytes]:
    return [make_batch(size, seed=size * 1000 + i) for i in range(count)]


def bytearrays(batches: Sequence[bytes], total: int) -> list[bytearray]:
    """Fresh bytearray copies cycling through ``batches`` until ``total`` bytes (rounded down to
    whole batches): what the broker hands the log after reading a produce request."""
    n = max(1, total // len(batches[0]))
    return [bytearray(batches[i % len(batches)]) for i in range(n)]


# -- scratch space -------------------------------------------------------------------------------


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@contextlib.contextmanager
def scratch_dir(root: Path, name: str, need_bytes: int) -> Iterator[Path]:
    """A fresh directory under ``root``, refused when the filesystem lacks ``need_bytes`` plus a
    5 GB margin, and removed on every exit (exception, Ctrl-C, SIGTERM included)."""
    root.mkdir(parents=True, exist_ok=True)
    free = free_bytes(root)
    if free < need_bytes + 5 * GB:
        raise SystemExit(
            f"not enough space on {root}: {free / GB:.1f} GB free, need {need_bytes / GB:.1f} GB + 5 GB margin"
        )
    d = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    old = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # turn SIGTERM into an exception so the finally below runs
        raise SystemExit(f"terminated by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
        signal.signal(signal.SIGTERM, old)


def settle() -> None:
    """Write back every dirty page (outside any timed region) so each run starts from the same
    page-cache state: nothing dirty, no writeback throttling left over from the previous run."""
    os.sync()


_ZEROS = bytes(MiB)


def prewarm(d: Path, nbytes: int) -> None:
    """Write and delete a scratch file of ``nbytes`` right before a timed region.

    Why: this machine is a VM with virtio-balloon free-page reporting. Memory that has been free for
    about two seconds is handed back to the host, and the first touch of such a page costs a host
    page fault: page-cache writes into it run at ~350 MB/s instead of ~2.5-4 GB/s. Pages freed a
    moment ago are still backed. Writing and deleting a scratch file leaves ``nbytes`` of backed
    pages on the free lists, so the timed region that follows allocates page cache at memory speed,
    the same for the raw baseline and the engine. (A long-running broker recycles its own page
    cache, so backed pages are its steady state too.)
    """
    path = d / ".prewarm"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, _ZEROS[: min(left, MiB)])
    finally:
        os.close(fd)
        path.unlink()


# -- other load on the machine -----------------------------------------------------------------------


def _busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle since boot (from /proc/stat)."""
    with open("/proc/stat") as f:
        cols = [int(x) for x in f.readline().split()[1:]]
    idle = cols[3] + (cols[4] if len(cols) > 4 else 0)
    return (sum(cols[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuWatch:
    """How much of the machine's CPU *other* processes (and kernel threads such as writeback) used
    while a benchmark ran: a busy machine makes every figure, raw limits included, unreliable."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.busy0 = _busy_seconds()
        self.own0 = _own_seconds()

    def other_share(self) -> float:
        elapsed = time.monotonic() - self.t0
        other = (_busy_seconds() - self.busy0) - (_own_seconds() - self.own0)
        return max(0.0, other / (elapsed * (os.cpu_count() or 1))) if elapsed > 0 else 0.0


def wait_for_idle(max_wait: float, threshold: float = 0.10, window: float = 5.0) -> str:
    """Wait (at most ``max_wait`` s) until other processes use < ``threshold`` of the CPUs over a
    ``window``-second window; returns a line saying how idle the machine was."""
    deadline = time.monotonic() + max_wait
    while True:
        w = CpuWatch()
        time.sleep(window)
        share = w.other_share()
        if share < threshold:
            return f"machine idle before start: other CPU use {share:.0%} over {window:.0f} s"
        if time.monotonic() >= deadline:
            return (
                f"machine NOT idle before start: other CPU use {share:.0%} over {window:.0f} s "
                f"after waiting {max_wait:.0f} s -- figures may be disturbed"
            )


# -- statistics ----------------------------------------------------------------------------------


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def percentile(xs: Sequence[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def mbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / MB if seconds > 0 else float("nan")


def human(n: int) -> str:
    for unit, f in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def verdict(ratio: float, goal: float, higher_is_better: bool = True) -> str:
    ok = ratio >= goal if higher_is_better else ratio <= goal
    return "met" if ok else "NOT met"


def guarded(phase: str, fn: Callable[[], Any], instead: Any,
            on_failure: Callable[[str], None] | None = None) -> Any:
    """Run a benchmark phase; an error is printed (the phase is reported as failed, ``on_failure`` gets a short
    account of it) and the run goes on with ``instead``."""
    try:
        return fn()
    except Exception as e:
        print(f"#   {phase} FAILED: {type(e).__name__}: {str(e)[:3000]}", flush=True)
        if on_failure is not None:
            on_failure(f"{phase} failed: {type(e).__name__}: {str(e)[:600]}")
        return instead
