"""The group APIs' bodies as the shell builds them: which groups a request names, the
error answer to a whole request (Kafka's getErrorResponse: every partition or group,
else the top-level error code), and the merge of per-shard answers of a request naming
several groups.

Bodies are the Kafka messages' fields at the newest version (``node.kafka.dicts``);
answers the shell makes are complete (every field, defaults filled in).
"""
from __future__ import annotations

from node.kafka.dicts import default_dict, nested_class
from node.kafka.protocol import request_class, response_class
from node.wire.protocol import ApiKey, ProtocolError
from node.wire.errors import ErrorCode

# The APIs whose request names one group, by the field holding it.
SINGLE_GROUP_FIELD = {
    ApiKey.JOIN_GROUP: "group_id", ApiKey.SYNC_GROUP: "group_id",
    ApiKey.HEARTBEAT: "group_id", ApiKey.LEAVE_GROUP: "group_id",
    ApiKey.OFFSET_COMMIT: "group_id", ApiKey.OFFSET_DELETE: "group_id",
    ApiKey.CONSUMER_GROUP_HEARTBEAT: "group_id",
    ApiKey.TXN_OFFSET_COMMIT: "group_id",
}
# The APIs naming several groups: (request list field, whose items are the group id or
# a dict with "group_id"; response list field of per-group results).
MULTI_GROUP_FIELDS = {
    ApiKey.DESCRIBE_GROUPS: ("groups", "groups"),
    ApiKey.DELETE_GROUPS: ("groups_names", "results"),
    ApiKey.OFFSET_FETCH: ("groups", "groups"),
    ApiKey.CONSUMER_GROUP_DESCRIBE: ("group_ids", "groups"),
}
GROUP_API_KEYS = frozenset(SINGLE_GROUP_FIELD) | frozenset(MULTI_GROUP_FIELDS) | {
    ApiKey.LIST_GROUPS}


def complete(api_key: int, body: dict) -> dict:
    """``body`` with every field of the request (defaults for what it lacks): what the
    shard gets, so it never meets a missing key. Nested structs are completed too."""
    return _complete(default_dict(request_class(api_key)), body,
                     request_class(api_key), api_key)


def _complete(defaults: dict, body: dict, cls, api_key: int) -> dict:
    if not isinstance(body, dict):
        raise ProtocolError(f"{cls.__name__}: expected a map, got {type(body).__name__}")
    out = dict(defaults)
    for key, value in body.items():
        if key not in defaults:
            continue                 # unknown keys are ignored, as Kafka's tagged fields
        out[key] = value
    # nested: lists of structs get each item completed from the struct's defaults
    for key, value in list(out.items()):
        sub = nested_class(cls, key)
        if sub is None or value is None:
            continue
        if isinstance(value, list):
            out[key] = [_complete(default_dict(sub), item, sub, api_key)
                        if isinstance(item, dict) else item for item in value]
        elif isinstance(value, dict):
            out[key] = _complete(default_dict(sub), value, sub, api_key)
    return out


def group_ids(api_key: int, body: dict) -> list[str]:
    """The groups a multi-group request names, in order."""
    field = MULTI_GROUP_FIELDS[api_key][0]
    items = body.get(field) or []
    out = []
    for item in items:
        group = item.get("group_id") if isinstance(item, dict) else item
        if not isinstance(group, str):
            raise ProtocolError(f"{field}: every entry names a group id")
        out.append(group)
    return out


def subset(api_key: int, body: dict, indexes: list[int]) -> dict:
    """The request restricted to the groups at ``indexes`` (a multi-group request split
    per shard)."""
    field = MULTI_GROUP_FIELDS[api_key][0]
    return {**body, field: [body[field][i] for i in indexes]}


def group_error(api_key: int, group_id: str, code: int, request_item=None) -> dict:
    """The per-group result of a multi-group request for a group answered with ``code``
    (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS ...)."""
    cls = response_class(api_key)
    field = MULTI_GROUP_FIELDS[api_key][1]
    sub = nested_class(cls, field)
    out = default_dict(sub)
    out["group_id"] = group_id
    out["error_code"] = code
    if api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:
        out["error_message"] = None
    if api_key == ApiKey.OFFSET_FETCH:
        out["topics"] = []
    return out


def error_body(api_key: int, body: dict, code: int, message: str | None = None) -> dict:
    """The answer to the whole request with ``code``, as Kafka's getErrorResponse."""
    out = default_dict(response_class(api_key))
    if api_key in MULTI_GROUP_FIELDS:
        field = MULTI_GROUP_FIELDS[api_key][1]
        items = body.get(MULTI_GROUP_FIELDS[api_key][0]) or []
        out[field] = [group_error(api_key, item.get("group_id", "") if isinstance(item, dict)
                                  else item, code) for item in items]
        if "error_code" in out:
            out["error_code"] = code
        return out
    if api_key in (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT):
        out["topics"] = [{"name": t.get("name", ""), "partitions": [
            {"partition_index": p.get("partition_index", 0), "error_code": code}
            for p in t.get("partitions") or ()]} for t in body.get("topics") or ()]
        return out
    if api_key == ApiKey.OFFSET_DELETE:
        out["error_code"] = code
        return out
    if api_key == ApiKey.LEAVE_GROUP:
        out["error_code"] = code
        out["members"] = []
        return out
    if "error_code" in out:
        out["error_code"] = code
    if "error_message" in out:
        out["error_message"] = message
    return out


def merge(api_key: int, parts: list[tuple[list[int], dict]], group_ids: list[str]) -> dict:
    """One answer from per-shard answers: ``parts`` is (the indexes of the request's
    groups each answered, its answer); results go back in the request's order. A shard
    answer with fewer groups than it was asked (a whole-request error answer) gives each
    missing group that answer's error (UNKNOWN_SERVER_ERROR if it has none): a client's
    request never stops the broker."""
    field = MULTI_GROUP_FIELDS[api_key][1]
    results: list = [None] * len(group_ids)
    out = default_dict(response_class(api_key))
    for indexes, answer in parts:
        items = answer.get(field) or []
        code = answer.get("error_code") or ErrorCode.UNKNOWN_SERVER_ERROR
        for n, i in enumerate(indexes):
            results[i] = items[n] if n < len(items) else group_error(api_key, group_ids[i], code)
        if answer.get("error_code") and not out.get("error_code"):
            out["error_code"] = answer["error_code"]
    out[field] = [r if r is not None else
                  group_error(api_key, group_ids[i], ErrorCode.UNKNOWN_SERVER_ERROR)
                  for i, r in enumerate(results)]
    return out
