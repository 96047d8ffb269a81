"""Client quotas with real clients (confluent-kafka, kafka-python, aiokafka): byte rates held to their quota while
an unquoted client beside them runs far faster, request-rate throttling, throttle times the clients see, quotas
set through the CLI (kafka-python's AlterClientQuotas) and kept across a restart.

The broker measures over 3 windows of 1 s (``quota.window.num``/``quota.window.size.seconds``) so that a burst
after a quiet period (up to two windows' worth, as Kafka allows) is short next to the measured span; rates are
measured over two spans of the windows (6 s) from each start between 1 s and 4 s, averaged, so that where the
waves of a quota'd client fall does not matter (``rate_over_periods``); each client runs in a process of its own
(``quota_load``). The consumers' topic is written in batches smaller than their 64 KB fetches, so that a fetch
is never one batch larger than it asked for (returned whole, as Kafka does) and the quota is met in small
steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.protocol import apis
from tests.broker.wire import Conn, batch, ensure_topic, request_frame
from tests.compat.conftest import BrokerProcess, create_topic, running_broker
from tests.compat.quota_load import rate_over_periods

pytestmark = pytest.mark.slow

QUOTA = 1_048_576  # 1 MiB/s
WINDOWS, WINDOW_S = 3, 1
PERIOD_S = WINDOWS * WINDOW_S  # a quota'd client's waves: one burst per span of the windows
RUN_S = 10.0
OVERRIDES = {"quota.window.num": str(WINDOWS), "quota.window.size.seconds": str(WINDOW_S),
             "log.segment.bytes": str(64 << 20)}


@pytest.fixture(scope="module")
def qbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("quotas"), OVERRIDES) as b:
        yield b


def address(b: BrokerProcess) -> tuple[str, int]:
    host, port = b.bootstrap.rsplit(":", 1)
    return host, int(port)


def configs(b: BrokerProcess, *args: str) -> str:
    """``odradek configs ...`` against the broker (the CLI sends kafka-python's client-quota requests)."""
    out = subprocess.run([sys.executable, "-m", "odradek.cli.main", "configs", *args, "--bootstrap-server",
                          b.bootstrap], capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stderr
    return out.stdout


def load(verb: str, client: str, b: BrokerProcess, topic: str, client_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.compat.quota_load", verb, client, b.bootstrap, topic,
                             client_id, str(RUN_S)], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).parents[2])


def result(p: subprocess.Popen[str]) -> dict[str, object]:
    out, _ = p.communicate(timeout=RUN_S + 60)
    assert p.returncode == 0
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measured(r: dict[str, object]) -> float:
    marks = r["marks"]
    assert isinstance(marks, list)
    return rate_over_periods(marks, 1.0, 2 * PERIOD_S, PERIOD_S)


