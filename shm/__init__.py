"""Storage: record batches, segmented mmap'd logs, shared-memory indexes and board.

- ``shm.batch``: the record-batch codec (Kafka v2 header, Arrow columnar body, CRC-32C);
  ``build_batch`` (and ``encode_small_batch``, its struct fast path for a few records:
  the one encoder, the producer's included), ``parse_batch``, ``iter_batches``,
  ``stamp``, ``CorruptRecordError``; ``encode_columns`` / ``read_columns`` (a batch
  from and as its columns: the Kafka listener's converter). Its constants and parsed
  types live in ``shm.batch_format`` (re-exported); record headers are stored in
  Kafka's own header encoding (``shm.record_headers``).
- ``shm.log``: ``Log`` - one partition replica's log (append as leader / follower, read,
  roll, truncate, flush in ``core``; crash recovery in ``loader``; ``retention``; the
  producers' ``producer_snapshots``); its docstring is the on-disk and shared-memory
  layout that readers in other processes rely on.
- ``shm.segment``: one segment file and its indexes (used by ``Log``).
- ``shm.index``: ``OffsetIndex`` / ``TimeIndex`` in POSIX shared memory
  (``attach_readonly`` for other processes).
- ``shm.checkpoint``: Kafka's checkpoint files and the ``LeaderEpochCache``.
- ``shm.config``: ``LogConfig`` (Kafka's ``log.*`` keys) and every storage limit.
- ``shm.names``: shared-memory naming and ``cleanup_cluster``.
- ``shm.faults``: named crash points inside truncation, retention and roll (tests).
"""
