"""Corruption tests: damage real segment and index files, reopen, and check what recovery makes of them.

In the spirit of leveldb's log_test (shrink, flip a byte, append junk). A template log of several
tiny segments is built once per module; it is captured as a *crash image* (the directory copied
while the log is open: the active segment's indexes still preallocated, no clean shutdown) and as a
*clean image* (after ``Log.close``). Every case copies a template, damages one file and reopens.

What recovery promises, and what these tests pin down:

- Tail damage (torn write, garbled byte, junk after the end) in a segment at or after the recovery
  point: the segment is cut at the first invalid batch, so ``next_offset`` is the end of the last
  intact batch, the file is truncated to it, every earlier batch reads back byte-identical, and a
  new append continues at that offset.
- Two header fields are outside the CRC by design (the log rewrites them without re-stamping):
  a garbled partitionLeaderEpoch is undetectable and kept as is; a garbled baseOffset is caught
  only when it goes backwards or leaves the segment's 31-bit relative range. A baseOffset garbled
  upward within range is accepted as an offset gap (as a compacted log may hold), exactly like Kafka.
- A garbled batch in a segment *below* the recovery point is not scanned (as in Kafka: only
  unflushed data is checked). The log opens with its offsets intact and serves the damaged bytes,
  which fail the CRC check in the client. At or *after* the recovery point, the segment is cut at
  the damaged batch and every later segment is deleted.
- Indexes are caches: missing, odd-sized, zeroed, garbage or pointing past the log, they are
  rebuilt (or, where the damage is harmless, still give correct reads), whether the log is opened
  clean or not.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from odradek.clock import ManualClock
from odradek.protocol import batch as rb
from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import RecordInput, build_batch, iter_batches
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LogManager
from odradek.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_name

# Several hundred reopen cycles (every byte of a batch, three ways): over ten seconds on a small box.
pytestmark = pytest.mark.slow

T0 = 1_700_000_000_000
TOPIC_DIR = "orders-0"
CONFIG = LogConfig(
    segment_bytes=360,
    index_interval_bytes=60,
    segment_index_bytes=240,
    file_delete_delay_ms=0,
    retention_ms=-1,
)
LEADER_EPOCH = 7


def _batch(i: int, records: int = 1, *, headers: bool = False) -> bytes:
    """Batch number ``i``: timestamps T0 + 1000*i (+ j), small values, optional headers."""
    return build_batch(
        [
            RecordInput(
                f"k{i}.{j}".encode(),
                f"value-{i}-{j}".encode(),
                T0 + 1000 * i + j,
                (("h", f"{i}".encode()),) if headers else (),
            )
            for j in range(records)
        ],
        base_offset=99,  # the log overwrites it
    )


NEW_BATCH = build_batch([RecordInput(b"after", b"recovery", T0 + 999_000)])


@dataclass(frozen=True)
class StoredBatch:
    segment: int  # base offset of the segment holding it
    position: int  # in the segment file
    data: bytes

    @property
    def header(self) -> rb.BatchHeader:
        return rb.parse_header(self.data)

    @property
    def base(self) -> int:
        return self.header.base_offset

    @property
    def next(self) -> int:
        return self.header.next_offset


def stored_batches(log_dir: Path) -> list[StoredBatch]:
    """Every batch of every segment file, in order, as the files hold them (checked)."""
    out = []
    for path in sorted(log_dir.glob("*" + LOG_SUFFIX)):
        data = path.read_bytes()
        base = int(path.name[: -len(LOG_SUFFIX)])
        out.extend(StoredBatch(base, pos, data[pos : pos + h.size]) for pos, h in iter_batches(data))
    return out


@dataclass(frozen=True)
class Template:
    crash: Path  # <root>/crash/orders-0: copied while the log was open
    clean: Path  # <root>/clean/orders-0: after Log.close
    batches: list[StoredBatch]
    segments: list[int]

    @property
    def active(self) -> int:
        return self.segments[-1]

    @property
    def end(self) -> int:
        return self.batches[-1].next

    def in_segment(self, base: int) -> list[StoredBatch]:
        return [b for b in self.batches if b.segment == base]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    root = tmp_path_factory.mktemp("corruption-template")
    live = root / "live" / TOPIC_DIR
    lg = Log.open(live, CONFIG, clock=ManualClock(T0))
    i = 0
    while len(lg.segments) < 4 or lg.active_segment.size < 200:
        lg.append(_batch(i, records=1 + i % 3, headers=i % 4 == 0), leader_epoch=LEADER_EPOCH)
        i += 1
    lg.append(_batch(i, records=3, headers=True), leader_epoch=LEADER_EPOCH)  # a ~130-byte last batch
    shutil.copytree(live.parent, root / "crash")
    lg.close()
    shutil.copytree(live.parent, root / "clean")
    shutil.rmtree(live.parent)
    batches = stored_batches(root / "clean" / TOPIC_DIR)
    assert stored_batches(root / "crash" / TOPIC_DIR) == batches
    segments = sorted({b.segment for b in batches})
    assert len(segments) >= 4
    # The crash image really is one: the active segment's indexes are still preallocated.
    active_index = root / "crash" / TOPIC_DIR / (segment_name(segments[-1]) + INDEX_SUFFIX)
    assert active_index.stat().st_size == CONFIG.segment_index_bytes // 8 * 8
    return Template(root / "crash" / TOPIC_DIR, root / "clean" / TOPIC_DIR, batches, segments)


# -- helpers -------------------------------------------------------------------------------------


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Callable[[Path], Path]]:
    """``fresh(template_dir)``: a private copy of a template log directory; each call deletes the
    previous copy (the caller has closed its log by then), so loops leave no trail of files."""
    counter = iter(range(1_000_000))
    previous: list[Path] = []

    def fresh(source: Path) -> Path:
        for old in previous:
            shutil.rmtree(old, ignore_errors=True)
        previous.clear()
        target = tmp_path / f"w{next(counter)}" / TOPIC_DIR
        shutil.copytree(source, target)
        previous.append(target.parent)
        return target

    yield fresh


def seg_path(log_dir: Path, base: int, suffix: str = LOG_SUFFIX) -> Path:
    return log_dir / (segment_name(base) + suffix)


def reopen(log_dir: Path, *, clean: bool, recovery_point: int = 0) -> Log:
    return Log.open(log_dir, CONFIG, clock=ManualClock(T0 + 10_000_000), clean_shutdown=clean,
                    recovery_point=recovery_point)


def patched(data: bytes, base_offset: int, epoch: int | None = None) -> bytes:
    out = bytearray(data)
    struct.pack_into(">q", out, 0, base_offset)
    if epoch is not None:
        struct.pack_into(">i", out, 12, epoch)
    return bytes(out)


def assert_log_reads(lg: Log, log_dir: Path, kept: list[bytes], next_offset: int) -> None:
    """The log holds exactly ``kept`` (bytes of whole batches, in order), ends at ``next_offset`` and
    reads each batch back byte-identical from its first and its last offset."""
    assert lg.next_offset == next_offset
    on_disk = b"".join(p.read_bytes() for p in sorted(log_dir.glob("*" + LOG_SUFFIX)))
    assert on_disk == b"".join(kept), "the segment files hold exactly the intact batches"
    assert lg.size == len(on_disk)
    for data in kept:
        header = rb.parse_header(data)
        for offset in (header.base_offset, header.last_offset):
            region = lg.read(offset, 1)
            assert region is not None and region.read_bytes() == data, f"batch at {header.base_offset}"


def assert_log_holds(lg: Log, log_dir: Path, kept: list[bytes], next_offset: int, *, append: bool = True) -> None:
    """``assert_log_reads``, plus: the indexes are consistent with the log, and a new append gets
    ``next_offset``."""
    assert_log_reads(lg, log_dir, kept, next_offset)
    for seg in lg.segments:
        assert_indexes_consistent(seg)
    if append:
        info = lg.append(NEW_BATCH)
        assert info.first_offset == next_offset, "a new append continues right after the intact data"
        region = lg.read(next_offset, 1 << 20)
        assert region is not None and region.read_bytes() == patched(NEW_BATCH, next_offset)


def assert_indexes_consistent(seg) -> None:  # type: ignore[no-untyped-def]
    """Every offset index entry names a batch start and that batch's last offset; every time index
    entry names a batch and the largest timestamp up to it; the segment knows its largest timestamp."""
    data = os.pread(seg.fd, seg.size, 0)
    batches: dict[int, rb.BatchHeader] = {}
    pos = 0
    while pos < len(data):  # headers only: a batch below the recovery point may fail its CRC
        batches[pos] = rb.parse_header(data, pos)
        pos += batches[pos].size
    assert pos == len(data)
    for n in range(seg.index.entries):
        offset, position = seg.index.entry(n)
        assert position in batches and batches[position].last_offset == offset, (seg.log_path, n)
    for n in range(seg.time_index.entries):
        ts, offset = seg.time_index.entry(n)
        upto = [h.max_timestamp for h in batches.values() if h.last_offset <= offset]
        assert upto and ts == max(upto), (seg.time_index.path, n)
    if batches:
        assert seg.max_timestamp == max(h.max_timestamp for h in batches.values()), seg.log_path


def batch_bytes(batches: list[StoredBatch]) -> list[bytes]:
    return [b.data for b in batches]


# -- the tail of the active segment ------------------------------------------------------------


def test_undamaged_crash_image_recovers_everything(template: Template, workdir) -> None:  # type: ignore[no-untyped-def]
    for recovery_point in (0, template.active, template.end):
        log_dir = workdir(template.crash)
        lg = reopen(log_dir, clean=False, recovery_point=recovery_point)
        try:
            assert [s.base_offset for s in lg.segments] == template.segments
            assert_log_holds(lg, log_dir, batch_bytes(template.batches), template.end)
        finally:
            lg.close()


def test_torn_write_at_every_byte_of_the_active_segment(template: Template, workdir) -> None:  # type: ignore[no-untyped-def]
    """Cut the active segment's file at every position: recovery keeps the batches wholly before it."""
    active = template.in_segment(template.active)
    assert active[-1].header.size > 100
    seg_size = active[-1].position + len(active[-1].data)
    for cut_at in range(seg_size):
        log_dir = workdir(template.crash)
        with open(seg_path(log_dir, template.active), "r+b") as f:
            f.truncate(cut_at)
        whole = [b for b in template.batches if b.segment != template.active or b.position + len(b.data) <= cut_at]
        # Alternate between scanning every segment and only the active one.
        lg = reopen(log_dir, clean=False, recovery_point=0 if cut_at % 2 else template.end)
        try:
            expected_end = whole[-1].next
            assert_log_holds(lg, log_dir, batch_bytes(whole), expected_end, append=cut_at % 7 == 0)
        finally:
            lg.close()


