"""The broker's metadata cache, filled by the controller's UpdateMetadata (Kafka's way).

Every broker answers Metadata from this cache, never from the coordinator: what a client
sees is what the controller last told this broker. An UpdateMetadata carries the live
brokers (replacing the known set) and partition states (upserted); a partition whose
leader is ``LEADER_DURING_DELETE`` (-2, Kafka's marker) is removed, and a topic without
partitions left disappears. Brokers carry their other listeners (the Kafka-protocol one)
and topics their ids (KIP-516) when the controller sends them.

Until its first UpdateMetadata (a broker just started, which the controller has not told
anything yet) the cache is not ``initialized``: it knows no broker and no topic, and its
"unknown topic" would be wrong (the topic exists; this broker has not heard of it). The
Kafka listener then answers Metadata as a starting Kafka broker does, with no brokers and
no topics, which clients take as "ask again" (``node.kafka.translate.metadata``). The
controller's first UpdateMetadata to a broker it has seen start carries every partition.
"""
from __future__ import annotations

from dataclasses import dataclass

from node.wire.errors import ErrorCode
from node.wire.control import UpdateMetadataPartition
from node.wire.protocol import NO_LEADER

LEADER_DURING_DELETE = -2
@dataclass(frozen=True)
class PartitionMetadata:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]


class MetadataCache:
    def __init__(self) -> None:
        self.brokers: dict[int, tuple[str, int, str | None]] = {}   # id -> host, port, rack
        # id -> {listener name: (host, port)} of its listeners other than the native one
        self.listeners: dict[int, dict[str, tuple[str, int]]] = {}
        self.topics: dict[str, dict[int, PartitionMetadata]] = {}
        self.topic_ids: dict[str, str] = {}       # name -> id (KIP-516, Kafka's text form)
        self.topic_names: dict[str, str] = {}     # id -> name
        self.controller_id = -1
        self.initialized = False      # an UpdateMetadata has been applied

    def update(self, controller_id: int, brokers: list,
               partitions: list[UpdateMetadataPartition],
               topic_ids: dict[str, str] | None = None) -> None:
        """Apply a validated UpdateMetadata body."""
        self.initialized = True
        self.controller_id = controller_id
        self.brokers = {b[0]: (b[1], b[2], b[3]) for b in brokers}
        self.listeners = {b[0]: {name: (a[0], a[1]) for name, a in b[4].items()}
                          for b in brokers if len(b) > 4}
        for topic, topic_id in (topic_ids or {}).items():
            old = self.topic_ids.get(topic)
            if old is not None and old != topic_id:
                self.topic_names.pop(old, None)
            self.topic_ids[topic] = topic_id
            self.topic_names[topic_id] = topic
        for e in partitions:
            if e.leader == LEADER_DURING_DELETE:
                parts = self.topics.get(e.topic)
                if parts is not None:
                    parts.pop(e.partition, None)
                    if not parts:
                        del self.topics[e.topic]
                        self.topic_names.pop(self.topic_ids.pop(e.topic, None), None)
                continue
            self.topics.setdefault(e.topic, {})[e.partition] = PartitionMetadata(
                e.leader, e.leader_epoch, e.isr, e.zk_version, e.replicas,
                e.offline_replicas)

    def endpoint(self, broker_id: int) -> str | None:
        info = self.brokers.get(broker_id)
        return None if info is None else f"tcp://{info[0]}:{info[1]}"

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        return self.topics.get(topic, {}).get(partition)

    def metadata_response(self, topics: list[str] | None) -> dict:
        names = sorted(self.topics) if topics is None else topics
        out = []
        for name in names:
            parts = self.topics.get(name)
            if parts is None:
                out.append([name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []])
                continue
            entries = []
            for p in sorted(parts):
                m = parts[p]
                error = ErrorCode.LEADER_NOT_AVAILABLE if m.leader == NO_LEADER else 0
                entries.append([p, error, m.leader, m.leader_epoch, list(m.replicas),
                                list(m.isr), list(m.offline_replicas)])
            out.append([name, 0, entries])
        return {"brokers": [[i, h, p, r] for i, (h, p, r) in sorted(self.brokers.items())],
                "controller_id": self.controller_id, "topics": out,
                "topic_ids": {name: self.topic_ids[name] for name in names
                              if name in self.topic_ids and name in self.topics}}
