"""Kafka wire error codes and the exceptions that carry them.

Invariants:
- ``ErrorCode`` values are Kafka's wire codes and are never renumbered.
- Every exception raised by the protocol or storage layers that a client can see is a
  ``KafkaError`` subclass carrying the wire code it maps to, plus a message that says what was
  wrong and, where it helps, what to do.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    BROKER_NOT_AVAILABLE = 8
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    UNKNOWN_TOPIC_ID = 100
    TOPIC_DELETION_DISABLED = 73
    TRANSACTIONAL_ID_NOT_FOUND = 105
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    TRANSACTION_ABORTABLE = 120
    INVALID_REGULAR_EXPRESSION = 128


class KafkaError(Exception):
    """An error with a Kafka wire code. ``str(err)`` is the human-readable message."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CorruptRecordError(KafkaError):
    """A record batch failed a CRC or structural check (Kafka's CorruptRecordException)."""

    code = ErrorCode.CORRUPT_MESSAGE


class InvalidRecordError(KafkaError):
    """A record batch is well-formed but not acceptable (wrong magic, bad counts)."""

    code = ErrorCode.INVALID_RECORD


class UnsupportedMagicError(InvalidRecordError):
    """A batch of a message format other than v2; Odradek stores magic v2 only."""

    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class RecordTooLargeError(KafkaError):
    """One batch is larger than the topic's ``max.message.bytes``."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class InvalidTimestampError(KafkaError):
    """A batch's timestamp lies outside the topic's accepted window."""

    code = ErrorCode.INVALID_TIMESTAMP


class OffsetOutOfRangeError(KafkaError):
    """An offset below the log start offset or above the log end offset."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(self, message: str, *, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class StorageError(KafkaError):
    """The disk failed us (full, I/O error, read-only). What was stored before stays readable."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


class InvalidConfigError(KafkaError):
    """A configuration key is unknown or its value is invalid."""

    code = ErrorCode.INVALID_CONFIG


class UnsupportedCompressionError(KafkaError):
    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class RecordListTooLargeError(KafkaError):
    """A produce request's record set is larger than the topic's ``segment.bytes``."""

    code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidTopicError(KafkaError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class TopicExistsError(KafkaError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class UnknownTopicError(KafkaError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class NotLeaderOrFollowerError(KafkaError):
    """This broker does not lead the partition (or, for a replica fetch, is not its leader): refresh metadata."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class LeaderNotAvailableError(KafkaError):
    """The partition has no leader right now (offline, or an election is in progress)."""

    code = ErrorCode.LEADER_NOT_AVAILABLE


class NotEnoughReplicasError(KafkaError):
    """acks=all refused before appending: the ISR is smaller than min.insync.replicas."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppendError(KafkaError):
    """acks=all: appended, but the ISR shrank below min.insync.replicas before the write was replicated."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class RequestTimedOutError(KafkaError):
    code = ErrorCode.REQUEST_TIMED_OUT


class FencedLeaderEpochError(KafkaError):
    """The request's leader epoch is older than this broker's: the asker's metadata is stale."""

    code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(KafkaError):
    """The request's leader epoch is newer than this broker's: this broker has not caught up yet."""

    code = ErrorCode.UNKNOWN_LEADER_EPOCH


class StaleBrokerEpochError(KafkaError):
    code = ErrorCode.STALE_BROKER_EPOCH


class BrokerNotAvailableError(KafkaError):
    code = ErrorCode.BROKER_NOT_AVAILABLE


class CoordinatorNotAvailableError(KafkaError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