def _garbled_outcome(template: Template, last: StoredBatch, pos: int, damaged: bytes) -> tuple[list[bytes], int]:
    """(batches kept, next offset) after recovering the last batch garbled at ``pos``."""
    before = batch_bytes(template.batches[:-1])
    header = rb.parse_header(damaged)
    if rb.LEADER_EPOCH_AT <= pos < rb.LEADER_EPOCH_AT + 4:
        return [*before, damaged], last.next  # outside the CRC: undetectable, kept as is
    if pos < rb.LENGTH_AT:  # baseOffset, outside the CRC
        in_range = header.last_offset - last.segment <= 0x7FFFFFFF
        if header.base_offset >= last.base and in_range:
            return [*before, damaged], header.next_offset  # a gap, as a compacted log may hold
    return before, last.base


def test_garbled_byte_at_every_position_of_the_last_batch(template: Template, workdir) -> None:  # type: ignore[no-untyped-def]
    last = template.batches[-1]
    garbles = [lambda b: b ^ 0xFF, lambda b: b ^ 0x01, lambda b: 0]
    for pos in range(len(last.data)):
        for n, garble in enumerate(garbles):
            damaged = bytearray(last.data)
            damaged[pos] = garble(damaged[pos])
            if damaged == last.data:
                continue
            log_dir = workdir(template.crash)
            path = seg_path(log_dir, template.active)
            with open(path, "r+b") as f:
                f.seek(last.position)
                f.write(damaged)
            assert path.stat().st_size == last.position + len(last.data), "garbling keeps the length"
            kept, next_offset = _garbled_outcome(template, last, pos, bytes(damaged))
            lg = reopen(log_dir, clean=False, recovery_point=template.end if n else 0)
            try:
                assert_log_holds(lg, log_dir, kept, next_offset, append=pos % 5 == 0)
            finally:
                lg.close()


