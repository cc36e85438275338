"""CreateTopics, DeleteTopics and CreatePartitions through the native admin handlers
(``node.broker.apis.admin.topics``).

- Any broker serves them (it writes the coordinator, as Kafka's ZK mode), so a client
  that sends them to the controller, as Kafka's do, or elsewhere gets the same answer;
  never NOT_CONTROLLER.
- CreateTopics: -1 partitions / replication factor take the broker's num.partitions /
  default.replication.factor (KIP-464); a manual assignment with them set is
  INVALID_REQUEST; v5+ answers the topic's partitions, replication factor and configs
  (KIP-525), v7+ its topic id (KIP-516). A topic named twice in one request gets
  INVALID_REQUEST (Kafka's rule) from the native handler.
- DeleteTopics v6+ names topics by name or id (an unknown id: UNKNOWN_TOPIC_ID); the
  answer comes once the deletion is queued (the controller deletes in the background).
- CreatePartitions: ``validate_only`` is honoured; a manual assignment lists the new
  partitions' replicas in order.
"""
from __future__ import annotations

from node.kafka.protocol.messages import (CreatePartitionsResponse, CreateTopicsResponse,
                                          DeleteTopicsResponse)
from node.kafka.translate.registry import NativeCall, TranslationBase, register
from node.kafka.translate.metadata import ZERO_UUID, topic_uuid
from node.wire import protocol
from node.wire.errors import ErrorCode
from node.wire.zkdata import topic_id_text


def message_for(code: int, message: str | None) -> str | None:
    """Kafka leaves the message null when there is no error."""
    return None if code == ErrorCode.NONE else message


# ------------------------------------------------------------------ CreateTopics

class CreateTopics(TranslationBase):
    api_key = protocol.ApiKey.CREATE_TOPICS
    versions = (0, 7)

    def request(self, ctx, header, request):
        topics = []
        for topic in request.topics:
            assignment = None
            if topic.assignments:
                assignment = {a.partition_index: list(a.broker_ids)
                              for a in topic.assignments}
                if len(assignment) != len(topic.assignments):
                    raise protocol.ProtocolError(f"topic {topic.name}: a partition is "
                                                 f"assigned twice")
            configs = {}
            for c in topic.configs:
                if c.value is not None:         # null: the default (left out)
                    configs[c.name] = c.value
            topics.append([topic.name, topic.num_partitions, topic.replication_factor,
                           assignment, configs])
        return NativeCall(protocol.ApiKey.CREATE_TOPICS, {
            "topics": topics, "timeout_ms": request.timeout_ms,
            "validate_only": bool(request.validate_only),
            "include_configs": header.api_version >= 5})

    def response(self, ctx, header, request, body, frames):
        details = body.get("details", {})
        topic_ids = body.get("topic_ids", {})
        results = []
        for name, code, message in body["topics"]:
            shape = details.get(name)
            configs = None
            if shape is not None:
                configs = [CreateTopicsResponse.CreatableTopicConfigs(
                    name=key, value=value, read_only=read_only, config_source=source,
                    is_sensitive=sensitive)
                    for key, value, source, read_only, sensitive, _synonyms, _type
                    in shape[2]]
            results.append(CreateTopicsResponse.CreatableTopicResult(
                name=name, topic_id=topic_uuid(topic_ids.get(name)), error_code=code,
                error_message=message_for(code, message),
                num_partitions=shape[0] if shape else -1,
                replication_factor=shape[1] if shape else -1, configs=configs))
        return CreateTopicsResponse(throttle_time_ms=0, topics=results)

    def error(self, ctx, header, request, code, message):
        return CreateTopicsResponse(throttle_time_ms=0, topics=[
            CreateTopicsResponse.CreatableTopicResult(name=t.name, error_code=code,
                                                      error_message=message)
            for t in request.topics])


# ------------------------------------------------------------------ DeleteTopics

class DeleteTopics(TranslationBase):
    api_key = protocol.ApiKey.DELETE_TOPICS
    versions = (0, 6)

    def request(self, ctx, header, request):
        if header.api_version < 6:
            names, unknown_ids = list(request.topic_names), []
        else:
            names, unknown_ids = [], []
            for topic in request.topics:
                name = topic.name if topic.name is not None else \
                    ctx.metadata.topic_names.get(topic_id_text(topic.topic_id))
                if name is None:
                    unknown_ids.append(topic.topic_id)
                else:
                    names.append(name)
        # The ids now: once a deletion is done the metadata has forgotten them.
        state = (unknown_ids, {n: ctx.metadata.topic_ids.get(n) for n in names})
        if not names:
            return self.response(ctx, header, request, {"topics": []}, [], state=state)
        return NativeCall(protocol.ApiKey.DELETE_TOPICS,
                          {"topics": names, "timeout_ms": request.timeout_ms}, state=state)

    def response(self, ctx, header, request, body, frames, state=((), {})):
        unknown_ids, ids = state
        out = [DeleteTopicsResponse.DeletableTopicResult(
            name=name, topic_id=topic_uuid(ids.get(name)), error_code=code,
            error_message=message_for(code, message))
            for name, code, message in body["topics"]]
        out += [DeleteTopicsResponse.DeletableTopicResult(
            name=None, topic_id=topic_id, error_code=ErrorCode.UNKNOWN_TOPIC_ID,
            error_message=f"Topic id {topic_id} does not exist.") for topic_id in unknown_ids]
        return DeleteTopicsResponse(throttle_time_ms=0, responses=out)

    def error(self, ctx, header, request, code, message):
        if header.api_version < 6:
            named = [(n, ZERO_UUID) for n in request.topic_names]
        else:
            named = [(t.name, t.topic_id) for t in request.topics]
        return DeleteTopicsResponse(throttle_time_ms=0, responses=[
            DeleteTopicsResponse.DeletableTopicResult(name=n, topic_id=i, error_code=code,
                                                      error_message=message)
            for n, i in named])


# ------------------------------------------------------------------ CreatePartitions

class CreatePartitions(TranslationBase):
    api_key = protocol.ApiKey.CREATE_PARTITIONS
    versions = (0, 3)

    def request(self, ctx, header, request):
        topics = []
        for topic in request.topics:
            assignment = None if topic.assignments is None else \
                [list(a.broker_ids) for a in topic.assignments]
            topics.append([topic.name, topic.count, assignment])
        return NativeCall(protocol.ApiKey.CREATE_PARTITIONS, {
            "topics": topics, "timeout_ms": request.timeout_ms,
            "validate_only": bool(request.validate_only)})

    def response(self, ctx, header, request, body, frames):
        return CreatePartitionsResponse(throttle_time_ms=0, results=[
            CreatePartitionsResponse.CreatePartitionsTopicResult(
                name=name, error_code=code, error_message=message_for(code, message))
            for name, code, message in body["topics"]])

    def error(self, ctx, header, request, code, message):
        return CreatePartitionsResponse(throttle_time_ms=0, results=[
            CreatePartitionsResponse.CreatePartitionsTopicResult(
                name=t.name, error_code=code, error_message=message)
            for t in request.topics])


register(CreateTopics())
register(DeleteTopics())
register(CreatePartitions())
