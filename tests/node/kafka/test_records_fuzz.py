"""node.kafka.records under hypothesis: random records round trip both ways through every
codec, and random or mutated input only ever raises RecordError."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from node.kafka import record_columns
from node.kafka.records import RecordError, kafka_to_log, log_to_kafka
from shm import batch
from tests.node.kafka import kafka_v2

T0 = 1_700_000_000_000
blob = st.one_of(st.none(), st.binary(max_size=40))
header = st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8)))
row = st.tuples(blob, blob, st.integers(0, 10**6), st.lists(header, max_size=3))
codec = st.sampled_from([None, "none", "gzip", "snappy", "lz4", "zstd"])


@settings(max_examples=150, deadline=None)
@given(st.lists(row, min_size=1, max_size=40), codec, st.integers(0, 2**40),
       st.integers(-1, 2**31 - 1), st.booleans())
def test_round_trip_property(rows, compression, base_offset, epoch, with_headers):
    keys, values, stamps, headers = map(list, zip(*rows))
    ours = batch.build_batch(values, keys, [T0 + s for s in stamps],
                             headers=headers if with_headers else None,
                             producer_id=1, producer_epoch=0, base_sequence=3)
    batch.stamp(ours, base_offset, epoch)
    kafka = b"".join(log_to_kafka(bytes(ours), compression=compression))
    expected = batch.parse_batch(ours).records(with_headers=True)
    assert [r for _, rs in kafka_v2.read(kafka) for r in rs] == \
        [(o, t, k, v, h) for o, t, k, v, h in expected]
    back = kafka_to_log(kafka)
    assert batch.parse_batch(back).records(with_headers=True) == expected
    if compression in (None, "none"):
        assert bytes(back) == bytes(ours)


def only_record_errors(data, **kw):
    try:
        log = kafka_to_log(data, **kw)
    except RecordError:
        return
    for position, _ in batch.iter_batches(log):  # what converts is a valid log batch
        batch.parse_batch(log, position).records(with_headers=True)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_only_raise_record_error(data):
    only_record_errors(data)
    only_record_errors(kafka_v2.HEADER.pack(0, len(data) + 49, -1, 2, 0, 0, 0, 0, 0, -1, -1,
                                            -1, 1) + data)


def _seed_batches():
    rows = [(0, b"k", b"value", [("h", b"x"), ("n", None)]), (5, None, b"", []),
            (2, b"", None, [])]
    many = [(i, None, b"v%d" % i, [("i", None)] if i % 5 == 0 else []) for i in range(20)]
    return [kafka_v2.batch(r, first_timestamp=T0, attributes=c, producer_id=p,
                           base_sequence=0 if p >= 0 else -1)
            for c in (0, 1, 2, 3, 4) for p in (-1, 9) for r in (rows, many)]


SEEDS = _seed_batches()


@settings(max_examples=800, deadline=None)
@given(st.data())
def test_fuzz_mutated_batches_only_raise_record_error(data):
    buf = bytearray(data.draw(st.sampled_from(SEEDS)))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(buf) - 1))
        buf[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):  # reseal: the structure checks, not the CRC, must catch it
        kafka_v2.reseal(buf)
    cut = data.draw(st.integers(0, len(buf)))
    only_record_errors(bytes(buf[:cut]) if data.draw(st.booleans()) else bytes(buf))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzz_mutated_log_batches_only_raise_record_error(data):
    ours = bytearray(batch.build_batch([b"v0", None, b"value"], [b"k", None, b""], T0,
                                       headers=[[("a", b"1")], [], [("b", None)]]))
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(ours) - 1))
        ours[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        try:
            h = batch.read_header(ours)
            batch.CRC.pack_into(ours, batch.CRC_POSITION, batch.crc_of(ours, 0, h))
        except batch.CorruptRecordError:
            pass
    try:
        out = log_to_kafka(bytes(ours))
    except RecordError:
        return
    kafka_v2.read(b"".join(out))  # what converts is a valid Kafka batch


def _decoded(decode, raw, n):
    try:
        c = decode(raw, n, T0)
    except ValueError as e:
        return type(e).__name__
    as_list = [list(map(int, x)) if x is not None else None
               for x in (c.timestamps, c.key_lengths, c.value_lengths, c.header_lengths)]
    return as_list, c.key_data, c.value_data, c.header_data


@settings(max_examples=600, deadline=None)
@given(st.lists(row, min_size=1, max_size=25), st.data())
def test_scalar_and_numpy_decoders_agree_on_any_input(rows, data):
    """The two record decoders (Python for a few records, numpy for more) give the same
    columns or the same kind of error, on good and on mutated records."""
    raw = bytearray(b"".join(kafka_v2.record(i, ts, k, v, h)
                             for i, (k, v, ts, h) in enumerate(rows)))
    n = len(rows) + data.draw(st.sampled_from([0, 0, 0, -1, 1]))
    for _ in range(data.draw(st.integers(0, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(raw)
    if n >= 1:
        assert _decoded(record_columns.decode, raw, n) == \
            _decoded(record_columns.decode_scalar, raw, n)
