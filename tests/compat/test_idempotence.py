"""Idempotent producers of every client library: a retry after a lost response is never a duplicate."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.compat.clients import CLIENTS, Client, Rec, make_client
from tests.compat.conftest import BrokerProcess, create_topic, running_broker
from tests.compat.proxy import LossyProxy

pytestmark = pytest.mark.slow  # a real broker process and real clients


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, LossyProxy]]:
    """A broker that advertises a lossy proxy in front of itself, so every client connection crosses it."""
    with LossyProxy() as proxy, running_broker(
            tmp_path_factory.mktemp("idempotence"),
            {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}) as broker:
        proxy.target = ("127.0.0.1", broker.port)
        yield broker, proxy


def _client(name: str, proxy: LossyProxy) -> Client:
    return make_client(name, f"127.0.0.1:{proxy.port}")


def _values(client: Client, topic: str, count: int) -> list[bytes | None]:
    return [c.value for c in client.consume(topic, [0], count=count, timeout=30)]


@pytest.mark.parametrize("name", CLIENTS)
def test_idempotent_producer_round_trips(proxied: tuple[BrokerProcess, LossyProxy], name: str,
                                         topic_name: str) -> None:
    broker, proxy = proxied
    create_topic(broker, topic_name, partitions=2)
    client = _client(name, proxy)
    try:
        records = [Rec(value=b"v%d" % i, key=b"k%d" % i, partition=i % 2) for i in range(300)]
        p = client.producer(idempotent=True)
        try:
            acks = p.send(topic_name, records[:150]) + p.send(topic_name, records[150:])
        finally:
            p.close()
        for part in (0, 1):
            assert sorted(a.offset for a in acks if a.partition == part) == list(range(150))
        got = client.consume(topic_name, [0, 1], count=300, timeout=30)
        assert sorted(g.value for g in got if g.value is not None) == sorted(r.value for r in records if r.value)
    finally:
        client.close()


@pytest.mark.parametrize("name", CLIENTS)
def test_a_lost_produce_response_is_retried_without_a_duplicate(proxied: tuple[BrokerProcess, LossyProxy],
                                                                name: str, topic_name: str) -> None:
    broker, proxy = proxied
    create_topic(broker, topic_name)
    client = _client(name, proxy)
    try:
        p = client.producer(idempotent=True)
        try:
            p.send(topic_name, [Rec(value=b"warm-up")])  # connections up, producer id assigned
            before, cut_before = proxy.produce_requests, proxy.responses_cut
            proxy.cut_produce_responses = 1
            acks = p.send(topic_name, [Rec(value=b"r%d" % i) for i in range(20)], timeout=60)
        finally:
            p.close()
        assert proxy.responses_cut - cut_before == 1, "the proxy never saw a Produce response to drop"
        assert proxy.produce_requests - before >= 2, "the client did not retry"
        assert sorted(a.offset for a in acks) == list(range(1, 21))
        assert _values(client, topic_name, 21) == [b"warm-up"] + [b"r%d" % i for i in range(20)]
    finally:
        proxy.cut_produce_responses = 0
        client.close()


def test_without_idempotence_the_same_loss_duplicates(proxied: tuple[BrokerProcess, LossyProxy],
                                                      topic_name: str) -> None:
    """The control: the scenario above with a plain producer does write twice, so the test is real."""
    broker, proxy = proxied
    create_topic(broker, topic_name)
    client = _client("confluent", proxy)
    try:
        p = client.producer(idempotent=False)
        try:
            p.send(topic_name, [Rec(value=b"warm-up")])
            cut_before = proxy.responses_cut
            proxy.cut_produce_responses = 1
            p.send(topic_name, [Rec(value=b"once")], timeout=60)
        finally:
            p.close()
        assert proxy.responses_cut - cut_before == 1
        assert _values(client, topic_name, 3) == [b"warm-up", b"once", b"once"]
    finally:
        proxy.cut_produce_responses = 0
        client.close()
