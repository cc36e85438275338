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
# Log compaction's fields (not integers, so apart from KAFKA_NAMES: node.config parses
# those as integers): Kafka's broker keys; the topic keys are cleanup.policy,
# min.cleanable.dirty.ratio, min.compaction.lag.ms, max.compaction.lag.ms and
# delete.retention.ms. ``parse_compaction_value`` turns a key's text into the field's value.
COMPACTION_KAFKA_NAMES = {
    "cleanup_policy": "log.cleanup.policy",
    "min_cleanable_dirty_ratio": "log.cleaner.min.cleanable.ratio",
    "min_compaction_lag_ms": "log.cleaner.min.compaction.lag.ms",
    "max_compaction_lag_ms": "log.cleaner.max.compaction.lag.ms",
    "delete_retention_ms": "log.cleaner.delete.retention.ms",
}
CLEANUP_POLICIES = frozenset({"delete", "compact"})


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
    - ``cleanup_policy`` (log.cleanup.policy; topic cleanup.policy): a frozenset of
      "delete" (retention) and "compact" (the log cleaner, ``shm.log.cleaner``); a
      string "compact,delete" is accepted and parsed.
    - ``min_cleanable_dirty_ratio`` (log.cleaner.min.cleanable.ratio, 0.5): clean when
      dirty bytes / (clean + dirty bytes) exceeds it.
    - ``min_compaction_lag_ms`` (log.cleaner.min.compaction.lag.ms, 0): a segment whose
      newest record is younger than this is not cleaned yet.
    - ``max_compaction_lag_ms`` (log.cleaner.max.compaction.lag.ms, Long.MAX): a dirty
      segment whose first batch is older than this is cleaned whatever the ratio.
    - ``delete_retention_ms`` (log.cleaner.delete.retention.ms, 1 day): how long a
      tombstone (null value) survives after the clean that first cleaned it.
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
    cleanup_policy: frozenset = frozenset({"delete"})
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 24 * 3600 * 1000

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name in COMPACTION_KAFKA_NAMES:
                continue
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
        self._check_compaction()

    def _check_compaction(self) -> None:
        policy = self.cleanup_policy
        if isinstance(policy, str):  # "compact,delete" as Kafka writes it
            policy = parse_compaction_value("cleanup_policy", policy)
            object.__setattr__(self, "cleanup_policy", policy)
        if not isinstance(policy, frozenset) or not policy or not policy <= CLEANUP_POLICIES:
            raise ValueError(f"log.cleanup.policy must be a non-empty subset of "
                             f"{sorted(CLEANUP_POLICIES)}, got {policy!r}")
        ratio = self.min_cleanable_dirty_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or \
                not 0.0 <= ratio <= 1.0:
            raise ValueError(f"log.cleaner.min.cleanable.ratio must be in [0, 1], got {ratio!r}")
        for name in ("min_compaction_lag_ms", "max_compaction_lag_ms", "delete_retention_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{COMPACTION_KAFKA_NAMES[name]} must be an integer, "
                                 f"got {value!r}")
        _check_range("min_compaction_lag_ms", self.min_compaction_lag_ms, 0, LONG_MAX)
        _check_range("max_compaction_lag_ms", self.max_compaction_lag_ms, 1, LONG_MAX)
        _check_range("delete_retention_ms", self.delete_retention_ms, 0, LONG_MAX)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Retention by time/size applies (cleanup.policy has delete)."""
        return "delete" in self.cleanup_policy

    @property
    def index_entries_max(self) -> int:
        """Entries one segment's offset (and time) index can hold."""
        return self.index_size_max_bytes // INDEX_ENTRY_BYTES

    @classmethod
    def from_props(cls, props: dict[str, object]) -> "LogConfig":
        """Build from Kafka-named keys (``{"log.segment.bytes": "1048576"}``); unknown keys fail."""
        by_kafka = {kafka: field for field, kafka in KAFKA_NAMES.items()}
        compaction = {kafka: field for field, kafka in COMPACTION_KAFKA_NAMES.items()}
        kwargs = {}
        for key, value in props.items():
            if key in compaction:
                kwargs[compaction[key]] = parse_compaction_value(compaction[key], str(value))
            elif key not in by_kafka:
                raise ValueError(f"unknown log config key {key!r}")
            else:
                kwargs[by_kafka[key]] = int(value)
        return cls(**kwargs)


def parse_compaction_value(field: str, text: str):
    """The value of compaction field ``field`` from its Kafka text ("compact,delete",
    "0.5", "86400000"); ValueError if malformed (ranges are checked by LogConfig)."""
    if field == "cleanup_policy":
        policy = frozenset(p.strip() for p in text.split(",") if p.strip())
        if not policy or not policy <= CLEANUP_POLICIES:
            raise ValueError(f"log.cleanup.policy={text!r}: a comma-separated subset of "
                             f"{sorted(CLEANUP_POLICIES)}")
        return policy
    if field == "min_cleanable_dirty_ratio":
        return float(text)
    if field in COMPACTION_KAFKA_NAMES:
        return int(text)
    raise ValueError(f"{field} is not a compaction field")


def compaction_text(field: str, value) -> str:
    """The Kafka text of a compaction field's value (the reverse of parse_compaction_value)."""
    if field == "cleanup_policy":
        return ",".join(sorted(value))
    return str(value)


def _check_range(field: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        name = KAFKA_NAMES.get(field) or COMPACTION_KAFKA_NAMES[field]
        raise ValueError(f"{name}={value} is outside [{low}, {high}]")
