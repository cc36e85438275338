"""Idempotent producers' state (shm.producer_state) and the log keeping it."""
from __future__ import annotations

from shm import batch
from shm.producer_state import SEQUENCE_MAX, ProducerStates, Verdict, last_sequence


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
    assert s.check(7, 0, 2, 6)[0] is Verdict.OUT_OF_ORDER        # overlaps, not a batch
    # A newer epoch starts again at 0; an older one is fenced.
    assert s.check(7, 1, 0, 0) == (Verdict.APPEND, None)
    assert s.check(7, 1, 10, 10)[0] is Verdict.OUT_OF_ORDER
    s.update(7, 1, 0, 0, 110, 110)
    assert s.check(7, 0, 10, 12)[0] is Verdict.FENCED
    assert s.check(7, 1, 0, 0)[0] is Verdict.DUPLICATE


def test_only_the_last_five_batches_are_remembered_and_sequences_wrap():
    s = ProducerStates()
    for i in range(7):
        s.update(1, 0, i, i, i, i)
    assert s.check(1, 0, 1, 1)[0] is Verdict.OUT_OF_ORDER     # forgotten: not a duplicate
    assert s.check(1, 0, 2, 2)[0] is Verdict.DUPLICATE
    assert last_sequence(SEQUENCE_MAX, 3) == 1
    s.update(2, 0, SEQUENCE_MAX - 1, SEQUENCE_MAX, 0, 1)
    assert s.check(2, 0, 0, 3) == (Verdict.APPEND, None)


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