@pytest.mark.parametrize("magic", [0, 1, 3, 0xFF])
def test_damaged_magic_byte_of_the_last_batch_is_cut_not_fatal(template: Template, workdir, magic: int) -> None:  # type: ignore[no-untyped-def]
    """A magic byte garbled to 0 or 1 reads as an old message format; recovery must still cut it."""
    last = template.batches[-1]
    log_dir = workdir(template.crash)
    with open(seg_path(log_dir, template.active), "r+b") as f:
        f.seek(last.position + rb.MAGIC_AT)
        f.write(bytes([magic]))
    lg = reopen(log_dir, clean=False, recovery_point=template.active)
    try:
        assert_log_holds(lg, log_dir, batch_bytes(template.batches[:-1]), last.base)
    finally:
        lg.close()


def _junk_tails() -> list[tuple[str, bytes]]:
    rng = random.Random(20240601)
    tails = [(f"zeros-{n}", bytes(n)) for n in (1, 11, 12, 13, 60, 61, 62, 4096)]
    tails += [(f"random-{n}-{k}", rng.randbytes(n)) for k in range(6) for n in (1, 7, 12, 61, 200, 3000)]
    # a length prefix that claims more than is there, and one that claims too little
    tails.append(("long-claim", struct.pack(">qi", 0, 10_000) + bytes(100)))
    tails.append(("short-claim", struct.pack(">qi", 0, 5) + bytes(100)))
    return tails


