"""What a translation may see of the broker: ``KafkaContext``.

One per Kafka listener. ``apis`` is the broker's ``KafkaApis`` (its metadata cache,
replica manager, config, coordinator client); the brokers' Kafka endpoints come from the
metadata cache (UpdateMetadata carries every broker's listeners, as Kafka's does): a
client is told the addresses of the listener it came in by, and brokers without one are
left out of its answers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from node.config import KAFKA_LISTENER


@dataclass
class KafkaContext:
    apis: object                      # node.broker.apis.KafkaApis
    broker_id: int
    cluster_id: Callable[[], str | None]
    listener_name: str = KAFKA_LISTENER

    @property
    def metadata(self):
        return self.apis.metadata

    @property
    def replicas(self):
        return self.apis.replicas

    @property
    def config(self):
        return self.apis.config

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """(host, port) of ``broker_id``'s listener of this name, if it has one."""
        return self.apis.metadata.listeners.get(broker_id, {}).get(self.listener_name)

    def brokers(self) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of every live broker with this listener, by id."""
        out = []
        for broker_id, (_, _, rack) in sorted(self.apis.metadata.brokers.items()):
            address = self.endpoint(broker_id)
            if address is not None:
                out.append((broker_id, address[0], address[1], rack))
        return out
