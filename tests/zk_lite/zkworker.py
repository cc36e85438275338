"""A kazoo client in its own process, for tests that need several client processes.

Run as ``python zkworker.py ROLE JSON_ARGS``. Every role connects its own KazooClient to
``args["hosts"]`` (a chroot'ed host string), does its part, prints JSON lines on stdout
(the last one is its result) and exits. Times are ``time.monotonic()``, which is one
clock for all processes on Linux. Roles that must stay alive read stdin until EOF.
"""
from __future__ import annotations

import json
import sys
import time

from kazoo.client import KazooClient

connect_timeout_s = 20.0


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def wait_for_stdin_line() -> None:
    sys.stdin.readline()


def role_ephemeral(client: KazooClient, args: dict) -> None:
    """Create an ephemeral, report the session, then hang until killed."""
    stat = client.create(args["path"], ephemeral=True, include_data=True)[1]
    client.sync("/")  # one more round trip: the session was heard from just now
    session_id, password = client.client_id
    emit(session_id=session_id, password=password.hex(), owner=stat.ephemeralOwner,
         t=time.monotonic())
    wait_for_stdin_line()


def role_lock(client: KazooClient, args: dict) -> None:
    lock = client.Lock(args["path"], args["id"])
    intervals = []
    for _ in range(args["rounds"]):
        with lock:
            start = time.monotonic()
            time.sleep(args["hold_ms"] / 1000)  # the critical section itself
            intervals.append((start, time.monotonic()))
    emit(intervals=intervals)


def role_counter(client: KazooClient, args: dict) -> None:
    counter = client.Counter(args["path"])
    for _ in range(args["increments"]):
        counter += 1
    emit(done=args["increments"])


def role_election(client: KazooClient, args: dict) -> None:
    election = client.Election(args["path"], args["id"])
    led = []

    def lead():
        start = time.monotonic()
        time.sleep(args["hold_ms"] / 1000)
        led.append((start, time.monotonic()))

    election.run(lead)
    emit(intervals=led)


def role_queue_consume(client: KazooClient, args: dict) -> None:
    queue = client.Queue(args["path"])
    items = []
    while True:
        item = queue.get()
        if item is None:
            break
        items.append(item.decode())
    emit(items=items)


def role_semaphore(client: KazooClient, args: dict) -> None:
    semaphore = client.Semaphore(args["path"], args["id"], max_leases=args["max_leases"])
    intervals = []
    for _ in range(args["rounds"]):
        with semaphore:
            start = time.monotonic()
            time.sleep(args["hold_ms"] / 1000)
            intervals.append((start, time.monotonic()))
    emit(intervals=intervals)


def role_locking_queue_consume(client: KazooClient, args: dict) -> None:
    """Take items until the queue stays empty for a moment; consume() each one."""
    queue = client.LockingQueue(args["path"])
    items = []
    while True:
        item = queue.get(timeout=args["idle_timeout_s"])
        if item is None:
            break
        items.append(item.decode())
        assert queue.consume()
    emit(items=items)


def role_double_barrier(client: KazooClient, args: dict) -> None:
    barrier = client.DoubleBarrier(args["path"], args["members"], identifier=args["id"])
    arrived = time.monotonic()
    barrier.enter()
    entered = time.monotonic()
    emit(entered=entered)
    # kazoo's recipe races: a member that leaves at once deletes /ready and its own node,
    # and one still between creating its node and watching /ready then counts too few
    # members and waits for ever (seen under load, against Apache ZooKeeper too). The
    # test lets members leave once all have entered.
    wait_for_stdin_line()
    barrier.leave()
    emit(arrived=arrived, entered=entered, left=time.monotonic())


def role_barrier_wait(client: KazooClient, args: dict) -> None:
    barrier = client.Barrier(args["path"])
    emit(waiting=True)
    released = barrier.wait(timeout=args["timeout_s"])
    emit(released=released, t=time.monotonic())


def role_party(client: KazooClient, args: dict) -> None:
    party = client.Party(args["path"], args["id"])
    party.join()
    emit(joined=args["id"])
    wait_for_stdin_line()
    party.leave()
    emit(left=args["id"])


ROLES = {name[len("role_"):]: func for name, func in globals().items() if name.startswith("role_")}


def main() -> None:
    role, args = sys.argv[1], json.loads(sys.argv[2])
    client = KazooClient(hosts=args["hosts"], timeout=args.get("timeout_s", 5.0))
    client.start(timeout=connect_timeout_s)
    try:
        ROLES[role](client, args)
    finally:
        client.stop()
        client.close()


if __name__ == "__main__":
    main()
