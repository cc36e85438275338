"""The group coordinator's settings: Kafka's broker keys, Kafka's defaults.

Kafka's ``group.max.size`` and ``group.consumer.max.size`` are unbounded by default
(Integer.MAX_VALUE); here every limit is named and finite.
"""

from dataclasses import dataclass

GROUP_MAX_SIZE_LIMIT = 1000         # group.max.size / group.consumer.max.size default
OFFSET_METADATA_MAX_BYTES = 4096    # offset.metadata.max.bytes (Kafka's default)


@dataclass(frozen=True)
class GroupConfig:
    # Classic protocol.
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = GROUP_MAX_SIZE_LIMIT
    # Offsets.
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    offsets_commit_timeout_ms: int = 5000
    offset_metadata_max_bytes: int = OFFSET_METADATA_MAX_BYTES
    # KIP-848 (consumer protocol).
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_min_heartbeat_interval_ms: int = 5000
    group_consumer_max_heartbeat_interval_ms: int = 15000
    group_consumer_session_timeout_ms: int = 45000
    group_consumer_min_session_timeout_ms: int = 45000
    group_consumer_max_session_timeout_ms: int = 60000
    group_consumer_assignors: str = "uniform,range"
    group_consumer_max_size: int = GROUP_MAX_SIZE_LIMIT

    def __post_init__(self):
        assert 0 < self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms
        assert self.group_initial_rebalance_delay_ms >= 0
        assert 0 < self.group_max_size <= GROUP_MAX_SIZE_LIMIT * 1000
        assert self.offsets_retention_minutes > 0 and self.offsets_retention_check_interval_ms > 0
        assert self.offset_metadata_max_bytes >= 0
        assert (0 < self.group_consumer_min_heartbeat_interval_ms
                <= self.group_consumer_heartbeat_interval_ms
                <= self.group_consumer_max_heartbeat_interval_ms)
        assert (0 < self.group_consumer_min_session_timeout_ms
                <= self.group_consumer_session_timeout_ms
                <= self.group_consumer_max_session_timeout_ms)
        assert self.group_consumer_heartbeat_interval_ms < self.group_consumer_session_timeout_ms
        assert self.group_consumer_assignors.strip()
        assert 0 < self.group_consumer_max_size <= GROUP_MAX_SIZE_LIMIT * 1000

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @property
    def consumer_assignors(self) -> list[str]:
        """group.consumer.assignors as names; the first is the default."""
        return [name.strip() for name in self.group_consumer_assignors.split(",") if name.strip()]
