"""One adapter per real client library, so each compatibility scenario is written once.

Every adapter drives an unmodified client (confluent-kafka, kafka-python, aiokafka) through the
same small surface: producers and consumers as objects (so one can live across a broker restart),
one-shot ``produce``/``consume`` helpers, ListOffsets lookups and the admin operations each client
has. Results come back as plain values (``Ack``, ``Consumed``, dicts) so scenarios compare them
without knowing which library produced them.

The plain ``consumer`` reads by assignment (``assign``, no commits). ``group_consumer`` is a member
of a consumer group: it subscribes with a group id (optionally a static ``group.instance.id``),
chooses a partition assignor and ``auto.offset.reset``, commits manually or automatically, reads
committed offsets and their metadata back, reports its assignment and the rebalance callbacks the
library made, and closes with or without LeaveGroup where the library allows. Running this module
(``python -m tests.compat.clients member ...``) runs one group member in a process of its own, for
tests that kill a member with SIGKILL. Producers ask for idempotence only when a test says so
(``idempotent=True``; kafka-python 3.x would enable it by default). Every call is bounded by a
timeout; an expired one raises ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

CLIENTS = ("confluent", "kafka-python", "aiokafka")
#: partition.assignment.strategy names, as Kafka's consumers call them.
ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")
#: auto.offset.reset values (``none``: the client raises its own error when there is no committed offset).
OFFSET_RESETS = ("earliest", "latest", "none")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
EARLIEST = "earliest"


@dataclass(frozen=True, slots=True)
class Rec:
    """A record to produce; ``partition=None`` lets the client's partitioner choose."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class Ack:
    """Where an acknowledged record landed (offset -1 when acks=0 gives no offset).

    ``timestamp`` is what the client reports for the record, when it does: its CreateTime, or the
    broker's append time for LogAppendTime topics. It is left out of comparisons.
    """

    partition: int
    offset: int
    timestamp: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Consumed:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    create_time: bool  # timestamp type is CreateTime (False: LogAppendTime)


class ProduceError(Exception):
    """A record was not acknowledged; ``cause`` is the client's own error object."""

    def __init__(self, message: str, cause: Any) -> None:
        super().__init__(message)
        self.cause = cause


class Producer(ABC):
    @abstractmethod
    def send(self, topic: str, records: Sequence[Rec], timeout: float = 30.0) -> list[Ack]:
        """Send ``records`` and wait for all of them; acks in the order of ``records``."""

    @abstractmethod
    def close(self) -> None: ...


class Consumer(ABC):
    @abstractmethod
    def read(self, count: int, timeout: float = 30.0) -> list[Consumed]:
        """The next ``count`` records (fewer only if ``timeout`` expires)."""

    @abstractmethod
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Committed:
    """A committed offset (the next record to read) and the metadata string committed with it."""

    offset: int
    metadata: str


#: What ``GroupConsumer.commit`` takes per partition: an offset, or an offset and a metadata string.
CommitSpec = int | tuple[int, str]


class GroupConsumer(ABC):
    """A member of a consumer group subscribed to one topic, used from one thread at a time.

    ``events`` lists the rebalance callbacks the library made, in order, as ``("assigned" | "revoked"
    | "lost", partitions)``; under the cooperative protocol the partitions are the increment (what
    was added or taken away), under the eager one the whole assignment.
    """

    def __init__(self, topic: str, instance_id: str | None) -> None:
        self.topic = topic
        self.instance_id = instance_id
        self.events: list[tuple[str, frozenset[int]]] = []

    def _event(self, kind: str, tps: Any) -> None:
        self.events.append((kind, frozenset(tp.partition for tp in tps if tp.topic == self.topic)))

    @abstractmethod
    def poll(self, timeout: float = 0.2, max_records: int = 500) -> list[Consumed]:
        """One poll of at most ``timeout`` seconds (it also drives the group protocol for libraries that
        need it); raises the library's error, e.g. for a partition without committed offset when
        ``auto.offset.reset`` is ``none``."""

    @abstractmethod
    def assignment(self) -> frozenset[int]:
        """The partitions of the topic assigned to this member now."""

    @abstractmethod
    def commit(self, offsets: dict[int, CommitSpec] | None = None) -> None:
        """Commit synchronously: ``offsets`` (partition -> next offset to read, optionally with
        metadata), or, when None, the positions after the records ``poll`` returned."""

    @abstractmethod
    def committed(self, partitions: Sequence[int]) -> dict[int, Committed | None]:
        """The group's committed offsets and metadata as the library reads them (None: no commit)."""

    @abstractmethod
    def close(self, leave: bool | None = None) -> None:
        """Close the member; ``leave=None`` does what the library does. A dynamic member sends
        LeaveGroup in every library and none lets it skip that (``leave=False`` raises
        ``NotImplementedError``; kill its process instead, see ``run_member``); a static member
        (``group.instance.id``) never sends LeaveGroup (KIP-345), so ``leave=True`` raises."""

    def _check_leave(self, leave: bool | None) -> None:
        if leave is True and self.instance_id is not None:
            raise NotImplementedError("static members do not send LeaveGroup on close (KIP-345)")
        if leave is False and self.instance_id is None:
            raise NotImplementedError("the library always sends LeaveGroup when a dynamic member closes")


def _commit_parts(spec: CommitSpec) -> tuple[int, str]:
    return (spec, "") if isinstance(spec, int) else spec


