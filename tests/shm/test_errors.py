"""shm.errors: one registry of storage errors."""


def test_log_and_local_reader_raise_the_same_error_classes():
    # One registry (shm.errors): ``except OffsetOutOfRangeError`` must cover a Log.read
    # and a LocalReader.read alike, and every error names Kafka's error.
    import shm.errors as E
    import shm.local_reader as R
    import shm.log as L

    assert L.OffsetOutOfRangeError is R.OffsetOutOfRangeError is E.OffsetOutOfRangeError
    for cls in (E.OffsetOutOfRangeError, E.RecordTooLargeError, E.LogClosedError,
                E.UnknownTopicOrPartitionError, E.ReadRetriesExhaustedError):
        assert issubclass(cls, E.StorageError) and cls.kafka_error.isupper()
