"""The group coordinator's runtime on a broker: one ``GroupShard`` (the pure core,
``node.core.groups.shard``) per ``__consumer_offsets`` partition this broker leads.

Loading, unloading, acks=all appends with replies after commit, failure mapping and
timers are the shared ``node.broker.shard_runtime.ShardRuntime``'s; this module adds the
group side: the shard and its config (``offsets.load.buffer.size``,
``offsets.commit.timeout.ms``), Kafka's error bodies of the group APIs, and the topics
the shards assign: ``metadata_changed`` is passed the topics (name -> (id, partitions))
whenever the metadata cache's change, and once a partition has loaded; and transactions'
markers (``transaction_completed``): a shard's TxnOffsetCommit records are written as the
producer's transactional batch (the shared runtime's ``Result.producer``), and markers
are replayed at load (``GroupShard.replay_marker``).
"""
from __future__ import annotations

from node.broker.groups import bodies
from node.broker.groups.offsets_topic import OFFSETS_TOPIC, OffsetsTopicCreator, partition_for
from node.broker.loop import now_ms
from node.broker.shard_runtime import Append, Hosted, ShardRuntime, config_from_broker
from node.core.groups.config import GroupConfig
from node.core.groups.shard import GroupShard

__all__ = ["Append", "GroupRuntime", "group_config"]


def group_config(config) -> GroupConfig:
    """The shard's ``GroupConfig`` from the broker's keys."""
    return config_from_broker(GroupConfig, config)


class GroupRuntime(ShardRuntime):
    topic = OFFSETS_TOPIC
    what = "group coordinator"

    def __init__(self, apis) -> None:
        super().__init__(apis, OffsetsTopicCreator(apis.zk, apis.config, apis.metadata))
        self._group_config = None
        self._topics: dict[str, tuple[str, int]] | None = None

    @property
    def group_config(self) -> GroupConfig:
        if self._group_config is None:
            self._group_config = group_config(self.config)
        return self._group_config

    @property
    def load_buffer_size(self) -> int:
        return self.config.offsets_load_buffer_size

    @property
    def commit_timeout_ms(self) -> int:
        return self.config.offsets_commit_timeout_ms

    def new_shard(self, partition: int, leader_epoch: int) -> GroupShard:
        return GroupShard(partition, self.group_config)

    def error_body(self, api_key: int, body: dict, code: int) -> dict:
        return bodies.error_body(api_key, body, code)

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions())

    # ================================================================ transactions

    def transaction_completed(self, partition: int, producer_id: int, commit: bool) -> None:
        """A producer's marker is committed on ``__consumer_offsets``-``partition``
        (WriteTxnMarkers, ``node.broker.apis.txn_markers``): its pending transactional
        offsets there become the committed ones (COMMIT) or are dropped (ABORT), Kafka's
        onTransactionCompleted. A partition still loading replays the marker itself; one
        not led here has nothing to change."""
        hosted = self.hosted.get(partition)
        if hosted is None or hosted.gone or hosted.loading:
            return
        self._apply(hosted, hosted.shard.transaction_completed(now_ms(), producer_id, commit))

    # ================================================================ metadata

    def loaded_hook(self, hosted: Hosted) -> None:
        self._topics = None
        self._notify_metadata(hosted)

    def metadata_updated(self) -> None:
        """After an UpdateMetadata: leadership and the topics the shards assign."""
        self.sync()
        topics = self._current_topics()
        if topics == self._topics:
            return
        self._topics = topics
        for hosted in list(self.hosted.values()):
            self._notify_metadata(hosted)

    def _current_topics(self) -> dict[str, tuple[str, int]]:
        md = self.metadata
        return {name: (md.topic_ids.get(name, ""), len(parts))
                for name, parts in md.topics.items()}

    def _notify_metadata(self, hosted: Hosted) -> None:
        if hosted.gone or hosted.loading:
            return
        if self._topics is None:
            self._topics = self._current_topics()
        self._apply(hosted, hosted.shard.metadata_changed(dict(self._topics)))
