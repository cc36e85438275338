"""The client's record, metadata and error types, shared by the producer, consumer and admin."""
from __future__ import annotations

from collections import namedtuple

from node.wire import errors
from node.wire.errors import ErrorCode

KafkaError = errors.KafkaError
TopicPartition = namedtuple("TopicPartition", "topic partition")
RecordMetadata = namedtuple("RecordMetadata", "topic partition offset timestamp")
BatchMetadata = namedtuple("BatchMetadata", "topic partition base_offset record_count timestamp")
# ``headers``: the record's headers, as Kafka's clients give them - (str key, bytes or None
# value) pairs, in order, keys may repeat - in a tuple: () when it has none. Immutable, so
# records without headers (or with the same ones) share one tuple and ``poll`` allocates
# nothing per record for them (a fresh list each costs ~10% of poll's records/s).
ConsumerRecord = namedtuple("ConsumerRecord", "topic partition offset timestamp key value headers",
                            defaults=((),))
BrokerMetadata = namedtuple("BrokerMetadata", "broker_id host port rack")

# Errors after which the client's view of leadership is stale: refresh metadata.
METADATA_STALE_CODES = frozenset((
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR))
class KafkaTimeoutError(TimeoutError):
    """The client gave up waiting (a future's ``get``, metadata, a delivery timeout)."""


def error(code: int, message: str | None = None) -> errors.KafkaError:
    """The exception instance for a broker error code."""
    return errors.error_for(code)(message)
