"""Kafka v2 record batches <-> our log's batches (node.kafka.records): round trips both
ways, every codec, golden bytes, Kafka's checks with Kafka's error codes."""
from __future__ import annotations

import struct

import cramjam
import numpy as np
import pytest

from node.kafka import record_columns
from node.kafka.records import (SCALAR_RECORDS_MAX as SCALAR_MAX, RecordError,
                                kafka_to_log, log_to_kafka)
from node.wire.errors import ErrorCode
from shm import batch, control
from tests.node.kafka import kafka_v2

T0 = 1_700_000_000_000

# Two records built by hand from the format (all big-endian), CRC-32C worked out once:
GOLDEN = bytes.fromhex(
    "0000000000000000" "00000048" "ffffffff" "02" "d6f7b982" "0000" "00000001"  # .. lastOffsetDelta
    "0000018bcfe56800" "0000018bcfe56805"  # baseTimestamp T0, maxTimestamp T0 + 5
    "ffffffffffffffff" "ffff" "ffffffff" "00000002"  # no producer; 2 records
    # record 0: length 12, attributes, ts delta 0, offset delta 0, key "k", value "hello",
    # no headers
    "18" "00" "00" "00" "02" "6b" "0a" "68656c6c6f" "00"
    # record 1: length 9, attributes, ts delta 5, offset delta 1, null key, empty value,
    # one header "h" with a null value
    "12" "00" "0a" "02" "01" "00" "02" "02" "68" "01")
GOLDEN_RECORDS = [(0, T0, b"k", b"hello", []), (1, T0 + 5, None, b"", [("h", None)])]


def records_of(log_bytes) -> list:
    return [r for _, b in _walk(log_bytes) for r in b.records(with_headers=True)]


def _walk(log_bytes):
    return [(p, batch.parse_batch(log_bytes, p)) for p, _ in batch.iter_batches(log_bytes)]


def sample_log_batch(**kw) -> bytearray:
    buf = batch.build_batch(
        [b"v0", None, b"value-two", b"", b"x" * 300],
        [b"k0", b"k1", None, b"", None],
        [T0, T0 + 3, T0 + 1, T0 + 2, T0 + 70_000],
        producer_id=7, producer_epoch=1, base_sequence=5,
        headers=[[("a", b"1")], [], [("b", None), ("c", b"")], [], [("\u00e9t\u00e9", b"\xff")]],
        **kw)
    batch.stamp(buf, 1234, 6)
    return buf


def expect_error(code: ErrorCode, data, **kw) -> RecordError:
    with pytest.raises(RecordError) as info:
        kafka_to_log(data, **kw)
    assert info.value.code == code, (info.value.code, str(info.value))
    return info.value


# ---------------------------------------------------------------- golden bytes

def test_golden_batch_decodes_to_the_expected_records():
    assert struct.unpack_from(">I", GOLDEN, 17)[0] == 0xD6F7B982
    log = kafka_to_log(GOLDEN)
    assert records_of(log) == GOLDEN_RECORDS
    h = batch.read_header(log)
    assert (h.base_timestamp, h.max_timestamp, h.producer_id, h.base_sequence) == \
        (T0, T0 + 5, -1, -1)


def test_golden_batch_is_what_log_to_kafka_writes_back():
    assert b"".join(log_to_kafka(kafka_to_log(GOLDEN))) == GOLDEN


def test_golden_batch_as_kafka_python_reads_it():
    """A real client's reader (kafka-python) agrees with the hand-built bytes, and with
    what log_to_kafka writes."""
    default_records = pytest.importorskip("kafka.record.default_records")
    for data in (GOLDEN, b"".join(log_to_kafka(kafka_to_log(GOLDEN)))):
        parsed = default_records.DefaultRecordBatch(bytes(data))
        assert parsed.validate_crc()
        assert [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
                for r in parsed] == GOLDEN_RECORDS


# ---------------------------------------------------------------- round trips

