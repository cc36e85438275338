"""Topic configs that change while the broker runs (Kafka's dynamic topic configs).

The broker reads ``/config/topics/T`` when it opens a partition of T and leaves a watch
on it; when an admin changes it (IncrementalAlterConfigs, CreateTopics of a topic whose
config node was left behind), the watch fires on kazoo's thread, the change is posted
to the loop, read again (arming the next watch) and applied to every hosted partition
of T, as Kafka's TopicConfigHandler does:

- ``min.insync.replicas``: the replica core's config (the next acks=all produce);
- ``compression.type``: what Kafka fetches get;
- the log's ``retention.*``, ``flush.*``, ``max.message.bytes`` and ``segment.ms``: the
  log's config at once. ``segment.bytes``, ``segment.index.bytes`` and
  ``index.interval.bytes`` size segments and indexes as they are made and apply when
  the log is next opened (a broker restart);
- ``unclean.leader.election.enable`` is the controller's (it watches the same node).

One watcher callable per topic, so kazoo never holds two for one path.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable

from kazoo.exceptions import NoNodeError

from node.broker.failures import COORDINATOR_ERRORS
from node.config import ConfigError, topic_log_config, topic_setting
from node.wire import zkdata

logger = logging.getLogger("node.broker.server")

# LogConfig fields that size what a segment preallocates and indexes: kept as the log
# was opened with.
SIZED_AT_OPEN = ("segment_bytes", "index_size_max_bytes", "index_interval_bytes")


class TopicConfigs:
    def __init__(self, replicas) -> None:
        self.replicas = replicas     # the ReplicaManager: zk, loop, config, partitions
        self._watchers: dict[str, Callable] = {}

    def overrides(self, topic: str) -> dict[str, str]:
        """The topic's overrides, leaving a watch for the next change."""
        zk = self.replicas.zk
        watcher = self._watchers.get(topic)
        if watcher is None:
            watcher = self._watchers[topic] = self._watcher(topic)
        try:
            data, _ = zk.get(zkdata.topic_config_path(topic), watch=watcher)  # bounded
            return zkdata.decode_topic_config(topic, data)
        except NoNodeError:
            return {}
        except COORDINATOR_ERRORS as e:  # garbled or unreadable: the broker's defaults
            logger.error("ignoring the topic config of %s: %s", topic, e)
            return {}

    def _watcher(self, topic: str) -> Callable:
        loop = self.replicas.loop

        def fired(event) -> None:      # kazoo's thread
            loop.post(lambda: self.changed(topic))
        return fired

    def changed(self, topic: str) -> None:
        """On the loop: apply the topic's new overrides to its hosted partitions."""
        parts = [p for (t, _), p in self.replicas.partitions.items() if t == topic]
        if not parts:
            self._watchers.pop(topic, None)   # armed again when a partition opens
            return
        overrides = self.overrides(topic)
        config = self.replicas.config
        try:
            log_config = topic_log_config(config, overrides)
            min_isr = topic_setting(config, overrides, "min.insync.replicas")
            compression = topic_setting(config, overrides, "compression.type")
        except ConfigError as e:
            logger.error("ignoring the new topic config of %s: %s", topic, e)
            return
        for part in parts:
            kept = {f: getattr(part.log.config, f) for f in SIZED_AT_OPEN}
            part.log.config = dataclasses.replace(log_config, **kept)
            part.core.config = dataclasses.replace(part.core.config,
                                                   min_insync_replicas=min_isr)
            part.compression_type = compression
        logger.info("topic %s: configs now %s", topic, overrides or "the broker's")
