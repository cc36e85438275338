"""The group coordinator on the broker (Kafka's GroupCoordinatorService and its
runtime): the I/O shell around the pure shards of ``node.core.groups``.

    offsets_topic  ``__consumer_offsets``: its creation on first use, internal-topic
                   rules, which partition holds a group
    runtime        GroupRuntime: one shard per partition led here (the shared
                   node.broker.shard_runtime: loading, unloading, acks=all appends,
                   replies after commit, timers), metadata changes
    handlers       the native handlers: FindCoordinator and every group API (multi-group
                   requests split per shard and merged)
    bodies         the request/response dicts (Kafka's fields): error answers, merges

The Kafka wire's translations are ``node.kafka.translate.groups``.
"""
