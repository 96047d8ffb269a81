"""What replay reads from a partition of ``__consumer_offsets``: data records with their place, and markers.

The coordinator's durable state is a function of the sequence of entries of each partition, from its
log start (``state.py`` applies them). Two kinds of entry:

- ``DataRecord``: an offset or group record (``records.py``), with ``record_offset``, the log offset
  its effect counts from, and ``producer_id``: the producer of the transactional batch that holds it
  (a TxnOffsetCommit), or ``NO_PRODUCER_ID`` for the coordinator's own, non-transactional batches.
- ``TxnMarker``: the COMMIT or ABORT control record of a producer's transaction. It settles that
  producer's pending offsets in this partition only.

Invariants:
- ``record_offset`` is the record's own log offset, except for a copy that an earlier version's
  rewrite of the topic appended: that copy carries its original's offset (so an older offset stays
  older than a later pending transactional one). Compaction keeps offsets, so nothing writes such
  copies any more. Record offsets of group records are not used.
- A marker never carries data; a data record with a producer id is pending until a marker of that
  producer follows it in the same partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from odradek.coordinator.group.records import Key, Value
from odradek.protocol.batch import NO_PRODUCER_ID

__all__ = ["NO_PRODUCER_ID", "DataRecord", "LogEntry", "TxnMarker"]


@dataclass(frozen=True, slots=True)
class DataRecord:
    key: Key
    value: Value | None
    record_offset: int
    producer_id: int = NO_PRODUCER_ID


@dataclass(frozen=True, slots=True)
class TxnMarker:
    producer_id: int
    commit: bool


LogEntry = DataRecord | TxnMarker
