"""The broker protocol codec: sans-I/O, one module for the wire format of node/.

Transport: ZeroMQ. A broker listener is a ROUTER socket; a client (producer, consumer,
admin, a follower's fetcher, the controller) talks to it through a DEALER socket, so
the ROUTER adds/strips the identity frame and everything below is what a DEALER sees.

Request, a multipart message:

    frame 0  header  msgpack [api_key, api_version, correlation_id, client_id]
    frame 1  body    msgpack (the API's body, described below)
    frame 2+ record-batch frames (Produce only): one frame per partition entry of the
             body, each holding one or more whole record batches back to back

Response:

    frame 0  header  msgpack [correlation_id, api_key]
    frame 1  body    msgpack
    frame 2+ record-batch frames (Fetch only): one frame per partition entry of the
             body, possibly empty

Record batches never go through msgpack: the broker appends the producer's frame as it
came and a fetch response carries a zero-copy view of the log.

Bodies (msgpack maps with string keys; "partition entries" are lists in a fixed field
order to keep the hot paths cheap). Names are Kafka's. ``error`` is an int code of
``node.wire.errors`` (0 = NONE).

PRODUCE (0)
  req  {"acks": -1|0|1, "timeout_ms": int, "partitions": [[topic, partition], ...]}
       + one batch frame per partition entry
       optional "transactional_id": str (Kafka's; KIP-890: the leader asks this id's
       transaction coordinator before a producer's first transactional batch on a
       partition, node.broker.apis.txn_rules)
  resp {"partitions": [[topic, partition, error, base_offset, log_start_offset,
                        error_message|None], ...]}
       acks=0: the broker sends no response at all - unless the request has
       "answer_acks_0": true (the Kafka listener's, to close the connection of an acks=0
       producer whose write failed, as Kafka does): then it is answered after the append.
FETCH (1)
  req  {"replica_id": int (-1 for a consumer, the broker id for a follower),
        "max_wait_ms": int, "min_bytes": int, "max_bytes": int,
        "partitions": [[topic, partition, fetch_offset, current_leader_epoch (-1 = no
                        check), partition_max_bytes], ...]}
       optional "isolation_level": 0 (read_uncommitted) | 1 (read_committed: below the
       last stable offset, with the aborted transactions of what was read)
  resp {"partitions": [[topic, partition, error, high_watermark, log_start_offset,
                        log_end_offset, last_stable_offset, aborted], ...]}
       + one batch frame per entry (b"" if none); aborted = [[producer_id,
       first_offset], ...] (read_committed only, else [])
       Consumers get batches below the HW only; followers get batches up to the LEO.
       ``log_end_offset`` is the leader's LEO (a follower that fetched past it after a
       leader change uses it to truncate; Kafka asks with ListOffsets instead).
LIST_OFFSETS (2)
  req  {"replica_id": int, "partitions": [[topic, partition, timestamp_ms
                                           (, current_leader_epoch)], ...]}
       optional "isolation_level": 1 = read_committed (latest = the last stable offset)
       timestamp -1 = latest (HW for consumers), -2 = earliest (log start), -3 = the
       record with the largest timestamp (KIP-734), >= 0: the first record whose
       timestamp is at or after it (time index)
  resp {"partitions": [[topic, partition, error, timestamp_ms, offset
                        (, leader_epoch)], ...]}
       by time: that record's own timestamp and offset, or -1, -1 when none is (below
       the HW for consumers); other negative times: INVALID_REQUEST. An entry with a
       current leader epoch (-1: not checked) is checked as a fetch's (KIP-320:
       FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) and answered with the leader epoch
       (latest: the leader's; -1 otherwise)
METADATA (3)
  req  {"topics": None | [topic, ...]}          None = every topic
  resp {"brokers": [[id, host, port, rack|None], ...], "controller_id": int (-1),
        "topics": [[topic, error, [[partition, error, leader (-1 = none),
                    leader_epoch, replicas, isr, offline_replicas], ...]], ...],
        "topic_ids": {topic: id} (KIP-516, of the topics answered that have one)}
Every controller -> broker request may carry "broker_epoch": int, the epoch (the
registration's czxid) of the broker it is meant for (KIP-380); a broker refuses one
meant for another incarnation with {"error": STALE_BROKER_EPOCH} (absent or -1: not
checked).
LEADER_AND_ISR (4)            controller -> broker
  req  {"controller_id": int, "controller_epoch": int,
        "partitions": [[topic, partition, leader, leader_epoch, isr, zk_version,
                        replicas, is_new, elr, leader_recovery_state], ...],
        "live_leaders": [[id, host, port], ...]}
  resp {"error": int, "partitions": [[topic, partition, error], ...]}
       INELIGIBLE_REPLICA for a partition the broker is told to lead but lost committed
       data of (unless leader_recovery_state is 1, RECOVERING: an unclean recovery)
STOP_REPLICA (5)              controller -> broker
  req  {"controller_id": int, "controller_epoch": int, "delete_partitions": bool,
        "partitions": [[topic, partition, leader_epoch (-1 = any)], ...]}
  resp {"error": int, "partitions": [[topic, partition, error], ...]}
UPDATE_METADATA (6)           controller -> broker
  req  {"controller_id": int, "controller_epoch": int,
        "brokers": [[id, host, port, rack|None(, {listener: [host, port]})], ...],
        "partitions": [[topic, partition, leader, leader_epoch, isr, zk_version,
                        replicas, offline_replicas], ...],
        "topic_ids": {topic: id} (optional; KIP-516, Kafka's text form)}
       a broker's fifth field names its listeners other than the native one (KAFKA)
  resp {"error": int}
CONTROLLED_SHUTDOWN (7)       broker -> controller
  req  {"broker_id": int, "broker_epoch": int}
  resp {"error": int, "remaining_partitions": [[topic, partition], ...]}
API_VERSIONS (18)             any broker (Kafka's; answered whatever version it asks in)
  req  {}
  resp {"error": int, "api_keys": [[api_key, min_version, max_version], ...]}
       Every other request in a version outside its range gets {"error":
       UNSUPPORTED_VERSION, "error_message": ...} and nothing else.
CREATE_TOPICS (19)            any broker (writes the coordinator, as Kafka's ZK mode)
  CreateTopics, CreatePartitions and DeleteTopics with timeout_ms > 0 (and not
  validate_only) are answered once the broker's metadata shows what they accepted
  (every new partition led / the topic gone), or at timeout_ms with REQUEST_TIMED_OUT
  for the topics not there yet (Kafka's DelayedCreatePartitions / DelayedDeleteTopics)
  req  {"topics": [[name, num_partitions (-1 = num.partitions), replication_factor
                    (-1 = default.replication.factor), assignment | None
                    ({partition: [broker ids]}), configs {key: value}], ...],
        "timeout_ms": int, "validate_only": bool, "include_configs": bool (optional)}
  resp {"topics": [[name, error, error_message|None], ...],
        "topic_ids": {name: id} (KIP-516, of the topics created),
        "partition_counts": {name: partitions} (of the topics created),
        "details": {name: [num_partitions, replication_factor, config entries (as
                    DESCRIBE_CONFIGS' include_sources)]}   (include_configs only)}
DELETE_TOPICS (20)
  req  {"topics": [name, ...], "timeout_ms": int}
  resp {"topics": [[name, error, error_message|None], ...]}
       TOPIC_DELETION_DISABLED for every topic when delete.topic.enable is false
DELETE_RECORDS (21)           the leader of each partition (Kafka's DeleteRecords)
  req  {"partitions": [[topic, partition, offset (-1 = the high watermark)], ...],
        "timeout_ms": int}
  resp {"partitions": [[topic, partition, error, low_watermark], ...]}
       Moves the log start offset up to ``offset`` (never down); followers follow
       through the log start offset of their fetch answers. OFFSET_OUT_OF_RANGE past the
       high watermark; low_watermark is the leader's new log start offset (-1 on error).
INIT_PRODUCER_ID (22)         any broker (idempotent producers)
  req  {"producer_id": -1 | id, "producer_epoch": -1 | epoch}
  resp {"error": int, "producer_id": int, "producer_epoch": int}
       -1: a new id (epoch 0); an id and epoch: the same id, the next epoch
       With "transactional_id": str (not None) the request is the transaction
       coordinator's (the leader of the id's __transaction_state partition, found with
       FIND_COORDINATOR key_type 1): body and answer are Kafka's InitProducerId fields
       ("transaction_timeout_ms", "producer_id", "producer_epoch"; "error_code", ...).
TRANSACTION COORDINATOR (node.broker.txn): ADD_PARTITIONS_TO_TXN (24, v4+'s batched
  "transactions" with "verify_only", which partition leaders send), ADD_OFFSETS_TO_TXN
  (25), END_TXN (26), DESCRIBE_TRANSACTIONS (65), LIST_TRANSACTIONS (66): bodies are
  Kafka's request/response fields as dicts at the newest version (optional
  "kafka_version" for an older one's rules), as the group APIs'; NOT_COORDINATOR /
  COORDINATOR_LOAD_IN_PROGRESS from a broker not (yet) serving the id's partition.
OFFSET_FOR_LEADER_EPOCH (23)  follower -> leader (KIP-101/279)
  req  {"replica_id": int, "partitions": [[topic, partition, current_leader_epoch,
                                           leader_epoch], ...]}
  resp {"partitions": [[topic, partition, error, leader_epoch, end_offset], ...]}
       end_offset -1 (UNDEFINED_EPOCH_OFFSET) when the leader knows no such epoch
WRITE_TXN_MARKERS (27)        coordinator's broker -> partition leader (transactions)
  req/resp: Kafka's WriteTxnMarkersRequest/Response fields as dicts
       (node.broker.apis.txn_markers); answered per partition once the marker is
       committed (acks=all)
TXN_OFFSET_COMMIT (28)        the group's coordinator (transactions; a group API)
  req/resp: Kafka's TxnOffsetCommitRequest/Response fields as dicts, as the other group
       APIs (node.broker.groups); the offsets are written as the producer's
       transactional records and stay pending until its marker (node.core.groups)
DESCRIBE_CONFIGS (32)
  req  {"topics": [name, ...], "brokers": [id, ...] (optional),
        "include_sources": bool (optional), "keys": {name or str(id): [key, ...]}
        (optional: only these keys)}
  resp {"topics": [[name, error, {key: value}], ...],
        "brokers": [[id, error, {key: value}], ...]}   a broker describes itself only
                                                        (others: INVALID_REQUEST)
       With include_sources each entry gains a 4th field: [[key, value, source,
       read_only, sensitive, synonyms [[key, value, source], ...], type], ...]
       (Kafka's ConfigSource and ConfigType numbers).
DESCRIBE_LOG_DIRS (35)        any broker, about its own log directories
  req  {"partitions": None (all) | [[topic, partition], ...]}
  resp {"error": int, "log_dirs": [[path, error, total_bytes, usable_bytes,
                                    [[topic, partition, size_bytes, offset_lag], ...]],
                                   ...]}
       error KAFKA_STORAGE_ERROR for a directory that went offline; offset_lag is the
       high watermark's distance to the log end (Kafka's, for a current replica)
CREATE_PARTITIONS (37)
  req  {"topics": [[name, new_total_count, assignment | None], ...], "timeout_ms": int,
        "validate_only": bool (optional)}
  resp {"topics": [[name, error, error_message|None], ...]}
ELECT_LEADERS (43)            any broker (-> /admin/preferred_replica_election)
  req  {"election_type": 0 (preferred) | 1 (unclean),
        "partitions": None | [[topic, partition], ...], "timeout_ms": int}
       None: every partition of the broker's metadata, each answered (Kafka's way)
  resp {"error": int, "partitions": [[topic, partition, error, error_message|None], ...]}
INCREMENTAL_ALTER_CONFIGS (44)   any broker (-> /config/topics/T, /config/brokers/<id>,
                                 /config/brokers/<default> for broker name "")
  req  {"resources": [[resource_type (2 topic, 4 broker), name,
                       [[key, op (0 set, 1 delete, 2 append, 3 subtract), value|None],
                        ...]], ...],
        "validate_only": bool, "replace": bool (optional: the SETs are the whole set,
        Kafka's older AlterConfigs)}
  resp {"resources": [[resource_type, name, error, error_message|None], ...]}
ALTER_PARTITION_REASSIGNMENTS (45)   any broker (-> /admin/reassign_partitions)
  req  {"partitions": [[topic, partition, replicas | None (cancel)], ...],
        "timeout_ms": int}
  resp {"error": int, "partitions": [[topic, partition, error, error_message|None], ...]}
LIST_PARTITION_REASSIGNMENTS (46)
  req  {"partitions": None | [[topic, partition], ...]}
  resp {"error": int, "partitions": [[topic, partition, replicas, adding, removing], ...]}
DESCRIBE_CLUSTER (60)         any broker (from its metadata cache)
  req  {}
  resp {"error": int, "cluster_id": str, "controller_id": int,
        "brokers": [[id, host, port, rack|None], ...]}
GET_REPLICA_LOG_INFO (1000)   controller -> broker (KIP-966 unclean recovery)
  req  {"controller_id": int, "controller_epoch": int, "partitions": [[topic, partition], ...]}
  resp {"error": int, "partitions": [[topic, partition, error, last_leader_epoch,
                                      log_end_offset], ...]}

Malformed input raises ``ProtocolError`` here and never anything else; a broker answers
it with INVALID_REQUEST when it can tell the correlation id, and drops it otherwise.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import msgpack

# ------------------------------------------------------------------ limits
# Every bound of the wire format lives here. A request larger than these is refused
# before it is decoded.
HEADER_BYTES_MAX = 4096
BODY_BYTES_MAX = 16 * 1024 * 1024
FRAMES_PER_MESSAGE_MAX = 10_000
PARTITIONS_PER_REQUEST_MAX = 10_000
CLIENT_ID_CHARS_MAX = 256

assert FRAMES_PER_MESSAGE_MAX >= PARTITIONS_PER_REQUEST_MAX + 2 - 2


class ApiKey(enum.IntEnum):
    """Kafka's API keys (the numbers are Kafka's)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    # The group coordinator's APIs (node.broker.groups), Kafka's numbers.
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    # Ours: KIP-966's GetReplicaLogInfo (unclean recovery asks each replica for its
    # log's end), numbered outside Kafka's range since this Kafka has no number for it.
    GET_REPLICA_LOG_INFO = 1000


