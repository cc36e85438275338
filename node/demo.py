"""``./scripts/demo``: Kafka's replication story, told live by a real cluster.

zk_lite and three broker processes start (``node.cluster``). A topic with replication
factor 3 and ``min.insync.replicas=2`` is created, and a producer writes to it with
acks=all from a background thread the whole time. Then, step by step, printing the
partition's state after each (the leader, the leader epoch and the ISR from the
coordinator; each replica's role, LEO and HW from the brokers' shared-memory boards):

1. produce with acks=all: the HW follows the slowest in-sync replica;
2. SIGKILL the leader: its session times out, the controller elects the first live ISR
   replica and removes the dead one from the ISR; the producer retries there;
3. producing continues on the new leader with two in-sync replicas (= min.insync);
4. the dead broker restarts: it becomes a follower, truncates its log to what the new
   leader's epoch history says (KIP-101), catches up and rejoins the ISR;
5. a preferred replica election moves leadership back to the first replica;
6. every acknowledged record is read back at its offset and counted.

It exits 0 only if no acknowledged record was lost, and stops every process and
removes the cluster's shared memory on the way out.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from node.paths import absolute_path

TOPIC = "demo"
SESSION_TIMEOUT_MS = 2000
CONFIG = {"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
          "replica.lag.time.max.ms": "2000",
          "auto.leader.rebalance.enable": "false"}
WAIT_S_MAX = 30.0
_started = time.monotonic()


def say(text: str = "") -> None:
    print(f"[{time.monotonic() - _started:5.1f}s] {text}" if text else "", flush=True)


class Acks:
    """A producer thread: v0, v1, ... with acks=all, one at a time, recording each ack."""

    def __init__(self, bootstrap: str):
        from node.client import Producer

        self.producer = Producer(bootstrap_servers=bootstrap, acks="all",
                                 request_timeout_ms=3000, retry_backoff_ms=50,
                                 delivery_timeout_ms=60_000)
        self.acked: dict[bytes, int] = {}
        self.failed = 0
        self.sent = 0
        self.paused = threading.Event()
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            if self.paused.is_set():
                time.sleep(0.01)
                continue
            value = f"record-{self.sent}".encode()
            self.sent += 1
            try:
                offset = self.producer.send(TOPIC, value, partition=0).get(timeout=90).offset
            except Exception:
                self.failed += 1
                continue
            with self.lock:
                self.acked[value] = offset

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_more(self, n: int) -> None:
        target = self.count() + n
        wait_until(f"{target} records acknowledged",
                   lambda: self.count() >= target)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=120)
        self.producer.close()


def partition_state(cluster):
    return cluster.partition_state(TOPIC, 0)


def wait_until(what: str, predicate, timeout_s: float = WAIT_S_MAX):
    from node.tools.common import wait_until as poll  # a timeout is a ToolError

    return poll(predicate, timeout_s, what)


def replica_rows(cluster) -> list[tuple[int, str, str, str]]:
    """(broker, role, LEO, HW) per replica of the demo partition, as one consistent cut:
    the leader's LEO and HW and each follower's LEO as the leader knows it, all from
    the leader's board row (``node.cluster.view``), so a follower never shows ahead of
    its leader. A follower's HW is its own (it learns the HW from the leader, so it
    trails it), capped at the leader's: a follower never shows a HW its leader has not
    published yet either."""
    from node.cluster.view import snapshot

    return _rows(snapshot(cluster, [TOPIC]).partition(TOPIC, 0), cluster.broker_ids)


def _rows(p, broker_ids) -> list[tuple[int, str, str, str]]:
    rows = []
    for broker_id in broker_ids:
        r = next((v for v in p.views if v.broker == broker_id), None) if p else None
        if r is None or (r.leo is None and r.own_leo is None):
            rows.append((broker_id, "down" if r is None else "-", "-", "-"))
            continue
        role = "leader" if broker_id == p.leader else \
            ("follower" if p.leader >= 0 else "offline")
        if broker_id == p.leader:
            hw = p.hw
        elif p.hw is not None and r.own_hw is not None:
            hw = min(r.own_hw, p.hw)
        else:
            hw = r.own_hw
        rows.append((broker_id, role, "-" if r.leo is None else str(r.leo),
                     "-" if hw is None else str(hw)))
    return rows


def show(cluster, alive: set[int]) -> None:
    from node.cluster.view import snapshot
    from node.waiting import poll_until

    def consistent():  # one read: state and rows agree; the new leader's row published
        p = snapshot(cluster, [TOPIC]).partition(TOPIC, 0)
        return p if p is None or p.leader < 0 or p.hw is not None else None
    try:
        s = poll_until(consistent, 3.0, "the leader's board row", interval_s=0.05)
    except TimeoutError:
        s = snapshot(cluster, [TOPIC]).partition(TOPIC, 0)
    if s is None:
        say("  (no partition state yet)")
        return
    leader = "none (offline)" if s.leader < 0 else f"broker {s.leader}"
    print(f"         partition {TOPIC}-0: leader {leader}, leader epoch {s.leader_epoch}, "
          f"ISR {list(s.isr)}")
    print(f"         {'broker':>8} {'process':>8} {'role':>9} {'LEO':>7} {'HW':>7}")
    for broker_id, role, leo, hw in _rows(s, cluster.broker_ids):
        process = "alive" if broker_id in alive else "killed"
        if broker_id not in alive:
            role, leo, hw = "-", "-", "-"
        print(f"         {broker_id:>8} {process:>8} {role:>9} {leo:>7} {hw:>7}")


def truncations(cluster, broker_id: int) -> list[str]:
    """What the broker's latest incarnation logged about truncating the demo partition."""
    path = cluster.dir / f"broker-{broker_id}.log"
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    latest = text.rsplit("supervisor starts", 1)[-1]
    lines = [line.split(" INFO ", 1)[-1] for line in latest.splitlines()
             if f"{TOPIC}-0: truncating" in line]
    return lines or [f"{TOPIC}-0: nothing to truncate (its log ended where the new "
                     f"leader's epoch history agrees)"]


