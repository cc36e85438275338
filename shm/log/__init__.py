"""A partition replica's log: segments on disk, indexes in shared memory, crash recovery.

Offers ``Log`` (open with ``Log.open``) and what its methods return or raise:
``AppendInfo``, ``RecoveryReport`` / ``Truncation``, and the storage errors of
``shm.errors``. Its modules, cut along Kafka's own (``UnifiedLog``/``LocalLog``,
``LogLoader``, retention, ``ProducerStateManager``'s snapshots):

    core.py                the Log: append, read, roll, flush, HW, truncation, close
    loader.py              Kafka's LogLoader: recovery when a log is opened
    retention.py           deleting the oldest segments by time or size (log start offset)
    producer_snapshots.py  the idempotent producers' snapshot files
    transactions.py        building/keeping the producers' and transactions' state
                           (``shm.txn_state``: ongoing txns, LSO, aborted list)
    txn_index.py           Kafka's ``.txnindex`` files (aborted transactions per segment)

    cleaner.py             log compaction (Kafka's LogCleaner): plan, build (any
                           thread), with cleaner_core.py (what is kept, pure),
                           cleaner_batches.py (splitting batches), cleaner_files.py
                           (its files, its half of recovery), cleaner_swap.py (the
                           crash-safe swap), cleaner_bench.py (MB/s figure)

The modules share the ``Log``'s fields; nothing outside this package touches them.

On-disk layout (``data_dir`` is one of the broker's ``log.dirs``):

    <data_dir>/recovery-point-offset-checkpoint    Kafka text format, all partitions
    <data_dir>/replication-offset-checkpoint       high watermarks, same format
    <data_dir>/log-start-offset-checkpoint         durable lower bound of each log start
    <data_dir>/<topic>-<partition>/
        00000000000000000000.log        segment: whole record batches back to back
        00000000000000000000.index      offset index (written on roll and clean close)
        00000000000000000000.timeindex  time index (same)
        00000000000000004711.log        next segment, named by its base offset
        00000000000000004711.snapshot   idempotent producers as of that offset (at a roll),
                                        with their ongoing transactions' first offsets
        00000000000000004711.txnindex   Kafka's aborted-transaction index of the segment
                                        (only if it holds an ABORT marker)
        leader-epoch-checkpoint         epoch -> start offset
        truncation-intent               only while a truncation is under way
        *.log.deleted                   a segment being deleted (not part of the log)
        cleaner-checkpoint              compaction: first dirty offset, delete horizons
        cleaner-swap, *.log.cleaned, *.log.swap, *.index.cleaned, *.timeindex.cleaned
                                        only while a clean is under way
        .lock                           flock'd by the one Log that has it open

- Segment files are named by base offset (``%020d.log``); the segment with the highest
  base offset is the active one. Its file is preallocated (sparse, zero-filled) to
  ``log.segment.bytes`` and mmap'd; bytes after the last batch are zero. Every other
  segment's file is trimmed to its data. So a reader mapping a segment must stop at
  an offset it knows is written (HW) or at the first 12-byte zero prefix, and must
  never touch bytes past the file's current size: a roll trims the file it mapped at
  full capacity, and touching a page past the end of a file is SIGBUS.
- The log start offset is the base offset of the first segment; retention deletes
  whole segments, never the active one.

Shared memory (see ``shm/index.py`` for the object layout): per segment

    /mk-<cluster_id>-b<broker_id>-<topic>-<partition>-<segment base offset>-idx
    /mk-<cluster_id>-b<broker_id>-<topic>-<partition>-<segment base offset>-tidx

Another process attaches them with ``OffsetIndex.attach_readonly(cluster_id,
broker_id, topic, partition, base_offset)`` (``TimeIndex`` likewise); they live while
the log is open (and after a crash, until the log is reopened or ``cleanup_cluster``)
and are unlinked by ``close()``. A new segment's index objects are created before its
``.log`` file, so a reader that sees the file finds the index (possibly still empty:
then it scans from position 0). A reader finds a batch: pick the segment file with
the largest base offset <= target, ``OffsetIndex.lookup(target)`` -> (offset,
position), then walk batch headers (size = batch_length + 12) from that position.

Rules and invariants:
- log_start_offset <= high_watermark <= log_end_offset; recovery_point <= LEO.
- Offsets increase: each batch starts at or after the previous batch's next offset,
  each segment at or after the previous segment's next offset. A log that was never
  compacted (nor appended to by a follower of a compacted leader) is contiguous; a
  compacted one has holes (Kafka's: offsets are kept, records removed). A read at an
  offset in a hole returns from the next batch; a follower's batch past the LEO is
  appended (the LEO jumps, as Kafka's follower); a truncation to an offset in a hole
  leaves the LEO at the end of the last batch below it. The loader accepts gaps
  between segments of a compacted log (config, or a cleaner-checkpoint present) and
  treats them as a missing segment file in any other log.
- A segment's base offset is at or below its first batch's (a cleaned segment keeps
  its group's first base; an emptied first group stays as an empty segment, so the
  log start offset does not move; other emptied groups leave a hole).
- Appends are whole-batch copies published by advancing the segment size, so
  ``read`` never returns a torn batch; views are read-only.
- Default flush policy: never fsync on append (acks come from the page cache and
  durability from replication, as Kafka). ``flush()`` fsyncs and advances the
  recovery point, which is checkpointed; a roll flushes the sealed segment in a
  background thread and then advances the recovery point, as Kafka.
- Recovery (``Log.open`` after an unclean shutdown) trusts everything below the
  recovery point and verifies CRC and structure from there on, so its cost is the
  unflushed tail. It cuts a torn or corrupt tail and reports each cut
  (``RecoveryReport.truncations``, and a warning on the ``shm.log`` logger).
- Multi-step changes of the segment set are crash-safe (SIGKILL at any point, and
  power loss for what they made durable): ``truncate_to`` and
  ``truncate_fully_and_start_at`` first write a ``truncation-intent`` durably, and
  recovery finishes an interrupted one; retention first checkpoints the new log start
  offset, and recovery deletes every segment below it. Segments are deleted by renaming
  to ``.log.deleted`` (from the end for truncation, so a crash leaves a prefix), one
  directory fsync, then unlinking (names only: the files are held open until a
  background thread closes them, which frees their blocks off the owner thread);
  recovery removes ``.deleted`` and orphan index files. A roll creates the new segment only after sealing the old one, so any crash
  leaves either the old active segment or an empty new one after it.
  ``shm.faults`` names every intermediate step; the crash tests die at each.
- Transactions (KIP-98): transactional data batches and COMMIT/ABORT markers
  (``shm.control``) are appended as any batch; the Log keeps each producer's ongoing
  transaction, the LSO (``last_stable_offset()`` = min(first unstable offset, HW)) and
  the aborted transactions (``aborted_transactions(start, end)``, from memory, kept in
  the ``.txnindex`` files); rebuilt after recovery and truncation (``transactions``).
- Indexes: ``reattach_indexes=True`` (default) reattaches shared memory left by the
  previous incarnation, or loads the ``.index`` files, validating entries against the
  segments; anything invalid is rebuilt. ``reattach_indexes=False`` rebuilds all.
"""
from shm.errors import (InvalidRecordError, LogClosedError, LogError, OffsetOutOfRangeError,
                        RecordTooLargeError, UnexpectedAppendOffsetError)
from shm.log.core import BATCHES_PER_APPEND_MAX, AppendInfo, Log
from shm.log.loader import RecoveryReport, Truncation

__all__ = ["Log", "AppendInfo", "RecoveryReport", "Truncation", "BATCHES_PER_APPEND_MAX",
           "LogError", "LogClosedError", "InvalidRecordError", "OffsetOutOfRangeError",
           "RecordTooLargeError", "UnexpectedAppendOffsetError"]
