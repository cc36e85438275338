"""A Log's transactions: transactional and control batches appended as leader and
follower, the first unstable / last stable offset, the aborted list and the
``.txnindex`` files, through rolls, truncations, kills and reopens (real files in tmp
dirs), and a property test against a replay model."""
from __future__ import annotations

import itertools
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, rule,
                                 run_state_machine_as_test)

from shm import batch, control
from shm.batch import CorruptRecordError
from shm.config import LogConfig
from shm.log import Log
from shm.log import txn_index
from shm.log.producer_snapshots import snapshot_offsets, snapshot_path
from shm.names import cluster_objects
from shm.producer_state import Verdict
from shm.txn_state import AbortedTxn

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=150)


def open_log(directory, cluster_id, config=CONFIG) -> Log:
    return Log.open(str(directory), "tx", 0, config, cluster_id=cluster_id)


def data(pid, seq, n=1, epoch=0):
    return batch.build_batch([b"v%d" % i for i in range(n)], producer_id=pid,
                             producer_epoch=epoch, base_sequence=seq, transactional=True)


def marker(pid, commit, epoch=0, coordinator_epoch=0):
    return control.build_marker(pid, epoch, commit, coordinator_epoch, 1)


def plain(n=1):
    return batch.build_batch([b"p"] * n)


