"""``odradek dump-log`` on the files of a real log: batches with their CRC checked, transaction markers
decoded, offset/time index entries, aborted-transaction index entries and producer snapshots; damage is
reported with a non-zero status instead of a traceback."""

from __future__ import annotations

import argparse
import io
import re
from pathlib import Path

import pytest

from odradek.cli import dump_log
from odradek.storage.log import Log
from odradek.storage.producer_state import ProducerStateManager
from tests.storage.helpers import batch, open_log, small_config

DAY = 86_400_000


def _dump(*files: Path, data: bool = False) -> tuple[int, str]:
    out = io.StringIO()
    status = dump_log.run(argparse.Namespace(files=list(files), print_data_log=data), out=out)
    return status, out.getvalue()


@pytest.fixture
def written(tmp_path: Path) -> Path:
    """A closed log: plain batches, producer 7's aborted transaction, producer 8's committed one, and
    an idempotent producer 9; several segments, so indexes and a snapshot exist."""
    path = tmp_path / "t-0"
    log: Log = open_log(path, config=small_config(),
                        producer_state=ProducerStateManager(path, path.name, expiration_ms=DAY))

    def txn(pid: int, commit: bool) -> None:
        log.append(batch(2, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True))
        log.update_high_watermark(log.next_offset)
        log.append_marker(pid, 0, commit, 3)
        log.update_high_watermark(log.next_offset)

    for _ in range(20):
        log.append(batch(5, value_size=40))
    txn(7, commit=False)
    txn(8, commit=True)
    log.append(batch(3, producer_id=9, producer_epoch=2, base_sequence=0))
    log.update_high_watermark(log.next_offset)
    log.close()
    return path


def test_segments_show_every_batch_and_decode_markers(written: Path) -> None:
    segments = sorted(written.glob("*.log"))
    assert len(segments) >= 2
    status, text = _dump(*segments, data=True)
    assert status == 0
    batches = re.findall(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+)", text, re.M)
    assert [int(b[0]) for b in batches] == sorted(int(b[0]) for b in batches)
    assert sum(int(b[2]) for b in batches) == 20 * 5 + 2 + 1 + 2 + 1 + 3
    assert text.count("isvalid: true") == len(batches)
    assert "endTxnMarker: ABORT coordinatorEpoch: 3" in text
    assert "endTxnMarker: COMMIT coordinatorEpoch: 3" in text
    assert re.search(r"producerId: 7 producerEpoch: 0 .* isTransactional: true isControl: true", text)
    assert "payload: v0" in text  # ordinary records show their values


def test_indexes_txnindex_and_snapshot(written: Path) -> None:
    [txn_index] = written.glob("*.txnindex")
    status, text = _dump(txn_index)
    assert status == 0
    assert re.fullmatch(r"Dumping .*\nversion: 0 producerId: 7 firstOffset: 100 lastOffset: 102 "
                        r"lastStableOffset: 103\n", text), text

    snapshots = sorted(written.glob("*.snapshot"))
    status, text = _dump(snapshots[-1])
    assert status == 0
    assert "producerId: 9 producerEpoch: 2 coordinatorEpoch: -1 currentTxnFirstOffset: None" in text
    assert "firstSequence: 0 lastSequence: 2 lastOffset: 108 offsetDelta: 2" in text
    assert "producerId: 8 producerEpoch: 0 coordinatorEpoch: 3" in text

    first = sorted(written.glob("*.index"))[0]
    status, text = _dump(first, sorted(written.glob("*.timeindex"))[0])
    assert status == 0
    assert re.search(r"^offset: \d+ position: \d+$", text, re.M)
    assert re.search(r"^timestamp: \d+ offset: \d+$", text, re.M)


def test_damage_is_reported_not_raised(written: Path, tmp_path: Path) -> None:
    [txn_index] = written.glob("*.txnindex")
    with open(txn_index, "ab") as f:
        f.write(b"\x00" * 5)
    status, text = _dump(txn_index)
    assert status == 1 and "torn entry: the last 5 bytes" in text

    status, text = _dump(_flip(sorted(written.glob("*.snapshot"))[-1], -1))
    assert status == 1 and "unreadable snapshot: the CRC does not match" in text

    status, text = _dump(_flip(sorted(written.glob("*.log"))[-1], -3))
    assert status == 1 and "invalid batch at position" in text and "the valid log ends at position" in text

    other = tmp_path / "notes.txt"
    other.write_text("x")
    status, _ = _dump(other)
    assert status == 1


def _flip(path: Path, at: int) -> Path:
    """Invert the bits of one byte of the file."""
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    return path
