"""Producer ids: allocated in blocks whose end is made durable first, so no id is ever handed out twice.

Kafka's controller hands brokers blocks of producer ids; a one-node Odradek keeps the end of its
current block in ``producer-id-block`` in the first data directory (written atomically). An id is
handed out only below a durable block end; a restart starts at the stored end, so ids of the block
in use at a crash are skipped, never reused. Ids fit Kafka's int64 and start at 0.

In a ZooKeeper cluster, ``ZkProducerIdAllocator`` claims blocks from ``/latest_producer_id_block`` instead
(a conditional update, as Kafka's ZkProducerIdManager): blocks of different brokers never overlap, and a
restarted broker claims a fresh block, so no id is ever handed out twice cluster-wide.

Invariants:
- Every id returned is larger than every id returned before, in this process or an earlier one.
- The file is replaced atomically (``checkpoint.write_atomically``); a missing file means a fresh
  data directory; an unreadable one is an error that stops the broker (handing out ids again from 0
  could duplicate data of producers that are still alive).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from odradek.protocol.errors import StorageError
from odradek.storage.checkpoint import write_atomically

BLOCK_FILE = "producer-id-block"
BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, data_dir: Path, block_size: int = BLOCK_SIZE) -> None:
        self.path = data_dir / BLOCK_FILE
        self.block_size = block_size
        self._lock = threading.Lock()
        try:
            text = self.path.read_text().strip() if self.path.exists() else "0"
            self._next = self._block_end = int(text)
        except (OSError, ValueError) as e:
            raise StorageError(f"{self.path} is unreadable ({e}): it holds where producer ids continue; restore "
                               "it, or write a number larger than any producer id in use") from e

    def next_producer_id(self) -> int:
        with self._lock:
            if self._next >= self._block_end:
                end = self._next + self.block_size
                write_atomically(self.path, f"{end}\n".encode())
                self._block_end = end
            pid = self._next
            self._next += 1
            return pid


class ZkProducerIdAllocator:
    """Producer ids from blocks claimed in ZooKeeper (one ZooKeeper round trip per ``block_size`` ids)."""

    def __init__(self, claim: Callable[[int], tuple[int, int]], block_size: int = BLOCK_SIZE) -> None:
        self._claim = claim
        self.block_size = block_size
        self._lock = threading.Lock()
        self._next = self._block_end = 0

    def next_producer_id(self) -> int:
        with self._lock:
            if self._next >= self._block_end:
                self._next, self._block_end = self._claim(self.block_size)
            pid = self._next
            self._next += 1
            return pid
