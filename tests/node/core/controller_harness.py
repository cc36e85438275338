"""A deterministic driver for the pure controller core: an in-memory coordinator that
performs its ZkOps exactly as the shell does (versions, NoNode, NodeExists, fencing), and
a record of what it sent to brokers."""
from __future__ import annotations

from node.core import controller
from node.wire import zkdata
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
            return controller.ZkResult(error)
        return controller.ZkResult(error, current_data=node[0], current_version=node[1])

    def apply(self, op) -> controller.ZkResult:
        if self.fenced:
            return controller.ZkResult("Fenced")
        if isinstance(op, controller.ZkCreate):
            if op.path in self.nodes:
                return self._current(op.path, "NodeExists")
            self.nodes[op.path] = [op.data, 0]
            return controller.ZkResult(None, 0)
        if isinstance(op, controller.ZkSetData):
            node = self.nodes.get(op.path)
            if node is None:
                return controller.ZkResult("NoNode")
            if op.version != -1 and op.version != node[1]:
                return self._current(op.path, "BadVersion")
            node[0], node[1] = op.data, node[1] + 1
            return controller.ZkResult(None, node[1])
        if isinstance(op, controller.ZkDelete):
            node = self.nodes.get(op.path)
            if node is None:
                return controller.ZkResult("NoNode")
            if op.version != -1 and op.version != node[1]:
                return controller.ZkResult("BadVersion", current_data=node[0],
                                           current_version=node[1])
            children = [p for p in self.nodes if p.startswith(op.path + "/")]
            if children and not op.recursive:
                return controller.ZkResult("NotEmpty")
            for p in children + [op.path]:
                del self.nodes[p]
            return controller.ZkResult(None)
        raise TypeError(op)

    def state(self, topic, partition) -> zkdata.PartitionState:
        data, version = self.get(zkdata.partition_state_path(topic, partition))
        return zkdata.decode_partition_state(data, version)


def broker(i: int, epoch: int | None = None, rack=None) -> controller.Broker:
    return controller.Broker(i, "127.0.0.1", 9000 + i, rack, 100 + i if epoch is None else epoch)


class Harness:
    def __init__(self, config: controller.ControllerConfig = controller.ControllerConfig(),
                 broker_id: int = 0, epoch: int = 1) -> None:
        self.zk = MemoryZk()
        self.core = controller.Controller(broker_id, config)
        self.epoch = epoch
        self.sent: list[controller.SendRequest] = []
        self.logs: list[controller.LogLine] = []
        self.replies: list[controller.ReplyControlledShutdown] = []
        self.resigned: list[controller.Resign] = []
        self.zk_ops: list = []
        self.effects: list = []       # everything, in order
        self.hold_tags = False        # keep tagged requests unanswered

    # -- setup
    def add_topic(self, name: str, assignment: dict[int, list[int]], config=None) -> None:
        self.zk.put(zkdata.topic_path(name), zkdata.encode_assignment(assignment))
        if config is not None:
            self.zk.put(zkdata.topic_config_path(name), zkdata.encode_topic_config(config))

    def topic_snapshot(self, name: str) -> controller.TopicSnapshot:
        data, version = self.zk.get(zkdata.topic_path(name))
        cfg = self.zk.get(zkdata.topic_config_path(name))
        return controller.TopicSnapshot(name, {p: tuple(r) for p, r in
                                      zkdata.decode_assignment(name, data).items()},
                               version, zkdata.decode_topic_config(name, cfg[0]) if cfg else {})

    def snapshot(self, brokers, now_ms: int = 0, **extra) -> controller.BecomeController:
        topics = sorted({p.split("/")[3] for p in self.zk.nodes
                         if p.startswith("/brokers/topics/") and p.count("/") == 3})
        states = {}
        for path, (data, version) in sorted(self.zk.nodes.items()):
            if path.endswith("/state"):
                parts = path.split("/")
                states[(parts[3], int(parts[5]))] = zkdata.decode_partition_state(data, version)
        return controller.BecomeController(self.epoch, tuple(brokers),
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
                if isinstance(e, controller.ZkOps):
                    self.zk_ops.append(e)
                    queue.append(controller.ZkOpsDone(
                        e.op_id, tuple(self.zk.apply(op) for op in e.ops)))
                elif isinstance(e, controller.SendRequest):
                    self.sent.append(e)
                    if e.tag is not None and not self.hold_tags:
                        queue.append(controller.BrokerResponse(e.tag, self.ok_response(e)))
                elif isinstance(e, controller.LogLine):
                    self.logs.append(e)
                elif isinstance(e, controller.ReplyControlledShutdown):
                    self.replies.append(e)
                elif isinstance(e, controller.Resign):
                    self.resigned.append(e)
        return produced

    @staticmethod
    def ok_response(req: controller.SendRequest) -> dict:
        return {"error": 0, "partitions": [[t, p, 0] for t, p, *_ in req.body["partitions"]]}

    def brokers_changed(self, brokers):
        return self.run(controller.BrokersChanged(tuple(brokers)))

    def isr_changed(self, topic, partition, isr, leader=None):
        """A leader rewrites its ISR (same leader epoch), as the replication core does."""
        state = self.zk.state(topic, partition)
        new = zkdata.PartitionState(state.leader if leader is None else leader, state.leader_epoch,
                               tuple(isr), state.controller_epoch)
        version = self.zk.put(zkdata.partition_state_path(topic, partition),
                              zkdata.encode_partition_state(new))
        return self.run(controller.IsrChanged({(topic, partition): zkdata.PartitionState(
            new.leader, new.leader_epoch, new.isr, new.controller_epoch, version)}))

    # -- looking at the output
    def clear(self) -> None:
        self.sent.clear()
        self.logs.clear()
        self.zk_ops.clear()

    def requests(self, api_key: ApiKey,
                 broker_id: int | None = None) -> list[controller.SendRequest]:
        return [s for s in self.sent if s.api_key == api_key and
                (broker_id is None or s.broker_id == broker_id)]

    def leader_and_isr_entries(self, broker_id: int) -> list[list]:
        return [e for s in self.requests(ApiKey.LEADER_AND_ISR, broker_id)
                for e in s.body["partitions"]]

    def log_text(self) -> str:
        return "\n".join(f"{line.level} {line.message}" for line in self.logs)