class Client(ABC):
    name: str
    #: The ``ASSIGNORS`` this library implements on the client side.
    assignors: tuple[str, ...] = ()
    #: True when ``alter_configs`` keeps the keys it does not mention (IncrementalAlterConfigs);
    #: False when it replaces the whole set (AlterConfigs), resetting the others to their defaults.
    incremental_alter: bool = True
    #: Whether the client can send a header whose value is null (the protocol allows it).
    null_header_values: bool = True

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    # -- data path -------------------------------------------------------------------------------

    @abstractmethod
    def producer(self, *, compression: str = "none", acks: int = -1, retries: bool = True,
                 idempotent: bool = False) -> Producer: ...

    @abstractmethod
    def consumer(self, topic: str, partitions: Sequence[int], start: int | str = EARLIEST, *,
                 max_bytes: int | None = None) -> Consumer:
        """A consumer assigned ``partitions`` from ``start``; ``max_bytes`` sets both the per-partition
        and the per-fetch byte limits (the broker must still return one whole batch per fetch)."""

    def produce(self, topic: str, records: Sequence[Rec], *, compression: str = "none", acks: int = -1,
                timeout: float = 30.0) -> list[Ack]:
        p = self.producer(compression=compression, acks=acks)
        try:
            return p.send(topic, records, timeout)
        finally:
            p.close()

    def consume(self, topic: str, partitions: Sequence[int], *, start: int | str = EARLIEST, count: int,
                timeout: float = 30.0) -> list[Consumed]:
        c = self.consumer(topic, partitions, start)
        try:
            return c.read(count, timeout)
        finally:
            c.close()

    @abstractmethod
    def group_consumer(self, topic: str, group: str, *, instance_id: str | None = None, assignor: str = "range",
                       offset_reset: str = "earliest", auto_commit: bool = False,
                       auto_commit_interval_ms: int = 200, session_timeout_ms: int = 3000,
                       heartbeat_interval_ms: int = 300, max_poll_interval_ms: int = 10000) -> GroupConsumer:
        """A member of ``group`` subscribed to ``topic``. ``assignor`` is one of ``self.assignors``;
        ``max_poll_interval_ms`` is also the rebalance timeout the member announces."""

    @abstractmethod
    def is_no_offset_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` (raised by ``GroupConsumer.poll``) is this client's error for a partition
        without committed offset under ``auto.offset.reset=none``."""

    def is_fenced_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` tells a static member that another instance with its ``group.instance.id``
        took its place (FENCED_INSTANCE_ID)."""
        return self.error_code(exc) == 82

    def _check_assignor(self, assignor: str) -> None:
        if assignor not in self.assignors:
            raise NotImplementedError(f"{self.name} has no {assignor} assignor (it has {', '.join(self.assignors)})")

    @abstractmethod
    def is_message_too_large(self, cause: Any) -> bool:
        """Whether a ``ProduceError.cause`` is this client's MESSAGE_TOO_LARGE error."""

    @abstractmethod
    def offsets_for_times(self, topic: str, timestamps: dict[int, int]) -> dict[int, int | None]:
        """ListOffsets by timestamp: partition -> first offset with timestamp >= ts, or None."""

    @abstractmethod
    def earliest_latest(self, topic: str, partitions: Sequence[int]) -> tuple[dict[int, int], dict[int, int]]: ...

    # -- admin -----------------------------------------------------------------------------------

    @abstractmethod
    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None: ...

    @abstractmethod
    def error_code(self, exc: BaseException) -> int | None:
        """The Kafka wire error code carried by an exception of this client (None if it has none)."""

    def is_topic_exists(self, cause: Any) -> bool:
        """Whether an exception from ``create_topic`` is this client's TOPIC_ALREADY_EXISTS error."""
        return self.error_code(cause) == 36

    @abstractmethod
    def list_topics(self) -> set[str]: ...

    @abstractmethod
    def describe_topic(self, name: str) -> int:
        """The topic's partition count (through the client's admin API)."""

    @abstractmethod
    def delete_topic(self, name: str) -> None: ...

    @abstractmethod
    def describe_configs(self, topic: str) -> dict[str, str | None]: ...

    @abstractmethod
    def alter_configs(self, topic: str, configs: dict[str, str]) -> None: ...

    @abstractmethod
    def create_partitions(self, topic: str, total: int) -> None: ...

    @abstractmethod
    def delete_records(self, topic: str, before: dict[int, int]) -> dict[int, int]:
        """DeleteRecords: partition -> the new log start offset (low watermark)."""

    @abstractmethod
    def describe_cluster(self) -> tuple[str | None, list[tuple[int, str, int]], int | None]:
        """(cluster id, brokers as (id, host, port), controller id)."""

    def admin_list_offsets(self, topic: str, specs: dict[int, int | str]) -> dict[int, tuple[int, int]]:
        """The admin client's ListOffsets: partition -> (offset, timestamp) for ``earliest``, ``latest``,
        ``max_timestamp`` (KIP-734) or a timestamp. ``NotImplementedError`` if the client has none."""
        raise NotImplementedError(f"{self.name} has no admin ListOffsets")

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


def _deadline(timeout: float) -> float:
    return time.monotonic() + timeout


# =============================================================================================
# confluent-kafka (librdkafka)
# =============================================================================================


class _ConfluentProducer(Producer):
    def __init__(self, bootstrap: str, compression: str, acks: int, retries: bool, idempotent: bool) -> None:
        import confluent_kafka

        self._p = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap,
            "acks": str(acks),
            "compression.type": compression,
            "enable.idempotence": idempotent,
            "linger.ms": 5,
            "retries": 5 if retries else 0,
            "message.timeout.ms": 30000,
            "socket.timeout.ms": 10000,
        })

    def send(self, topic: str, records: Sequence[Rec], timeout: float = 30.0) -> list[Ack]:
        results: list[Any] = [None] * len(records)

        def on_delivery(i: int) -> Any:
            def cb(err: Any, msg: Any) -> None:
                results[i] = err if err is not None else msg
            return cb

        for i, r in enumerate(records):
            kwargs: dict[str, Any] = {"value": r.value, "key": r.key, "on_delivery": on_delivery(i)}
            if r.partition is not None:
                kwargs["partition"] = r.partition
            if r.timestamp is not None:
                kwargs["timestamp"] = r.timestamp
            if r.headers:
                kwargs["headers"] = list(r.headers)
            while True:
                try:
                    self._p.produce(topic, **kwargs)
                    break
                except BufferError:
                    self._p.poll(0.1)
        remaining = self._p.flush(timeout)
        if remaining:
            raise TimeoutError(f"confluent producer: {remaining} records not delivered within {timeout}s")
        acks = []
        for i, res in enumerate(results):
            if res is None:
                raise TimeoutError(f"confluent producer: no delivery report for record {i}")
            if not hasattr(res, "offset"):
                raise ProduceError(f"record {i} not acknowledged: {res}", res)
            offset = res.offset()
            ts_type, ts = res.timestamp()
            acks.append(Ack(res.partition(), offset if offset is not None and offset >= 0 else -1,
                            ts if ts_type != 0 else None))
        return acks

    def close(self) -> None:
        self._p.flush(5)


