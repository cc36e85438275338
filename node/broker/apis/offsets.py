"""ListOffsets (an offset by timestamp, or the log's start or end) and
OffsetForLeaderEpoch (where a leader epoch ends in the leader's log: KIP-101's question
a follower asks before it truncates)."""
from __future__ import annotations

from node.broker.apis.common import NONE, not_hosted_error
from node.core.replication import Role
from node.wire import protocol
from node.wire.errors import ErrorCode

READ_COMMITTED = 1      # Kafka's isolation level (the body's optional "isolation_level")


def handle_list_offsets(apis, identity, request: protocol.Request) -> None:
    replica_id = protocol.field(request.body, "replica_id", int)
    committed = protocol.field(request.body, "isolation_level", int, optional=True,
                               default=0) == READ_COMMITTED
    out = []
    for entry in _list_offsets_entries(request.body):
        topic, partition, timestamp = entry[:3]
        answer = _list_offset(apis, replica_id, topic, partition, timestamp,
                              entry[3] if len(entry) > 3 else -1, committed)
        # An entry with a current leader epoch (KIP-320) is answered with the epoch.
        out.append([topic, partition, *(answer if len(entry) > 3 else answer[:3])])
    apis.send_response(identity, request.correlation_id, request.api_key, {"partitions": out})


def _list_offsets_entries(body: dict) -> list:
    items = protocol.field(body, "partitions", list)
    if len(items) > protocol.PARTITIONS_PER_REQUEST_MAX:
        raise protocol.ProtocolError(f"partitions: {len(items)} entries exceed "
                                     f"{protocol.PARTITIONS_PER_REQUEST_MAX}")
    for item in items:
        if not (isinstance(item, list) and len(item) in (3, 4) and isinstance(item[0], str)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in item[1:])):
            raise protocol.ProtocolError("partitions entries are [topic, partition, timestamp"
                                         "(, current_leader_epoch)] with int fields")
    return items


def _list_offset(apis, replica_id: int, topic: str, partition: int, timestamp: int,
                 current_epoch: int, committed: bool = False) -> tuple[int, int, int, int]:
    """(error, timestamp, offset, leader epoch) for one partition. A read_committed
    consumer sees up to the last stable offset (Kafka's), others up to the HW."""
    part = apis.replicas.partitions.get((topic, partition))
    if part is None:
        return not_hosted_error(apis.metadata, topic, partition), -1, -1, -1
    if part.core.role is not Role.LEADER:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, -1
    error = part.core.check_fetch_epoch(current_epoch)
    if error:
        return error, -1, -1, -1
    log = part.log
    limit = log.log_end_offset if replica_id >= 0 else \
        log.last_stable_offset() if committed else log.high_watermark
    if timestamp == protocol.LATEST_TIMESTAMP:
        return NONE, -1, limit, part.view.latest_epoch()
    if timestamp == protocol.EARLIEST_TIMESTAMP:
        return NONE, -1, log.log_start_offset, -1
    if timestamp == protocol.MAX_TIMESTAMP:
        found = log.entry_for_max_timestamp()
    elif timestamp < 0:
        return ErrorCode.INVALID_REQUEST, -1, -1, -1
    else:
        found = log.entry_for_timestamp(timestamp)
    if found is None or found[0] >= limit:
        return NONE, -1, -1, -1
    return NONE, found[1], found[0], -1     # the record's own timestamp, as Kafka


def handle_offset_for_leader_epoch(apis, identity, request: protocol.Request) -> None:
    out = []
    for topic, partition, current_epoch, epoch in protocol.entries(request.body, "partitions", 4):
        if not isinstance(current_epoch, int) or not isinstance(epoch, int):
            raise protocol.ProtocolError("epochs must be ints")
        part = apis.replicas.partitions.get((topic, partition))
        if part is None:
            out.append([topic, partition, not_hosted_error(apis.metadata, topic, partition),
                        protocol.UNDEFINED_EPOCH, protocol.UNDEFINED_EPOCH_OFFSET])
            continue
        error, leader_epoch, end_offset = part.core.answer_offset_for_leader_epoch(
            current_epoch, epoch, part.view)
        out.append([topic, partition, error, leader_epoch, end_offset])
    apis.send_response(identity, request.correlation_id, request.api_key, {"partitions": out})
