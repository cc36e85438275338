"""Kafka's error codes: one registry for the broker protocol (numbers and names are Kafka's).

``ErrorCode`` names every code (``ErrorCode.NOT_LEADER_OR_FOLLOWER``; an ``IntEnum``, so
it goes on the wire as its number). ``KafkaError`` subclasses are generated from it;
``error_for(code)`` gives the class for a code (unknown codes fail loudly as
UnknownServerError with the code kept), ``name_of(code)`` a name for any number, and
``code_for_exception(e)`` maps a storage error (``shm.errors`` carry ``kafka_error``) to its
code.
"""
from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Kafka's error codes, by Kafka's names (the numbers are on the wire)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    NETWORK_EXCEPTION = 13
    COORDINATOR_NOT_AVAILABLE = 15
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    INVALID_RECORD = 87
    INELIGIBLE_REPLICA = 107
    # Kafka's wire (node.kafka): SASL not offered, fetch sessions declined, topic ids.
    ILLEGAL_SASL_STATE = 34
    INVALID_REQUIRED_ACKS = 21
    FETCH_SESSION_ID_NOT_FOUND = 70
    UNKNOWN_TOPIC_ID = 100
    # Kafka's wire, admin (node.kafka.translate.admin*).
    POLICY_VIOLATION = 44
    TOPIC_DELETION_DISABLED = 73
    MISMATCHED_ENDPOINT_TYPE = 114
    # The group coordinator (node.broker.groups, node.core.groups).
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    NOT_COORDINATOR = 16
    RECORD_LIST_TOO_LARGE = 18
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    GROUP_AUTHORIZATION_FAILED = 30
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128
    # Transactions (issue 28: node.core.txn, node.broker.txn).
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    OPERATION_NOT_ATTEMPTED = 55
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105
    TRANSACTION_ABORTABLE = 120


