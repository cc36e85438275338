"""The transaction APIs' bodies as the shell builds them: the merge of per-shard
answers of a request naming transactional ids of several partitions (a whole request's
error answer is the core's ``node.core.txn.shard.error_response``).

Bodies are the Kafka messages' fields at the newest version (``node.kafka.dicts``).
AddPartitionsToTxn has two shapes: v4+ batches ``transactions`` (answered per
transaction in ``results_by_transaction``), v0-3 names one id in the ``v3_and_below_*``
fields (answered in ``results_by_topic_v3_and_below``).
"""
from __future__ import annotations

from node.core.txn.shard import error_response
from node.kafka.dicts import default_dict
from node.kafka.protocol import response_class
from node.wire.errors import ErrorCode
from node.wire.protocol import ApiKey

__all__ = ["ADD_PARTITIONS_BATCHED_FROM", "error_body", "merge_add_partitions",
           "merge_describe", "merge_list"]

# AddPartitionsToTxn from this version batches transactions (KIP-890).
ADD_PARTITIONS_BATCHED_FROM = 4


def error_body(api_key: int, body: dict, code: int) -> dict:
    """The answer to the whole request with ``code``."""
    return error_response(api_key, body, code)


def merge_add_partitions(answers: list[dict], *, refused: list[dict] = (),
                         v3_topics: list[dict] | None = None) -> dict:
    """AddPartitionsToTxn's answer from its shards' (v4+) and the transactions ``refused``
    before asking them; or (v0-3) the per-topic results ``v3_topics``."""
    out = default_dict(response_class(ApiKey.ADD_PARTITIONS_TO_TXN))
    out["results_by_transaction"].extend(refused)
    if v3_topics is not None:
        out["results_by_topic_v3_and_below"] = v3_topics
    for answer in answers:
        out["results_by_transaction"].extend(answer.get("results_by_transaction") or ())
        if answer.get("error_code") and not out["error_code"]:
            out["error_code"] = answer["error_code"]
    return out


def merge_describe(answers: list[tuple[list[int], dict]], ids: list[str]) -> dict:
    """DescribeTransactions' answer in the request's order; an id a shard did not answer
    gets UNKNOWN_SERVER_ERROR."""
    results: list = [None] * len(ids)
    for indexes, answer in answers:
        states = {s.get("transactional_id"): s for s in answer.get("transaction_states") or ()}
        for i in indexes:
            results[i] = states.get(ids[i])
    for i, result in enumerate(results):
        if result is None:
            results[i] = error_response(ApiKey.DESCRIBE_TRANSACTIONS,
                                        {"transactional_ids": [ids[i]]},
                                        ErrorCode.UNKNOWN_SERVER_ERROR)["transaction_states"][0]
    out = default_dict(response_class(ApiKey.DESCRIBE_TRANSACTIONS))
    out["transaction_states"] = results
    return out


def merge_list(answers: list[dict]) -> dict:
    """ListTransactions' answer from every shard's: all their transactions, the first
    error, the unknown state filters each named."""
    out = default_dict(response_class(ApiKey.LIST_TRANSACTIONS))
    unknown: list[str] = []
    for answer in answers:
        out["transaction_states"].extend(answer.get("transaction_states") or ())
        if answer.get("error_code") and not out["error_code"]:
            out["error_code"] = answer["error_code"]
        for name in answer.get("unknown_state_filters") or ():
            if name not in unknown:
                unknown.append(name)
    out["unknown_state_filters"] = unknown
    return out
