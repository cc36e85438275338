"""The error registry: one name per code, a class per code, unknown codes fail loudly."""
from __future__ import annotations

import msgpack
import pytest

from node.wire import errors
from node.wire.errors import ErrorCode


def test_every_code_but_none_has_its_class():
    for code in ErrorCode:
        if code is ErrorCode.NONE:
            continue
        cls = errors.error_for(code)
        assert cls.code is code and cls.name == code.name
        assert issubclass(cls, errors.KafkaError)


def test_kafka_numbers_and_retriability():
    # A few of Kafka's numbers, checked against its Errors enum.
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == 6
    assert ErrorCode.NOT_ENOUGH_REPLICAS == 19
    assert ErrorCode.KAFKA_STORAGE_ERROR == 56
    assert ErrorCode.FENCED_LEADER_EPOCH == 74
    assert errors.error_for(ErrorCode.NOT_LEADER_OR_FOLLOWER).retriable
    assert errors.error_for(ErrorCode.KAFKA_STORAGE_ERROR).retriable
    assert not errors.error_for(ErrorCode.INVALID_REQUEST).retriable


def test_codes_travel_as_plain_numbers():
    body = msgpack.unpackb(msgpack.packb({"error": ErrorCode.REQUEST_TIMED_OUT}))
    assert body == {"error": 7} and type(body["error"]) is int


def test_raise_for_and_unknown_codes():
    errors.raise_for(ErrorCode.NONE)
    with pytest.raises(errors.NotLeaderOrFollowerError, match="NOT_LEADER_OR_FOLLOWER: gone"):
        errors.raise_for(6, "gone")
    with pytest.raises(errors.UnknownServerError, match="unknown error code 9999"):
        errors.raise_for(9999)
    assert errors.error_for(9999) is errors.UnknownServerError
    assert errors.name_of(9999) == "UNKNOWN_CODE_9999" and errors.name_of(0) == "NONE"


def test_storage_errors_map_by_their_kafka_name():
    class FullDisk(OSError):
        kafka_error = "KAFKA_STORAGE_ERROR"
    assert errors.code_for_exception(FullDisk()) is ErrorCode.KAFKA_STORAGE_ERROR
    assert errors.code_for_exception(errors.InvalidConfigError()) is ErrorCode.INVALID_CONFIG
    assert errors.code_for_exception(ValueError()) is ErrorCode.UNKNOWN_SERVER_ERROR
