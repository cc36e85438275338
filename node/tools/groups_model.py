"""What ``minikafka consumer-groups`` shows of a group, whichever kind it is: the
brokers' groups (classic and KIP-848 "consumer", ``node.tools.groups_broker``) and the
Kafka paper's ZooKeeper groups (``node.tools.groups_zookeeper``) are read into these,
and the tool prints them with Kafka's columns."""
from __future__ import annotations

from dataclasses import dataclass, field

TP = tuple[str, int]

# The group types Kafka's tool prints (GroupType.toString), and ours.
CLASSIC, CONSUMER, ZOOKEEPER = "Classic", "Consumer", "ZooKeeper"
# States in which a group has no live member (offsets may be reset, the group deleted).
INACTIVE_STATES = frozenset({"Empty", "Dead"})


@dataclass(frozen=True)
class MemberInfo:
    member_id: str
    host: str
    client_id: str
    assignment: tuple[TP, ...] = ()
    instance_id: str | None = None
    member_epoch: int | None = None              # KIP-848 members
    target: tuple[TP, ...] | None = None         # KIP-848: the coordinator's target


@dataclass
class GroupInfo:
    group_id: str
    type: str                      # CLASSIC, CONSUMER or ZOOKEEPER
    state: str                     # Kafka's state names (Empty, Stable, ...; Dead: none)
    coordinator: str               # "host:port  (id)" as Kafka's tool prints it
    assignment_strategy: str
    members: list[MemberInfo] = field(default_factory=list)
    offsets: dict[TP, int] = field(default_factory=dict)     # committed
    leader_epochs: dict[TP, int] = field(default_factory=dict)   # of the commits
    group_epoch: int | None = None                            # KIP-848 groups
    assignment_epoch: int | None = None

    @property
    def exists(self) -> bool:
        return self.state != "Dead"

    @property
    def inactive(self) -> bool:
        return self.state in INACTIVE_STATES

    def owners(self) -> dict[TP, MemberInfo]:
        return {tp: m for m in self.members for tp in m.assignment}


@dataclass(frozen=True)
class Listed:
    """One line of ``--list``."""
    group_id: str
    type: str
    state: str
