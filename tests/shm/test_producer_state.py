"""Idempotent producers' state (shm.producer_state) and the log keeping it."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shm import batch
from shm.producer_state import (RUNS_KEPT, SEQUENCE_MAX, BatchSpan, ProducerStates, Verdict,
                                _distance, last_sequence)


def test_sequences_duplicates_gaps_and_epochs():
    s = ProducerStates()
    assert s.check(7, 0, 0, 4) == (Verdict.APPEND, None)
    assert s.check(7, 0, 3, 4)[0] is Verdict.UNKNOWN_PRODUCER   # never seen, not at 0
    s.update(7, 0, 0, 4, 100, 104)
    s.update(7, 0, 5, 9, 105, 109)
    assert s.check(7, 0, 10, 12) == (Verdict.APPEND, None)
    verdict, span = s.check(7, 0, 0, 4)
    assert verdict is Verdict.DUPLICATE and (span.first_offset, span.last_offset) == (100, 104)
    assert s.check(7, 0, 11, 12)[0] is Verdict.OUT_OF_ORDER      # a gap
    assert s.check(7, 0, 8, 11)[0] is Verdict.OUT_OF_ORDER       # beyond what was written
    # The two batches went back to back (one run): their sequences 2-6 went to 102-106.
    verdict, span = s.check(7, 0, 2, 6)
    assert verdict is Verdict.DUPLICATE and (span.first_offset, span.last_offset) == (102, 106)
    s.update(8, 0, 0, 0, 110, 110)                              # another producer's batch
    s.update(7, 0, 10, 12, 111, 113)                            # a new run of producer 7
    assert s.check(7, 0, 9, 10)[0] is Verdict.OUT_OF_ORDER      # across two runs
    assert s.check(7, 0, 10, 11)[1] == BatchSpan(10, 11, 111, 112)
    # A newer epoch starts again at 0; an older one is fenced.
    assert s.check(7, 1, 0, 0) == (Verdict.APPEND, None)
    assert s.check(7, 1, 10, 10)[0] is Verdict.OUT_OF_ORDER
    s.update(7, 1, 0, 0, 110, 110)
    assert s.check(7, 0, 10, 12)[0] is Verdict.FENCED
    assert s.check(7, 1, 0, 0)[0] is Verdict.DUPLICATE


def test_only_the_last_five_runs_are_remembered_and_sequences_wrap():
    s = ProducerStates()
    for i in range(7):                   # offsets apart: every batch is a run of its own
        s.update(1, 0, i, i, 2 * i, 2 * i)
    assert len(s.entries[1].runs) == RUNS_KEPT == 5
    assert s.check(1, 0, 1, 1)[0] is Verdict.OUT_OF_ORDER     # forgotten: not a duplicate
    assert s.check(1, 0, 2, 2)[0] is Verdict.DUPLICATE
    for i in range(7, 1007):             # back to back: one run, however many batches
        s.update(1, 0, i, i, 2 * 6 + i - 6, 2 * 6 + i - 6)
    assert len(s.entries[1].runs) == 5
    assert s.check(1, 0, 2, 2)[0] is Verdict.DUPLICATE
    assert s.check(1, 0, 6, 1006)[1] == BatchSpan(6, 1006, 12, 1012)
    assert last_sequence(SEQUENCE_MAX, 3) == 1
    s.update(2, 0, SEQUENCE_MAX - 1, SEQUENCE_MAX, 0, 1)
    assert s.check(2, 0, 0, 3) == (Verdict.APPEND, None)
    s.update(2, 0, 0, 3, 2, 5)           # the run wraps past SEQUENCE_MAX
    assert s.entries[2].runs[-1] == BatchSpan(SEQUENCE_MAX - 1, 3, 0, 5)
    assert s.check(2, 0, SEQUENCE_MAX, 1)[1] == BatchSpan(SEQUENCE_MAX, 1, 1, 3)
    assert s.check(2, 0, 2, SEQUENCE_MAX)[0] is Verdict.OUT_OF_ORDER


def test_a_batch_whose_offsets_do_not_follow_its_sequences_is_a_run_of_its_own():
    """A batch compaction thinned (fewer records than offsets) is matched whole, as
    Kafka matches every batch, and starts and ends a run."""
    s = ProducerStates()
    s.update(1, 0, 0, 4, 0, 4)
    s.update(1, 0, 5, 7, 5, 9)                  # 3 sequences over 5 offsets
    s.update(1, 0, 8, 8, 10, 10)
    assert [(r.first_seq, r.last_seq) for r in s.entries[1].runs] == [(0, 4), (5, 7), (8, 8)]
    assert s.check(1, 0, 5, 7)[1] == BatchSpan(5, 7, 5, 9)
    assert s.check(1, 0, 5, 6)[0] is Verdict.OUT_OF_ORDER
    assert s.check(1, 0, 4, 5)[0] is Verdict.OUT_OF_ORDER


def test_old_snapshots_of_single_batches_load_as_runs():
    """A snapshot written before runs lists every batch; loading merges them."""
    s = ProducerStates.from_json([[3, 1, [[0, 1, 10, 11], [2, 4, 12, 14], [5, 5, 20, 20]]]])
    assert s.to_json() == [[3, 1, [[0, 4, 10, 14], [5, 5, 20, 20]], None]]  # no timestamp
    assert s.check(3, 1, 2, 4)[1] == BatchSpan(2, 4, 12, 14)


def test_idle_producers_expire_unless_a_transaction_is_open():
    """Kafka's removeExpiredProducers: idle since its last batch's (or marker's) max
    timestamp for producer.id.expiration.ms or more, and no transaction open."""
    s = ProducerStates()
    s.update(1, 0, 0, 1, 0, 1, timestamp=1_000)
    s.update(2, 0, 0, 0, 2, 2, timestamp=1_000)
    s.update(2, 0, 1, 1, 3, 3, timestamp=5_000)         # the last batch counts
    s.update(3, 0, 0, 0, 4, 4, timestamp=1_000)         # a transaction open
    s.update(4, 0, 0, 0, 5, 5, timestamp=1_000)
    s.end_transaction(4, 0, timestamp=4_500)            # a marker counts too
    assert s.expire(5_999, 5_000, open_transactions={3}) == []
    assert s.expire(6_000, 5_000, open_transactions={3}) == [1]
    assert sorted(s.entries) == [2, 3, 4]
    assert s.check(1, 0, 2, 2)[0] is Verdict.UNKNOWN_PRODUCER   # forgotten: seq 0 only
    assert s.check(1, 0, 0, 0)[0] is Verdict.APPEND
    assert s.expire(10_000, 5_000, open_transactions={3}) == [2, 4]
    assert s.expire(10**9, 5_000, open_transactions={3}) == []
    assert sorted(s.entries) == [3]
    assert s.expire(10**9, 5_000) == [3]                # its transaction ended


def test_a_producer_whose_timestamp_is_not_known_expires_from_the_first_check():
    s = ProducerStates.from_json([[7, 0, [[0, 0, 0, 0]]], [8, 0, [[0, 0, 1, 1]], 50]])
    assert s.entries[7].last_timestamp is None and s.entries[8].last_timestamp == 50
    assert s.expire(10_000, 1_000) == [8]               # 7's clock starts now
    assert s.entries[7].last_timestamp == 10_000
    assert s.expire(10_999, 1_000) == []
    assert s.expire(11_000, 1_000) == [7]
    assert ProducerStates.from_json(ProducerStates().to_json()).entries == {}
    for bad in ([[1, 0, [], 5, 6]], [[1, 0, [], "soon"]]):
        try:
            ProducerStates.from_json(bad)
        except ValueError as e:
            assert "not a producer-state snapshot" in str(e)
        else:
            raise AssertionError(f"{bad} loaded")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 30), st.integers(1, 4)),
                min_size=1, max_size=60),
       st.integers(0, SEQUENCE_MAX), st.data())
def test_any_of_a_producers_last_five_frames_retried_is_answered_with_its_offsets(
        frames, start_seq, data):
    """Three producers write frames (1-4 batches of 1-30 records, back to back) in any
    interleaving, producer 0 from any sequence (wrapping): each of a producer's last five
    frames, retried, is a DUPLICATE with the offsets it went to; its next frame is an
    APPEND; and a frame that straddles what was written is refused."""
    from shm.producer_state import check_frame
    s = ProducerStates()
    next_seq = {0: start_seq, 1: 0, 2: 0}
    offset = 0
    sent: dict[int, list] = {0: [], 1: [], 2: []}       # pid -> [(headers, first, last)]
    s.update(0, 0, _back(start_seq), _back(start_seq), 0, 0) if start_seq else None
    offset = 1
    for pid, records, batches in frames:
        headers = []
        for _ in range(batches):
            n = records
            headers.append(batch.parse_batch(_batch(pid, 0, next_seq[pid], n)).header)
            next_seq[pid] = (next_seq[pid] + n) % (SEQUENCE_MAX + 1)
        assert check_frame(s, headers)[0] is Verdict.APPEND
        first = offset
        for h in headers:
            s.update(pid, 0, h.base_sequence, last_sequence(h.base_sequence, h.record_count),
                     offset, offset + h.record_count - 1)
            offset += h.record_count
        sent[pid].append((headers, first, offset - 1))
    for pid, frames_of in sent.items():
        for headers, first, last in frames_of[-5:]:
            assert check_frame(s, headers) == (Verdict.DUPLICATE, first, last)
        if frames_of:
            nxt = batch.parse_batch(_batch(pid, 0, next_seq[pid], 1)).header
            assert check_frame(s, [nxt])[0] is Verdict.APPEND
            headers, _, _ = data.draw(st.sampled_from(frames_of[-5:]))
            over = batch.parse_batch(_batch(pid, 0, headers[-1].base_sequence,
                                            _distance(headers[-1].base_sequence,
                                                      next_seq[pid]) + 1)).header
            assert check_frame(s, headers[:-1] + [over])[0] is Verdict.OUT_OF_ORDER


def _back(seq: int) -> int:
    return (seq - 1) % (SEQUENCE_MAX + 1)


def _batch(pid, epoch, seq, n, *, base_offset=0):
    return batch.build_batch([b"v%d" % i for i in range(n)], producer_id=pid, producer_epoch=epoch,
                             base_sequence=seq, base_offset=base_offset)


def test_the_log_keeps_the_state_and_rebuilds_it_after_reopen_and_truncation(tmp_path,
                                                                            cluster_id):
    from tests.shm.test_log_recovery import open_log
    log = open_log(tmp_path, cluster_id)
    try:
        assert len(log.producer_states()) == 0
        log.append_as_leader(_batch(5, 0, 0, 3), 0)            # offsets 0-2
        log.append_as_leader(batch.build_batch([b"plain"]), 0)     # 3, no producer id
        log.append_as_leader(_batch(5, 0, 3, 2), 0)            # 4-5
        verdict, span = log.producer_states().check(5, 0, 3, 4)
        assert verdict is Verdict.DUPLICATE and span.first_offset == 4
        log.close()
        log = open_log(tmp_path, cluster_id)                   # rebuilt from the headers
        verdict, span = log.producer_states().check(5, 0, 3, 4)
        assert verdict is Verdict.DUPLICATE and span.first_offset == 4
        assert log.producer_states().check(5, 0, 5, 5)[0] is Verdict.APPEND
        log.truncate_to(4)                                     # the second batch goes
        assert log.producer_states().check(5, 0, 3, 4) == (Verdict.APPEND, None)
        log.append_as_follower(_batch(9, 2, 0, 1, base_offset=4))   # followers learn too
        assert log.producer_states().check(9, 2, 0, 0)[0] is Verdict.DUPLICATE
    finally:
        log.delete()


def test_the_log_forgets_idle_producers_and_its_snapshots_do_not_bring_them_back(
        tmp_path, cluster_id):
    """``Log.expire_producers`` by the batches' max timestamps (CreateTime, the
    producer's), not the time of the append; a producer with a transaction open stays;
    the next roll's snapshot no longer holds the forgotten ones, but a build from the
    batch headers learns them again (as Kafka's), for the next check to forget."""
    from shm.log.producer_snapshots import delete_snapshots, read_snapshot, snapshot_offsets
    from tests.shm.test_log_recovery import open_log
    day_ms = 86_400_000
    now = 10 * day_ms
    log = open_log(tmp_path, cluster_id)
    try:
        assert log.expire_producers(now, day_ms) == []          # not built: left alone
        log.producer_states()
        log.append_as_leader(batch.build_batch([b"old"], timestamps_ms=now - 2 * day_ms,
                                               producer_id=5, producer_epoch=0,
                                               base_sequence=0), 0)
        log.append_as_leader(batch.build_batch([b"new"], timestamps_ms=now - 1_000,
                                               producer_id=6, producer_epoch=0,
                                               base_sequence=0), 0)
        log.append_as_leader(batch.build_batch([b"txn"], timestamps_ms=now - 3 * day_ms,
                                               producer_id=7, producer_epoch=0,
                                               base_sequence=0, transactional=True), 0)
        assert log.expire_producers(now, day_ms) == [5]
        assert sorted(log.producer_states().entries) == [6, 7]
        assert log.producer_states().check(5, 0, 1, 1)[0] is Verdict.UNKNOWN_PRODUCER
        log.roll()
        producers, _ = read_snapshot(log.directory, snapshot_offsets(log.directory)[-1])
        assert sorted(producers.entries) == [6, 7]
        log.close()
        log = open_log(tmp_path, cluster_id)     # built from the snapshot: 5 stays gone
        assert sorted(log.producer_states().entries) == [6, 7]
        log._producers = log._txns = None
        delete_snapshots(log.directory, lambda offset: True)
        assert sorted(log.producer_states().entries) == [5, 6, 7]   # walked from the log
        assert log.expire_producers(now, day_ms) == [5]
    finally:
        log.delete()


def test_batches_without_a_sequence_teach_nothing(tmp_path, cluster_id):
    from tests.shm.test_log_recovery import open_log
    log = open_log(tmp_path, cluster_id)
    try:
        log.append_as_leader(batch.build_batch([b"x"], producer_id=3, producer_epoch=0,
                                               base_sequence=-1), 0)
        assert len(log.producer_states()) == 0
    finally:
        log.delete()


def test_snapshots_at_each_roll_rebuild_the_same_state(tmp_path, cluster_id):
    """Small segments: the state is written as <offset>.snapshot at each roll; a reopened
    log starts from the newest one and walks only the batches after it, to the same
    state as a walk of the whole log; a torn snapshot is ignored; truncation and
    retention remove the snapshots they make wrong."""
    import os

    from shm.log.producer_snapshots import SNAPSHOTS_KEPT, snapshot_offsets, snapshot_path
    from tests.shm.test_log_recovery import open_log
    log = open_log(tmp_path, cluster_id)
    try:
        log.producer_states()                       # built (empty): kept from now on
        for i in range(300):
            log.append_as_leader(_batch(1 + i % 3, 0, (i // 3) * 2, 2), 0)
        assert len(log.segments) > 3
        snapshots = snapshot_offsets(log.directory)
        assert snapshots and len(snapshots) <= SNAPSHOTS_KEPT
        assert all(o in log._bases for o in snapshots)
        expected = log.producer_states().to_json()
        log.close()
        log = open_log(tmp_path, cluster_id)
        assert log.producer_states().to_json() == expected
        log._producers = None
        for offset in snapshot_offsets(log.directory):      # every snapshot torn: a full walk
            with open(snapshot_path(log.directory, offset), "r+b") as f:
                f.seek(12)
                f.write(b"#")
        assert log.producer_states().to_json() == expected
        assert snapshot_offsets(log.directory) == []        # the torn ones are gone
        log.append_as_leader(_batch(1, 0, 200, 2), 0)
        log.roll()
        newest = snapshot_offsets(log.directory)[-1]
        log.truncate_to(newest - 2)
        assert all(o <= log.log_end_offset for o in snapshot_offsets(log.directory))
        assert log.producer_states().check(1, 0, 200, 201)[0] is Verdict.APPEND
        log.truncate_fully_and_start_at(5000)
        assert snapshot_offsets(log.directory) == [] and len(log.producer_states()) == 0
        assert not [n for n in os.listdir(log.directory) if n.endswith(".tmp")]
    finally:
        log.delete()


def test_a_frame_is_appended_refused_or_answered_as_a_retry_as_a_whole():
    from shm.producer_state import check_frame

    def headers(*batches):
        return [batch.parse_batch(_batch(pid, epoch, seq, n)).header
                for pid, epoch, seq, n in batches]
    s = ProducerStates()
    assert check_frame(s, [batch.parse_batch(batch.build_batch([b"x"])).header]) is None
    assert check_frame(s, headers((4, 0, 0, 2), (4, 0, 2, 3)))[0] is Verdict.APPEND
    assert check_frame(s, headers((4, 0, 0, 2), (4, 0, 3, 3)))[0] is Verdict.OUT_OF_ORDER
    assert check_frame(s, headers((4, 0, 0, 2), (5, 0, 0, 1)))[0] is Verdict.MIXED
    s.update(4, 0, 0, 1, 10, 11)
    s.update(4, 0, 2, 4, 12, 14)
    assert check_frame(s, headers((4, 0, 0, 2), (4, 0, 2, 3))) == (Verdict.DUPLICATE, 10, 14)
    assert check_frame(s, headers((4, 0, 2, 3), (4, 0, 5, 1)))[0] is Verdict.OUT_OF_ORDER
