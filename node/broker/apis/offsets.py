"""ListOffsets (an offset by timestamp, or the log's start or end) and
OffsetForLeaderEpoch (where a leader epoch ends in the leader's log: KIP-101's question
a follower asks before it truncates)."""
from __future__ import annotations

from node.broker.apis.common import NONE, not_hosted_error
from node.core.replication import Role
from node.wire import protocol
from node.wire.errors import ErrorCode


def handle_list_offsets(apis, identity, request: protocol.Request) -> None:
    replica_id = protocol.field(request.body, "replica_id", int)
    out = []
    for topic, partition, timestamp in protocol.entries(request.body, "partitions", 3):
        if not isinstance(timestamp, int):
            raise protocol.ProtocolError("timestamp must be an int")
        part = apis.replicas.partitions.get((topic, partition))
        if part is None:
            out.append([topic, partition, not_hosted_error(apis.metadata, topic, partition),
                        -1, -1])
            continue
        if part.core.role is not Role.LEADER:
            out.append([topic, partition, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1])
            continue
        log = part.log
        limit = log.log_end_offset if replica_id >= 0 else log.high_watermark
        if timestamp == protocol.LATEST_TIMESTAMP:
            out.append([topic, partition, NONE, -1, limit])
        elif timestamp == protocol.EARLIEST_TIMESTAMP:
            out.append([topic, partition, NONE, -1, log.log_start_offset])
        else:
            if timestamp < 0:
                out.append([topic, partition, ErrorCode.INVALID_REQUEST, -1, -1])
                continue
            found = log.entry_for_timestamp(timestamp)
            if found is None or found[0] >= limit:
                out.append([topic, partition, NONE, -1, -1])
            else:   # the record's own timestamp, as Kafka
                out.append([topic, partition, NONE, found[1], found[0]])
    apis.send_response(identity, request.correlation_id, request.api_key, {"partitions": out})


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