def test_log_to_kafka_to_log_keeps_everything():
    ours = sample_log_batch()
    kafka = b"".join(log_to_kafka(bytes(ours)))
    [(h, recs)] = kafka_v2.read(kafka)
    assert (h["base_offset"], h["leader_epoch"], h["producer_id"], h["producer_epoch"],
            h["base_sequence"], h["count"]) == (1234, 6, 7, 1, 5, 5)
    assert recs == records_of(ours)
    back = kafka_to_log(kafka)
    assert bytes(back) == bytes(ours)  # byte for byte, CRC included


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_both_ways(codec):
    ours = sample_log_batch()
    kafka = b"".join(log_to_kafka(bytes(ours), compression=codec))
    [(h, recs)] = kafka_v2.read(kafka)  # the reference reader decompresses with cramjam
    assert h["attributes"] & 7 == {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
    assert recs == records_of(ours)
    back = kafka_to_log(kafka)
    assert records_of(back) == records_of(ours)
    assert batch.parse_batch(back).codec_hint == h["attributes"] & 7
    # The hint: with no compression asked for, the batch goes out as its producer sent it.
    again = b"".join(log_to_kafka(bytes(back)))
    assert again == kafka
    assert b"".join(log_to_kafka(bytes(back), compression="none"))[21:23] == b"\x00\x00"


def test_lz4_frames_have_independent_blocks_for_kafkas_java_reader():
    ours = batch.build_batch([bytes([i]) * 1000 for i in range(200)], None, T0)
    kafka = b"".join(log_to_kafka(bytes(ours), compression="lz4"))
    frame = kafka[61:]
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x20, "FLG: block independence"
    assert frame[4] & 0xC0 == 0x40, "FLG: version 01"


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_kafka_batches_compressed_by_others_decode(codec):
    rows = [(i % 7, b"key%d" % i if i % 3 else None, b"value %d " % i * (i % 11), [])
            for i in range(300)]
    data = kafka_v2.batch(rows, first_timestamp=T0, attributes=codec)
    assert [r[2:4] for r in records_of(kafka_to_log(data))] == [r[1:3] for r in rows]


def test_snappy_raw_and_xerial_framings_both_decode():
    rows = [(0, None, b"v%d" % i * 50, []) for i in range(2000)]  # > one 32 KiB xerial block
    for raw in (True, False):
        data = kafka_v2.batch(rows, first_timestamp=T0, attributes=2, snappy_raw=raw)
        assert data[61:69] == b"\x82SNAPPY\x00" or raw
        assert [r[3] for r in records_of(kafka_to_log(data))] == [r[2] for r in rows]


def test_kafka_python_compressed_batches_decode():
    """Batches compressed by a real client (kafka-python, with the codecs it has here)."""
    default_records = pytest.importorskip("kafka.record.default_records")
    codec_module = pytest.importorskip("kafka.codec")
    available = {1: True, 2: codec_module.has_snappy(), 3: codec_module.has_lz4(),
                 4: codec_module.has_zstd()}
    for codec in [c for c, ok in available.items() if ok]:
        builder = default_records.DefaultRecordBatchBuilder(
            magic=2, compression_type=codec, is_transactional=False, producer_id=3,
            producer_epoch=0, base_sequence=10, batch_size=1 << 20)
        for i in range(100):
            builder.append(i, timestamp=T0 + i, key=None, value=b"v%d" % i * 20,
                           headers=[("n", b"%d" % i)])
        log = kafka_to_log(bytes(builder.build()))
        got = records_of(log)
        assert [(o, t, v, h) for o, t, _, v, h in got] == \
            [(i, T0 + i, b"v%d" % i * 20, [("n", b"%d" % i)]) for i in range(100)]
        assert batch.read_header(log).base_sequence == 10


@pytest.mark.parametrize("n", [1, SCALAR_MAX, SCALAR_MAX + 1, 1000, 2500])
def test_many_records_both_ways_and_both_encoders_agree(n):
    rng = np.random.default_rng(n)
    values = [rng.bytes(int(rng.integers(0, 300))) if i % 13 else None for i in range(n)]
    keys = [None if i % 5 == 0 else rng.bytes(int(rng.integers(0, 20))) for i in range(n)]
    stamps = (T0 + rng.integers(0, 100_000, n)).tolist()
    headers = [[("k", b"v" * (i % 4))] if i % 7 == 0 else [] for i in range(n)]
    for hs in (None, headers):
        ours = batch.build_batch(values, keys, stamps, headers=hs)
        kafka = b"".join(log_to_kafka(bytes(ours)))
        assert [r for _, rs in kafka_v2.read(kafka) for r in rs] == \
            [(o, t, k, v, h) for o, t, k, v, h in records_of(ours)]
        assert bytes(kafka_to_log(kafka)) == bytes(ours)
        c = batch.read_columns(ours)
        columns = record_columns.RecordColumns(
            c.timestamp_deltas.astype(np.int64) + c.header.base_timestamp,
            np.array([-1 if k is None else len(k) for k in keys]), c.key_data,
            np.array([-1 if v is None else len(v) for v in values]), c.value_data,
            None if c.header_offsets is None else np.diff(c.header_offsets).astype(np.int64),
            c.header_data)
        assert record_columns.encode(columns, c.header.base_timestamp) == \
            record_columns.encode_scalar(columns, c.header.base_timestamp)


def test_large_records_take_the_long_length_path():
    values = [b"x" * 20_000, b"y" * 9_000, b"z", b"w" * 70_000]
    ours = batch.build_batch(values, None, T0)
    assert bytes(kafka_to_log(b"".join(log_to_kafka(bytes(ours))))) == bytes(ours)


def test_log_append_time_both_ways():
    rows = [(i, None, b"v%d" % i, []) for i in range(5)]
    log = kafka_to_log(kafka_v2.batch(rows, first_timestamp=T0), log_append_time_ms=T0 + 999)
    parsed = batch.parse_batch(log)
    assert parsed.log_append_time and parsed.timestamps.tolist() == [T0 + 999] * 5
    kafka = b"".join(log_to_kafka(bytes(log)))
    [(h, recs)] = kafka_v2.read(kafka)
    assert h["attributes"] & 0x08 and h["max_timestamp"] == T0 + 999
    assert [r[1] for r in recs] == [T0 + 999] * 5
    # A batch that already says LogAppendTime keeps its max timestamp as every record's.
    stamped = kafka_v2.batch(rows, first_timestamp=T0, attributes=0x08, max_timestamp=T0 + 7)
    assert batch.parse_batch(kafka_to_log(stamped)).timestamps.tolist() == [T0 + 7] * 5
    default_records = pytest.importorskip("kafka.record.default_records")
    parsed = default_records.DefaultRecordBatch(bytes(kafka))
    assert parsed.timestamp_type == 1 and {r.timestamp for r in parsed} == {T0 + 999}


def test_create_time_with_negative_deltas_keeps_every_timestamp():
    rows = [(50, None, b"a", []), (-20, None, b"b", []), (0, None, b"c", [])]
    log = kafka_to_log(kafka_v2.batch(rows, first_timestamp=T0, max_timestamp=T0 + 50))
    assert batch.parse_batch(log).timestamps.tolist() == [T0 + 50, T0 - 20, T0]
    [(_, recs)] = kafka_v2.read(b"".join(log_to_kafka(bytes(log))))
    assert [r[1] for r in recs] == [T0 + 50, T0 - 20, T0]


def test_several_batches_both_ways_and_a_partial_log_batch_at_the_end():
    a = kafka_v2.batch([(0, b"k", b"a", [])], first_timestamp=T0, base_offset=0)
    b = kafka_v2.batch([(0, None, b"b", []), (1, None, b"c", [])], first_timestamp=T0 + 1)
    log = kafka_to_log(a + b)
    assert [r[3] for r in records_of(log)] == [b"a", b"b", b"c"]
    first = sample_log_batch()
    second = batch.build_batch([b"tail"], None, T0)
    batch.stamp(second, 1239, 6)
    joined = bytes(first) + bytes(second)
    assert len(log_to_kafka(joined)) == 2
    assert len(log_to_kafka(joined[:-1])) == 1  # a read cut at a byte limit
    assert log_to_kafka(b"") == []


def test_producer_fields_and_leader_epoch_are_kept():
    data = kafka_v2.batch([(0, None, b"v", [])], producer_id=42, producer_epoch=3,
                          base_sequence=17, leader_epoch=9, base_offset=0)
    h = batch.read_header(kafka_to_log(data))
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == \
        (42, 3, 17, 9)


# ---------------------------------------------------------------- refusals

def test_empty_input_is_invalid_record():
    expect_error(ErrorCode.INVALID_RECORD, b"")


def test_bad_crc_is_corrupt_message():
    data = bytearray(GOLDEN)
    data[-3] ^= 1
    expect_error(ErrorCode.CORRUPT_MESSAGE, bytes(data))


def test_truncation_at_every_byte_is_corrupt_message():
    data = kafka_v2.batch([(0, b"k", b"value", [("h", b"x")]), (3, None, b"", [])])
    for cut in range(1, len(data)):
        expect_error(ErrorCode.CORRUPT_MESSAGE, data[:cut])
    for cut in range(1, len(data)):  # a whole batch, then a cut one
        expect_error(ErrorCode.CORRUPT_MESSAGE, data + data[:cut])


@pytest.mark.parametrize("magic", [0, 1])
def test_magic_0_and_1_are_unsupported_for_message_format(magic):
    # A v0/v1 message set: offset, size, crc, magic (at byte 16 as in v2), attributes...
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", T0) if magic else b"") + \
        struct.pack(">ii", -1, 5) + b"hello"
    message = struct.pack(">qiI", 0, 4 + len(body), 0) + body
    error = expect_error(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, message)
    assert f"magic {magic}" in str(error)


def test_an_unknown_magic_is_corrupt_message():
    data = bytearray(GOLDEN)
    data[16] = 7
    expect_error(ErrorCode.CORRUPT_MESSAGE, bytes(data))


def resealed(data: bytes, position: int, fmt: str, value) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, position, value)
    kafka_v2.reseal(buf)
    return bytes(buf)


