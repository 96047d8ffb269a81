"""The compiled cleaner (``compiled_pass`` + ``kernel`` + ``key_table``) writes exactly what the reference Python
cleaner writes: both run the same pass on the same generated logs and their ``.cleaned`` files, end offsets and
statistics are compared byte for byte.

Logs mix keys of many lengths (empty, short, longer than a table word), keyless records, tombstones, compressed
batches, idempotent and transactional producers (commits, aborts, open transactions), several passes with maps so
small that they fill mid-segment, time passing over delete horizons, and damaged batches (a flipped byte; a
flipped byte in the records with the CRC fixed, which only the record scanner catches). The kernel's buffers are
shrunk at random so that chunks cut batches, span and output lists fill up and the record scratch grows.
"""

from __future__ import annotations

import dataclasses
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from odradek.clock import ManualClock
from odradek.protocol import batch as rb
from odradek.protocol.compression import Compression
from odradek.protocol.errors import KafkaError
from odradek.protocol.records import RecordInput, build_batch, iter_batches
from odradek.storage.cleaner import compiled_pass
from odradek.storage.cleaner.clean import CLEANED_SUFFIX, CleanTask, clean, discard_cleaned
from odradek.storage.cleaner.cleaner import plan_pass, swap_in
from odradek.storage.cleaner.key_table import CompiledOffsetMap
from odradek.storage.cleaner.offset_map import OffsetMap
from odradek.storage.log import Log
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.segment import LOG_SUFFIX
from tests.storage.helpers import T0, small_config

DAY = 86_400_000
KEYS = [b"", b"a", b"k1", b"k2", b"key-0000000003", b"a-key-longer-than-sixteen-bytes", b"\x00\x01\xff" * 7]
CODECS = [Compression.NONE] * 4 + [Compression.GZIP, Compression.LZ4, Compression.ZSTD]

_records = st.lists(st.tuples(st.sampled_from([*range(len(KEYS)), None]),  # None: a keyless record
                              st.sampled_from(["value"] * 5 + ["tombstone"])), min_size=1, max_size=8)
_ops = st.one_of(
    st.tuples(st.just("plain"), _records, st.sampled_from(CODECS)),
    st.tuples(st.just("plain"), _records, st.sampled_from(CODECS)),
    st.tuples(st.just("txn"), st.sampled_from([1, 2]), _records),
    st.tuples(st.just("idempotent"), st.sampled_from([1, 2]), _records),
    st.tuples(st.just("end"), st.sampled_from([1, 2]), st.booleans()),
    st.just(("clean",)),
    st.just(("roll",)),
    st.tuples(st.just("tick"), st.sampled_from([0, 500, 2_000, DAY + 1])),
)
_buffers = st.fixed_dictionaries({
    "CHUNK_BYTES": st.sampled_from([70, 150, 400, 1 << 20]),
    "OVERLAP_BYTES": st.sampled_from([0, 40, 300, 1 << 16]),
    "SPAN_ROWS": st.sampled_from([1, 2, 4096]),
    "SCRATCH_ROWS": st.sampled_from([1, 3, 1024]),
    "OUTPUT_MIN_BYTES": st.sampled_from([1, 200, 1 << 16]),
    "SKIP_MIN_BYTES": st.sampled_from([0, 200, 32 * 1024]),  # runs of batches the rewrite drops unread
})


