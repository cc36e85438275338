"""The __transaction_state record codec (Kafka's TransactionLogKey/Value)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.core.txn import records
from node.core.txn.records import RecordError, UnknownRecordType
from node.core.txn.state import PREPARING, TxnMeta, TxnState


def meta(**fields) -> TxnMeta:
    base = dict(transactional_id="t", producer_id=7, producer_epoch=3, timeout_ms=60000,
                state=TxnState.ONGOING, partitions={("x", 1), ("x", 0), ("y", 2)},
                start_ms=1000, last_update_ms=1500)
    base.update(fields)
    return TxnMeta(**base)


def test_the_key_is_kafkas_version_0_transactional_id():
    key, value = records.tombstone("txn-1")
    assert key == bytes.fromhex("0000" "0005") + b"txn-1" and value is None
    assert records.decode(key, None) == ("txn-1", None)


def test_a_version_0_value_is_laid_out_as_kafka_writes_it():
    _, value = records.encode(meta(partitions={("x", 1), ("x", 0)}), 0)
    # producer id i64, epoch i16, timeout i32, status i8, [topic str16, [partition i32]],
    # last update i64, start i64 (no tagged fields in version 0)
    assert value == (bytes.fromhex("0000") + (7).to_bytes(8, "big") + (3).to_bytes(2, "big")
                     + (60000).to_bytes(4, "big") + b"\x01"
                     + (1).to_bytes(4, "big") + bytes.fromhex("0001") + b"x"
                     + (2).to_bytes(4, "big") + (0).to_bytes(4, "big") + (1).to_bytes(4, "big")
                     + (1500).to_bytes(8, "big") + (1000).to_bytes(8, "big"))


def test_an_empty_transaction_writes_null_partitions():
    _, value = records.encode(meta(state=TxnState.EMPTY, partitions=set(), start_ms=-1), 0)
    assert value[2 + 8 + 2 + 4 + 1:][:4] == b"\xff\xff\xff\xff"     # a null array
    assert records.decode(*records.encode(meta(state=TxnState.EMPTY, partitions=set()), 1))[
        1].partitions == set()


def test_version_1_keeps_the_tagged_fields_and_version_0_drops_them():
    m = meta(previous_producer_id=6, next_producer_id=9, client_tv=2,
             state=TxnState.PREPARE_COMMIT)
    assert records.decode(*records.encode(m, 1))[1] == m
    back = records.decode(*records.encode(m, 0))[1]
    assert (back.previous_producer_id, back.next_producer_id, back.client_tv) == (-1, -1, 0)
    assert back.producer_id == 7 and back.state is TxnState.PREPARE_COMMIT


def test_unknown_and_malformed_records_are_refused_clearly():
    key, value = records.encode(meta(), 1)
    with pytest.raises(UnknownRecordType):
        records.decode(b"\x00\x01" + key[2:], value)
    with pytest.raises(RecordError, match="malformed"):
        records.decode(key, value[:-3])
    with pytest.raises(RecordError, match="no version 5"):
        records.decode(key, b"\x00\x05" + value[2:])
    with pytest.raises(RecordError, match="unknown transaction status"):
        bad = bytearray(records.encode(meta(), 0)[1])
        bad[2 + 8 + 2 + 4] = 9
        records.decode(key, bytes(bad))
    with pytest.raises(RecordError, match="not bytes"):
        records.decode("text", None)
    with pytest.raises(RecordError, match="no version"):
        records.decode(b"\x00", None)


_STATES = st.sampled_from([TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT,
                           TxnState.PREPARE_ABORT, TxnState.COMPLETE_COMMIT,
                           TxnState.COMPLETE_ABORT])


@settings(max_examples=200, deadline=None)
@given(tid=st.text(min_size=1, max_size=20), pid=st.integers(0, 2**63 - 1),
       epoch=st.integers(-1, 32767), state=_STATES,
       partitions=st.sets(st.tuples(st.text(max_size=8), st.integers(0, 2**31 - 1)),
                          min_size=1, max_size=6),
       stamps=st.tuples(st.integers(-1, 2**62), st.integers(-1, 2**62)),
       extra=st.tuples(st.integers(-1, 2**62), st.integers(-1, 2**62), st.sampled_from([0, 2])),
       version=st.sampled_from([0, 1]))
def test_hypothesis_records_survive_encode_and_decode(tid, pid, epoch, state, partitions,
                                                      stamps, extra, version):
    keep = state is TxnState.ONGOING or state in PREPARING
    m = TxnMeta(tid, pid, producer_epoch=epoch, timeout_ms=1, state=state,
                partitions=partitions if keep else set(), start_ms=stamps[0],
                last_update_ms=stamps[1], previous_producer_id=extra[0] if version else -1,
                next_producer_id=extra[1] if version else -1,
                client_tv=extra[2] if version else 0)
    assert records.decode(*records.encode(m, version)) == (tid, m)
