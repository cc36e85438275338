"""What the controller core is fed and what it returns: its events and effects (small
frozen dataclasses), its configuration, the brokers and topics it is told about, and
its limits. Nothing here decides anything; ``core.Controller.step`` does.

Events (``Controller.step(event) -> list[Effect]``):
    BecomeController      this broker won /controller; a snapshot of the coordinator
    BrokersChanged        the full set of registered brokers (/brokers/ids)
    TopicChanged          a topic znode appeared or its data changed
    TopicRemoved          a topic znode vanished (not by this controller)
    TopicConfigChanged    /config/topics/T
    IsrChanged            partition states re-read after /isr_change_notification
    ElectionRequested     /admin/preferred_replica_election (preferred | unclean)
    ReassignmentRequested /admin/reassign_partitions (its whole content and version)
    TopicDeletionRequested children of /admin/delete_topics
    ControlledShutdownRequested  a broker's ControlledShutdown request
    BrokerResponse        the answer (None = timed out) to a SendRequest with a tag
    ZkOpsDone             the results of a ZkOps effect, one per op, in order
    Tick                  the clock (auto leader rebalance)

Effects, to be performed in the order given:
    ZkOps(op_id, ops)     ops = ZkCreate | ZkSetData | ZkDelete. Each op runs on its own
                          (not atomically with the others) and fenced: a multi with a
                          check of /controller_epoch's version. Report every op's
                          outcome with ZkOpsDone(op_id, results) — before the core is
                          told anything that happened after the ops ran; a failed create
                          or setData reports the znode's current data and version.
    SendRequest           send to a broker (LeaderAndIsr, UpdateMetadata, StopReplica);
                          per broker in the order given. Report BrokerResponse only when
                          ``tag`` is not None.
    ReplyControlledShutdown  answer a ControlledShutdownRequested
    LogLine               a line for the broker's log
    Resign                this core is no longer the controller (fenced, or the
                          coordinator refused a write); it ignores every later event.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from node.wire.zkdata import PartitionState

# ------------------------------------------------------------------ limits
STATE_WRITE_ATTEMPTS_MAX = 5        # re-decide after a version conflict at most this often
DELETE_STOP_REPLICA_ATTEMPTS_MAX = 10
FIRST_REBALANCE_CHECK_DELAY_MS = 5_000   # Kafka: first auto-rebalance check 5 s after failover
NO_LEADER = -1
LEADER_DURING_DELETE = -2           # Kafka's LeaderAndIsr.LeaderDuringDelete

TopicPartition = tuple[str, int]


# ------------------------------------------------------------------ configuration

@dataclass(frozen=True)
class ControllerConfig:
    """The broker configs the controller reads (Kafka's keys, dots -> underscores)."""

    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    min_insync_replicas: int = 1
    eligible_leader_replicas: bool = False       # KIP-966 (brokers turn it on)
    unclean_recovery_strategy: str = "balanced"  # or "none"
    unclean_recovery_timeout_ms: int = 300_000

    def __post_init__(self):
        assert self.leader_imbalance_check_interval_seconds > 0
        assert 0 <= self.leader_imbalance_per_broker_percentage <= 100
        assert self.min_insync_replicas >= 1
        assert self.unclean_recovery_strategy in ("balanced", "none")
        assert self.unclean_recovery_timeout_ms > 0

    @classmethod
    def from_broker_config(cls, config) -> "ControllerConfig":
        default = cls()
        return cls(**{name: getattr(config, name, getattr(default, name))
                      for name in cls.__dataclass_fields__})


def _is_true(value) -> bool:
    return str(value).strip().lower() == "true"


# ------------------------------------------------------------------ data

@dataclass(frozen=True, order=True)
class Broker:
    """A registered broker; ``epoch`` is the czxid of its /brokers/ids/N znode (Kafka's
    broker epoch: a bounced broker comes back with a new one)."""

    broker_id: int
    host: str = "127.0.0.1"
    port: int = 0
    rack: str | None = None
    epoch: int = 0
    # Replicas whose data this broker lost (its registration says so: the log dir is new
    # or was wiped): never elected until they are back in an ISR (KIP-966's intent).
    lost: frozenset = frozenset()
    clean_shutdown: bool = True    # its previous run ended cleanly (else: leaves ELRs)
    # Its other listeners (name, host, port), e.g. the Kafka-protocol one, told to every
    # broker with UpdateMetadata so Metadata answers name them.
    other_endpoints: tuple = ()

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port}"