API_VERSION = 0
# Kafka's internal topic of the group coordinator (node.broker.groups): Metadata marks
# it internal, clients may not produce to it nor delete it.
OFFSETS_TOPIC = "__consumer_offsets"
# The transaction coordinator's (node.broker.txn), internal likewise.
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
# Special values with Kafka's names.
CONSUMER_REPLICA_ID = -1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3          # KIP-734: the record with the largest timestamp
NO_LEADER = -1
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1


class ProtocolError(Exception):
    """The peer sent something that is not a valid message of this protocol."""


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    body: dict
    frames: tuple  # record-batch frames (zmq.Frame, bytes or memoryview)


@dataclass(frozen=True, slots=True)
class Response:
    correlation_id: int
    api_key: int
    body: dict
    frames: tuple


_packer = msgpack.Packer(use_bin_type=True)


def pack(obj) -> bytes:
    return _packer.pack(obj)


def _unpack(data, what: str, limit: int):
    if len(data) > limit:
        raise ProtocolError(f"{what} of {len(data)} bytes exceeds {limit}")
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated types
        # Some (a nesting too deep) carry no message: name the type then.
        raise ProtocolError(f"{what} is not valid msgpack: "
                            f"{str(e) or type(e).__name__}") from None


def encode_request(api_key: int, correlation_id: int, client_id: str, body: dict,
                   frames=(), api_version: int = API_VERSION) -> list:
    """The frames to send on a DEALER socket."""
    return [pack([int(api_key), api_version, correlation_id, client_id]), pack(body),
            *frames]


