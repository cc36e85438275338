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


# Transactions (``node.client.producer.transactions``), kafka-python's / Kafka's names.
# What ``send_offsets_to_transaction`` is told of the consumer's group (the consumer's
# ``group_metadata()``): a group id alone (generation -1, member "") is not checked.
ConsumerGroupMetadata = namedtuple(
    "ConsumerGroupMetadata", "group_id generation_id member_id group_instance_id",
    defaults=(-1, "", None))
OffsetAndMetadata = namedtuple("OffsetAndMetadata", "offset metadata leader_epoch",
                               defaults=("", -1))


# The transaction errors of the coordinator's codes, by Kafka's exception names.
ProducerFencedError = errors.error_for(ErrorCode.PRODUCER_FENCED)
InvalidTxnStateError = errors.error_for(ErrorCode.INVALID_TXN_STATE)
TransactionAbortableError = errors.error_for(ErrorCode.TRANSACTION_ABORTABLE)
InvalidProducerEpochError = errors.error_for(ErrorCode.INVALID_PRODUCER_EPOCH)


class IllegalStateError(RuntimeError):
    """A transactional call made in a state that does not allow it (Kafka's
    IllegalStateException; kafka-python's IllegalStateError)."""


class TransactionAbortedError(errors.KafkaError):
    """A batch failed because its transaction was aborted before it was sent (Kafka's
    TransactionAbortedException)."""

    name = "TRANSACTION_ABORTED"
    retriable = False
    default_message = "Failing batch since transaction was aborted"


class CommitFailedError(errors.KafkaError):
    """TxnOffsetCommit refused for the group's metadata (UNKNOWN_MEMBER_ID,
    ILLEGAL_GENERATION): Kafka's CommitFailedException, abortable."""

    name = "COMMIT_FAILED"
    retriable = False
