"""The storage package's one error registry: each error carries Kafka's name for it.

``shm.log`` and ``shm.local_reader`` raise these, so a caller catches one class for one
condition whichever way it read the log (``except OffsetOutOfRangeError`` covers both a
``Log.read`` and a ``LocalReader.read``). Record-batch corruption is
``shm.batch.CorruptRecordError`` (the codec's own error, Kafka's CORRUPT_MESSAGE).
"""
from __future__ import annotations


class StorageError(Exception):
    """Base of the storage errors; ``kafka_error`` is Kafka's error name."""

    kafka_error = "UNKNOWN_SERVER_ERROR"


class LogError(StorageError):
    """An operation on a Log failed (a second writer, a malformed checkpoint ...)."""


class OffsetOutOfRangeError(LogError):
    """The offset is below the log start offset or above the LEO."""

    kafka_error = "OFFSET_OUT_OF_RANGE"


class RecordTooLargeError(LogError):
    kafka_error = "MESSAGE_TOO_LARGE"


class UnexpectedAppendOffsetError(LogError):
    """A follower append that does not start at (or is not contiguous with) the LEO."""


class InvalidRecordError(LogError):
    """A record the log refuses, e.g. one without a key in a compacted log (Kafka's
    "Compacted topic cannot accept message without key")."""

    kafka_error = "INVALID_RECORD"


class LogClosedError(LogError):
    kafka_error = "KAFKA_STORAGE_ERROR"


class LocalReadError(StorageError):
    """A LocalReader could not serve a read."""


class UnknownTopicOrPartitionError(LocalReadError):
    """The broker publishes no replica of this partition on its board."""

    kafka_error = "UNKNOWN_TOPIC_OR_PARTITION"


class ReadRetriesExhaustedError(LocalReadError):
    """The partition kept changing under the reader (truncation, leader changes)."""

    kafka_error = "REQUEST_TIMED_OUT"