# Per code: (retriable, message), as Kafka's Errors enum.
_INFO: dict[ErrorCode, tuple[bool, str]] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: (False, 'The server experienced an unexpected error.'),
    ErrorCode.OFFSET_OUT_OF_RANGE: (False, 'The requested offset is not within the range of '
                                           'offsets maintained by the server.'),
    ErrorCode.CORRUPT_MESSAGE: (True, 'The message contents do not match its CRC or are '
                                      'malformed.'),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: (True, 'This server does not host this topic-partition.'),
    ErrorCode.LEADER_NOT_AVAILABLE: (True, 'There is no leader for this topic-partition.'),
    ErrorCode.NOT_LEADER_OR_FOLLOWER: (True, 'This server is not the leader or a follower of '
                                             'this topic-partition.'),
    ErrorCode.REQUEST_TIMED_OUT: (True, 'The request timed out.'),
    ErrorCode.BROKER_NOT_AVAILABLE: (False, 'The broker is not available.'),
    ErrorCode.REPLICA_NOT_AVAILABLE: (True, 'The replica is not available.'),
    ErrorCode.MESSAGE_TOO_LARGE: (False, 'The request included a message larger than the max '
                                         'message size the server will accept.'),
    ErrorCode.STALE_CONTROLLER_EPOCH: (False, 'The controller moved to another broker.'),
    ErrorCode.NETWORK_EXCEPTION: (True, 'The server disconnected before a response was received.'),
    ErrorCode.COORDINATOR_NOT_AVAILABLE: (True, 'The coordinator is not available.'),
    ErrorCode.INVALID_TOPIC_EXCEPTION: (False, 'The request attempted to perform an operation '
                                               'on an invalid topic.'),
    ErrorCode.NOT_ENOUGH_REPLICAS: (True, 'Messages are rejected since there are fewer in-sync '
                                          'replicas than required.'),
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (True, 'Messages are written to the log, but '
                                                       'to fewer in-sync replicas than '
                                                       'required.'),
    ErrorCode.UNSUPPORTED_VERSION: (False, 'The version of API is not supported.'),
    ErrorCode.TOPIC_ALREADY_EXISTS: (False, 'Topic with this name already exists.'),
    ErrorCode.INVALID_PARTITIONS: (False, 'Number of partitions is below 1.'),
    ErrorCode.INVALID_REPLICATION_FACTOR: (False, 'Replication factor is below 1 or larger '
                                                  'than the number of available brokers.'),
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: (False, 'Replica assignment is invalid.'),
    ErrorCode.INVALID_CONFIG: (False, 'Configuration is invalid.'),
    ErrorCode.NOT_CONTROLLER: (True, 'This is not the correct controller for this cluster.'),
    ErrorCode.INVALID_REQUEST: (False, 'This most likely occurs because of a request being '
                                       'malformed by the client library or the message was '
                                       'sent to an incompatible broker.'),
    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT: (False, 'The message format version on the '
                                                      'broker does not support the request.'),
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: (False, 'The broker received an out of order '
                                                    'sequence number.'),
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: (False, 'The broker received a duplicate sequence '
                                                 'number.'),
    ErrorCode.INVALID_PRODUCER_EPOCH: (False, "Producer attempted to produce with an old "
                                              "epoch."),
    ErrorCode.UNKNOWN_PRODUCER_ID: (False, "This exception is raised by the broker if it "
                                           "could not locate the producer metadata associated "
                                           "with the producerId in question."),
    ErrorCode.KAFKA_STORAGE_ERROR: (True, 'Disk error when trying to access log file on the disk.'),
    ErrorCode.FENCED_LEADER_EPOCH: (True, 'The leader epoch in the request is older than the '
                                          'epoch on the broker.'),
    ErrorCode.UNKNOWN_LEADER_EPOCH: (True, 'The leader epoch in the request is newer than the '
                                           'epoch on the broker.'),
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: (False, 'The requesting client does not support '
                                                    'the compression type of given partition.'),
    ErrorCode.STALE_BROKER_EPOCH: (False, 'Broker epoch has changed.'),
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: (True, 'The preferred leader was not available.'),
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: (True, 'Eligible topic partition leaders are not '
                                                     'available.'),
    ErrorCode.ELECTION_NOT_NEEDED: (True, 'Leader election not needed for topic partition.'),
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: (False, 'No partition reassignment is in progress.'),
    ErrorCode.INVALID_RECORD: (False, 'This record has failed the validation on broker and '
                                      'hence will be rejected.'),
    ErrorCode.INELIGIBLE_REPLICA: (False, 'The new ISR contains at least one ineligible replica.'),
    ErrorCode.ILLEGAL_SASL_STATE: (False, 'Request is not valid given the current SASL state.'),
    ErrorCode.INVALID_REQUIRED_ACKS: (False, 'Produce request specified an invalid value for '
                                             'required acks.'),
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND: (True, 'The fetch session ID was not found.'),
    ErrorCode.UNKNOWN_TOPIC_ID: (True, 'This server does not host this topic ID.'),
    ErrorCode.POLICY_VIOLATION: (False, 'Request parameters do not satisfy the configured '
                                        'policy.'),
    ErrorCode.TOPIC_DELETION_DISABLED: (False, 'Topic deletion is disabled.'),
    ErrorCode.MISMATCHED_ENDPOINT_TYPE: (False, 'The request was sent to an endpoint of the '
                                                'wrong type.'),
}# The group coordinator's (Kafka's Errors enum).
_INFO.update({
    ErrorCode.OFFSET_METADATA_TOO_LARGE: (False, 'The metadata field of the offset request '
                                                 'was too large.'),
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: (True, "The coordinator is loading and hence "
                                                   "can't process requests."),
    ErrorCode.NOT_COORDINATOR: (True, 'This is not the correct coordinator.'),
    ErrorCode.RECORD_LIST_TOO_LARGE: (False, 'The request included message batch larger than '
                                             'the configured segment size on the server.'),
    ErrorCode.ILLEGAL_GENERATION: (False, 'Specified group generation id is not valid.'),
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: (False, "The group member's supported protocols "
                                                   "are incompatible with those of existing "
                                                   "members or first group member tried to "
                                                   "join with empty protocol type or empty "
                                                   "protocol list."),
    ErrorCode.INVALID_GROUP_ID: (False, 'The configured groupId is invalid.'),
    ErrorCode.UNKNOWN_MEMBER_ID: (False, 'The coordinator is not aware of this member.'),
    ErrorCode.INVALID_SESSION_TIMEOUT: (False, 'The session timeout is not within the range '
                                               'allowed by the broker (as configured by '
                                               'group.min.session.timeout.ms and '
                                               'group.max.session.timeout.ms).'),
    ErrorCode.REBALANCE_IN_PROGRESS: (False, 'The group is rebalancing, so a rejoin is '
                                             'needed.'),
    ErrorCode.INVALID_COMMIT_OFFSET_SIZE: (False, 'The committing offset data size is not '
                                                  'valid.'),
    ErrorCode.GROUP_AUTHORIZATION_FAILED: (False, 'Group authorization failed.'),
    ErrorCode.NON_EMPTY_GROUP: (False, 'The group is not empty.'),
    ErrorCode.GROUP_ID_NOT_FOUND: (False, 'The group id does not exist.'),
    ErrorCode.MEMBER_ID_REQUIRED: (False, 'The group member needs to have a valid member id '
                                          'before actually entering a consumer group.'),
    ErrorCode.GROUP_MAX_SIZE_REACHED: (False, 'The consumer group has reached its max size.'),
    ErrorCode.FENCED_INSTANCE_ID: (False, 'The broker rejected this static consumer since '
                                          'another consumer with the same group.instance.id '
                                          'has registered with a different member.id.'),
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: (False, 'Deleting offsets of a topic is forbidden '
                                                 'while the consumer group is actively '
                                                 'subscribed to it.'),
    ErrorCode.UNSTABLE_OFFSET_COMMIT: (True, 'There are unstable offsets that need to be '
                                             'cleared.'),
    ErrorCode.FENCED_MEMBER_EPOCH: (False, 'The member epoch is fenced by the group '
                                           'coordinator. The member must abandon all its '
                                           'partitions and rejoin.'),
    ErrorCode.UNRELEASED_INSTANCE_ID: (False, 'The instance ID is still used by another '
                                              'member in the consumer group. That member '
                                              'must leave first.'),
    ErrorCode.UNSUPPORTED_ASSIGNOR: (False, 'The assignor or its version range is not '
                                            'supported by the consumer group.'),
    ErrorCode.STALE_MEMBER_EPOCH: (False, 'The member epoch is stale. The member must retry '
                                          'after receiving its updated member epoch via the '
                                          'ConsumerGroupHeartbeat API.'),
    ErrorCode.INVALID_REGULAR_EXPRESSION: (False, 'The regular expression is not valid.'),
})
# Transactions' (Kafka's Errors enum).
_INFO.update({
    ErrorCode.INVALID_TXN_STATE: (False, 'The producer attempted a transactional operation in '
                                         'an invalid state.'),
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: (False, 'The producer attempted to use a producer id '
                                                   'which is not currently assigned to its '
                                                   'transactional id.'),
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: (False, 'The transaction timeout is larger than the '
                                                   'maximum value allowed by the broker (as '
                                                   'configured by transaction.max.timeout.ms).'),
    ErrorCode.CONCURRENT_TRANSACTIONS: (True, 'The producer attempted to update a transaction '
                                              'while another concurrent operation on the same '
                                              'transaction was ongoing.'),
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: (False, 'Indicates that the transaction '
                                                      'coordinator sending a WriteTxnMarker is '
                                                      'no longer the current coordinator for a '
                                                      'given producer.'),
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (False, 'Transactional Id authorization '
                                                             'failed.'),
    ErrorCode.OPERATION_NOT_ATTEMPTED: (False, 'The broker did not attempt to execute this '
                                               'operation. This may happen for batched RPCs '
                                               'where some operations in the batch failed, '
                                               'causing the broker to respond without trying '
                                               'the rest.'),
    ErrorCode.PRODUCER_FENCED: (False, 'There is a newer producer with the same transactionalId '
                                       'which fences the current one.'),
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: (False, 'The transactionalId could not be found.'),
    ErrorCode.TRANSACTION_ABORTABLE: (False, 'The server encountered an error with the '
                                             'transaction. The client can abort the transaction '
                                             'to continue using this transactional ID.'),
})
assert set(_INFO) == set(ErrorCode) - {ErrorCode.NONE}

