"""The transaction coordinator on the broker (Kafka's TransactionCoordinator, its state
manager and marker channel): the I/O shell around the pure shards of ``node.core.txn``.

    state_topic    ``__transaction_state``: its creation on first use, which partition
                   holds a transactional id
    runtime        TxnRuntime: one TxnShard per partition led here (the shared
                   node.broker.shard_runtime), producer ids from the block allocator
    markers        the marker channel: WriteTxnMarkers to each partition's leader,
                   retried, then ``shard.markers_done``
    handlers       the native handlers: InitProducerId with a transactional id,
                   AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
                   ListTransactions (requests naming several ids split per shard, merged)

The Kafka wire's translations are ``node.kafka.translate.txn``.
"""
