"""Every message at every valid version: encode, decode, the same object."""

import functools
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.kafka.protocol import KafkaProtocolError, codec, coordinator_records, messages

from .kafka_values import CASES, CLASSES, RECORD_CASES, case_id, populated, strategy

SEEDS_PER_CASE = 4


def encode(message, version: int) -> bytes:
    out = []
    codec.encode_body(message, version, out)
    return b"".join(out)


@pytest.mark.parametrize("case", CASES + RECORD_CASES, ids=case_id)
def test_populated_and_default_messages_survive_encode_and_decode(case):
    spec, version = case
    cls = CLASSES[spec.name]
    for seed in range(SEEDS_PER_CASE):
        message = populated(spec, version, random.Random(f"{spec.name}/{version}/{seed}"))
        data = encode(message, version)
        assert codec.decode_body(cls, version, data) == message
        # The same bytes again: encoding is a function of the object.
        assert encode(codec.decode_body(cls, version, data), version) == data
    # And the message with every field at its default.
    assert codec.decode_body(cls, version, encode(cls(), version)) == cls()


def test_fields_a_version_lacks_decode_as_their_defaults():
    topics = [messages.MetadataRequest.MetadataRequestTopic(name="t")]
    request = messages.MetadataRequest(topics=topics, allow_auto_topic_creation=False)
    # AllowAutoTopicCreation is v4+ and not ignorable: v3 cannot carry False.
    with pytest.raises(KafkaProtocolError, match="AllowAutoTopicCreation"):
        encode(request, 3)
    back = codec.decode_body(messages.MetadataRequest, 3,
                             encode(messages.MetadataRequest(topics=request.topics), 3))
    assert back.allow_auto_topic_creation is True  # Kafka's default: v0-3 may auto-create


def test_an_ignorable_field_the_version_lacks_is_dropped():
    response = messages.FetchResponse(throttle_time_ms=250, responses=[])
    back = codec.decode_body(messages.FetchResponse, 0, encode(response, 0))
    assert back.throttle_time_ms == 0 and back == messages.FetchResponse()


def test_null_where_the_version_does_not_allow_it_is_refused():
    with pytest.raises(KafkaProtocolError, match="TopicProduceData.Name"):
        nameless = messages.ProduceRequest.TopicProduceData(name=None)
        encode(messages.ProduceRequest(topic_data=[nameless]), 9)
    with pytest.raises(KafkaProtocolError, match="Topics"):
        encode(messages.MetadataRequest(topics=None), 0)  # null (all topics) is v1+


def test_records_encode_from_several_pieces_and_decode_as_one():
    pieces = [b"abc", memoryview(b"defg"), bytearray(b"h")]
    response = messages.FetchResponse(responses=[messages.FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[messages.FetchResponse.PartitionData(records=pieces)])])
    back = codec.decode_body(messages.FetchResponse, 11, encode(response, 11))
    assert bytes(back.responses[0].partitions[0].records) == b"abcdefgh"


def test_a_wrong_value_is_a_clear_encoding_error():
    with pytest.raises(KafkaProtocolError, match="ProduceRequest v3"):
        encode(messages.ProduceRequest(acks=1 << 20), 3)  # int16
    with pytest.raises(KafkaProtocolError, match="no version 12"):
        encode(messages.ProduceRequest(), 12)


ALL_CASES = CASES + RECORD_CASES


@functools.cache
def case_strategy(index: int):
    return st.tuples(st.just(ALL_CASES[index]), strategy(*ALL_CASES[index]))


@settings(max_examples=int(os.environ.get("KAFKA_FUZZ_EXAMPLES", "200")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(ALL_CASES) - 1).flatmap(case_strategy))
def test_hypothesis_messages_survive_encode_and_decode(case_and_message):
    (spec, version), message = case_and_message
    assert codec.decode_body(CLASSES[spec.name], version, encode(message, version)) == message


def test_every_record_key_version_has_its_key_and_value_classes():
    # Kafka's key versions: 0 and 1 offset commits, 2 group metadata, 3-8 the consumer
    # group (KIP-848) records, in the order of their key files' validVersions.
    records = coordinator_records.RECORDS
    assert sorted(records) == list(range(9))
    assert records[0] == records[1] == (coordinator_records.OffsetCommitKey,
                                        coordinator_records.OffsetCommitValue)
    assert records[2][0] is coordinator_records.GroupMetadataKey
    for version, (key, value) in records.items():
        assert key.__name__.removesuffix("Key") == value.__name__.removesuffix("Value")
        assert key.VALID_VERSIONS[0] <= version <= key.VALID_VERSIONS[1]


def test_an_offset_commit_value_is_laid_out_as_kafka_writes_it():
    # OffsetCommitValue v3: offset int64, leaderEpoch int32, metadata int16-prefixed string,
    # commitTimestamp int64 (v1's expireTimestamp absent); v4 flexible (compact string, tags).
    value = coordinator_records.OffsetCommitValue(
        offset=42, leader_epoch=7, metadata="m", commit_timestamp=1000)
    assert encode(value, 3) == (b"\0" * 7 + b"\x2a" + b"\0\0\0\x07" + b"\0\x01m"
                                + (1000).to_bytes(8, "big"))
    assert encode(value, 4) == (b"\0" * 7 + b"\x2a" + b"\0\0\0\x07" + b"\x02m"
                                + (1000).to_bytes(8, "big") + b"\0")
    with pytest.raises(KafkaProtocolError, match="OffsetCommitValue"):
        codec.decode_body(coordinator_records.OffsetCommitValue, 3, encode(value, 3)[:-1])