class Scripted:
    """A log written by a script; each "clean" runs one pass both ways, compares them and swaps one in."""

    def __init__(self, directory: Path, memory_bytes: int, retention: int, io_buffer_bytes: int) -> None:
        self.directory = directory
        self.clock = ManualClock(T0)
        self.memory_bytes = memory_bytes
        self.io_buffer_bytes = io_buffer_bytes
        # "delete" accepts keyless records; the passes are planned here whatever the policy
        self.config = small_config(cleanup_policy="delete", segment_bytes=900, delete_retention_ms=retention)
        state = ProducerStateManager(directory, "t-0", expiration_ms=DAY * 30)
        self.log = Log.open(directory, self.config, clock=self.clock, producer_state=state)
        self.checkpoint: int | None = None
        self.seq = {1: 0, 2: 0}
        self.in_txn = {1: False, 2: False}
        self.n = 0
        self.passes = 0

    def records(self, spec: list[tuple[int | None, str]]) -> list[RecordInput]:
        out = []
        for k, kind in spec:
            self.n += 1
            value = None if kind == "tombstone" else b"v%d" % self.n + b"." * (self.n % 40)
            out.append(RecordInput(None if k is None else KEYS[k], value, self.clock.milliseconds() + self.n % 7))
        return out

    def run(self, op: tuple[Any, ...]) -> None:
        lg = self.log
        if op[0] == "plain":
            lg.append(build_batch(self.records(op[1]), compression=op[2]))
        elif op[0] in ("txn", "idempotent"):
            pid, txn = op[1], op[0] == "txn"
            if self.in_txn[pid] and not txn:
                return
            records = self.records(op[2])
            lg.append(build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=self.seq[pid],
                                  is_transactional=txn))
            self.seq[pid] += len(records)
            self.in_txn[pid] = self.in_txn[pid] or txn
        elif op[0] == "end":
            if self.in_txn[op[1]]:
                lg.append_marker(op[1], 0, op[2], 0)
                self.in_txn[op[1]] = False
        elif op[0] == "roll":
            lg.roll()
        elif op[0] == "tick":
            self.clock.advance(op[1])
        else:
            self.clean_both()

    def task(self) -> tuple[CleanTask, tuple[Any, ...]]:
        lg = self.log
        lg.update_high_watermark(lg.next_offset)
        view = lg.cleaning_view()
        now = self.clock.milliseconds()
        task, segments = plan_pass(lg, view, view.cleanable(self.checkpoint, now, 0), now,
                                   memory_bytes=self.memory_bytes)
        return dataclasses.replace(task, io_buffer_bytes=self.io_buffer_bytes), segments

    def cleaned_files(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.directory.glob("*" + CLEANED_SUFFIX))}

    def one_way(self, task: CleanTask, compiled: bool) -> tuple[str, Any, dict[str, bytes]]:
        try:
            result = clean(task, compiled=compiled)
        except (KafkaError, struct.error) as e:  # struct.error: a damaged base offset (outside the CRC)
            assert not self.cleaned_files(), "a failed pass leaves no file"
            return "error", type(e), {}
        files = self.cleaned_files()
        return "ok", result, files

    def clean_both(self) -> None:
        task, segments = self.task()
        if not task.segments or task.first_dirty >= task.first_uncleanable:
            return
        ref_kind, ref, ref_files = self.one_way(task, compiled=False)
        if ref_kind == "ok":
            for c in ref.segments:
                discard_cleaned(self.directory, c.base_offset)
        kind, got, files = self.one_way(task, compiled=True)
        assert kind == ref_kind, f"reference: {ref}; compiled: {got}"
        event(f"a pass: {kind}")
        if kind == "error":
            assert got is ref
            return
        assert files == ref_files
        assert (got.segments, got.end_offset) == (ref.segments, ref.end_offset)
        assert dataclasses.replace(got.stats, seconds=0.0, bytes_skipped=0) == dataclasses.replace(ref.stats,
                                                                                                   seconds=0.0)
        event(f"a pass {'skipped some' if got.stats.bytes_skipped else 'read all'} of the batches it dropped")
        event(f"a pass kept {'all' if got.stats.records_kept == got.stats.records_read else 'some'} records, "
              f"{'filled' if got.end_offset < task.first_uncleanable else 'did not fill'} its map")
        assert swap_in(self.log, segments, got)
        self.checkpoint = got.end_offset
        self.passes += 1

    def damage(self, which: int, where: int, fix_crc: bool) -> None:
        """Flip a byte of a batch of a rolled segment (in its records when ``fix_crc``, the CRC then restamped)."""
        rolled = self.log.segments[:-1]
        if not rolled:
            return
        seg = rolled[which % len(rolled)]
        path = self.directory / (f"{seg.base_offset:020d}" + LOG_SUFFIX)
        data = bytearray(path.read_bytes())
        batches = list(iter_batches(bytes(data)))
        if not batches:
            return
        pos, h = batches[where % len(batches)]
        if fix_crc:
            if h.size <= rb.HEADER_SIZE:
                return
            data[pos + rb.HEADER_SIZE + where % (h.size - rb.HEADER_SIZE)] ^= 0x41
            rb.restamp_crc(data, pos, h.size)
        else:
            data[pos + where % h.size] ^= 0x41
        path.write_bytes(bytes(data))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_ops, min_size=10, max_size=80), st.sampled_from([300, 700, 1500, 1 << 20]),
       st.sampled_from([0, 1_000, DAY]), st.sampled_from([100, 4096, 512 * 1024]), _buffers,
       st.one_of(st.none(), st.tuples(st.integers(0, 20), st.integers(0, 10_000), st.booleans())))
def test_the_compiled_cleaner_writes_what_the_reference_writes(
    script: list[tuple[Any, ...]], memory_bytes: int, retention: int, io_buffer_bytes: int,
    buffers: dict[str, int], damage: tuple[int, int, bool] | None,
) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="clean-kernel-"))
    try:
        with pytest.MonkeyPatch.context() as mp:
            for name, value in buffers.items():
                mp.setattr(compiled_pass, name, value)
            s = Scripted(tmp / "t-0", memory_bytes, retention, io_buffer_bytes)
            for op in script:
                s.run(op)
            for pid, open_txn in s.in_txn.items():
                if open_txn:
                    s.log.append_marker(pid, 0, True, 0)
            s.log.roll()
            s.log.append(build_batch([RecordInput(b"tail", b"t", T0)]))
            if damage is not None:
                s.damage(*damage)
            for _ in range(4):  # passes over what is left, time passing over the horizons
                s.clean_both()
                s.clock.advance(retention + 1)
            s.log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("keys", [[b"x"], [b"", b"a", b"ab", b"abcdefgh", b"abcdefghi", b"k" * 100]])