class _ConfluentConsumer(Consumer):
    def __init__(self, bootstrap: str, topic: str, partitions: Sequence[int], start: int | str,
                 max_bytes: int | None) -> None:
        import confluent_kafka

        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": "odradek-compat-unused",  # required by the client; no group APIs are used
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
        if max_bytes is not None:
            # librdkafka wants fetch.max.bytes >= message.max.bytes (its floor is 1000)
            config.update({"fetch.max.bytes": max(max_bytes, 1000), "max.partition.fetch.bytes": max_bytes,
                           "message.max.bytes": max(max_bytes, 1000)})
        self._c = confluent_kafka.Consumer(config)
        offset = confluent_kafka.OFFSET_BEGINNING if start == EARLIEST else int(start)
        self._c.assign([confluent_kafka.TopicPartition(topic, p, offset) for p in partitions])

    def read(self, count: int, timeout: float = 30.0) -> list[Consumed]:
        from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaException

        out: list[Consumed] = []
        deadline = _deadline(timeout)
        while len(out) < count and time.monotonic() < deadline:
            for m in self._c.consume(count - len(out), timeout=min(0.5, max(deadline - time.monotonic(), 0.01))):
                if m.error() is not None:
                    raise KafkaException(m.error())
                ts_type, ts = m.timestamp()
                out.append(Consumed(m.partition(), m.offset(), m.key(), m.value(),
                                    tuple(m.headers() or ()), ts, ts_type == TIMESTAMP_CREATE_TIME))
        return out

    def close(self) -> None:
        self._c.close()


class _ConfluentGroupConsumer(GroupConsumer):
    def __init__(self, bootstrap: str, topic: str, group: str, instance_id: str | None, assignor: str,
                 offset_reset: str, auto_commit: bool, auto_commit_interval_ms: int, session_timeout_ms: int,
                 heartbeat_interval_ms: int, max_poll_interval_ms: int) -> None:
        import confluent_kafka

        super().__init__(topic, instance_id)
        #: errors librdkafka reported outside a record (transport errors while the broker restarts, ...)
        self.errors: list[Any] = []
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "partition.assignment.strategy": assignor,
            "auto.offset.reset": "error" if offset_reset == "none" else offset_reset,
            "enable.auto.commit": auto_commit,
            "auto.commit.interval.ms": auto_commit_interval_ms,
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": heartbeat_interval_ms,
            "max.poll.interval.ms": max_poll_interval_ms,
            "fetch.wait.max.ms": 100,
            "error_cb": self.errors.append,
        }
        if instance_id is not None:
            config["group.instance.id"] = instance_id
        self._c = confluent_kafka.Consumer(config)
        # With callbacks that do not call (incremental_)assign themselves, the client applies the
        # assignment change after they return.
        self._c.subscribe([topic], on_assign=lambda _c, tps: self._event("assigned", tps),
                          on_revoke=lambda _c, tps: self._event("revoked", tps),
                          on_lost=lambda _c, tps: self._event("lost", tps))

    def poll(self, timeout: float = 0.2, max_records: int = 500) -> list[Consumed]:
        from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, KafkaException

        out = []
        for m in self._c.consume(max_records, timeout=timeout):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._AUTO_OFFSET_RESET or err.fatal():
                    raise KafkaException(err)
                self.errors.append(err)
                continue
            ts_type, ts = m.timestamp()
            out.append(Consumed(m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts,
                                ts_type == TIMESTAMP_CREATE_TIME))
        for err in self.errors:  # a fatal error (e.g. fenced by another instance) reaches error_cb only
            if err.fatal() or err.code() == KafkaError._FATAL:
                raise KafkaException(err)
        return out

    def assignment(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self._c.assignment() if tp.topic == self.topic)

    def commit(self, offsets: dict[int, CommitSpec] | None = None) -> None:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        if offsets is None:
            try:
                self._c.commit(asynchronous=False)
            except KafkaException as e:
                if e.args[0].code() != KafkaError._NO_OFFSET:  # nothing consumed since the last commit
                    raise
            return
        tps = []
        for p, spec in offsets.items():
            offset, metadata = _commit_parts(spec)
            tps.append(TopicPartition(self.topic, p, offset, metadata=metadata))
        for tp in self._c.commit(offsets=tps, asynchronous=False) or ():
            if tp.error is not None:
                raise KafkaException(tp.error)

    def committed(self, partitions: Sequence[int]) -> dict[int, Committed | None]:
        from confluent_kafka import KafkaException, TopicPartition

        out: dict[int, Committed | None] = {}
        for tp in self._c.committed([TopicPartition(self.topic, p) for p in partitions], timeout=15):
            if tp.error is not None:
                raise KafkaException(tp.error)
            out[tp.partition] = None if tp.offset < 0 else Committed(tp.offset, tp.metadata or "")
        return out

    def close(self, leave: bool | None = None) -> None:
        self._check_leave(leave)
        self._c.close()


