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

Dynamic broker configs (``/config/brokers/<id>`` over ``/config/brokers/<default>``, both
watched the same way) are the defaults of topic configs (log.retention.ms for
retention.ms ...): they sit between a topic's overrides and the broker's
server.properties, and a change re-applies every hosted topic.

One watcher callable per znode, so kazoo never holds two for one path.

A change that cannot be read (the coordinator unreachable, as when this broker is cut
from it: kazoo fires the watches as the session goes) changes nothing: the configs in
force stay, and the read is tried again every ``REREAD_MS`` while the topic is hosted
(which also arms the watch again). Falling back to the broker's defaults there would
drop a topic's ``min.insync.replicas=2`` to 1 exactly when the leader is isolated, and
let it acknowledge writes alone. A garbled node is logged and also changes nothing.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable

from kazoo.exceptions import NoNodeError

from node.broker.apis.admin.configs import DYNAMIC_BROKER_KEYS
from node.broker.failures import COORDINATOR_ERRORS
from node.broker.loop import now_ms
from node.config import ConfigError, topic_log_config, topic_setting
from node.wire import zkdata
from node.wire.zkdata import ZkDataError

logger = logging.getLogger("node.broker.server")

# LogConfig fields that size what a segment preallocates and indexes: kept as the log
# was opened with.
SIZED_AT_OPEN = ("segment_bytes", "index_size_max_bytes", "index_interval_bytes")
# How soon a change that could not be read (coordinator unreachable) is read again.
REREAD_MS = 1_000


class Unreadable(Exception):
    """A config node could not be read now (the coordinator is unreachable)."""


class TopicConfigs:
    def __init__(self, replicas) -> None:
        self.replicas = replicas     # the ReplicaManager: zk, loop, config, partitions
        self._watchers: dict[str, Callable] = {}
        # The dynamic broker configs as topic keys (cluster-wide, then this broker's);
        # None until first read, read again when their watch fires.
        self._broker_layer: dict[str, str] | None = None
        self._rereads: set[str] = set()   # topics ("" = the broker layer) read again soon

    def overrides(self, topic: str) -> dict[str, str]:
        """The topic's overrides over the dynamic broker configs, leaving watches for
        the next change. When a partition opens: what cannot be read counts as absent
        (the broker's defaults), as before configs were watched."""
        try:
            return self._overrides(topic)
        except Unreadable as e:
            logger.error("opening with the broker's defaults for %s: %s", topic, e)
            return dict(self._broker_layer or {})

    def _overrides(self, topic: str) -> dict[str, str]:
        """Raises ``Unreadable`` when a layer cannot be read now."""
        if self._broker_layer is None:
            self._broker_layer = self._read_broker_layer()
        return {**self._broker_layer,
                **self._read(zkdata.topic_config_path(topic), topic,
                             lambda: self.changed(topic))}

    def _read(self, path: str, name: str, on_change: Callable[[], None]) -> dict[str, str]:
        watcher = self._watchers.get(path)
        if watcher is None:
            watcher = self._watchers[path] = self._watcher(on_change)
        try:
            data, _ = self.replicas.zk.get(path, watch=watcher)  # bounded (GuardedZk)
            return zkdata.decode_topic_config(name, data)
        except NoNodeError:     # a topic's node is made with the topic
            return {}
        except ZkDataError as e:        # garbled: the same bytes next time, no retry
            logger.error("ignoring the config of %s: %s", name, e)
            return {}
        except COORDINATOR_ERRORS as e:
            raise Unreadable(f"config of {name}: {e}") from e

    def _read_broker_layer(self) -> dict[str, str]:
        """The dynamic broker configs as topic keys. An exists-watch on each node: it
        fires when the node is made, changed or deleted."""
        zk = self.replicas.zk
        layer: dict[str, str] = {}
        for who in ("", self.replicas.broker_id):       # this broker's over the default
            path = zkdata.broker_config_path(who)
            watcher = self._watchers.get(path)
            if watcher is None:
                watcher = self._watchers[path] = self._watcher(self.brokers_changed)
            try:
                if zk.exists(path, watch=watcher) is None:
                    continue
                values = zkdata.decode_topic_config(path, zk.get(path)[0])
            except NoNodeError:
                continue
            except ZkDataError as e:
                logger.error("ignoring the dynamic broker configs of %s: %s", path, e)
                continue
            except COORDINATOR_ERRORS as e:
                raise Unreadable(f"dynamic broker configs of {path}: {e}") from e
            layer.update({DYNAMIC_BROKER_KEYS[k]: v for k, v in values.items()
                          if k in DYNAMIC_BROKER_KEYS})
        return layer

    def _watcher(self, on_change: Callable[[], None]) -> Callable:
        loop = self.replicas.loop

        def fired(event) -> None:      # kazoo's thread
            loop.post(on_change)
        return fired

    def brokers_changed(self) -> None:
        """On the loop: a dynamic broker config changed; every hosted topic again."""
        try:
            self._broker_layer = self._read_broker_layer()
        except Unreadable as e:
            self._read_again("", self.brokers_changed, e)
            return
        for topic in sorted({t for t, _ in self.replicas.partitions}):
            self.changed(topic)

    def _read_again(self, key: str, read: Callable[[], None], error: Exception) -> None:
        """Keep the configs in force; one read again after ``REREAD_MS`` per key."""
        if key in self._rereads:
            return
        logger.warning("keeping the configs in force, reading again in %d ms: %s",
                       REREAD_MS, error)
        self._rereads.add(key)

        def again() -> None:
            self._rereads.discard(key)
            read()
        self.replicas.loop.call_later(REREAD_MS, again)

    def changed(self, topic: str) -> None:
        """On the loop: apply the topic's new overrides to its hosted partitions."""
        parts = [p for (t, _), p in self.replicas.partitions.items() if t == topic]
        if not parts:
            # armed again when a partition opens
            self._watchers.pop(zkdata.topic_config_path(topic), None)
            return
        try:
            overrides = self._overrides(topic)
        except Unreadable as e:
            self._read_again(topic, lambda: self.changed(topic), e)
            return
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
            part.compression_type = compression
            # Writes waiting for the HW are answered, or let through, under the new value.
            self.replicas.apply_effects(part, part.core.set_min_insync_replicas(
                min_isr, now_ms=now_ms(), log=part.view))
        logger.info("topic %s: configs now %s", topic, overrides or "the broker's")
