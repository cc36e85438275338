"""The native handlers of the group coordinator's APIs (``kafka_apis.HANDLERS``).

Bodies are Kafka's messages as dicts (``node.broker.groups.bodies``), at the newest
version this broker knows; a Kafka-wire request carries its client's version in
``kafka_version`` (``KAFKA_VERSION``; absent: the newest), which the shard's
version-dependent rules see.

- FindCoordinator: GROUP keys only (TRANSACTION answers COORDINATOR_NOT_AVAILABLE: this
  broker has no transaction coordinator yet; other types INVALID_REQUEST). Creates
  ``__consumer_offsets`` on first use and answers COORDINATOR_NOT_AVAILABLE until the
  metadata shows it (as Kafka); then the leader of the group's partition, with the
  native listener's host and port (the Kafka translation puts its own listener's).
- A request naming one group goes to the shard of its partition; NOT_COORDINATOR if
  this broker does not lead it, COORDINATOR_LOAD_IN_PROGRESS while it loads.
- DescribeGroups, DeleteGroups, OffsetFetch (groups) and ConsumerGroupDescribe are
  split per partition and the answers merged in the request's order; ListGroups asks
  every partition this broker leads.
"""
from __future__ import annotations

from node.broker.groups import bodies
from node.broker.groups.offsets_topic import OFFSETS_TOPIC
from node.kafka.dicts import check
from node.kafka.protocol import request_class
from node.wire import protocol
from node.wire.errors import ErrorCode
from node.wire.protocol import ApiKey

KAFKA_VERSION = "kafka_version"
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
# FindCoordinator keys in one request (a named limit; Kafka has none).
COORDINATOR_KEYS_MAX = 10_000


def newest_version(api_key: int) -> int:
    try:
        return request_class(api_key).VALID_VERSIONS[1]
    except KeyError:    # a message the generated codec does not have yet
        raise protocol.ProtocolError(f"api key {api_key} is not supported yet") from None


def _answerer(apis, identity, request: protocol.Request):
    def answer(body: dict) -> None:
        apis.send_response(identity, request.correlation_id, request.api_key, body)
    return answer


def _client_host(identity) -> str:
    """Kafka's clientHost ("/127.0.0.1") of a Kafka-wire peer; "" for a native one."""
    peer = getattr(getattr(identity, "connection", None), "peer", None)
    if not isinstance(peer, str):
        return ""
    return "/" + peer.rsplit(":", 1)[0]


def _version_and_body(request: protocol.Request) -> tuple[int, dict]:
    body = request.body
    if not isinstance(body, dict):
        raise protocol.ProtocolError("the body must be a map")
    body = dict(body)
    newest = newest_version(request.api_key)
    version = body.pop(KAFKA_VERSION, newest)
    if not isinstance(version, int) or isinstance(version, bool) or \
            not 0 <= version <= newest:
        raise protocol.ProtocolError(f"{KAFKA_VERSION} must be a version 0..{newest}")
    problem = check(request_class(request.api_key), body)
    if problem:
        raise protocol.ProtocolError(problem)
    return version, bodies.complete(request.api_key, body)


# ------------------------------------------------------------------ FindCoordinator

def handle_find_coordinator(apis, identity, request: protocol.Request) -> None:
    version, body = _version_and_body(request)
    key_type = body["key_type"]
    keys = body["coordinator_keys"] or ([body["key"]] if version < 4 else [])
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise protocol.ProtocolError("coordinator_keys must be a list of strings")
    if len(keys) > COORDINATOR_KEYS_MAX:
        raise protocol.ProtocolError(f"more than {COORDINATOR_KEYS_MAX} coordinator keys")
    runtime = apis.groups
    if key_type == KEY_TYPE_GROUP and not runtime.creator.exists():
        runtime.creator.ensure()
    out = [_coordinator(apis, key_type, key) for key in keys]
    apis.send_response(identity, request.correlation_id, request.api_key,
                       {"throttle_time_ms": 0, "coordinators": out})


