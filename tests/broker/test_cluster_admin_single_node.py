"""The cluster-operation APIs against a single node, which is its own controller (Metadata names it) and the
only replica of every partition: kafka-python's admin client gets Kafka's answers instead of NOT_CONTROLLER
forever."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import (
    ElectionNotNeededError,
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)

from tests.broker.process import BrokerProcess, serving


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serving(tmp_path_factory.mktemp("single"))


@pytest.fixture
def admin(node: BrokerProcess) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=10000)
    try:
        yield a
    finally:
        a.close()


def test_reassignments_on_a_single_node(admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("solo", 2, 1)])
    tp = TopicPartition("solo", 0)
    assert admin.alter_partition_reassignments({tp: [1]}) == {tp: None}  # to itself: nothing to do
    assert admin.alter_partition_reassignments({tp: [1, 2]}) == {tp: InvalidReplicationAssignmentError}
    assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    missing = TopicPartition("solo", 9)
    assert admin.alter_partition_reassignments({missing: [1]}) == {missing: UnknownTopicOrPartitionError}
    assert admin.list_partition_reassignments() == {}


def test_leader_elections_on_a_single_node(admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("solo-e", 1, 1)])
    r = admin.elect_leaders(0, {"solo-e": [0, 3]}, raise_errors=False)
    codes = {(t.topic, p.partition_id): p.error_code for t in r.replica_election_results for p in t.partition_result}
    assert codes == {("solo-e", 0): ElectionNotNeededError.errno, ("solo-e", 3): UnknownTopicOrPartitionError.errno}
