"""The transaction APIs' request and response bodies: dicts of the Kafka message's fields
(snake_case, nested structs as dicts, newest version), checked and filled in by
``normalize``; the answers built here."""

from node.kafka.protocol import KafkaProtocolError, codec
from node.kafka.protocol import messages as m

from . import records
from .effects import INVALID_PRODUCER_EPOCH, PRODUCER_FENCED
from .records import RecordError
from .state import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 22, 24, 25, 26
DESCRIBE, LIST = 65, 66
# Below these versions PRODUCER_FENCED is answered INVALID_PRODUCER_EPOCH (as KafkaApis).
PRODUCER_FENCED_FROM = {INIT_PRODUCER_ID: 4, ADD_PARTITIONS: 2, ADD_OFFSETS: 2, END_TXN: 2}


def partitions_of(topics: list[dict]) -> set[tuple[str, int]]:
    return {(t["name"], p) for t in topics for p in t["partitions"]}


def topic_results(topics: list[dict], error_of) -> list[dict]:
    return [{"name": t["name"], "results_by_partition": [
        {"partition_index": p, "partition_error_code": error_of((t["name"], p))}
        for p in t["partitions"]]} for t in topics]


def init_reply(error: int, producer_id: int = NO_PRODUCER_ID,
               producer_epoch: int = NO_PRODUCER_EPOCH) -> dict:
    return body_of(m.InitProducerIdResponse, error_code=error, producer_id=producer_id,
                   producer_epoch=producer_epoch)


def end_reply(error: int, producer_id: int = NO_PRODUCER_ID,
              producer_epoch: int = NO_PRODUCER_EPOCH) -> dict:
    return body_of(m.EndTxnResponse, error_code=error, producer_id=producer_id,
                   producer_epoch=producer_epoch)


def old_fenced(api_key: int, version: int, reply: dict) -> None:
    """PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH everywhere in a reply to an old version."""
    fenced_from = PRODUCER_FENCED_FROM.get(api_key)
    if fenced_from is not None and version < fenced_from:
        _replace_fenced(reply)


def _replace_fenced(reply: dict) -> None:
    for key, value in reply.items():
        if key.endswith("error_code") and value == PRODUCER_FENCED:
            reply[key] = INVALID_PRODUCER_EPOCH
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _replace_fenced(item)


def body_of(cls, **fields) -> dict:
    body = records.defaults_of(cls)
    body.update(fields)
    return body


REQUESTS = {INIT_PRODUCER_ID: m.InitProducerIdRequest,
            ADD_PARTITIONS: m.AddPartitionsToTxnRequest,
            ADD_OFFSETS: m.AddOffsetsToTxnRequest, END_TXN: m.EndTxnRequest,
            DESCRIBE: m.DescribeTransactionsRequest, LIST: m.ListTransactionsRequest}
RESPONSES = {INIT_PRODUCER_ID: m.InitProducerIdResponse,
             ADD_PARTITIONS: m.AddPartitionsToTxnResponse,
             ADD_OFFSETS: m.AddOffsetsToTxnResponse, END_TXN: m.EndTxnResponse,
             DESCRIBE: m.DescribeTransactionsResponse, LIST: m.ListTransactionsResponse}


def normalize(api_key: int, version: int, body) -> dict:
    """The request body with every field (Kafka's defaults for the missing ones), checked by
    encoding it at its version: RecordError if it is not that request."""
    cls = REQUESTS[api_key]
    low, high = cls.VALID_VERSIONS
    try:
        message = records.from_dict(cls, body)
        try:
            codec.encode_body(message, min(max(version, low), high), [])
        except KafkaProtocolError:    # the shell's newest form of an old version
            codec.encode_body(message, high, [])
    except (KafkaProtocolError, TypeError) as e:
        raise RecordError(f"not a {cls.__name__}: {e}") from None
    return records.to_dict(message)


def error_response(api_key: int, body: dict, error: int) -> dict:
    """The answer to a request of ``api_key`` failed as a whole with ``error``
    (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...): the error in every place the
    response has one. ``body`` may be any request dict (what is malformed in it is left
    out of the answer)."""
    out = records.defaults_of(RESPONSES[api_key])
    body = body if isinstance(body, dict) else {}
    if "error_code" in out:
        out["error_code"] = error
    if api_key in (INIT_PRODUCER_ID, END_TXN):
        out["producer_id"], out["producer_epoch"] = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    elif api_key == ADD_PARTITIONS:
        out["results_by_topic_v3_and_below"] = topic_results(
            _well_formed(body.get("v3_and_below_topics")), lambda tp: error)
        out["results_by_transaction"] = [
            {"transactional_id": t.get("transactional_id") or "",
             "topic_results": topic_results(_well_formed(t.get("topics")), lambda tp: error)}
            for t in _list(body.get("transactions")) if isinstance(t, dict)]
    elif api_key == DESCRIBE:
        out["transaction_states"] = [
            {**records.defaults_of(m.DescribeTransactionsResponse.TransactionState),
             "transactional_id": tid, "error_code": error}
            for tid in _list(body.get("transactional_ids")) if isinstance(tid, str)]
    return out


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _well_formed(topics) -> list[dict]:
    """The topics of a request that have a name and a list of int partitions."""
    return [t for t in _list(topics) if isinstance(t, dict) and isinstance(t.get("name"), str)
            and all(isinstance(p, int) for p in _list(t.get("partitions")))
            and isinstance(t.get("partitions"), list)]
