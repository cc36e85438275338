"""The transaction coordinator's settings: Kafka's broker keys, Kafka's defaults (except the
partition counts, which follow this project's topics)."""

from dataclasses import dataclass

TRANSACTION_VERSION_EPOCH_BUMP = 2   # transaction.version from which EndTxn v5+ bumps (KIP-890)


@dataclass(frozen=True)
class TxnConfig:
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    # Kafka looks for timed-out transactions every this often; this core aborts one at its
    # exact deadline (start + transaction timeout, see next_deadline_ms): the key is
    # accepted, and bounds nothing tighter than that.
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_state_log_num_partitions: int = 3        # this project's; Kafka's is 50
    offsets_topic_num_partitions: int = 3                # __consumer_offsets (AddOffsetsToTxn)
    # KIP-890 part 1: the partition leader (not this core) asks before a transaction's first
    # batch on a partition; the core answers AddPartitionsToTxn verify_only either way.
    transaction_partition_verification_enable: bool = True
    # Kafka's feature transaction.version, here a broker key: 0 the original protocol,
    # 1 flexible records (KIP-890), 2 also the epoch bump per transaction (KIP-890 part 2).
    transaction_version: int = TRANSACTION_VERSION_EPOCH_BUMP

    def __post_init__(self):
        assert self.transaction_max_timeout_ms > 0
        assert self.transactional_id_expiration_ms > 0
        assert self.transaction_abort_timed_out_transaction_cleanup_interval_ms > 0
        assert self.transaction_remove_expired_transaction_cleanup_interval_ms > 0
        assert self.transaction_state_log_num_partitions > 0
        assert self.offsets_topic_num_partitions > 0
        assert self.transaction_version in (0, 1, 2)

    @property
    def kip890(self) -> bool:
        """KIP-890 part 2: the epoch is bumped at every EndTxn v5+ (off: the kafka-txn
        profile, transaction.version 0/1)."""
        return self.transaction_version >= TRANSACTION_VERSION_EPOCH_BUMP

    @property
    def log_value_version(self) -> int:
        """TransactionLogValue version written: 1 (flexible, previous/next producer id and the
        client's transaction version as tagged fields) from transaction.version 1, as
        Kafka's TransactionVersion.transactionLogValueVersion; 0 below."""
        return 1 if self.transaction_version >= 1 else 0
