"""Bytes written by hand from Kafka's protocol guide (kafka.apache.org/protocol) and the
JSON definitions, decoded and encoded: the codec agrees with Kafka, not only with itself."""

import uuid

from node.kafka.protocol import (RequestHeader, decode_request, decode_response, encode_request,
                                 encode_response)
from node.kafka.protocol.messages import (ApiVersionsRequest, ApiVersionsResponse, FetchRequest,
                                          FetchResponse, MetadataRequest, MetadataResponse,
                                          ProduceRequest)


def h(text: str) -> bytes:
    """Hex with spaces, and 'quoted' ASCII."""
    out = b""
    parts = text.split("'")
    for i, part in enumerate(parts):
        out += part.encode() if i % 2 else bytes.fromhex(part)
    return out


def test_api_versions_request_v3_as_librdkafka_sends_it():
    payload = h("0012 0003 00000001 0007'rdkafka' 00"  # header v2: key, version, id, client, tags
                "0b'librdkafka' 07'2.16.0' 00")       # compact strings (length + 1), tags
    header, request = decode_request(payload)
    assert header == RequestHeader(18, 3, 1, "rdkafka")
    assert request == ApiVersionsRequest(client_software_name="librdkafka",
                                         client_software_version="2.16.0")
    assert encode_request(header, request) == len(payload).to_bytes(4, "big") + payload


def test_metadata_request_v1_names_topics_or_asks_for_all_with_null():
    header, request = decode_request(h("0003 0001 00000002 0001'c' 00000002 0001'a' 0002'bc'"))
    assert header == RequestHeader(3, 1, 2, "c")
    assert request == MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a"),
                                              MetadataRequest.MetadataRequestTopic(name="bc")])
    assert request.allow_auto_topic_creation is True  # v1 has no such field: Kafka's default
    _, request = decode_request(h("0003 0001 00000002 ffff ffffffff"))
    assert request.topics is None


def test_librdkafka_all_topics_metadata_v12_with_its_three_stray_bytes():
    # librdkafka reserves an int32 for the topic count (rd_kafka_buf_write_arraycnt_pos)
    # and, asking for all topics in v9+, leaves it unfinalized: 00 (null: all topics) and
    # three zero bytes that Kafka's broker reads as the two booleans and the tagged fields,
    # ignoring the three real ones after them. We read it as Kafka does.
    payload = h("0003 000c 00000002 0007'rdkafka' 00"
                "00 000000"   # the int32 placeholder: null topics, then 00 00 00
                "01 00 00")   # AllowAutoTopicCreation, IncludeTopicAuthorizedOperations, tags
    header, request = decode_request(payload)
    assert header == RequestHeader(3, 12, 2, "rdkafka")
    assert request == MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False)


def test_produce_request_v3():
    payload = h("0000 0003 00000007 ffff"  # header v1, null client id
                "ffff ffff 00007530"       # null transactional id, acks -1, timeout 30000 ms
                "00000001 0001't' 00000001 00000000 00000005'hello'")
    header, request = decode_request(payload)
    assert header == RequestHeader(0, 3, 7, None)
    assert request == ProduceRequest(
        transactional_id=None, acks=-1, timeout_ms=30000,
        topic_data=[ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=b"hello")])])
    assert encode_request(header, request)[4:] == payload


def test_fetch_request_v12_with_a_tagged_cluster_id():
    payload = h("0001 000c 00000009 0002'rk' 00"
                "ffffffff 000001f4 00000001 03200000 01 00000000 ffffffff"  # replica .. epoch
                "02 02't' 02 00000000 00000005 000000000000002a ffffffff ffffffffffffffff"
                "00100000 00 00"            # partition max bytes, partition tags, topic tags
                "01 01"                     # no forgotten topics, rack id ""
                "01 00 04 04'abc'")         # one tagged field: tag 0, 4 bytes: "abc" (compact)
    header, request = decode_request(payload)
    assert header == RequestHeader(1, 12, 9, "rk")
    assert request == FetchRequest(
        cluster_id="abc", replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800,
        isolation_level=1, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
        topics=[FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(
            partition=0, current_leader_epoch=5, fetch_offset=42, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1048576)])])
    assert encode_request(header, request)[4:] == payload


def test_api_versions_response_v3_has_header_v0_and_a_tagged_features_epoch():
    response = ApiVersionsResponse(
        error_code=0, throttle_time_ms=0, finalized_features_epoch=5,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=0, min_version=3, max_version=9)])
    expected = h("0000001d 00000007"       # size, correlation id, and no header tags (v0)
                 "0000 02 0000 0003 0009 00 00000000"
                 "01 01 08 0000000000000005")  # tag 1 (FinalizedFeaturesEpoch), 8 bytes
    assert encode_response(RequestHeader(18, 3, 7, "c"), response) == expected
    assert decode_response(18, 3, expected[4:]) == (7, response)


def test_metadata_response_v1_as_kcat_reads_it():
    response = MetadataResponse(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="h", port=9092)],
        controller_id=1, cluster_id="ignored below v2",
        topics=[MetadataResponse.MetadataResponseTopic(name="t", partitions=[
            MetadataResponse.MetadataResponsePartition(partition_index=0, leader_id=1,
                                                       replica_nodes=[1, 2], isr_nodes=[1])])])
    expected = h("00000004"  # correlation id (header v0); the size is checked below
                 "00000001 00000001 0001'h' 00002384 ffff"  # one broker, null rack
                 "00000001"                                 # controller id
                 "00000001 0000 0001't' 00"                 # topic: error, name, not internal
                 "00000001 0000 00000000 00000001"          # partition: error, index, leader
                 "00000002 00000001 00000002 00000001 00000001")
    data = encode_response(RequestHeader(3, 1, 4, None), response)
    assert data == len(expected).to_bytes(4, "big") + expected
    _, back = decode_response(3, 1, expected)
    assert back.cluster_id is None and back.brokers[0].rack is None
    assert back.topics == response.topics


def test_fetch_response_v12_with_the_current_leader_as_a_tagged_field():
    partition = FetchResponse.PartitionData(
        partition_index=0, error_code=6, high_watermark=10, last_stable_offset=10,
        log_start_offset=0, aborted_transactions=None, records=b"",
        current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=2, leader_epoch=7))
    response = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[partition])])
    expected = h("00000003 00"                      # correlation id, header tags (v1)
                 "00000000 0000 00000000"           # throttle, error, session id
                 "02 02't' 02 00000000 0006"        # one topic "t", one partition, error 6
                 "000000000000000a 000000000000000a 0000000000000000"
                 "00 ffffffff 01"                   # null aborted list, -1, empty records
                 "01 01 09 00000002 00000007 00"    # tag 1: CurrentLeader(2, 7)
                 "00 00")                           # topic tags, response tags
    assert encode_response(RequestHeader(1, 12, 3, "c"), response)[4:] == expected
    assert decode_response(1, 12, expected) == (3, response)


def test_metadata_response_v12_topic_id_and_null_name():
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    response = MetadataResponse(topics=[MetadataResponse.MetadataResponseTopic(
        error_code=3, name=None, topic_id=topic_id)], cluster_id="k")
    expected = h("00000001 00"          # correlation id, header tags
                 "00000000 01 02'k' ffffffff"  # throttle, no brokers, cluster id, controller
                 "02 0003 00 0123456789abcdef0123456789abcdef 00 01 80000000 00"
                 "00")
    assert encode_response(RequestHeader(3, 12, 1, "c"), response)[4:] == expected
