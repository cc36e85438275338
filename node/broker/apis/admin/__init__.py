"""Admin requests, answered by any broker by writing the coordinator (Kafka's ZK mode):
one module per request family behind one table, as Kafka's ``ZkAdminManager``.

    dispatch        ADMIN_API_KEYS and handle_admin_request (the table)
    topics          CreateTopics, DeleteTopics, CreatePartitions
    configs         DescribeConfigs, and the topic configs CreateTopics validates
    alter_configs   IncrementalAlterConfigs
    elections       ElectLeaders
    reassignments   AlterPartitionReassignments, ListPartitionReassignments
    producer_ids    InitProducerId
    common          the limits, the coordinator reads and the body checks they share

What it offers: ``ADMIN_API_KEYS``, ``handle_admin_request``, ``validate_topic_config``,
``InvalidConfig`` and ``TOPIC_CONFIG_KEYS``. The handlers catch kazoo's errors
(``kazoo.exceptions``) of the writes they make through ``GuardedZk``; they use no kazoo
client of their own.

``handle_admin_request(api_key, body, zk=..., config=...) -> dict`` for the APIs in
``ADMIN_API_KEYS`` (bodies: node/wire/protocol.py). The broker calls it from its loop; every
coordinator call is a synchronous round trip and nothing here waits for the controller:
the controller's watches do the rest (create states, elect, move replicas, delete), so
an answer of NONE means "accepted", as Kafka's ZK-mode admin paths before KIP-497. The
broker holds the answers of CreateTopics, CreatePartitions and DeleteTopics until its
metadata shows them (``node.broker.apis.admin_waits``).

- CreateTopics: name as Kafka ([a-zA-Z0-9._-], at most 249 characters, not "." or "..",
  no collision with an existing topic once '.' and '_' are the same), -1 takes
  num.partitions / default.replication.factor, placement by ``node.core.placement`` over the
  live brokers (rack-aware when they have racks); writes /config/topics/T, then
  /brokers/topics/T, in one multi.
- DeleteTopics: /admin/delete_topics/T.
- CreatePartitions: appends to /brokers/topics/T (conditional on its version), Kafka's
  start index, keeping a reassignment's AR/RR fields.
- ElectLeaders: /admin/preferred_replica_election (merged into a pending one of the same
  type; "election_type": "unclean" is our extension).
- AlterPartitionReassignments / ListPartitionReassignments: /admin/reassign_partitions
  (read-modify-write on its version; an entry removed = a cancellation).
- DescribeConfigs: the topic's overrides over the broker's defaults.
- InitProducerId (idempotent producers, KIP-98 without transactions): a new producer id
  from this broker's block, or the next epoch of a given id. Blocks of
  ``PRODUCER_ID_BLOCK_SIZE`` ids are reserved in ``/latest_producer_id_block`` with
  conditional writes (Kafka's znode and JSON), so no two brokers hand out one id.

Malformed bodies raise ``node.wire.protocol.ProtocolError`` (the broker answers
INVALID_REQUEST); a coordinator failure surfaces as kazoo's exception to the broker.
"""
from node.broker.apis.admin.configs import TOPIC_CONFIG_KEYS, InvalidConfig, validate_topic_config
from node.broker.apis.admin.dispatch import ADMIN_API_KEYS, handle_admin_request

__all__ = ["ADMIN_API_KEYS", "handle_admin_request", "InvalidConfig", "TOPIC_CONFIG_KEYS",
           "validate_topic_config"]
