"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, retention and removal with deleted topics.

A commit is one offset record per partition, answered once the records are durable; the offsets
are readable (OffsetFetch) from the moment they are applied. Checks follow Kafka:

- A commit with generation -1 and no member id is a "simple" commit (admin tools, manual-assign
  consumers): allowed when the group is Empty or unknown (which creates it). Otherwise the member
  must be in the group (UNKNOWN_MEMBER_ID), the generation current (ILLEGAL_GENERATION), static
  members not fenced (FENCED_INSTANCE_ID), and the group not waiting for its SyncGroup round
  (REBALANCE_IN_PROGRESS). A commit from a member counts as a heartbeat.
- Per partition: metadata longer than ``offset.metadata.max.bytes`` gets OFFSET_METADATA_TOO_LARGE,
  an unknown topic-partition UNKNOWN_TOPIC_OR_PARTITION; the other partitions are still committed.
- Retention (``offsets.retention.minutes``, KIP-211): offsets of an Empty group expire that long after
  the group became Empty (simple groups: after the commit); offsets with an explicit expire time then;
  offsets of topics a Stable consumer group no longer subscribes to, after their commit (KIP-496). An
  Empty group left with no offsets is deleted (a group tombstone).
- Pending transactional offsets (``txn_offsets.py``) count as offsets here, as in Kafka: OffsetFetch
  with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a partition that has one (without it,
  the committed offset); OffsetDelete and deleted topics write a tombstone for a partition that has
  only a pending offset; retention never expires an offset while a pending one waits for the same
  partition, nor deletes a group that holds pending offsets.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from odradek.coordinator.group import consumer_protocol
from odradek.coordinator.group.effects import Effects, Record, Write
from odradek.coordinator.group.log_entries import NO_PRODUCER_ID
from odradek.coordinator.group.model import CONSUMER, Group, GroupState, OffsetEntry, Ticket, TopicPartition
from odradek.coordinator.group.records import GroupKey, OffsetKey, OffsetValue
from odradek.coordinator.group.state import CoordinatorState
from odradek.protocol.errors import ErrorCode

E = ErrorCode
NO_OFFSET = -1

# (topic, partition, offset, leader epoch, metadata)
CommitRequest = tuple[str, int, int, int, str | None]
# (topic-partition, committed offset or None, partition error)
FetchedOffset = tuple[TopicPartition, OffsetEntry | None, ErrorCode]


