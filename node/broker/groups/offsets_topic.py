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
"""
from __future__ import annotations

import logging
import time

from node.core.groups.hashing import partition_for
from node.wire.errors import ErrorCode
from node.wire.protocol import INTERNAL_TOPICS, OFFSETS_TOPIC

logger = logging.getLogger("node.broker.server")

__all__ = ["INTERNAL_TOPICS", "OFFSETS_TOPIC", "OffsetsTopicCreator", "is_internal",
           "partition_for"]
# A creation is asked again only this long after the last attempt (the metadata cache
# shows a new topic within a few hundred ms; until then FindCoordinator answers
# COORDINATOR_NOT_AVAILABLE and clients retry).
CREATE_RETRY_MS = 2000


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


class OffsetsTopicCreator:
    """Creates ``__consumer_offsets`` once (retried after CREATE_RETRY_MS while the
    metadata cache does not show it)."""

    def __init__(self, zk, config, metadata) -> None:
        self.zk = zk
        self.config = config
        self.metadata = metadata
        self._last_attempt = -CREATE_RETRY_MS * 1000

    def exists(self) -> bool:
        return OFFSETS_TOPIC in self.metadata.topics

    def partitions(self) -> int:
        return len(self.metadata.topics.get(OFFSETS_TOPIC, ()))

    def ensure(self) -> None:
        """Create the topic if the cache does not show it (at most every
        CREATE_RETRY_MS); blocking coordinator calls on the loop, as CreateTopics'."""
        if self.exists():
            return
        now = int(time.monotonic() * 1000)
        if now - self._last_attempt < CREATE_RETRY_MS:
            return
        self._last_attempt = now
        from node.broker.apis.admin.common import _live_brokers
        from node.broker.apis.admin.topics import create_topics
        wanted = self.config.offsets_topic_replication_factor
        live = len(_live_brokers(self.zk))
        rf = max(1, min(wanted, live))
        if rf < wanted:
            logger.warning("creating %s with replication factor %d: "
                           "offsets.topic.replication.factor is %d but only %d brokers "
                           "are live", OFFSETS_TOPIC, rf, wanted, live)
        partitions = self.config.offsets_topic_num_partitions
        for compact in (True, False):
            body = {"topics": [[OFFSETS_TOPIC, partitions, rf, None,
                                topic_configs(self.config, compact=compact)]]}
            _, code, message = create_topics(body, self.zk, self.config)["topics"][0]
            if code == ErrorCode.INVALID_CONFIG and compact:
                logger.warning("cleanup.policy=compact is not accepted (%s): creating %s "
                               "without compaction, retention.ms=-1", message, OFFSETS_TOPIC)
                continue
            break
        if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            if code == ErrorCode.NONE:
                logger.info("created %s: %d partitions, replication factor %d",
                            OFFSETS_TOPIC, partitions, rf)
        else:
            logger.warning("cannot create %s: %s (%s)", OFFSETS_TOPIC,
                           ErrorCode(code).name if code in ErrorCode._value2member_map_
                           else code, message)