@pytest.mark.parametrize("deltas", [[1, 2], [0, 0], [1, 0], [0, 5]])
def test_offset_deltas_other_than_0_to_n_minus_1_are_invalid_record(deltas):
    raw = b"".join(kafka_v2.record(d, 0, None, b"v") for d in deltas)
    error = expect_error(ErrorCode.INVALID_RECORD,
                         kafka_v2.batch([(0, None, b"v", [])] * 2, raw_records=raw))
    assert "offset delta" in str(error)


@pytest.mark.parametrize("change", [
    dict(count=3), dict(count=1, last_offset_delta=0), dict(last_offset_delta=5),
    dict(count=0, last_offset_delta=-1), dict(producer_id=5, base_sequence=-1)])
def test_kafkas_batch_checks_are_invalid_record(change):
    rows = [(0, None, b"a", []), (1, None, b"b", [])]
    expect_error(ErrorCode.INVALID_RECORD, kafka_v2.batch(rows, **change))


def test_control_transactional_and_unknown_codec_bits():
    rows = [(0, None, b"a", [])]
    expect_error(ErrorCode.INVALID_RECORD, kafka_v2.batch(rows, attributes=0x20))
    expect_error(ErrorCode.INVALID_RECORD, kafka_v2.batch(rows, attributes=0x30, producer_id=1,
                                                          producer_epoch=0))
    for pid, epoch, seq in ((-1, 0, 0), (1, -1, 0), (1, 0, -1)):     # KIP-98's fields
        expect_error(ErrorCode.INVALID_RECORD,
                     kafka_v2.batch(rows, attributes=0x10, producer_id=pid,
                                    producer_epoch=epoch, base_sequence=seq))
    for codec in (5, 6, 7):
        expect_error(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                     resealed(kafka_v2.batch(rows), 21, ">h", codec))


