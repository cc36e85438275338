"""Log compaction with transactions: against a model of what a read_committed consumer
must see, and the markers' lifetime (Kafka's LogCleaner rules, ``cleaner_core.TxnPass``)."""
from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st

from shm import batch as codec, control
from shm.config import LogConfig
from shm.log import Log
from shm.log.producer_snapshots import delete_snapshots
from shm.names import cleanup_cluster

R = 1000  # delete.retention.ms
CONFIG = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=128,
                   cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                   delete_retention_ms=R, retention_ms=-1)


def walk(log: Log, end: int):
    """(header, records) of every batch below ``end``."""
    offset = log.log_start_offset
    while offset < end:
        view = log.read(offset, 1 << 20, max_offset=end)
        if not len(view):
            return
        for position, header in codec.iter_batches(view):
            yield header, codec.parse_batch(view, position).records()
            offset = header.next_offset


def read_committed(log: Log) -> list[tuple[int, bytes, bytes]]:
    """What a read_committed consumer gets (Kafka's consumer algorithm): up to the LSO,
    control batches skipped, a producer's transactional batches skipped from an aborted
    transaction's first offset to its ABORT marker."""
    lso = log.last_stable_offset()
    aborted = sorted(log.aborted_transactions(log.log_start_offset, lso), key=lambda a: a[1])
    out, active, i = [], set(), 0
    for header, records in walk(log, lso):
        while i < len(aborted) and aborted[i][1] <= header.last_offset:
            active.add(aborted[i][0])
            i += 1
        if header.control:
            commit, _ = control.parse_record(records[0][2], records[0][3])
            if not commit:
                active.discard(header.producer_id)
            continue
        if header.transactional and header.producer_id in active:
            continue
        out += [(o, k, v) for o, _, k, v in records]
    return out


events = st.lists(st.lists(st.tuples(st.sampled_from(["data", "data", "commit", "abort",
                                                      "plain"]),
                                     st.integers(0, 2), st.integers(0, 4)),
                           min_size=1, max_size=10), min_size=1, max_size=5)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(rounds=events, gaps=st.lists(st.integers(0, 2 * R), min_size=5, max_size=5))
def test_a_read_committed_view_survives_cleaning_as_the_model_says(rounds, gaps):
    cluster_id = "clt" + format(abs(hash((str(rounds), str(gaps)))) % 10**9, "09d")
    log = Log.open(tempfile.mkdtemp(prefix="mk-clean-txn-"), "t", 0, CONFIG,
                   cluster_id=cluster_id)
    try:
        records = []        # [offset, key, value, status]: plain / committed / aborted / open
        open_txn: dict[int, list] = {}
        seqs = {}
        cleaned_end, now, tails = 0, 10_000, set()
        for number, round_ in enumerate(rounds):
            for kind, pid, key in round_:
                offset = log.log_end_offset
                if kind == "plain":
                    value = b"p%d" % offset
                    log.append_as_leader(codec.build_batch([value], [b"k%d" % key], now), 1)
                    records.append([offset, b"k%d" % key, value, "plain"])
                elif kind == "data":
                    value = b"t%d" % offset
                    seq = seqs.get(pid, 0)
                    seqs[pid] = seq + 1
                    log.append_as_leader(codec.build_batch(
                        [value], [b"k%d" % key], now, producer_id=pid, producer_epoch=0,
                        base_sequence=seq, transactional=True), 1)
                    record = [offset, b"k%d" % key, value, "open"]
                    records.append(record)
                    open_txn.setdefault(pid, []).append(record)
                else:
                    log.append_as_leader(control.build_marker(pid, 0, kind == "commit", 0,
                                                              now), 1)
                    for record in open_txn.pop(pid, []):
                        record[3] = "committed" if kind == "commit" else "aborted"
            log.roll(now_ms=now)
            log.update_high_watermark(log.log_end_offset)
            now += gaps[number]
            plan = log.cleanable(now)
            if plan is not None:
                # A producer's last record may survive this clean (and stay until a
                # later clean, when it is no longer the last).
                tails |= {o for rs in _by_pid(records, rounds) for o in rs[-1:]}
                assert plan.end <= log.last_stable_offset()
                cleaned = plan.build(now_ms=now)
                assert log.swap_cleaned(cleaned)
                cleaned_end = plan.end
            # The model: committed and plain data below the LSO; below the cleaned end
            # only each key's last one; the producers' last records may stay too.
            lso = log.last_stable_offset()
            visible = [r for r in records if r[3] in ("plain", "committed") and r[0] < lso]
            last = {}
            for r in visible:
                if r[0] < cleaned_end:
                    last[r[1]] = r[0]
            model = {(o, k, v) for o, k, v, _ in visible if o >= cleaned_end or last[k] == o}
            got = read_committed(log)
            assert [g[0] for g in got] == sorted(g[0] for g in got)
            assert model <= set(got), (sorted(model - set(got)), number)
            assert {g[0] for g in set(got) - model} <= tails, (set(got) - model, tails)
            # Aborted data below the cleaned end is gone for every reader (but a
            # producer's last record, kept for its sequence as Kafka keeps the batch).
            aborted = {r[0] for r in records if r[3] == "aborted" and r[0] < cleaned_end}
            raw = {o for h, rs in walk(log, log.log_end_offset) if not h.control
                   for o, _, _, _ in rs}
            assert raw & aborted <= tails, sorted(raw & aborted - tails)
            # Never an open transaction the model does not have (a dangling one would
            # stop the LSO): live, rebuilt from the files, and from a full walk.
            assert log.ongoing_transactions() == {p: rs[0][0] for p, rs in open_txn.items()}
            live = log.ongoing_transactions()
            log._producers = log._txns = None
            assert log.ongoing_transactions() == live
            delete_snapshots(log.directory, lambda o: True)
            log._producers = log._txns = None
            assert log.ongoing_transactions() == live
            assert read_committed(log) == got
        log.close()
        log = Log.open(log.data_dir, "t", 0, CONFIG, cluster_id=cluster_id)
        assert log.ongoing_transactions() == {p: rs[0][0] for p, rs in open_txn.items()}
    finally:
        log.delete()
        cleanup_cluster(cluster_id)