class OffsetOps(CoordinatorState):
    def commit(self, ticket: Ticket, *, group_id: str, generation_id: int, member_id: str,
               group_instance_id: str | None, offsets: list[CommitRequest], retention_ms: int,
               partition_exists: Callable[[str, int], bool], now: int) -> Effects:
        """Commit ``offsets``; the reply is ``{(topic, partition): ErrorCode}``."""
        fx = Effects()
        error = self.unavailable(group_id)
        group = self.groups.get(group_id)
        if error is None:
            error = self._commit_error(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return fx.reply(ticket, {(t, p): error for t, p, *_ in offsets})
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_timestamp=now)
        member = group.members.get(member_id)
        if member is not None:
            self.schedule_heartbeat(group, member, now)
        expire = now + retention_ms if retention_ms >= 0 else -1
        return self.write_offsets(ticket, group_id, offsets, partition_exists, now, expire=expire)

    def write_offsets(self, ticket: Ticket, group_id: str, offsets: list[CommitRequest],
                      partition_exists: Callable[[str, int], bool], now: int, *, expire: int = -1,
                      producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1) -> Effects:
        """The write of a validated commit (OffsetCommit, or TxnOffsetCommit with ``producer_id``): per
        partition OFFSET_METADATA_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION or a record; the reply
        ``{(topic, partition): ErrorCode}`` goes out once the records are durable (at once if there are none)."""
        fx = Effects()
        results: dict[TopicPartition, ErrorCode] = {}
        records: list[Record] = []
        limit = self.config.offset_metadata_max_bytes
        for topic, partition, offset, leader_epoch, metadata in offsets:
            meta = metadata or ""
            if len(meta.encode()) > limit:
                results[(topic, partition)] = E.OFFSET_METADATA_TOO_LARGE
            elif not partition_exists(topic, partition):
                results[(topic, partition)] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                results[(topic, partition)] = E.NONE
                records.append((OffsetKey(group_id, topic, partition),
                                OffsetValue(offset, leader_epoch, meta, now, expire)))
        if not records:
            return fx.reply(ticket, results)

        def failed(error: ErrorCode) -> list[tuple[Ticket, Any]]:
            return [(ticket, {tp: (error if e == E.NONE else e) for tp, e in results.items()})]

        fx.writes.append(Write(self.partition_of(group_id), records, [(ticket, results)], failed,
                               producer_id=producer_id, producer_epoch=producer_epoch))
        return fx

    def _commit_error(self, group: Group | None, generation_id: int, member_id: str,
                      instance_id: str | None) -> ErrorCode | None:
        if group is None:
            return None if generation_id < 0 else E.ILLEGAL_GENERATION
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None  # a simple commit (admin tools, consumers that assign partitions themselves)
        error = self.member_error(group, member_id, instance_id, generation_id)
        if error is None and group.is_(GroupState.COMPLETING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return error

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None, *,
                      require_stable: bool = False) -> tuple[ErrorCode, list[FetchedOffset]]:
        """Committed offsets of ``partitions`` (None: every partition with a committed offset), each with
        its error: None and NONE where there is none; None and UNSTABLE_OFFSET_COMMIT with
        ``require_stable`` where a transactional offset of the partition awaits its marker (KIP-447)."""
        error = self.unavailable(group_id)
        if error is not None:
            return error, [(tp, None, E.NONE) for tp in partitions or ()]
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE, [(tp, None, E.NONE) for tp in partitions or ()]
        wanted = sorted(group.offsets) if partitions is None else list(partitions)
        unstable = group.pending_partitions() if require_stable else set()
        return E.NONE, [(tp, None, E.UNSTABLE_OFFSET_COMMIT) if tp in unstable else (tp, group.offsets.get(tp), E.NONE)
                        for tp in wanted]

    def delete_offsets(self, ticket: Ticket, group_id: str, partitions: list[TopicPartition]) -> Effects:
        """OffsetDelete; the reply is ``(group error, {(topic, partition): ErrorCode})``."""
        fx = Effects()
        error = self.unavailable(group_id)
        group = self.groups.get(group_id)
        if error is None and (group is None or group.is_(GroupState.DEAD)):
            error = E.GROUP_ID_NOT_FOUND
        if error is None and group is not None and group.protocol_type != CONSUMER \
                and not group.is_(GroupState.EMPTY):
            error = E.NON_EMPTY_GROUP
        if error is not None or group is None:
            return fx.reply(ticket, (error, {}))
        subscribed = None if group.is_(GroupState.EMPTY) else subscribed_topics(group)
        results: dict[TopicPartition, ErrorCode] = {}
        records: list[Record] = []
        for topic, partition in partitions:
            if subscribed is not None and (subscribed is ALL or topic in subscribed):
                results[(topic, partition)] = E.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            results[(topic, partition)] = E.NONE
            if (topic, partition) in group.offsets or group.has_pending((topic, partition)):
                records.append((OffsetKey(group_id, topic, partition), None))
        if not records:
            return fx.reply(ticket, (E.NONE, results))

        def failed(error: ErrorCode) -> list[tuple[Ticket, Any]]:
            return [(ticket, (error, {}))]

        fx.writes.append(Write(self.partition_of(group_id), records, [(ticket, (E.NONE, results))], failed))
        return fx

    def remove_topic_offsets(self, topic: str) -> Effects:
        """Tombstones for every committed or pending transactional offset of ``topic`` (it was deleted)."""
        by_partition: dict[int, list[Record]] = defaultdict(list)
        for group in self.groups.values():
            for t, p in sorted(set(group.offsets) | group.pending_partitions()):
                if t == topic:
                    by_partition[self.partition_of(group.group_id)].append((OffsetKey(group.group_id, t, p), None))
        return Effects(writes=[Write(part, recs) for part, recs in sorted(by_partition.items())])

    def expire_offsets(self, now: int) -> Effects:
        """Tombstones for offsets past retention, and for Empty groups left with no offsets."""
        by_partition: dict[int, list[Record]] = defaultdict(list)
        retention = self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            part = self.partition_of(group.group_id)
            if part in self.loading:
                continue
            expired = [tp for tp, e in group.offsets.items()
                       if not group.has_pending(tp) and self._offset_expired(group, tp, e, retention, now)]
            by_partition[part].extend((OffsetKey(group.group_id, t, p), None) for t, p in expired)
            if group.is_(GroupState.EMPTY) and len(expired) == len(group.offsets) and not group.pending_txn_offsets:
                by_partition[part].append((GroupKey(group.group_id), None))
        fx = Effects(writes=[Write(part, recs) for part, recs in sorted(by_partition.items()) if recs])
        count = sum(len(w.records) for w in fx.writes)
        if count:
            fx.notes.append(f"offsets retention: removing {count} expired offsets and empty groups")
        return fx

    def _offset_expired(self, group: Group, tp: TopicPartition, entry: OffsetEntry, retention: int, now: int) -> bool:
        if entry.expire_timestamp >= 0:
            return now >= entry.expire_timestamp
        if group.is_(GroupState.EMPTY):
            base = group.state_timestamp if group.protocol_type and group.state_timestamp >= 0 \
                else entry.commit_timestamp
            return now - base >= retention
        if group.is_(GroupState.STABLE) and group.protocol_type == CONSUMER:
            topics = subscribed_topics(group)
            return topics is not ALL and tp[0] not in topics and now - entry.commit_timestamp >= retention
        return False


class _All(frozenset[str]):
    """Subscriptions that could not be read: treat every topic as subscribed."""


ALL = _All()


def subscribed_topics(group: Group) -> frozenset[str]:
    """The topics a consumer group's members subscribe to, or ``ALL`` when a subscription does not decode."""
    topics: set[str] = set()
    for m in group.members.values():
        try:
            topics.update(consumer_protocol.decode_subscription(m.metadata(group.protocol)).topics)
        except ValueError:
            return ALL
    return frozenset(topics)
