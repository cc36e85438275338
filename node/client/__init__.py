"""The client library, kafka-python-like: ``Producer``, ``Consumer`` and ``Admin``.

    from node.client import Producer, Consumer, Admin, TopicPartition

Modules: ``types`` (records, metadata tuples, errors), ``metadata`` (bootstrap parsing,
the Metadata snapshot and its fetcher), ``network`` (one thread's channels to the
brokers), ``producer`` (a package: its API, accumulator, sender and futures),
``consumer`` (a package: its API, subscription state, fetcher, offset fetcher,
position validation and group membership; KIP-320's pure decision in
``offset_validation``), ``admin``, ``partitioner``. This package only re-exports; no submodule imports it.
"""
from node.client.admin import Admin
from node.client.consumer import Consumer, LogTruncationException
from node.client.metadata import (ClusterMetadata, MetadataFetcher, PartitionMetadata,
                                  parse_bootstrap, parse_metadata)
from node.client.network import Completion, Network
from node.client.producer import Producer
from node.client.types import (METADATA_STALE_CODES, BatchMetadata, BrokerMetadata,
                               CommitFailedError, ConsumerGroupMetadata, ConsumerRecord,
                               IllegalStateError, InvalidTxnStateError, KafkaError,
                               KafkaTimeoutError, OffsetAndMetadata, ProducerFencedError,
                               RecordMetadata, TopicPartition, TransactionAbortableError,
                               TransactionAbortedError, error)

__all__ = ["Producer", "Consumer", "LogTruncationException", "Admin", "TopicPartition", "RecordMetadata",
           "BatchMetadata", "ConsumerRecord", "PartitionMetadata", "BrokerMetadata",
           "ClusterMetadata", "KafkaTimeoutError", "KafkaError", "Network", "Completion",
           "MetadataFetcher", "METADATA_STALE_CODES", "error", "parse_bootstrap",
           "parse_metadata", "ConsumerGroupMetadata", "OffsetAndMetadata",
           "ProducerFencedError", "InvalidTxnStateError", "TransactionAbortableError",
           "TransactionAbortedError", "CommitFailedError", "IllegalStateError"]