def encode_response(correlation_id: int, api_key: int, body: dict, frames=()) -> list:
    """The frames to send back (a ROUTER shell prepends the peer identity)."""
    return [pack([correlation_id, int(api_key)]), pack(body), *frames]


def _buffer(frame):
    return frame.buffer if hasattr(frame, "buffer") else frame


def peek_correlation_id(frames) -> int | None:
    """The correlation id of a request that failed to decode, if it can be read."""
    try:
        header = _unpack(_buffer(frames[0]), "header", HEADER_BYTES_MAX)
        cid = header[2]
        return cid if isinstance(cid, int) else None
    except Exception:
        return None


def peek_api_key(frames) -> int | None:
    try:
        key = _unpack(_buffer(frames[0]), "header", HEADER_BYTES_MAX)[0]
        return key if isinstance(key, int) else None
    except Exception:
        return None


def decode_request(frames) -> Request:
    """Frames as received (without the ROUTER identity) -> Request, or ProtocolError."""
    if len(frames) < 2:
        raise ProtocolError(f"a request has at least 2 frames, got {len(frames)}")
    if len(frames) > FRAMES_PER_MESSAGE_MAX:
        raise ProtocolError(f"{len(frames)} frames exceed {FRAMES_PER_MESSAGE_MAX}")
    header = _unpack(_buffer(frames[0]), "header", HEADER_BYTES_MAX)
    if not (isinstance(header, list) and len(header) == 4):
        raise ProtocolError("header must be [api_key, api_version, correlation_id, client_id]")
    api_key, api_version, correlation_id, client_id = header
    if not isinstance(api_key, int) or not isinstance(api_version, int) or \
            not isinstance(correlation_id, int) or not isinstance(client_id, str):
        raise ProtocolError("header fields have the wrong types")
    if len(client_id) > CLIENT_ID_CHARS_MAX:
        raise ProtocolError(f"client_id longer than {CLIENT_ID_CHARS_MAX}")
    body = _unpack(_buffer(frames[1]), "body", BODY_BYTES_MAX)
    if not isinstance(body, dict):
        raise ProtocolError("body must be a map")
    return Request(api_key, api_version, correlation_id, client_id, body, tuple(frames[2:]))


