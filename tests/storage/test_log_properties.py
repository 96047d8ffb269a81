"""Model-based property test of the partition log (``odradek.storage.log.Log``).

A hypothesis ``RuleBasedStateMachine`` drives one log through random sequences of appends (single
and multi-batch record sets, some refused), reads at random offsets with random ``max_bytes`` /
``max_offset`` / ``min_one``, rolls, time and size retention with a ``ManualClock``,
DeleteRecords, follower truncation, ListOffsets by timestamp, and restarts: clean
(``Log.close`` + ``Log.open(clean_shutdown=True, ...)``), after a crash (a snapshot of the
directory taken while the log is open, indexes still preallocated, then ``Log.open`` without the
clean flag and a recovery point at or below the real one), and through ``LogManager``
shutdown/startup with its checkpoints and clean-shutdown marker.

The model is the list of batches the log should hold, as bytes: exactly what was appended except
baseOffset (bytes 0..8) and, when a leader epoch is given, partitionLeaderEpoch (bytes 12..16),
which the log owns. Segments are tiny so they roll often, and index files are tiny so they fill.

After every step the log must agree with the model: dense offsets, ``log_start_offset <=
high_watermark <= next_offset``, the segment files hold exactly the model's bytes, every retained
batch reads back byte-identical, index entries point at the batches they name, and each segment
knows its largest timestamp. Retention is checked against Kafka's rules applied to the model
(oldest segments first, never the active one nor one reaching the high watermark; DeleteRecords
removes only segments wholly below the new log start).

100 examples of up to 30 steps take about 10 s; ``--hypothesis-show-statistics`` shows how often
segments were deleted and how many segments crash recovery had to scan.
"""

from __future__ import annotations

import bisect
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from odradek.clock import ManualClock
from odradek.protocol import batch as rb
from odradek.protocol.compression import Compression
from odradek.protocol.errors import KafkaError, OffsetOutOfRangeError
from odradek.protocol.records import RecordInput, build_batch
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.config import DAYS, LONG_MAX, LogConfig
from odradek.storage.log import Log, RecordListTooLargeError
from odradek.storage.manager import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)

TOPIC = "events"
PARTITION = 0
TP = (TOPIC, PARTITION)
START_MS = 1_700_000_000_000


@dataclass(frozen=True)
class ModelBatch:
    base: int
    data: bytes  # as the log must store it: original bytes with baseOffset (and epoch) patched
    timestamps: tuple[int, ...]  # one per record, record i at offset base + i

    @property
    def last(self) -> int:
        return self.base + len(self.timestamps) - 1

    @property
    def next(self) -> int:
        return self.base + len(self.timestamps)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def max_ts(self) -> int:
        return max(self.timestamps)


def patched(original: bytes, base_offset: int, leader_epoch: int | None) -> bytes:
    """What the log stores for ``original``: only baseOffset and partitionLeaderEpoch change."""
    out = bytearray(original)
    out[0:8] = base_offset.to_bytes(8, "big", signed=True)
    if leader_epoch is not None:
        out[12:16] = leader_epoch.to_bytes(4, "big", signed=True)
    return bytes(out)


_CODECS = [Compression.NONE] * 6 + [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]

_headers = st.lists(st.tuples(st.sampled_from(["a", "trace", "ü"]), st.none() | st.binary(max_size=6)), max_size=2)


