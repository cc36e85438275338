"""The records of a ``__transaction_state`` partition, in Kafka's own schemas (Kafka's
TransactionLog): key = int16 version (0) + TransactionLogKey (the transactional id);
value = int16 version + TransactionLogValue, or none (a tombstone: the transactional id
expired). Value version 0 (classic) or 1 (flexible: previous/next producer id and the
client's transaction version as tagged fields), as ``TxnConfig.log_value_version``
(Kafka's: 1 from transaction.version 1).
An Empty transaction's partition list is written as null, as Kafka. Version 0 cannot hold the
tagged fields: they read back as -1 / 0 (Kafka's defaults). Anything malformed
raises ``RecordError`` (the group coordinator's, so a shell catches one type);
an unknown key version raises ``UnknownRecordType`` (Kafka's loader skips those).
"""

import struct

from node.core.groups.records import RECORD_BYTES_MAX, RecordError, UnknownRecordType
from node.core.groups.records import defaults_of, from_dict, to_dict
from node.kafka.protocol import KafkaProtocolError, codec
from node.kafka.protocol import txn_records as tr

from .state import TxnMeta, TxnState

__all__ = ["KEY_VERSION", "RecordError", "UnknownRecordType", "encode", "tombstone",
           "decode"]

KEY_VERSION = 0
_VERSION = struct.Struct(">h")


def _key(transactional_id: str) -> bytes:
    out = [_VERSION.pack(KEY_VERSION)]
    codec.encode_body(tr.TransactionLogKey(transactional_id=transactional_id), KEY_VERSION, out)
    return b"".join(out)


def encode(meta: TxnMeta, value_version: int) -> tuple[bytes, bytes]:
    """The record of a transaction's state (key, value)."""
    assert meta.state not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE), meta
    assert meta.state is not TxnState.EMPTY or not meta.partitions, meta
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    flexible = value_version >= 1      # the tagged fields: absent from version 0
    value = tr.TransactionLogValue(
        producer_id=meta.producer_id,
        previous_producer_id=meta.previous_producer_id if flexible else -1,
        next_producer_id=meta.next_producer_id if flexible else -1,
        producer_epoch=meta.producer_epoch,
        transaction_timeout_ms=meta.timeout_ms, transaction_status=int(meta.state),
        transaction_partitions=(None if meta.state is TxnState.EMPTY else
                                [tr.TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps)
                                 for t, ps in by_topic.items()]),
        transaction_last_update_timestamp_ms=meta.last_update_ms,
        transaction_start_timestamp_ms=meta.start_ms,
        client_transaction_version=meta.client_tv if flexible else 0)
    out = [_VERSION.pack(value_version)]
    try:
        codec.encode_body(value, value_version, out)
    except KafkaProtocolError as e:
        raise RecordError(f"cannot encode {meta}: {e}") from None
    return _key(meta.transactional_id), b"".join(out)


def tombstone(transactional_id: str) -> tuple[bytes, None]:
    return _key(transactional_id), None


def _split(data, what: str):
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise RecordError(f"{what} is not bytes: {type(data).__name__}")
    view = memoryview(data).cast("B")
    if len(view) < 2:
        raise RecordError(f"{what} of {len(view)} bytes has no version")
    if len(view) > RECORD_BYTES_MAX:
        raise RecordError(f"{what} of {len(view)} bytes is over {RECORD_BYTES_MAX}")
    return _VERSION.unpack_from(view)[0], view[2:]


def decode(key, value) -> tuple[str, TxnMeta | None]:
    """(transactional id, its metadata or None for a tombstone)."""
    version, body = _split(key, "TransactionLogKey")
    if version != KEY_VERSION:
        raise UnknownRecordType(f"unknown __transaction_state key version {version}")
    try:
        tid = codec.decode_body(tr.TransactionLogKey, version, body).transactional_id
        if value is None:
            return tid, None
        version, body = _split(value, "TransactionLogValue")
        low, high = tr.TransactionLogValue.VALID_VERSIONS
        if not low <= version <= high:
            raise RecordError(f"TransactionLogValue has no version {version} ({low}-{high})")
        v = codec.decode_body(tr.TransactionLogValue, version, body)
    except KafkaProtocolError as e:
        raise RecordError(f"malformed __transaction_state record: {e}") from None
    try:
        state = TxnState(v.transaction_status)
    except ValueError:
        raise RecordError(f"{tid}: unknown transaction status {v.transaction_status}") from None
    partitions = set()
    if state is not TxnState.EMPTY:
        for entry in v.transaction_partitions or []:
            partitions.update((entry.topic, p) for p in entry.partition_ids)
    if v.producer_id < 0 or not -1 <= v.producer_epoch:
        raise RecordError(f"{tid}: producer id {v.producer_id} epoch {v.producer_epoch}")
    return tid, TxnMeta(
        transactional_id=tid, producer_id=v.producer_id, producer_epoch=v.producer_epoch,
        previous_producer_id=v.previous_producer_id, next_producer_id=v.next_producer_id,
        timeout_ms=v.transaction_timeout_ms, state=state, partitions=partitions,
        start_ms=v.transaction_start_timestamp_ms,
        last_update_ms=v.transaction_last_update_timestamp_ms,
        client_tv=v.client_transaction_version)


# to_dict/from_dict/defaults_of are re-exported for the shard's request bodies.
__all__ += ["to_dict", "from_dict", "defaults_of"]
