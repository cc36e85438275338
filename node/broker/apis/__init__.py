"""The broker's request handling, as Kafka's ``KafkaApis``: one dispatch table
(``kafka_apis.HANDLERS``) from API key to one handler per request family, each a module:

    kafka_apis   KafkaApis: decoding, the table, ApiVersions, errors a handler raises
    produce      Produce, and the idempotent producer's duplicate check
    txn_rules    transactional batches at the leader: Kafka's checks, KIP-890's plan and
                 guards (pure); txn_verify: asking the transaction coordinator (KIP-890)
    txn_markers  WriteTxnMarkers (the coordinator's COMMIT/ABORT markers, appended acks=all)
    fetch        Fetch (consumers and followers; long polls parked in the purgatory)
    offsets      ListOffsets, OffsetForLeaderEpoch
    metadata     Metadata, DescribeCluster
    log_dirs     DescribeLogDirs
    delete_records  DeleteRecords (moves a leader's log start offset)
    admin_waits  admin answers held until the metadata cache shows them
    control      LeaderAndIsr, UpdateMetadata, StopReplica, GetReplicaLogInfo,
                 ControlledShutdown (requests from and to the controller)
    tracing      the stamps of traced writes (bench.perf.latency --breakdown)
    common       an API's name, the error for a partition not hosted here

Admin requests go through the same table to ``admin`` (a package: one module per admin
request family, behind its own table ``ADMIN_API_KEYS``/``handle_admin_request``). A handler
takes a decoded request and answers through ``KafkaApis.send_response``; it knows
nothing of the broker's lifecycle (``node.broker.server``) nor of the transport
(``node.broker.socket_server``).
"""
from node.broker.apis.kafka_apis import HANDLERS, KafkaApis

__all__ = ["HANDLERS", "KafkaApis"]
