"""Kafka's group coordinator as pure cores, one ``GroupShard`` per ``__consumer_offsets``
partition (``shard``). It composes ``offsets`` (committed offsets), ``classic`` (the classic
JoinGroup/SyncGroup protocol) and ``consumer`` (KIP-848). ``records`` encodes and decodes the
partition's records in Kafka's own key/value schemas; ``hashing`` says which partition holds a
group; ``config`` holds the broker keys. Nothing here does I/O or reads a clock: every call
that can time something out takes ``now_ms``.
"""