class ConfluentClient(Client):
    name = "confluent"
    assignors = ("range", "roundrobin", "cooperative-sticky")  # librdkafka has no eager sticky assignor

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self._admin: Any = None

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def producer(self, *, compression: str = "none", acks: int = -1, retries: bool = True,
                 idempotent: bool = False) -> Producer:
        return _ConfluentProducer(self.bootstrap, compression, acks, retries, idempotent)

    def consumer(self, topic: str, partitions: Sequence[int], start: int | str = EARLIEST, *,
                 max_bytes: int | None = None) -> Consumer:
        return _ConfluentConsumer(self.bootstrap, topic, partitions, start, max_bytes)

    def group_consumer(self, topic: str, group: str, *, instance_id: str | None = None, assignor: str = "range",
                       offset_reset: str = "earliest", auto_commit: bool = False,
                       auto_commit_interval_ms: int = 200, session_timeout_ms: int = 3000,
                       heartbeat_interval_ms: int = 300, max_poll_interval_ms: int = 10000) -> GroupConsumer:
        self._check_assignor(assignor)
        return _ConfluentGroupConsumer(self.bootstrap, topic, group, instance_id, assignor, offset_reset, auto_commit,
                                       auto_commit_interval_ms, session_timeout_ms, heartbeat_interval_ms,
                                       max_poll_interval_ms)

    def is_no_offset_error(self, exc: BaseException) -> bool:
        from confluent_kafka import KafkaError

        return self.error_code(exc) == KafkaError._AUTO_OFFSET_RESET

    def is_fenced_error(self, exc: BaseException) -> bool:
        from confluent_kafka import KafkaError

        # librdkafka turns FENCED_INSTANCE_ID into its fatal error, naming the cause only in the text
        code = self.error_code(exc)
        return code == KafkaError.FENCED_INSTANCE_ID or (code == KafkaError._FATAL and "fenced" in str(exc).lower())

    def is_message_too_large(self, cause: Any) -> bool:
        from confluent_kafka import KafkaError

        return cause.code() == KafkaError.MSG_SIZE_TOO_LARGE

    def _lookup_consumer(self) -> Any:
        import confluent_kafka

        return confluent_kafka.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "odradek-compat-unused",
                                         "enable.auto.commit": False})

    def offsets_for_times(self, topic: str, timestamps: dict[int, int]) -> dict[int, int | None]:
        import confluent_kafka

        c = self._lookup_consumer()
        try:
            found = c.offsets_for_times(
                [confluent_kafka.TopicPartition(topic, p, ts) for p, ts in timestamps.items()], timeout=15)
        finally:
            c.close()
        out: dict[int, int | None] = {}
        for tp in found:
            if tp.error is not None:
                raise confluent_kafka.KafkaException(tp.error)
            out[tp.partition] = tp.offset if tp.offset >= 0 else None
        return out

    def earliest_latest(self, topic: str, partitions: Sequence[int]) -> tuple[dict[int, int], dict[int, int]]:
        import confluent_kafka

        c = self._lookup_consumer()
        try:
            lows, highs = {}, {}
            for p in partitions:
                lows[p], highs[p] = c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=15,
                                                            cached=False)
            return lows, highs
        finally:
            c.close()

    @staticmethod
    def _wait(futures: dict[Any, Any]) -> dict[Any, Any]:
        return {k: f.result(timeout=30) for k, f in futures.items()}

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        from confluent_kafka.admin import NewTopic

        self._wait(self.admin.create_topics([NewTopic(name, partitions, 1, config=dict(configs or {}))],
                                            request_timeout=30))

    def error_code(self, exc: BaseException) -> int | None:
        from confluent_kafka import KafkaError, KafkaException

        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return int(exc.args[0].code())
        return None

    def list_topics(self) -> set[str]:
        return set(self.admin.list_topics(timeout=15).topics)

    def describe_topic(self, name: str) -> int:
        from confluent_kafka import TopicCollection

        desc = self._wait(self.admin.describe_topics(TopicCollection([name]), request_timeout=30))[name]
        return len(desc.partitions)

    def delete_topic(self, name: str) -> None:
        self._wait(self.admin.delete_topics([name], request_timeout=30))

    def describe_configs(self, topic: str) -> dict[str, str | None]:
        from confluent_kafka.admin import ConfigResource, ResourceType

        res = ConfigResource(ResourceType.TOPIC, topic)
        entries = self._wait(self.admin.describe_configs([res], request_timeout=30))[res]
        return {k: e.value for k, e in entries.items()}

    def alter_configs(self, topic: str, configs: dict[str, str]) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
        ])
        self._wait(self.admin.incremental_alter_configs([res], request_timeout=30))

    def create_partitions(self, topic: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        self._wait(self.admin.create_partitions([NewPartitions(topic, total)], request_timeout=30))

    def delete_records(self, topic: str, before: dict[int, int]) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        res = self._wait(self.admin.delete_records([TopicPartition(topic, p, o) for p, o in before.items()],
                                                   request_timeout=30))
        return {tp.partition: r.low_watermark for tp, r in res.items()}

    def describe_cluster(self) -> tuple[str | None, list[tuple[int, str, int]], int | None]:
        d = self.admin.describe_cluster(request_timeout=30).result(timeout=30)
        return d.cluster_id, [(n.id, n.host, n.port) for n in d.nodes], d.controller.id if d.controller else None

    def admin_list_offsets(self, topic: str, specs: dict[int, int | str]) -> dict[int, tuple[int, int]]:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        named = {"earliest": OffsetSpec.earliest, "latest": OffsetSpec.latest,
                 "max_timestamp": OffsetSpec.max_timestamp}
        req = {TopicPartition(topic, p): named[s]() if isinstance(s, str) else OffsetSpec.for_timestamp(s)
               for p, s in specs.items()}
        res = self._wait(self.admin.list_offsets(req, request_timeout=30))
        return {tp.partition: (r.offset, r.timestamp) for tp, r in res.items()}


# =============================================================================================
# kafka-python 3.x
# =============================================================================================


class _KafkaPythonProducer(Producer):
    def __init__(self, bootstrap: str, compression: str, acks: int, retries: bool, idempotent: bool) -> None:
        from kafka import KafkaProducer

        self._p = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all" if acks == -1 else acks,
            compression_type=None if compression == "none" else compression,
            enable_idempotence=idempotent,
            linger_ms=5,
            retries=5 if retries else 0,
            request_timeout_ms=10000,
            delivery_timeout_ms=30000,
        )

    def send(self, topic: str, records: Sequence[Rec], timeout: float = 30.0) -> list[Ack]:
        from kafka.errors import KafkaError

        futures = [
            self._p.send(topic, value=r.value, key=r.key, partition=r.partition, timestamp_ms=r.timestamp,
                         headers=list(r.headers) or None)
            for r in records
        ]
        self._p.flush(timeout=timeout)
        acks = []
        deadline = _deadline(timeout)
        for i, f in enumerate(futures):
            try:
                md = f.get(timeout=max(deadline - time.monotonic(), 0.1))
            except KafkaError as e:
                raise ProduceError(f"record {i} not acknowledged: {e!r}", e) from e
            acks.append(Ack(md.partition, md.offset if md.offset >= 0 else -1,
                            md.timestamp if md.timestamp is not None and md.timestamp >= 0 else None))
        return acks

    def close(self) -> None:
        self._p.close(timeout=10)