@pytest.mark.parametrize("raw", [
    kafka_v2.record(0, 0, None, b"v") + b"\x00",  # a byte after the last record
    kafka_v2.record(0, 0, None, b"v")[:-1],  # a record cut short
    b"\x0c\x00\x00\x00\x01\x08ab",  # value length 4, two bytes left in the record
    b"\x0c\x00\x00\x00\x05\x01\x02",  # key length -3
    b"\x0e\x00\x00\x00\x01\x01\x02\x04",  # 2 headers, none there
    b"\x04\x00\x00\x00",  # a record shorter than its fields
    b"\x0d\x00\x00\x00\x01\x01\x00",  # a negative (odd zigzag) record length
    b"\x0c\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x00",  # an 11-byte varlong
])
def test_malformed_records_under_a_good_crc_are_invalid_record(raw):
    expect_error(ErrorCode.INVALID_RECORD,
                 kafka_v2.batch([(0, None, b"v", [])], raw_records=raw))


def test_corrupt_compressed_records_are_corrupt_message():
    for codec in (1, 2, 3, 4):
        good = kafka_v2.batch([(0, None, b"v" * 100, [])], attributes=codec)
        buf = bytearray(good)
        buf[61:] = b"\x00" * (len(buf) - 61)
        kafka_v2.reseal(buf)
        expect_error(ErrorCode.CORRUPT_MESSAGE, bytes(buf))


def test_a_decompression_bomb_is_message_too_large():
    rows = [(0, None, bytes(100_000), [])] * 20  # 2 MB of zeros: a few KB compressed
    for codec in (1, 2, 3, 4):
        data = kafka_v2.batch(rows, attributes=codec)
        assert len(data) < 200_000
        expect_error(ErrorCode.MESSAGE_TOO_LARGE, data, max_bytes=1_000_000)
        assert len(kafka_to_log(data)) > 2_000_000  # under the default limit it converts


def test_a_corrupt_log_batch_is_corrupt_message_on_the_way_out():
    buf = sample_log_batch()
    buf[-1] ^= 0xFF
    with pytest.raises(RecordError) as info:
        log_to_kafka(bytes(buf))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_unknown_compression_name_is_a_value_error():
    with pytest.raises(ValueError):
        log_to_kafka(bytes(sample_log_batch()), compression="brotli")


