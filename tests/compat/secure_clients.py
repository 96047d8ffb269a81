"""Real clients (confluent-kafka, kafka-python, aiokafka) over secured listeners: one ``Security`` description turned
into each library's own settings, and a produce-then-consume round trip through it.

Each library gets exactly what its users would write: librdkafka's ``security.protocol``/``sasl.*``/``ssl.*``
properties, kafka-python's and aiokafka's ``security_protocol``/``sasl_*``/``ssl_*`` arguments (aiokafka takes an
``SSLContext`` made by its own ``create_ssl_context``). Every call is bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLIENTS = ("confluent", "kafka-python", "aiokafka")


@dataclass(frozen=True, slots=True)
class Security:
    protocol: str = "PLAINTEXT"  # SSL, SASL_PLAINTEXT, SASL_SSL
    mechanism: str | None = None  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    username: str | None = None
    password: str | None = None
    cafile: Path | None = None  # PEM CA the broker's certificate is checked against
    certfile: Path | None = None  # PEM client certificate chain (mTLS)
    keyfile: Path | None = None  # PEM client key
    key_password: str | None = None
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")


def confluent_config(bootstrap: str, s: Security) -> dict[str, Any]:
    c: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": s.protocol, "log_level": 3,
                         "socket.timeout.ms": 10000}
    if s.mechanism:
        c.update({"sasl.mechanism": s.mechanism, "sasl.username": s.username, "sasl.password": s.password})
    if s.tls:
        c["ssl.ca.location"] = str(s.cafile)
        c["ssl.endpoint.identification.algorithm"] = "https" if s.check_hostname else "none"
        if s.certfile:
            c.update({"ssl.certificate.location": str(s.certfile), "ssl.key.location": str(s.keyfile)})
            if s.key_password:
                c["ssl.key.password"] = s.key_password
    return c


def _python_client_config(bootstrap: str, s: Security) -> dict[str, Any]:
    """What kafka-python and aiokafka name alike: the address, the protocol and SASL."""
    c: dict[str, Any] = {"bootstrap_servers": bootstrap, "security_protocol": s.protocol}
    if s.mechanism:
        c.update({"sasl_mechanism": s.mechanism, "sasl_plain_username": s.username,
                  "sasl_plain_password": s.password})
    return c


def kafka_python_config(bootstrap: str, s: Security) -> dict[str, Any]:
    c = {**_python_client_config(bootstrap, s), "bootstrap_timeout_ms": 10_000}
    if s.tls:
        c.update({"ssl_cafile": str(s.cafile), "ssl_check_hostname": s.check_hostname})
        if s.certfile:
            c.update({"ssl_certfile": str(s.certfile), "ssl_keyfile": str(s.keyfile)})
            if s.key_password:
                c["ssl_password"] = s.key_password
    return c


def aiokafka_config(bootstrap: str, s: Security) -> dict[str, Any]:
    from aiokafka.helpers import create_ssl_context

    c = _python_client_config(bootstrap, s)
    if s.tls:  # aiokafka takes an SSLContext of its own helper's making
        ctx = create_ssl_context(cafile=str(s.cafile), certfile=str(s.certfile) if s.certfile else None,
                                 keyfile=str(s.keyfile) if s.keyfile else None, password=s.key_password)
        ctx.check_hostname = s.check_hostname
        c["ssl_context"] = ctx
    return c


def roundtrip(client: str, bootstrap: str, s: Security, topic: str, values: list[bytes],
              timeout: float = 30.0) -> list[bytes]:
    """Produce ``values`` to partition 0 of ``topic`` (acks=all) and read partition 0 back from the beginning until
    as many values were read (or ``timeout``): the values read, in order."""
    produce(client, bootstrap, s, topic, values, timeout)
    return consume(client, bootstrap, s, topic, len(values), timeout=timeout)


def produce(client: str, bootstrap: str, s: Security, topic: str, values: list[bytes], timeout: float = 30.0) -> None:
    """``values`` to partition 0 of ``topic``, acks=all; raises each library's error if they are not acknowledged."""
    if client == "confluent":
        _confluent_produce(bootstrap, s, topic, values, timeout)
    elif client == "kafka-python":
        _kafka_python_produce(bootstrap, s, topic, values, timeout)
    else:
        asyncio.run(_aiokafka_produce(bootstrap, s, topic, values, timeout))


def consume(client: str, bootstrap: str, s: Security, topic: str, count: int, *, start: int = 0,
            timeout: float = 30.0) -> list[bytes]:
    """Up to ``count`` values of partition 0 of ``topic`` from offset ``start`` (fewer if ``timeout`` passes)."""
    if client == "confluent":
        return _confluent_consume(bootstrap, s, topic, count, start, timeout)
    if client == "kafka-python":
        return _kafka_python_consume(bootstrap, s, topic, count, start, timeout)
    return asyncio.run(_aiokafka_consume(bootstrap, s, topic, count, start, timeout))


def _confluent_produce(bootstrap: str, s: Security, topic: str, values: list[bytes], timeout: float) -> None:
    from confluent_kafka import Producer

    errors: list[Any] = []
    p = Producer({**confluent_config(bootstrap, s), "acks": "all", "message.timeout.ms": int(timeout * 1000)})
    for v in values:
        while True:
            try:
                p.produce(topic, v, partition=0, on_delivery=lambda err, _m: errors.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.05)
    left = p.flush(timeout)
    if left or errors:
        raise RuntimeError(f"confluent: {left} records left, errors {errors[:3]}")


def _confluent_consume(bootstrap: str, s: Security, topic: str, count: int, start: int,
                       timeout: float) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**confluent_config(bootstrap, s), "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, start)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        return got
    finally:
        c.close()


def _kafka_python_produce(bootstrap: str, s: Security, topic: str, values: list[bytes], timeout: float) -> None:
    from kafka import KafkaProducer

    ms = int(timeout * 1000)
    p = KafkaProducer(**{**kafka_python_config(bootstrap, s), "bootstrap_timeout_ms": ms}, acks="all",
                      request_timeout_ms=ms, max_block_ms=ms)
    try:
        for f in [p.send(topic, v, partition=0) for v in values]:
            f.get(timeout=timeout)
    finally:
        p.close(timeout=5)


def _kafka_python_consume(bootstrap: str, s: Security, topic: str, count: int, start: int,
                          timeout: float) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(**kafka_python_config(bootstrap, s), group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest")
    try:
        c.assign([TopicPartition(topic, 0)])
        c.seek(TopicPartition(topic, 0), start)
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
        return got
    finally:
        c.close()


async def _aiokafka_produce(bootstrap: str, s: Security, topic: str, values: list[bytes], timeout: float) -> None:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(**aiokafka_config(bootstrap, s), acks="all", request_timeout_ms=int(timeout * 1000))
    async with asyncio.timeout(timeout):
        await p.start()
    try:
        for v in values:
            await asyncio.wait_for(p.send_and_wait(topic, v, partition=0), timeout)
    finally:
        await p.stop()


async def _aiokafka_consume(bootstrap: str, s: Security, topic: str, count: int, start: int,
                            timeout: float) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(**aiokafka_config(bootstrap, s), group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest")
    async with asyncio.timeout(timeout):
        await c.start()
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, start)
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            batches = await c.getmany(tp, timeout_ms=200)
            got.extend(r.value for r in batches.get(tp, []))
        return got
    finally:
        await c.stop()
