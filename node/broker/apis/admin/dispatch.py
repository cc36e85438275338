"""The admin table: ``ADMIN_API_KEYS`` and ``handle_admin_request(api_key, body, zk=...,
config=...) -> dict``, which ``node.broker.apis.kafka_apis`` calls from the broker's loop.
"""
from __future__ import annotations

from node.broker.apis.admin.alter_configs import incremental_alter_configs
from node.broker.apis.admin.configs import describe_configs
from node.broker.apis.admin.elections import elect_leaders
from node.broker.apis.admin.producer_ids import init_producer_id
from node.broker.apis.admin.reassignments import alter_reassignments, list_reassignments
from node.broker.apis.admin.topics import create_partitions, create_topics, delete_topics
from node.broker.coordinator import GuardedZk
from node.wire.protocol import ApiKey, ProtocolError

ADMIN_API_KEYS = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
    ApiKey.ELECT_LEADERS, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.DESCRIBE_CONFIGS, ApiKey.INIT_PRODUCER_ID,
    ApiKey.INCREMENTAL_ALTER_CONFIGS})


def handle_admin_request(api_key: int, body: dict, *, zk: GuardedZk, config,
                         metadata=None) -> dict:
    """``metadata``: the broker's metadata cache, for the requests that name every
    partition (ElectLeaders with null partitions answers each, as Kafka)."""
    handler = _HANDLERS.get(api_key)
    if handler is None:
        raise ProtocolError(f"api key {api_key} is not an admin request")
    if not isinstance(body, dict):
        raise ProtocolError("body must be a map")
    if api_key == ApiKey.ELECT_LEADERS:
        return elect_leaders(body, zk, config, metadata=metadata)
    return handler(body, zk, config)


_HANDLERS = {
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.CREATE_PARTITIONS: create_partitions,
    ApiKey.ELECT_LEADERS: elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: alter_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: list_reassignments,
    ApiKey.DESCRIBE_CONFIGS: describe_configs,
    ApiKey.INIT_PRODUCER_ID: init_producer_id,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs,
}
assert set(_HANDLERS) == ADMIN_API_KEYS
