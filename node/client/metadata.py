"""Cluster metadata: bootstrap parsing, one Metadata response as an immutable snapshot, and
the fetcher that refreshes it over a ``Network``."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from node.wire import protocol
from node.client.network import Network
from node.client.types import BrokerMetadata


def parse_bootstrap(servers) -> list[str]:
    """"h1:p1,h2:p2" (or a list; PLAINTEXT:// and tcp:// prefixes allowed) -> endpoints."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    endpoints = []
    for item in items:
        text = str(item).strip()
        for prefix in ("PLAINTEXT://", "tcp://"):
            text = text.removeprefix(prefix)
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not HOST:PORT")
        endpoints.append(f"tcp://{host}:{int(port)}")
    if not endpoints:
        raise ValueError("bootstrap_servers is empty")
    return endpoints


@dataclass(frozen=True)
class PartitionMetadata:
    topic: str
    partition: int
    leader: int  # -1 = none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: int = 0

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True)
class ClusterMetadata:
    """One Metadata response, indexed. Immutable: a refresh builds a new one."""

    brokers: dict[int, BrokerMetadata] = field(default_factory=dict)
    controller_id: int = -1
    topics: dict[str, dict[int, PartitionMetadata]] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)
    created_s: float = 0.0
    topic_ids: dict[str, str] = field(default_factory=dict)   # name -> id (KIP-516 text)

    def endpoint(self, broker_id: int) -> str | None:
        b = self.brokers.get(broker_id)
        return None if b is None else f"tcp://{b.host}:{b.port}"

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        return self.topics.get(topic, {}).get(partition)

    def leader_endpoint(self, topic: str, partition: int) -> str | None:
        p = self.partition(topic, partition)
        return None if p is None or p.leader < 0 else self.endpoint(p.leader)

    def partition_count(self, topic: str) -> int | None:
        parts = self.topics.get(topic)
        return len(parts) if parts else None

    def available_partitions(self, topic: str) -> list[int]:
        return sorted(p for p, m in self.topics.get(topic, {}).items()
                      if m.leader >= 0 and m.leader in self.brokers)

    def merged(self, newer: "ClusterMetadata", keep_others: bool = True) -> "ClusterMetadata":
        """``newer`` for the topics it covers, this snapshot's for the others (unless
        ``keep_others`` is false). As Kafka's clients since KIP-320, a partition whose
        leader epoch in ``newer`` is older than the one already known keeps the known
        one: a broker with a stale view (a deposed leader that has not heard of the
        election yet) must not send the client back to the old leader, which would
        answer a fetch beyond its shorter log with OFFSET_OUT_OF_RANGE and make a
        consumer reset its position."""
        fresh = {}
        for name, parts in newer.topics.items():
            known = self.topics.get(name, {})
            fresh[name] = {p: (known[p] if p in known and known[p].leader_epoch > m.leader_epoch
                               and known[p].replicas == m.replicas  # else: a new topic
                               else m) for p, m in parts.items()}
        topics = {**self.topics, **fresh} if keep_others else fresh
        errors = {t: c for t, c in {**self.topic_errors, **newer.topic_errors}.items()
                  if t not in newer.topics or t in newer.topic_errors}
        ids = {t: i for t, i in {**self.topic_ids, **newer.topic_ids}.items()
                if t in topics}
        return ClusterMetadata(newer.brokers, newer.controller_id, topics, errors,
                               newer.created_s, ids)


def parse_metadata(body: dict, now_s: float = 0.0) -> ClusterMetadata:
    """A Metadata response body (node.wire.protocol) -> ClusterMetadata; ProtocolError if malformed."""
    try:
        brokers = {int(b[0]): BrokerMetadata(int(b[0]), str(b[1]), int(b[2]), b[3])
                   for b in body["brokers"]}
        topics: dict[str, dict[int, PartitionMetadata]] = {}
        topic_errors: dict[str, int] = {}
        for name, code, partitions in body["topics"]:
            if code:
                topic_errors[name] = int(code)
                continue
            topics[name] = {
                int(p[0]): PartitionMetadata(name, int(p[0]), int(p[2]), int(p[3]),
                                             tuple(p[4]), tuple(p[5]), tuple(p[6]), int(p[1]))
                for p in partitions}
        controller = int(body.get("controller_id", -1))
        topic_ids = {str(t): str(i) for t, i in (body.get("topic_ids") or {}).items()}
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise protocol.ProtocolError(f"malformed Metadata response: {e!r}") from None
    return ClusterMetadata(brokers, controller, topics, topic_errors, now_s, topic_ids)


class MetadataFetcher:
    """Blocking metadata refresh for single-threaded clients (consumer, admin)."""

    def __init__(self, network: Network, bootstrap: list[str], timeout_ms: int):
        self.network = network
        self.bootstrap = bootstrap
        self.timeout_ms = timeout_ms
        self.current = ClusterMetadata()

    def endpoints(self) -> list[str]:
        known = [self.current.endpoint(b) for b in sorted(self.current.brokers)]
        return list(dict.fromkeys([e for e in known if e] + self.bootstrap))

    def refresh(self, topics: list[str] | None, timeout_ms: int | None = None,
                merge: bool = True) -> ClusterMetadata:
        _, response = self.network.request_first(
            self.endpoints(), protocol.ApiKey.METADATA, {"topics": topics},
            timeout_ms=timeout_ms or self.timeout_ms)
        fresh = parse_metadata(response.body, time.monotonic())
        self.current = self.current.merged(fresh, keep_others=merge and topics is not None)
        return self.current