@st.composite
def batches(draw: st.DrawFn, now_ms: int) -> tuple[bytes, tuple[int, ...]]:
    """A client batch (random base offset and epoch, which the log must overwrite) and its timestamps."""
    n = draw(st.integers(1, 5))
    first_ts = now_ms - draw(st.integers(0, 3000))
    timestamps = tuple(first_ts + draw(st.integers(-500, 500)) if i else first_ts for i in range(n))
    records = [
        RecordInput(
            key=draw(st.none() | st.binary(max_size=8)),
            value=draw(st.none() | st.binary(max_size=40)),
            timestamp=ts,
            headers=tuple(draw(_headers)),
        )
        for ts in timestamps
    ]
    data = build_batch(
        records,
        base_offset=draw(st.sampled_from([0, 7, 123_456_789])),
        compression=draw(st.sampled_from(_CODECS)),
        partition_leader_epoch=draw(st.sampled_from([-1, 0, 99])),
    )
    return data, timestamps


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="odradek-logprop-"))
        self.generation = 0
        self.clock = ManualClock(START_MS)
        self.log: Log | None = None
        self.manager: LogManager | None = None
        self.model: list[ModelBatch] = []
        self.next_offset = 0
        self.lso = 0
        self.hw = 0

    # -- setup / teardown ------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self.tmp / f"g{self.generation}"

    @property
    def log_dir(self) -> Path:
        return self.root / f"{TOPIC}-{PARTITION}"

    @initialize(
        segment_bytes=st.sampled_from([300, 500, 800, 1200]),
        segment_index_bytes=st.sampled_from([12, 24, 48, 96, 1024]),
        index_interval_bytes=st.sampled_from([0, 50, 200, 4096]),
        retention_ms=st.sampled_from([-1, 5_000, 20_000]),
        retention_bytes=st.sampled_from([-1, 600, 1500]),
        segment_ms=st.sampled_from([2_000, 60_000, 7 * DAYS]),
        flush_messages=st.sampled_from([1, 7, LONG_MAX]),
        file_delete_delay_ms=st.sampled_from([0, 1_000, 60_000]),
    )
    def setup(self, **cfg: int) -> None:
        self.config = LogConfig(**cfg)
        self.log = Log.open(self.log_dir, self.config, clock=self.clock)

    def teardown(self) -> None:
        try:
            self._close_owner()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _close_owner(self) -> None:
        if self.manager is not None:
            self.manager.shutdown()
        elif self.log is not None:
            self.log.close()
        self.manager = None
        self.log = None

    # -- helpers ---------------------------------------------------------------------------------

    def _batch_index(self, offset: int) -> int:
        """Index in the model of the batch holding ``offset`` (which must be held)."""
        i = bisect.bisect_right([b.base for b in self.model], offset) - 1
        assert i >= 0 and self.model[i].base <= offset <= self.model[i].last
        return i

    def _segment_end(self, base: int) -> int | None:
        """Base offset of the segment after the one holding offset ``base`` (None for the active one)."""
        bases = [s.base_offset for s in self.log.segments]
        j = bisect.bisect_right(bases, base)
        return bases[j] if j < len(bases) else None

    def _set_hw(self, value: int) -> None:
        self.hw = min(max(value, self.lso), self.next_offset)

    def _after_segment_deletion(
        self, before: list[tuple[int, int]], lso_before: int, now: int, *, only_below_log_start: bool = False
    ) -> None:
        """Check which prefix of segments was deleted, against Kafka's rules applied to the model, and
        update the model. Oldest first, never the active segment, never one holding offsets at or
        above the high watermark; a segment goes when it lies wholly below the log start or (for
        retention, not DeleteRecords) its largest timestamp is older than retention.ms or the log
        exceeds retention.bytes by at least its size."""
        bases_after = [s.base_offset for s in self.log.segments]
        deleted = len(before) - len(bases_after)
        assert deleted >= 0
        assert [b for b, _ in before[deleted:]] == bases_after, "retention deletes a prefix of the segments"
        cfg = self.config
        by_time = cfg.retention_ms >= 0 and not only_below_log_start
        by_size = cfg.retention_bytes >= 0 and not only_below_log_start
        excess = sum(size for _, size in before) - cfg.retention_bytes if by_size else -1
        for i, (base, size) in enumerate(before[:-1]):
            next_base = before[i + 1][0]
            in_seg = [b for b in self.model if base <= b.base < next_base]
            largest = max(b.max_ts for b in in_seg)
            deletable = next_base <= self.hw and (
                next_base <= lso_before or (by_time and now - largest > cfg.retention_ms) or excess >= size
            )
            if i < deleted:
                assert deletable, f"segment {base} was deleted but no retention rule applies"
                excess -= size
            else:
                assert not deletable, f"segment {base} should have been deleted"
                break
        if deleted:
            event("segments deleted")
        first = bases_after[0]
        self.model = [b for b in self.model if b.base >= first]
        assert not self.model or self.model[0].base == first
        self.lso = max(self.lso, first)

    def _segment_info(self) -> list[tuple[int, int]]:
        return [(s.base_offset, s.size) for s in self.log.segments]

    # -- appends ---------------------------------------------------------------------------------

    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        self._append(data)

    @rule(data=st.data(), times=st.integers(2, 8), gap_ms=st.integers(0, 1_500))
    def append_burst(self, data: st.DataObject, times: int, gap_ms: int) -> None:
        """Several produce requests in a row, the clock moving between them (fills segments)."""
        for _ in range(times):
            self._append(data)
            self.clock.advance(gap_ms)

    def _append(self, data: st.DataObject) -> None:
        count = data.draw(st.sampled_from([1, 1, 1, 2, 3]), label="batches")
        drawn = [data.draw(batches(self.clock.milliseconds()), label="batch") for _ in range(count)]
        record_set = b"".join(d for d, _ in drawn)
        epoch = data.draw(st.none() | st.integers(0, 3), label="leader_epoch")
        size_before = self.log.size
        if len(record_set) > self.config.segment_bytes:
            with pytest.raises(RecordListTooLargeError):
                self.log.append(record_set, leader_epoch=epoch)
            assert self.log.next_offset == self.next_offset
            assert self.log.size == size_before
            return
        info = self.log.append(record_set, leader_epoch=epoch)
        total = sum(len(ts) for _, ts in drawn)
        assert info.first_offset == self.next_offset
        assert info.last_offset == self.next_offset + total - 1
        assert info.record_count == total
        assert info.size == len(record_set)
        offset = self.next_offset
        for original, timestamps in drawn:
            self.model.append(ModelBatch(offset, patched(original, offset, epoch), timestamps))
            offset += len(timestamps)
        self.next_offset = offset
        assert self.log.next_offset == self.next_offset, "offsets are dense"
        assert self.log.size == size_before + len(record_set)
        if data.draw(st.booleans(), label="replicated"):  # a single replica: the high watermark follows
            self.log.update_high_watermark(self.next_offset)
            self._set_hw(self.next_offset)

    @rule(data=st.data())
    def append_damaged(self, data: st.DataObject) -> None:
        """A record set with one damaged batch is refused whole and leaves the log as it was."""
        count = data.draw(st.integers(1, 3), label="batches")
        parts = [bytearray(data.draw(batches(self.clock.milliseconds()), label="batch")[0]) for _ in range(count)]
        victim = parts[data.draw(st.integers(0, count - 1), label="victim")]
        # Bytes the log validates: batchLength, magic, CRC and everything it covers.
        pos = data.draw(st.sampled_from([8, 9, 10, 11]) | st.integers(rb.MAGIC_AT, len(victim) - 1), label="pos")
        victim[pos] ^= data.draw(st.integers(1, 255), label="xor")
        size_before, files_before = self.log.size, self._file_sizes()
        with pytest.raises(KafkaError):
            self.log.append(b"".join(parts))
        assert self.log.next_offset == self.next_offset
        assert self.log.size == size_before
        assert self._file_sizes() == files_before

    def _file_sizes(self) -> dict[str, int]:
        return {p.name: p.stat().st_size for p in self.log_dir.glob("*.log")}

    # -- reads -----------------------------------------------------------------------------------

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.lso - 2, self.next_offset + 2), label="offset")
        max_bytes = data.draw(st.integers(1, 1500), label="max_bytes")
        min_one = data.draw(st.booleans(), label="min_one")
        max_offset = data.draw(st.none() | st.integers(self.lso, self.next_offset + 1), label="max_offset")
        if offset < self.lso or offset > self.next_offset:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read(offset, max_bytes, max_offset=max_offset, min_one=min_one)
            return
        region = self.log.read(offset, max_bytes, max_offset=max_offset, min_one=min_one)
        expected = self._expected_read(offset, max_bytes, max_offset, min_one)
        if expected is None:
            assert region is None, f"read({offset}, {max_bytes}, {max_offset}, {min_one}) should be empty"
            return
        assert region is not None, f"read({offset}, {max_bytes}, {max_offset}, {min_one}) returned nothing"
        got = region.read_bytes()
        want = b"".join(b.data for b in expected)
        assert region.first_offset == expected[0].base
        assert got == want, (
            f"read({offset}, {max_bytes}, {max_offset}, {min_one}): got {len(got)} bytes from "
            f"{region.first_offset}, expected batches {[b.base for b in expected]}"
        )
        assert len(got) <= max_bytes or len(expected) == 1

    def _expected_read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool
    ) -> list[ModelBatch] | None:
        """Kafka's fetch semantics: whole batches of one segment from the one holding ``offset``, none
        reaching ``max_offset``, as many as fit ``max_bytes`` (the first one alone with ``min_one``)."""
        if offset == self.next_offset:
            return None
        i = self._batch_index(offset)
        seg_end = self._segment_end(self.model[i].base)

        def allowed(b: ModelBatch) -> bool:
            return (max_offset is None or b.last < max_offset) and (seg_end is None or b.base < seg_end)

        first = self.model[i]
        if not allowed(first):
            return None
        if first.size > max_bytes:
            return [first] if min_one else None
        out, total = [first], first.size
        for b in self.model[i + 1 :]:
            if not allowed(b) or total + b.size > max_bytes:
                break
            out.append(b)
            total += b.size
        return out

    @rule(data=st.data())
    def offset_for_timestamp(self, data: st.DataObject) -> None:
        target = self.clock.milliseconds() + data.draw(st.integers(-40_000, 1_000), label="delta")
        got = self.log.offset_for_timestamp(target)
        candidates = [
            (b.base + k, ts)
            for b in self.model
            for k, ts in enumerate(b.timestamps)
            if ts >= target and b.base + k >= self.lso
        ]
        if not candidates:
            assert got is None, f"offset_for_timestamp({target}) = {got}, expected none"
        else:
            offset, ts = min(candidates)
            assert got is not None, f"offset_for_timestamp({target}) found nothing, expected {offset}"
            assert (got.offset, got.timestamp) == (offset, ts), f"offset_for_timestamp({target})"

    # -- rolling, time, retention ----------------------------------------------------------------

    @rule()
    def roll(self) -> None:
        had_data = self.log.active_segment.size > 0
        self.log.roll()
        if had_data:
            assert self.log.active_segment.base_offset == self.next_offset
            assert self.log.active_segment.size == 0

    @rule(ms=st.integers(0, 8_000))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def retention(self) -> None:
        before, lso_before = self._segment_info(), self.lso
        self.log.delete_retained_segments()
        self._after_segment_deletion(before, lso_before, self.clock.milliseconds())
        self.log.purge_deleted()

    @rule(hw=st.integers(0, 10_000))
    def update_high_watermark(self, hw: int) -> None:
        hw = min(hw, self.next_offset)
        assert self.log.update_high_watermark(hw) == min(max(hw, self.lso), self.next_offset)
        self._set_hw(hw)

    @rule(data=st.data())
    def delete_records_before(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.lso - 1, self.hw + 1), label="offset")
        if offset < 0 or offset > self.hw:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.delete_records_before(offset)
            return
        before = self._segment_info()
        self.lso = max(self.lso, offset)
        returned = self.log.delete_records_before(offset)  # also applies retention
        self._after_segment_deletion(before, self.lso, self.clock.milliseconds(), only_below_log_start=True)
        assert returned == self.lso

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        boundaries = [b.base for b in self.model] + [self.next_offset]
        offset = data.draw(
            st.sampled_from(boundaries) | st.integers(max(self.lso - 2, 0), self.next_offset + 1), label="offset"
        )
        first_base = self.log.segments[0].base_offset
        changed = self.log.truncate_to(offset)
        if offset >= self.next_offset:
            assert not changed
            return
        assert changed
        if offset <= self.lso or offset <= first_base:
            self.model = []
            self.next_offset = self.lso = offset
        else:
            # Whole batches go: the end falls back to the start of the batch holding ``offset``, and
            # the log start with it if that batch also held the log start.
            i = self._batch_index(offset)
            self.next_offset = self.model[i].base
            del self.model[i:]
            self.lso = min(self.lso, self.next_offset)
        self._set_hw(self.hw)

    # -- restarts --------------------------------------------------------------------------------

    def _offsets_for_restart(self) -> tuple[int, int, int]:
        lg = self.log
        return lg.recovery_point, lg.log_start_offset, lg.high_watermark

    @rule()
    def reopen_clean(self) -> None:
        self.log.flush()
        rp, lso, hw = self._offsets_for_restart()
        assert rp == self.next_offset
        self._close_owner()
        self.log = Log.open(
            self.log_dir, self.config, clock=self.clock, clean_shutdown=True,
            recovery_point=rp, log_start_offset=lso, high_watermark=hw,
        )

    def _crash_snapshot(self) -> None:
        """Copy the directory tree as it is now (a crash image: indexes preallocated, no marker),
        release the running log, and continue in the copy."""
        old_root = self.root
        self.generation += 1
        shutil.copytree(old_root, self.root)
        (self.root / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        self._close_owner()

    @rule(data=st.data())
    def reopen_after_crash(self, data: st.DataObject) -> None:
        rp, lso, hw = self._offsets_for_restart()
        recovery_point = data.draw(st.integers(0, rp), label="recovery_point")
        self._crash_snapshot()
        self.log = Log.open(
            self.log_dir, self.config, clock=self.clock, clean_shutdown=False,
            recovery_point=recovery_point, log_start_offset=lso, high_watermark=hw,
        )
        event(f"crash recovery with {len(self.log.segments)} segments")
        assert self.log.recovery_point == self.next_offset, "recovery flushes what it kept"

    @rule(clean=st.booleans(), stale_recovery_point=st.booleans())
    def restart_manager(self, clean: bool, stale_recovery_point: bool) -> None:
        """Shut down (or crash) and start a LogManager over the data directory."""
        if self.manager is not None and clean:
            self.manager.shutdown()
        elif self.manager is not None:
            self.manager.checkpoint()
            self._crash_snapshot()
        else:
            # A bare log: write what a previous broker run would have left behind.
            if clean:
                self.log.flush()
            rp, lso, hw = self._offsets_for_restart()
            self._close_owner()
            OffsetCheckpointFile(self.root / RECOVERY_POINT_CHECKPOINT).write({TP: rp})
            OffsetCheckpointFile(self.root / LOG_START_CHECKPOINT).write({TP: lso})
            OffsetCheckpointFile(self.root / HIGH_WATERMARK_CHECKPOINT).write({TP: hw})
            marker = self.root / CLEAN_SHUTDOWN_FILE
            if clean:
                marker.write_bytes(b"")
            else:
                marker.unlink(missing_ok=True)
        if not clean and stale_recovery_point:
            OffsetCheckpointFile(self.root / RECOVERY_POINT_CHECKPOINT).write({TP: 0})
        self.manager = LogManager([self.root], self.config, clock=self.clock, background_flush=False)
        self.manager.startup()
        assert not (self.root / CLEAN_SHUTDOWN_FILE).exists()
        self.log = self.manager.get_log(TOPIC, PARTITION)
        assert self.log is not None

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def offsets(self) -> None:
        lg = self.log
        if lg is None:
            return
        assert lg.next_offset == self.next_offset
        assert lg.log_start_offset == self.lso
        assert lg.high_watermark == self.hw
        assert lg.log_start_offset <= lg.high_watermark <= lg.next_offset
        assert lg.recovery_point <= lg.next_offset
        expected = self.model[0].base if self.model else self.next_offset
        for b in self.model:
            assert b.base == expected, "model batches are dense"
            expected = b.next
        assert expected == self.next_offset

    @invariant()
    def segments_hold_the_model(self) -> None:
        """The segment files, byte for byte, are the model's batches; sizes and bases agree."""
        lg = self.log
        if lg is None:
            return
        segments = lg.segments
        bases = [s.base_offset for s in segments]
        assert bases == sorted(set(bases))
        assert bases[0] <= lg.log_start_offset
        assert segments[-1].index.writable and all(not s.index.writable for s in segments[:-1])
        for i, seg in enumerate(segments):
            end = bases[i + 1] if i + 1 < len(bases) else None
            held = [b for b in self.model if b.base >= seg.base_offset and (end is None or b.base < end)]
            if held:
                assert held[0].base == seg.base_offset, "a segment starts at a batch boundary"
            else:
                assert i + 1 == len(segments), "only the active segment may be empty"
                assert seg.base_offset == self.next_offset
            want = b"".join(b.data for b in held)
            assert seg.size == len(want) == os.fstat(seg.fd).st_size
            assert seg.size <= self.config.segment_bytes
            assert os.pread(seg.fd, seg.size + 1, 0) == want, f"segment {seg.base_offset} bytes differ"
            if held:
                assert seg.largest_timestamp == max(b.max_ts for b in held), (
                    f"segment {seg.base_offset} lost its largest timestamp"
                )
            self._check_indexes(seg, held)
        assert sum(s.size for s in segments) == lg.size

    def _check_indexes(self, seg, held: list[ModelBatch]) -> None:  # type: ignore[no-untyped-def]
        positions: dict[int, tuple[int, ModelBatch]] = {}
        pos = 0
        for b in held:
            positions[pos] = (pos, b)
            pos += b.size
        for n in range(seg.index.entries):
            offset, position = seg.index.entry(n)
            assert position in positions, f"index entry ({offset}, {position}) is not at a batch start"
            assert positions[position][1].last == offset, "index entry names the batch's last offset"
        running = -1
        by_last = {b.last: b for b in held}
        for n in range(seg.time_index.entries):
            ts, offset = seg.time_index.entry(n)
            assert offset in by_last, f"time index entry ({ts}, {offset}) names no batch"
            upto = [b for b in held if b.last <= offset]
            assert ts == max(b.max_ts for b in upto), "time index entry holds the max timestamp so far"
            assert ts > running
            running = ts

    @invariant()
    def everything_retained_reads_back(self) -> None:
        lg = self.log
        if lg is None:
            return
        visible = [b for b in self.model if b.last >= self.lso]
        got = bytearray()
        offset = self.lso
        while offset < self.next_offset:
            region = lg.read(offset, 1 << 20)
            assert region is not None
            got += region.read_bytes()
            offset = max(self.lso, _next_after(bytes(got)))
        assert bytes(got) == b"".join(b.data for b in visible)
        for b in visible[-40:]:
            for offset in {max(b.base, self.lso), b.last}:
                region = lg.read(offset, 1)
                assert region is not None and region.first_offset == b.base
                assert region.read_bytes() == b.data


def _next_after(data: bytes) -> int:
    """Offset after the last batch in ``data`` (a concatenation of whole batches)."""
    pos, last = 0, None
    while pos < len(data):
        last = rb.parse_header(data, pos)
        pos += last.size
    assert last is not None and pos == len(data), "reads end on a batch boundary"
    return last.next_offset


LogMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestLogProperties = LogMachine.TestCase
