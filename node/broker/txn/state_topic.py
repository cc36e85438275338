"""``__transaction_state``: Kafka's internal topic of the transaction coordinator.

Created on first use (a FindCoordinator of key type TRANSACTION, or a transaction API,
finding no such topic in the metadata cache) by ``InternalTopicCreator``, as Kafka:
``transaction.state.log.num.partitions`` partitions, a replication factor of
``transaction.state.log.replication.factor`` or the number of live brokers if fewer,
``cleanup.policy=compact``, ``min.insync.replicas=transaction.state.log.min.isr``
(capped at the replication factor it gets, so a one-broker cluster can still write) and
``segment.bytes=transaction.state.log.segment.bytes``. It is internal
(``node.wire.protocol.INTERNAL_TOPICS``): clients may not produce to it nor delete it.

Which partition holds a transactional id: Kafka's ``abs(hashCode(id)) % partitions``
(``node.core.groups.hashing.partition_for``, the same rule as a group's).
"""
from __future__ import annotations

from node.broker.internal_topics import InternalTopicCreator
from node.core.groups.hashing import partition_for
from node.wire.protocol import TRANSACTION_STATE_TOPIC

__all__ = ["TRANSACTION_STATE_TOPIC", "TxnStateTopicCreator", "partition_for", "topic_configs"]


def topic_configs(config, replication_factor: int, *, compact: bool = True) -> dict[str, str]:
    """The topic overrides ``__transaction_state`` is created with."""
    min_isr = max(1, min(config.transaction_state_log_min_isr, replication_factor))
    out = {"segment.bytes": str(config.transaction_state_log_segment_bytes),
           "min.insync.replicas": str(min_isr)}
    if compact:
        out["cleanup.policy"] = "compact"
    else:
        out["retention.ms"] = "-1"       # never deleted by time (see internal_topics)
    return out


class TxnStateTopicCreator(InternalTopicCreator):
    """Creates ``__transaction_state`` once (``transaction.state.log.*`` keys)."""

    def __init__(self, zk, config, metadata) -> None:
        super().__init__(
            zk, config, metadata, TRANSACTION_STATE_TOPIC,
            num_partitions=lambda: config.transaction_state_log_num_partitions,
            replication_factor=lambda: config.transaction_state_log_replication_factor,
            overrides=lambda compact, rf: topic_configs(config, rf, compact=compact),
            rf_key="transaction.state.log.replication.factor")