def test_transactions_lso_and_aborted_list_survive_a_reopen(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        log.append_as_leader(data(1, 0, 2), 0)          # 0-1: pid 1 opens at 0
        log.append_as_leader(plain(), 0)                # 2
        log.append_as_leader(data(2, 0), 0)             # 3: pid 2 opens at 3
        log.append_as_leader(data(1, 2), 0)             # 4
        assert log.ongoing_transactions() == {1: 0, 2: 3}
        log.update_high_watermark(log.log_end_offset)
        assert log.first_unstable_offset() == 0 and log.last_stable_offset() == 0
        log.append_as_leader(marker(1, False), 0)       # 5: abort pid 1's 0..4
        assert log.first_unstable_offset() == 0         # its marker is not below the HW
        log.update_high_watermark(6)
        assert log.last_stable_offset() == 3
        log.append_as_leader(marker(2, True), 0)        # 6: commit pid 2's
        log.update_high_watermark(log.log_end_offset)
        assert log.first_unstable_offset() is None and log.last_stable_offset() == 7
        assert log.aborted_transactions(0, 7) == [(1, 0)]
        assert log.aborted_transactions(6, 7) == []     # the abort ended at 5
        assert txn_index.read(log.directory, 0) == [AbortedTxn(1, 0, 5, 3)]
        log.close()
        log = open_log(tmp_path, cluster_id)
        assert log.aborted_transactions(0, 100) == [(1, 0)]
        assert log.ongoing_transactions() == {} and log.last_stable_offset() == 7
    finally:
        log.delete()


def test_a_marker_bumps_the_epoch_and_a_stray_marker_opens_nothing(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        log.append_as_leader(marker(9, False, epoch=3, coordinator_epoch=4), 0)
        assert log.ongoing_transactions() == {} and log.aborted_transactions(0, 9) == []
        assert log.transaction_state().coordinator_epochs == {9: 4}
        states = log.producer_states()
        assert states.check(9, 2, 0, 0)[0] is Verdict.FENCED
        assert states.check(9, 3, 0, 0)[0] is Verdict.APPEND
    finally:
        log.delete()


def test_a_control_batch_that_is_not_a_marker_is_refused_whole(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        bad = batch.build_batch([b"\x00\x00\x00\x00\x00\x00"], [b"\x00\x00\x00\x03"], 1,
                                producer_id=1, producer_epoch=0, transactional=True,
                                control=True)
        region = bytearray(bytes(plain()) + bytes(bad))
        with pytest.raises(CorruptRecordError, match="type 3"):
            log.append_as_leader(region, 0)
        assert log.log_end_offset == 0
    finally:
        log.delete()


def test_follower_appends_build_the_same_state(tmp_path, cluster_id):
    leader = open_log(tmp_path / "a", cluster_id)
    follower = Log.open(str(tmp_path / "b"), "tx", 0, CONFIG, cluster_id=cluster_id,
                        broker_id=1)
    try:
        for records in (data(1, 0), data(2, 0), marker(1, False), data(2, 1), plain()):
            leader.append_as_leader(records, 0)
        follower.append_as_follower(bytearray(leader.read(0, 1 << 20)))
        assert follower.ongoing_transactions() == leader.ongoing_transactions() == {2: 1}
        assert follower.aborted_transactions(0, 9) == leader.aborted_transactions(0, 9) \
            == [(1, 0)]
        assert txn_index.read(follower.directory, 0) == txn_index.read(leader.directory, 0)
    finally:
        leader.delete()
        follower.delete()


def test_truncation_reopens_and_unaborts(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        log.append_as_leader(plain(), 0)                # 0
        log.append_as_leader(data(1, 0), 0)             # 1
        log.append_as_leader(marker(1, False), 0)       # 2
        assert log.aborted_transactions(0, 3) == [(1, 1)]
        log.truncate_to(2)                              # the abort is gone
        assert log.aborted_transactions(0, 3) == [] and log.ongoing_transactions() == {1: 1}
        assert txn_index.read(log.directory, 0) == []
        assert not os.path.exists(txn_index.txn_index_path(log.directory, 0))
        log.truncate_to(1)
        assert log.ongoing_transactions() == {} and log.first_unstable_offset() is None
    finally:
        log.delete()


def test_after_delete_records_the_transactions_are_what_is_left(tmp_path, cluster_id):
    """DeleteRecords rebuilds the state from what is left (a snapshot at or above the
    log start, the batches after it): a transaction keeps its remaining data open; one
    whose data is all gone no longer holds the LSO back; the first unstable offset is
    never below the log start (Kafka's clamp)."""
    log = open_log(tmp_path, cluster_id)
    try:
        log.append_as_leader(data(1, 0), 0)            # 0: pid 1 opens
        log.append_as_leader(data(2, 0), 0)            # 1: pid 2 opens
        log.append_as_leader(plain(), 0)               # 2
        log.append_as_leader(data(1, 1), 0)            # 3: pid 1 continues
        log.append_as_leader(plain(), 0)               # 4
        log.update_high_watermark(log.log_end_offset)
        assert log.first_unstable_offset() == 0 and log.last_stable_offset() == 0
        log.increment_log_start_offset(2)
        assert log.ongoing_transactions() == {1: 3}
        assert log.first_unstable_offset() == 3 and log.last_stable_offset() == 3
        log.roll()                                     # a snapshot at 5: {1: 3}
        log.append_as_leader(plain(), 0)
        log.update_high_watermark(log.log_end_offset)
        log.increment_log_start_offset(4)
        assert log.ongoing_transactions() == {1: 3}   # from the snapshot
        assert log.first_unstable_offset() == 4 and log.last_stable_offset() == 4
        log.append_as_leader(marker(1, False), 0)
        log.update_high_watermark(log.log_end_offset)
        assert log.aborted_transactions(4, 10) == [(1, 3)]
        assert log.first_unstable_offset() is None
    finally:
        log.delete()


def _fill_with_rolls(log, rounds=40):
    """pid 1 keeps one transaction open from the start; pids 2/3 abort/commit short
    ones; enough to roll several segments (producer snapshots at each)."""
    seqs = itertools.count()
    log.append_as_leader(data(1, next(seqs)), 0)
    s2 = itertools.count()
    for i in range(rounds):
        log.append_as_leader(data(2, next(s2), 3), 0)
        log.append_as_leader(marker(2, i % 2 == 0), 0)
        log.append_as_leader(plain(2), 0)


def test_snapshots_carry_the_ongoing_transactions_first_offset(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        _fill_with_rolls(log)
        assert len(log.segments) > 3 and snapshot_offsets(log.directory)
        expected_aborted = log.aborted_transactions(0, log.log_end_offset)
        assert len(expected_aborted) == 20
        log.close()
        log = open_log(tmp_path, cluster_id)
        # pid 1's transaction began in the first segment, below every snapshot.
        assert log.ongoing_transactions() == {1: 0}
        assert log.aborted_transactions(0, log.log_end_offset) == expected_aborted
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset() == 0
    finally:
        log.delete()


def test_a_killed_log_rebuilds_lost_index_entries_and_damaged_files(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        _fill_with_rolls(log)
        expected = log.aborted_transactions(0, log.log_end_offset)
        active = log.active_segment.base_offset
        log.append_as_leader(data(3, 0), 0)
        log.append_as_leader(marker(3, False), 0)
        expected.append((3, log.log_end_offset - 2))
        log.abandon()                                   # SIGKILL
        # The crash came between the marker and its index entry: the entry is lost.
        txn_index.rewrite(log.directory, active,
                          txn_index.read(log.directory, active)[:-1])
        log = open_log(tmp_path, cluster_id)
        assert log.aborted_transactions(0, log.log_end_offset) == expected
        assert txn_index.read(log.directory, active)[-1].producer_id == 3
        # A damaged file below the snapshots: the build starts from the log start.
        log.close()
        first_with_entries = next(s.base_offset for s in log.segments
                                  if txn_index.read(log.directory, s.base_offset))
        with open(txn_index.txn_index_path(log.directory, first_with_entries), "ab") as f:
            f.write(b"\x01\x02")
        log = open_log(tmp_path, cluster_id)
        assert log.aborted_transactions(0, log.log_end_offset) == expected
        assert len(txn_index.read(log.directory, first_with_entries)) >= 1
        assert log.ongoing_transactions() == {1: 0}
    finally:
        log.delete()


def test_a_torn_snapshot_and_a_cut_tail(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        _fill_with_rolls(log, 30)
        log.append_as_leader(data(4, 0), 0)
        before = log.log_end_offset
        expected = log.aborted_transactions(0, before)
        log.append_as_leader(marker(4, False), 0)
        assert log.aborted_transactions(0, before) == expected + [(4, before - 1)]
        segment = log.active_segment
        path, end = segment.path, segment.size_bytes
        log.abandon()
        with open(path, "r+b") as f:      # the marker's batch is torn
            f.seek(end - 3)
            f.write(b"\xff\xff\xff")
        for offset in snapshot_offsets(str(tmp_path / "tx-0")):
            with open(snapshot_path(str(tmp_path / "tx-0"), offset), "r+b") as f:
                f.seek(12)
                f.write(b"#")
        log = open_log(tmp_path, cluster_id)
        assert log.recovery.truncated and log.log_end_offset == before
        assert log.ongoing_transactions() == {1: 0, 4: before - 1}
        assert log.aborted_transactions(0, before) == expected
        assert all(e.last_offset < before for s in log.segments
                   for e in txn_index.read(log.directory, s.base_offset))
    finally:
        log.delete()


def test_retention_deletes_txn_indexes_with_their_segments(tmp_path, cluster_id):
    config = LogConfig(segment_bytes=1024, index_interval_bytes=150, retention_bytes=2048,
                       retention_ms=-1)
    log = open_log(tmp_path, cluster_id, config)
    try:
        s2 = itertools.count()
        for i in range(40):
            log.append_as_leader(data(2, next(s2), 3), 0)
            log.append_as_leader(marker(2, False), 0)
        log.update_high_watermark(log.log_end_offset)
        bases = [s.base_offset for s in log.segments]
        assert log.delete_old_segments(now_ms=0) > 0
        gone = [b for b in bases if b < log.log_start_offset]
        assert gone and not any(os.path.exists(txn_index.txn_index_path(log.directory, b))
                                for b in gone)
        assert all(e.last_offset >= log.log_start_offset
                   for e in log.transaction_state().aborted)
    finally:
        log.delete()


# ---------------------------------------------------------------- the model test

def make_machine(cluster_id: str):
    brokers = itertools.count()

    class TxnLogMachine(RuleBasedStateMachine):
        """Random transactional appends, commits, aborts, plain appends, rolls, HW moves,
        truncations, kills, reopens and rebuilds against a replay model."""

        @initialize()
        def open_log(self):
            self.broker_id = next(brokers)
            self.data_dir = tempfile.mkdtemp(prefix="mk-txn-model-")
            self.log = self._open()
            self.batches = []   # (kind, pid, base, last)
            self.seqs = {}

        def _open(self) -> Log:
            return Log.open(self.data_dir, "t", 0, CONFIG, cluster_id=cluster_id,
                            broker_id=self.broker_id, now_ms=0)

        def teardown(self):
            if hasattr(self, "log"):
                self.log.delete()
                shutil.rmtree(self.data_dir, ignore_errors=True)
                left = [n for n in cluster_objects(cluster_id) if f"-b{self.broker_id}-" in n]
                assert not left, left

        def _append(self, kind, pid, records):
            base = self.log.log_end_offset
            info = self.log.append_as_leader(records, 0, now_ms=0)
            self.batches.append((kind, pid, base, info.last_offset))

        @rule(pid=st.integers(0, 2), n=st.integers(1, 4))
        def transactional_data(self, pid, n):
            seq = self.seqs.get(pid, 0)
            self.seqs[pid] = seq + n
            self._append("data", pid, data(pid, seq, n))

        @rule(pid=st.integers(0, 2), commit=st.booleans())
        def end_transaction(self, pid, commit):
            self._append("commit" if commit else "abort", pid, marker(pid, commit))

        @rule(n=st.integers(1, 3))
        def plain_data(self, n):
            self._append("plain", -1, plain(n))

        @rule()
        def roll(self):
            self.log.roll(now_ms=0)

        @rule(to=st.floats(0, 1))
        def raise_high_watermark(self, to):
            hw, leo = self.log.high_watermark, self.log.log_end_offset
            self.log.update_high_watermark(hw + int((leo - hw) * to))

        @rule(to=st.floats(0, 1))
        def truncate(self, to):
            offset = int(self.log.log_end_offset * to)
            self.log.truncate_to(offset)
            self.batches = [b for b in self.batches if b[3] < offset]

        @rule(kill=st.booleans())
        def reopen(self, kill):
            if kill:
                self.log.abandon()
            else:
                self.log.close()
            self.log = self._open()

        @rule()
        def rebuild(self):
            live = self.log.transaction_state()
            hw = self.log.high_watermark
            self.log._producers = self.log._txns = None
            rebuilt = self.log.transaction_state()
            assert rebuilt.ongoing == live.ongoing and rebuilt.aborted == live.aborted
            assert rebuilt.last_stable_offset(hw) >= live.last_stable_offset(hw)

        def _model(self):
            open_, txns, aborted = {}, [], []
            for kind, pid, base, last in self.batches:
                if kind == "data":
                    open_.setdefault(pid, base)
                elif kind in ("commit", "abort") and pid in open_:
                    first = open_.pop(pid)
                    txns.append((pid, first, base))
                    if kind == "abort":
                        others = list(open_.values())
                        aborted.append(AbortedTxn(pid, first, base,
                                                  min(others) if others else base + 1))
            return open_, txns, aborted

        @invariant()
        def matches_the_model(self):
            if not hasattr(self, "log"):
                return
            log = self.log
            open_, txns, aborted = self._model()
            assert log.ongoing_transactions() == open_
            hw = log.high_watermark
            lso = log.last_stable_offset()
            strict = min(list(open_.values()) + [f for _, f, m in txns if m >= hw] + [hw])
            assert strict <= lso <= min(list(open_.values()) + [hw]) <= hw
            assert log.transaction_state().aborted == aborted
            leo = log.log_end_offset
            for start, end in ((0, leo), (0, 1), (leo // 2, leo), (leo // 3, leo // 2 + 1)):
                assert log.aborted_transactions(start, end) == [
                    (a.producer_id, a.first_offset) for a in aborted
                    if a.last_offset >= start and a.first_offset < end]
            # Every segment's .txnindex holds exactly the aborts whose marker it holds.
            bases = log._bases + [float("inf")]
            for i, base in enumerate(log._bases):
                assert txn_index.read(log.directory, base) == [
                    a for a in aborted if base <= a.last_offset < bases[i + 1]]

    return TxnLogMachine


def test_log_transactions_against_a_model(cluster_id):
    run_state_machine_as_test(make_machine(cluster_id), settings=settings(
        max_examples=35, stateful_step_count=40, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))