class _KafkaPythonConsumer(Consumer):
    def __init__(self, bootstrap: str, topic: str, partitions: Sequence[int], start: int | str,
                 max_bytes: int | None) -> None:
        from kafka import KafkaConsumer, TopicPartition

        limits = {} if max_bytes is None else {"fetch_max_bytes": max_bytes, "max_partition_fetch_bytes": max_bytes}
        self._c = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            request_timeout_ms=10000,
            **limits,
        )
        tps = [TopicPartition(topic, p) for p in partitions]
        self._c.assign(tps)
        for tp in tps:
            if start == EARLIEST:
                self._c.seek_to_beginning(tp)
            else:
                self._c.seek(tp, int(start))

    def read(self, count: int, timeout: float = 30.0) -> list[Consumed]:
        out: list[Consumed] = []
        deadline = _deadline(timeout)
        while len(out) < count and time.monotonic() < deadline:
            batches = self._c.poll(timeout_ms=500, max_records=count - len(out))
            for tp in sorted(batches, key=lambda tp: tp.partition):
                for m in batches[tp]:
                    out.append(Consumed(m.partition, m.offset, m.key, m.value, tuple(m.headers or ()),
                                        m.timestamp, m.timestamp_type == 0))
        return out

    def close(self) -> None:
        self._c.close(autocommit=False)


def _kafka_python_assignor(name: str) -> Any:
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    return {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
            "sticky": StickyPartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}[name]


class _KafkaPythonGroupConsumer(GroupConsumer):
    def __init__(self, bootstrap: str, topic: str, group: str, instance_id: str | None, assignor: str,
                 offset_reset: str, auto_commit: bool, auto_commit_interval_ms: int, session_timeout_ms: int,
                 heartbeat_interval_ms: int, max_poll_interval_ms: int) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        super().__init__(topic, instance_id)
        self._auto_commit = auto_commit
        self._c = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            group_instance_id=instance_id,
            partition_assignment_strategy=(_kafka_python_assignor(assignor),),
            auto_offset_reset=offset_reset,
            enable_auto_commit=auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            fetch_max_wait_ms=100,
            request_timeout_ms=15000,
        )
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                member._event("revoked", revoked)

            def on_partitions_assigned(self, assigned: Any) -> None:
                member._event("assigned", assigned)

            def on_partitions_lost(self, lost: Any) -> None:
                member._event("lost", lost)

        self._c.subscribe([topic], listener=Listener())

    def poll(self, timeout: float = 0.2, max_records: int = 500) -> list[Consumed]:
        batches = self._c.poll(timeout_ms=int(timeout * 1000), max_records=max_records)
        return [Consumed(m.partition, m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp,
                         m.timestamp_type == 0)
                for tp in sorted(batches, key=lambda tp: tp.partition) for m in batches[tp]]

    def assignment(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self._c.assignment() or () if tp.topic == self.topic)

    def commit(self, offsets: dict[int, CommitSpec] | None = None) -> None:
        from kafka import OffsetAndMetadata, TopicPartition

        if offsets is None:
            self._c.commit(timeout_ms=15000)
            return
        self._c.commit({TopicPartition(self.topic, p): OffsetAndMetadata(*_commit_parts(spec), -1)
                        for p, spec in offsets.items()}, timeout_ms=15000)

    def committed(self, partitions: Sequence[int]) -> dict[int, Committed | None]:
        from kafka import TopicPartition

        out: dict[int, Committed | None] = {}
        for p in partitions:
            got = self._c.committed(TopicPartition(self.topic, p), metadata=True, timeout_ms=15000)
            out[p] = None if got is None or got.offset < 0 else Committed(got.offset, got.metadata or "")
        return out

    def close(self, leave: bool | None = None) -> None:
        self._check_leave(leave)
        self._c.close(autocommit=self._auto_commit, timeout_ms=15000)


class KafkaPythonClient(Client):
    name = "kafka-python"
    assignors = ASSIGNORS
    null_header_values = False  # send() refuses: "All headers items must be (str, bytes) tuples"

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self._admin: Any = None

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=15000)
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def producer(self, *, compression: str = "none", acks: int = -1, retries: bool = True,
                 idempotent: bool = False) -> Producer:
        return _KafkaPythonProducer(self.bootstrap, compression, acks, retries, idempotent)

    def consumer(self, topic: str, partitions: Sequence[int], start: int | str = EARLIEST, *,
                 max_bytes: int | None = None) -> Consumer:
        return _KafkaPythonConsumer(self.bootstrap, topic, partitions, start, max_bytes)

    def group_consumer(self, topic: str, group: str, *, instance_id: str | None = None, assignor: str = "range",
                       offset_reset: str = "earliest", auto_commit: bool = False,
                       auto_commit_interval_ms: int = 200, session_timeout_ms: int = 3000,
                       heartbeat_interval_ms: int = 300, max_poll_interval_ms: int = 10000) -> GroupConsumer:
        self._check_assignor(assignor)
        return _KafkaPythonGroupConsumer(self.bootstrap, topic, group, instance_id, assignor, offset_reset,
                                         auto_commit, auto_commit_interval_ms, session_timeout_ms,
                                         heartbeat_interval_ms, max_poll_interval_ms)

    def is_no_offset_error(self, exc: BaseException) -> bool:
        from kafka.errors import NoOffsetForPartitionError

        return isinstance(exc, NoOffsetForPartitionError)

    def is_message_too_large(self, cause: Any) -> bool:
        from kafka.errors import MessageSizeTooLargeError

        return isinstance(cause, MessageSizeTooLargeError)

    def _lookup_consumer(self) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                             request_timeout_ms=10000)

    def offsets_for_times(self, topic: str, timestamps: dict[int, int]) -> dict[int, int | None]:
        from kafka import TopicPartition

        c = self._lookup_consumer()
        try:
            found = c.offsets_for_times({TopicPartition(topic, p): ts for p, ts in timestamps.items()},
                                        timeout_ms=15000)
        finally:
            c.close(autocommit=False)
        return {tp.partition: (None if v is None else v.offset) for tp, v in found.items()}

    def earliest_latest(self, topic: str, partitions: Sequence[int]) -> tuple[dict[int, int], dict[int, int]]:
        from kafka import TopicPartition

        c = self._lookup_consumer()
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            lows = c.beginning_offsets(tps, timeout_ms=15000)
            highs = c.end_offsets(tps, timeout_ms=15000)
        finally:
            c.close(autocommit=False)
        return {tp.partition: o for tp, o in lows.items()}, {tp.partition: o for tp, o in highs.items()}

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        self.admin.create_topics(
            {name: {"num_partitions": partitions, "replication_factor": 1, "configs": dict(configs or {})}},
            timeout_ms=15000)

    def error_code(self, exc: BaseException) -> int | None:
        errno = getattr(exc, "errno", None)
        return errno if isinstance(errno, int) else None

    def list_topics(self) -> set[str]:
        return set(self.admin.list_topics())

    def describe_topic(self, name: str) -> int:
        (desc,) = self.admin.describe_topics([name])
        assert desc["error_code"] == 0, desc
        return len(desc["partitions"])

    def delete_topic(self, name: str) -> None:
        self.admin.delete_topics([name], timeout_ms=15000)

    def describe_configs(self, topic: str) -> dict[str, str | None]:
        from kafka.admin import ConfigResource, ConfigResourceType

        res = self.admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        return {k: v["value"] for k, v in res["topic"][topic].items()}

    def alter_configs(self, topic: str, configs: dict[str, str]) -> None:
        from kafka.admin import ConfigResource, ConfigResourceType

        res = self.admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, dict(configs))])
        result = res["topic"][topic]
        if result != "OK":  # kafka-python returns errors as "[Error <code>] <Name>: <message>" strings
            from kafka.errors import for_code

            m = re.match(r"\[Error (-?\d+)\]", result)
            raise for_code(int(m.group(1)) if m else -1)(result)

    def create_partitions(self, topic: str, total: int) -> None:
        self.admin.create_partitions({topic: total}, timeout_ms=15000)

    def delete_records(self, topic: str, before: dict[int, int]) -> dict[int, int]:
        from kafka import TopicPartition

        res = self.admin.delete_records({TopicPartition(topic, p): o for p, o in before.items()}, timeout_ms=15000)
        return {tp.partition: r["low_watermark"] for tp, r in res.items()}

    def describe_cluster(self) -> tuple[str | None, list[tuple[int, str, int]], int | None]:
        d = self.admin.describe_cluster()
        return d["cluster_id"], [(b["broker_id"], b["host"], b["port"]) for b in d["brokers"]], d["controller_id"]

    def admin_list_offsets(self, topic: str, specs: dict[int, int | str]) -> dict[int, tuple[int, int]]:
        from kafka import TopicPartition
        from kafka.admin import OffsetSpec, OffsetTimestamp

        req = {TopicPartition(topic, p): OffsetSpec[s.upper()] if isinstance(s, str) else OffsetTimestamp(s)
               for p, s in specs.items()}
        res = self.admin.list_partition_offsets(req, timeout_ms=15000)
        return {tp.partition: (r.offset, r.timestamp) for tp, r in res.items()}


