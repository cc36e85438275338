"""Every message at every valid version: encode, decode, the same object."""

import functools
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.kafka.protocol import KafkaProtocolError, codec, messages

from .kafka_values import CASES, CLASSES, case_id, populated, strategy

SEEDS_PER_CASE = 4


def encode(message, version: int) -> bytes:
    out = []
    codec.encode_body(message, version, out)
    return b"".join(out)


@pytest.mark.parametrize("case", CASES, ids=case_id)
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


@functools.cache
def case_strategy(index: int):
    return st.tuples(st.just(CASES[index]), strategy(*CASES[index]))


@settings(max_examples=int(os.environ.get("KAFKA_FUZZ_EXAMPLES", "200")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(CASES) - 1).flatmap(case_strategy))
def test_hypothesis_messages_survive_encode_and_decode(case_and_message):
    (spec, version), message = case_and_message
    assert codec.decode_body(CLASSES[spec.name], version, encode(message, version)) == message
