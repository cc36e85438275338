"""The native handlers of the transaction coordinator's APIs (``kafka_apis.HANDLERS``).

Bodies are Kafka's messages as dicts at the newest version this broker knows; a
Kafka-wire request carries its client's version in ``kafka_version`` (as the group
APIs: ``node.broker.groups.handlers``).

- InitProducerId without a ``transactional_id`` (absent or None) stays the idempotent
  path (``node.broker.apis.admin.producer_ids``); with one, it goes to the shard of the
  id's partition (an empty id: INVALID_REQUEST, as Kafka).
- AddOffsetsToTxn, EndTxn and AddPartitionsToTxn v0-3 name one transactional id: the
  shard of its partition (NOT_COORDINATOR if this broker does not lead it,
  COORDINATOR_LOAD_IN_PROGRESS while it loads).
- AddPartitionsToTxn v4+ (batched, ``verify_only`` from partition leaders) and
  DescribeTransactions are split per partition and the answers merged;
- AddPartitionsToTxn naming a partition the metadata cache does not know is answered
  here, as Kafka's KafkaApis: UNKNOWN_TOPIC_OR_PARTITION for it, OPERATION_NOT_ATTEMPTED
  for the transaction's other partitions (per transaction in a batched request);
  ListTransactions asks every partition this broker leads.
FindCoordinator with key type TRANSACTION is ``node.broker.groups.handlers``'.
"""
from __future__ import annotations

from node.broker.groups.handlers import KAFKA_VERSION, _answerer, _version_and_body
from node.broker.txn import bodies
from node.wire import protocol
from node.wire.errors import ErrorCode
from node.wire.protocol import ApiKey

# Transactional ids in one batched request (a named limit; Kafka has none).
TRANSACTIONAL_IDS_MAX = 10_000


def _check_id(transactional_id) -> str:
    if not isinstance(transactional_id, str):
        raise protocol.ProtocolError("transactional_id must be a string")
    return transactional_id


class _Gather:
    """Collects ``parts`` per-shard answers; ``finish(answers)`` once all are in."""

    def __init__(self, parts: int, finish) -> None:
        assert parts > 0
        self.left = parts
        self.answers: list = []
        self.finish = finish

    def part(self, tag=None):
        def done(body: dict) -> None:
            self.answers.append(body if tag is None else (tag, body))
            self.left -= 1
            assert self.left >= 0
            if not self.left:
                self.finish(self.answers)
        return done


def handle_init_producer_id(apis, identity, request: protocol.Request) -> None:
    raw = request.body
    if not isinstance(raw, dict):
        raise protocol.ProtocolError("the body must be a map")
    if raw.get("transactional_id") is None:            # idempotent, not transactional
        # (imported here: node.broker.apis imports this module)
        from node.broker.apis.admin.producer_ids import init_producer_id
        body = {k: v for k, v in raw.items() if k != KAFKA_VERSION}
        apis.send_response(identity, request.correlation_id, request.api_key,
                           init_producer_id(body, apis.zk, apis.config))
        return
    version, body = _version_and_body(request)
    tid = _check_id(body["transactional_id"])
    answer = _answerer(apis, identity, request)
    if not tid:
        answer(bodies.error_body(ApiKey.INIT_PRODUCER_ID, body, ErrorCode.INVALID_REQUEST))
        return
    runtime = apis.txn
    runtime.call(runtime.partition_of(tid), request.api_key, version, body, answer)


def handle_single_txn_request(apis, identity, request: protocol.Request) -> None:
    """AddOffsetsToTxn, EndTxn, AddPartitionsToTxn v0-3."""
    version, body = _version_and_body(request)
    if request.api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
        if version >= bodies.ADD_PARTITIONS_BATCHED_FROM:
            _add_partitions_batched(apis, identity, request, version, body)
            return
        tid = _check_id(body["v3_and_below_transactional_id"])
        refused = _refused_topics(apis, body["v3_and_below_topics"])
        if refused is not None:
            _answerer(apis, identity, request)(bodies.merge_add_partitions(
                [], v3_topics=refused))
            return
    else:
        tid = _check_id(body["transactional_id"])
    runtime = apis.txn
    runtime.call(runtime.partition_of(tid), request.api_key, version, body,
                 _answerer(apis, identity, request))


