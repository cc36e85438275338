"""shm.errors: one registry of storage errors."""


def test_log_and_local_reader_raise_the_same_error_classes():
    # One registry (shm.errors): ``except OffsetOutOfRangeError`` must cover a Log.read
    # and a LocalReader.read alike, and every error names Kafka's error.
    from shm import errors, local_reader, log

    assert log.OffsetOutOfRangeError is local_reader.OffsetOutOfRangeError \
        is errors.OffsetOutOfRangeError
    for cls in (errors.OffsetOutOfRangeError, errors.RecordTooLargeError, errors.LogClosedError,
                errors.UnknownTopicOrPartitionError, errors.ReadRetriesExhaustedError):
        assert issubclass(cls, errors.StorageError) and cls.kafka_error.isupper()
