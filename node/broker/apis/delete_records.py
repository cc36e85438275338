"""DeleteRecords (Kafka's handleDeleteRecordsRequest): the leader moves each partition's
log start offset up to the requested offset (``shm.log.Log.increment_log_start_offset``:
durable first, then whole segments below it go). Followers follow through the log start
offset of their fetch answers (``node.broker.fetcher``).

As Kafka: -1 means the high watermark; an offset above the high watermark or negative
is OFFSET_OUT_OF_RANGE; a replica that is not the leader answers NOT_LEADER_OR_FOLLOWER.
Unlike Kafka, the answer does not wait for the followers' log starts: low_watermark is
the leader's new log start offset.
"""
from __future__ import annotations

from node.broker.apis.common import NONE, not_hosted_error
from node.broker.failures import STORAGE_ERRORS
from node.wire.protocol import INTERNAL_TOPICS
from node.core.replication import Role
from node.wire import errors
from node.wire import protocol
from node.wire.errors import ErrorCode

HIGH_WATERMARK = -1     # Kafka's DeleteRecordsRequest.HIGH_WATERMARK


def handle_delete_records(apis, identity, request: protocol.Request) -> None:
    out = []
    for topic, partition, offset in protocol.entries(request.body, "partitions", 3):
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise protocol.ProtocolError("offset must be an int")
        code, low_watermark = _delete_records(apis, topic, partition, offset)
        out.append([topic, partition, code, low_watermark])
    apis.send_response(identity, request.correlation_id, request.api_key, {"partitions": out})


def _delete_records(apis, topic: str, partition: int, offset: int) -> tuple[int, int]:
    replicas = apis.replicas
    if topic in INTERNAL_TOPICS:      # Kafka: "Cannot delete records of internal topic"
        return ErrorCode.INVALID_TOPIC_EXCEPTION, -1
    part = replicas.partitions.get((topic, partition))
    if part is None:
        return not_hosted_error(apis.metadata, topic, partition), -1
    if replicas.is_offline(part):
        return ErrorCode.KAFKA_STORAGE_ERROR, -1
    if part.core.role is not Role.LEADER:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
    log = part.log
    if offset == HIGH_WATERMARK:
        offset = log.high_watermark
    if offset < 0 or offset > log.high_watermark:
        return ErrorCode.OFFSET_OUT_OF_RANGE, -1
    try:
        if log.increment_log_start_offset(offset):
            replicas.mark_dirty(part)
    except STORAGE_ERRORS as e:
        if isinstance(e, OSError):      # a full or failing disk: the dir goes offline
            replicas.storage_failed(part, e)
            return ErrorCode.KAFKA_STORAGE_ERROR, -1
        return errors.code_for_exception(e), -1
    return NONE, log.log_start_offset
