"""What the transaction coordinator core gives back.

The shell appends ``Result.records`` to the shard's ``__transaction_state`` partition
(acks=all). Once the high watermark is past the last of them (at once when there are none,
but never before the records of earlier Results are committed: a reply may rest on state
that an earlier, still uncommitted record wrote), it sends ``Result.replies`` and starts
``Result.markers``: WriteTxnMarkers to the leaders of each marker request's partitions,
retried until each partition answered; then it calls ``TxnShard.markers_done``. If an
append fails, it answers the replies with the error, drops the markers and rebuilds the
shard from the log (the core changes its state as it emits records; no rollback).
"""

from dataclasses import dataclass, field

from node.core.groups.effects import Reply
from node.wire.errors import ErrorCode

__all__ = ["Reply", "MarkerRequest", "Result"]

NONE = int(ErrorCode.NONE)
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
NOT_COORDINATOR = int(ErrorCode.NOT_COORDINATOR)
COORDINATOR_LOAD_IN_PROGRESS = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
INVALID_PRODUCER_EPOCH = int(ErrorCode.INVALID_PRODUCER_EPOCH)
INVALID_TXN_STATE = int(ErrorCode.INVALID_TXN_STATE)
INVALID_PRODUCER_ID_MAPPING = int(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
INVALID_TRANSACTION_TIMEOUT = int(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
CONCURRENT_TRANSACTIONS = int(ErrorCode.CONCURRENT_TRANSACTIONS)
TRANSACTION_COORDINATOR_FENCED = int(ErrorCode.TRANSACTION_COORDINATOR_FENCED)
PRODUCER_FENCED = int(ErrorCode.PRODUCER_FENCED)
TRANSACTIONAL_ID_NOT_FOUND = int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
TRANSACTION_ABORTABLE = int(ErrorCode.TRANSACTION_ABORTABLE)


@dataclass(frozen=True)
class MarkerRequest:
    """Write a COMMIT/ABORT marker for (producer_id, producer_epoch) on every partition."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]    # sorted (topic, partition)


@dataclass
class Result:
    records: list[tuple[bytes, bytes | None]]   # (key, value); None = tombstone
    replies: list[Reply]
    markers: list[MarkerRequest] = field(default_factory=list)


@dataclass
class Effects:
    """Records, replies and marker requests gathered during one call into the core."""
    records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    markers: list[MarkerRequest] = field(default_factory=list)

    def reply(self, token, body: dict) -> None:
        self.replies.append(Reply(token, body))

    def result(self) -> Result:
        return Result(self.records, self.replies, self.markers)
