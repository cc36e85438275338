"""Record headers in node.client, pure parts: ``send``'s checks and Kafka's shape, the
accumulator's encoding into shm.batch's headers column (struct and numpy paths), and the
consumer's ``ConsumerRecord.headers`` (a tuple of pairs, decoded only when a batch has the
column)."""
from __future__ import annotations

import threading

import pytest

from node.client.consumer.fetcher import FetchedBatch, header_tuples
from node.client.producer import Producer
from node.client.producer.accumulator import RecordAccumulator, encode
from node.client.producer.api import record_headers
from node.client.types import ConsumerRecord
from shm import batch
from shm.batch import CorruptRecordError

TS = 1_700_000_000_000


# ------------------------------------------------------------------ send's checks
def test_headers_take_kafkas_list_of_pairs_or_a_dict():
    pairs = [("a", b"1"), ("a", None), ("b", bytearray(b"2")), ("c", memoryview(b"3")),
             ("d", "\u00e9"), ("\u00e9t\u00e9", b"")]
    assert record_headers(pairs) == [("a", b"1"), ("a", None), ("b", b"2"), ("c", b"3"),
                                     ("d", "\u00e9".encode()), ("\u00e9t\u00e9", b"")]
    assert all(type(v) is bytes for _, v in record_headers(pairs) if v is not None)
    assert record_headers({"x": b"1", "y": None}) == [("x", b"1"), ("y", None)]
    assert record_headers((["k", b"v"],)) == [("k", b"v")]
    assert record_headers(iter([("k", b"v")])) == [("k", b"v")]
    for none in (None, [], (), {}):
        assert record_headers(none) is None


@pytest.mark.parametrize("bad, message", [
    ([(b"k", b"v")], "header key must be str, got bytes"),
    ([(None, b"v")], "header key must be str, got NoneType"),
    ([("k", 5)], "value of header 'k' must be bytes or str, got int"),
    ([("k", b"v", b"w")], "must be a \\(key, value\\) pair"),
    (["kv"], "must be a \\(key, value\\) pair"),
    ("k=v", "headers must be a list of \\(str, bytes\\) pairs or a dict, got str"),
    (b"k", "headers must be a list .* got bytes"),
    (7, "headers must be a list .* got int"),
])
def test_bad_headers_are_refused_with_a_clear_type_error(bad, message):
    with pytest.raises(TypeError, match=message):
        record_headers(bad)


def test_a_key_that_is_not_utf8_is_refused():
    with pytest.raises(ValueError, match="cannot be encoded as UTF-8"):
        record_headers([("\ud800", b"v")])
    # What a consumer decoded with surrogateescape goes out again byte for byte.
    assert record_headers([("\udcff", b"v")]) == [("\udcff", b"v")]


def test_send_refuses_bad_headers_before_queueing_anything():
    p = Producer.__new__(Producer)      # no I/O thread: only send's checks run
    p._closed = False
    p._accumulator = RecordAccumulator(threading.Lock(), 16384, 0.0)
    with pytest.raises(TypeError, match="header key must be str"):
        p.send("t", b"v", headers=[(b"k", b"v")])
    assert p._accumulator.incomplete == 0 and not p._accumulator.open


# ------------------------------------------------------------------ the accumulator
def _encoded(records, batch_size=1 << 20):
    """Append ``records`` ((value, key, headers), ...) to one partition; its batch parsed."""
    acc = RecordAccumulator(threading.Lock(), batch_size, linger_s=1.0)
    for value, key, headers in records:
        acc.append(("t", 0), value, key, TS, headers)
    [buf] = acc.drain(now=float("inf"))
    return buf, batch.parse_batch(encode(buf).data)


@pytest.mark.parametrize("n", [1, 3, batch.SMALL_ENCODE_RECORDS_MAX + 5])  # struct, numpy
def test_records_with_and_without_headers_share_a_batch(n):
    headers = [[("i", b"%d" % i), ("dup", None), ("dup", b"")] if i % 3 == 0 else None
               for i in range(n)]
    buf, parsed = _encoded([(b"v%d" % i, b"k", h) for i, h in enumerate(headers)])
    assert parsed.header.attributes & batch.ATTR_HEADERS
    assert parsed.record_headers() == [h or [] for h in headers]
    assert parsed.values.to_pylist() == [b"v%d" % i for i in range(n)]
    assert buf.headers == headers