def test_xerial_framing_with_a_bad_block_length_is_corrupt_message():
    records = kafka_v2.record(0, 0, None, b"v")
    block = bytes(cramjam.snappy.compress_raw(records))
    framed = b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(block) + 5) + block
    buf = bytearray(kafka_v2.batch([(0, None, b"v", [])], attributes=0)[:61]) + framed
    struct.pack_into(">h", buf, 21, 2)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    kafka_v2.reseal(buf)
    expect_error(ErrorCode.CORRUPT_MESSAGE, bytes(buf))


def test_log_to_kafka_takes_a_list_of_log_reads():
    first, second = bytes(sample_log_batch()), bytes(batch.build_batch([b"z"], None, T0))
    assert log_to_kafka([first, second]) == log_to_kafka(first + second)


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_aiokafkas_reader_reads_every_codec_we_write(codec):
    """aiokafka's record reader (its C extension where built): a second real client."""
    default_records = pytest.importorskip("aiokafka.record.default_records")
    ours = sample_log_batch()
    parsed = default_records.DefaultRecordBatch(
        bytes(b"".join(log_to_kafka(bytes(ours), compression=codec))))
    assert parsed.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
           for r in parsed]
    assert got == records_of(ours)  # (its header keys are valid UTF-8)


def test_aiokafkas_writer_with_every_codec_it_has_converts():
    default_records = pytest.importorskip("aiokafka.record.default_records")
    codecs = pytest.importorskip("aiokafka.codec")
    available = {0: True, 1: True, 2: codecs.has_snappy(), 3: codecs.has_lz4(),
                 4: codecs.has_zstd()}
    for codec in [c for c, ok in available.items() if ok]:
        builder = default_records.DefaultRecordBatchBuilder(
            magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        for i in range(50):
            builder.append(i, timestamp=T0 + i, key=b"k%d" % i, value=b"v" * i,
                           headers=[("x", None)] if i % 2 else [])
        got = records_of(kafka_to_log(bytes(builder.build())))
        assert got == [(i, T0 + i, b"k%d" % i, b"v" * i, [("x", None)] if i % 2 else [])
                       for i in range(50)], codec


@pytest.mark.parametrize("records", [1, 40])  # the scalar and the numpy decoder
def test_timestamps_out_of_the_64_bit_range_are_invalid_record(records):
    rows = [(100, None, b"v", [])] * records
    top = 2**63 - 10
    expect_error(ErrorCode.INVALID_RECORD,
                 kafka_v2.batch(rows, first_timestamp=top, max_timestamp=top))
    rows = [(0, None, b"v", []), (2**62, None, b"w", [])] + [(0, None, b"x", [])] * records
    expect_error(ErrorCode.INVALID_RECORD,
                 kafka_v2.batch(rows, first_timestamp=2**62, max_timestamp=0))


@pytest.mark.parametrize("codec", [0, 1])
def test_a_transactional_batch_keeps_its_bit_both_ways(codec):
    rows = [(0, b"k", b"a", []), (1, None, b"b", [])]
    data = kafka_v2.batch(rows, attributes=0x10 | codec, producer_id=9, producer_epoch=2,
                          base_sequence=4)
    log = kafka_to_log(data)
    header = batch.read_header(log)
    assert header.attributes & batch.ATTR_TRANSACTIONAL and \
        not header.attributes & batch.ATTR_CONTROL
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 2, 4)
    back = log_to_kafka(log)[0]
    attributes = struct.unpack_from(">h", back, 21)[0]
    assert attributes & 0x30 == 0x10 and attributes & 7 == codec
    assert bytes(kafka_to_log(bytes(back))) == bytes(log)


def test_a_marker_is_kafkas_control_batch():
    marker = control.build_marker(12, 3, True, 7, T0)
    batch.stamp(marker, 40, 2)
    kafka = bytes(log_to_kafka(marker)[0])
    (base_offset, _, leader_epoch, magic, _, attributes, delta, _, _, pid, epoch, seq,
     count) = struct.unpack_from(">qiibIhiqqqhii", kafka)
    assert (base_offset, leader_epoch, magic, delta, pid, epoch, seq, count) == \
        (40, 2, 2, 0, 12, 3, -1, 1)
    assert attributes & 0x30 == 0x30
    # Kafka's control record: key = version 0, type 1 (COMMIT); value = version 0, epoch 7.
    columns = record_columns.decode_scalar(kafka[61:], 1, 0)
    lengths = (columns.key_lengths[0], columns.value_lengths[0])
    assert lengths == (4, 6)
    assert bytes(columns.key_data) == struct.pack(">hh", 0, 1)
    assert bytes(columns.value_data) == struct.pack(">hi", 0, 7)
    # A client may not send it back (Kafka's LogValidator).
    expect_error(ErrorCode.INVALID_RECORD, kafka)
