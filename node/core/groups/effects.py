"""What the group cores give back: records to append and replies to send after them.

The shell appends ``Result.records`` to the shard's ``__consumer_offsets`` partition
(acks=all) and sends ``Result.replies`` once the high watermark is past the last of them
(at once when there are none). If the append fails, it answers the replies with the error
and rebuilds the shard from the log: the cores change their state as they emit records
and have no rollback.

A Result with ``producer`` (TxnOffsetCommit's) holds one producer's transactional offset
commits: the shell writes them as transactional batches with that producer id and epoch
(Kafka's), so a load sees them as pending until the producer's marker.
"""

from dataclasses import dataclass, field

from node.wire.errors import ErrorCode

from .records import Rec

# Kafka's error codes used by the group cores, as ints (node.wire.errors numbers them once).
NONE = int(ErrorCode.NONE)
OFFSET_METADATA_TOO_LARGE = int(ErrorCode.OFFSET_METADATA_TOO_LARGE)
COORDINATOR_LOAD_IN_PROGRESS = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
COORDINATOR_NOT_AVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
NOT_COORDINATOR = int(ErrorCode.NOT_COORDINATOR)
ILLEGAL_GENERATION = int(ErrorCode.ILLEGAL_GENERATION)
INCONSISTENT_GROUP_PROTOCOL = int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
INVALID_GROUP_ID = int(ErrorCode.INVALID_GROUP_ID)
UNKNOWN_MEMBER_ID = int(ErrorCode.UNKNOWN_MEMBER_ID)
INVALID_SESSION_TIMEOUT = int(ErrorCode.INVALID_SESSION_TIMEOUT)
REBALANCE_IN_PROGRESS = int(ErrorCode.REBALANCE_IN_PROGRESS)
UNSUPPORTED_VERSION = int(ErrorCode.UNSUPPORTED_VERSION)
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
NON_EMPTY_GROUP = int(ErrorCode.NON_EMPTY_GROUP)
GROUP_ID_NOT_FOUND = int(ErrorCode.GROUP_ID_NOT_FOUND)
MEMBER_ID_REQUIRED = int(ErrorCode.MEMBER_ID_REQUIRED)
FENCED_INSTANCE_ID = int(ErrorCode.FENCED_INSTANCE_ID)
GROUP_MAX_SIZE_REACHED = int(ErrorCode.GROUP_MAX_SIZE_REACHED)
GROUP_SUBSCRIBED_TO_TOPIC = int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
STALE_MEMBER_EPOCH = int(ErrorCode.STALE_MEMBER_EPOCH)
FENCED_MEMBER_EPOCH = int(ErrorCode.FENCED_MEMBER_EPOCH)
UNRELEASED_INSTANCE_ID = int(ErrorCode.UNRELEASED_INSTANCE_ID)
UNSUPPORTED_ASSIGNOR = int(ErrorCode.UNSUPPORTED_ASSIGNOR)
UNSTABLE_OFFSET_COMMIT = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)


@dataclass(frozen=True)
class Reply:
    token: object      # opaque: given by the shell with the request
    body: dict         # the response body: the Kafka response's fields, newest version


@dataclass
class Effects:
    """Records and replies gathered during one call into the cores."""
    records: list[Rec] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    producer: tuple[int, int] | None = None     # (id, epoch): the records are transactional

    def reply(self, token, body: dict) -> None:
        self.replies.append(Reply(token, body))


@dataclass
class Result:
    records: list[tuple[bytes, bytes | None]]   # (key, value); None = tombstone
    replies: list[Reply]
    producer: tuple[int, int] | None = None     # (id, epoch): write them transactional
