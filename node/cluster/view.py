"""What a teacher sees: one consistent picture of a running cluster, and what changed.

``snapshot(cluster)`` reads, in one pass:
- from the coordinator: the controller and its epoch, the registered brokers, every
  topic's assignment and every partition's state (leader, leader epoch, ISR);
- from each broker's shared-memory board (``shm.board``): replica rows;
- from the supervisor: each process's state (alive, paused, killed) and, with
  ``--netns``, which links are cut.

A partition is drawn from its **leader's row only**: the leader's LEO, its HW and each
follower's LEO *as the leader knows it* (its last fetch offset) are written by one
process in one seqlocked row (``ReplicaState.follower_leo``), so the picture is one
cut of the leader's state and a follower is never drawn ahead of its leader. (Reading
each broker's own row instead mixes moments: each broker publishes on its own timer,
and a follower that fetched a moment after the leader's last publish looks ahead.)
A replica's own row is used only where there is no leader to ask (an offline
partition) and to notice truncations.

``events(previous, current)`` is pure: the timeline entries between two snapshots
(controller changes, elections, ISR shrinks and expands, truncations with the number of
records cut, processes killed, paused, resumed, isolated).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


@dataclass
class ReplicaView:
    broker: int
    leo: int | None              # from the leader's row (or its own when offline)
    source: str                  # "leader", "own" or "none"
    in_isr: bool
    own_leo: int | None = None   # its own row: for noticing truncations, and a deposed
    own_hw: int | None = None    # leader that does not know yet (it still believes it
    own_leader_epoch: int | None = None  # leads an older epoch: two leaders)
    believes_leader: bool = False


@dataclass
class PartitionView:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    hw: int | None
    leader_leo: int | None
    views: list[ReplicaView] = field(default_factory=list)
    lso: int | None = None       # the leader's last stable offset (transactions, KIP-98)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass
class BrokerView:
    id: int
    state: str                   # alive | paused | killed | isolated
    address: str
    registered: bool
    controller: bool


@dataclass
class Snapshot:
    t_ms: int
    controller: int | None
    controller_epoch: int | None
    zk_state: str                # alive | paused | killed | external
    brokers: list[BrokerView]
    partitions: list[PartitionView]
    cut_links: list[list[str]]

    def to_json(self) -> dict:
        return asdict(self)

    def partition(self, topic: str, partition: int) -> PartitionView | None:
        return next((p for p in self.partitions
                     if p.topic == topic and p.partition == partition), None)


_PROCESS_STATE = {"alive": "alive", "stopped": "paused", "dead": "killed"}


def snapshot(cluster, topics: list[str] | None = None) -> Snapshot:
    """One picture of ``cluster`` (a ``node.cluster.Cluster``). Raises ClusterError if
    the coordinator cannot be read."""
    from kazoo.exceptions import NoNodeError

    from node.wire import zkdata
    from shm.board import BoardError, BoardReader

    zk = cluster._connected_zk()
    t_ms = int(time.time() * 1000)

    def get(path, decode, default=None):
        try:
            data, stat = zk.get(path)
            return decode(data, stat)
        except (NoNodeError, zkdata.ZkDataError, ValueError):
            return default

    controller = get(zkdata.CONTROLLER, lambda d, s: zkdata.decode_controller(d))
    controller_epoch = get(zkdata.CONTROLLER_EPOCH, lambda d, s: zkdata.decode_controller_epoch(d))
    try:
        registered = {int(c) for c in zk.get_children(zkdata.BROKER_IDS) if c.isdigit()}
    except NoNodeError:
        registered = set()
    cut = cluster.mesh.cut_links() if cluster.mesh is not None else []
    brokers = []
    for b in cluster.broker_ids:
        state = _PROCESS_STATE[cluster.process(b).state()]
        node = f"b{b}"
        if state == "alive" and cluster.mesh is not None and \
                sum(1 for link in cut if node in link) >= len(cluster.mesh.nodes) - 1:
            state = "isolated"
        brokers.append(BrokerView(b, state, cluster.broker_address(b), b in registered,
                                  controller == b and state != "killed"))
    zk_state = "external" if cluster.external_zookeeper else \
        _PROCESS_STATE[cluster.process("zk").state()]

    rows: dict[int, dict] = {}
    for view in brokers:
        b = view.id
        if view.state == "killed":
            continue  # its board outlives it in /dev/shm, frozen: nothing true to read
        try:
            reader = BoardReader.open(cluster.cluster_id, b)
        except BoardError:
            continue
        try:
            rows[b] = {(r.topic, r.partition): r for r in reader.snapshot()}
        except BoardError:
            pass
        finally:
            reader.close()

    try:
        names = sorted(zk.get_children(zkdata.BROKER_TOPICS))
    except NoNodeError:
        names = []
    if topics is not None:
        names = [t for t in names if t in topics]
    partitions = []
    for topic in names:
        assignment = get(zkdata.topic_path(topic),
                         lambda d, s, t=topic: zkdata.decode_assignment(t, d), {})
        for p, replicas in sorted(assignment.items()):
            state = get(zkdata.partition_state_path(topic, p),
                        lambda d, s: zkdata.decode_partition_state(d, s.version))
            leader = state.leader if state is not None else -1
            epoch = state.leader_epoch if state is not None else -1
            isr = list(state.isr) if state is not None else []
            view = PartitionView(topic, p, leader, epoch, isr, list(replicas), None, None)
            lead_row = rows.get(leader, {}).get((topic, p)) if leader >= 0 else None
            if lead_row is not None and (int(lead_row.role) != 1 or
                                         lead_row.leader_epoch != epoch):
                lead_row = None   # not (yet) leading this epoch: nothing to draw from
            if lead_row is not None:
                view.hw, view.leader_leo = lead_row.high_watermark, lead_row.log_end_offset
                view.lso = lead_row.last_stable_offset     # None: not published
            for b in replicas:
                own = rows.get(b, {}).get((topic, p))
                r = ReplicaView(b, None, "none", b in isr,
                                own.log_end_offset if own is not None else None,
                                own.high_watermark if own is not None else None,
                                own.leader_epoch if own is not None else None,
                                own is not None and int(own.role) == 1 and b != leader)
                if lead_row is not None:
                    if b == leader:
                        r.leo, r.source = lead_row.log_end_offset, "leader"
                    else:
                        leo = lead_row.follower_log_end_offset(b)
                        if leo is not None:
                            r.leo, r.source = min(leo, lead_row.log_end_offset), "leader"
                elif own is not None:
                    r.leo, r.source = own.log_end_offset, "own"
                view.views.append(r)
            partitions.append(view)
    return Snapshot(t_ms, controller, controller_epoch, zk_state, brokers, partitions,
                    [list(link) for link in cut])


# ----------------------------------------------------------------- the timeline (pure)

def events(previous: Snapshot | None, current: Snapshot) -> list[dict]:
    """What changed from ``previous`` to ``current``: [{t_ms, kind, text}, ...]."""
    out: list[dict] = []

    def add(kind: str, text: str) -> None:
        out.append({"t_ms": current.t_ms, "kind": kind, "text": text})

    if previous is None:
        return out
    if current.controller != previous.controller:
        add("controller", "no controller" if current.controller is None else
            f"controller: broker {current.controller} (epoch {current.controller_epoch})")
    before = {b.id: b for b in previous.brokers}
    for b in current.brokers:
        old = before.get(b.id)
        if old is not None and old.state != b.state:
            verb = {"alive": "is back" if old.state == "killed" else "resumes",
                    "paused": "paused", "killed": "killed", "isolated": "isolated"}[b.state]
            add("process", f"broker {b.id} {verb}")
    if current.zk_state != previous.zk_state:
        add("process", f"coordinator {current.zk_state}")
    old_cut = {tuple(sorted(link)) for link in previous.cut_links}
    new_cut = {tuple(sorted(link)) for link in current.cut_links}
    for a, b in sorted(new_cut - old_cut):
        add("network", f"link {a} - {b} cut")
    for a, b in sorted(old_cut - new_cut):
        add("network", f"link {a} - {b} healed")
    olds = {(p.topic, p.partition): p for p in previous.partitions}
    for p in current.partitions:
        old = olds.get((p.topic, p.partition))
        if old is None:
            add("topic", f"{p.name} created: replicas {p.replicas}, leader {p.leader}")
            continue
        if p.leader != old.leader or p.leader_epoch != old.leader_epoch:
            if p.leader < 0:
                add("election", f"{p.name} offline: no ISR replica is alive "
                                f"(was led by {old.leader})")
            else:
                add("election", f"{p.name}: leader {old.leader} -> {p.leader} "
                                f"(epoch {p.leader_epoch})")
        if p.isr != old.isr:
            gone = [b for b in old.isr if b not in p.isr]
            came = [b for b in p.isr if b not in old.isr]
            if gone:
                add("isr", f"{p.name}: ISR shrinks {old.isr} -> {p.isr} (out: {gone})")
            if came:
                add("isr", f"{p.name}: ISR expands {old.isr} -> {p.isr} (in: {came})")
        old_own = {r.broker: r.own_leo for r in old.views}
        for r in p.views:
            was = old_own.get(r.broker)
            if was is not None and r.own_leo is not None and r.own_leo < was:
                add("truncation", f"{p.name}: broker {r.broker} truncates {was - r.own_leo} "
                                  f"record(s) (LEO {was} -> {r.own_leo})")
    return out
