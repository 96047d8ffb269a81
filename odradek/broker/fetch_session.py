"""Incremental fetch sessions (KIP-227): the broker remembers a consumer's partitions between fetches.

A full fetch with ``session_epoch=0`` opens a session (if a slot is free) and lists every partition;
later fetches carry ``session_epoch`` 1, 2, ... and list only partitions that were added or changed
(plus ``forgotten`` ones to drop). The response to an incremental fetch lists only partitions with
records, an error, or a changed high watermark / last stable offset / log start offset.

Invariants:
- A session's expected epoch is the last accepted epoch + 1 (wrapping to 1 after int32 max); any
  other epoch is INVALID_FETCH_SESSION_EPOCH and leaves the session unchanged.
- ``session_epoch=-1`` closes the session (a sessionless full fetch); ``0`` with a session id
  closes it and opens a new one.
- At most ``slots`` sessions live; when full, the least recently used one idle for longer than
  ``eviction_idle_ms`` makes room, otherwise the fetch runs sessionless (session id 0).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

INT32_MAX = 2**31 - 1


@dataclass(slots=True)
class SessionPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    sent_high_watermark: int = -2  # -2: never sent, so the first response always includes it
    sent_last_stable_offset: int = -2
    sent_log_start_offset: int = -2


@dataclass(slots=True)
class FetchSession:
    session_id: int
    next_epoch: int
    last_used_ms: int
    partitions: dict[tuple[str, int], SessionPartition] = field(default_factory=dict)

    def advance(self, now_ms: int) -> None:
        self.next_epoch = 1 if self.next_epoch >= INT32_MAX else self.next_epoch + 1
        self.last_used_ms = now_ms


class FetchSessionCache:
    def __init__(self, slots: int, *, eviction_idle_ms: int = 120_000) -> None:
        self.slots = slots
        self.eviction_idle_ms = eviction_idle_ms
        self.sessions: dict[int, FetchSession] = {}
        self._ids = itertools.count(random.randint(1, 1 << 20))

    def create(self, now_ms: int) -> FetchSession | None:
        if len(self.sessions) >= self.slots:
            oldest = min(self.sessions.values(), key=lambda s: s.last_used_ms, default=None)
            if oldest is None or now_ms - oldest.last_used_ms < self.eviction_idle_ms:
                return None
            del self.sessions[oldest.session_id]
        session_id = next(self._ids) % INT32_MAX or next(self._ids)
        while session_id in self.sessions:
            session_id = next(self._ids) % INT32_MAX or 1
        session = FetchSession(session_id, 1, now_ms)
        self.sessions[session_id] = session
        return session

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)
