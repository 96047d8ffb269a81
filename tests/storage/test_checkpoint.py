"""Atomic file replacement and Kafka's offset checkpoint format."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odradek.protocol.errors import ErrorCode, StorageError
from odradek.storage import checkpoint
from odradek.storage.checkpoint import CheckpointError, OffsetCheckpointFile, write_atomically


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# ---- write_atomically ------------------------------------------------------------------------------


def test_write_atomically_creates_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "file"
    write_atomically(target, b"first")
    assert target.read_bytes() == b"first"
    write_atomically(target, b"second, longer than the first")
    assert target.read_bytes() == b"second, longer than the first"
    write_atomically(target, b"")
    assert target.read_bytes() == b""
    assert _leftovers(tmp_path) == []


def test_write_atomically_fsyncs_file_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    write_atomically(tmp_path / "file", b"data")
    assert len(synced) == 2  # the temporary file, then the directory


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_failed_write_keeps_old_file_and_raises_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    target = tmp_path / "file"
    write_atomically(target, b"old content")

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(StorageError) as info:
        write_atomically(target, b"new content")
    monkeypatch.undo()

    assert target.read_bytes() == b"old content"
    assert _leftovers(tmp_path) == []
    assert str(target) in str(info.value)
    assert "No space left on device" in str(info.value)
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR


def test_failed_write_into_missing_directory_raises_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="missing"):
        write_atomically(tmp_path / "missing" / "file", b"data")


def test_stale_tmp_file_from_a_crash_is_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "file"
    (tmp_path / "file.tmp").write_bytes(b"garbage left by a crash, longer than the data")
    write_atomically(target, b"data")
    assert target.read_bytes() == b"data"
    assert _leftovers(tmp_path) == []


# ---- OffsetCheckpointFile --------------------------------------------------------------------------


def test_round_trip_and_kafka_layout(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    entries = {("orders", 1): 987, ("orders", 0): 1234, ("__consumer_offsets", 7): 0}
    cp.write(entries)
    assert cp.path.read_text() == "0\n3\n__consumer_offsets 7 0\norders 0 1234\norders 1 987\n"
    assert cp.read() == entries
    assert OffsetCheckpointFile(cp.path).read() == entries
    assert _leftovers(tmp_path) == []


def test_write_is_deterministic(tmp_path: Path) -> None:
    a = OffsetCheckpointFile(tmp_path / "a")
    b = OffsetCheckpointFile(tmp_path / "b")
    a.write({("t", 2): 5, ("s", 0): 1, ("t", 10): 3})
    b.write({("t", 10): 3, ("s", 0): 1, ("t", 2): 5})
    assert a.path.read_bytes() == b.path.read_bytes()
    # partitions sort numerically, not as text
    assert a.path.read_text().splitlines()[3:] == ["t 2 5", "t 10 3"]


def test_empty_mapping_round_trips(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.write({})
    assert cp.path.read_text() == "0\n0\n"
    assert cp.read() == {}


def test_missing_file_reads_as_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "absent").read() == {}


def test_zero_length_file_reads_as_empty(tmp_path: Path) -> None:
    (tmp_path / "cp").write_bytes(b"")
    assert OffsetCheckpointFile(tmp_path / "cp").read() == {}


def test_rewrite_replaces_entries(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.write({("a", 0): 1, ("b", 0): 2})
    cp.write({("a", 0): 5})
    assert cp.read() == {("a", 0): 5}


def test_failed_write_keeps_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.write({("a", 0): 1})

    def fail(*args: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(StorageError):
        cp.write({("a", 0): 2})
    monkeypatch.undo()
    assert cp.read() == {("a", 0): 1}
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("topic", ["", "has space", "tab\there"])
def test_unwritable_topic_names_are_refused(tmp_path: Path, topic: str) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    with pytest.raises(ValueError):
        cp.write({(topic, 0): 1})
    assert not cp.path.exists()


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("1\n0\n", 1),  # unknown version
        ("x\n0\n", 1),  # version not a number
        ("0\n", 2),  # count missing
        ("0\n2\na 0 1\n", 2),  # fewer entries than the count
        ("0\n1\na 0 1\nb 0 2\n", 2),  # more entries than the count
        ("0\n-1\n", 2),  # negative count
        ("0\n1\na 0\n", 3),  # too few fields
        ("0\n1\na 0 1 2\n", 3),  # too many fields
        ("0\n1\na  0 1\n", 3),  # double space
        ("0\n1\na x 1\n", 3),  # partition not a number
        ("0\n1\na 0 1.5\n", 3),  # offset not an integer
        ("0\n1\na 0 +1\n", 3),  # sign is not plain decimal
        ("0\n1\na -1 1\n", 3),  # negative partition
        ("0\n2\na 0 1\na 0 2\n", 4),  # duplicate partition
        ("0\n2\na 0 1\n\n", 4),  # blank entry line
        ("0\n1\na 0 1", 3),  # last line cut short (no newline)
        ("0\r\n0\r\n", 1),  # CRLF is not the format
    ],
)
def test_malformed_file_raises_checkpoint_error_naming_file_and_line(
    tmp_path: Path, content: str, line: int
) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(content, newline="")
    with pytest.raises(CheckpointError) as info:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(info.value)
    assert f"line {line}:" in str(info.value)
    assert isinstance(info.value, StorageError)


def test_non_utf8_file_raises_checkpoint_error(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\n1\n\xff 0 1\n")
    with pytest.raises(CheckpointError, match=str(path)):
        OffsetCheckpointFile(path).read()


def test_unreadable_path_raises_storage_error(tmp_path: Path) -> None:
    # a directory where the file should be: an OSError other than "not found"
    (tmp_path / "cp").mkdir()
    with pytest.raises(StorageError, match="could not read"):
        OffsetCheckpointFile(tmp_path / "cp").read()


def test_read_checkpoint_lines_numbers_entry_lines(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(checkpoint.encode_checkpoint(["x", "y"]))
    assert checkpoint.read_checkpoint_lines(path) == [(3, "x"), (4, "y")]
    assert checkpoint.read_checkpoint_lines(tmp_path / "absent") is None
