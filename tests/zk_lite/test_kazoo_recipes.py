"""kazoo's recipes across several client processes (ZK_PROTOCOL.md §7.1 lists what they rely on).

Each worker is a separate Python process with its own session (``zkworker.py``);
times are CLOCK_MONOTONIC, shared by all processes on the machine.
"""
from __future__ import annotations

import time

import pytest

from .util import wait_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

PROCESSES = 3
WORKER_TIMEOUT_S = 60


def assert_disjoint(intervals):
    ordered = sorted(intervals)
    for (_, end), (next_start, _) in zip(ordered, ordered[1:]):
        assert end <= next_start, f"critical sections overlap: {ordered}"


def test_lock_excludes_other_processes(zk, spawn_worker):
    workers = [spawn_worker("lock", path="/lock", id=f"w{i}", rounds=4, hold_ms=20)
               for i in range(PROCESSES)]
    intervals = [tuple(i) for w in workers for i in w.result(WORKER_TIMEOUT_S)["intervals"]]
    assert len(intervals) == PROCESSES * 4
    assert_disjoint(intervals)
    assert zk.get_children("/lock") == []  # every contender's node is gone


def test_counter_increments_from_several_processes_sum_exactly(zk, spawn_worker):
    workers = [spawn_worker("counter", path="/counter", increments=15) for _ in range(PROCESSES)]
    for worker in workers:
        assert worker.result(WORKER_TIMEOUT_S)["done"] == 15
    assert zk.Counter("/counter").value == PROCESSES * 15


def test_election_elects_each_process_once_and_one_at_a_time(zk, spawn_worker):
    workers = [spawn_worker("election", path="/election", id=f"w{i}", hold_ms=50)
               for i in range(PROCESSES)]
    intervals = []
    for worker in workers:
        led = worker.result(WORKER_TIMEOUT_S)["intervals"]
        assert len(led) == 1
        intervals.append(tuple(led[0]))
    assert_disjoint(intervals)


def test_queue_items_are_consumed_exactly_once(zk, spawn_worker):
    queue = zk.Queue("/queue")
    items = [f"item-{i}" for i in range(30)]
    for item in items:
        queue.put(item.encode())
    workers = [spawn_worker("queue_consume", path="/queue") for _ in range(PROCESSES)]
    consumed = [item for w in workers for item in w.result(WORKER_TIMEOUT_S)["items"]]
    assert sorted(consumed) == sorted(items)
    assert len(zk.Queue("/queue")) == 0


def test_queue_preserves_fifo_order_for_one_consumer(zk, spawn_worker):
    queue = zk.Queue("/queue")
    items = [f"item-{i:02d}" for i in range(10)]
    for item in items:
        queue.put(item.encode())
    assert spawn_worker("queue_consume", path="/queue").result(WORKER_TIMEOUT_S)["items"] == items


def test_double_barrier_lets_nobody_in_before_all_arrive(zk, spawn_worker):
    workers = []
    for i in range(PROCESSES):
        workers.append(spawn_worker("double_barrier", path="/dbarrier", members=PROCESSES, id=f"w{i}"))
    for worker in workers:
        assert "entered" in worker.next_message(WORKER_TIMEOUT_S)
    for worker in workers:
        worker.release()        # leave (see zkworker.role_double_barrier: kazoo's race)
    results = [w.result(WORKER_TIMEOUT_S) for w in workers]
    last_arrival = max(r["arrived"] for r in results)
    assert all(r["entered"] >= last_arrival for r in results)
    last_entry = max(r["entered"] for r in results)
    assert all(r["left"] >= last_entry for r in results)


def test_barrier_releases_all_waiting_processes_when_removed(zk, spawn_worker):
    barrier = zk.Barrier("/barrier")
    barrier.create()
    workers = [spawn_worker("barrier_wait", path="/barrier", timeout_s=30) for _ in range(PROCESSES)]
    for worker in workers:
        assert worker.next_message(WORKER_TIMEOUT_S) == {"waiting": True}
    removed_at = time.monotonic()
    barrier.remove()
    for worker in workers:
        result = worker.result(WORKER_TIMEOUT_S)
        assert result["released"] is True
        assert result["t"] >= removed_at


def test_party_members_from_several_processes(zk, spawn_worker):
    party = zk.Party("/party", "observer-does-not-join")
    workers = [spawn_worker("party", path="/party", id=f"member-{i}", timeout_s=2.0)
               for i in range(PROCESSES)]
    for worker in workers:
        assert "joined" in worker.next_message(WORKER_TIMEOUT_S)
    assert sorted(party) == [f"member-{i}" for i in range(PROCESSES)]
    workers[0].release()  # leaves cleanly
    assert workers[0].result(WORKER_TIMEOUT_S) == {"left": "member-0"}
    assert sorted(party) == ["member-1", "member-2"]
    workers[1].kill()  # SIGKILL: leaves when its session expires
    wait_until(lambda: sorted(party) == ["member-2"], timeout_s=20, what="killed member gone")


def test_semaphore_admits_at_most_max_leases_processes(zk, spawn_worker):
    workers = [spawn_worker("semaphore", path="/sem", id=f"w{i}", max_leases=2, rounds=3, hold_ms=30)
               for i in range(PROCESSES + 1)]
    intervals = [tuple(i) for w in workers for i in w.result(WORKER_TIMEOUT_S)["intervals"]]
    assert len(intervals) == (PROCESSES + 1) * 3
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                    key=lambda e: (e[0], e[1]))  # at equal times, releases first
    holders = peak = 0
    for _, delta in events:
        holders += delta
        peak = max(peak, holders)
    assert peak <= 2, f"{peak} processes held a 2-lease semaphore at once"


def test_locking_queue_items_are_consumed_exactly_once(zk, spawn_worker):
    queue = zk.LockingQueue("/lqueue")
    items = [f"item-{i}" for i in range(20)]
    for item in items:
        queue.put(item.encode())
    workers = [spawn_worker("locking_queue_consume", path="/lqueue", idle_timeout_s=1.0)
               for _ in range(PROCESSES)]
    consumed = [item for w in workers for item in w.result(WORKER_TIMEOUT_S)["items"]]
    assert sorted(consumed) == sorted(items)
    assert len(zk.LockingQueue("/lqueue")) == 0