@pytest.mark.parametrize(("name", "junk"), _junk_tails(), ids=[n for n, _ in _junk_tails()])
def test_junk_after_the_last_batch_is_cut(template: Template, workdir, name: str, junk: bytes) -> None:  # type: ignore[no-untyped-def]
    log_dir = workdir(template.crash)
    with open(seg_path(log_dir, template.active), "ab") as f:
        f.write(junk)
    lg = reopen(log_dir, clean=False, recovery_point=template.active)
    try:
        assert_log_holds(lg, log_dir, batch_bytes(template.batches), template.end)
    finally:
        lg.close()


def test_replayed_batch_after_the_end_is_cut(template: Template, workdir) -> None:  # type: ignore[no-untyped-def]
    """A valid batch whose offsets go backwards (the last one written twice) is not accepted."""
    log_dir = workdir(template.crash)
    with open(seg_path(log_dir, template.active), "ab") as f:
        f.write(template.batches[-1].data)
    lg = reopen(log_dir, clean=False, recovery_point=0)
    try:
        assert_log_holds(lg, log_dir, batch_bytes(template.batches), template.end)
    finally:
        lg.close()


@pytest.mark.parametrize("torn", [0, 1, 12, 60, 61, -1])
def test_complete_next_batch_before_junk_is_kept(template: Template, workdir, torn: int) -> None:  # type: ignore[no-untyped-def]
    """A whole valid batch at the end survives; the torn batch after it (cut at ``torn`` bytes) goes."""
    following = patched(NEW_BATCH, template.end)
    next_after = rb.parse_header(following).next_offset
    torn_tail = patched(NEW_BATCH, next_after)[: torn if torn >= 0 else len(NEW_BATCH) - 1]
    log_dir = workdir(template.crash)
    with open(seg_path(log_dir, template.active), "ab") as f:
        f.write(following + torn_tail)
    lg = reopen(log_dir, clean=False, recovery_point=template.active)
    try:
        assert_log_holds(lg, log_dir, [*batch_bytes(template.batches), following], next_after)
    finally:
        lg.close()


# -- a damaged batch in a middle segment --------------------------------------------------------


def _garble_middle(template: Template, log_dir: Path) -> StoredBatch:
    """Flip a byte inside the records of the second batch of the second segment."""
    victim = template.in_segment(template.segments[1])[1]
    with open(seg_path(log_dir, victim.segment), "r+b") as f:
        f.seek(victim.position + rb.HEADER_SIZE + 3)
        byte = f.read(1)
        f.seek(victim.position + rb.HEADER_SIZE + 3)
        f.write(bytes([byte[0] ^ 0x5A]))
    return victim


def test_damage_after_the_recovery_point_cuts_the_log_there(template: Template, workdir) -> None:  # type: ignore[no-untyped-def]
    """Unflushed damage in a middle segment: the log ends before it, later segments are deleted."""
    for recovery_point in (0, template.segments[1]):
        log_dir = workdir(template.crash)
        victim = _garble_middle(template, log_dir)
        lg = reopen(log_dir, clean=False, recovery_point=recovery_point)
        try:
            kept = [b for b in template.batches if b.base < victim.base]
            assert [s.base_offset for s in lg.segments] == template.segments[:2]
            for later in template.segments[2:]:
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                    assert not seg_path(log_dir, later, suffix).exists()
            assert lg.recovery_point == victim.base, "recovery flushes what it kept"
            assert_log_holds(lg, log_dir, batch_bytes(kept), victim.base)
        finally:
            lg.close()


