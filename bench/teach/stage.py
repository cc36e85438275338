"""The stage a teaching scenario plays on: a real cluster, writers that record every
operation, the picture of the cluster after each step, and the verdict.

A ``Stage`` is one cluster (``node.cluster.Cluster``) in its own directory, with the
settings a scenario needs. ``Writer`` is a background producer that sends unique values
one at a time and records each send Jepsen-style (``bench.chaos.checker.Op``), so the
chaos checker gives the verdict: what was acknowledged and lost. With ``client`` other
than native, ``Stage.writer`` returns a ``client_writer.ClientWriter`` instead: the same
interface, backed by a real Kafka client's worker process. ``picture`` draws the
state of some partitions from one consistent read (``node.cluster.view``): leader,
leader epoch, ISR, each replica's LEO and HW as bars, the committed region.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos.checker import Op, check, log_matching

# Fast failure detection for a laptop audience (zk_lite's tick is 500 ms).
BASE_SETTINGS = {"zookeeper.session.timeout.ms": "3000", "replica.lag.time.max.ms": "3000",
                 "replica.fetch.wait.max.ms": "100", "auto.leader.rebalance.enable": "false",
                 "controlled.shutdown.retry.backoff.ms": "200"}
BAR_WIDTH = 32
WAIT_S = 60.0
SETTLE_S = 5.0      # the longest a read waits for the high watermark to reach the log end


class ScenarioError(Exception):
    """A step could not be carried out (not a wrong prediction: the run itself failed)."""


class Writer:
    """Sends ``<name>-<n>`` one at a time to one partition from a thread; every send is
    recorded (invoke, then ok with its offset, fail when refused for certain, info when
    the outcome is unknown)."""
    client = "native"
    label = "native (node.client)"
    client_events: list = []   # the native client reports nothing beside its sends

    def __init__(self, bootstrap: str, topic: str, name: str, *, acks="all",
                 partition: int = 0, request_timeout_ms: int = 1500,
                 delivery_timeout_ms: int = 4000, pause_s: float = 0.005):
        from node.client import Producer
        self.topic, self.name, self.partition = topic, name, partition
        self.producer = Producer(bootstrap_servers=bootstrap, acks=acks,
                                 request_timeout_ms=request_timeout_ms,
                                 delivery_timeout_ms=delivery_timeout_ms,
                                 retry_backoff_ms=50, max_block_ms=3000)
        self.ops: list[Op] = []
        self.acked = self.failed = self.unknown = 0
        self.last_error = ""
        self.pause_s = pause_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"writer-{name}", daemon=True)

    def start(self) -> "Writer":
        self._thread.start()
        return self

    def _record(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)

    def _run(self) -> None:
        from node.wire.errors import ErrorCode, KafkaError
        n = 0
        while not self._stop.is_set():
            value = f"{self.name}-{n}".encode()
            n += 1
            self._record(Op(self.name, "invoke", "send", time.monotonic_ns(), value))
            try:
                md = self.producer.send(self.topic, value, partition=self.partition).get(
                    timeout=30)
                self._record(Op(self.name, "ok", "send", time.monotonic_ns(), value,
                                md.partition, md.offset))
                self.acked += 1
            except Exception as e:  # every outcome is recorded; its kind decides the type
                code = getattr(e, "code", None)
                definite = isinstance(e, KafkaError) and code == ErrorCode.NOT_ENOUGH_REPLICAS
                self._record(Op(self.name, "fail" if definite else "info", "send",
                                time.monotonic_ns(), value, error=str(e)[:200]))
                if definite:
                    self.failed += 1
                else:
                    self.unknown += 1
                self.last_error = f"{type(e).__name__}: {e}"[:160]
                self._stop.wait(0.1)
            if self.pause_s:
                self._stop.wait(self.pause_s)

    def counts(self) -> tuple[int, int, int]:
        return self.acked, self.failed, self.unknown

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        try:
            self.producer.close(timeout=5)
        except Exception:
            pass

    def history(self) -> list[Op]:
        with self._lock:
            return list(self.ops)


@dataclass
class Verdict:
    acknowledged: int
    lost: int
    refused: int
    unknown: int
    divergent: int = 0
    duplicates: int = 0
    lost_examples: list = field(default_factory=list)


class Stage:
    """One cluster for a scenario. ``label`` names it when two run side by side."""

    def __init__(self, directory: Path, *, brokers: int = 3, settings: dict | None = None,
                 broker_config: dict | None = None, netns: bool = False, label: str = "",
                 out=print, client: str = "native"):
        from node.cluster import Cluster, ClusterError
        self.label = label
        self.client = client
        self.out = out
        config = {**BASE_SETTINGS, **(settings or {})}
        try:
            self.cluster = Cluster.up(Path(directory), brokers, config=config,
                                      broker_config=broker_config or {}, netns=netns)
        except ClusterError as e:
            raise ScenarioError(str(e)) from None
        self.writers: list = []      # Writer or ClientWriter
        self.reads: dict = {}        # (topic, partition) -> (time_ns, the last ``read``)
        self._admin = None
        self._down = False

    # ------------------------------------------------------------- parts
    @property
    def admin(self):
        from node.client import Admin
        if self._admin is None:
            self._admin = Admin(bootstrap_servers=self.cluster.bootstrap_servers)
        return self._admin

    @property
    def controller(self) -> int | None:
        return self.cluster.controller_id()

    def others(self, *excluded: int) -> list[int]:
        return [b for b in self.cluster.broker_ids if b not in excluded]

    def topic(self, name: str, *, partitions: int = 1, rf: int = 3,
              config: dict | None = None, assignment: dict | None = None) -> None:
        self.admin.create_topic(name, partitions, rf if assignment is None else -1,
                                config=config, replica_assignment=assignment)
        self.wait(lambda: all((s := self.state(name, p)) is not None and s.leader >= 0 and
                              len(s.isr) == len((assignment or {}).get(p, [0] * rf))
                              for p in range(partitions)), f"{name}: leaders and full ISRs")

    def writer(self, topic: str, name: str, **kw):
        """A writer of ``self.client``: native in-process, else a client's worker
        process on the Kafka listeners (``client_writer``)."""
        if self.client == "native":
            w = Writer(self.cluster.bootstrap_servers, topic, name, **kw).start()
        else:
            from bench.teach.client_writer import ClientWriter, ClientWriterError
            try:
                w = ClientWriter(self.client, self.cluster.kafka_bootstrap_servers, topic,
                                 name, log_dir=self.cluster.dir, **kw).start()
            except ClientWriterError as e:
                raise ScenarioError(str(e)) from None
        self.writers.append(w)
        return w

    def state(self, topic: str, partition: int = 0):
        return self.cluster.partition_state(topic, partition)

    def wait(self, predicate, what: str, timeout_s: float = WAIT_S):
        try:
            return self.cluster.wait_for(predicate, timeout_s, what, interval_s=0.05)
        except TimeoutError as e:
            raise ScenarioError(f"{self.label + ': ' if self.label else ''}{e}") from None

    def wait_state(self, topic: str, predicate, what: str, partition: int = 0,
                   timeout_s: float = WAIT_S):
        return self.wait(lambda: (lambda s: s if s is not None and predicate(s) else None)(
            self.state(topic, partition)), f"{topic}-{partition}: {what}", timeout_s)

    def wait_acks(self, writer, more: int, timeout_s: float = WAIT_S) -> None:
        target = writer.acked + more
        try:
            self.wait(lambda: writer.acked >= target,
                      f"{more} more acknowledgements for {writer.name}", timeout_s)
        except ScenarioError as e:   # the error as of the timeout, not as of the call
            raise ScenarioError(f"{e} (last error: {writer.last_error or 'none'})") from None

    def board(self, broker_id: int, topic: str, partition: int = 0):
        from shm.board import BoardError, BoardReader
        try:
            reader = BoardReader.open(self.cluster.cluster_id, broker_id)
        except BoardError:
            return None
        try:
            return reader.get(topic, partition)
        finally:
            reader.close()

    # ------------------------------------------------------------- faults
    def kill(self, b) -> None:
        self.cluster.kill(b, "KILL")

    def pause(self, b) -> None:
        self.cluster.kill(b, "STOP")

    def resume(self, b) -> None:
        self.cluster.kill(b, "CONT")

    def restart(self, b, wait: bool = True) -> None:
        self.cluster.start(b, wait=wait)

    def power_failure(self, b) -> dict:
        self.cluster.kill(b, "KILL")
        return self.cluster.lose_unflushed(b)

    # ------------------------------------------------------------- reading
    def read(self, topic: str, partition: int = 0) -> dict[int, bytes]:
        """offset -> value of everything below the high watermark, from the leader,
        once the high watermark has reached the leader's log end (``settle``)."""
        from bench.chaos.run import read_log
        from node.tools.common import ToolError
        self.settle(topic, partition)
        try:
            final, _ = read_log(self.cluster.bootstrap_servers, topic, [partition])
        except ToolError as e:
            raise ScenarioError(f"reading {topic}-{partition}: {e}") from None
        self.reads[(topic, partition)] = (time.monotonic_ns(), dict(final[partition]))
        return dict(final[partition])

    def settle(self, topic: str, partition: int = 0, timeout_s: float = SETTLE_S) -> bool:
        """Wait until ``topic-partition``'s leader has a high watermark at its log end:
        the last writes it acknowledged alone (acks=1) are on the followers. Read at
        once, they sit above the high watermark a moment longer and would be counted
        lost when they are not. Bounded: a follower that is away but still in the ISR
        keeps the high watermark down, and the read then shows what is committed.
        Returns whether it settled."""
        from kazoo.exceptions import KazooException

        from node.cluster import ClusterError
        from node.cluster.view import snapshot

        def settled() -> bool:
            try:
                p = snapshot(self.cluster, [topic]).partition(topic, partition)
            except (ClusterError, KazooException):   # the coordinator away a moment
                return False
            return p is not None and p.leader >= 0 and p.hw is not None and \
                p.leader_leo is not None and p.hw >= p.leader_leo
        try:
            self.cluster.wait_for(settled, timeout_s, "the high watermark at the log end",
                                  interval_s=0.05)
        except TimeoutError:
            return False
        return True

    def verdict(self, topic: str, partition: int = 0, writers=None) -> Verdict:
        """The chaos checker over this topic's writers and a read of the partition now."""
        writers = [w for w in (writers or self.writers) if w.topic == topic]
        history = sorted((op for w in writers for op in w.history()), key=lambda o: o.time_ns)
        final = {partition: sorted(self.read(topic, partition).items())}
        v = check(history, final)
        return Verdict(v.acknowledged, len(v.lost), v.failed, v.unknown,
                       duplicates=len(v.duplicate), lost_examples=[(value.decode(), p, o) for value, p, o in v.lost[:5]])

    def divergence(self, topic: str, partition: int = 0) -> list:
        """LogMatching over every replica's segment files below the leader's HW. Only
        once the cluster is down (``stop``): nothing writes to the files then."""
        from bench.chaos.run import read_replica
        from shm.names import cleanup_cluster
        assert self._down, "read the replicas' files once the cluster is down"
        hw = self._final_hw.get((topic, partition), 0)
        try:
            replicas = {partition: {b: read_replica(self.cluster, b, topic, partition, hw)
                                    for b in self._replicas.get((topic, partition), [])}}
        finally:
            cleanup_cluster(self.cluster.cluster_id)
        return log_matching(replicas, {partition: hw})

    # ------------------------------------------------------------- the picture
    def picture(self, topics: list[str]) -> str:
        from node.cluster.view import snapshot
        try:
            snap = snapshot(self.cluster, topics)
        except Exception as e:  # the coordinator may be down in this step
            return f"  (no picture: {e})"
        lines = []
        head = f"[{self.label}] " if self.label else ""
        ctrl = "none" if snap.controller is None else f"broker {snap.controller}"
        lines.append(f"  {head}controller {ctrl} (epoch {snap.controller_epoch}); processes: "
                     + ", ".join(f"{b.id} {b.state}" for b in snap.brokers)
                     + (f"; cut: {', '.join(a + '|' + b for a, b in snap.cut_links)}"
                        if snap.cut_links else ""))
        states = {b.id: b.state for b in snap.brokers}
        for p in snap.partitions:
            leader = "none (offline)" if p.leader < 0 else f"broker {p.leader}"
            lines.append(f"  {p.name}: leader {leader}, leader epoch {p.leader_epoch}, "
                         f"ISR {p.isr}")
            top = max([r.leo or 0 for r in p.views] + [p.leader_leo or 0, 1])
            for r in p.views:
                role = "leader" if r.broker == p.leader else "follower"
                leo = "-" if r.leo is None else str(r.leo)
                hw = p.hw if r.broker == p.leader else \
                    (min(r.own_hw, p.hw) if r.own_hw is not None and p.hw is not None
                     else r.own_hw)
                lines.append(f"    broker {r.broker} {states.get(r.broker, '?'):<8} "
                             f"{role:<8} {'ISR' if r.in_isr else '   '} LEO {leo:>7} "
                             f"HW {'-' if hw is None else hw:>7}  "
                             f"{_bar(r.leo, p.hw, top)}")
                if r.believes_leader:
                    lines.append(f"      broker {r.broker} still believes it leads (epoch "
                                 f"{r.own_leader_epoch}): its own log ends at {r.own_leo}")
            if p.hw is not None:
                lines.append(f"    committed: offsets below {p.hw} (█); on the leader "
                             f"but not yet committed: {(p.leader_leo or 0) - p.hw} (░)")
                if p.lso is not None and p.lso < p.hw:
                    lines.append(f"    last stable offset {p.lso}: an open transaction; "
                                 f"read_committed consumers stop there")
        return "\n".join(lines)

    # ------------------------------------------------------------- the end
    def stop(self, topics: list[str] = ()) -> None:
        """Stop the writers and the cluster (after noting each partition's HW and
        replicas, for ``divergence``)."""
        for w in self.writers:
            w.stop()
        self._final_hw, self._replicas = {}, {}
        for topic in topics:
            try:
                meta = self.admin.describe_topics([topic])[topic]
                for m in meta:
                    s = self.state(topic, m.partition)
                    b = self.board(s.leader, topic, m.partition) if s and s.leader >= 0 else None
                    self._final_hw[(topic, m.partition)] = b.high_watermark if b else 0
                    self._replicas[(topic, m.partition)] = list(m.replicas)
            except Exception:
                pass
        self.close()

    def close(self) -> None:
        if self._down:
            return
        for w in self.writers:
            w.stop()
        if self._admin is not None:
            try:
                self._admin.close()
            except Exception:
                pass
        self.cluster.down(grace_s=5)
        self._down = True


def _bar(leo, hw, top: int) -> str:
    if leo is None:
        return ""
    width = max(1, round(BAR_WIDTH * leo / top)) if leo else 0
    committed = min(width, round(BAR_WIDTH * min(leo, hw or 0) / top)) if hw else 0
    return "█" * committed + "░" * (width - committed)
