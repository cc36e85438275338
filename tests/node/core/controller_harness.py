"""A deterministic driver for the pure controller core: an in-memory coordinator that
performs its ZkOps exactly as the shell does (versions, NoNode, NodeExists, fencing), and
a record of what it sent to brokers."""
from __future__ import annotations

from node.core import controller as C
from node.wire import zkdata as Z
from node.wire.protocol import ApiKey


class MemoryZk:
    """path -> [data, version]; children are implied by paths."""

    def __init__(self) -> None:
        self.nodes: dict[str, list] = {}
        self.fenced = False

    def get(self, path):
        node = self.nodes.get(path)
        return None if node is None else (node[0], node[1])

    def put(self, path: str, data: bytes) -> int:
        node = self.nodes.get(path)
        if node is None:
            self.nodes[path] = [data, 0]
            return 0
        node[0], node[1] = data, node[1] + 1
        return node[1]

    def _current(self, path, error):
        node = self.nodes.get(path)
        if node is None:
            return C.ZkResult(error)
        return C.ZkResult(error, current_data=node[0], current_version=node[1])

    def apply(self, op) -> C.ZkResult:
        if self.fenced:
            return C.ZkResult("Fenced")
        if isinstance(op, C.ZkCreate):
            if op.path in self.nodes:
                return self._current(op.path, "NodeExists")
            self.nodes[op.path] = [op.data, 0]
            return C.ZkResult(None, 0)
        if isinstance(op, C.ZkSetData):
            node = self.nodes.get(op.path)
            if node is None:
                return C.ZkResult("NoNode")
            if op.version != -1 and op.version != node[1]:
                return self._current(op.path, "BadVersion")
            node[0], node[1] = op.data, node[1] + 1
            return C.ZkResult(None, node[1])
        if isinstance(op, C.ZkDelete):
            node = self.nodes.get(op.path)
            if node is None:
                return C.ZkResult("NoNode")
            if op.version != -1 and op.version != node[1]:
                return C.ZkResult("BadVersion", current_data=node[0], current_version=node[1])
            children = [p for p in self.nodes if p.startswith(op.path + "/")]
            if children and not op.recursive:
                return C.ZkResult("NotEmpty")
            for p in children + [op.path]:
                del self.nodes[p]
            return C.ZkResult(None)
        raise TypeError(op)

    def state(self, topic, partition) -> Z.PartitionState:
        data, version = self.get(Z.partition_state_path(topic, partition))
        return Z.decode_partition_state(data, version)


def broker(i: int, epoch: int | None = None, rack=None) -> C.Broker:
    return C.Broker(i, "127.0.0.1", 9000 + i, rack, 100 + i if epoch is None else epoch)


class Harness:
    def __init__(self, config: C.ControllerConfig = C.ControllerConfig(), broker_id: int = 0,
                 epoch: int = 1) -> None:
        self.zk = MemoryZk()
        self.core = C.Controller(broker_id, config)
        self.epoch = epoch
        self.sent: list[C.SendRequest] = []
        self.logs: list[C.LogLine] = []
        self.replies: list[C.ReplyControlledShutdown] = []
        self.resigned: list[C.Resign] = []
        self.zk_ops: list = []
        self.effects: list = []       # everything, in order
        self.hold_tags = False        # keep tagged requests unanswered

    # -- setup
    def add_topic(self, name: str, assignment: dict[int, list[int]], config=None) -> None:
        self.zk.put(Z.topic_path(name), Z.encode_assignment(assignment))
        if config is not None:
            self.zk.put(Z.topic_config_path(name), Z.encode_topic_config(config))

    def topic_snapshot(self, name: str) -> C.TopicSnapshot:
        data, version = self.zk.get(Z.topic_path(name))
        cfg = self.zk.get(Z.topic_config_path(name))
        return C.TopicSnapshot(name, {p: tuple(r) for p, r in
                                      Z.decode_assignment(name, data).items()},
                               version, Z.decode_topic_config(name, cfg[0]) if cfg else {})

    def snapshot(self, brokers, now_ms: int = 0, **extra) -> C.BecomeController:
        topics = sorted({p.split("/")[3] for p in self.zk.nodes
                         if p.startswith("/brokers/topics/") and p.count("/") == 3})
        states = {}
        for path, (data, version) in sorted(self.zk.nodes.items()):
            if path.endswith("/state"):
                parts = path.split("/")
                states[(parts[3], int(parts[5]))] = Z.decode_partition_state(data, version)
        return C.BecomeController(self.epoch, tuple(brokers),
                                  tuple(self.topic_snapshot(t) for t in topics), states,
                                  now_ms=now_ms, **extra)

    def start(self, brokers, now_ms: int = 0, **extra):
        return self.run(self.snapshot(brokers, now_ms, **extra))

    # -- driving
    def run(self, event) -> list:
        """Step the core, perform its effects like the shell does; return all effects."""
        queue = [event]
        produced = []
        while queue:
            effects = self.core.step(queue.pop(0))
            produced += effects
            self.effects += effects
            for e in effects:
                if isinstance(e, C.ZkOps):
                    self.zk_ops.append(e)
                    queue.append(C.ZkOpsDone(e.op_id, tuple(self.zk.apply(op) for op in e.ops)))
                elif isinstance(e, C.SendRequest):
                    self.sent.append(e)
                    if e.tag is not None and not self.hold_tags:
                        queue.append(C.BrokerResponse(e.tag, self.ok_response(e)))
                elif isinstance(e, C.LogLine):
                    self.logs.append(e)
                elif isinstance(e, C.ReplyControlledShutdown):
                    self.replies.append(e)
                elif isinstance(e, C.Resign):
                    self.resigned.append(e)
        return produced

    @staticmethod
    def ok_response(req: C.SendRequest) -> dict:
        return {"error": 0, "partitions": [[t, p, 0] for t, p, *_ in req.body["partitions"]]}

    def brokers_changed(self, brokers):
        return self.run(C.BrokersChanged(tuple(brokers)))

    def isr_changed(self, topic, partition, isr, leader=None):
        """A leader rewrites its ISR (same leader epoch), as the replication core does."""
        state = self.zk.state(topic, partition)
        new = Z.PartitionState(state.leader if leader is None else leader, state.leader_epoch,
                               tuple(isr), state.controller_epoch)
        version = self.zk.put(Z.partition_state_path(topic, partition),
                              Z.encode_partition_state(new))
        return self.run(C.IsrChanged({(topic, partition): Z.PartitionState(
            new.leader, new.leader_epoch, new.isr, new.controller_epoch, version)}))

    # -- looking at the output
    def clear(self) -> None:
        self.sent.clear()
        self.logs.clear()
        self.zk_ops.clear()

    def requests(self, api_key: ApiKey, broker_id: int | None = None) -> list[C.SendRequest]:
        return [s for s in self.sent if s.api_key == api_key and
                (broker_id is None or s.broker_id == broker_id)]

    def leader_and_isr_entries(self, broker_id: int) -> list[list]:
        return [e for s in self.requests(ApiKey.LEADER_AND_ISR, broker_id)
                for e in s.body["partitions"]]

    def log_text(self) -> str:
        return "\n".join(f"{line.level} {line.message}" for line in self.logs)
