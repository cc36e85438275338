"""shm.record_headers' decoder (one-byte varints read inline) against its checker, with
lengths and counts that need multi-byte varints; and the producer's small-batch encoder
writing the headers column byte for byte as ``build_batch``."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from shm import batch, record_headers
from shm.record_headers import HeaderFormatError, decode_entry, encode_entry, entry_end

LONG = [("k" * 64, b"v" * 64), ("", None), ("\u00e9" * 100, b"x" * 5000), ("k" * 64, b"")]


def test_long_keys_values_and_many_headers_round_trip():
    for headers in (LONG, [("h%d" % i, b"%d" % i) for i in range(200)], [("a", None)] * 64):
        entry = encode_entry(headers)
        assert decode_entry(entry) == headers
        assert entry_end(entry, 0, len(entry)) == len(entry)


@pytest.mark.parametrize("entry", [
    b"\x01",                      # count -1
    b"\x02",                      # one header, nothing after the count
    b"\x02\x02a",                 # no value length
    b"\x02\x04a",                 # key runs past the entry
    b"\x02\x02a\x03",             # value length -2
    b"\x02\x02a\x04x",            # value runs past the entry
    b"\x02\x02a\x01\x00",         # a byte left over
    b"\x02\x80",                  # a truncated varint key length
    b"\x02\xff\xff\xff\xff\xff\x01",  # a varint over 5 bytes
])
def test_malformed_entries_raise_header_format_error(entry):
    with pytest.raises(HeaderFormatError):
        decode_entry(entry)
    with pytest.raises(HeaderFormatError):       # the checker refuses it as well
        record_headers.check_entries(entry, [0, len(entry)])


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=40))
def test_decoder_and_checker_agree_on_any_bytes(data):
    try:
        ok = entry_end(data, 0, len(data)) == len(data)
    except HeaderFormatError:
        ok = False
    try:
        headers = decode_entry(data)
    except HeaderFormatError:
        assert not ok, data
    else:
        assert ok, data
        assert decode_entry(encode_entry(headers)) == headers  # (varints may be longer)


def test_small_batch_encoder_writes_headers_as_build_batch():
    rng = random.Random(7)
    for n in (1, 2, 9, batch.SMALL_ENCODE_RECORDS_MAX):
        values = [rng.randbytes(rng.randrange(0, 30)) for _ in range(n)]
        keys = [rng.randbytes(rng.randrange(0, 5)) for _ in range(n)]
        headers = [rng.choice([None, [], [("a", b"1")], LONG[:2], [("d", None), ("d", b"")]])
                   for _ in range(n)]
        for k in (None, keys):
            small = batch.encode_small_batch(values, k, 1_700_000_000_000, headers)
            assert small == batch.build_batch(values, k, 1_700_000_000_000, headers=headers)
            assert batch.parse_batch(small).record_headers() == [h or [] for h in headers]
        none = [None] * n
        assert batch.encode_small_batch(values, keys, 5, none) == \
            batch.encode_small_batch(values, keys, 5) == batch.build_batch(values, keys, 5)
    with pytest.raises(ValueError, match="1 header lists for 2 values"):
        batch.encode_small_batch([b"a", b"b"], None, 1, [[("h", b"")]])
    assert record_headers.encode_entry(None) == b""


def test_runs_of_equal_entries_are_checked_once_but_a_different_one_still_is():
    good = encode_entry([("k", b"v")])                  # 02 02 6b 02 76
    bad = good[:3] + b"\x04" + good[4:]                 # same length, value runs past
    data = good * 3 + bad + good
    offsets = [0, 5, 10, 15, 20, 25]
    record_headers.check_entries(good * 3, offsets[:4])
    with pytest.raises(HeaderFormatError):
        record_headers.check_entries(data, offsets)
    with pytest.raises(HeaderFormatError):
        record_headers.check_entries(good + b"" + bad, [0, 5, 5, 10])   # past an empty entry


def test_equal_entries_decode_to_a_list_of_their_own_per_record():
    headers = [[("k", b"v")], [("k", b"v")], [], [], [("k", b"v")], [("k", None)]]
    parsed = batch.parse_batch(batch.build_batch([b"x"] * 6, None, 1, headers=headers))
    got = parsed.record_headers()
    assert got == headers
    assert len({id(h) for h in got}) == 6
    got[0].append(("mine", b""))
    assert parsed.record_headers()[1] == [("k", b"v")] and got[1] == [("k", b"v")]


def test_encode_entries_encodes_a_run_once_and_each_change():
    same = [("k", b"v")]
    entries = record_headers.encode_entries([same, list(same), None, [], same, [("k", None)]])
    assert entries == [encode_entry(same)] * 2 + [b"", b"", encode_entry(same),
                                                   encode_entry([("k", None)])]
