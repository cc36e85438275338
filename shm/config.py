"""Storage limits and per-log configuration: every bound of ``shm/`` lives here.

Rules:
- Hard limits (module constants) bound what the code can represent; a config value
  outside them is refused when the ``LogConfig`` is built, never discovered later.
- ``LogConfig`` fields carry Kafka's config key (``KAFKA_NAMES``), Kafka's default
  unless noted, and the unit last in the field name.
- Relations between limits are asserted at import time, so a change that breaks one
  fails loudly.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# A batch body uses i32 Arrow offsets, so one batch can never exceed 2 GiB; we keep it
# far below that so a corrupt length cannot make us map or copy absurd sizes.
BATCH_BYTES_MAX = 64 * 1024 * 1024
# Bound on records in one batch (Kafka has no explicit bound; ours bounds numpy work).
BATCH_RECORDS_MAX = 1 << 22
# Segment positions are Kafka ints: a segment is at most 2 GiB - 1.
SEGMENT_BYTES_MAX = INT_MAX
# Small segments are allowed so tests can roll often; one header must fit.
SEGMENT_BYTES_MIN = 256
INDEX_INTERVAL_BYTES_MIN = 1
# Bytes per index entry in shared memory: two int64 (key, value).
INDEX_ENTRY_BYTES = 16
INDEX_ENTRIES_MAX = 1 << 22
# Segments one log may hold open at once (each holds a file descriptor and a map).
SEGMENTS_PER_LOG_MAX = 100_000
# The active segment reserves disk blocks ahead of its data in steps of this size
# (posix_fallocate): appends into allocated blocks are much faster than into holes.
PREALLOCATE_CHUNK_BYTES = 32 * 1024 * 1024
# Checkpoint files are read whole; refuse absurd ones.
CHECKPOINT_BYTES_MAX = 64 * 1024 * 1024

assert SEGMENT_BYTES_MIN < BATCH_BYTES_MAX < SEGMENT_BYTES_MAX
assert INDEX_ENTRIES_MAX * INDEX_ENTRY_BYTES <= 1 << 30


KAFKA_NAMES = {
    "segment_bytes": "log.segment.bytes",
    "roll_ms": "log.roll.ms",
    "index_interval_bytes": "log.index.interval.bytes",
    "index_size_max_bytes": "log.index.size.max.bytes",
    "retention_ms": "log.retention.ms",
    "retention_bytes": "log.retention.bytes",
    "flush_interval_messages": "log.flush.interval.messages",
    "flush_interval_ms": "log.flush.interval.ms",
    "message_max_bytes": "message.max.bytes",
}


@dataclass(frozen=True)
class LogConfig:
    """One partition log's configuration (Kafka's ``log.*`` keys).

    - ``segment_bytes`` (log.segment.bytes, bytes, default 1 GiB): roll when the active
      segment would exceed it; the active segment file is preallocated to this size.
    - ``roll_ms`` (log.roll.ms, ms, default 7 days): roll before an append whose batch
      max timestamp is more than this after the active segment's first batch's max
      timestamp (as Kafka; no jitter); if that first batch has no timestamp (-1), when
      the segment was created (or reopened) more than this long ago by the wall clock.
    - ``index_interval_bytes`` (log.index.interval.bytes, bytes, default 4096): one
      sparse index entry per this many bytes of log.
    - ``index_size_max_bytes`` (log.index.size.max.bytes, bytes, default 10 MiB): the
      offset index of one segment; when full, the segment rolls.
    - ``retention_ms`` (log.retention.ms, ms, default 7 days, -1 = forever).
    - ``retention_bytes`` (log.retention.bytes, bytes, default -1 = unlimited).
    - ``flush_interval_messages`` (log.flush.interval.messages, records, default
      Long.MAX = never): fsync after this many records.
    - ``flush_interval_ms`` (log.flush.interval.ms, ms, default Long.MAX = never):
      fsync when the last flush is older than this (checked on append).
    - ``message_max_bytes`` (message.max.bytes, bytes). Default 8 MiB, not Kafka's
      1 MiB + 12: a columnar body carries 12 bytes of offsets per record, and the
      benchmark's 1 MiB payload batches must fit.
    """

    segment_bytes: int = 1024 * 1024 * 1024
    roll_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    index_size_max_bytes: int = 10 * 1024 * 1024
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    flush_interval_messages: int = LONG_MAX
    flush_interval_ms: int = LONG_MAX
    message_max_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{KAFKA_NAMES[f.name]} must be an integer, got {value!r}")
        _check_range("segment_bytes", self.segment_bytes, SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX)
        _check_range("roll_ms", self.roll_ms, 1, LONG_MAX)
        _check_range("index_interval_bytes", self.index_interval_bytes,
                     INDEX_INTERVAL_BYTES_MIN, INT_MAX)
        _check_range("index_size_max_bytes", self.index_size_max_bytes,
                     4 * INDEX_ENTRY_BYTES, INDEX_ENTRIES_MAX * INDEX_ENTRY_BYTES)
        _check_range("retention_ms", self.retention_ms, -1, LONG_MAX)
        _check_range("retention_bytes", self.retention_bytes, -1, LONG_MAX)
        _check_range("flush_interval_messages", self.flush_interval_messages, 1, LONG_MAX)
        _check_range("flush_interval_ms", self.flush_interval_ms, 0, LONG_MAX)
        _check_range("message_max_bytes", self.message_max_bytes, 64, BATCH_BYTES_MAX)

    @property
    def index_entries_max(self) -> int:
        """Entries one segment's offset (and time) index can hold."""
        return self.index_size_max_bytes // INDEX_ENTRY_BYTES

    @classmethod
    def from_props(cls, props: dict[str, object]) -> "LogConfig":
        """Build from Kafka-named keys (``{"log.segment.bytes": "1048576"}``); unknown keys fail."""
        by_kafka = {kafka: field for field, kafka in KAFKA_NAMES.items()}
        kwargs = {}
        for key, value in props.items():
            if key not in by_kafka:
                raise ValueError(f"unknown log config key {key!r}")
            kwargs[by_kafka[key]] = int(value)
        return cls(**kwargs)


def _check_range(field: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{KAFKA_NAMES[field]}={value} is outside [{low}, {high}]")