# =============================================================================================
# aiokafka (driven from synchronous tests on an event loop the adapter owns)
# =============================================================================================


class _AioProducer(Producer):
    def __init__(self, client: AiokafkaClient, compression: str, acks: int, idempotent: bool = False) -> None:
        from aiokafka import AIOKafkaProducer

        self._run = client.run
        self._p = self._run(self._start(AIOKafkaProducer, client.bootstrap, compression, acks, idempotent))

    @staticmethod
    async def _start(cls: Any, bootstrap: str, compression: str, acks: int, idempotent: bool) -> Any:
        p = cls(bootstrap_servers=bootstrap, acks="all" if acks == -1 else acks,
                compression_type=None if compression == "none" else compression, linger_ms=5,
                enable_idempotence=idempotent, request_timeout_ms=10000)
        await p.start()
        return p

    def send(self, topic: str, records: Sequence[Rec], timeout: float = 30.0) -> list[Ack]:
        from aiokafka.errors import KafkaError

        async def go() -> list[Ack]:
            futures = [
                await self._p.send(topic, value=r.value, key=r.key, partition=r.partition, timestamp_ms=r.timestamp,
                                   headers=list(r.headers) or None)
                for r in records
            ]
            acks = []
            for i, f in enumerate(futures):
                try:
                    md = await f
                except KafkaError as e:
                    raise ProduceError(f"record {i} not acknowledged: {e!r}", e) from e
                if md is None:  # acks=0: aiokafka resolves the future to None
                    acks.append(Ack(-1 if records[i].partition is None else records[i].partition, -1))
                else:
                    acks.append(Ack(md.partition, md.offset if md.offset >= 0 else -1,
                                    md.timestamp if md.timestamp is not None and md.timestamp >= 0 else None))
            return acks

        return self._run(asyncio.wait_for(go(), timeout))

    def close(self) -> None:
        self._run(asyncio.wait_for(self._p.stop(), 15))


class _AioConsumer(Consumer):
    def __init__(self, client: AiokafkaClient, topic: str, partitions: Sequence[int], start: int | str,
                 max_bytes: int | None) -> None:
        self._run = client.run
        self._c = self._run(self._start(client.bootstrap, topic, partitions, start, max_bytes))

    @staticmethod
    async def _start(bootstrap: str, topic: str, partitions: Sequence[int], start: int | str,
                     max_bytes: int | None) -> Any:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        limits = {} if max_bytes is None else {"fetch_max_bytes": max_bytes, "max_partition_fetch_bytes": max_bytes}
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100, request_timeout_ms=10000,
                             **limits)
        await c.start()
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        for tp in tps:
            if start == EARLIEST:
                await c.seek_to_beginning(tp)
            else:
                c.seek(tp, int(start))
        return c

    def read(self, count: int, timeout: float = 30.0) -> list[Consumed]:
        async def go() -> list[Consumed]:
            out: list[Consumed] = []
            deadline = _deadline(timeout)
            while len(out) < count and time.monotonic() < deadline:
                batches = await self._c.getmany(timeout_ms=500, max_records=count - len(out))
                for tp in sorted(batches, key=lambda tp: tp.partition):
                    for m in batches[tp]:
                        out.append(Consumed(m.partition, m.offset, m.key, m.value, tuple(m.headers or ()),
                                            m.timestamp, m.timestamp_type == 0))
            return out

        return self._run(go())

    def close(self) -> None:
        self._run(asyncio.wait_for(self._c.stop(), 15))


def _aiokafka_assignor(name: str) -> Any:
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    return {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
            "sticky": StickyPartitionAssignor}[name]


