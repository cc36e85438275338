"""What the group cores give back: records to append and replies to send after them.

The shell appends ``Result.records`` to the shard's ``__consumer_offsets`` partition
(acks=all) and sends ``Result.replies`` once the high watermark is past the last of them
(at once when there are none). If the append fails, it answers the replies with the error
and rebuilds the shard from the log: the cores change their state as they emit records
and have no rollback.
"""

from dataclasses import dataclass, field

from .records import Rec

# Kafka's error codes used by the group cores (org.apache.kafka.common.protocol.Errors).
NONE = 0
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
GROUP_MAX_SIZE_REACHED = 81
GROUP_SUBSCRIBED_TO_TOPIC = 86
STALE_MEMBER_EPOCH = 113


@dataclass(frozen=True)
class Reply:
    token: object      # opaque: given by the shell with the request
    body: dict         # the response body: the Kafka response's fields, newest version


@dataclass
class Effects:
    """Records and replies gathered during one call into the cores."""
    records: list[Rec] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)

    def reply(self, token, body: dict) -> None:
        self.replies.append(Reply(token, body))


@dataclass
class Result:
    records: list[tuple[bytes, bytes | None]]   # (key, value); None = tombstone
    replies: list[Reply]