def quoted_beside_free(verb: str, client: str, b: BrokerProcess, topic: str, key: str
                       ) -> tuple[dict[str, object], dict[str, object]]:
    """Two clients of one library side by side, one under a ``key`` quota of ``QUOTA``: their results, once the
    quota'd one is checked to have held to its quota within 20 %."""
    slow_id = f"slow-{verb}-{client}"
    configs(b, "alter", "--entity-type", "clients", "--entity-name", slow_id, "--add-config", f"{key}={QUOTA}")
    slow = load(verb, client, b, topic, slow_id)
    fast = load(verb, client, b, topic, f"free-{verb}-{client}")
    slow_r, fast_r = result(slow), result(fast)
    rate = measured(slow_r)
    assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, f"{client}: {rate / QUOTA:.2f} x the quota"
    return slow_r, fast_r


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_producer_byte_rate_holds_a_producer_to_its_quota_beside_a_free_one(qbroker: BrokerProcess,
                                                                           client: str) -> None:
    topic = f"quota-produce-{client}"
    create_topic(qbroker, topic)
    slow_r, fast_r = quoted_beside_free("produce", client, qbroker, topic, "producer_byte_rate")
    assert measured(fast_r) > 5 * QUOTA
    if client != "aiokafka":  # aiokafka does not report throttle times
        assert float(slow_r["throttle_ms"]) > 0  # type: ignore[arg-type]
        assert float(fast_r["throttle_ms"]) == 0  # type: ignore[arg-type]


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_consumer_byte_rate_holds_a_consumer_to_its_quota_beside_a_free_one(qbroker: BrokerProcess,
                                                                           client: str) -> None:
    topic = f"quota-consume-{client}"
    create_topic(qbroker, topic)
    with Conn(address(qbroker)) as c:  # 24 MB to read: more than 1 MiB/s lets through in the run
        ensure_topic(c, topic)
        records = batch(*[b"c" * 1000] * 50)
        for _ in range(480):
            c.request(apis.PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout": 10_000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    slow_r, fast_r = quoted_beside_free("consume", client, qbroker, topic, "consumer_byte_rate")
    fast_marks = fast_r["marks"]
    assert isinstance(fast_marks, list)
    assert fast_marks[-1][1] >= 24_000_000  # read everything
    if client != "aiokafka":
        assert float(slow_r["throttle_ms"]) > 0  # type: ignore[arg-type]


def produce_throttle(b: BrokerProcess, topic: str, client_id: str, records: bytes) -> int:
    """The throttle_time_ms of one Produce v9 of ``records`` sent as ``client_id``."""
    values = {"transactional_id": None, "acks": 1, "timeout": 10_000,
              "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
    with Conn(address(b)) as c:
        c.send_raw(request_frame(apis.PRODUCE, 9, c.next_id(), values, client_id=client_id))
        _, r = c.recv_response(apis.PRODUCE, 9)
        assert all(p.error_code == 0 for t in r.responses for p in t.partition_responses)
        return int(r.throttle_time.total_seconds() * 1000)


def _metadata_loop(b: BrokerProcess, client_id: str, seconds: float) -> tuple[int, int]:
    """Tiny requests as fast as the broker answers them: (answered, largest throttle_time_ms seen)."""
    with Conn(address(b)) as c:
        c_id = client_id
        answered = 0
        throttled = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            cid = c.next_id()
            c.send_raw(request_frame(apis.METADATA, 12, cid, {"topics": [], "allow_auto_topic_creation": False,
                                                               "include_topic_authorized_operations": False},
                                     client_id=c_id))
            _, response = c.recv_response(apis.METADATA, 12)
            answered += 1
            throttled = max(throttled, int(response.throttle_time.total_seconds() * 1000))
        return answered, throttled


def test_request_percentage_throttles_a_client_of_tiny_requests(qbroker: BrokerProcess) -> None:
    configs(qbroker, "alter", "--entity-type", "clients", "--entity-name", "chatty",
            "--add-config", "request_percentage=1")
    free, free_throttle = _metadata_loop(qbroker, "calm", 2.0)
    limited, throttle = _metadata_loop(qbroker, "chatty", 4.0)
    assert free_throttle == 0
    assert throttle > 0  # the client is told, and the muted connection slows it down
    assert limited / 4.0 < (free / 2.0) / 3


def test_precedence_user_and_client_over_user_over_default(qbroker: BrokerProcess) -> None:
    """Unauthenticated connections are user ANONYMOUS: a (user, client-id) quota beats the user's, which beats
    the default client-id's."""
    configs(qbroker, "alter", "--entity-type", "clients", "--entity-default", "--add-config", "producer_byte_rate=1000")
    configs(qbroker, "alter", "--entity-type", "users", "--entity-name", "ANONYMOUS",
            "--add-config", "producer_byte_rate=2000")
    configs(qbroker, "alter", "--entity-type", "users", "--entity-name", "ANONYMOUS", "--entity-type", "clients",
            "--entity-name", "vip", "--add-config", "producer_byte_rate=1000000000")
    try:
        ensure = Conn(address(qbroker))
        ensure_topic(ensure, "quota-precedence")
        ensure.close()
        records = batch(*[b"p" * 1000] * 100)  # 100 KB: over 2000 B/s and 1000 B/s, far under the vip's

        vip = produce_throttle(qbroker, "quota-precedence", "vip", records)
        other = produce_throttle(qbroker, "quota-precedence", "someone", records)
        assert vip == 0
        assert other > 0
        out = configs(qbroker, "describe", "--entity-type", "users", "--entity-name", "ANONYMOUS", "--entity-type",
                      "clients", "--entity-name", "vip")
        assert "producer_byte_rate=1.0E9" in out
    finally:
        configs(qbroker, "alter", "--entity-type", "clients", "--entity-default",
                "--delete-config", "producer_byte_rate")
        configs(qbroker, "alter", "--entity-type", "users", "--entity-name", "ANONYMOUS",
                "--delete-config", "producer_byte_rate")
        configs(qbroker, "alter", "--entity-type", "users", "--entity-name", "ANONYMOUS", "--entity-type",
                "clients", "--entity-name", "vip", "--delete-config", "producer_byte_rate")


def test_quotas_set_changed_removed_and_kept_across_restart(tmp_path: Path) -> None:
    with running_broker(tmp_path, OVERRIDES) as b:
        configs(b, "alter", "--entity-type", "clients", "--entity-name", "app", "--add-config",
                "producer_byte_rate=1048576,consumer_byte_rate=2097152")
        configs(b, "alter", "--entity-type", "clients", "--entity-name", "app", "--add-config",
                "producer_byte_rate=4096")
        configs(b, "alter", "--entity-type", "clients", "--entity-name", "app", "--delete-config",
                "consumer_byte_rate")
        b.restart()
        out = configs(b, "describe", "--entity-type", "clients", "--entity-name", "app")
        assert "producer_byte_rate=4096.0" in out and "consumer_byte_rate" not in out
        with Conn(address(b)) as c:  # and it applies after the restart
            ensure_topic(c, "kept")
        assert produce_throttle(b, "kept", "app", batch(*[b"k" * 1000] * 64)) > 0
        configs(b, "alter", "--entity-type", "clients", "--entity-name", "app", "--delete-config",
                "producer_byte_rate")
        assert "app" not in configs(b, "describe", "--entity-type", "clients")


def test_old_request_versions_get_their_response_after_the_throttle_time(qbroker: BrokerProcess) -> None:
    """Produce v5 predates KIP-219: its client does not back off by itself, so the broker holds the response for
    the throttle time; v9's comes at once and the client is trusted to wait."""
    configs(qbroker, "alter", "--entity-type", "clients", "--entity-name", "old-client",
            "--add-config", "producer_byte_rate=10000")
    with Conn(address(qbroker)) as c:
        ensure_topic(c, "quota-old")
    records = batch(*[b"o" * 1000] * 40)  # 40 KB at 10 kB/s over 2 windows: throttled for about 2 s

    def timed_produce(version: int) -> tuple[float, int]:
        values = {"transactional_id": None, "acks": 1, "timeout": 10_000,
                  "topic_data": [{"name": "quota-old", "partition_data": [{"index": 0, "records": records}]}]}
        with Conn(address(qbroker), timeout=30) as c:
            started = time.monotonic()
            c.send_raw(request_frame(apis.PRODUCE, version, c.next_id(), values, client_id="old-client"))
            _, r = c.recv_response(apis.PRODUCE, version, timeout=30)
            return time.monotonic() - started, int(r.throttle_time.total_seconds() * 1000)

    elapsed, throttle = timed_produce(5)
    assert throttle > 500
    assert elapsed >= throttle / 1000 * 0.9  # held back for the throttle time
    elapsed, throttle = timed_produce(9)
    assert throttle > 500
    assert elapsed < throttle / 1000 / 2  # answered at once