@dataclass(frozen=True)
class TopicSnapshot:
    """A topic znode: partition -> replicas, its version, and /config/topics/T."""

    name: str
    assignment: Mapping[int, tuple[int, ...]]
    zk_version: int = 0
    config: Mapping[str, str] = field(default_factory=dict)
    topic_id: str | None = None     # KIP-516, Kafka's text form (zkdata.topic_id_text)


# ------------------------------------------------------------------ events

@dataclass(frozen=True)
class BecomeController:
    epoch: int
    brokers: tuple[Broker, ...]
    topics: tuple[TopicSnapshot, ...]
    states: Mapping[TopicPartition, PartitionState]       # with zk_version
    reassignments: Mapping[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    reassignments_zk_version: int = -1                    # -1: no znode
    election: "ElectionRequested | None" = None
    topics_to_delete: tuple[str, ...] = ()
    now_ms: int = 0


@dataclass(frozen=True)
class BrokersChanged:
    brokers: tuple[Broker, ...]


@dataclass(frozen=True)
class TopicChanged:
    topic: TopicSnapshot


@dataclass(frozen=True)
class TopicRemoved:
    topic: str


@dataclass(frozen=True)
class TopicConfigChanged:
    topic: str
    config: Mapping[str, str]


@dataclass(frozen=True)
class ReplicasOffline:
    """A broker's log directory failed: its replicas of ``partitions`` are offline until
    it restarts (Kafka's LogDirEventNotification, KIP-112)."""
    broker_id: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class IsrChanged:
    states: Mapping[TopicPartition, PartitionState | None]   # None: the znode is gone


@dataclass(frozen=True)
class ElectionRequested:
    partitions: tuple[TopicPartition, ...] | None     # None: every partition
    election_type: str = "preferred"                   # or "unclean"
    zk_version: int = -1                               # of the admin znode (deleted after)

    def __post_init__(self):
        assert self.election_type in ("preferred", "unclean"), self.election_type


@dataclass(frozen=True)
class ReassignmentRequested:
    moves: Mapping[TopicPartition, tuple[int, ...]]
    zk_version: int


@dataclass(frozen=True)
class TopicDeletionRequested:
    topics: tuple[str, ...]


@dataclass(frozen=True)
class ControlledShutdownRequested:
    request_id: object
    broker_id: int
    broker_epoch: int = -1         # -1: not checked


@dataclass(frozen=True)
class BrokerResponse:
    tag: int
    body: dict | None              # None: no answer within request.timeout.ms


@dataclass(frozen=True)
class ZkResult:
    """Outcome of one op. ``error``: None, "BadVersion", "NoNode", "NodeExists",
    "NotEmpty", "Fenced" (the /controller_epoch check failed) or another name (any other
    failure: the core resigns). ``version``: the znode's version after a successful
    create/setData. ``current_*``: the znode as it is after a failed create/setData
    (None: it does not exist)."""

    error: str | None = None
    version: int = -1
    current_data: bytes | None = None
    current_version: int = -1


@dataclass(frozen=True)
class ZkOpsDone:
    op_id: int
    results: tuple[ZkResult, ...]


@dataclass(frozen=True)
class Tick:
    now_ms: int


Event = (BecomeController | BrokersChanged | TopicChanged | TopicRemoved |
         TopicConfigChanged | IsrChanged | ReplicasOffline | ElectionRequested |
         ReassignmentRequested |
         TopicDeletionRequested | ControlledShutdownRequested | BrokerResponse | ZkOpsDone |
         Tick)


# ------------------------------------------------------------------ effects

@dataclass(frozen=True)
class ZkCreate:
    path: str
    data: bytes
    makepath: bool = True          # create missing parents first (outside the fence)


@dataclass(frozen=True)
class ZkSetData:
    path: str
    data: bytes
    version: int                   # expected version (-1: any)


@dataclass(frozen=True)
class ZkDelete:
    path: str
    version: int = -1
    recursive: bool = False


ZkOp = ZkCreate | ZkSetData | ZkDelete


@dataclass(frozen=True)
class ZkOps:
    op_id: int
    ops: tuple[ZkOp, ...]


@dataclass(frozen=True)
class SendRequest:
    broker_id: int
    endpoint: str
    api_key: int
    body: dict
    tag: int | None = None


@dataclass(frozen=True)
class ReplyControlledShutdown:
    request_id: object
    body: dict


@dataclass(frozen=True)
class LogLine:
    level: str                     # "INFO" | "WARN" | "ERROR"
    message: str


@dataclass(frozen=True)
class Resign:
    reason: str


Effect = ZkOps | SendRequest | ReplyControlledShutdown | LogLine | Resign
