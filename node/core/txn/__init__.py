"""Kafka's transaction coordinator as a pure core, one ``TxnShard`` per
``__transaction_state`` partition (``shard``). ``state`` holds a transactional id's
metadata and Kafka's TransactionState; ``records`` encodes and decodes the partition's
records in Kafka's own TransactionLogKey/Value schemas; ``effects`` says what a call gives
back (records, replies, marker requests); ``config`` holds the broker keys. Nothing here
does I/O or reads a clock: every call that can time something out takes ``now_ms``.
"""
