"""Two and three real broker processes replicating, driven by a test-side controller."""
from __future__ import annotations

import signal
import time

import pytest

from node.wire.errors import ErrorCode
from node.wire import protocol
from shm import batch
from shm.board import BoardReader, Role
from tests.node.broker.harness import Cluster, wait_for

pytestmark = [pytest.mark.process, pytest.mark.slow]
TOPIC = "rep"
LAG_MS = 1500


def start_brokers(cluster: Cluster, n: int, **overrides) -> None:
    # Fetch itself is what these tests are about (parked fetches, fetch sessions, the
    # traced Fetch path); test_shm_replication.py is the shared-memory counterpart.
    settings = {"replica_lag_time_max_ms": LAG_MS, "replica_fetch_wait_max_ms": 200,
                "replica_transport": "fetch"}
    settings.update(overrides)
    for i in range(n):
        cluster.add_broker(i, **settings)


def board_row(cluster: Cluster, broker_id: int, topic: str = TOPIC, partition: int = 0):
    try:
        with BoardReader.open(cluster.cluster_id, broker_id) as reader:
            return reader.get(topic, partition)
    except Exception:
        return None


def replica_offsets(cluster: Cluster, broker_id: int):
    row = board_row(cluster, broker_id)
    return None if row is None else (row.log_end_offset, row.high_watermark)


def test_follower_replicates_and_the_high_watermark_advances(cluster):
    start_brokers(cluster, 2)
    cluster.create_topic(TOPIC, {0: [0, 1]})
    assert cluster.produce(0, TOPIC, 0, [b"a", b"b", b"c"], acks=1)[2:4] == [0, 0]
    wait_for(lambda: replica_offsets(cluster, 1) == (3, 3), "follower LEO and HW at 3")
    assert replica_offsets(cluster, 0) == (3, 3)
    row = board_row(cluster, 1)
    assert row.role == Role.FOLLOWER and row.leader_id == 0
    leader_row = board_row(cluster, 0)
    assert leader_row.role == Role.LEADER and leader_row.isr == (0, 1)
    # A consumer sees everything below the HW.
    _, records = cluster.fetch(0, TOPIC, 0, 0)
    assert [v for _, v in records] == [b"a", b"b", b"c"]
    # Followers refuse consumer fetches (no KIP-392 here).
    entry, _ = cluster.fetch(1, TOPIC, 0, 0)
    assert entry[2] == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_acks_all_waits_for_the_follower(cluster):
    start_brokers(cluster, 2, min_insync_replicas=2)
    cluster.create_topic(TOPIC, {0: [0, 1]})
    for i in range(20):
        entry = cluster.produce(0, TOPIC, 0, [b"v%d" % i] * 10, acks=-1)
        assert entry[2:4] == [0, 10 * i]
        # The answer came after the follower had the batch (its board row is published
        # up to BOARD_PUBLISH_DELAY_MS later; generous for a loaded machine).
        wait_for(lambda: (replica_offsets(cluster, 1) or (-1, -1))[0] >= 10 * (i + 1),
                 "follower LEO", timeout_s=10)


