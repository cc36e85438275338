"""``__consumer_offsets``: Kafka's internal topic of the group coordinator.

Created on first use (a FindCoordinator for a group, or a group API, finding no such
topic in the metadata cache), through the same path as CreateTopics
(``node.broker.apis.admin.topics.create_topics``), as Kafka's AutoTopicCreationManager
does: ``offsets.topic.num.partitions`` partitions, a replication factor of
``offsets.topic.replication.factor`` or the number of live brokers if fewer (logged),
``cleanup.policy=compact`` and ``segment.bytes=offsets.topic.segment.bytes``.

It is internal, as in Kafka: Metadata marks it ``is_internal``, a Produce to it gets
INVALID_TOPIC_EXCEPTION ("Cannot append to internal topic", Kafka's ReplicaManager) and
DeleteRecords likewise. DeleteTopics refuses it too (INVALID_TOPIC_EXCEPTION): Kafka 4
lets an admin delete it, losing every group's offsets; here that is not offered.

Which partition holds a group: ``node.core.groups.hashing.partition_for`` (Kafka's rule,
so a dump places groups where Kafka would).

The creation itself is ``node.broker.internal_topics.InternalTopicCreator``'s.
"""
from __future__ import annotations

from node.broker.internal_topics import CREATE_RETRY_MS, InternalTopicCreator
from node.core.groups.hashing import partition_for
from node.wire.protocol import INTERNAL_TOPICS, OFFSETS_TOPIC

__all__ = ["CREATE_RETRY_MS", "INTERNAL_TOPICS", "OFFSETS_TOPIC", "OffsetsTopicCreator",
           "is_internal", "partition_for"]


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def topic_configs(config, *, compact: bool = True) -> dict[str, str]:
    """The topic overrides ``__consumer_offsets`` is created with."""
    out = {"segment.bytes": str(config.offsets_topic_segment_bytes)}
    if compact:
        out["cleanup.policy"] = "compact"
    else:
        # TODO(cbroker): once cleanup.policy=compact is accepted (branch cbroker's
        # validate_topic_config), this fallback goes. Meanwhile offsets are never
        # deleted by time (retention.ms=-1): the topic grows, nothing is lost.
        out["retention.ms"] = "-1"
    return out


class OffsetsTopicCreator(InternalTopicCreator):
    """Creates ``__consumer_offsets`` once (``offsets.topic.*`` keys)."""

    def __init__(self, zk, config, metadata) -> None:
        super().__init__(
            zk, config, metadata, OFFSETS_TOPIC,
            num_partitions=lambda: config.offsets_topic_num_partitions,
            replication_factor=lambda: config.offsets_topic_replication_factor,
            overrides=lambda compact, _rf: topic_configs(config, compact=compact),
            rf_key="offsets.topic.replication.factor")
