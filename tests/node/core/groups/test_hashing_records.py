"""hashing.partition_for (Kafka's rule) and the __consumer_offsets record codec."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.core.groups import hashing, records
from node.core.groups.records import Rec, RecordError, UnknownRecordType


def test_java_string_hash_matches_javas_values():
    assert hashing.java_string_hash("") == 0
    assert hashing.java_string_hash("foo") == 101574            # "foo".hashCode()
    assert hashing.java_string_hash("polygenelubricants") == -(1 << 31)
    # Outside the BMP Java hashes the two UTF-16 surrogates: 31 * 0xD83D + 0xDE00.
    assert hashing.java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00
    # Wrapping to a negative int, as Java's 32-bit arithmetic (a big-int model here).
    model = sum(ord(c) * 31 ** i for i, c in enumerate(reversed("my-group"))) % (1 << 32)
    assert hashing.java_string_hash("my-group") == model - (1 << 32) == -1906497762


def test_partition_for_is_kafkas_abs_not_the_producers_mask():
    name = "my-group"
    h = hashing.java_string_hash(name)
    assert h < 0
    assert hashing.partition_for(name, 50) == (-h) % 50
    assert hashing.partition_for(name, 50) != (h & 0x7FFFFFFF) % 50
    assert hashing.partition_for("polygenelubricants", 7) == 0   # Utils.abs(MIN_VALUE) == 0
    assert hashing.partition_for("foo", 50) == 101574 % 50
    with pytest.raises(ValueError):
        hashing.partition_for("foo", 0)


def test_offset_commit_record_bytes_are_kafkas():
    key, value = records.encode(records.offset_commit("g", "t", 3, 42, 5, "m", 1000))
    # key v1: version, group, topic (int16-sized strings), partition
    assert key == bytes.fromhex("0001" "0001") + b"g" + bytes.fromhex("0001") + b"t" + \
        (3).to_bytes(4, "big")
    # value v3: version, offset, leader epoch, metadata, commit timestamp
    assert value == (3).to_bytes(2, "big") + (42).to_bytes(8, "big") + (5).to_bytes(4, "big") \
        + bytes.fromhex("0001") + b"m" + (1000).to_bytes(8, "big")
    assert records.decode(key, value) == records.offset_commit("g", "t", 3, 42, 5, "m", 1000)


def test_an_expiring_offset_is_written_as_value_version_1():
    rec = records.offset_commit("g", "t", 0, 1, -1, "", 1000, expire_timestamp=9000)
    key, value = records.encode(rec)
    assert value[:2] == b"\x00\x01"
    assert records.decode(key, value) == rec


def test_group_metadata_round_trip_and_tombstones():
    value = {"protocol_type": "consumer", "generation": 4, "protocol": "range", "leader": "a",
             "current_state_timestamp": 77,
             "members": [{"member_id": "a", "group_instance_id": "i1", "client_id": "c",
                          "client_host": "/h", "rebalance_timeout": 300, "session_timeout": 100,
                          "subscription": b"s", "assignment": b"x"}]}
    rec = records.group_metadata("g", value)
    key, raw = records.encode(rec)
    assert key[:2] == b"\x00\x02" and raw[:2] == b"\x00\x03"
    assert records.decode(key, raw) == rec
    tomb = records.encode(records.group_tombstone("g"))
    assert tomb[1] is None and records.decode(*tomb) == Rec(2, {"group": "g"}, None)
    assert records.group_of(rec) == "g"


def test_consumer_group_records_carry_topic_ids_as_text():
    rec = Rec(7, {"group_id": "g", "member_id": "m"},
              {"topic_partitions": [{"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "partitions": [1]}]})
    key, value = records.encode(rec)
    assert value[:2] == b"\x00\x00"
    assert records.decode(key, value) == rec
    assert records.group_of(rec) == "g"
    with pytest.raises(RecordError, match="topic id"):
        records.encode(Rec(7, rec.key, {"topic_partitions": [{"topic_id": "nope"}]}))


def test_key_version_0_reads_as_1():
    key, value = records.encode(records.offset_commit("g", "t", 0, 1, -1, "", 5))
    assert records.decode(b"\x00\x00" + key[2:], value).key_version == 1


@pytest.mark.parametrize("key,value,match", [
    (b"", None, "no version"),
    (b"\x00", None, "no version"),
    (b"\x00\x01\x00", None, "malformed"),
    (b"\x00\x02\x00\x01g!", None, "after the end"),                 # trailing byte
    (b"\x00\x02\x00\x01g", b"\x00", "no version"),
    (b"\x00\x02\x00\x01g", b"\x00\x09", "no version 9"),
    (b"\x00\x02\x00\x01g", b"\x00\x03\x00", "malformed"),
    ("text", None, "not bytes"),
])
def test_malformed_records_raise_one_clear_error(key, value, match):
    with pytest.raises(RecordError, match=match):
        records.decode(key, value)


def test_an_unknown_key_version_is_its_own_record_error():
    with pytest.raises(UnknownRecordType):
        records.decode(b"\x00\x0a\x00\x01g", None)       # 10: a share group record
    assert issubclass(UnknownRecordType, RecordError)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.none() | st.binary(max_size=60))
def test_any_bytes_decode_or_raise_record_error(key, value):
    try:
        rec = records.decode(key, value)
    except RecordError:
        return
    assert isinstance(rec, Rec)
    assert records.decode(*records.encode(rec)) == rec


def test_a_bad_rec_does_not_encode():
    with pytest.raises(RecordError, match="no field"):
        records.encode(Rec(2, {"group": "g", "extra": 1}, None))
    with pytest.raises(RecordError, match="unknown key version"):
        records.encode(Rec(42, {}, None))
