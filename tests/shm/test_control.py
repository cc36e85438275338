"""Transactional and control batches (Kafka's bits 0x10/0x20) and the COMMIT/ABORT
markers of ``shm.control``: the rules, Kafka's bytes, and a fuzzer."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from shm import batch, control
from shm.batch import CorruptRecordError


def reseal(buf: bytearray) -> None:
    batch.CRC.pack_into(buf, batch.CRC_POSITION, batch.crc32c(bytes(buf[batch.CRC_START:])))


def set_header(buf: bytearray, *, attributes=None, producer=None) -> bytearray:
    if attributes is not None:
        struct.pack_into("<h", buf, 21, attributes)
    if producer is not None:
        batch.PRODUCER.pack_into(buf, batch.PRODUCER_POSITION, *producer)
    reseal(buf)
    return buf


def test_a_transactional_data_batch_round_trips_its_bits():
    buf = batch.build_batch([b"a", b"b"], None, 5, producer_id=9, producer_epoch=3,
                            base_sequence=0, transactional=True)
    parsed = batch.parse_batch(buf)
    assert parsed.transactional and not parsed.control
    assert parsed.header.attributes & batch.ATTR_TRANSACTIONAL
    assert control.parse_marker(buf) is None


@pytest.mark.parametrize("commit", [True, False])
def test_marker_is_kafkas_control_record(commit):
    buf = control.build_marker(42, 7, commit, 13, 1_700_000_000_000)
    header = batch.check_batch(buf)
    assert header.transactional and header.control
    assert (header.producer_id, header.producer_epoch, header.base_sequence,
            header.record_count) == (42, 7, -1, 1)
    [(_, timestamp, key, value)] = batch.parse_batch(buf).records()
    # Kafka: key = version 0 (i16) + type (i16: ABORT 0, COMMIT 1), big-endian;
    # value = version 0 (i16) + coordinator epoch (i32).
    assert key == (b"\x00\x00\x00\x01" if commit else b"\x00\x00\x00\x00")
    assert value == b"\x00\x00\x00\x00\x00\x0d"
    assert timestamp == 1_700_000_000_000
    assert control.parse_marker(buf) == control.Marker(42, 7, commit, 13)


def test_marker_at_a_position_in_a_region():
    region = bytes(batch.build_batch([b"x"])) + bytes(control.build_marker(1, 0, False, 0, 1))
    first = batch.read_header(region)
    assert control.parse_marker(region, first.size_bytes) == control.Marker(1, 0, False, 0)


@pytest.mark.parametrize("attributes, producer, what", [
    (batch.ATTR_CONTROL, (1, 0, -1), "without the transactional bit"),
    (batch.ATTR_TRANSACTIONAL, (-1, -1, 0), "producer id"),
    (batch.ATTR_TRANSACTIONAL, (1, -1, 0), "producer id"),
    (batch.ATTR_TRANSACTIONAL, (1, 0, -1), "base_sequence"),
    (batch.ATTR_TRANSACTIONAL | batch.ATTR_CONTROL, (1, 0, 0), "base_sequence -1"),
])
def test_transactional_rules_are_checked_under_a_good_crc(attributes, producer, what):
    buf = set_header(batch.build_batch([b"x"], None, 1), attributes=attributes,
                     producer=producer)
    with pytest.raises(CorruptRecordError, match=what):
        batch.check_batch(buf)
    with pytest.raises(CorruptRecordError, match=what):
        batch.parse_batch(buf)


def test_a_control_batch_has_exactly_one_record():
    buf = batch.build_batch([b"x", b"y"], None, 1, producer_id=1, producer_epoch=0,
                            base_sequence=0, transactional=True)
    set_header(buf, attributes=batch.ATTR_TRANSACTIONAL | batch.ATTR_CONTROL,
               producer=(1, 0, -1))
    with pytest.raises(CorruptRecordError, match="one record"):
        batch.check_batch(buf)


def test_builders_refuse_what_the_parser_would():
    with pytest.raises(ValueError, match="producer"):
        batch.build_batch([b"x"], transactional=True)
    with pytest.raises(ValueError, match="transactional bit"):
        batch.build_batch([b"x"], producer_id=1, producer_epoch=0, control=True)
    with pytest.raises(ValueError, match="one record"):
        batch.build_batch([b"x", b"y"], producer_id=1, producer_epoch=0, transactional=True,
                          control=True)
    with pytest.raises(ValueError):
        control.build_marker(-1, 0, True, 0, 1)
    with pytest.raises(ValueError):
        control.build_marker(1, 0, True, 2**31, 1)


def test_stamp_producer_can_make_a_batch_transactional():
    buf = batch.build_batch([b"x"])
    batch.stamp_producer(buf, 5, 1, 10, transactional=True)
    header = batch.check_batch(buf)
    assert header.transactional and (header.producer_id, header.base_sequence) == (5, 10)
    with pytest.raises(ValueError):
        batch.stamp_producer(batch.build_batch([b"x"]), 5, 1, -1, transactional=True)


def _control_with(key: bytes | None, value: bytes | None) -> bytearray:
    buf = batch.build_batch([value], [key], 1, producer_id=1, producer_epoch=0,
                            transactional=True, control=True)
    return buf


@pytest.mark.parametrize("key, value, what", [
    (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", "key"),
    (None, b"\x00\x00\x00\x00\x00\x00", "key"),
    (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x00", "version"),
    (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x00", "type 2"),
    (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00", "value"),
    (b"\x00\x00\x00\x01", None, "value"),
    (b"\x00\x00\x00\x01", b"\x80\x00\x00\x00\x00\x00", "version"),
])
def test_bad_control_records_are_corrupt(key, value, what):
    with pytest.raises(CorruptRecordError, match=what):
        control.parse_marker(_control_with(key, value))


def test_newer_versions_are_read_as_version_0_as_kafka():
    buf = _control_with(b"\x00\x01\x00\x00", b"\x00\x02\x00\x00\x00\x05extra")
    assert control.parse_marker(buf) == control.Marker(1, 0, False, 5)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fuzz_mutated_markers_parse_or_raise_corrupt(data):
    buf = bytearray(control.build_marker(3, 1, True, 2, 77))
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        reseal(buf)
    try:
        marker = control.parse_marker(buf)
    except CorruptRecordError:
        return
    header = batch.read_header(buf)
    assert header.control == (marker is not None)
    if marker is not None:
        assert header.transactional and header.record_count == 1
        assert (marker.producer_id, marker.producer_epoch) == (header.producer_id,
                                                              header.producer_epoch)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 0x7FF), st.integers(-2, 3), st.integers(-2, 3), st.integers(-2, 3),
       st.integers(1, 3))
def test_fuzz_attribute_and_producer_combinations(attributes, pid, epoch, sequence, n):
    """Whatever the header says, the codec either accepts it under the rules or raises
    CorruptRecordError, never anything else."""
    buf = batch.build_batch([b"v"] * n, None, 1)
    set_header(buf, attributes=attributes, producer=(pid, epoch, sequence))
    try:
        header = batch.check_batch(buf)
    except CorruptRecordError:
        return
    if header.control:
        assert header.transactional and sequence == -1 and n == 1
    if header.transactional:
        assert pid >= 0 and epoch >= 0
        assert header.control or sequence >= 0
    assert not attributes & ~batch.ATTR_KNOWN
