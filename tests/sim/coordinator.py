"""The simulator's coordinator: an in-memory ZooKeeper with sessions and ephemerals.

Znodes are ``path -> [data, version]`` (``MemoryZk`` of the controller harness, so the
controller's ops get exactly the answers the harness gives); on top of it: sessions
(alive until the simulator expires them), ephemeral owners, creation order (``czxid``,
Kafka's broker epoch), the controller election (``/controller`` + ``/controller_epoch``
bumped together, as ``node.broker.controller_runner``), fenced controller ops (a check of
``/controller_epoch``'s version, as the shell's multi) and the leader's conditional ISR
write with its ``/isr_change_notification`` child. It only answers; who hears of a
change (watches) is the simulator's business.
"""
from __future__ import annotations

from dataclasses import dataclass

from node.core import controller
from node.wire import zkdata
from tests.node.core.controller_harness import MemoryZk


@dataclass
class Session:
    sid: int
    broker_id: int
    incarnation: int
    last_heard_ms: int
    alive: bool = True


class SimCoordinator:
    def __init__(self) -> None:
        self.zk = MemoryZk()
        self.owner: dict[str, int] = {}          # ephemeral path -> session id
        self.czxid: dict[str, int] = {}
        self._zxid = 0
        self.sessions: dict[int, Session] = {}
        self._notification_seq = 0
        self._states: dict[str, tuple] = {}     # path -> (data, version, decoded)
        self.zk.put(zkdata.CONTROLLER_EPOCH, zkdata.encode_controller_epoch(0))

    # ---------------------------------------------------------------- sessions

    def open_session(self, broker_id: int, incarnation: int, now_ms: int) -> int:
        sid = len(self.sessions) + 1
        self.sessions[sid] = Session(sid, broker_id, incarnation, now_ms)
        return sid

    def alive(self, sid: int) -> bool:
        session = self.sessions.get(sid)
        return session is not None and session.alive

    def heartbeat(self, sid: int, now_ms: int) -> None:
        session = self.sessions[sid]
        if session.alive:
            session.last_heard_ms = now_ms

    def expire_due(self, now_ms: int, timeout_ms: int) -> list[tuple[Session, list[str]]]:
        """Expire the sessions not heard of for ``timeout_ms``; their ephemerals go."""
        expired = []
        for session in self.sessions.values():
            if session.alive and now_ms - session.last_heard_ms > timeout_ms:
                session.alive = False
                gone = sorted(p for p, sid in self.owner.items() if sid == session.sid)
                for path in gone:
                    del self.owner[path]
                    del self.zk.nodes[path]
                expired.append((session, gone))
        return expired

    def _create(self, path: str, data: bytes, sid: int | None = None) -> None:
        self._zxid += 1
        self.zk.nodes[path] = [data, 0]
        self.czxid[path] = self._zxid
        if sid is not None:
            self.owner[path] = sid

    # ---------------------------------------------------------------- brokers, controller

    def register(self, sid: int, broker_id: int, lost=(), clean_shutdown: bool = True
                 ) -> int:
        """Create the ephemeral /brokers/ids/N: its czxid (the broker epoch), or -1 while
        another session holds it. ``lost``: the partitions the broker says it lost
        committed data of; ``clean_shutdown``: how its previous run ended."""
        path = zkdata.broker_path(broker_id)
        if not self.alive(sid) or path in self.zk.nodes:
            return -1
        self._create(path, zkdata.encode_broker(zkdata.BrokerInfo(
            broker_id, "127.0.0.1", 9000 + broker_id, lost_replicas=tuple(sorted(lost)),
            clean_shutdown=clean_shutdown)), sid)
        return self.czxid[path]

    def update_registration(self, sid: int, broker_id: int, lost) -> None:
        """The broker rewrites its own registration (a lost replica is back)."""
        path = zkdata.broker_path(broker_id)
        if self.alive(sid) and self.owner.get(path) == sid:
            info = zkdata.decode_broker(broker_id, self.zk.nodes[path][0])
            self.zk.nodes[path][0] = zkdata.encode_broker(zkdata.BrokerInfo(
                broker_id, info.host, info.port, lost_replicas=tuple(sorted(lost)),
                clean_shutdown=info.clean_shutdown))

    def brokers(self) -> tuple[controller.Broker, ...]:
        found = []
        for path in self.zk.nodes:
            if path.startswith(zkdata.BROKER_IDS + "/"):
                b = int(path.rsplit("/", 1)[1])
                info = zkdata.decode_broker(b, self.zk.get(path)[0])
                found.append(controller.Broker(b, "127.0.0.1", 9000 + b, None, self.czxid[path],
                                               frozenset(info.lost_replicas), info.clean_shutdown))
        return tuple(sorted(found))

    @property
    def controller_epoch(self) -> tuple[int, int]:
        data, version = self.zk.get(zkdata.CONTROLLER_EPOCH)
        return zkdata.decode_controller_epoch(data), version

    def controller_owner(self) -> int | None:
        """The session holding /controller."""
        return self.owner.get(zkdata.CONTROLLER)

    def elect(self, sid: int, broker_id: int) -> tuple[str, int, int]:
        """("won", epoch, epoch znode version) | ("lost", ..) | ("released", ..): the
        caller held /controller without a core and gave it up (the shell's path)."""
        if not self.alive(sid):
            return "lost", -1, -1
        if zkdata.CONTROLLER in self.zk.nodes:
            if self.owner.get(zkdata.CONTROLLER) == sid:
                del self.zk.nodes[zkdata.CONTROLLER]
                del self.owner[zkdata.CONTROLLER]
                return "released", -1, -1
            return "lost", -1, -1
        epoch, _ = self.controller_epoch
        self._create(zkdata.CONTROLLER, zkdata.encode_controller(broker_id, 1), sid)
        version = self.zk.put(zkdata.CONTROLLER_EPOCH, zkdata.encode_controller_epoch(epoch + 1))
        return "won", epoch + 1, version

    def snapshot(self, epoch: int, now_ms: int) -> controller.BecomeController:
        """What the shell reads after winning (and it drains the ISR notifications)."""
        topics, states = [], {}
        for path in sorted(self.zk.nodes):
            parts = path.split("/")
            if path.startswith(zkdata.BROKER_TOPICS + "/") and len(parts) == 4:
                data, version = self.zk.get(path)
                assignment = zkdata.decode_assignment(parts[3], data)
                topics.append(controller.TopicSnapshot(parts[3], {p: tuple(r) for p, r in
                                                                  assignment.items()}, version))
            elif path.endswith("/state"):
                data, version = self.zk.get(path)
                states[(parts[3], int(parts[5]))] = zkdata.decode_partition_state(data, version)
        self.drain_isr_notifications()
        return controller.BecomeController(epoch, self.brokers(), tuple(topics), states,
                                           now_ms=now_ms)

    def controller_ops(self, sid: int, epoch_version: int, ops) -> tuple[controller.ZkResult, ...]:
        """Each op on its own, behind a check of /controller_epoch's version."""
        results = []
        for op in ops:
            if not self.alive(sid):
                results.append(controller.ZkResult("SessionExpiredError"))
            elif self.zk.get(zkdata.CONTROLLER_EPOCH)[1] != epoch_version:
                results.append(controller.ZkResult("Fenced"))
            else:
                created = isinstance(op, controller.ZkCreate) and op.path not in self.zk.nodes
                results.append(self.zk.apply(op))
                if created and results[-1].error is None:
                    self._zxid += 1
                    self.czxid[op.path] = self._zxid
        return tuple(results)

    # ---------------------------------------------------------------- partition state

    def state(self, topic: str, partition: int) -> zkdata.PartitionState | None:
        path = zkdata.partition_state_path(topic, partition)
        node = self.zk.nodes.get(path)
        if node is None:
            return None
        cached = self._states.get(path)
        if cached is None or cached[0] is not node[0] or cached[1] != node[1]:
            cached = self._states[path] = (node[0], node[1],
                                           zkdata.decode_partition_state(node[0], node[1]))
        return cached[2]

    def write_isr(self, sid: int, topic: str, partition: int, state: zkdata.PartitionState
                  ) -> tuple[bool, zkdata.PartitionState | None]:
        """The leader's conditional update (``state.zk_version`` expected) plus its
        ISR change notification. (ok, the state as it is now; None if unreadable)."""
        if not self.alive(sid):
            return False, None
        current = self.state(topic, partition)
        if current is None or current.zk_version != state.zk_version:
            return False, current
        path = zkdata.partition_state_path(topic, partition)
        version = self.zk.put(path, zkdata.encode_partition_state(state))
        self._notification_seq += 1
        self._create(f"{zkdata.ISR_CHANGE_PREFIX}{self._notification_seq:010d}",
                     zkdata.encode_partition_list([(topic, partition)]))
        return True, self.state(topic, partition)

    def drain_isr_notifications(self) -> list[tuple[str, int]]:
        found: set[tuple[str, int]] = set()
        for path in sorted(p for p in self.zk.nodes if p.startswith(zkdata.ISR_CHANGE_PREFIX)):
            found.update(zkdata.decode_partition_list(self.zk.nodes.pop(path)[0], path))
            self.czxid.pop(path, None)
        return sorted(found)