def test_sigstop_follower_shrinks_isr_then_sigcont_rejoins(cluster):
    start_brokers(cluster, 3)
    cluster.create_topic(TOPIC, {0: [0, 1, 2]})
    assert cluster.produce(0, TOPIC, 0, [b"before"], acks=-1)[2] == 0
    notifications_before = cluster.zk.exists("/isr_change_notification").cversion
    cluster.brokers[2].signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        # acks=all waits until the leader drops the stopped follower from the ISR.
        entry = cluster.produce(0, TOPIC, 0, [b"during"], acks=-1)
        waited = time.monotonic() - started
        assert entry[2:4] == [0, 1]
        assert waited >= LAG_MS / 1000 * 0.8, waited
        state = cluster.partition_state(TOPIC, 0)
        assert state.isr == (0, 1) and state.leader == 0 and state.leader_epoch == 0
        # The leader wrote an isr_change notification (the controller may already have
        # consumed and deleted it: the parent's child version counts both). The leader
        # sends it before answering, but on its coordinator session, which may reach the
        # coordinator after this test's own read (CI saw that once).
        wait_for(lambda: cluster.zk.exists("/isr_change_notification").cversion >
                 notifications_before, "the ISR change notified", timeout_s=10)
        # HW keeps advancing without the stopped follower.
        for i in range(5):
            assert cluster.produce(0, TOPIC, 0, [b"more"], acks=-1)[2] == 0
        wait_for(lambda: replica_offsets(cluster, 0) == (7, 7), "leader HW at 7")
    finally:
        cluster.brokers[2].signal(signal.SIGCONT)
    wait_for(lambda: cluster.partition_state(TOPIC, 0).isr == (0, 1, 2),
             "the follower rejoins the ISR", timeout_s=20)
    wait_for(lambda: replica_offsets(cluster, 2) == (7, 7), "rejoined follower caught up")


def test_isr_below_min_insync_replicas_refuses_acks_all_but_not_acks_1(cluster):
    start_brokers(cluster, 2, min_insync_replicas=2)
    cluster.create_topic(TOPIC, {0: [0, 1]})
    cluster.brokers[1].signal(signal.SIGSTOP)
    try:
        entry = cluster.produce(0, TOPIC, 0, [b"x"], acks=-1)
        # Appended, then the ISR shrank below min.insync.replicas while it waited.
        assert entry[2] == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        wait_for(lambda: cluster.partition_state(TOPIC, 0).isr == (0,), "ISR shrink")
        assert cluster.produce(0, TOPIC, 0, [b"y"], acks=-1)[2] == \
            ErrorCode.NOT_ENOUGH_REPLICAS
        assert cluster.produce(0, TOPIC, 0, [b"z"], acks=1)[2] == 0
    finally:
        cluster.brokers[1].signal(signal.SIGCONT)


def test_acks_all_times_out_with_request_timed_out(cluster):
    start_brokers(cluster, 2, replica_lag_time_max_ms=60_000)
    cluster.create_topic(TOPIC, {0: [0, 1]})
    cluster.brokers[1].signal(signal.SIGSTOP)
    try:
        entry = cluster.produce(0, TOPIC, 0, [b"x"], acks=-1, timeout_ms=500)
        assert entry[2] == ErrorCode.REQUEST_TIMED_OUT
    finally:
        cluster.brokers[1].signal(signal.SIGCONT)


def test_leader_change_keeps_acknowledged_records_and_the_old_leader_follows(cluster):
    start_brokers(cluster, 2)
    cluster.create_topic(TOPIC, {0: [0, 1]})
    for i in range(3):
        assert cluster.produce(0, TOPIC, 0, [b"e0-%d" % i], acks=-1)[2] == 0
    wait_for(lambda: replica_offsets(cluster, 1) == (3, 3), "follower caught up")
    cluster.elect(TOPIC, 0, 1, [1, 0])
    assert cluster.produce(0, TOPIC, 0, [b"x"])[2] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    for i in range(3):
        assert cluster.produce(1, TOPIC, 0, [b"e1-%d" % i], acks=-1)[2:4] == [0, 3 + i]
    wait_for(lambda: replica_offsets(cluster, 0) == (6, 6), "old leader follows")
    _, records = cluster.fetch(1, TOPIC, 0, 0)
    assert [v for _, v in records] == [b"e0-0", b"e0-1", b"e0-2", b"e1-0", b"e1-1", b"e1-2"]
    assert [o for o, _ in records] == list(range(6))
    # OffsetForLeaderEpoch on the new leader: epoch 0 ends where epoch 1 starts.
    body = {"replica_id": 0, "partitions": [[TOPIC, 0, 1, 0]]}
    response = cluster.request(1, protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH, body)
    assert response.body["partitions"] == [[TOPIC, 0, 0, 0, 3]]


