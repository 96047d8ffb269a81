"""The client side of the partition-tolerance suite: real clients writing and reading while faults happen,
each operation recorded for the checker (``checker.py``).

- ``producers`` idempotent confluent-kafka producers (acks=all) write globally unique values round-robin
  over the partitions, at a bounded rate; every delivery report becomes a ``Send``: ``ok`` with the
  acknowledged partition and offset, ``fail`` only when librdkafka says the record was never sent
  (purged from its queue), ``timeout`` (indeterminate) for every other error. A producer that hits a fatal
  error is replaced by a new one under a new name (a new producer id; order is per producer).
- One transactional producer writes small transactions over all partitions, committing most and aborting
  some; each becomes a ``Txn`` (``committed`` / ``aborted`` when the client was told so, ``unknown`` when
  the commit's fate is not known), its records ``Send``s with ``txn`` set.
- One read_committed consumer reads every partition from the beginning all along; every record it sees is a
  ``Read``.
- ``final_read`` reads every partition from the beginning to its high watermark after healing.

Every loop ends: on ``stop()`` and in any case at ``deadline_s``.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.faults.checker import History, Read, Send, Txn

PRODUCER_CONF: dict[str, object] = {
    "acks": "all", "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 30000,
    "request.timeout.ms": 5000, "retry.backoff.ms": 50, "socket.timeout.ms": 5000,
    "metadata.max.age.ms": 5000, "topic.metadata.refresh.interval.ms": 2000,
}
NEVER_SENT = {KafkaError._PURGE_QUEUE}  # definite: the record never left the client


class Workload:
    def __init__(self, bootstrap: str, topic: str, partitions: int, *, producers: int = 2,
                 rate_per_s: float = 100.0, transactions: bool = True, deadline_s: float = 3600.0) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.producer_count = producers
        self.rate_per_s = rate_per_s
        self.transactions = transactions
        self.t0 = time.monotonic()
        self.deadline = self.t0 + deadline_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.sends: list[Send] = []
        self.reads: list[Read] = []
        self.txns: list[Txn] = []
        self.errors: list[str] = []  # unexpected exceptions in the workload's own threads
        self.fatal: list[tuple[float, str, str]] = []  # (when, producer, error): fatal client errors, producer replaced
        self._threads: list[threading.Thread] = []

    def now(self) -> float:
        return time.monotonic() - self.t0

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> Workload:
        targets: list[tuple[str, Callable[[], None]]] = [
            (f"p{i}", lambda i=i: self._produce_forever(f"p{i}")) for i in range(self.producer_count)]  # type: ignore[misc]
        if self.transactions:
            targets.append(("txn", self._transact_forever))
        targets.append(("reader", self._read_forever))
        for name, target in targets:
            t = threading.Thread(target=self._guarded(name, target), name=f"workload-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout_s: float = 90.0) -> None:
        self._stop.set()
        end = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.1, end - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        assert not alive, f"workload threads did not stop: {alive}"

    def _running(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self.deadline

    def _guarded(self, name: str, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception as e:  # reported by the test: a broken workload must not pass for a quiet one
                with self._lock:
                    self.errors.append(f"{name}: {type(e).__name__}: {e}")
        return run

    def acked_count(self) -> int:
        with self._lock:
            return sum(1 for s in self.sends if s.outcome == "ok" and s.txn is None)

    def history(self, final: dict[int, list[tuple[int, bytes]]]) -> History:
        with self._lock:
            return History(list(self.sends), list(self.reads), list(self.txns), final)

    # -- idempotent producers --------------------------------------------------------------------------------

    def _produce_forever(self, base: str) -> None:
        generation = 0
        interval = 1.0 / self.rate_per_s
        while self._running():
            name = f"{base}.{generation}"
            fatal = self._produce_with(name, interval)
            if not fatal:
                return
            generation += 1

    def _produce_with(self, name: str, interval: float) -> bool:
        """Produce as ``name`` until stopped (False) or a fatal error (True)."""
        producer = Producer({"bootstrap.servers": self.bootstrap, **PRODUCER_CONF})
        fatal = threading.Event()
        seq = 0
        next_at = time.monotonic()
        try:
            while self._running() and not fatal.is_set():
                value = f"{name}-{seq:07d}".encode()
                started = self.now()
                try:
                    producer.produce(self.topic, value=value, partition=seq % self.partitions,
                                     on_delivery=self._on_delivery(name, seq, value, started, None, fatal))
                except BufferError:  # the client's queue is full (a long fault): wait for room
                    producer.poll(0.1)
                    continue
                except KafkaException as e:
                    if not e.args[0].fatal():
                        raise
                    self._note_fatal(name, e.args[0])
                    fatal.set()  # the producer is unusable: a new one takes over
                    break
                seq += 1
                next_at += interval
                producer.poll(max(0.0, next_at - time.monotonic()))
            with contextlib.suppress(KafkaException):  # a producer in a fatal state raises it again here
                if fatal.is_set():
                    producer.purge(in_queue=True, in_flight=False)
                producer.flush(40)
        finally:
            with contextlib.suppress(KafkaException):
                producer.poll(0)
        return fatal.is_set()

    def _on_delivery(self, producer: str, seq: int, value: bytes, started: float, txn: str | None,
                     fatal: threading.Event | None) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is None:  # the offset is unknown (None) when librdkafka infers "persisted" from a later batch
                offset = msg.offset() if msg.offset() is not None and msg.offset() >= 0 else None
                send = Send(producer, seq, value, msg.partition(), "ok", offset, started, self.now(), txn)
            else:
                outcome = "fail" if err.code() in NEVER_SENT and txn is None else "timeout"
                send = Send(producer, seq, value, None, outcome, None, started, self.now(), txn)  # type: ignore[arg-type]
                if err.fatal() and fatal is not None and not fatal.is_set():
                    self._note_fatal(producer, err)
                    fatal.set()
            with self._lock:
                self.sends.append(send)
        return report

    # -- transactions ---------------------------------------------------------------------------------------

    def _transact_forever(self) -> None:
        rng = random.Random(7)
        generation = 0
        n = 0
        while self._running():
            name = f"tx.{generation}"
            producer = Producer({"bootstrap.servers": self.bootstrap, **PRODUCER_CONF,
                                 "transactional.id": f"jepsen-{self.topic}", "transaction.timeout.ms": 30000})
            try:
                producer.init_transactions(30)
            except KafkaException:
                generation += 1
                time.sleep(0.5)
                continue
            seq = 0
            while self._running():
                n += 1
                txn = f"{name}-t{n}"
                values: list[bytes] = []
                try:
                    producer.begin_transaction()
                    for _ in range(rng.randint(2, 5)):
                        value = f"{txn}-{seq:05d}".encode()
                        values.append(value)
                        producer.produce(self.topic, value=value, partition=rng.randrange(self.partitions),
                                         on_delivery=self._on_delivery(name, seq, value, self.now(), txn, None))
                        seq += 1
                    producer.poll(0)
                    outcome = self._finish(producer, commit=rng.random() >= 0.25)
                except KafkaException as e:
                    outcome = self._after_error(producer, e)
                with self._lock:
                    self.txns.append(Txn(txn, name, outcome, frozenset(values)))  # type: ignore[arg-type]
                if outcome == "unknown":
                    break  # a new producer (same transactional id) fences this one and settles its transaction
                time.sleep(0.05)
            with contextlib.suppress(KafkaException):  # a producer in a fatal state raises it again here
                producer.flush(5)
            generation += 1

    def _finish(self, producer: Producer, *, commit: bool) -> str:
        try:
            if commit:
                producer.commit_transaction(10)
                return "committed"
            producer.abort_transaction(10)
            return "aborted"
        except KafkaException as e:
            return self._after_error(producer, e)

    def _note_fatal(self, producer: str, err: Any) -> None:
        with self._lock:
            self.fatal.append((round(self.now(), 2), producer, f"{err.name()}: {err.str()}"))

    def _after_error(self, producer: Producer, e: KafkaException) -> str:
        err = e.args[0]
        if err.fatal():
            self._note_fatal("tx", err)
        if err.txn_requires_abort():
            try:
                producer.abort_transaction(10)
                return "aborted"
            except KafkaException:
                return "unknown"
        return "unknown"

    # -- reading --------------------------------------------------------------------------------------------

    def _read_forever(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"jepsen-reader-{self.topic}",
                             "enable.auto.commit": False, "isolation.level": "read_committed",
                             "auto.offset.reset": "earliest", "socket.timeout.ms": 5000})
        try:
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
            while self._running():
                for msg in consumer.consume(500, 0.2):
                    if msg.error() is not None or msg.value() is None:
                        continue
                    read = Read("reader", msg.partition(), msg.offset(), msg.value(), self.now(), "read_committed")
                    with self._lock:
                        self.reads.append(read)
        finally:
            consumer.close()


def final_read(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0,
               ) -> dict[int, list[tuple[int, bytes]]]:
    """Every partition from the beginning to its high watermark (read_uncommitted), after healing."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"jepsen-final-{topic}",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in range(partitions)}
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"final read incomplete: {({p: len(v) for p, v in out.items()})} " \
                                                f"of {ends}"
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None and msg.offset() < ends[msg.partition()]:
                    out[msg.partition()].append((msg.offset(), msg.value()))
            # the position passes transaction markers too, which are never delivered
            for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions) if p not in done]):
                if tp.offset >= ends[tp.partition]:
                    done.add(tp.partition)
        return out
    finally:
        consumer.close()
