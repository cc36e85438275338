"""Record batch codec: whole, cut at every byte, trailing garbage, and a fuzzer."""
from __future__ import annotations

import struct
import time
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from shm import batch
from shm.batch import CorruptRecordError
from shm.batch_format import header_stamped


def sample() -> bytearray:
    return batch.build_batch([b"v0", None, b"value-two", b""], [b"k0", b"k1", None, b""],
                         [1000, 1003, 1001, 1002], producer_id=7, producer_epoch=1,
                         base_sequence=5)


EXPECTED = [(0, 1000, b"k0", b"v0"), (1, 1003, b"k1", None),
            (2, 1001, None, b"value-two"), (3, 1002, b"", b"")]


def test_whole_batch_round_trips_keys_values_nulls_and_timestamps():
    parsed = batch.parse_batch(sample())
    assert parsed.records() == EXPECTED
    h = parsed.header
    assert (h.magic, h.record_count, h.last_offset_delta) == (2, 4, 3)
    assert (h.base_timestamp, h.max_timestamp) == (1000, 1003)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 1, 5)
    assert h.batch_length == len(sample()) - 12


@pytest.mark.parametrize("n", [1, 8, 9, 160])
def test_one_timestamp_for_every_record_builds_what_a_list_of_it_builds(n):
    """build_batch takes one timestamp (or none: now) without an array per record:
    the bytes are those of the same timestamp given once per record."""
    values = [b"v%d" % i for i in range(n)]
    assert batch.build_batch(values, timestamps_ms=1_700_000_000_123) == \
        batch.build_batch(values, timestamps_ms=[1_700_000_000_123] * n)
    assert batch.build_batch(values, timestamps_ms=np.int64(5)) == \
        batch.build_batch(values, timestamps_ms=np.full(n, 5))
    before = int(time.time() * 1000)
    parsed = batch.parse_batch(batch.build_batch(values))
    after = int(time.time() * 1000)
    assert before <= parsed.header.base_timestamp == parsed.header.max_timestamp <= after
    assert [ts for _, ts, _, _ in parsed.records()] == [parsed.header.base_timestamp] * n


def test_a_stamped_header_is_the_header_replaced():
    header = batch.read_header(sample())
    stamped = header_stamped(header, 1234, 9)
    expected = replace(header, base_offset=1234, partition_leader_epoch=9)
    assert stamped == expected and hash(stamped) == hash(expected)
    assert repr(stamped) == repr(expected) and stamped.next_offset == 1238
    assert header.base_offset == 0 and header.partition_leader_epoch == -1


def test_header_is_kafka_v2_fields_little_endian():
    buf = sample()
    batch.stamp(buf, 0x0102030405060708, 9)
    assert buf[0:8] == bytes([8, 7, 6, 5, 4, 3, 2, 1])
    assert struct.unpack_from("<i", buf, 12)[0] == 9
    assert buf[16] == 2  # magic


def test_stamp_keeps_crc_valid():
    buf = sample()
    crc_before = batch.read_header(buf).crc
    batch.stamp(buf, 123456, 42)
    parsed = batch.parse_batch(buf)
    assert parsed.header.crc == crc_before
    assert (parsed.base_offset, parsed.header.partition_leader_epoch) == (123456, 42)
    assert parsed.offsets.tolist() == [123456, 123457, 123458, 123459]


def test_a_batch_built_without_its_crc_is_corrupt_until_the_producer_stamps_it():
    """The idempotent producer builds with crc=False and computes the CRC once, when it
    stamps its id, epoch and sequence; the result is the batch built with them."""
    values = [b"a", b"bb", b""]
    for encoded in (batch.build_batch(values, None, 1_700_000_000_000, crc=False),
                    batch.encode_small_batch(values, None, 1_700_000_000_000, crc=False)):
        assert batch.read_header(encoded).crc == 0
        with pytest.raises(CorruptRecordError):
            batch.parse_batch(encoded)
        batch.stamp_producer(encoded, 7, 1, 40)
        assert encoded == batch.build_batch(values, None, 1_700_000_000_000, producer_id=7,
                                            producer_epoch=1, base_sequence=40)
        assert batch.parse_batch(encoded).header.base_sequence == 40


def test_every_cut_raises_corrupt_record_error():
    buf = bytes(sample())
    for cut in range(len(buf)):
        with pytest.raises(CorruptRecordError):
            batch.parse_batch(buf[:cut])


def test_trailing_garbage_is_ignored_by_parse_and_refused_by_walk():
    buf = bytes(sample()) + b"\x01garbage"
    assert batch.parse_batch(buf).records() == EXPECTED
    walked = batch.iter_batches(buf)
    assert next(walked)[0] == 0
    with pytest.raises(CorruptRecordError) as info:
        next(walked)
    assert info.value.position == len(sample())


def test_parse_is_zero_copy_over_the_buffer():
    buf = bytearray(batch.build_batch([b"hello", b"world"]))
    parsed = batch.parse_batch(memoryview(buf))
    i = bytes(buf).index(b"hello")
    buf[i] = ord("J")
    assert parsed.values.to_pylist() == [b"Jello", b"world"]


def test_every_single_bit_flip_in_crc_range_is_detected():
    buf = bytes(sample())
    for position in range(batch.CRC_START, len(buf)):
        flipped = bytearray(buf)
        flipped[position] ^= 0x10
        with pytest.raises(CorruptRecordError):
            batch.parse_batch(flipped)