def test_leader_epoch_truncation_drops_the_unreplicated_tail_of_a_deposed_leader(cluster):
    start_brokers(cluster, 2)
    cluster.create_topic(TOPIC, {0: [0, 1]})
    assert cluster.produce(0, TOPIC, 0, [b"committed"], acks=-1)[2] == 0
    wait_for(lambda: replica_offsets(cluster, 1) == (1, 1), "follower caught up")
    # The follower stops fetching (StopReplica without delete), so it never gets these
    # acks=1 writes.
    body = {"controller_id": cluster.controller_id, "controller_epoch": cluster.controller_epoch,
            "delete_partitions": False, "partitions": [[TOPIC, 0, -1]]}
    assert cluster.request(1, protocol.ApiKey.STOP_REPLICA, body).body["error"] == 0
    assert cluster.produce(0, TOPIC, 0, [b"lost-1", b"lost-2"], acks=1)[2] == 0
    # Broker 1 becomes leader without them (broker 0 is not told yet, as if partitioned).
    cluster.elect(TOPIC, 0, 1, [1], to=[1])
    assert cluster.produce(1, TOPIC, 0, [b"new"], acks=1)[2:4] == [0, 1]
    cluster.elect(TOPIC, 0, 1, [1])  # tell broker 0 it follows (epoch 2)
    wait_for(lambda: replica_offsets(cluster, 0) == (2, 2), "old leader truncated and caught up")
    assert "truncating to 1" in cluster.brokers[0].log()


def test_one_fetch_session_per_leader_carries_every_followed_partition(cluster):
    start_brokers(cluster, 2)
    assignment = {p: [p % 2, (p + 1) % 2] for p in range(6)}
    cluster.create_topic(TOPIC, assignment)
    for p in range(6):
        leader = assignment[p][0]
        for i in range(p + 1):
            assert cluster.produce(leader, TOPIC, p, [b"%d-%d" % (p, i)], acks=-1)[2:4] == [0, i]
    for p in range(6):
        follower = assignment[p][1]
        wait_for(lambda: (board_row(cluster, follower, TOPIC, p).log_end_offset,
                          board_row(cluster, follower, TOPIC, p).high_watermark) == (p + 1, p + 1),
                 f"partition {p} replicated")
        _, records = cluster.fetch(assignment[p][0], TOPIC, p, 0)
        assert [v for _, v in records] == [b"%d-%d" % (p, i) for i in range(p + 1)]


def test_high_watermark_mode_truncates_a_new_follower_to_its_high_watermark(cluster):
    start_brokers(cluster, 2, replication_truncation_mode="high-watermark")
    cluster.create_topic(TOPIC, {0: [0, 1]})
    assert cluster.produce(0, TOPIC, 0, [b"committed"], acks=-1)[2] == 0
    wait_for(lambda: replica_offsets(cluster, 1) == (1, 1), "follower caught up")
    body = {"controller_id": cluster.controller_id, "controller_epoch": cluster.controller_epoch,
            "delete_partitions": False, "partitions": [[TOPIC, 0, -1]]}
    assert cluster.request(1, protocol.ApiKey.STOP_REPLICA, body).body["error"] == 0
    assert cluster.produce(0, TOPIC, 0, [b"unreplicated"], acks=1)[2:4] == [0, 1]
    cluster.elect(TOPIC, 0, 1, [1], to=[1])
    cluster.elect(TOPIC, 0, 1, [1])
    # Broker 0 cut its log to its HW (1) without asking the leader, then caught up.
    wait_for(lambda: replica_offsets(cluster, 0) == (1, 1), "deposed leader truncated")
    assert "truncating to 1" in cluster.brokers[0].log()
    assert "OFFSET_FOR_LEADER_EPOCH" not in cluster.brokers[0].log()


