"""Kafka's error codes: one registry for the broker protocol (numbers and names are Kafka's).

``KafkaError`` subclasses are generated from the table; ``error_for(code)`` gives the
class for a code (unknown codes fail loudly as UnknownServerError with the code kept),
``code_of(name)`` the number for a name, and ``code_for_exception(e)`` maps a storage
error (``shm.errors`` carry ``kafka_error``) to its code.
"""
from __future__ import annotations

# (code, name, retriable, message)
_TABLE = [
    (-1, "UNKNOWN_SERVER_ERROR", False, "The server experienced an unexpected error."),
    (0, "NONE", False, ""),
    (1, "OFFSET_OUT_OF_RANGE", False, "The requested offset is not within the range of "
                                      "offsets maintained by the server."),
    (2, "CORRUPT_MESSAGE", True, "The message contents do not match its CRC or are malformed."),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True, "This server does not host this topic-partition."),
    (5, "LEADER_NOT_AVAILABLE", True, "There is no leader for this topic-partition."),
    (6, "NOT_LEADER_OR_FOLLOWER", True, "This server is not the leader or a follower "
                                        "of this topic-partition."),
    (7, "REQUEST_TIMED_OUT", True, "The request timed out."),
    (8, "BROKER_NOT_AVAILABLE", False, "The broker is not available."),
    (9, "REPLICA_NOT_AVAILABLE", True, "The replica is not available."),
    (10, "MESSAGE_TOO_LARGE", False, "The request included a message larger than the "
                                     "max message size the server will accept."),
    (11, "STALE_CONTROLLER_EPOCH", False, "The controller moved to another broker."),
    (13, "NETWORK_EXCEPTION", True, "The server disconnected before a response was received."),
    (15, "COORDINATOR_NOT_AVAILABLE", True, "The coordinator is not available."),
    (17, "INVALID_TOPIC_EXCEPTION", False, "The request attempted to perform an operation "
                                           "on an invalid topic."),
    (19, "NOT_ENOUGH_REPLICAS", True, "Messages are rejected since there are fewer in-sync "
                                      "replicas than required."),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True, "Messages are written to the log, but to "
                                                   "fewer in-sync replicas than required."),
    (35, "UNSUPPORTED_VERSION", False, "The version of API is not supported."),
    (36, "TOPIC_ALREADY_EXISTS", False, "Topic with this name already exists."),
    (37, "INVALID_PARTITIONS", False, "Number of partitions is below 1."),
    (38, "INVALID_REPLICATION_FACTOR", False, "Replication factor is below 1 or larger than "
                                              "the number of available brokers."),
    (39, "INVALID_REPLICA_ASSIGNMENT", False, "Replica assignment is invalid."),
    (40, "INVALID_CONFIG", False, "Configuration is invalid."),
    (41, "NOT_CONTROLLER", True, "This is not the correct controller for this cluster."),
    (42, "INVALID_REQUEST", False, "This most likely occurs because of a request being "
                                   "malformed by the client library or the message was sent "
                                   "to an incompatible broker."),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False, "The broker received an out of order "
                                                "sequence number."),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False, "The broker received a duplicate sequence number."),
    (56, "KAFKA_STORAGE_ERROR", True, "Disk error when trying to access log file on the disk."),
    (74, "FENCED_LEADER_EPOCH", True, "The leader epoch in the request is older than the "
                                      "epoch on the broker."),
    (75, "UNKNOWN_LEADER_EPOCH", True, "The leader epoch in the request is newer than the "
                                       "epoch on the broker."),
    (77, "STALE_BROKER_EPOCH", False, "Broker epoch has changed."),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True, "The preferred leader was not available."),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True, "Eligible topic partition leaders are not "
                                                 "available."),
    (84, "ELECTION_NOT_NEEDED", True, "Leader election not needed for topic partition."),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False, "No partition reassignment is in progress."),
]

NAMES: dict[int, str] = {code: name for code, name, _, _ in _TABLE}
CODES: dict[str, int] = {name: code for code, name, _, _ in _TABLE}
NONE = 0
assert len(NAMES) == len(_TABLE) and len(CODES) == len(_TABLE)


class KafkaError(Exception):
    """A broker error. ``code`` and ``name`` are Kafka's; ``retriable`` as Kafka."""

    code = -1
    name = "UNKNOWN_SERVER_ERROR"
    retriable = False
    default_message = ""

    def __init__(self, message: str | None = None):
        super().__init__(f"{self.name}: {message or self.default_message}")
        self.message = message or self.default_message


_CLASSES: dict[int, type[KafkaError]] = {}


def _class_name(name: str) -> str:
    words = "".join(w.capitalize() for w in name.lower().split("_"))
    return words if words.endswith(("Error", "Exception")) else words + "Error"


for _code, _name, _retriable, _message in _TABLE:
    if _code == 0:
        continue
    _cls = type(_class_name(_name), (KafkaError,), {
        "code": _code, "name": _name, "retriable": _retriable, "default_message": _message,
        "__doc__": _message})
    _CLASSES[_code] = _cls
    globals()[_cls.__name__] = _cls


def error_for(code: int) -> type[KafkaError]:
    """The exception class for a code; unknown codes map to UnknownServerError."""
    return _CLASSES.get(code, _CLASSES[-1])


def raise_for(code: int, message: str | None = None) -> None:
    if code != NONE:
        if code not in _CLASSES:
            raise _CLASSES[-1](f"unknown error code {code}: {message or ''}")
        raise _CLASSES[code](message)


def code_of(name: str) -> int:
    return CODES[name]


def name_of(code: int) -> str:
    return NAMES.get(code, f"UNKNOWN_CODE_{code}")


def code_for_exception(e: BaseException) -> int:
    """Storage and codec errors carry their Kafka name; anything else is unexpected."""
    if isinstance(e, KafkaError):
        return e.code
    name = getattr(e, "kafka_error", None)
    if name is None and type(e).__name__ == "CorruptRecordError":
        name = "CORRUPT_MESSAGE"
    return CODES.get(name or "", -1)
