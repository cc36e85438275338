"""The package's entry points: headers, versions, the request/response tables."""

import dataclasses
import json
import random

import pytest

import node.kafka.protocol as protocol
from node.kafka.protocol import (API_NAMES, VALID_VERSIONS, KafkaProtocolError, RequestHeader,
                                 codec, decode_request, decode_response, encode_request,
                                 encode_response, messages, request_class, response_class, schema)

from .kafka_values import CASES, case_id, populated

CONTRACT = ["KafkaProtocolError", "UnsupportedVersion", "RequestHeader", "decode_request",
            "encode_response", "encode_request", "decode_response", "FrameDecoder",
            "VALID_VERSIONS", "request_class", "response_class", "API_NAMES"]


def test_the_package_offers_what_the_contract_lists():
    assert sorted(protocol.__all__) == sorted(CONTRACT)
    for name in CONTRACT:
        assert getattr(protocol, name) is not None
    assert issubclass(protocol.UnsupportedVersion, KafkaProtocolError)


def test_version_table_and_names_come_from_the_json():
    path = schema.SCHEMA_DIR / "ProduceRequest.json"
    doc = json.loads(schema.strip_comments(path.read_text()))
    assert VALID_VERSIONS[0] == tuple(int(v) for v in doc["validVersions"].split("-"))
    assert API_NAMES[0] == "Produce" and API_NAMES[18] == "ApiVersions" and API_NAMES[1] == "Fetch"
    assert request_class(3) is messages.MetadataRequest
    assert response_class(3) is messages.MetadataResponse
    keys = set(VALID_VERSIONS)
    assert keys == set(API_NAMES) == set(messages.REQUESTS) == set(messages.RESPONSES)


def test_names_follow_the_contract():
    nested = messages.ProduceRequest.TopicProduceData
    assert nested.__qualname__ == "ProduceRequest.TopicProduceData"
    fields = messages.MetadataResponse.MetadataResponsePartition.__dataclass_fields__
    assert {"isr_nodes", "replica_nodes", "leader_epoch"} <= set(fields)
    assert "throttle_time_ms" in messages.FetchResponse.__dataclass_fields__
    with pytest.raises(AttributeError):
        messages.ProduceRequest().acks = 1  # frozen


@pytest.mark.parametrize("case", [c for c in CASES if c[0].kind == "request"], ids=case_id)
def test_every_request_version_through_its_header(case):
    spec, version = case
    request = populated(spec, version, random.Random(f"api/{spec.name}/{version}"))
    header = RequestHeader(spec.api_key, version, 123456, "client-ü")
    data = encode_request(header, request)
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    assert decode_request(bytearray(data[4:])) == (header, request)


@pytest.mark.parametrize("case", [c for c in CASES if c[0].kind == "response"], ids=case_id)
def test_every_response_version_through_its_header(case):
    spec, version = case
    response = populated(spec, version, random.Random(f"api/{spec.name}/{version}"))
    data = encode_response(RequestHeader(spec.api_key, version, -5, None), response)
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    assert decode_response(spec.api_key, version, memoryview(data)[4:]) == (-5, response)


def test_header_tagged_fields_are_skipped():
    payload = encode_request(RequestHeader(3, 9, 1, "c"), messages.MetadataRequest())[4:]
    header_end = 8 + 2 + 1
    assert payload[header_end] == 0
    tagged = payload[:header_end] + bytes.fromhex("01 07 02 abcd") + payload[header_end + 1:]
    assert decode_request(tagged) == decode_request(payload)


def test_a_response_of_the_wrong_api_is_refused():
    with pytest.raises(KafkaProtocolError, match="not the response"):
        encode_response(RequestHeader(1, 12, 1, None), messages.ProduceResponse())
    with pytest.raises(KafkaProtocolError, match="not a request"):
        encode_request(RequestHeader(1, 12, 1, None), messages.ProduceRequest())


def test_messages_are_frozen_dataclasses_built_by_keyword():
    partition = messages.ProduceRequest.PartitionProduceData(index=3, records=b"r")
    assert dataclasses.is_dataclass(partition)
    changed = dataclasses.replace(partition, index=4)
    assert changed == messages.ProduceRequest.PartitionProduceData(4, b"r")
    assert [f.name for f in dataclasses.fields(partition)] == ["index", "records"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        partition.index = 5
    first, second = messages.MetadataRequest(), messages.MetadataRequest()
    assert first.topics == [] and first.topics is not second.topics  # a new list each
    assert messages.FetchRequest().max_bytes == 0x7FFFFFFF  # the JSON's default
    assert repr(partition) == "ProduceRequest.PartitionProduceData(index=3, records=b'r')"


def test_response_pieces_join_to_the_response():
    header = RequestHeader(1, 12, 9, None)
    response = messages.FetchResponse(responses=[messages.FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[messages.FetchResponse.PartitionData(records=[b"ab", b"cd"])])])
    pieces = codec.encode_response_pieces(header, response)
    assert b"".join(pieces) == encode_response(header, response)
    assert int.from_bytes(pieces[0], "big") == sum(map(len, pieces[1:]))