NAMES: dict[int, str] = {int(c): c.name for c in ErrorCode}


class KafkaError(Exception):
    """A broker error. ``code`` and ``name`` are Kafka's; ``retriable`` as Kafka."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR
    name = "UNKNOWN_SERVER_ERROR"
    retriable = False
    default_message = ""

    def __init__(self, message: str | None = None):
        super().__init__(f"{self.name}: {message or self.default_message}")
        self.message = message or self.default_message


_CLASSES: dict[int, type[KafkaError]] = {}


def _class_name(name: str) -> str:
    words = "".join(w.capitalize() for w in name.lower().split("_"))
    return words if words.endswith(("Error", "Exception")) else words + "Error"


for _code, (_retriable, _message) in _INFO.items():
    _cls = type(_class_name(_code.name), (KafkaError,), {
        "code": _code, "name": _code.name, "retriable": _retriable,
        "default_message": _message, "__doc__": _message})
    _CLASSES[_code] = _cls
    globals()[_cls.__name__] = _cls


def error_for(code: int) -> type[KafkaError]:
    """The exception class for a code; unknown codes map to UnknownServerError."""
    return _CLASSES.get(code, _CLASSES[ErrorCode.UNKNOWN_SERVER_ERROR])


def raise_for(code: int, message: str | None = None) -> None:
    if code != ErrorCode.NONE:
        if code not in _CLASSES:
            raise _CLASSES[ErrorCode.UNKNOWN_SERVER_ERROR](f"unknown error code {code}: {message or ''}")
        raise _CLASSES[code](message)


def name_of(code: int) -> str:
    return NAMES.get(code, f"UNKNOWN_CODE_{code}")


def code_for_exception(e: BaseException) -> ErrorCode:
    """Storage and codec errors carry their Kafka name; anything else is unexpected."""
    if isinstance(e, KafkaError):
        return e.code
    name = getattr(e, "kafka_error", None)
    if name is None and type(e).__name__ == "CorruptRecordError":
        name = "CORRUPT_MESSAGE"
    return ErrorCode.__members__.get(name or "", ErrorCode.UNKNOWN_SERVER_ERROR)
