"""Requests exactly as librdkafka 2.16 (confluent-kafka 2.16.1) sent them - captured from a
producer and a consumer talking to this codec over TCP - decoded to what they mean, and
encoded back to the same bytes."""

import uuid

from node.kafka.protocol import RequestHeader, decode_request, encode_request
from node.kafka.protocol.messages import (ApiVersionsRequest, FetchRequest, MetadataRequest,
                                          ProduceRequest)

API_VERSIONS_V3 = bytes.fromhex(
    "0012000300000001000772646b61666b610017636f6e666c75656e742d6b61666b612d707974686f6e16322e"
    "31362e312d72646b61666b612d322e31362e3000")
METADATA_V12 = bytes.fromhex(
    "0003000c00000002000772646b61666b61000200000000000000000000000000000000027400010000")
RECORD_BATCH = bytes.fromhex(  # one record, key "key", value "value", magic 2
    "0000000000000000000000400000000002c877b6cb000000000000000001a215265a24000001a215265a24"
    "ffffffffffffffffffffffffffff000000011c000000066b65790a76616c756500")
PRODUCE_V9 = bytes.fromhex(
    "0000000900000002000772646b61666b610000ffff0000753002027402000000004d") + RECORD_BATCH + \
    bytes.fromhex("000000")
FETCH_V12 = bytes.fromhex(
    "0001000c00000002000772646b61666b6100ffffffff000001f400000001032000000100000000ffffffff02"
    "02740200000000000000010000000000000000ffffffffffffffffffffffff001000000000010100")


def roundtrip(payload: bytes):
    header, request = decode_request(payload)
    assert encode_request(header, request)[4:] == payload
    return header, request


def test_api_versions_v3():
    header, request = roundtrip(API_VERSIONS_V3)
    assert header == RequestHeader(18, 3, 1, "rdkafka")
    assert request == ApiVersionsRequest(client_software_name="confluent-kafka-python",
                                         client_software_version="2.16.1-rdkafka-2.16.0")


def test_metadata_v12_for_one_topic_by_name():
    header, request = roundtrip(METADATA_V12)
    assert header == RequestHeader(3, 12, 2, "rdkafka")
    assert request == MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="t")],
        allow_auto_topic_creation=True, include_topic_authorized_operations=False)


def test_produce_v9_acks_all_one_batch():
    header, request = roundtrip(PRODUCE_V9)
    assert header == RequestHeader(0, 9, 2, "rdkafka")
    assert request == ProduceRequest(
        transactional_id=None, acks=-1, timeout_ms=30000,
        topic_data=[ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=RECORD_BATCH)])])
    records = request.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records[16] == 2  # zero-copy; magic 2


def test_fetch_v12_read_committed_from_offset_0_at_leader_epoch_1():
    header, request = roundtrip(FETCH_V12)
    assert header == RequestHeader(1, 12, 2, "rdkafka")
    assert request == FetchRequest(
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=1,
        session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
        topics=[FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(
            partition=0, current_leader_epoch=1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1048576)])])