class _AioGroupConsumer(GroupConsumer):
    """Lives on the client's group loop, which a thread runs all the time: heartbeats and rebalances
    go on between polls, as they do in an asyncio application."""

    def __init__(self, client: AiokafkaClient, topic: str, group: str, instance_id: str | None, assignor: str,
                 offset_reset: str, auto_commit: bool, auto_commit_interval_ms: int, session_timeout_ms: int,
                 heartbeat_interval_ms: int, max_poll_interval_ms: int) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.abc import ConsumerRebalanceListener

        super().__init__(topic, instance_id)
        self._run = client.run_in_group_loop
        self._bootstrap = client.bootstrap
        self._group = group
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                member._event("revoked", revoked)

            def on_partitions_assigned(self, assigned: Any) -> None:
                member._event("assigned", assigned)

        async def start() -> Any:
            c = AIOKafkaConsumer(
                bootstrap_servers=client.bootstrap, group_id=group, group_instance_id=instance_id,
                partition_assignment_strategy=(_aiokafka_assignor(assignor),), auto_offset_reset=offset_reset,
                enable_auto_commit=auto_commit, auto_commit_interval_ms=auto_commit_interval_ms,
                session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
                max_poll_interval_ms=max_poll_interval_ms, rebalance_timeout_ms=max_poll_interval_ms,
                fetch_max_wait_ms=100, request_timeout_ms=15000)
            c.subscribe([topic], listener=Listener())
            await c.start()
            return c

        self._c = self._run(start())

    def poll(self, timeout: float = 0.2, max_records: int = 500) -> list[Consumed]:
        batches = self._run(self._c.getmany(timeout_ms=int(timeout * 1000), max_records=max_records))
        return [Consumed(m.partition, m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp,
                         m.timestamp_type == 0)
                for tp in sorted(batches, key=lambda tp: tp.partition) for m in batches[tp]]

    def assignment(self) -> frozenset[int]:
        async def get() -> frozenset[int]:
            return frozenset(tp.partition for tp in self._c.assignment() if tp.topic == self.topic)

        return self._run(get())

    def commit(self, offsets: dict[int, CommitSpec] | None = None) -> None:
        from aiokafka import TopicPartition

        if offsets is None:
            self._run(self._c.commit())
            return
        self._run(self._c.commit({TopicPartition(self.topic, p): _commit_parts(spec) for p, spec in offsets.items()}))

    def committed(self, partitions: Sequence[int]) -> dict[int, Committed | None]:
        """Offsets through ``AIOKafkaConsumer.committed``; it does not return metadata, which comes from
        the admin client's OffsetFetch (``list_consumer_group_offsets``)."""
        from aiokafka import TopicPartition
        from aiokafka.admin import AIOKafkaAdminClient

        tps = [TopicPartition(self.topic, p) for p in partitions]

        async def fetch() -> tuple[list[int | None], dict[Any, Any]]:
            offsets = [await self._c.committed(tp) for tp in tps]
            admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap, request_timeout_ms=15000)
            await admin.start()
            try:
                return offsets, await admin.list_consumer_group_offsets(self._group, partitions=tps)
            finally:
                await admin.close()

        offsets, with_metadata = self._run(fetch())
        out: dict[int, Committed | None] = {}
        for tp, offset in zip(tps, offsets, strict=True):
            om = with_metadata.get(tp)
            out[tp.partition] = None if offset is None else Committed(offset, om.metadata if om else "")
        return out

    def close(self, leave: bool | None = None) -> None:
        self._check_leave(leave)
        self._run(self._c.stop())


