"""Metadata's translation (pure) over a real metadata cache: what a broker answers on its
Kafka listener before and after the controller's first UpdateMetadata.

A broker restarted during a chaos run (confluent-kafka seed 9) answered Metadata on its
Kafka listener before any UpdateMetadata reached it: topic ``chaos`` with
UNKNOWN_TOPIC_OR_PARTITION. librdkafka took the topic as deleted ("partition count
changed from 3 to 0") and failed every queued message, one of which had been written."""
from __future__ import annotations

from types import SimpleNamespace

from node.broker.metadata_cache import MetadataCache
from node.kafka.protocol import RequestHeader, encode_response, messages as m
from node.kafka.translate import TRANSLATIONS
from node.kafka.translate.context import KafkaContext
from node.wire.control import UpdateMetadataPartition
from node.wire.errors import ErrorCode

TOPIC = "chaos"
TOPIC_ID = "2bMx4qgkRvOP_JlZtWupJg"
METADATA_VERSION = 12


def _ask(cache: MetadataCache, topics: list[str] | None):
    """The Kafka Metadata answer a broker with this cache gives (v12), encoded as sent."""
    ctx = KafkaContext(apis=SimpleNamespace(metadata=cache), broker_id=2,
                       cluster_id=lambda: "c1")
    header = RequestHeader(3, METADATA_VERSION, 7, "rdkafka")
    request = m.MetadataRequest(topics=None if topics is None else [
        m.MetadataRequest.MetadataRequestTopic(name=t) for t in topics])
    translation = TRANSLATIONS[3]
    call = translation.request(ctx, header, request)
    body = cache.metadata_response(call.body["topics"])
    response = translation.response(ctx, header, request, body, [], call.state)
    assert encode_response(header, response)        # it goes on the wire as it is
    return response


def _told(cache: MetadataCache) -> None:
    """The controller's first UpdateMetadata to a broker it saw start: every partition."""
    brokers = [[b, f"10.0.0.{b}", 9000 + b, None, {"KAFKA": [f"10.0.0.{b}", 9100 + b]}]
               for b in (0, 1, 2)]
    partitions = [UpdateMetadataPartition(TOPIC, p, p, 4, (0, 1, 2), 7, (0, 1, 2))
                  for p in range(3)]
    cache.update(0, brokers, partitions, {TOPIC: TOPIC_ID})


def test_a_broker_not_yet_told_answers_no_brokers_and_no_topics():
    """Not UNKNOWN_TOPIC_OR_PARTITION for a topic that exists: librdkafka would drop the
    topic's partitions; an answer without brokers and topics makes clients ask again."""
    cache = MetadataCache()
    for topics in ([TOPIC], None, []):
        answer = _ask(cache, topics)
        assert answer.brokers == [] and answer.topics == [], topics
        assert answer.controller_id == -1


def test_once_told_the_topic_has_its_partitions_and_an_unknown_one_is_unknown():
    cache = MetadataCache()
    _told(cache)
    answer = _ask(cache, [TOPIC, "nope"])
    assert [b.node_id for b in answer.brokers] == [0, 1, 2]
    assert [b.port for b in answer.brokers] == [9100, 9101, 9102]    # the Kafka listener
    by_name = {t.name: t for t in answer.topics}
    assert by_name[TOPIC].error_code == 0
    assert [(p.partition_index, p.leader_id, p.error_code)
            for p in by_name[TOPIC].partitions] == [(0, 0, 0), (1, 1, 0), (2, 2, 0)]
    assert by_name["nope"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_name["nope"].partitions == []


def test_a_topic_is_never_answered_without_error_and_without_partitions():
    """Kafka's rule: a known topic has its partitions; one whose last partition is
    deleted is gone (unknown), not an empty topic."""
    cache = MetadataCache()
    _told(cache)
    gone = [UpdateMetadataPartition(TOPIC, p, -2, 5, (), 8, ()) for p in range(3)]
    cache.update(0, [[0, "10.0.0.0", 9000, None, {"KAFKA": ["10.0.0.0", 9100]}]], gone)
    for topics in ([TOPIC], None):
        for t in _ask(cache, topics).topics:
            assert t.error_code != 0 or t.partitions, t
    (only,) = _ask(cache, [TOPIC]).topics
    assert only.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
