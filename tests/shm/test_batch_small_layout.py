"""check_batch's struct path for small batches, its numpy path (``_check_layout``, no
views built) and ``_layout`` (read_columns') reach the same verdict, with the same
message, on every input."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from shm import batch


def _verdict(fn, buf):
    try:
        header = batch.read_header(buf, 0)
    except batch.CorruptRecordError:
        return "header"
    try:
        fn(buf, 0, header)
        return "ok"
    except batch.CorruptRecordError as e:
        return str(e)


records = st.lists(st.one_of(st.none(), st.binary(max_size=20)), min_size=1,
                   max_size=batch.SMALL_BATCH_RECORDS)


@given(records, st.data())
@settings(max_examples=300, deadline=None)
def test_struct_and_numpy_layout_checks_agree(values, data):
    buf = bytearray(batch.build_batch(values, keys=[b"k" if v else None for v in values]))
    assert _verdict(batch._check_small_layout, buf) == "ok"
    # Corrupt a few bytes anywhere: both must reach the same verdict.
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(buf) - 1))
        buf[where] = data.draw(st.integers(0, 255))
    assert _verdict(batch._check_small_layout, buf) == _verdict(batch._layout, buf) == \
        _verdict(batch._check_layout, buf)


@given(st.lists(st.one_of(st.none(), st.binary(max_size=20)), min_size=0,
                max_size=batch.SMALL_BATCH_RECORDS - 1), st.data())
@settings(max_examples=300, deadline=None)
def test_struct_and_numpy_layout_checks_agree_with_headers(values, data):
    headers = [[("h", v)] if i % 2 else [] for i, v in enumerate(values)] + [[("x", b"")]]
    buf = bytearray(batch.build_batch(values + [b"last"], headers=headers))
    assert _verdict(batch._check_small_layout, buf) == "ok"
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(buf) - 1))
        buf[where] = data.draw(st.integers(0, 255))
    assert _verdict(batch._check_small_layout, buf) == _verdict(batch._layout, buf) == \
        _verdict(batch._check_layout, buf)
