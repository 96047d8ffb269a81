"""Where a partition's producer state (idempotent sequences, open transactions) plugs into the log.

The log calls the hook at the points where Kafka's ProducerStateManager is consulted:

- ``validate_append(headers)`` before anything is written: may raise a ``KafkaError`` to refuse the
  append (duplicate or out-of-order sequence, fenced epoch); nothing is written then.
- ``on_append(headers)`` after the batches are durable in the page cache, with offsets assigned.
- ``on_recovered_batch(header)`` for each batch scanned while recovering after an unclean shutdown
  (batches before the recovery point are covered by ``load_snapshot``).
- ``load_snapshot(offset)`` when the log opens, with the recovery point it starts from.
- ``take_snapshot(offset)`` when a segment is rolled, so restarts need not rescan the log.
- ``truncate(log_start_offset, log_end_offset)`` after truncation or a log start offset change.

``NoProducerState`` is the hook for logs that keep no producer state (until idempotence lands).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from odradek.protocol.batch import BatchHeader


class ProducerStateHook(Protocol):
    def validate_append(self, headers: Sequence[BatchHeader]) -> None: ...

    def on_append(self, headers: Sequence[BatchHeader]) -> None: ...

    def on_recovered_batch(self, header: BatchHeader) -> None: ...

    def load_snapshot(self, offset: int) -> None: ...

    def take_snapshot(self, offset: int) -> None: ...

    def truncate(self, log_start_offset: int, log_end_offset: int) -> None: ...


class NoProducerState:
    """Keeps nothing: every append is accepted."""

    def validate_append(self, headers: Sequence[BatchHeader]) -> None:
        return None

    def on_append(self, headers: Sequence[BatchHeader]) -> None:
        return None

    def on_recovered_batch(self, header: BatchHeader) -> None:
        return None

    def load_snapshot(self, offset: int) -> None:
        return None

    def take_snapshot(self, offset: int) -> None:
        return None

    def truncate(self, log_start_offset: int, log_end_offset: int) -> None:
        return None
