"""The consumer's read_committed filter (Kafka's CompletedFetch): a fetch answer's
region, built as a leader's log holds it, fed to the consumer's buffer; what ``poll``
returns and where its position goes. No broker: the region is the input."""
from __future__ import annotations

import pytest

from node.client.consumer import Consumer
from node.client.consumer.fetcher import AbortedFilter
from node.client.types import TopicPartition
from shm import batch, control

TP = TopicPartition("t", 0)
TS = 1_700_000_000_000


class _Log:
    """A partition's region: batches back to back, offsets as a leader stamps them."""

    def __init__(self):
        self.data = bytearray()
        self.offset = 0
        self.sequence: dict[int, int] = {}

    def data_batch(self, values, pid=-1, transactional=False):
        seq = self.sequence.get(pid, 0) if pid >= 0 else -1
        b = batch.build_batch(values, None, TS, producer_id=pid,
                              producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                              transactional=transactional)
        if pid >= 0:
            self.sequence[pid] = seq + len(values)
        self._put(b, len(values))

    def marker(self, pid, commit):
        self._put(control.build_marker(pid, 0, commit, 0, TS), 1)

    def _put(self, b, n):
        batch.stamp(b, self.offset, 0)
        self.data += b
        self.offset += n


def _consumer(isolation_level):
    c = Consumer("127.0.0.1:1", isolation_level=isolation_level)
    c.assign([TP])
    c.seek(TP, 0)
    return c


def _read(c, log, aborted):
    state = c._states[TP]
    state.high_watermark = state.last_stable_offset = log.offset
    c._buffer(state, bytes(log.data), aborted if c.read_committed else None)
    out = []
    for _ in range(10):
        if not state.buffered:
            break
        out += c.poll(0, max_records=3)      # small polls: a batch split over polls
    return [r.value for r in out], c.position(TP)


@pytest.fixture
def mixed():
    """pid 1 commits, pid 2 aborts, interleaved; a plain record; an aborted txn at the end."""
    log = _Log()
    log.data_batch([b"plain-0"])                                  # 0
    log.data_batch([b"c-1", b"c-2"], pid=1, transactional=True)   # 1-2
    log.data_batch([b"a-3"], pid=2, transactional=True)           # 3
    log.data_batch([b"c-4"], pid=1, transactional=True)           # 4
    log.data_batch([b"a-5", b"a-6"], pid=2, transactional=True)   # 5-6
    log.marker(1, commit=True)                                    # 7
    log.marker(2, commit=False)                                   # 8
    log.data_batch([b"a2-9"], pid=2, transactional=True)          # 9 (a second txn of pid 2)
    log.data_batch([b"c-10"], pid=1, transactional=True)          # 10
    log.marker(2, commit=False)                                   # 11
    log.marker(1, commit=True)                                    # 12
    return log, [[2, 3], [2, 9]]


def test_read_committed_drops_aborted_transactions_and_every_marker(mixed):
    log, aborted = mixed
    c = _consumer("read_committed")
    try:
        values, position = _read(c, log, aborted)
    finally:
        c.close()
    assert values == [b"plain-0", b"c-1", b"c-2", b"c-4", b"c-10"]
    assert position == 13, "the position stops on a marker or an aborted batch"


def test_read_uncommitted_returns_aborted_records_but_never_markers(mixed):
    log, aborted = mixed
    c = _consumer("read_uncommitted")
    try:
        values, position = _read(c, log, aborted)
    finally:
        c.close()
    assert values == [b"plain-0", b"c-1", b"c-2", b"a-3", b"c-4", b"a-5", b"a-6", b"a2-9",
                      b"c-10"]
    assert position == 13


def test_a_region_of_only_markers_and_aborted_data_moves_the_position_past_it():
    log = _Log()
    log.data_batch([b"x"], pid=3, transactional=True)
    log.marker(3, commit=False)
    c = _consumer("read_committed")
    try:
        values, position = _read(c, log, [[3, 0]])
    finally:
        c.close()
    assert values == [] and position == 2


def test_an_aborted_transaction_begun_before_the_fetch_offset_is_still_dropped():
    """The leader lists aborted transactions overlapping the range, first offset before it."""
    f = AbortedFilter([[7, 40]])
    header = batch.read_header(_one(7, 50, transactional=True))
    assert f.drops(header)
    other = batch.read_header(_one(8, 51, transactional=True))
    assert not f.drops(other)


def test_a_producers_non_transactional_batch_is_never_dropped():
    f = AbortedFilter([[7, 0]])
    assert not f.drops(batch.read_header(_one(7, 5, transactional=False)))


def test_a_producers_later_transaction_after_its_abort_marker_is_kept():
    f = AbortedFilter([[7, 0]])
    assert f.drops(batch.read_header(_one(7, 0, transactional=True)))
    marker = control.build_marker(7, 0, False, 0, TS)
    batch.stamp(marker, 1, 0)
    f.control(batch.read_header(marker))
    assert not f.drops(batch.read_header(_one(7, 2, transactional=True)))


def test_isolation_level_is_checked():
    with pytest.raises(ValueError, match="isolation_level"):
        Consumer("127.0.0.1:1", isolation_level="committed")


def _one(pid, offset, transactional):
    b = batch.build_batch([b"v"], None, TS, producer_id=pid, producer_epoch=0,
                          base_sequence=0, transactional=transactional)
    batch.stamp(b, offset, 0)
    return b