def test_oversized_batch_is_refused_with_the_limit_in_the_message():
    buf = batch.build_batch([b"x" * 1000])
    with pytest.raises(CorruptRecordError, match="message.max.bytes"):
        batch.parse_batch(buf, max_bytes=500)


def test_bad_offsets_with_a_valid_crc_are_corrupt_not_a_crash():
    buf = batch.build_batch([b"ab", b"cd"])
    value_offsets_at = batch.HEADER_BYTES + 4 * 2 + 4 * 3
    struct.pack_into("<i", buf, value_offsets_at + 4, 5)  # value offsets 0, 2, 4 -> 0, 5, 4
    batch.CRC.pack_into(buf, batch.CRC_POSITION, batch.crc_of(buf, 0, batch.read_header(buf)))
    with pytest.raises(CorruptRecordError, match="monotonic"):
        batch.parse_batch(buf)


def test_a_followers_check_reads_the_header_and_the_crc_but_not_the_body():
    """``structure=False`` (a follower's append, as Kafka's): the leader checked the
    body, and the CRC says this is that body; a CRC that fails is still refused."""
    buf = batch.build_batch([b"ab", b"cd"])
    value_offsets_at = batch.HEADER_BYTES + 4 * 2 + 4 * 3
    struct.pack_into("<i", buf, value_offsets_at + 4, 5)  # not monotonic, CRC re-stamped
    batch.CRC.pack_into(buf, batch.CRC_POSITION, batch.crc_of(buf, 0, batch.read_header(buf)))
    with pytest.raises(CorruptRecordError, match="monotonic"):
        batch.check_batch(buf)
    assert batch.check_batch(buf, structure=False).record_count == 2
    buf[-1] ^= 0x01                                       # the CRC no longer matches
    for structure in (True, False):
        with pytest.raises(CorruptRecordError, match="fails its CRC"):
            batch.check_batch(buf, structure=structure)


def test_build_from_arrow_and_numpy_matches_build_from_lists():
    values = [b"a" * 10, b"b" * 10, b"c" * 10]
    from_list = batch.build_batch(values, timestamps_ms=5)
    from_arrow = batch.build_batch(pa.array(values, pa.binary()), timestamps_ms=5)
    from_large = batch.build_batch(pa.array(values, pa.large_binary()), timestamps_ms=5)
    matrix = np.frombuffer(b"".join(values), np.uint8).reshape(3, 10)
    from_numpy = batch.build_batch(matrix, timestamps_ms=5)
    assert from_list == from_arrow == from_large == from_numpy


def test_sliced_arrow_input_with_foreign_null_lengths():
    array = pa.array([b"skip", b"x", None, b"yz"], pa.binary()).slice(1)
    parsed = batch.parse_batch(batch.build_batch(array, timestamps_ms=1))
    assert parsed.values.to_pylist() == [b"x", None, b"yz"]


record = st.one_of(st.none(), st.binary(max_size=20))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(record, record, st.integers(0, 10**6)), min_size=1, max_size=30),
       st.integers(0, 2**62), st.integers(-1, 2**31 - 1))
def test_round_trip_property(rows, base_offset, epoch):
    keys, values, timestamps = zip(*rows)
    buf = batch.build_batch(list(values), list(keys), list(timestamps))
    batch.stamp(buf, base_offset, epoch)
    parsed = batch.parse_batch(bytes(buf))
    assert parsed.keys.to_pylist() == list(keys)
    assert parsed.values.to_pylist() == list(values)
    assert parsed.timestamps.tolist() == list(timestamps)
    assert parsed.base_offset == base_offset


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_random_bytes_parse_or_raise_corrupt(data):
    try:
        batch.parse_batch(data)
    except CorruptRecordError:
        pass


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_fuzz_mutated_batches_parse_or_raise_corrupt(data):
    buf = bytearray(sample())
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(buf) - 1))
        buf[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):  # re-seal so the structure checks, not the CRC, must catch it
        try:
            header = batch.read_header(buf)
            batch.CRC.pack_into(buf, batch.CRC_POSITION, batch.crc_of(buf, 0, header))
        except CorruptRecordError:
            pass
    try:
        parsed = batch.parse_batch(buf)
        parsed.keys.validate(full=True)
        parsed.values.validate(full=True)
    except CorruptRecordError:
        pass


def test_small_batch_encoder_matches_build_batch_byte_for_byte():
    """The producer's fast path (struct packing, no numpy or pyarrow) writes exactly the
    bytes of ``build_batch``, and hands back (None) what it does not handle."""
    import random

    rng = random.Random(5)
    for n in (1, 2, 7, 8, 9, 100, batch.SMALL_ENCODE_RECORDS_MAX):
        values = [rng.randbytes(rng.randrange(0, 40)) for _ in range(n)]
        keys = [rng.randbytes(rng.randrange(0, 9)) for _ in range(n)]
        stamps = [1_700_000_000_000 + rng.randrange(0, 5000) for _ in range(n)]
        for k in (None, keys):
            for ts in (1_700_000_000_123, stamps):
                small = batch.encode_small_batch(values, k, ts)
                assert small == batch.build_batch(values, k, ts), (n, k is None, ts)
                assert batch.parse_batch(small).values.to_pylist() == values
    assert batch.encode_small_batch([b"a", None], None, 1) is None  # null value: general path
    assert batch.encode_small_batch([b"a", b"b"], [b"k", None], 1) is None
    assert batch.encode_small_batch([b"a"] * (batch.SMALL_ENCODE_RECORDS_MAX + 1), None, 1) is None
