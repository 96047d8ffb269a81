"""Real clients under Kafka's ACL authorizer: confluent-kafka, kafka-python and aiokafka (SASL_PLAINTEXT, PLAIN)
refused with their own TopicAuthorizationFailed / GroupAuthorizationFailed without ACLs; allowed to produce and to
consume in a consumer group (committing offsets) with the ACLs ``odradek acls --producer`` / ``--consumer`` make;
Metadata listing only the topics a principal may describe.

The broker also has a PLAINTEXT listener whose ANONYMOUS principal is a super user: the ``odradek acls`` CLI
(a subprocess, as an operator runs it) and the test's admin client use it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.broker import inprocess
from tests.cli.test_cli import Cli
from tests.compat.secure_clients import CLIENTS, Security, aiokafka_config, confluent_config, kafka_python_config

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret";')
PROPS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:ANONYMOUS",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
}
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[inprocess.InProcessBroker]:
    yield from inprocess.serving(tmp_path_factory, "authz-clients", PROPS)


def sasl(node: inprocess.InProcessBroker) -> str:
    return f"127.0.0.1:{node.server.ports['SASL_PLAINTEXT']}"


def user(name: str) -> Security:
    return Security("SASL_PLAINTEXT", "PLAIN", name, f"{name}-secret")


def create_topics(node: inprocess.InProcessBroker, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.server.ports['PLAINTEXT']}"})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(timeout=TIMEOUT)


def error_name(attempt: Callable[[], Any]) -> str:
    """The name of the error ``attempt`` raises (each library's own exception or error code)."""
    try:
        attempt()
    except Exception as e:  # the libraries' errors have no common base
        return _name_of(e)
    raise AssertionError("no error")


def _name_of(e: Exception) -> str:
    code = e.args[0] if e.args else None
    if hasattr(code, "name") and callable(code.name):  # confluent's KafkaError
        return str(code.name())
    return type(e).__name__


# -- each library: produce, and consume in a group ------------------------------------------------------------


def confluent_produce(bootstrap: str, s: Security, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import KafkaException, Producer

    errors: list[Any] = []
    p = Producer({**confluent_config(bootstrap, s), "message.timeout.ms": 10_000})
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _m: errors.append(err) if err else None)
    p.flush(TIMEOUT)
    if errors:
        raise KafkaException(errors[0])


def confluent_consume(bootstrap: str, s: Security, topic: str, group: str, n: int) -> list[bytes]:
    from confluent_kafka import Consumer, KafkaException

    c = Consumer({**confluent_config(bootstrap, s), "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                raise KafkaException(m.error())
            got.append(m.value())
        c.commit(asynchronous=False)
        return got
    finally:
        c.close()


def kafka_python_produce(bootstrap: str, s: Security, topic: str, values: list[bytes], **kw: Any) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(**kafka_python_config(bootstrap, s), max_block_ms=10_000, request_timeout_ms=10_000, **kw)
    try:
        for f in [p.send(topic, v) for v in values]:
            f.get(timeout=TIMEOUT)
    finally:
        p.close(timeout=5)


def kafka_python_consume(bootstrap: str, s: Security, topic: str, group: str, n: int) -> list[bytes]:
    from kafka import KafkaConsumer

    c = KafkaConsumer(topic, **kafka_python_config(bootstrap, s), group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False)
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < n and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
        c.commit()
        return got
    finally:
        c.close()


def aiokafka_produce(bootstrap: str, s: Security, topic: str, values: list[bytes]) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        p = AIOKafkaProducer(**aiokafka_config(bootstrap, s), request_timeout_ms=10_000)
        await p.start()
        try:
            for v in values:
                await asyncio.wait_for(p.send_and_wait(topic, v), TIMEOUT)
        finally:
            await p.stop()

    asyncio.run(run())


def aiokafka_consume(bootstrap: str, s: Security, topic: str, group: str, n: int) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer

    async def run() -> list[bytes]:
        c = AIOKafkaConsumer(topic, **aiokafka_config(bootstrap, s), group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False)
        await c.start()
        try:
            got: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT
            while len(got) < n and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=200)).values():
                    got.extend(r.value for r in records)
            await c.commit()
            return got
        finally:
            await c.stop()

    return asyncio.run(run())


PRODUCE = {"confluent": confluent_produce, "kafka-python": kafka_python_produce, "aiokafka": aiokafka_produce}
CONSUME = {"confluent": confluent_consume, "kafka-python": kafka_python_consume, "aiokafka": aiokafka_consume}
TOPIC_DENIED = {"confluent": "TOPIC_AUTHORIZATION_FAILED", "kafka-python": "TopicAuthorizationFailedError",
                "aiokafka": "TopicAuthorizationFailedError"}
GROUP_DENIED = {"confluent": "GROUP_AUTHORIZATION_FAILED", "kafka-python": "GroupAuthorizationFailedError",
                "aiokafka": "GroupAuthorizationFailedError"}


@pytest.mark.parametrize("client", CLIENTS)
def test_clients_are_refused_without_acls_and_allowed_with_producer_and_consumer_acls(
        node: inprocess.InProcessBroker, client: str) -> None:
    topic, group = f"orders-{client}", f"billing-{client}"
    create_topics(node, topic)
    bootstrap = sasl(node)
    values = [b"one", b"two", b"three"]
    # no ACL: refused; kafka-python's default idempotence would be refused first (no WRITE on any topic)
    extra = {"enable_idempotence": False} if client == "kafka-python" else {}
    produce_denied = error_name(lambda: PRODUCE[client](bootstrap, user("alice"), topic, values, **extra))
    assert produce_denied == TOPIC_DENIED[client]
    cli = Cli(f"127.0.0.1:{node.server.ports['PLAINTEXT']}")
    cli.ok("acls", "--add", "--allow-principal", "User:alice", "--producer", "--topic", topic)
    cli.ok("acls", "--add", "--allow-principal", "User:alice", "--consumer", "--topic", topic, "--group", group)
    PRODUCE[client](bootstrap, user("alice"), topic, values)  # idempotent where the library defaults to it
    assert CONSUME[client](bootstrap, user("alice"), topic, group, len(values)) == values
    # bob may read the topic but not use the group
    cli.ok("acls", "--add", "--allow-principal", "User:bob", "--operation", "Read", "--topic", topic)
    group_denied = error_name(lambda: CONSUME[client](bootstrap, user("bob"), topic, group, len(values)))
    assert group_denied == GROUP_DENIED[client]


def test_metadata_lists_only_the_topics_a_principal_may_describe(node: inprocess.InProcessBroker) -> None:
    from confluent_kafka.admin import AdminClient

    create_topics(node, "visible", "secret")
    Cli(f"127.0.0.1:{node.server.ports['PLAINTEXT']}").ok(
        "acls", "--add", "--allow-principal", "User:alice", "--operation", "Describe", "--topic", "visible")
    topics = AdminClient(confluent_config(sasl(node), user("alice"))).list_topics(timeout=TIMEOUT).topics
    assert "visible" in topics and "secret" not in topics
    assert AdminClient(confluent_config(sasl(node), user("bob"))).list_topics(timeout=TIMEOUT).topics.keys() \
        .isdisjoint({"visible", "secret"})