def _by_pid(records, rounds):
    """Offsets of each producer's transactional records, in order (its tails: the last)."""
    pids: dict[int, list[int]] = {}
    flat = [e for round_ in rounds for e in round_]
    data = [r for r in records if r[2].startswith(b"t")]
    producers = [pid for kind, pid, _ in flat if kind == "data"]
    for record, pid in zip(data, producers):
        pids.setdefault(pid, []).append(record[0])
    return list(pids.values())


def _txn(log, pid, seq, key, now, *, commit):
    log.append_as_leader(codec.build_batch([b"v%d" % seq], [key], now, producer_id=pid,
                                           producer_epoch=0, base_sequence=seq,
                                           transactional=True), 1)
    log.append_as_leader(control.build_marker(pid, 0, commit, 0, now), 1)


def _clean(log, now):
    log.roll(now_ms=now)
    log.update_high_watermark(log.log_end_offset)
    plan = log.cleanable(now)
    assert plan is not None
    assert log.swap_cleaned(plan.build(now_ms=now))


def _markers(log):
    return [(h.producer_id, h.base_offset) for h, _ in walk(log, log.log_end_offset)
            if h.control]


def test_markers_live_until_their_data_is_gone_and_the_horizon_passed(tmp_path, cluster_id):
    log = Log.open(str(tmp_path), "t", 0, CONFIG, cluster_id=cluster_id)
    try:
        now = 10_000
        _txn(log, 1, 0, b"a", now, commit=False)     # 0, marker 1: aborted
        _txn(log, 2, 0, b"b", now, commit=True)      # 2, marker 3: committed, b's last
        _txn(log, 2, 1, b"c", now, commit=True)      # 4, marker 5
        log.append_as_leader(codec.build_batch([b"c2"], [b"c"], now), 1)   # 6 supersedes c
        for pid in (1, 2):                           # newer transactions: not the newest
            _txn(log, pid, 5, b"z%d" % pid, now, commit=True)    # markers 8 and 10
        assert log.aborted_transactions(0, 12) == [(1, 0)]
        _clean(log, now)
        # First clean: pid 1's aborted data (0) is gone; every marker stays (horizon).
        offsets = [o for h, rs in walk(log, 12) if not h.control for o, _, _, _ in rs]
        assert 0 not in offsets and 2 in offsets and 4 not in offsets
        assert _markers(log) == [(1, 1), (2, 3), (2, 5), (1, 8), (2, 10)]
        # The aborted data is gone: its .txnindex entry is not needed any more.
        assert log.aborted_transactions(0, 12) == []
        now += R
        log.append_as_leader(codec.build_batch([b"x"], [b"x"], now), 1)
        _clean(log, now)
        # Past the horizon: the markers whose data is gone go (1 and 5); 3 keeps its
        # committed record b; 8 and 10 are their producers' newest (fencing epochs)
        # and z1/z2 data survive too.
        assert _markers(log) == [(2, 3), (1, 8), (2, 10)]
        assert log.ongoing_transactions() == {}
        log.close()
        log = Log.open(str(tmp_path), "t", 0, CONFIG, cluster_id=cluster_id)
        assert log.ongoing_transactions() == {} and _markers(log) == [(2, 3), (1, 8), (2, 10)]
    finally:
        log.delete()


def test_the_cleaner_stops_at_the_first_unstable_offset(tmp_path, cluster_id):
    log = Log.open(str(tmp_path), "t", 0, CONFIG, cluster_id=cluster_id)
    try:
        now = 10_000
        for i in range(3):
            log.append_as_leader(codec.build_batch([b"old%d" % i], [b"k"], now), 1)
        log.roll(now_ms=now)
        log.append_as_leader(codec.build_batch([b"t"], [b"k"], now, producer_id=7,
                                               producer_epoch=0, base_sequence=0,
                                               transactional=True), 1)   # 3: open
        log.roll(now_ms=now)
        for i in range(3):
            log.append_as_leader(codec.build_batch([b"new%d" % i], [b"k"], now), 1)
        log.roll(now_ms=now)
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset() == 3
        plan = log.cleanable(now)
        assert plan.end == 3
        assert log.swap_cleaned(plan.build(now_ms=now))
        values = [v for h, rs in walk(log, log.log_end_offset) for _, _, _, v in rs]
        assert values == [b"old2", b"t", b"new0", b"new1", b"new2"]
    finally:
        log.delete()
