"""The coordinators' internal topics (``__consumer_offsets``, ``__transaction_state``):
created on first use (a FindCoordinator or a coordinator API finding no such topic in
the metadata cache), through the same path as CreateTopics
(``node.broker.apis.admin.topics.create_topics``), as Kafka's AutoTopicCreationManager
does: the configured partition count, the configured replication factor or the number of
live brokers if fewer (logged), ``cleanup.policy=compact`` and the topic's overrides.

Until the cleaner accepts ``cleanup.policy=compact`` everywhere, a refusal
(INVALID_CONFIG) falls back to ``retention.ms=-1``: nothing is ever deleted by time.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from node.wire.errors import ErrorCode

logger = logging.getLogger("node.broker.server")

# A creation is asked again only this long after the last attempt (the metadata cache
# shows a new topic within a few hundred ms; until then FindCoordinator answers
# COORDINATOR_NOT_AVAILABLE and clients retry).
CREATE_RETRY_MS = 2000


class InternalTopicCreator:
    """Creates one internal topic once (retried after CREATE_RETRY_MS while the metadata
    cache does not show it). ``num_partitions``/``replication_factor`` read the broker's
    keys; ``overrides(compact, replication_factor)`` gives the topic's configs."""

    def __init__(self, zk, config, metadata, topic: str, *,
                 num_partitions: Callable[[], int], replication_factor: Callable[[], int],
                 overrides: Callable[[bool, int], dict[str, str]], rf_key: str) -> None:
        self.zk = zk
        self.config = config
        self.metadata = metadata
        self.topic = topic
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.overrides = overrides
        self.rf_key = rf_key
        self._last_attempt = -CREATE_RETRY_MS * 1000

    def exists(self) -> bool:
        return self.topic in self.metadata.topics

    def partitions(self) -> int:
        return len(self.metadata.topics.get(self.topic, ()))

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
        wanted = self.replication_factor()
        live = len(_live_brokers(self.zk))
        rf = max(1, min(wanted, live))
        if rf < wanted:
            logger.warning("creating %s with replication factor %d: %s is %d but only %d "
                           "brokers are live", self.topic, rf, self.rf_key, wanted, live)
        partitions = self.num_partitions()
        for compact in (True, False):
            body = {"topics": [[self.topic, partitions, rf, None, self.overrides(compact, rf)]]}
            _, code, message = create_topics(body, self.zk, self.config)["topics"][0]
            if code == ErrorCode.INVALID_CONFIG and compact:
                logger.warning("cleanup.policy=compact is not accepted (%s): creating %s "
                               "without compaction, retention.ms=-1", message, self.topic)
                continue
            break
        if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            if code == ErrorCode.NONE:
                logger.info("created %s: %d partitions, replication factor %d",
                            self.topic, partitions, rf)
        else:
            logger.warning("cannot create %s: %s (%s)", self.topic,
                           ErrorCode(code).name if code in ErrorCode._value2member_map_
                           else code, message)
