"""Small files replaced atomically, and Kafka's text checkpoint format.

A checkpoint is a few lines of text that a broker rewrites whole (recovery points, log start
offsets, replication offsets, leader epochs). Layout, byte-compatible with Kafka's broker::

    0                      <- format version
    2                      <- number of entries N
    orders 0 1234          <- N entry lines, fields separated by single spaces
    orders 1 987

Invariants:
- ``write_atomically`` never leaves a half-written file at ``path``: the data goes to
  ``<path>.tmp``, is fsynced, then renamed over ``path`` with ``os.replace``, and the directory is
  fsynced so the rename itself survives a crash. Until the rename, the old file is untouched.
- Readers accept exactly what writers produce: version ``0``, a count equal to the number of
  entry lines, integers in plain decimal, no blank or extra lines. Anything else raises
  ``CheckpointError`` naming the file and the 1-based line. One leniency, as in Kafka: an empty
  file reads as no entries (a zero-length file is what some filesystems leave after a crash).
- ``OffsetCheckpointFile.write`` sorts entries by (topic, partition), so equal content gives equal
  bytes.
- Not thread-safe, and one writer per path: concurrent writers would share the ``.tmp`` file.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from odradek.protocol.errors import StorageError

__all__ = [
    "CHECKPOINT_VERSION",
    "CheckpointError",
    "OffsetCheckpointFile",
    "encode_checkpoint",
    "parse_int",
    "read_checkpoint_lines",
    "write_atomically",
]

CHECKPOINT_VERSION = 0
"""The only version of the text checkpoint format Kafka has defined."""

_DECIMAL = re.compile(r"-?[0-9]+")


class CheckpointError(StorageError):
    """A checkpoint file exists but its content is not a valid checkpoint."""


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new content.

    Raises ``StorageError`` (chaining the ``OSError``) if any step fails; ``<path>.tmp`` is removed
    when possible. If the failure happens before the rename, the old file is intact.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_directory(path.parent)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise StorageError(f"could not write {path}: {e}") from e


def fsync_directory(directory: Path) -> None:
    """Make the renames and creations in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def parse_int(path: Path, line_number: int, text: str) -> int:
    """``int(text)`` for plain decimal only (no ``+``, ``_`` or spaces); else ``CheckpointError``."""
    if _DECIMAL.fullmatch(text) is None:
        raise CheckpointError(f"{path}: line {line_number}: expected an integer, found {text!r}")
    return int(text)


def read_checkpoint_lines(path: Path, *, version: int = CHECKPOINT_VERSION) -> list[tuple[int, str]] | None:
    """The entry lines of a checkpoint file as ``(line_number, text)``; ``None`` if there is no file.

    Checks the version and count header; the caller parses each entry line. Line numbers are
    1-based, so the first entry is line 3. An empty file gives ``[]``.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(f"could not read {path}: {e}") from e
    if not raw:
        return []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text ({e})") from e
    if not text.endswith("\n"):
        last = text.count("\n") + 1
        raise CheckpointError(f"{path}: line {last}: file does not end with a newline (truncated?)")
    lines = text[:-1].split("\n")
    if parse_int(path, 1, lines[0]) != version:
        raise CheckpointError(f"{path}: line 1: unsupported version {lines[0]!r}, expected {version}")
    if len(lines) < 2:
        raise CheckpointError(f"{path}: line 2: missing entry count")
    count = parse_int(path, 2, lines[1])
    entries = lines[2:]
    if count < 0 or count != len(entries):
        raise CheckpointError(
            f"{path}: line 2: entry count {count} does not match the {len(entries)} entry lines that follow"
        )
    return [(i + 3, line) for i, line in enumerate(entries)]


def encode_checkpoint(entry_lines: Iterable[str], *, version: int = CHECKPOINT_VERSION) -> bytes:
    """The bytes of a checkpoint file holding ``entry_lines`` (each without its newline)."""
    body = list(entry_lines)
    return "".join(f"{line}\n" for line in [str(version), str(len(body)), *body]).encode("utf-8")


class OffsetCheckpointFile:
    """Per-partition offsets (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
    ``replication-offset-checkpoint``); entry lines are ``topic partition offset``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"OffsetCheckpointFile({str(self.path)!r})"

    def read(self) -> dict[tuple[str, int], int]:
        """All entries; an absent file gives ``{}``. Malformed content raises ``CheckpointError``."""
        lines = read_checkpoint_lines(self.path)
        result: dict[tuple[str, int], int] = {}
        for number, line in lines or []:
            fields = line.split(" ")
            if len(fields) != 3 or not fields[0]:
                raise CheckpointError(
                    f"{self.path}: line {number}: expected 'topic partition offset', found {line!r}"
                )
            topic = fields[0]
            partition = parse_int(self.path, number, fields[1])
            if partition < 0:
                raise CheckpointError(f"{self.path}: line {number}: negative partition {partition}")
            key = (topic, partition)
            if key in result:
                raise CheckpointError(f"{self.path}: line {number}: duplicate entry for {topic}-{partition}")
            result[key] = parse_int(self.path, number, fields[2])
        return result

    def write(self, entries: Mapping[tuple[str, int], int]) -> None:
        """Replace the file with ``entries``, atomically, sorted by (topic, partition)."""
        lines = []
        for (topic, partition), offset in sorted(entries.items()):
            if not topic or any(c.isspace() for c in topic):
                raise ValueError(f"topic name {topic!r} cannot be stored in a checkpoint file")
            lines.append(f"{topic} {int(partition)} {int(offset)}")
        write_atomically(self.path, encode_checkpoint(lines))
