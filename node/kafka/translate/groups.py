"""The group coordinator's APIs on Kafka's wire: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch, ListGroups,
DescribeGroups, DeleteGroups, OffsetDelete, ConsumerGroupHeartbeat and
ConsumerGroupDescribe.

The native handlers (``node.broker.groups.handlers``) take Kafka's messages as dicts
at the newest version, so one translation serves them all: the decoded request becomes
a dict (``node.kafka.dicts.to_dict``) plus its version (``kafka_version``, for the
coordinator's version rules), the answer dict becomes the response object of the
client's version (``from_dict``: fields that version lacks are left out). Two APIs
changed shape across versions and are reshaped here:
- FindCoordinator v0-3 names one key and answers one coordinator at the top level
  (v4+: batched ``coordinator_keys``); the coordinator's host and port are this
  listener's (the native answer carries the native ones); a coordinator without a Kafka
  listener is COORDINATOR_NOT_AVAILABLE;
- OffsetFetch v0-7 names one group (v8+: ``groups``); v0-1 have no top-level error code,
  a group error is each partition's.
JoinGroup v0 has no rebalance timeout: it is the session timeout, as in Kafka.

Versions advertised: every version the generated codec has for these messages.
"""
from __future__ import annotations

from node.kafka.dicts import from_dict, to_dict
from node.kafka.protocol import VALID_VERSIONS, response_class
from node.kafka.translate.registry import NativeCall, TranslationBase, register
from node.wire.errors import ErrorCode
from node.wire.protocol import ApiKey

KAFKA_VERSION = "kafka_version"     # node.broker.groups.handlers.KAFKA_VERSION
FIND_COORDINATOR_BATCHED_FROM = 4
OFFSET_FETCH_GROUPS_FROM = 8
OFFSET_FETCH_TOP_LEVEL_ERROR_FROM = 2


class GroupTranslation(TranslationBase):
    """One group API: the request as a dict, the answer dict as the response."""

    def __init__(self, api_key: int) -> None:
        self.api_key = api_key
        self.versions = VALID_VERSIONS[api_key]

    def request(self, ctx, header, request):
        body = self.to_native(to_dict(request), header.api_version)
        body[KAFKA_VERSION] = header.api_version
        return NativeCall(self.api_key, body)

    def response(self, ctx, header, request, body, frames):
        body = self.from_native(ctx, dict(body), header.api_version)
        return from_dict(response_class(self.api_key), body, header.api_version)

    def to_native(self, body: dict, version: int) -> dict:
        return body

    def from_native(self, ctx, body: dict, version: int) -> dict:
        return body

    def error(self, ctx, header, request, code, message):
        return from_dict(response_class(self.api_key),
                         self.from_native(ctx, self.error_body(to_dict(request), code, message),
                                          header.api_version),
                         header.api_version)

    def error_body(self, body: dict, code: int, message) -> dict:
        return {"error_code": code, "error_message": message}


class JoinGroup(GroupTranslation):
    def to_native(self, body, version):
        if version == 0:
            body["rebalance_timeout_ms"] = body["session_timeout_ms"]
        return body


class FindCoordinator(GroupTranslation):
    def to_native(self, body, version):
        if version < FIND_COORDINATOR_BATCHED_FROM:
            body["coordinator_keys"] = [body["key"]]
        return body

    def from_native(self, ctx, body, version):
        coordinators = []
        for c in body.get("coordinators") or ():
            c = dict(c)
            if not c.get("error_code"):
                address = ctx.endpoint(c["node_id"])
                if address is None:
                    c.update(node_id=-1, host="", port=-1,
                             error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             error_message="the coordinator has no Kafka listener")
                else:
                    c.update(host=address[0], port=address[1])
            coordinators.append(c)
        body["coordinators"] = coordinators
        if version < FIND_COORDINATOR_BATCHED_FROM and coordinators:
            first = coordinators[0]
            for name in ("error_code", "error_message", "node_id", "host", "port"):
                body[name] = first[name]
        return body

    def error_body(self, body, code, message):
        keys = body.get("coordinator_keys") or [body.get("key", "")]
        return {"error_code": code, "error_message": message, "coordinators": [
            {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code,
             "error_message": message} for k in keys]}


class OffsetFetch(GroupTranslation):
    def to_native(self, body, version):
        if version < OFFSET_FETCH_GROUPS_FROM:
            body["groups"] = [{"group_id": body.pop("group_id"), "member_id": None,
                               "member_epoch": -1, "topics": body.pop("topics")}]
        return body

    def from_native(self, ctx, body, version):
        if version >= OFFSET_FETCH_GROUPS_FROM:
            return body
        group = (body.get("groups") or [{}])[0]
        error = group.get("error_code", body.get("error_code", 0))
        topics = group.get("topics") or []
        if error and version < OFFSET_FETCH_TOP_LEVEL_ERROR_FROM:
            topics = [{**t, "partitions": [{**p, "error_code": p.get("error_code") or error}
                                           for p in t.get("partitions") or ()]}
                      for t in topics]
        body["topics"] = topics
        body["error_code"] = error
        return body

    def error_body(self, body, code, message):
        groups = body.get("groups") or [{"group_id": body.get("group_id", "")}]
        return {"error_code": code, "groups": [
            {"group_id": g.get("group_id", ""), "topics": [], "error_code": code}
            for g in groups]}


class OffsetCommit(GroupTranslation):
    def error_body(self, body, code, message):
        return {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": code}
            for p in t["partitions"]]} for t in body.get("topics") or ()]}


class OffsetDelete(GroupTranslation):
    def error_body(self, body, code, message):
        return {"error_code": code, "topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": code}
            for p in t["partitions"]]} for t in body.get("topics") or ()]}


class _PerGroup(GroupTranslation):
    """DescribeGroups, DeleteGroups, ConsumerGroupDescribe: a result per group."""

    request_field = ""
    response_field = ""

    def error_body(self, body, code, message):
        return {self.response_field: [
            {"group_id": g, "error_code": code} for g in body.get(self.request_field) or ()]}


class DescribeGroups(_PerGroup):
    request_field, response_field = "groups", "groups"


class DeleteGroups(_PerGroup):
    request_field, response_field = "groups_names", "results"


class ConsumerGroupDescribe(_PerGroup):
    request_field, response_field = "group_ids", "groups"


_CLASSES = {
    ApiKey.FIND_COORDINATOR: FindCoordinator,
    ApiKey.JOIN_GROUP: JoinGroup,
    ApiKey.SYNC_GROUP: GroupTranslation,
    ApiKey.HEARTBEAT: GroupTranslation,
    ApiKey.LEAVE_GROUP: GroupTranslation,
    ApiKey.OFFSET_COMMIT: OffsetCommit,
    ApiKey.TXN_OFFSET_COMMIT: OffsetCommit,     # the same answer's shape
    ApiKey.OFFSET_FETCH: OffsetFetch,
    ApiKey.LIST_GROUPS: GroupTranslation,
    ApiKey.DESCRIBE_GROUPS: DescribeGroups,
    ApiKey.DELETE_GROUPS: DeleteGroups,
    ApiKey.OFFSET_DELETE: OffsetDelete,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: GroupTranslation,
    ApiKey.CONSUMER_GROUP_DESCRIBE: ConsumerGroupDescribe,
}

for _key, _cls in _CLASSES.items():
    if _key in VALID_VERSIONS:      # a message the codec has
        register(_cls(_key))
