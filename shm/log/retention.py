"""Retention: delete a log's oldest segments by time (log.retention.ms) or size
(log.retention.bytes), which moves its log start offset.

Rules:
- Whole segments from the start, only those wholly below the high watermark, never the
  active one.
- Crash-safe: the new log start offset is checkpointed durably before any file goes
  (Kafka's log-start-offset-checkpoint); segments are renamed to ``.deleted``, the
  directory is fsynced, then they are unlinked. If a crash interrupts this, the loader
  (``shm.log.loader``) deletes every segment below the checkpointed log start offset.

Functions of a ``Log`` (they read and set its fields; see ``shm.log``).
"""
from __future__ import annotations

from shm import faults
from shm.checkpoint import fsync_dir
from shm.log.producer_snapshots import delete_snapshots


def segments_past_retention(log, now_ms: int) -> int:
    """How many segments from the start retention may delete now."""
    if not log.config.delete:
        return 0  # cleanup.policy=compact alone: the cleaner, not retention
    retention_ms, retention_bytes = log.config.retention_ms, log.config.retention_bytes
    total = log.size_bytes
    victims = 0
    while victims < len(log.segments) - 1:
        first = log.segments[victims]
        if first.next_offset > log.high_watermark:
            break
        expired = retention_ms >= 0 and (first.size_bytes == 0 or (
            first.max_timestamp >= 0 and now_ms - first.max_timestamp > retention_ms))
        too_big = retention_bytes >= 0 and total - first.size_bytes >= retention_bytes
        if not (expired or too_big):
            break
        total -= first.size_bytes
        victims += 1
    return victims


def delete_first_segments(log, count: int) -> None:
    """Crash-safe: the new log start offset is durable before any file goes (Kafka's
    log-start-offset-checkpoint), and recovery deletes every segment below it."""
    log._poll_roll_flush(wait=True)   # it may write index files of the victims
    victims = log.segments[:count]
    # Never below a DeleteRecords' log start offset already made durable.
    log._log_start_file.update(log.topic, log.partition,
                               max(log.segments[count].base_offset, log.deleted_below))
    faults.point("retention:log-start-written")
    for victim in victims:
        victim.mark_deleted()
        faults.point("retention:segment-renamed")
    fsync_dir(log.directory)
    faults.point("retention:segments-renamed-durable")
    closes = []
    for victim in victims:
        victim.delete(closes.append)
        faults.point("retention:segment-deleted")
    log._release(closes)
    del log.segments[:count]
    del log._bases[:count]
    log._segments_changed += 1
    delete_snapshots(log.directory, lambda o: o < log.log_start_offset)
    log.leader_epoch_cache.truncate_from_start(log.log_start_offset)
    if log.recovery_point < log.log_start_offset:
        log.recovery_point = log.log_start_offset
        log._write_recovery_point()
    log.check()
