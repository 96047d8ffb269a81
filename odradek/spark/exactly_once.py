"""The exactly-once streaming sink: one Kafka transaction per task per micro-batch, skipped when replayed.

Spark re-runs a micro-batch whose commit it did not record (a restart after a crash, a failed task
retried, a stage re-run), handing every task of the batch the same rows again under the same batch id
and partition id, and a task attempt may die halfway through. Each task therefore writes its rows in a
transaction of its own, and commits, in the same transaction, a marker saying "partition P of batch B
is written": an offset of B + 1 committed for the consumer group named after the transactional id
(``TxnOffsetCommit``, which is visible exactly when the transaction commits).

Per task: transactional id ``<transactionalIdPrefix><query id>-<partition id>`` (the query id is
stable across restarts: it lives in the checkpoint); the batch and query ids come from the task's
local properties that Spark sets for every micro-batch job.

1. ``init_transactions``: fences every earlier attempt of this task (a zombie can no longer write or
   commit) and aborts its open transaction, if any.
2. Read the group's committed offsets with ``require_stable`` (no pending transactional commit can
   be missed); if the marker says this batch (or a later one) is written, consume the rows and write
   nothing.
3. Otherwise begin, produce every row, commit the marker offset with ``send_offsets_to_transaction``,
   commit. Any error aborts the transaction and fails the task, which Spark retries.

A consumer reading with ``isolation.level=read_committed`` then sees every row exactly once. Readers
with read_uncommitted also see the rows of aborted attempts. Caveats: the rows given to a task of a
replayed batch must be the same (a deterministic query, as Spark's exactly-once guarantee requires of
sinks), and a marker is a committed offset, which the broker expires with its group after
``offsets.retention.minutes`` (7 days) without commits: a query stopped for longer may rewrite its
last, uncommitted micro-batch once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
DEFAULT_PREFIX = "odradek-spark-"
_TIMEOUT_S = 120


class TaskIdentity:
    """Which micro-batch and which partition of it this task writes, and the ids derived from them."""

    def __init__(self, prefix: str) -> None:
        from pyspark import TaskContext

        tc = TaskContext.get()
        batch = tc.getLocalProperty(BATCH_ID_PROPERTY) if tc is not None else None
        query = tc.getLocalProperty(QUERY_ID_PROPERTY) if tc is not None else None
        if tc is None or batch is None or query is None:
            raise RuntimeError("exactly-once writes run inside a streaming query's tasks; for a batch write "
                               "or without transactions set the option exactlyOnce=false")
        self.batch_id = int(batch)
        self.partition = tc.partitionId()
        self.transactional_id = f"{prefix}{query}-{self.partition}"


def last_written_batch(client: dict[str, str], group: str) -> int | None:
    """The newest batch id the marker group records as written (committed offset - 1), or None."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({k: v for k, v in client.items() if not k.startswith(("transactional.", "transaction."))})
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], require_stable=True,
                                                request_timeout=_TIMEOUT_S)
    result = futures[group].result(_TIMEOUT_S)
    offsets = [tp.offset for tp in result.topic_partitions or [] if tp.error is None and tp.offset >= 0]
    return max(offsets) - 1 if offsets else None


def write_transactionally(client: dict[str, str], prefix: str, iterator: Iterator[pa.RecordBatch],
                          send: Callable[[Any, Iterator[pa.RecordBatch]], tuple[int, str | None]]) -> int:
    """Write the task's rows exactly once; ``send(producer, iterator)`` produces them and returns
    (rows, a topic written to). Returns the rows written (0 for a batch already written)."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    task = TaskIdentity(prefix)
    tid = task.transactional_id
    producer = Producer({**client, "transactional.id": tid})
    try:
        producer.init_transactions(_TIMEOUT_S)
        done = last_written_batch(client, tid)
        if done is not None and done >= task.batch_id:
            for _ in iterator:  # a replay of a batch this partition already wrote
                pass
            return 0
        producer.begin_transaction()
        try:
            count, topic = send(producer, iterator)
            if count:
                assert topic is not None
                marker = Consumer({**{k: v for k, v in client.items() if not k.startswith("transact")},
                                   "group.id": tid, "enable.auto.commit": False})
                try:
                    producer.send_offsets_to_transaction([TopicPartition(topic, 0, task.batch_id + 1)],
                                                         marker.consumer_group_metadata(), _TIMEOUT_S)
                finally:
                    marker.close()
                producer.commit_transaction(_TIMEOUT_S)
            else:
                producer.abort_transaction(_TIMEOUT_S)  # nothing to write, nothing to mark
        except BaseException:
            try:
                producer.abort_transaction(_TIMEOUT_S)
            except KafkaException:
                pass  # fenced or failed: the next attempt's init_transactions aborts it
            raise
        return count
    except KafkaException as e:
        raise RuntimeError(f"exactly-once write of batch {task.batch_id} partition {task.partition} "
                           f"(transactional id {tid}) failed: {e}") from None