def test_headers_only_on_a_later_record_fill_in_the_earlier_ones():
    buf, parsed = _encoded([(b"a", None, None), (b"b", None, None), (b"c", None, [("h", b"")])])
    assert buf.headers == [None, None, [("h", b"")]]
    assert parsed.record_headers() == [[], [], [("h", b"")]]


@pytest.mark.parametrize("n", [2, batch.SMALL_ENCODE_RECORDS_MAX + 5])
def test_a_batch_without_headers_is_the_batch_of_before_byte_for_byte(n):
    values = [b"v%d" % i for i in range(n)]
    buf, parsed = _encoded([(v, None, None) for v in values])
    assert buf.headers is None and parsed.headers is None
    assert not parsed.header.attributes & batch.ATTR_HEADERS
    assert encode(buf).data == batch.build_batch(values, None, TS)


def test_headers_count_towards_batch_size():
    acc = RecordAccumulator(threading.Lock(), batch_size=200, linger_s=1.0)
    acc.append(("t", 0), b"v", None, TS, [("h", b"x" * 300)])
    assert not acc.open and len(acc.sealed) == 1     # sealed by its headers' bytes


# ------------------------------------------------------------------ the consumer
def _fetched(headers, skip=0, n=5):
    data = batch.build_batch([b"v%d" % i for i in range(n)], [b"k"] * n,
                             [TS + i for i in range(n)], headers=headers)
    batch.stamp(data, 100, 0)           # as the leader stores it: base offset 100
    return FetchedBatch("t", 2, batch.parse_batch(data), skip)


def test_consumer_records_carry_their_headers_in_order_with_nulls_and_repeats():
    headers = [[("a", b"1"), ("a", None)], [], [("\u00e9", b"\xff")], [], [("z", b"")]]
    for skip in (0, 2):
        records = _fetched(headers, skip).records()
        assert records == [ConsumerRecord("t", 2, 100 + i, TS + i, b"k", b"v%d" % i,
                                          tuple(headers[i])) for i in range(skip, 5)]
        assert all(type(r) is ConsumerRecord and type(r.headers) is tuple for r in records)


def test_consumer_records_without_headers_share_the_empty_tuple():
    for headers in (None, [[]] * 5):     # no column either way
        records = _fetched(headers, skip=1).records()
        assert [r.headers for r in records] == [()] * 4
        assert [r.offset for r in records] == [101, 102, 103, 104]


def test_equal_headers_decode_once_and_a_bad_entry_is_corrupt():
    same = [("trace", b"t"), ("n", None)]
    records = _fetched([same, same, [("other", b"")], same, same]).records()
    assert [r.headers for r in records] == [tuple(same)] * 2 + [(("other", b""),)] + \
        [tuple(same)] * 2
    assert records[0].headers is records[1].headers       # one decoded tuple per run
    assert header_tuples([b"", b"", b"\x02\x02k\x01"]) == [(), (), (("k", None),)]
    with pytest.raises(CorruptRecordError, match="record headers"):
        header_tuples([b"\x02\x02k"])


def test_a_record_built_by_hand_defaults_to_no_headers():
    record = ConsumerRecord("t", 0, 7, TS, None, b"v")
    assert record.headers == () and record._replace(key=b"k").headers == ()


def test_the_common_shape_is_copied_so_later_changes_do_not_reach_the_batch():
    given = [("a", b"1"), ("a", None)]
    checked = record_headers(given)
    given.append(("late", b""))
    given[0] = ("changed", b"")
    assert checked == [("a", b"1"), ("a", None)]
    # The common shape with anything unusual goes the long way and is still checked.
    assert record_headers([("a", b"1"), ("\u00e9", b"2")]) == [("a", b"1"), ("\u00e9", b"2")]
    with pytest.raises(TypeError, match="value of header 'b'"):
        record_headers([("a", b"1"), ("b", 2)])
