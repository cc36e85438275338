"""The transaction coordinator's APIs on Kafka's wire: InitProducerId (idempotent and
transactional), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
ListTransactions.

The native handlers (``node.broker.txn.handlers``) take Kafka's messages as dicts at the
newest version, as the group APIs' do, so the group translation serves them
(``node.kafka.translate.groups.GroupTranslation``: the request as a dict plus
``kafka_version``, the answer dict as the response of the client's version). Only the
error answers differ (a per-partition / per-id error where the response has one, the
top-level error code elsewhere), and InitProducerId's idempotent answer, which is the
native ``{"error", "producer_id", "producer_epoch"}``.

Versions advertised: every version the generated codec has (InitProducerId v0-5,
AddPartitionsToTxn v0-5, AddOffsetsToTxn v0-4, EndTxn v0-5, DescribeTransactions v0,
ListTransactions v0-1).
"""
from __future__ import annotations

from node.kafka.dicts import default_dict
from node.kafka.protocol import VALID_VERSIONS, response_class
from node.kafka.translate.groups import GroupTranslation
from node.kafka.translate.registry import register
from node.wire.protocol import ApiKey


class TxnTranslation(GroupTranslation):
    """One transaction API; its whole-request error is the coordinator's."""

    def error_body(self, body, code, message):
        out = default_dict(response_class(self.api_key))
        if "error_code" in out:
            out["error_code"] = code
        if "producer_epoch" in out:
            out["producer_id"], out["producer_epoch"] = -1, -1
        if self.api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
            out["results_by_topic_v3_and_below"] = _topics(body.get("v3_and_below_topics"),
                                                           code)
            out["results_by_transaction"] = [
                {"transactional_id": t["transactional_id"],
                 "topic_results": _topics(t.get("topics"), code)}
                for t in body.get("transactions") or ()]
        elif self.api_key == ApiKey.DESCRIBE_TRANSACTIONS:
            out["transaction_states"] = [{"transactional_id": t, "error_code": code}
                                         for t in body.get("transactional_ids") or ()]
        return out


def _topics(topics, code: int) -> list[dict]:
    return [{"name": t["name"], "results_by_partition": [
        {"partition_index": p, "partition_error_code": code} for p in t["partitions"]]}
        for t in topics or ()]


class InitProducerId(TxnTranslation):
    def from_native(self, ctx, body, version):
        if "error" in body and "error_code" not in body:    # the idempotent path's answer
            body["error_code"] = body.pop("error")
        return body


_CLASSES = {
    ApiKey.INIT_PRODUCER_ID: InitProducerId,
    ApiKey.ADD_PARTITIONS_TO_TXN: TxnTranslation,
    ApiKey.ADD_OFFSETS_TO_TXN: TxnTranslation,
    ApiKey.END_TXN: TxnTranslation,
    ApiKey.DESCRIBE_TRANSACTIONS: TxnTranslation,
    ApiKey.LIST_TRANSACTIONS: TxnTranslation,
}

for _key, _cls in _CLASSES.items():
    if _key in VALID_VERSIONS:      # a message the codec has
        register(_cls(_key))