def _coordinator(apis, key_type: int, key: str) -> dict:
    entry = {"key": key, "node_id": -1, "host": "", "port": -1,
             "error_code": ErrorCode.NONE, "error_message": None}
    if key_type == KEY_TYPE_TRANSACTION:
        entry.update(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     error_message="this cluster has no transaction coordinator")
        return entry
    if key_type != KEY_TYPE_GROUP:
        entry.update(error_code=ErrorCode.INVALID_REQUEST,
                     error_message=f"unknown coordinator key type {key_type}")
        return entry
    runtime = apis.groups
    if not runtime.creator.exists():
        entry.update(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     error_message=f"{OFFSETS_TOPIC} is being created")
        return entry
    partition = runtime.partition_of(key)
    meta = apis.metadata.partition(OFFSETS_TOPIC, partition)
    leader = -1 if meta is None else meta.leader
    address = apis.metadata.brokers.get(leader)
    if address is None:
        entry.update(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     error_message=f"{OFFSETS_TOPIC}-{partition} has no leader")
        return entry
    entry.update(node_id=leader, host=address[0], port=address[1])
    return entry


# ------------------------------------------------------------------ one group

def handle_group_request(apis, identity, request: protocol.Request) -> None:
    version, body = _version_and_body(request)
    group_id = body[bodies.SINGLE_GROUP_FIELD[request.api_key]]
    if not isinstance(group_id, str):
        raise protocol.ProtocolError("group_id must be a string")
    runtime = apis.groups
    runtime.call(runtime.partition_of(group_id), request.api_key, version, body,
                 _answerer(apis, identity, request), client_id=request.client_id,
                 client_host=_client_host(identity))


# ------------------------------------------------------------------ several groups

class _Merge:
    """Collects the per-partition answers of one request; answers once all are in."""

    def __init__(self, api_key: int, total: int, parts: int, answer) -> None:
        self.api_key = api_key
        self.total = total
        self.left = parts
        self.answers: list = []
        self.answer = answer

    def part(self, indexes: list[int]):
        def done(body: dict) -> None:
            self.answers.append((indexes, body))
            self.left -= 1
            assert self.left >= 0
            if not self.left:
                self.answer(bodies.merge(self.api_key, self.answers, self.total))
        return done


def handle_multi_group_request(apis, identity, request: protocol.Request) -> None:
    version, body = _version_and_body(request)
    api_key = request.api_key
    runtime = apis.groups
    groups = bodies.group_ids(api_key, body)
    by_partition: dict[int, list[int]] = {}
    for i, group in enumerate(groups):
        by_partition.setdefault(runtime.partition_of(group), []).append(i)
    answer = _answerer(apis, identity, request)
    if not by_partition:
        answer(bodies.merge(api_key, [], 0))
        return
    merge = _Merge(api_key, len(groups), len(by_partition), answer)
    for partition, indexes in sorted(by_partition.items()):
        runtime.call(partition, api_key, version, bodies.subset(api_key, body, indexes),
                     merge.part(indexes))


def handle_list_groups(apis, identity, request: protocol.Request) -> None:
    version, body = _version_and_body(request)
    runtime = apis.groups
    answer = _answerer(apis, identity, request)
    partitions = runtime.active_partitions()
    if not runtime.creator.exists():
        runtime.creator.ensure()
    if not partitions:
        answer({"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": []})
        return
    answers: list[dict] = []

    def done(part_body: dict) -> None:
        answers.append(part_body)
        if len(answers) == len(partitions):
            error = next((a.get("error_code") for a in answers if a.get("error_code")),
                         ErrorCode.NONE)
            answer({"throttle_time_ms": 0, "error_code": error,
                    "groups": [g for a in answers for g in a.get("groups") or ()]})

    for partition in partitions:
        runtime.call(partition, ApiKey.LIST_GROUPS, version, body, done)


GROUP_HANDLERS = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.LIST_GROUPS: handle_list_groups,
    **{key: handle_group_request for key in bodies.SINGLE_GROUP_FIELD},
    **{key: handle_multi_group_request for key in bodies.MULTI_GROUP_FIELDS},
}
