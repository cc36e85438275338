"""WriteTxnMarkers (v0-1) through the native handler (``node.broker.apis.txn_markers``):
sent by a transaction coordinator's broker to partition leaders (Kafka's brokers and
tools speak it too). The request's fields as a dict, the answer dict as the response
(``node.kafka.translate.groups``' generic translation); an error for the whole request
is every partition's."""
from __future__ import annotations

from node.kafka.translate.groups import GroupTranslation
from node.kafka.translate.registry import register
from node.wire.protocol import ApiKey


class WriteTxnMarkers(GroupTranslation):
    def error_body(self, body, code, message):
        return {"markers": [{"producer_id": m["producer_id"], "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p, "error_code": code}
                                               for p in t["partition_indexes"]]}
            for t in m.get("topics") or ()]} for m in body.get("markers") or ()]}


register(WriteTxnMarkers(ApiKey.WRITE_TXN_MARKERS))
