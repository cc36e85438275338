"""ListOffsets (v1-7) and OffsetForLeaderEpoch (v0-4) through their native handlers
(``node.broker.apis.offsets``). InitProducerId is ``node.kafka.translate.txn``'s.

- ListOffsets: earliest (-2), latest (-1: the HW, or the last stable offset for
  isolation_level READ_COMMITTED), max timestamp (-3, KIP-734, v7+) and by time;
  the current leader epoch is checked (KIP-320) and the leader epoch answered (v4+).
  Every request is a consumer's (replica id -1), whatever id it names.
- OffsetForLeaderEpoch: the leader's end offset of an epoch, what a consumer asks after
  a leader change to learn whether it must truncate (KIP-320).
"""
from __future__ import annotations

from node.kafka.protocol.messages import ListOffsetsResponse, OffsetForLeaderEpochResponse
from node.kafka.translate.registry import NativeCall, TranslationBase, register
from node.wire import protocol

MAX_TIMESTAMP_FROM_VERSION = 7
LEADER_EPOCH_FROM_VERSION = 4


def _grouped(entries, make):
    """Native answer entries [topic, partition, ...] -> {topic: [made, ...]} in order."""
    topics: dict[str, list] = {}
    for entry in entries:
        topics.setdefault(entry[0], []).append(make(entry))
    return topics


class ListOffsets(TranslationBase):
    api_key = 2
    versions = (1, MAX_TIMESTAMP_FROM_VERSION)

    def request(self, ctx, header, request):
        entries = [[topic.name, part.partition_index, part.timestamp, part.current_leader_epoch]
                   for topic in request.topics for part in topic.partitions]
        return NativeCall(protocol.ApiKey.LIST_OFFSETS,
                          {"replica_id": protocol.CONSUMER_REPLICA_ID, "partitions": entries,
                           "isolation_level": request.isolation_level})

    def response(self, ctx, header, request, body, frames):
        with_epoch = header.api_version >= LEADER_EPOCH_FROM_VERSION

        def make(entry):
            _, partition, error, timestamp, offset, epoch = entry
            return ListOffsetsResponse.ListOffsetsPartitionResponse(
                partition_index=partition, error_code=error, timestamp=timestamp,
                offset=offset, leader_epoch=epoch if with_epoch else -1)
        topics = _grouped(body["partitions"], make)
        return ListOffsetsResponse(throttle_time_ms=0, topics=[
            ListOffsetsResponse.ListOffsetsTopicResponse(name=name, partitions=parts)
            for name, parts in topics.items()])

    def error(self, ctx, header, request, code, message):
        return ListOffsetsResponse(topics=[ListOffsetsResponse.ListOffsetsTopicResponse(
            name=topic.name, partitions=[ListOffsetsResponse.ListOffsetsPartitionResponse(
                partition_index=part.partition_index, error_code=code)
                for part in topic.partitions]) for topic in request.topics])


class OffsetForLeaderEpoch(TranslationBase):
    api_key = 23
    versions = (0, 4)

    def request(self, ctx, header, request):
        entries = [[topic.topic, part.partition, part.current_leader_epoch, part.leader_epoch]
                   for topic in request.topics for part in topic.partitions]
        return NativeCall(protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH,
                          {"replica_id": protocol.CONSUMER_REPLICA_ID, "partitions": entries})

    def response(self, ctx, header, request, body, frames):
        def make(entry):
            _, partition, error, epoch, end_offset = entry
            return OffsetForLeaderEpochResponse.EpochEndOffset(
                error_code=error, partition=partition, leader_epoch=epoch, end_offset=end_offset)
        topics = _grouped(body["partitions"], make)
        return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=[
            OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=name, partitions=parts)
            for name, parts in topics.items()])

    def error(self, ctx, header, request, code, message):
        return OffsetForLeaderEpochResponse(topics=[
            OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(
                topic=topic.topic, partitions=[OffsetForLeaderEpochResponse.EpochEndOffset(
                    error_code=code, partition=part.partition)
                    for part in topic.partitions]) for topic in request.topics])


register(ListOffsets())
register(OffsetForLeaderEpoch())
