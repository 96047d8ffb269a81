"""A consume-transform-produce loop run as its own process, so a test can SIGKILL it anywhere.

``python -m tests.compat.eos_job BOOTSTRAP IN OUT GROUP TRANSACTIONAL_ID IDLE_SECONDS``: a
confluent-kafka consumer in GROUP (read_committed, no auto-commit) reads IN; for each poll of up to
25 records one transaction produces ``out-<value>`` to OUT (same key) and commits the consumer's
positions with ``send_offsets_to_transaction``. It exits 0 after IDLE_SECONDS without records. A
restart with the same transactional id fences the killed instance and aborts its open transaction.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer

MAX_SECONDS = 240.0  # bound on one run


def main() -> None:
    bootstrap, source, sink, group, transactional_id, idle = sys.argv[1:7]
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed", "session.timeout.ms": 1500,
        "heartbeat.interval.ms": 200,
    })
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000, "linger.ms": 5})
    producer.init_transactions(60)
    consumer.subscribe([source])
    started = last_data = time.monotonic()
    while time.monotonic() - started < MAX_SECONDS:
        msgs = [m for m in consumer.consume(25, timeout=0.5) if m.error() is None]
        if not msgs:
            if time.monotonic() - last_data > float(idle):
                break
            continue
        last_data = time.monotonic()
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, key=m.key(), value=b"out-" + (m.value() or b""))
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        time.sleep(0.02)  # spreads the run over enough time for kills to land inside transactions
    consumer.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