def test_a_high_watermark_move_alone_does_not_complete_a_parked_follower_fetch(cluster):
    """Kafka's DelayedFetch: the follower learns the new HW only with its next fetch
    response (new data or replica.fetch.wait.max.ms later); this lag is what the
    pre-KIP-101 HW-truncation loss needs."""
    start_brokers(cluster, 2, replica_fetch_wait_max_ms=1500, replica_lag_time_max_ms=30_000)
    cluster.create_topic(TOPIC, {0: [0, 1]})
    wait_for(lambda: replica_offsets(cluster, 1) == (0, 0), "follower ready")
    assert cluster.produce(0, TOPIC, 0, [b"x"], acks=-1)[2] == 0
    acked = time.monotonic()
    assert replica_offsets(cluster, 0) == (1, 1) or wait_for(
        lambda: replica_offsets(cluster, 0) == (1, 1), "leader HW", timeout_s=1)
    wait_for(lambda: replica_offsets(cluster, 1)[0] == 1, "follower has the record", 1)
    assert replica_offsets(cluster, 1) == (1, 0), "the follower's HW moved with no new data"
    wait_for(lambda: replica_offsets(cluster, 1) == (1, 1), "follower HW after the wait", 5)
    assert time.monotonic() - acked >= 1.0


def test_sigkilled_follower_is_dropped_and_after_a_restart_catches_up_and_rejoins(cluster):
    start_brokers(cluster, 3)
    cluster.create_topic(TOPIC, {0: [0, 1, 2]})
    for i in range(5):
        assert cluster.produce(0, TOPIC, 0, [b"a%d" % i], acks=-1)[2] == 0
    cluster.brokers[2].kill()
    for i in range(5):
        assert cluster.produce(0, TOPIC, 0, [b"b%d" % i], acks=-1)[2] == 0
    assert cluster.partition_state(TOPIC, 0).isr == (0, 1)
    cluster.brokers[2].start(cluster.zk)
    cluster.send_leader_and_isr(TOPIC, [0], to=[2])
    wait_for(lambda: cluster.partition_state(TOPIC, 0).isr == (0, 1, 2), "rejoined", 20)
    wait_for(lambda: replica_offsets(cluster, 2) == (10, 10), "caught up")
    _, records = cluster.fetch(0, TOPIC, 0, 0)
    assert len(records) == 10


def _traced_produce(cluster: Cluster, trace, acks: int = -1) -> protocol.Response:
    body = {"acks": acks, "timeout_ms": 10_000, "partitions": [[TOPIC, 0]]}
    if trace is not None:
        body["trace"] = trace
    return cluster.request(0, protocol.ApiKey.PRODUCE, body, [batch.build_batch([b"t" * 100])])


def test_a_traced_acks_all_write_comes_back_with_its_path(cluster):
    """bench.perf.latency --breakdown: every stamp is there, on one clock, in causal order."""
    start_brokers(cluster, 3, min_insync_replicas=2)
    cluster.create_topic(TOPIC, {0: [0, 1, 2]})
    wait_for(lambda: cluster.partition_state(TOPIC, 0).isr == (0, 1, 2), "full ISR")
    assert "trace" not in _traced_produce(cluster, None).body   # untraced: nothing added
    for _ in range(20):
        sent = time.monotonic_ns()
        response = _traced_produce(cluster, [sent])
        received = time.monotonic_ns()
        assert response.body["partitions"][0][2] == 0
        trace = response.body["trace"]
        assert trace["send"] == sent
        assert trace["by"] in (1, 2)
        follower = trace["followers"][str(trace["by"])]
        answered, f_received, f_appended, f_sent, leader_received = follower
        path = [sent, trace["receive"], trace["append"], answered, f_received, f_appended,
                f_sent, leader_received, trace["high_watermark"], trace["answer"], received]
        assert path == sorted(path), path
    # A malformed trace is a malformed request; the broker goes on serving.
    bad = _traced_produce(cluster, "yesterday")
    assert bad.body["error"] == ErrorCode.INVALID_REQUEST, bad.body
    assert _traced_produce(cluster, None).body["partitions"][0][2] == 0
