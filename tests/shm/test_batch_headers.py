"""shm.batch's record headers column, codec hint and LogAppendTime bit: round trips, the
old layout unchanged, and corruption only ever a CorruptRecordError."""
from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import given, settings, strategies as st

from shm import batch, record_headers
from shm.batch import CorruptRecordError

HEADERS = [[("a", b"1")], [], [("b", None), ("c", b""), ("a", b"2")], [("\udcff", b"\x00")]]


def with_headers(**kw) -> bytearray:
    return batch.build_batch([b"v0", None, b"value-two", b""], [b"k0", b"k1", None, b""],
                             [1000, 1003, 1001, 1002], headers=HEADERS, **kw)


def test_headers_round_trip_with_null_values_and_any_key_bytes():
    parsed = batch.parse_batch(with_headers())
    assert parsed.header.attributes & batch.ATTR_HEADERS
    assert parsed.record_headers() == HEADERS
    assert [r[4] for r in parsed.records(with_headers=True)] == HEADERS
    assert parsed.records() == [(0, 1000, b"k0", b"v0"), (1, 1003, b"k1", None),
                                (2, 1001, None, b"value-two"), (3, 1002, b"", b"")]


def test_entries_are_kafkas_header_encoding():
    parsed = batch.parse_batch(with_headers())
    entries = parsed.headers.to_pylist()
    assert entries[0] == b"\x02" + b"\x02a" + b"\x021"  # 1 header: key "a", value "1"
    assert entries[1] == b""  # no headers: an empty entry
    assert entries[2].startswith(b"\x06\x02b\x01")  # 3 headers; "b" with a null value (-1)
    assert record_headers.decode_entry(b"\x00") == []


def test_readers_that_ignore_headers_see_the_same_batch():
    plain = batch.build_batch([b"v0", None, b"value-two", b""], [b"k0", b"k1", None, b""],
                              [1000, 1003, 1001, 1002])
    parsed = batch.parse_batch(with_headers())
    assert parsed.records() == batch.parse_batch(plain).records()
    c = batch.read_columns(with_headers())
    assert c.header_offsets is not None and batch.read_columns(plain).header_offsets is None
    # The columns before the headers sit where they always did.
    assert bytes(with_headers())[61:61 + 4 * 4 + 8 * 5] == bytes(plain)[61:61 + 4 * 4 + 8 * 5]


def test_no_headers_no_column_and_the_old_layout_byte_for_byte():
    plain = batch.build_batch([b"a", b"bc"], [b"k", None], [5, 6], producer_id=3,
                              producer_epoch=1, base_sequence=0)
    assert batch.build_batch([b"a", b"bc"], [b"k", None], [5, 6], producer_id=3,
                             producer_epoch=1, base_sequence=0, headers=[[], []]) == plain
    # The bytes of this batch before headers existed (a log written then still reads).
    assert hashlib.sha256(plain).hexdigest()[:16] == "2ddf8d2e51f4f133"


def test_codec_hint_and_log_append_time_bits():
    buf = batch.build_batch([b"x", b"y"], None, 77, codec_hint=batch.CODEC_LZ4,
                            log_append_time=True)
    parsed = batch.parse_batch(buf)
    assert parsed.codec_hint == batch.CODEC_LZ4 and parsed.log_append_time
    assert parsed.timestamps.tolist() == [77, 77]
    assert parsed.values.to_pylist() == [b"x", b"y"]  # the body is not compressed
    with pytest.raises(ValueError):
        batch.build_batch([b"x", b"y"], None, [1, 2], log_append_time=True)


def reseal(buf: bytearray) -> None:
    batch.CRC.pack_into(buf, batch.CRC_POSITION, batch.crc_of(buf, 0, batch.read_header(buf)))


@pytest.mark.parametrize("attributes", [0x05, 0x06, 0x07, 0x40, 0x80, 0x800, 0x1000])
def test_unknown_codec_and_unknown_bits_are_corrupt(attributes):
    buf = batch.build_batch([b"x"], None, 1)
    struct.pack_into("<h", buf, 21, attributes)
    batch.CRC.pack_into(buf, batch.CRC_POSITION, batch.crc32c(bytes(buf[21:])))
    with pytest.raises(CorruptRecordError, match="attributes"):
        batch.check_batch(buf)


def test_malformed_header_entries_under_a_good_crc_are_corrupt():
    for n in (2, 20):  # the struct path and the numpy path
        buf = batch.build_batch([b"v"] * n, None, 1, headers=[[("k", b"v")]] * n)
        entry_at = len(buf) - 5  # the last entry: 01 02 6b 02 76
        for position, value in ((entry_at, 0x04), (entry_at + 1, 0x7F), (entry_at + 3, 0x05),
                                (entry_at, 0x01)):
            bad = bytearray(buf)
            bad[position] = value
            reseal(bad)
            with pytest.raises(CorruptRecordError, match="header"):
                batch.check_batch(bad)
            with pytest.raises(CorruptRecordError, match="header"):
                batch.parse_batch(bad)


def test_every_cut_of_a_batch_with_headers_is_corrupt():
    buf = bytes(with_headers())
    for cut in range(len(buf)):
        with pytest.raises(CorruptRecordError):
            batch.parse_batch(buf[:cut])


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_fuzz_mutated_batches_with_headers_parse_or_raise_corrupt(data):
    buf = with_headers(codec_hint=data.draw(st.integers(0, 4)))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(buf) - 1))
        buf[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        try:
            reseal(buf)
        except CorruptRecordError:
            pass
    try:
        parsed = batch.parse_batch(buf)
        batch.check_batch(buf)
        parsed.records(with_headers=True)
    except CorruptRecordError:
        pass


header = st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=10)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(header, max_size=4), min_size=1, max_size=20))
def test_headers_round_trip_property(headers):
    buf = batch.build_batch([b"v"] * len(headers), None, 1, headers=headers)
    assert batch.parse_batch(bytes(buf)).record_headers() == headers
    batch.check_batch(bytes(buf))
