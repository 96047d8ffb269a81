"""The table of supported Kafka APIs and version ranges, and typed request/response codecs.

Request and response bodies are kio's generated dataclasses (from Kafka's message schemas); this
module only picks the class for an (api key, version) and runs kio's reader or writer.

Invariants:
- ``SUPPORTED`` lists exactly what the broker implements; ApiVersions is derived from it, so the
  broker never advertises an API or version that it cannot serve.
- Floors follow Kafka 4.x (KIP-896) unless a widely used client needs lower.
- ApiVersions responses use response header v0 at every version (KIP-511), all other flexible
  responses header v1.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from odradek.protocol.frame import SIZE, request_header, skip_tagged_fields


@dataclass(frozen=True, slots=True)
class ApiRange:
    key: int
    name: str
    min_version: int
    max_version: int


def _table(*rows: tuple[int, str, int, int]) -> dict[int, ApiRange]:
    return {key: ApiRange(key, name, lo, hi) for key, name, lo, hi in rows}


PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
OFFSET_FOR_LEADER_EPOCH = 23
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_LOG_DIRS = 35
ELECT_LEADERS = 43
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
OFFSET_DELETE = 47
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31

SUPPORTED: dict[int, ApiRange] = _table(
    (PRODUCE, "Produce", 3, 12),
    (FETCH, "Fetch", 4, 17),
    (LIST_OFFSETS, "ListOffsets", 1, 10),
    (METADATA, "Metadata", 0, 13),
    (OFFSET_COMMIT, "OffsetCommit", 2, 9),
    (OFFSET_FETCH, "OffsetFetch", 1, 9),
    (FIND_COORDINATOR, "FindCoordinator", 0, 6),
    (JOIN_GROUP, "JoinGroup", 0, 9),
    (HEARTBEAT, "Heartbeat", 0, 4),
    (LEAVE_GROUP, "LeaveGroup", 0, 5),
    (SYNC_GROUP, "SyncGroup", 0, 5),
    (DESCRIBE_GROUPS, "DescribeGroups", 0, 5),
    (LIST_GROUPS, "ListGroups", 0, 5),
    (SASL_HANDSHAKE, "SaslHandshake", 0, 1),
    (API_VERSIONS, "ApiVersions", 0, 4),
    (CREATE_TOPICS, "CreateTopics", 2, 7),
    (DELETE_TOPICS, "DeleteTopics", 1, 6),
    (DELETE_RECORDS, "DeleteRecords", 0, 2),
    (OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", 2, 4),
    (DESCRIBE_CONFIGS, "DescribeConfigs", 1, 4),
    (ALTER_CONFIGS, "AlterConfigs", 0, 2),
    (CREATE_PARTITIONS, "CreatePartitions", 0, 3),
    (DELETE_GROUPS, "DeleteGroups", 0, 2),
    (OFFSET_DELETE, "OffsetDelete", 0, 0),
    (DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", 0, 1),
    (ALTER_CLIENT_QUOTAS, "AlterClientQuotas", 0, 1),
    (DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentials", 0, 0),
    (ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials", 0, 0),
    (SASL_AUTHENTICATE, "SaslAuthenticate", 0, 2),
    (DESCRIBE_ACLS, "DescribeAcls", 1, 3),
    (CREATE_ACLS, "CreateAcls", 1, 3),
    (DELETE_ACLS, "DeleteAcls", 1, 3),
    (INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", 0, 1),
    (DESCRIBE_LOG_DIRS, "DescribeLogDirs", 1, 4),
    (ELECT_LEADERS, "ElectLeaders", 0, 2),
    (ALTER_PARTITION_REASSIGNMENTS, "AlterPartitionReassignments", 0, 1),
    (LIST_PARTITION_REASSIGNMENTS, "ListPartitionReassignments", 0, 0),
    (DESCRIBE_CLUSTER, "DescribeCluster", 0, 2),
    (DESCRIBE_PRODUCERS, "DescribeProducers", 0, 0),
    (INIT_PRODUCER_ID, "InitProducerId", 0, 5),
    (ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", 0, 5),
    (ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", 0, 4),
    (END_TXN, "EndTxn", 0, 4),
    (TXN_OFFSET_COMMIT, "TxnOffsetCommit", 0, 4),
    (WRITE_TXN_MARKERS, "WriteTxnMarkers", 1, 1),
    (DESCRIBE_TRANSACTIONS, "DescribeTransactions", 0, 0),
    (LIST_TRANSACTIONS, "ListTransactions", 0, 2),
)


def is_supported(api_key: int, version: int) -> bool:
    r = SUPPORTED.get(api_key)
    return r is not None and r.min_version <= version <= r.max_version


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    return _payload_class(api_key, version, EntityType.request)


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    return _payload_class(api_key, version, EntityType.response)


def _payload_class(api_key: int, version: int, kind: EntityType) -> type[Any]:
    module = load_payload_module(api_key, version, kind)  # type: ignore[arg-type]
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) is kind:
            return value
    raise LookupError(f"kio has no {kind.name} class for api {api_key} v{version}")


@cache
def request_is_flexible(api_key: int, version: int) -> bool:
    return bool(request_class(api_key, version).__flexible__)


@cache
def response_header_is_flexible(api_key: int, version: int) -> bool:
    if api_key == API_VERSIONS:
        return False
    return bool(response_class(api_key, version).__flexible__)


@cache
def _reader(api_key: int, version: int) -> Any:
    return entity_reader(request_class(api_key, version))


def decode_request(api_key: int, version: int, frame: bytes | memoryview, offset: int) -> Any:
    """Decode the request body at ``offset``; raises on malformed input (the caller maps it)."""
    value, _size = _reader(api_key, version)(frame, offset)
    return value


def encode_request(api_key: int, version: int, correlation_id: int, request: Any, client_id: str | None) -> bytes:
    """A whole request frame (size prefix, header, kio-written body): the client side."""
    payload = request_header(api_key, version, correlation_id, client_id,
                             flexible=request_is_flexible(api_key, version)) + encode_body(request)
    return SIZE.pack(len(payload)) + payload


def decode_response(api_key: int, version: int, payload: bytes | memoryview) -> tuple[int, Any]:
    """(correlation id, response) from a response frame without its size prefix (the client side).

    Raises ``ValueError`` if the body does not fill the frame exactly.
    """
    (correlation_id,) = SIZE.unpack_from(payload, 0)
    pos = 4
    if response_header_is_flexible(api_key, version):
        pos = skip_tagged_fields(payload, pos)
    value, size = _response_reader(api_key, version)(payload, pos)
    if pos + size != len(payload):
        raise ValueError(f"api {api_key} v{version} response of {len(payload)} bytes decoded only {pos + size}")
    return correlation_id, value


@cache
def _response_reader(api_key: int, version: int) -> Any:
    return entity_reader(response_class(api_key, version))


def encode_body(response: Any) -> bytes:
    """Serialize a kio response dataclass (no header, no size prefix)."""
    buf = io.BytesIO()
    entity_writer(type(response))(buf, response)
    return buf.getvalue()
