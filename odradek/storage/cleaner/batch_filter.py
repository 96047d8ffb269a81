"""Rewriting one stored v2 batch with only the records the cleaner keeps.

The only place (with the tools) where stored batches are decoded record by record: the produce and fetch
paths never are.

Invariants of ``filter_batch``:
- Offsets never change: kept records keep their absolute offsets; a rewritten batch keeps the original's base
  offset *and* last offset delta (so the producer's last sequence survives compaction, as Kafka's does), its
  producer id, epoch and base sequence, its transactional and control flags, its partition leader epoch, its
  codec (a compressed batch is recompressed with its own codec) and its timestamp type.
- A batch whose every record is kept is returned as the same bytes (no rewrite, same CRC).
- A batch with no record kept is dropped (None), unless ``keep_empty``: then only its header survives
  (``record_count`` 0, offsets and sequence kept), as Kafka keeps the last batch of a live producer.
- The result is a valid batch: ``check_batch`` passes on it.
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.protocol import batch as rb
from odradek.protocol.records import Record, build_batch, decode_records
from odradek.storage.cleaner.offset_map import OffsetMap


def filter_batch(raw: bytes | bytearray | memoryview, keep: Callable[[Record], bool], *,
                 keep_empty: bool = False) -> tuple[bytes | None, int]:
    """(the batch to write, or None to drop it; how many records it keeps)."""
    header = rb.check_batch(raw)
    records = decode_records(raw)
    kept = [r for r in records if keep(r)]
    if len(kept) == len(records):
        return bytes(raw), len(kept)
    if not kept and not keep_empty:
        return None, 0
    rebuilt = build_batch(
        kept,
        base_offset=header.base_offset,
        compression=header.compression,
        base_timestamp=kept[0].timestamp if kept else header.base_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
    )
    if header.is_log_append_time:
        out = bytearray(rebuilt)
        rb.set_log_append_time(out, 0, len(out), header.max_timestamp)
        rebuilt = bytes(out)
    return rebuilt, len(kept)


def latest_per_key(offset_map: OffsetMap, *, retain_tombstones: bool) -> Callable[[Record], bool]:
    """Compaction's rule for one record of the cleaned range: keep it if it is its key's latest (or lies
    beyond what the map covers), and, for a tombstone (null value), only while ``retain_tombstones`` (before
    its ``delete.retention.ms`` horizon). Records without a key (written before the topic was compacted) are
    kept: there is nothing to compact them against."""
    latest = offset_map.latest_offset
    get = offset_map.get

    def keep(r: Record) -> bool:
        if r.key is None or r.offset > latest:
            return True
        if get(r.key) != r.offset:
            return False
        return r.value is not None or retain_tombstones

    return keep
