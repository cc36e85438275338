"""A transactional id's metadata and Kafka's TransactionState (ids as Kafka writes them in
TransactionLogValue.TransactionStatus; names as DescribeTransactions shows them)."""

from dataclasses import dataclass, field
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
EPOCH_MAX = 32767                      # Short.MaxValue: no epoch beyond it
# Kafka never hands a client an epoch >= Short.MaxValue - 1, so that it can always fence it.
EPOCH_EXHAUSTED_AT = EPOCH_MAX - 1


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= EPOCH_EXHAUSTED_AT


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(word.capitalize() for word in self.name.split("_"))

    @classmethod
    def by_kafka_name(cls, name: str) -> "TxnState | None":
        for state in cls:
            if state.kafka_name == name:
                return state
        return None


PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETED = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
# States from which a transactional id may expire (Kafka's isExpirationAllowed).
EXPIRABLE = (TxnState.EMPTY,) + COMPLETED

# Kafka's validPreviousStates: the transitions this coordinator may make.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset((TxnState.EMPTY,) + COMPLETED),
    TxnState.ONGOING: frozenset((TxnState.ONGOING, TxnState.EMPTY) + COMPLETED),
    TxnState.PREPARE_COMMIT: frozenset((TxnState.ONGOING,)),
    TxnState.PREPARE_ABORT: frozenset((TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE)),
    TxnState.COMPLETE_COMMIT: frozenset((TxnState.PREPARE_COMMIT,)),
    TxnState.COMPLETE_ABORT: frozenset((TxnState.PREPARE_ABORT,)),
    TxnState.DEAD: frozenset(EXPIRABLE),
    TxnState.PREPARE_EPOCH_FENCE: frozenset((TxnState.ONGOING,)),
}


@dataclass
class TxnMeta:
    """What the coordinator knows of one transactional id (Kafka's TransactionMetadata).
    ``last_producer_epoch`` is not in the log (as Kafka): -1 after a load."""
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID   # the producer id before the last transition
    next_producer_id: int = NO_PRODUCER_ID       # the id to take at completion (epoch overflow)
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    client_tv: int = 0          # 2: the last EndTxn bumped the epoch (KIP-890 part 2)

    def check(self) -> None:
        """The invariants of a stored transaction."""
        assert self.producer_id >= 0, self
        assert NO_PRODUCER_EPOCH <= self.producer_epoch <= EPOCH_MAX, self
        assert bool(self.partitions) <= (self.state in (TxnState.ONGOING,) + PREPARING), self
        assert self.state is not TxnState.ONGOING or self.partitions, self
