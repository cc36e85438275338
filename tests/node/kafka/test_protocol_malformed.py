"""Malformed input only ever raises KafkaProtocolError: every message cut at every byte,
with trailing garbage, and fuzzed (random bytes, and valid messages mutated)."""

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.kafka.protocol import (KafkaProtocolError, RequestHeader, UnsupportedVersion, codec,
                                 decode_request, decode_response, encode_request,
                                 encode_response, messages)

from .kafka_values import CASES, CLASSES, case_id, populated

# KAFKA_FUZZ_EXAMPLES=100000 for a deeper run than the suite's.
FUZZ = settings(max_examples=int(os.environ.get("KAFKA_FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def sample(spec, version, seed=0):
    return populated(spec, version, random.Random(f"malformed/{spec.name}/{version}/{seed}"))


def encoded(spec, version, seed=0) -> bytes:
    out = []
    codec.encode_body(sample(spec, version, seed), version, out)
    return b"".join(out)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_cut_of_a_message_is_a_protocol_error(case):
    spec, version = case
    cls = CLASSES[spec.name]
    data = encoded(spec, version)
    for end in range(len(data)):
        with pytest.raises(KafkaProtocolError):
            codec.decode_body(cls, version, data[:end])
    with pytest.raises(KafkaProtocolError, match="after the end"):
        codec.decode_body(cls, version, data + b"\x00")


# Requests with their headers, for the request-level fuzzers.
REQUESTS = [
    encode_request(RequestHeader(spec.api_key, version, 7, "fuzz"), sample(spec, version))[4:]
    for spec, version in CASES if spec.kind == "request"]


def test_every_cut_of_a_request_with_its_header_is_a_protocol_error():
    for payload in REQUESTS[::7]:
        for end in range(len(payload)):
            with pytest.raises(KafkaProtocolError):
                decode_request(payload[:end])


def test_bytes_after_a_whole_request_are_ignored_as_kafkas_broker_ignores_them():
    for payload in REQUESTS[::5]:
        assert decode_request(payload + b"\x00\xff garbage") == decode_request(payload)


def test_bytes_after_a_whole_response_are_an_error():
    header = RequestHeader(3, 12, 1, None)
    payload = encode_response(header, messages.MetadataResponse())[4:]
    assert decode_response(3, 12, payload)[1] == messages.MetadataResponse()
    with pytest.raises(KafkaProtocolError, match="after the end"):
        decode_response(3, 12, payload + b"\x00")


def test_unknown_api_key_or_version_names_the_request():
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(bytes.fromhex("7fff 0000 0000002a ffff"))
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (32767, 0, 42)
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(bytes.fromhex("0012 0063 00000005"))  # ApiVersions v99: header only
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (18, 99, 5)


def test_lengths_negative_or_past_the_end_are_refused_before_allocating():
    head = bytes.fromhex("0000 0003 00000001 ffff ffff ffff 00007530")  # Produce v3
    for count in (b"\x80\x00\x00\x00", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe"):
        with pytest.raises(KafkaProtocolError):
            decode_request(head + count)
    with pytest.raises(KafkaProtocolError):  # a 2 GB records blob in a 30-byte message
        decode_request(head + bytes.fromhex("00000001 0001 74 00000001 00000000 7fffffff"))
    # Compact (v9): a 5-byte varint count, and a varint longer than 5 bytes.
    head9 = bytes.fromhex("0000 0009 00000001 ffff 00 00 ffff 00007530")
    for count in (b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\x01"):
        with pytest.raises(KafkaProtocolError):
            decode_request(head9 + count)


def test_invalid_utf8_is_a_protocol_error():
    with pytest.raises(KafkaProtocolError):
        decode_request(bytes.fromhex("0003 0001 00000002 0002 c328 ffffffff"))  # client id
    with pytest.raises(KafkaProtocolError):
        # A topic name holding a UTF-8-encoded surrogate, which strict UTF-8 refuses.
        decode_request(bytes.fromhex("0003 0001 00000002 ffff 00000001 0003 eda080"))
    assert decode_request(bytes.fromhex("0003 0001 00000002 ffff 00000001 0003 e282ac")
                          )[1].topics[0].name == "\u20ac"


def test_unknown_tagged_fields_are_skipped_and_bad_ones_refused():
    header = RequestHeader(18, 3, 1, "c")
    payload = encode_request(header, messages.ApiVersionsRequest(client_software_name="n"))[4:]
    assert payload.endswith(b"\x00")
    with_unknown = payload[:-1] + bytes.fromhex("02 05 02 aaaa 09 00")  # tags 5 and 9
    assert decode_request(with_unknown) == decode_request(payload)
    with pytest.raises(KafkaProtocolError):  # a tagged field longer than the message
        decode_request(payload[:-1] + bytes.fromhex("01 05 7f aaaa"))
    with pytest.raises(KafkaProtocolError):  # a known tag whose value is not its size
        decode_response(1, 12, encode_response(
            RequestHeader(1, 12, 1, "c"),
            messages.FetchResponse(responses=[messages.FetchResponse.FetchableTopicResponse(
                partitions=[messages.FetchResponse.PartitionData(
                    current_leader=messages.FetchResponse.LeaderIdAndEpoch(1, 1))])]))[4:]
            .replace(bytes.fromhex("01 01 09"), bytes.fromhex("01 01 08"), 1))


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_as_a_request_only_raise_protocol_errors(data):
    try:
        decode_request(data)
    except KafkaProtocolError:
        pass


@FUZZ
@given(st.sampled_from(REQUESTS), st.binary(max_size=200))
def test_random_bytes_after_a_valid_header_only_raise_protocol_errors(payload, data):
    cut = 8 + 2 + 4 + 1  # api key, version, correlation id, client id "fuzz", maybe tags
    try:
        decode_request(payload[:cut] + data)
    except KafkaProtocolError:
        pass


def mutate(payload: bytes, data) -> bytes:
    """A few random flips, special bytes, insertions and deletions."""
    mutated = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "byte"]))
        i = data.draw(st.integers(0, max(0, len(mutated) - 1)))
        if kind == "flip" and mutated:
            mutated[i] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "byte" and mutated:
            mutated[i] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif kind == "insert":
            mutated[i:i] = data.draw(st.binary(min_size=1, max_size=4))
        elif mutated:
            del mutated[i]
    return bytes(mutated)


@FUZZ
@given(st.sampled_from(REQUESTS), st.data())
def test_mutated_valid_requests_only_raise_protocol_errors(payload, data):
    try:
        decode_request(mutate(payload, data))
    except KafkaProtocolError:
        pass


RESPONSES = [
    (spec.api_key, version,
     encode_response(RequestHeader(spec.api_key, version, 7, None), sample(spec, version))[4:])
    for spec, version in CASES if spec.kind == "response"]


@FUZZ
@given(st.sampled_from(RESPONSES), st.data())
def test_mutated_valid_responses_only_raise_protocol_errors(response, data):
    api_key, version, payload = response
    try:
        decode_response(api_key, version, mutate(payload, data))
    except KafkaProtocolError:
        pass


@FUZZ
@given(st.sampled_from([(spec, v) for spec, v in CASES if spec.kind == "response"]),
       st.binary(max_size=120))
def test_random_bytes_as_any_response_only_raise_protocol_errors(case, data):
    spec, version = case
    try:
        decode_response(spec.api_key, version, data)
    except KafkaProtocolError:
        pass
