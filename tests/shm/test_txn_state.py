"""A partition's transactions (shm.txn_state): pure unit tests and a model test."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from shm.txn_state import AbortedTxn, CompletedTxn, TxnState


def test_data_opens_a_marker_completes_and_lso_waits_for_the_hw():
    s = TxnState()
    s.data_batch(7, 10)
    s.data_batch(7, 12)               # continues: the first offset stays
    s.data_batch(8, 11)
    assert s.ongoing == {7: 10, 8: 11}
    assert s.first_unstable_offset(100) == 10
    assert s.last_stable_offset(5) == 5 and s.last_stable_offset(100) == 10
    assert s.marker(7, True, 3, 13) == CompletedTxn(7, 10, 13, False)
    # Completed, but its marker (13) is not below the HW yet: still unstable.
    assert s.first_unstable_offset(13) == 10
    assert s.first_unstable_offset(14) == 11
    assert s.marker(8, False, 3, 15) == CompletedTxn(8, 11, 15, True)
    assert s.aborted == [AbortedTxn(8, 11, 15, 16)]
    assert s.last_stable_offset(15) == 11 and s.last_stable_offset(16) == 16
    assert s.first_unstable_offset(16) is None and s.coordinator_epochs == {7: 3, 8: 3}


def test_a_marker_without_an_open_transaction_completes_nothing():
    s = TxnState()
    assert s.marker(5, False, 1, 3) is None
    assert s.aborted == [] and s.first_unstable_offset(0) is None
    assert s.coordinator_epochs == {5: 1}


def test_an_aborts_last_stable_offset_is_another_producers_open_first_offset():
    s = TxnState()
    s.data_batch(1, 0)
    s.data_batch(2, 1)
    s.marker(1, False, 0, 2)
    assert s.aborted == [AbortedTxn(1, 0, 2, 1)]


def test_aborted_overlapping_is_kafkas_collect_with_its_early_stop():
    s = TxnState()
    for entry in (AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 6, 9, 10), AbortedTxn(3, 8, 20, 21)):
        s.add_aborted(entry)
    assert s.aborted_overlapping(0, 1) == [AbortedTxn(1, 0, 4, 5)]
    assert s.aborted_overlapping(5, 7) == [AbortedTxn(2, 6, 9, 10)]
    assert [e.producer_id for e in s.aborted_overlapping(0, 100)] == [1, 2, 3]
    assert s.aborted_overlapping(10, 100) == [AbortedTxn(3, 8, 20, 21)]
    assert s.aborted_overlapping(21, 100) == []
    s.forget_aborted_below(5)
    assert [e.producer_id for e in s.aborted] == [2, 3]
    with pytest.raises(AssertionError):
        s.add_aborted(AbortedTxn(4, 1, 2, 3))     # out of marker order


def test_snapshot_json_round_trips_and_refuses_garbage():
    s = TxnState()
    s.data_batch(3, 40)
    s.marker(4, True, 9, 41)
    back = TxnState.from_json(s.to_json())
    assert back.ongoing == {3: 40} and back.coordinator_epochs == {4: 9}
    assert TxnState.from_json(None).ongoing == {}
    for bad in ({"ongoing": [[1]]}, {"ongoing": [], "x": 1}, {"ongoing": [[-1, 2]],
                                                               "coordinator_epochs": []}):
        with pytest.raises(ValueError):
            TxnState.from_json(bad)


events = st.lists(st.tuples(st.sampled_from(["data", "commit", "abort", "plain"]),
                            st.integers(0, 3), st.integers(1, 3)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(events, st.data())
def test_against_a_replay_model(evs, data):
    """Random interleavings: the state equals a from-scratch model at every step, the
    LSO never exceeds the HW, and the aborted list of a range is exactly the aborted
    transactions overlapping it."""
    s = TxnState()
    offset = hw = 0
    log = []        # (kind, pid, first, last)
    for kind, pid, n in evs:
        if kind == "data":
            s.data_batch(pid, offset)
        elif kind in ("commit", "abort"):
            n = 1
            s.marker(pid, kind == "commit", 0, offset)
        log.append((kind, pid, offset, offset + n - 1))
        offset += n
        # the model: replay
        open_, txns = {}, []       # txns: (pid, first, marker, aborted)
        for k, p, first, last in log:
            if k == "data":
                open_.setdefault(p, first)
            elif k in ("commit", "abort") and p in open_:
                txns.append((p, open_.pop(p), first, k == "abort"))
        assert s.ongoing == open_
        hw = data.draw(st.integers(hw, offset))    # the HW only rises
        unstable = list(open_.values()) + [f for p, f, m, a in txns if m >= hw]
        assert s.last_stable_offset(hw) == min(unstable + [hw]) <= hw
        start = data.draw(st.integers(0, offset))
        end = data.draw(st.integers(start, offset + 1))
        expected = [(p, f) for p, f, m, a in txns if a and m >= start and f < end]
        assert [(e.producer_id, e.first_offset)
                for e in s.aborted_overlapping(start, end)] == expected


def test_a_leaders_checks_of_markers_and_data():
    from shm.txn_state import (INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE,
                               TRANSACTION_COORDINATOR_FENCED, data_problem, marker_problem)
    s = TxnState()
    s.data_batch(4, 0)
    assert data_problem(s, 4, transactional=False) == INVALID_TXN_STATE
    assert data_problem(s, 4, transactional=True) is None
    assert data_problem(s, 5, transactional=False) is None
    assert marker_problem(None, s, 4, 0, 0) is None
    assert marker_problem(2, s, 4, 1, 0) == INVALID_PRODUCER_EPOCH
    assert marker_problem(2, s, 4, 3, 0) is None          # a bumped epoch (KIP-890)
    s.marker(4, True, 5, 1)
    assert marker_problem(2, s, 4, 2, 4) == TRANSACTION_COORDINATOR_FENCED
    assert marker_problem(2, s, 4, 2, 5) is None and marker_problem(2, s, 4, 2, 6) is None
