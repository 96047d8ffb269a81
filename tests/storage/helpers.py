"""Shared builders and inspectors for the storage tests (not a test module)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from odradek.clock import ManualClock
from odradek.protocol import batch as rb
from odradek.protocol.records import Record, RecordInput, build_batch, decode_records, iter_batches
from odradek.storage.config import KiB, LogConfig
from odradek.storage.log import Log
from odradek.storage.segment import FileRegion

T0 = 1_700_000_000_000


def small_config(**overrides: object) -> LogConfig:
    """Tiny segments and a dense index so a few dozen batches span several segments."""
    base: dict[str, object] = {
        "segment_bytes": 4 * KiB,
        "index_interval_bytes": 128,
        "segment_index_bytes": 1 * KiB,
        "file_delete_delay_ms": 1_000,
    }
    base.update(overrides)
    return LogConfig(**base)  # type: ignore[arg-type]


def batch(
    n: int = 1,
    *,
    ts: int = T0,
    value_size: int = 20,
    tag: str = "v",
    timestamps: Iterable[int] | None = None,
    **kwargs: object,
) -> bytes:
    """One CreateTime batch of ``n`` records; values are ``<tag><i>`` padded to ``value_size``."""
    stamps = list(timestamps) if timestamps is not None else [ts] * n
    assert len(stamps) == n
    records = [
        RecordInput(f"k{i}".encode(), f"{tag}{i}".encode().ljust(value_size, b"."), stamps[i]) for i in range(n)
    ]
    return build_batch(records, base_timestamp=stamps[0], **kwargs)  # type: ignore[arg-type]


def region_batches(region: FileRegion) -> list[rb.BatchHeader]:
    """Headers of the whole batches a region holds; fails if the region does not end on a boundary."""
    data = region.read_bytes()
    assert len(data) == region.length
    headers = [h for _, h in iter_batches(data)]
    assert sum(h.size for h in headers) == region.length
    return headers


def region_records(region: FileRegion) -> list[Record]:
    data = region.read_bytes()
    out: list[Record] = []
    for pos, header in iter_batches(data):
        out.extend(decode_records(data[pos : pos + header.size]))
    return out


def all_records(log: Log, start: int | None = None) -> list[Record]:
    """Every record from ``start`` (default: log start) to the log end, read back through ``read``."""
    offset = log.log_start_offset if start is None else start
    out: list[Record] = []
    while offset < log.next_offset:
        region = log.read(offset, 64 * KiB)
        assert region is not None, f"nothing read at {offset} < {log.next_offset}"
        records = [r for r in region_records(region) if r.offset >= offset]
        assert records, f"read at {offset} returned no record at or after it"
        out.extend(records)
        offset = records[-1].offset + 1
    return out


def snapshot(directory: Path) -> dict[str, bytes]:
    """Name -> content of every file under ``directory`` (to prove nothing changed)."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def open_log(path: Path, config: LogConfig | None = None, clock: ManualClock | None = None, **kwargs: object) -> Log:
    return Log.open(path, config or small_config(), clock=clock or ManualClock(T0), **kwargs)  # type: ignore[arg-type]


@contextlib.contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's ``size=``) at ``mount``: a small disk to fill for real. Needs root, as the
    README's test command runs; fails (never skips) otherwise."""
    mount.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True, timeout=10)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, timeout=10)


def grow_tmpfs(mount: Path, size: str) -> None:
    """The disk "repaired": the tmpfs at ``mount`` resized, its files kept."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True, timeout=10)


def fill_disk(directory: Path, *, chunk: int = 65536, max_bytes: int = 8 << 30) -> Path:
    """Fill the file system holding ``directory`` with a new file until ENOSPC (someone else filling the disk);
    the file, to remove for the repair. Any other error is raised; a disk that takes ``max_bytes`` is an
    AssertionError (not the small disk the caller meant)."""
    filler = directory / f"filler-{uuid.uuid4().hex[:6]}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for _ in range(max_bytes // chunk):
            os.write(fd, bytes(chunk))
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        return filler
    finally:
        os.close(fd)
    raise AssertionError(f"{directory} took {max_bytes} bytes without filling up")