def _add_partitions_batched(apis, identity, request, version: int, body: dict) -> None:
    items = body["transactions"] or []
    if len(items) > TRANSACTIONAL_IDS_MAX:
        raise protocol.ProtocolError(f"more than {TRANSACTIONAL_IDS_MAX} transactions")
    runtime = apis.txn
    by_partition: dict[int, list[dict]] = {}
    refused: list[dict] = []       # transactions naming a partition that does not exist
    for item in items:
        tid = _check_id(item["transactional_id"])
        topics = _refused_topics(apis, item["topics"])
        if topics is not None:
            refused.append({"transactional_id": tid, "topic_results": topics})
            continue
        by_partition.setdefault(runtime.partition_of(tid), []).append(item)
    answer = _answerer(apis, identity, request)
    if not by_partition:
        answer(bodies.merge_add_partitions([], refused=refused))
        return
    gather = _Gather(len(by_partition), lambda answers: answer(
        bodies.merge_add_partitions(answers, refused=refused)))
    for partition, part_items in sorted(by_partition.items()):
        runtime.call(partition, request.api_key, version,
                     {**body, "transactions": part_items}, gather.part())


def _refused_topics(apis, topics) -> list[dict] | None:
    """None if every partition of AddPartitionsToTxn's ``topics`` exists (the metadata
    cache knows it); else the per-topic results Kafka's KafkaApis answers without asking
    the coordinator: UNKNOWN_TOPIC_OR_PARTITION for the unknown partitions,
    OPERATION_NOT_ATTEMPTED for the others."""
    results, unknown = [], False
    for topic in topics or ():
        name = topic.get("name")
        parts = []
        for p in topic.get("partitions") or ():
            missing = not isinstance(name, str) or not isinstance(p, int) or \
                apis.metadata.partition(name, p) is None
            unknown = unknown or missing
            parts.append({"partition_index": p, "partition_error_code":
                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if missing
                          else ErrorCode.OPERATION_NOT_ATTEMPTED})
        results.append({"name": name, "results_by_partition": parts})
    return results if unknown else None


def handle_describe_transactions(apis, identity, request: protocol.Request) -> None:
    version, body = _version_and_body(request)
    ids = [_check_id(t) for t in body["transactional_ids"] or ()]
    if len(ids) > TRANSACTIONAL_IDS_MAX:
        raise protocol.ProtocolError(f"more than {TRANSACTIONAL_IDS_MAX} transactional ids")
    runtime = apis.txn
    answer = _answerer(apis, identity, request)
    by_partition: dict[int, list[int]] = {}
    for i, tid in enumerate(ids):
        by_partition.setdefault(runtime.partition_of(tid), []).append(i)
    if not by_partition:
        answer(bodies.merge_describe([], []))
        return
    gather = _Gather(len(by_partition),
                     lambda answers: answer(bodies.merge_describe(answers, ids)))
    for partition, indexes in sorted(by_partition.items()):
        runtime.call(partition, request.api_key, version,
                     {**body, "transactional_ids": [ids[i] for i in indexes]},
                     gather.part(indexes))


def handle_list_transactions(apis, identity, request: protocol.Request) -> None:
    version, body = _version_and_body(request)
    runtime = apis.txn
    answer = _answerer(apis, identity, request)
    if not runtime.creator.exists():
        runtime.creator.ensure()
    partitions = runtime.active_partitions()
    if not partitions:
        answer(bodies.merge_list([]))
        return
    gather = _Gather(len(partitions), lambda answers: answer(bodies.merge_list(answers)))
    for partition in partitions:
        runtime.call(partition, request.api_key, version, body, gather.part())


TXN_HANDLERS = {
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_single_txn_request,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_single_txn_request,
    ApiKey.END_TXN: handle_single_txn_request,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
}