class AiokafkaClient(Client):
    name = "aiokafka"
    incremental_alter = False  # AIOKafkaAdminClient.alter_configs sends AlterConfigs (replace-all)
    assignors = ("range", "roundrobin", "sticky")  # no cooperative protocol in aiokafka

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self._loop = asyncio.new_event_loop()
        self._admin: Any = None
        self._group_loop: tuple[asyncio.AbstractEventLoop, threading.Thread] | None = None

    def run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(asyncio.wait_for(coro, 60))

    def run_in_group_loop(self, coro: Any, timeout: float = 60) -> Any:
        """Run ``coro`` on the loop of the group consumers (a thread of its own runs it all the time)."""
        if self._group_loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=f"aiokafka-groups-{id(self):x}", daemon=True)
            thread.start()
            self._group_loop = (loop, thread)

        async def bounded() -> Any:
            return await asyncio.wait_for(coro, timeout)

        return asyncio.run_coroutine_threadsafe(bounded(), self._group_loop[0]).result(timeout + 5)

    def close(self) -> None:
        if self._group_loop is not None:
            loop, thread = self._group_loop
            self._group_loop = None
            loop.call_soon_threadsafe(loop.stop)
            thread.join(15)
            if not thread.is_alive():
                loop.close()
        if self._loop.is_closed():
            return
        if self._admin is not None:
            self.run(self._admin.close())
            self._admin = None
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from aiokafka.admin import AIOKafkaAdminClient

            async def start() -> Any:
                a = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=15000)
                await a.start()
                return a

            self._admin = self.run(start())
        return self._admin

    def producer(self, *, compression: str = "none", acks: int = -1, retries: bool = True,
                 idempotent: bool = False) -> Producer:
        return _AioProducer(self, compression, acks, idempotent)

    def consumer(self, topic: str, partitions: Sequence[int], start: int | str = EARLIEST, *,
                 max_bytes: int | None = None) -> Consumer:
        return _AioConsumer(self, topic, partitions, start, max_bytes)

    def group_consumer(self, topic: str, group: str, *, instance_id: str | None = None, assignor: str = "range",
                       offset_reset: str = "earliest", auto_commit: bool = False,
                       auto_commit_interval_ms: int = 200, session_timeout_ms: int = 3000,
                       heartbeat_interval_ms: int = 300, max_poll_interval_ms: int = 10000) -> GroupConsumer:
        self._check_assignor(assignor)
        return _AioGroupConsumer(self, topic, group, instance_id, assignor, offset_reset, auto_commit,
                                 auto_commit_interval_ms, session_timeout_ms, heartbeat_interval_ms,
                                 max_poll_interval_ms)

    def is_no_offset_error(self, exc: BaseException) -> bool:
        from aiokafka.errors import NoOffsetForPartitionError

        return isinstance(exc, NoOffsetForPartitionError)

    def is_message_too_large(self, cause: Any) -> bool:
        from aiokafka.errors import MessageSizeTooLargeError

        return isinstance(cause, MessageSizeTooLargeError)

    async def _with_consumer(self, fn: Any) -> Any:
        from aiokafka import AIOKafkaConsumer

        c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                             request_timeout_ms=10000)
        await c.start()
        try:
            return await fn(c)
        finally:
            await c.stop()

    def offsets_for_times(self, topic: str, timestamps: dict[int, int]) -> dict[int, int | None]:
        from aiokafka import TopicPartition

        found = self.run(self._with_consumer(
            lambda c: c.offsets_for_times({TopicPartition(topic, p): ts for p, ts in timestamps.items()})))
        return {tp.partition: (None if v is None else v.offset) for tp, v in found.items()}

    def earliest_latest(self, topic: str, partitions: Sequence[int]) -> tuple[dict[int, int], dict[int, int]]:
        from aiokafka import TopicPartition

        tps = [TopicPartition(topic, p) for p in partitions]

        async def both(c: Any) -> Any:
            return await c.beginning_offsets(tps), await c.end_offsets(tps)

        lows, highs = self.run(self._with_consumer(both))
        return {tp.partition: o for tp, o in lows.items()}, {tp.partition: o for tp, o in highs.items()}

    @staticmethod
    def _raise_for(code: int, what: str) -> None:
        from aiokafka.errors import for_code

        if code:
            raise for_code(code)(what)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        from aiokafka.admin import NewTopic

        resp = self.run(self.admin.create_topics([NewTopic(name, partitions, 1, topic_configs=dict(configs or {}))]))
        for t in resp.topic_errors:
            self._raise_for(t[1], f"create topic {t[0]}: {t[2] if len(t) > 2 else ''}")

    def error_code(self, exc: BaseException) -> int | None:
        errno = getattr(exc, "errno", None)
        return errno if isinstance(errno, int) else None

    def list_topics(self) -> set[str]:
        return set(self.run(self.admin.list_topics()))

    def describe_topic(self, name: str) -> int:
        (desc,) = self.run(self.admin.describe_topics([name]))
        self._raise_for(desc["error_code"], f"describe topic {name}")
        return len(desc["partitions"])

    def delete_topic(self, name: str) -> None:
        resp = self.run(self.admin.delete_topics([name]))
        for t in resp.topic_error_codes:
            self._raise_for(t[1], f"delete topic {t[0]}")

    def describe_configs(self, topic: str) -> dict[str, str | None]:
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        (resp,) = self.run(self.admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)]))
        (res,) = resp.resources
        self._raise_for(res[0], f"describe configs of {topic}: {res[1]}")
        return {entry[0]: entry[1] for entry in res[4]}

    def alter_configs(self, topic: str, configs: dict[str, str]) -> None:
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        (resp,) = self.run(self.admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, dict(configs))]))
        for res in resp.resources:
            self._raise_for(res[0], f"alter configs of {topic}: {res[1]}")

    def create_partitions(self, topic: str, total: int) -> None:
        from aiokafka.admin import NewPartitions

        self.run(self.admin.create_partitions({topic: NewPartitions(total)}))

    def delete_records(self, topic: str, before: dict[int, int]) -> dict[int, int]:
        from aiokafka import TopicPartition
        from aiokafka.admin import RecordsToDelete

        res = self.run(self.admin.delete_records(
            {TopicPartition(topic, p): RecordsToDelete(o) for p, o in before.items()}, timeout_ms=15000))
        return {tp.partition: low for tp, low in res.items()}

    def describe_cluster(self) -> tuple[str | None, list[tuple[int, str, int]], int | None]:
        d = self.run(self.admin.describe_cluster())
        return d.get("cluster_id"), [(b["node_id"], b["host"], b["port"]) for b in d["brokers"]], d.get("controller_id")


def make_client(name: str, bootstrap: str) -> Client:
    cls = {"confluent": ConfluentClient, "kafka-python": KafkaPythonClient, "aiokafka": AiokafkaClient}[name]
    return cls(bootstrap)


# =============================================================================================
# A group member in a process of its own (for tests that kill it)
# =============================================================================================


def run_member(argv: Sequence[str]) -> None:
    """``python -m tests.compat.clients member CLIENT BOOTSTRAP TOPIC GROUP [options]``: poll until
    killed (or ``--max-seconds``), printing one JSON object a line, flushed: ``{"assigned": [...]}``
    when the assignment changes, ``{"records": [[partition, offset], ...]}`` for each poll that
    returned records and, with ``--commit``, ``{"committed": {partition: offset}}`` once a synchronous
    commit of the next offsets after that poll's records has returned."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tests.compat.clients member")
    ap.add_argument("client", choices=CLIENTS)
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("--instance-id")
    ap.add_argument("--assignor", default="range")
    ap.add_argument("--offset-reset", default="earliest", choices=OFFSET_RESETS)
    ap.add_argument("--session-timeout-ms", type=int, default=3000)
    ap.add_argument("--commit", action="store_true", help="commit synchronously after each poll's records")
    ap.add_argument("--max-records", type=int, default=500, help="records per poll")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds of 'processing' per poll with records")
    ap.add_argument("--max-seconds", type=float, default=120.0)
    args = ap.parse_args(argv)

    def emit(**fields: Any) -> None:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    client = make_client(args.client, args.bootstrap)
    consumer = client.group_consumer(args.topic, args.group, instance_id=args.instance_id, assignor=args.assignor,
                                     offset_reset=args.offset_reset, session_timeout_ms=args.session_timeout_ms)
    assigned: frozenset[int] | None = None
    deadline = _deadline(args.max_seconds)
    while time.monotonic() < deadline:
        records = consumer.poll(0.2, args.max_records)
        now = consumer.assignment()
        if now != assigned:
            assigned = now
            emit(assigned=sorted(now))
        if not records:
            continue
        emit(records=[[r.partition, r.offset] for r in records])
        time.sleep(args.delay)
        if args.commit:
            nexts: dict[int, int] = {}
            for r in records:
                nexts[r.partition] = max(nexts.get(r.partition, 0), r.offset + 1)
            consumer.commit({p: o for p, o in nexts.items()})
            emit(committed=nexts)
    consumer.close()
    client.close()


if __name__ == "__main__":
    if sys.argv[1:2] != ["member"]:
        raise SystemExit("usage: python -m tests.compat.clients member CLIENT BOOTSTRAP TOPIC GROUP [options]")
    run_member(sys.argv[2:])
