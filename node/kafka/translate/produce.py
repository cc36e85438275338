"""Produce (v3-11) through the native handler (``node.broker.apis.produce``).

Each partition's Kafka record batches (v2) become our log's batches
(``node.kafka.records.kafka_to_log``: producer id, epoch and sequence, timestamps, keys,
values and headers kept) and go to the native handler as that partition's frame, so
acks 0/1/all, min.insync.replicas (NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND),
the idempotent producer's checks (OUT_OF_ORDER_SEQUENCE_NUMBER, a duplicate answered with
its original offsets), transactional batches (KIP-98: INVALID_TXN_STATE; KIP-890's
verification with the request's transactional id) and NOT_LEADER_OR_FOLLOWER are the
native handler's.

Batches that do not convert (a bad CRC, magic 0/1, a codec we cannot read) cost only
their partition: its ``RecordError`` code, and nothing of it reaches the log; the other
partitions go on. The answer lists the topics and partitions in the request's order.
acks=0 gets no answer, as Kafka; if a partition of it failed, the connection is closed
(Kafka's way of telling an acks=0 producer, which then refreshes its metadata). From v10 a partition answered NOT_LEADER_OR_FOLLOWER
names the leader this broker knows and its Kafka endpoint (KIP-951).
"""
from __future__ import annotations

from node.kafka.protocol.messages import ProduceResponse
from node.kafka.records import RecordError, kafka_to_log
from node.kafka.translate.registry import (CLOSE_CONNECTION, NativeCall, TranslationBase,
                                           register)
from node.wire import protocol
from node.wire.errors import ErrorCode

NO_TIMESTAMP = -1
CURRENT_LEADER_FROM_VERSION = 10     # KIP-951


class _Frame:
    """A converted partition's batches as the native handler takes a frame: ``buffer``
    is stamped in place (offsets, leader epoch), without another copy."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: bytearray) -> None:
        self.buffer = buffer

    def __len__(self) -> int:
        return len(self.buffer)


class Produce(TranslationBase):
    api_key = 0
    # v10 adds KIP-951's current leader, v11 only a new error code (transactions).
    versions = (3, 11)

    def request(self, ctx, header, request):
        if request.acks not in (-1, 0, 1):
            return self.error(ctx, header, request, ErrorCode.INVALID_REQUIRED_ACKS,
                              f"acks must be -1, 0 or 1, got {request.acks}")
        entries, frames = [], []
        plan = []       # per partition: (topic, index, native entry or -1, error, message)
        for topic in request.topic_data:
            for part in topic.partition_data:
                if part.records is None:
                    plan.append((topic.name, part.index, -1, ErrorCode.CORRUPT_MESSAGE,
                                 "no records"))
                    continue
                try:
                    data = kafka_to_log(part.records)
                except RecordError as e:
                    plan.append((topic.name, part.index, -1, e.code, str(e)))
                    continue
                plan.append((topic.name, part.index, len(entries), 0, None))
                entries.append([topic.name, part.index])
                frames.append(_Frame(data))
        acks = request.acks
        if not entries:
            return self.response(ctx, header, request, {"partitions": []}, [], state=plan)
        body = {"acks": acks, "timeout_ms": request.timeout_ms, "partitions": entries}
        if request.transactional_id:
            body["transactional_id"] = request.transactional_id   # KIP-890's verification
        if acks == 0:
            body["answer_acks_0"] = True     # to learn whether to close the connection
        return NativeCall(protocol.ApiKey.PRODUCE, body, frames, state=plan)

    def response(self, ctx, header, request, body, frames, state=()):
        results = body["partitions"]
        if request.acks == 0:
            failed = any(error for _, _, native, error, _ in state if native < 0) or \
                any(entry[2] for entry in results)
            return CLOSE_CONNECTION if failed else None
        topics: dict[str, list] = {}
        leaders: set[int] = set()
        with_leader = header.api_version >= CURRENT_LEADER_FROM_VERSION
        for topic, index, native, error, message in state:
            base_offset, log_start = -1, -1
            if native >= 0:
                _, _, error, base_offset, log_start, message = results[native]
            current = ProduceResponse.LeaderIdAndEpoch()
            if with_leader and error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                current = _current_leader(ctx, topic, index)
                if current.leader_id >= 0:
                    leaders.add(current.leader_id)
            topics.setdefault(topic, []).append(ProduceResponse.PartitionProduceResponse(
                index=index, error_code=error, base_offset=base_offset,
                log_append_time_ms=NO_TIMESTAMP, log_start_offset=log_start,
                error_message=message if error else None, current_leader=current))
        return ProduceResponse(
            responses=[ProduceResponse.TopicProduceResponse(name=name, partition_responses=parts)
                       for name, parts in topics.items()],
            throttle_time_ms=0, node_endpoints=_endpoints(ctx, leaders))

    def error(self, ctx, header, request, code, message):
        if request.acks == 0 and code != ErrorCode.INVALID_REQUIRED_ACKS:
            return CLOSE_CONNECTION     # acks=0 is never answered; a failure closes
        return ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(
            name=topic.name, partition_responses=[ProduceResponse.PartitionProduceResponse(
                index=part.index, error_code=code, base_offset=-1, error_message=message)
                for part in topic.partition_data]) for topic in request.topic_data])


def _current_leader(ctx, topic: str, partition: int):
    """KIP-951: the leader this broker knows, if clients can reach it here."""
    known = ctx.metadata.partition(topic, partition)
    if known is None or known.leader < 0 or ctx.endpoint(known.leader) is None:
        return ProduceResponse.LeaderIdAndEpoch()
    return ProduceResponse.LeaderIdAndEpoch(leader_id=known.leader,
                                            leader_epoch=known.leader_epoch)


def _endpoints(ctx, broker_ids) -> list:
    return [ProduceResponse.NodeEndpoint(node_id=i, host=h, port=p, rack=r)
            for i, h, p, r in ctx.brokers() if i in broker_ids]


register(Produce())