def test_the_compiled_map_charges_and_answers_as_the_reference_map(keys: list[bytes]) -> None:
    for memory in (128, 300, 1000, 1 << 16):
        ref, got = OffsetMap(memory, 0.9), CompiledOffsetMap(memory, 0.9)
        for i in range(3000):
            key = keys[i % len(keys)] + b"%d" % (i % 700)
            assert got.put(key, i) == ref.put(key, i)
            assert got.put(key, i - 1) == ref.put(key, i - 1)  # an older offset never wins
        assert (got.charged, got.latest_offset, got.size) == (ref.charged, ref.latest_offset, ref.size)
        for i in range(800):
            key = keys[i % len(keys)] + b"%d" % i
            assert got.get(key) == ref.get(key)
        for i in range(0, 2000, 7):  # a batch's keys in one call: put in order until one does not fit
            batch = [keys[j % len(keys)] + b"%d" % (j % 900) for j in range(i, i + 7)]
            offsets = list(range(3000 + i, 3007 + i))
            assert got.put_many(batch, offsets) == ref.put_many(batch, offsets)
            assert got.get_many(batch) == ref.get_many(batch)
        assert (got.charged, got.latest_offset, got.size) == (ref.charged, ref.latest_offset, ref.size)
        assert got.put_many([], []) == ref.put_many([], []) == 0 and got.get_many([]) == []
        got.clear()
        assert (got.size, got.charged, got.latest_offset, got.get(keys[0] + b"0")) == (0, 0, -1, -1)


def test_a_pass_of_the_compiled_cleaner_with_a_segment_shorter_than_planned_fails_as_the_reference(
    tmp_path: Path,
) -> None:
    s = Scripted(tmp_path / "t-0", 1 << 20, 0, 4096)
    for i in range(30):
        s.log.append(build_batch([RecordInput(b"k%d" % (i % 3), b"v" * 50, T0)]))
    s.log.roll()
    s.log.append(build_batch([RecordInput(b"tail", b"t", T0)]))
    first = s.log.segments[0]
    path = s.directory / (f"{first.base_offset:020d}" + LOG_SUFFIX)
    path.write_bytes(path.read_bytes()[:-30])
    task, _ = s.task()
    outcomes = {s.one_way(task, compiled)[:2] for compiled in (False, True)}
    assert len(outcomes) == 1 and next(iter(outcomes))[0] == "error"
    s.log.close()


def test_runs_of_superseded_batches_are_not_read_by_the_rewrite_and_the_pass_writes_what_the_reference_writes(
    tmp_path: Path,
) -> None:
    """A log whose older half is wholly superseded (its keys all written again later), at the default skip length:
    the compiled rewrite skips those runs unread, and still writes the reference's bytes and counts."""
    directory = tmp_path / "t-0"
    lg = Log.open(directory, small_config(cleanup_policy="delete", segment_bytes=256 * 1024))
    value = b"v" * 1000
    for round_ in range(2):
        for i in range(0, 600, 8):  # 75 batches of 8 records (8.2 KB each) per round
            lg.append(build_batch([RecordInput(None if (round_, i, j) == (0, 80, 0) else b"key-%d" % (i + j), value, T0)
                                   for j in range(8)]))
    first_round = lg.next_offset // 2
    lg.append(build_batch([RecordInput(b"key-3", value, T0)]))  # the first batch of the first round stays
    lg.roll()
    lg.append(build_batch([RecordInput(b"tail", b"t", T0)]))
    lg.update_high_watermark(lg.next_offset)
    view = lg.cleaning_view()
    task, _ = plan_pass(lg, view, view.cleanable(None, T0, 0), T0, memory_bytes=1 << 20)
    ref = clean(task, compiled=False)
    ref_files = {p.name: p.read_bytes() for p in sorted(directory.glob("*" + CLEANED_SUFFIX))}
    for c in ref.segments:
        discard_cleaned(directory, c.base_offset)
    got = clean(task, compiled=True)
    assert {p.name: p.read_bytes() for p in sorted(directory.glob("*" + CLEANED_SUFFIX))} == ref_files
    assert (got.segments, got.end_offset) == (ref.segments, ref.end_offset)
    assert dataclasses.replace(got.stats, seconds=0.0, bytes_skipped=0) == dataclasses.replace(ref.stats, seconds=0.0)
    assert (ref.stats.records_kept, ref.stats.keyless_removed) == (600, 1)
    first_round_bytes = sum(s.size for s in task.segments) * first_round // (2 * first_round + 1)
    assert 3 * compiled_pass.SKIP_MIN_BYTES <= got.stats.bytes_skipped < first_round_bytes
    lg.close()