@pytest.mark.parametrize("clean", [False, True], ids=["unclean-below-recovery-point", "clean"])
def test_damage_below_the_recovery_point_is_served_as_stored(template: Template, workdir, clean: bool) -> None:  # type: ignore[no-untyped-def]
    """Flushed data is trusted, as in Kafka: the log opens whole and serves the damaged batch as it
    is on disk; the client's CRC check rejects it. Nothing else is affected."""
    log_dir = workdir(template.clean if clean else template.crash)
    victim = _garble_middle(template, log_dir)
    lg = reopen(log_dir, clean=clean, recovery_point=template.segments[2])
    try:
        assert [s.base_offset for s in lg.segments] == template.segments
        damaged = seg_path(log_dir, victim.segment).read_bytes()[victim.position : victim.position + len(victim.data)]
        assert damaged != victim.data
        kept = [damaged if b == victim else b.data for b in template.batches]
        assert_log_holds(lg, log_dir, kept, template.end)
        region = lg.read(victim.base, 1)
        assert region is not None
        with pytest.raises(CorruptRecordError):
            rb.check_batch(region.read_bytes())
    finally:
        lg.close()


# -- damaged indexes ----------------------------------------------------------------------------


def _damage_index(path: Path, kind: str, log_size: int, rng: random.Random) -> None:
    entry = 8 if path.suffix == INDEX_SUFFIX else 12
    size = path.stat().st_size if path.exists() else 0
    if kind == "deleted":
        path.unlink()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "odd-size":
        path.write_bytes(path.read_bytes()[: max(size - 3, 1)])
    elif kind == "odd-size-grown":
        path.write_bytes(path.read_bytes() + b"\x01\x02\x03")
    elif kind == "fewer-entries":
        path.write_bytes(path.read_bytes()[: max(size - entry, 0)])
    elif kind == "zeros":
        path.write_bytes(bytes(max(size, 3 * entry)))
    elif kind == "garbage":
        path.write_bytes(rng.randbytes(max(size, 3 * entry)))
    elif kind == "past-the-log":
        data = bytearray(path.read_bytes())
        if entry == 8:  # last offset-index entry: a position beyond the log's end
            data += struct.pack(">II", 0x7FFF, log_size + 100)
        else:  # last time-index entry: an offset beyond the segment, with the largest timestamp
            data += struct.pack(">qI", T0 + 10**9, 0x7FFF)
        path.write_bytes(bytes(data))
    else:
        raise AssertionError(kind)


INDEX_DAMAGE = ["deleted", "empty", "odd-size", "odd-size-grown", "fewer-entries", "zeros", "garbage", "past-the-log"]
OPEN_MODES = {
    "clean": {"clean": True},
    "unclean-scan-all": {"clean": False, "recovery_point": 0},
    "unclean-scan-active": {"clean": False, "recovery_point": None},  # recovery point = log end
}


# Time-index damage that a trusted open (clean shutdown, or a segment below the recovery point) does
# not detect. As in Kafka, such files are only sanity-checked (sizes, first/last entry order), not
# compared with the log, so the segment's largest timestamp comes out wrong: retention by time and
# ListOffsets by timestamp (which skips segments whose largest timestamp is below the target) can
# then be wrong. Plain reads and offset lookups stay correct. (An *empty* time index is detected.)
TRUSTED_TIME_INDEX_LIMITS = {
    ("rolled", "clean"): {"fewer-entries", "zeros", "garbage", "past-the-log"},
    ("rolled", "unclean-scan-active"): {"fewer-entries", "zeros", "garbage", "past-the-log"},
    # The active segment is rescanned from its last offset-index entry, which masks fewer-entries
    # here because the template's timestamps grow with offsets.
    ("active", "clean"): {"zeros", "past-the-log"},
}


