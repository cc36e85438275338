"""``python -m bench.kafka_clients``: node.client, confluent-kafka (librdkafka),
kafka-python and aiokafka side by side on one cluster (``run``), producer and consumer
throughput and single-write latency, into the results store.

    run          the command line and the phases, interleaving the clients
    measure      what every client's measurement shares (record clock, pacing, results)
    native       node.client (producer-perf-test's and consumer-perf-test's own runs)
    librdkafka   confluent-kafka
    pure_python  kafka-python and aiokafka
    report       the results store's runs, the table with the issue's targets, profiles
"""
