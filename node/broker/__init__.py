"""The broker process: a thin shell around the pure cores.

``server`` (the lifecycle: start-up, registration, the coordinator session, shutdown,
``main``), ``socket_server`` (the listener: ZeroMQ and local links, and the one path
responses go out by), ``apis`` (request handling, as Kafka's KafkaApis: one dispatch
table, one module per request family), ``loop`` (the one zmq.Poller event loop; timers
and coordinator callbacks as events), ``replica_manager`` (partition replicas and their
logs; core effects dispatched by type), ``fetcher`` (follower fetch sessions),
``purgatory`` (parked produce and fetch requests), ``log_cleaner`` (Kafka's LogCleaner:
compacts the hosted logs of cleanup.policy=compact topics on its threads),
``lost_replicas`` (replicas that lost
committed data, and the clean-shutdown marker), ``limits``, ``failures``,
``coordinator``, ``metadata_cache``, ``controller_runner`` (the controller core, run
while this broker holds /controller); the admin requests, written to the coordinator,
are ``apis.admin``.

    python -m node.broker --config server.properties
"""