def decode_response(frames) -> Response:
    if len(frames) < 2:
        raise ProtocolError(f"a response has at least 2 frames, got {len(frames)}")
    header = _unpack(_buffer(frames[0]), "header", HEADER_BYTES_MAX)
    if not (isinstance(header, list) and len(header) == 2 and
            all(isinstance(x, int) for x in header)):
        raise ProtocolError("response header must be [correlation_id, api_key]")
    body = _unpack(_buffer(frames[1]), "body", BODY_BYTES_MAX)
    if not isinstance(body, dict):
        raise ProtocolError("body must be a map")
    return Response(header[0], header[1], body, tuple(frames[2:]))


# ------------------------------------------------------------------ body validation
# Small helpers so handlers validate a body in one line and malformed input always
# surfaces as ProtocolError (-> INVALID_REQUEST), never as a KeyError deep inside.

def field(body: dict, name: str, kind, *, optional: bool = False, default=None):
    if name not in body:
        if optional:
            return default
        raise ProtocolError(f"missing field {name!r}")
    value = body[name]
    if value is None and optional:
        return default
    if kind is int and isinstance(value, bool):
        raise ProtocolError(f"field {name!r} must be an int")
    if not isinstance(value, kind):
        raise ProtocolError(f"field {name!r} must be {getattr(kind, '__name__', kind)}")
    return value


def entries(body: dict, name: str, arity: int, *, optional: bool = False) -> list:
    """A list of fixed-arity partition entries whose first two fields are
    (topic: str, partition: int)."""
    items = field(body, name, list, optional=optional, default=None)
    if items is None:
        return None
    if len(items) > PARTITIONS_PER_REQUEST_MAX:
        raise ProtocolError(f"{name}: {len(items)} entries exceed {PARTITIONS_PER_REQUEST_MAX}")
    for item in items:
        if not isinstance(item, list) or len(item) != arity:
            raise ProtocolError(f"{name}: every entry must be a list of {arity} fields")
        if arity >= 2 and not (isinstance(item[0], str) and isinstance(item[1], int)
                               and not isinstance(item[1], bool)):
            raise ProtocolError(f"{name}: an entry must start with (topic, partition)")
    return items
