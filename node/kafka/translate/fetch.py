"""Fetch (v4-13) through the native handler (``node.broker.apis.fetch``).

- Fetch sessions are declined (KIP-227 allows it): every answer has session id 0 and
  every request is a full one; a request naming a session (id != 0) gets
  FETCH_SESSION_ID_NOT_FOUND, after which a client fetches without one.
- The native handler reads below the HW, checks the current leader epoch (KIP-320:
  FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) and parks a fetch with fewer than
  ``min_bytes`` in the purgatory (long poll) until bytes arrive or ``max_wait_ms``.
- Our batches become Kafka v2 batches (``node.kafka.records.log_to_kafka``), compressed
  as the topic's (else the broker's) ``compression.type`` says (``producer``: as the
  producer sent them).
- READ_COMMITTED (KIP-98) reads below the last stable offset and gets the aborted
  transactions overlapping what it read (the native handler's); every partition carries
  the last stable offset. Control batches pass as Kafka's control batches.
- v12+: a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH carries the
  current leader and epoch this broker knows (KIP-951's CurrentLeader).
- v13 names topics by id (KIP-516): an id this broker does not know is UNKNOWN_TOPIC_ID.
- Every request is a consumer's (replica id -1): followers replicate over the native wire.
"""
from __future__ import annotations

from node.kafka.protocol.messages import FetchResponse
from node.kafka.records import RecordError, log_to_kafka
from node.kafka.translate.registry import NativeCall, TranslationBase, register
from node.wire import protocol
from node.wire.errors import ErrorCode
from node.wire.zkdata import topic_id_text

READ_COMMITTED = 1
CURRENT_LEADER_FROM_VERSION = 12
TOPIC_IDS_FROM_VERSION = 13
_LEADER_MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)
# compression.type -> log_to_kafka's compression (None: the batch's own codec).
CODECS = {"producer": None, "uncompressed": "none", "gzip": "gzip", "snappy": "snappy",
          "lz4": "lz4", "zstd": "zstd"}


class Fetch(TranslationBase):
    api_key = 1
    versions = (4, TOPIC_IDS_FROM_VERSION)

    def request(self, ctx, header, request):
        if request.session_id != 0:
            return FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
        by_id = header.api_version >= TOPIC_IDS_FROM_VERSION
        names = ctx.metadata.topic_names
        entries, plan = [], []
        for topic in request.topics:
            name = names.get(topic_id_text(topic.topic_id)) if by_id else topic.topic
            parts = []
            for p in topic.partitions:
                parts.append((p.partition, -1 if name is None else len(entries)))
                if name is not None:
                    entries.append([name, p.partition, p.fetch_offset, p.current_leader_epoch,
                                    p.partition_max_bytes])
            plan.append((topic, name, parts))
        if not entries:
            return self.response(ctx, header, request, {"partitions": []}, [], state=plan)
        return NativeCall(protocol.ApiKey.FETCH, {
            "replica_id": protocol.CONSUMER_REPLICA_ID, "max_wait_ms": request.max_wait_ms,
            "min_bytes": request.min_bytes, "max_bytes": request.max_bytes,
            "isolation_level": request.isolation_level, "partitions": entries}, state=plan)

    def response(self, ctx, header, request, body, frames, state=()):
        results = body["partitions"]
        version = header.api_version
        committed = request.isolation_level == READ_COMMITTED
        responses = []
        for topic, name, parts in state:
            out = []
            for partition, native in parts:
                if native < 0:
                    out.append(FetchResponse.PartitionData(
                        partition_index=partition, error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                        high_watermark=-1, records=b""))
                    continue
                entry = results[native]
                _, _, error, high_watermark, log_start, _ = entry[:6]
                stable = entry[6] if len(entry) > 6 else high_watermark
                aborted = [FetchResponse.AbortedTransaction(producer_id=pid, first_offset=first)
                           for pid, first in (entry[7] if len(entry) > 7 else ())] \
                    if committed else None
                records = b""
                if len(frames[native]):
                    try:
                        records = log_to_kafka(frames[native],
                                               compression=_compression(ctx, name, partition))
                    except RecordError as e:
                        error, records = e.code, b""
                leader = FetchResponse.LeaderIdAndEpoch()
                if error in _LEADER_MOVED and version >= CURRENT_LEADER_FROM_VERSION:
                    known = ctx.metadata.partition(name, partition)
                    if known is not None and known.leader >= 0 and \
                            ctx.endpoint(known.leader) is not None:
                        leader = FetchResponse.LeaderIdAndEpoch(leader_id=known.leader,
                                                                leader_epoch=known.leader_epoch)
                out.append(FetchResponse.PartitionData(
                    partition_index=partition, error_code=error, high_watermark=high_watermark,
                    last_stable_offset=stable if not error else -1,
                    log_start_offset=log_start, current_leader=leader,
                    aborted_transactions=aborted, preferred_read_replica=-1, records=records))
            responses.append(FetchResponse.FetchableTopicResponse(
                topic=topic.topic if name is None else name, topic_id=topic.topic_id,
                partitions=out))
        return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)

    def error(self, ctx, header, request, code, message):
        return FetchResponse(error_code=code, session_id=0, responses=[
            FetchResponse.FetchableTopicResponse(
                topic=topic.topic, topic_id=topic.topic_id, partitions=[
                    FetchResponse.PartitionData(partition_index=p.partition, error_code=code,
                                                high_watermark=-1, records=b"")
                    for p in topic.partitions]) for topic in request.topics])


def _compression(ctx, topic: str, partition: int) -> str | None:
    part = ctx.replicas.partitions.get((topic, partition))
    setting = getattr(part, "compression_type", None) or ctx.config.compression_type
    return CODECS.get(setting)


register(Fetch())
