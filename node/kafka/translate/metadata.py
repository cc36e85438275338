"""Metadata (to v12) through the native handler (``node.broker.apis.metadata``).

- Brokers are the live brokers' KAFKA endpoints (the listener the request came by, as
  Kafka answers); a broker without one is left out, and a partition it leads is
  LEADER_NOT_AVAILABLE with leader -1 (Kafka's answer when the leader lacks the listener).
- The cluster id is the broker's; the controller id, leader epochs, replicas, ISR and
  offline replicas the native answer's (the controller's last UpdateMetadata).
- Topic ids (KIP-516, v10+) come with the native answer; a topic asked for by id (v10+,
  name null) is looked up in the metadata cache, and an unknown id is UNKNOWN_TOPIC_ID.
- No topic is created by Metadata (allow_auto_topic_creation is accepted and, as the
  native Metadata does, ignored): an unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
- Version 0's empty topic list means every topic (v1+: null does).
- A broker the controller has not told anything yet (its metadata cache not
  ``initialized``: just started, no UpdateMetadata) answers no brokers and no topics, as a
  starting Kafka broker does, never UNKNOWN_TOPIC_OR_PARTITION for a topic that exists:
  librdkafka takes a topic-level unknown topic for one it has known longer than
  topic.metadata.propagation.max.ms as deleted (partition count to 0, every queued
  message failed), while an answer without brokers and topics makes it ask again
  (rdkafka_metadata.c), and the Java client, kafka-python and aiokafka ignore an answer
  without brokers.
"""
from __future__ import annotations

import uuid

from node.kafka.protocol.messages import MetadataResponse
from node.kafka.translate.registry import NativeCall, TranslationBase, register
from node.wire import protocol
from node.wire.errors import ErrorCode
from node.wire.zkdata import topic_id_text, topic_id_uuid

ZERO_UUID = uuid.UUID(int=0)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648     # Kafka's default: not asked for
NULL_NAMES_FROM_VERSION = 12


def topic_uuid(text: str | None) -> uuid.UUID:
    if text is None:
        return ZERO_UUID
    try:
        return topic_id_uuid(text)
    except ValueError:
        return ZERO_UUID


class Metadata(TranslationBase):
    api_key = 3
    versions = (0, 12)

    def request(self, ctx, header, request):
        names, unknown_ids = None, []
        if request.topics is not None and (request.topics or header.api_version > 0):
            names = []
            for topic in request.topics:
                if topic.name is not None:
                    names.append(topic.name)
                    continue
                name = ctx.metadata.topic_names.get(topic_id_text(topic.topic_id))
                if name is None:
                    unknown_ids.append(topic.topic_id)
                else:
                    names.append(name)
        return NativeCall(protocol.ApiKey.METADATA, {"topics": names},
                          state=unknown_ids or ())

    def response(self, ctx, header, request, body, frames, state=()):
        if not ctx.metadata.initialized:
            return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=ctx.cluster_id(),
                                    controller_id=-1, topics=[],
                                    cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
        brokers = ctx.brokers()
        with_listener = {b[0] for b in brokers}
        ids = body.get("topic_ids", {})
        topics = []
        for name, error, partitions in body["topics"]:
            out = []
            for (index, p_error, leader, leader_epoch, replicas, isr, offline) in partitions:
                if leader >= 0 and leader not in with_listener:
                    p_error, leader = ErrorCode.LEADER_NOT_AVAILABLE, -1
                out.append(MetadataResponse.MetadataResponsePartition(
                    error_code=p_error, partition_index=index, leader_id=leader,
                    leader_epoch=leader_epoch, replica_nodes=replicas, isr_nodes=isr,
                    offline_replicas=offline))
            topics.append(MetadataResponse.MetadataResponseTopic(
                error_code=error, name=name, topic_id=topic_uuid(ids.get(name)),
                is_internal=name in protocol.INTERNAL_TOPICS, partitions=out,
                topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
        for topic_id in state:      # names are nullable from v12 only
            topics.append(MetadataResponse.MetadataResponseTopic(
                error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                name=None if header.api_version >= NULL_NAMES_FROM_VERSION else "",
                topic_id=topic_id,
                partitions=[], topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
        return MetadataResponse(
            throttle_time_ms=0,
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=i, host=h, port=p, rack=r)
                     for i, h, p, r in brokers],
            cluster_id=ctx.cluster_id(), controller_id=body.get("controller_id", -1),
            topics=topics, cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)

    def error(self, ctx, header, request, code, message):
        topics = [MetadataResponse.MetadataResponseTopic(
            error_code=code, name=t.name, topic_id=t.topic_id, partitions=[],
            topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
            for t in (request.topics or ())]
        return MetadataResponse(brokers=[], cluster_id=ctx.cluster_id(), controller_id=-1,
                                topics=topics)


register(Metadata())
