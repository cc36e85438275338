"""``bench.chaos.late_write.aborted_candidate`` (pure): which producer's aborted
transaction the ``late-write`` chaos fault may deliver again, on hand-built batches."""
from __future__ import annotations

import dataclasses

from bench.chaos import late_write as lw
from shm import batch, control


def _header(data: bytearray, offset: int):
    """The header of a one-batch buffer, as if the batch sat at ``offset``."""
    (b,) = batch.parse_batches(bytes(data))
    return dataclasses.replace(b.header, base_offset=offset)


def _data(pid, epoch, seq, values, offset):
    return (_header(batch.build_batch(values, producer_id=pid, producer_epoch=epoch,
                                      base_sequence=seq, transactional=True), offset), values)


def _marker(pid, epoch, commit, offset):
    return (_header(control.build_marker(pid, epoch, commit, 0, 0), offset), [b""])


def _read(batches, aborted):
    return lw.Read(high_watermark=100, last_stable_offset=100, aborted=aborted,
                   batches=batches)


def test_the_newest_aborted_transaction_whose_marker_ends_its_producers_batches():
    batches = [_data(7, 0, 0, [b"a"], 10), _marker(7, 0, False, 11),
               _data(8, 2, 4, [b"x", b"y"], 12), _data(8, 2, 6, [b"z"], 14),
               _marker(8, 2, False, 15)]
    producer, values = lw.aborted_candidate(_read(batches, [(7, 10), (8, 12)]))
    assert producer == lw.Producer(8, 2, 6) and producer.next_sequence == 7
    assert values == [b"x", b"y", b"z"]


def test_no_candidate_when_the_producer_wrote_after_its_abort_or_committed():
    after = [_data(7, 0, 0, [b"a"], 10), _marker(7, 0, False, 11),
             _data(7, 0, 1, [b"b"], 12)]                 # its next transaction is open
    assert lw.aborted_candidate(_read(after, [(7, 10)])) is None
    committed = [_data(7, 0, 0, [b"a"], 10), _marker(7, 0, False, 11),
                 _data(7, 0, 1, [b"b"], 12), _marker(7, 0, True, 13)]
    assert lw.aborted_candidate(_read(committed, [(7, 10)])) is None   # newest ends a commit
    assert lw.aborted_candidate(_read(after[:1], [])) is None


def test_the_aborted_transaction_must_start_in_the_tail_read():
    batches = [_data(7, 0, 3, [b"a"], 10), _marker(7, 0, False, 11)]
    assert lw.aborted_candidate(_read(batches, [(7, 4)])) is None    # began before the tail
    assert lw.aborted_candidate(_read(batches, [(7, 10)]))[0] == lw.Producer(7, 0, 3)