def story(cluster) -> int:
    from node.client import Admin, Consumer, TopicPartition

    alive = set(cluster.broker_ids)
    admin = Admin(bootstrap_servers=cluster.bootstrap_servers)
    say(f"cluster up: brokers {cluster.broker_ids} at {cluster.bootstrap_servers}; "
        f"the controller is broker {cluster.controller_id()}")
    admin.create_topic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})
    replicas = admin.describe_topics([TOPIC])[TOPIC][0].replicas
    say(f"created topic {TOPIC!r}: 1 partition, replicas {replicas} (broker {replicas[0]} is "
        f"the preferred leader), min.insync.replicas=2")
    show(cluster, alive)

    say()
    say("step 1: produce with acks=all - a record is acknowledged once every ISR replica has it")
    acks = Acks(cluster.bootstrap_servers)
    acks.wait_more(500)
    say(f"{acks.count()} records acknowledged; the HW is the smallest LEO in the ISR")
    show(cluster, alive)

    say()
    leader = partition_state(cluster).leader
    say(f"step 2: SIGKILL broker {leader}, the leader (the producer keeps sending)")
    killed_at = time.monotonic()
    cluster.kill(leader, "KILL")
    alive.discard(leader)
    say(f"its znodes live until its coordinator session times out "
        f"(zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS})...")
    new = wait_until("a new leader", lambda: (lambda s: s if s and s.leader not in
                                              (leader, -1) else None)(partition_state(cluster)))
    say(f"after {time.monotonic() - killed_at:.1f} s the controller elected broker {new.leader}, "
        f"the first live replica in the ISR, and removed broker {leader} from the ISR "
        f"(leader epoch {new.leader_epoch})")
    show(cluster, alive)

    say()
    say("step 3: producing continues on the new leader (ISR of 2 = min.insync.replicas)")
    before = acks.count()
    acks.wait_more(500)
    say(f"{acks.count() - before} more records acknowledged since the kill")
    show(cluster, alive)

    say()
    say(f"step 4: restart broker {leader}: it follows broker {new.leader}, truncates what "
        f"the new leader's epoch history says is not committed, and catches up")
    cluster.start(leader)
    alive.add(leader)
    back = wait_until("the restarted broker to rejoin the ISR",
                      lambda: (lambda s: s if s and leader in s.isr else None)(
                          partition_state(cluster)))
    say(f"broker {leader} is back in the ISR {list(back.isr)}")
    for line in truncations(cluster, leader):
        say(f"broker {leader}'s log: {line}")
    show(cluster, alive)

    say()
    preferred = replicas[0]
    say(f"step 5: preferred replica election: leadership goes back to broker {preferred}, "
        f"the first replica")
    if partition_state(cluster).leader == preferred:
        say(f"broker {preferred} already leads")
    else:
        def elected() -> bool:
            # The controller hears of the ISR expansion through the leader's
            # isr_change notification; an election asked just before that is refused
            # (PREFERRED_LEADER_NOT_AVAILABLE, as in Kafka) and asked again.
            if partition_state(cluster).leader == preferred:
                return True
            admin.elect_leaders("preferred", [(TOPIC, 0)])
            time.sleep(0.2)
            return partition_state(cluster).leader == preferred
        wait_until("the preferred leader", elected)
        say(f"broker {preferred} leads again (leader epoch {partition_state(cluster).leader_epoch})")
    acks.wait_more(200)
    acks.stop()
    show(cluster, alive)

    say()
    say("step 6: read everything back below the HW and check every acknowledged record")
    tp = TopicPartition(TOPIC, 0)
    consumer = Consumer(bootstrap_servers=cluster.bootstrap_servers,
                        auto_offset_reset="earliest", fetch_max_wait_ms=100)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    read: dict[int, bytes] = {}
    deadline = time.monotonic() + WAIT_S_MAX
    while consumer.position(tp) < end and time.monotonic() < deadline:
        for record in consumer.poll(timeout_ms=200):
            read[record.offset] = record.value
    consumer.close()
    admin.close()
    lost = [v for v, o in acks.acked.items() if read.get(o) != v]
    say(f"{len(read)} records read (offsets 0..{end - 1}); {len(acks.acked)} were acknowledged, "
        f"{len(acks.acked) - len(lost)} of them found at their offsets, {len(lost)} lost; "
        f"{acks.failed} sends were not acknowledged (allowed to be lost)")
    return 0 if not lost else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="./scripts/demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", type=absolute_path, help="keep the cluster's files (logs, data) here")
    args = parser.parse_args(argv)
    from node.cluster import Cluster

    run_dir = Path(args.run_dir) if args.run_dir else Path(tempfile.mkdtemp(prefix="mk-demo-"))
    cluster_id = "demo" + uuid.uuid4().hex[:8]
    say(f"minikafka demo: starting zk_lite and 3 broker processes in {run_dir / 'cluster'}")
    cluster = Cluster.up(run_dir / "cluster", 3, config=CONFIG, cluster_id=cluster_id)
    code = 1
    try:
        code = story(cluster)
    except (TimeoutError, Exception) as e:  # the story failed: say why, clean up, exit 1
        say(f"demo failed: {type(e).__name__}: {e}")
    finally:
        removed = cluster.down()
        if not args.run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
    say(f"stopped every process; removed {removed} shared-memory objects")
    print("done: every process stopped, shared memory removed" if code == 0 else
          "FAILED: an acknowledged record was lost or the story did not complete", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