@pytest.mark.parametrize("suffix", [INDEX_SUFFIX, TIME_INDEX_SUFFIX])
@pytest.mark.parametrize("kind", INDEX_DAMAGE)
@pytest.mark.parametrize("mode", list(OPEN_MODES))
@pytest.mark.parametrize("which", ["rolled", "active"])
def test_damaged_index_is_rebuilt_or_harmless(  # type: ignore[no-untyped-def]
    template: Template, workdir, suffix: str, kind: str, mode: str, which: str
) -> None:
    """Reads are always right; the indexes are consistent with the log (rebuilt, or the damage is
    harmless) and timestamp lookups right, except for the time-index damage listed in
    ``TRUSTED_TIME_INDEX_LIMITS`` (xfail: a known limitation shared with Kafka)."""
    base = template.segments[1] if which == "rolled" else template.active
    log_dir = workdir(template.clean)
    log_size = seg_path(log_dir, base).stat().st_size
    _damage_index(seg_path(log_dir, base, suffix), kind, log_size, random.Random(f"{suffix}{kind}{which}"))
    opts = dict(OPEN_MODES[mode])
    if opts.get("recovery_point", 0) is None:
        opts["recovery_point"] = template.end
    lg = reopen(log_dir, **opts)  # type: ignore[arg-type]
    try:
        assert [s.base_offset for s in lg.segments] == template.segments
        assert_log_reads(lg, log_dir, batch_bytes(template.batches), template.end)
        known_limit = suffix == TIME_INDEX_SUFFIX and kind in TRUSTED_TIME_INDEX_LIMITS.get((which, mode), set())
        if known_limit:
            seg = next(s for s in lg.segments if s.base_offset == base)
            with pytest.raises(AssertionError):
                assert_indexes_consistent(seg)
            pytest.xfail("a trusted time index is only sanity-checked, as in Kafka: the segment's largest "
                         "timestamp is wrong, so time retention and ListOffsets by timestamp may be")
        _assert_timestamps_found(lg, template)
        assert_log_holds(lg, log_dir, batch_bytes(template.batches), template.end)
    finally:
        lg.close()
    # What close leaves behind opens clean and is whole.
    lg = reopen(log_dir, clean=True)
    try:
        for seg in lg.segments:
            assert_indexes_consistent(seg)
        assert lg.next_offset == template.end + 1
    finally:
        lg.close()


def _assert_timestamps_found(lg: Log, template: Template) -> None:
    """ListOffsets by timestamp finds each batch's first record (timestamps grow with offsets)."""
    for b in template.batches[:: max(1, len(template.batches) // 12)] + template.batches[-1:]:
        found = lg.offset_for_timestamp(b.header.base_timestamp)
        assert found is not None and found.offset == b.base, f"timestamp of batch {b.base}"
    assert lg.offset_for_timestamp(template.batches[-1].header.max_timestamp + 1) is None


def test_all_indexes_deleted_at_once(template: Template, workdir) -> None:  # type: ignore[no-untyped-def]
    for clean in (True, False):
        log_dir = workdir(template.clean if clean else template.crash)
        for p in [*log_dir.glob("*" + INDEX_SUFFIX), *log_dir.glob("*" + TIME_INDEX_SUFFIX)]:
            p.unlink()
        lg = reopen(log_dir, clean=clean, recovery_point=template.end)
        try:
            assert_log_holds(lg, log_dir, batch_bytes(template.batches), template.end, append=False)
            _assert_timestamps_found(lg, template)
        finally:
            lg.close()


# -- through the log manager --------------------------------------------------------------------


def test_manager_recovers_a_torn_tail_when_the_clean_marker_is_missing(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    mgr = LogManager([tmp_path], CONFIG, clock=clock, background_flush=False)
    mgr.startup()
    lg = mgr.create_log("orders", 0)
    for i in range(30):
        lg.append(_batch(i, records=1 + i % 2))
    mgr.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    log_dir = tmp_path / TOPIC_DIR
    batches = stored_batches(log_dir)
    last = batches[-1]
    # The crash: the last write was torn and the clean-shutdown marker never written.
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    with open(seg_path(log_dir, last.segment), "r+b") as f:
        f.truncate(last.position + len(last.data) - 5)
    OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).write({("orders", 0): last.segment})
    mgr = LogManager([tmp_path], CONFIG, clock=clock, background_flush=False)
    mgr.startup()
    try:
        lg = mgr.get_log("orders", 0)
        assert lg is not None
        assert_log_holds(lg, log_dir, batch_bytes(batches[:-1]), last.base)
        assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read()[("orders", 0)] == last.base
    finally:
        mgr.shutdown()
