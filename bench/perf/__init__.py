"""Measuring tools: benchmarks of the storage, the coordinator, the cluster and its
latency hop by hop, the sweeps over workload files (``workloads/``, package data), the
peers minikafka is compared to (Redis Streams, NATS JetStream), the machine's floor
(``limits``: memory copy, wake-ups, sockets) and the raw ZeroMQ limit (``zmq_limits``), node.client against the Kafka clients (``kafka_clients``, run as
``python -m bench.kafka_clients``) and ``zkservers``, which starts zk_lite or a real ZooKeeper for these
benchmarks and for the tests. Each module runs with ``python -m bench.perf.NAME``;
``minikafka bench sweep`` runs ``sweep``.

May import: ``shm``, ``zk_lite`` and ``node``'s client side (``node.client``,
``node.wire``, ``node.net``, ``node.local_link``, ``node.config``, ``node.tools``,
``node.perf``, ``node.cluster``, ``node.waiting``, ``node.paths``); no other package
of ``bench``.
"""
