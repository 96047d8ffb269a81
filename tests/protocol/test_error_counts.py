"""Error codes of a response counted as Kafka's ``errorCounts``: every ``*error_code`` field, nested, NONE included."""

from __future__ import annotations

from odradek.protocol import apis, entities
from odradek.protocol.error_counts import ErrorCounts, count_errors
from odradek.protocol.errors import ErrorCode


def test_codes_of_a_response_and_its_nested_entities_are_counted() -> None:
    cls = apis.response_class(apis.METADATA, 12)
    response = entities.build(cls, {
        "topics": [
            {"name": "a", "error_code": ErrorCode.NONE,
             "partitions": [{"partition_index": 0, "error_code": ErrorCode.NONE},
                            {"partition_index": 1, "error_code": ErrorCode.LEADER_NOT_AVAILABLE}]},
            {"name": "b", "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "partitions": []},
        ],
    })
    counts: ErrorCounts = {}
    count_errors(response, counts)
    assert counts == {ErrorCode.NONE: 2, ErrorCode.LEADER_NOT_AVAILABLE: 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 1}
    count_errors(response, counts)  # counts only grow
    assert counts[ErrorCode.NONE] == 4


def test_partition_error_code_fields_count_too() -> None:
    cls = apis.response_class(apis.ADD_PARTITIONS_TO_TXN, 3)
    response = entities.build(cls, {
        "results_by_topic_v3_and_below": [{"name": "t", "results_by_partition": [
            {"partition_index": 0, "partition_error_code": ErrorCode.CONCURRENT_TRANSACTIONS}]}],
    })
    counts: ErrorCounts = {}
    count_errors(response, counts)
    assert counts == {ErrorCode.CONCURRENT_TRANSACTIONS: 1}
