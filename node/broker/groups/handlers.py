"""The native handlers of the group coordinator's APIs (``kafka_apis.HANDLERS``).

Bodies are Kafka's messages as dicts (``node.broker.groups.bodies``), at the newest
version this broker knows; a Kafka-wire request carries its client's version in
``kafka_version`` (``KAFKA_VERSION``; absent: the newest), which the shard's
version-dependent rules see.

- FindCoordinator: GROUP keys (``__consumer_offsets``) and TRANSACTION keys
  (``__transaction_state``, ``node.broker.txn``); other types INVALID_REQUEST. Creates
  the coordinator's topic on first use and answers COORDINATOR_NOT_AVAILABLE until the
  metadata shows it (as Kafka); then the leader of the key's partition, with the
  native listener's host and port (the Kafka translation puts its own listener's).
- A request naming one group goes to the shard of its partition; NOT_COORDINATOR if
  this broker does not lead it, COORDINATOR_LOAD_IN_PROGRESS while it loads.
- TxnOffsetCommit, with ``transaction.partition.verification.enable`` (KIP-890 part 1,
  as Kafka 3.6+ verifies it): the transaction coordinator is asked first whether the
  group's ``__consumer_offsets`` partition is in the producer's transaction
  (AddPartitionsToTxn verify_only, ``node.broker.apis.txn_verify``), under the same
  guard a Produce takes (a marker landing meanwhile voids it). Not in it: the
  coordinator's TRANSACTION_ABORTABLE (INVALID_TXN_STATE before v4) or INVALID_TXN_STATE
  (a zombie's late commit is refused instead of joining a later transaction of the same
  producer id); fenced: INVALID_PRODUCER_EPOCH; the coordinator
  unreachable or busy: COORDINATOR_LOAD_IN_PROGRESS (every client retries it).
- DescribeGroups, DeleteGroups, OffsetFetch (groups) and ConsumerGroupDescribe are
  split per partition and the answers merged in the request's order; ListGroups asks
  every partition this broker leads.
"""
from __future__ import annotations

from node.broker.groups import bodies
from node.kafka.dicts import check
from node.kafka.protocol import request_class
from node.wire import protocol
from node.wire.errors import ErrorCode
from node.wire.protocol import OFFSETS_TOPIC, ApiKey

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
    runtime = _runtime(apis, key_type)
    if runtime is not None and not runtime.creator.exists():
        runtime.creator.ensure()
    out = [_coordinator(apis, key_type, key) for key in keys]
    apis.send_response(identity, request.correlation_id, request.api_key,
                       {"throttle_time_ms": 0, "coordinators": out})


def _runtime(apis, key_type: int):
    """The coordinator serving ``key_type``'s keys (None: an unknown type)."""
    if key_type == KEY_TYPE_GROUP:
        return apis.groups
    if key_type == KEY_TYPE_TRANSACTION:
        return apis.txn
    return None


def _coordinator(apis, key_type: int, key: str) -> dict:
    entry = {"key": key, "node_id": -1, "host": "", "port": -1,
             "error_code": ErrorCode.NONE, "error_message": None}
    runtime = _runtime(apis, key_type)
    if runtime is None:
        entry.update(error_code=ErrorCode.INVALID_REQUEST,
                     error_message=f"unknown coordinator key type {key_type}")
        return entry
    topic = runtime.topic
    if not runtime.creator.exists():
        entry.update(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     error_message=f"{topic} is being created")
        return entry
    partition = runtime.partition_of(key)
    meta = apis.metadata.partition(topic, partition)
    leader = -1 if meta is None else meta.leader
    address = apis.metadata.brokers.get(leader)
    if address is None:
        entry.update(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     error_message=f"{topic}-{partition} has no leader")
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
    partition = runtime.partition_of(group_id)
    answer = _answerer(apis, identity, request)

    def call() -> None:
        runtime.call(partition, request.api_key, version, body, answer,
                     client_id=request.client_id, client_host=_client_host(identity))
    if request.api_key == ApiKey.TXN_OFFSET_COMMIT and \
            getattr(apis.config, "transaction_partition_verification_enable", False) and \
            runtime.state_of(partition) == ErrorCode.NONE:
        _verify_txn_offset_commit(apis, version, body, partition, call, answer)
        return
    call()


TXN_OFFSET_COMMIT_ABORTABLE_FROM = 4    # Kafka's: TRANSACTION_ABORTABLE from v4 (KIP-890)
# Verification failures the client is told to retry (the coordinator was not reached,
# was loading or was completing the previous transaction).
_VERIFY_RETRIABLE = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                               ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                               ErrorCode.CONCURRENT_TRANSACTIONS,
                               ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})


def _verify_txn_offset_commit(apis, version: int, body: dict, partition: int, call,
                              answer) -> None:
    """KIP-890 part 1 for TxnOffsetCommit (rules in the module docstring)."""
    from node.broker.apis import txn_verify   # here: node.broker.apis imports this module
    tid, pid, epoch = body["transactional_id"], body["producer_id"], body["producer_epoch"]
    if not isinstance(tid, str) or not isinstance(pid, int) or pid < 0 or \
            not isinstance(epoch, int) or epoch < 0:
        call()                                   # the shard refuses it (INVALID_REQUEST)
        return
    key = (OFFSETS_TOPIC, partition)
    guard = apis.txn_guards.start(key, pid)

    def verified(outcome: dict) -> None:
        code = outcome.get(key, ErrorCode.INVALID_TXN_STATE)
        if not code and not apis.txn_guards.holds(key, pid, guard):
            code = ErrorCode.INVALID_TXN_STATE   # its transaction ended meanwhile
        apis.txn_guards.clear(key, pid)
        if code:
            if code in _VERIFY_RETRIABLE:
                code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            elif code == ErrorCode.TRANSACTION_ABORTABLE and \
                    version < TXN_OFFSET_COMMIT_ABORTABLE_FROM:
                code = ErrorCode.INVALID_TXN_STATE
            answer(bodies.error_body(ApiKey.TXN_OFFSET_COMMIT, body, code))
            return
        call()
    txn_verify.verify(apis, tid, (pid, epoch), [key], verified)


# ------------------------------------------------------------------ several groups

class _Merge:
    """Collects the per-partition answers of one request; answers once all are in."""

    def __init__(self, api_key: int, group_ids: list[str], parts: int, answer) -> None:
        self.api_key = api_key
        self.group_ids = group_ids
        self.left = parts
        self.answers: list = []
        self.answer = answer

    def part(self, indexes: list[int]):
        def done(body: dict) -> None:
            self.answers.append((indexes, body))
            self.left -= 1
            assert self.left >= 0
            if not self.left:
                self.answer(bodies.merge(self.api_key, self.answers, self.group_ids))
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
        answer(bodies.merge(api_key, [], []))
        return
    merge = _Merge(api_key, list(groups), len(by_partition), answer)
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
