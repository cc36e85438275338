"""The classic group's data: its states, members and the rules that read them (Kafka's
ClassicGroup and ClassicGroupMember). ``classic`` runs the protocol on them.
"""

import enum
import struct
from dataclasses import dataclass, field

from node.kafka.protocol import messages as m

from . import effects as E
from . import records

CONSUMER_PROTOCOL_TYPE = "consumer"


class State(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = State
_VALID_PREVIOUS = {
    S.EMPTY: {S.PREPARING_REBALANCE},
    S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
    S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
    S.STABLE: {S.COMPLETING_REBALANCE},
    S.DEAD: {S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD},
}


@dataclass
class Parked:
    token: object
    version: int


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join: Parked | None = None
    sync: Parked | None = None
    is_new: bool = False
    deadline_ms: int | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise AssertionError(f"member {self.member_id} lacks protocol {protocol}")

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass
class Group:
    group_id: str
    state: State = S.EMPTY
    previous_state: State = S.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    state_timestamp_ms: int | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)          # instance id -> member id
    pending_join: dict[str, int] = field(default_factory=dict)    # member id -> deadline
    pending_sync: set[str] = field(default_factory=set)
    new_member_added: bool = False
    join_deadline_ms: int | None = None
    initial_delay: tuple[int, int] | None = None    # (delay, remaining) of the initial wait
    sync_deadline_ms: int | None = None
    subscribed_topics: set[str] | None = None

    def transition(self, state: State, now_ms: int) -> None:
        assert self.state in _VALID_PREVIOUS[state], (self.group_id, self.state, state)
        self.previous_state, self.state, self.state_timestamp_ms = self.state, state, now_ms

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((mb.rebalance_timeout_ms for mb in self.members.values()), default=0)

    def awaiting_join(self) -> int:
        return sum(1 for mb in self.members.values() if mb.join is not None)

    def all_joined(self) -> bool:
        return self.awaiting_join() == len(self.members) and not self.pending_join

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        if self.state is S.EMPTY:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        return any(all(name in {p for p, _ in mb.protocols} for mb in self.members.values())
                   for name in names)

    def select_protocol(self) -> str:
        candidates = set.intersection(*({p for p, _ in mb.protocols}
                                        for mb in self.members.values()))
        votes: dict[str, int] = {}
        for mb in self.members.values():
            name = mb.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        return max(votes, key=lambda name: votes[name])   # first of the most voted

    def add(self, member: Member) -> None:
        assert member.member_id not in self.members
        if member.instance_id is not None:
            assert member.instance_id not in self.static, member.instance_id
            self.static[member.instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        assert self.protocol_type == member.protocol_type
        if self.leader is None:
            self.leader = member.member_id
        self.members[member.member_id] = member
        self.pending_join.pop(member.member_id, None)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None and member.instance_id is not None:
            self.static.pop(member.instance_id, None)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self.pending_join.pop(member_id, None)
        self.pending_sync.discard(member_id)

    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            existing = self.static.get(instance_id)
            if existing is None:
                return E.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return E.FENCED_INSTANCE_ID
        return E.NONE if member_id in self.members else E.UNKNOWN_MEMBER_ID

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for mb in self.members.values():
            parsed = subscription_topics(mb.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def is_subscribed(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_protocol()

    def metadata_value(self, now_ms: int) -> dict:
        """The GroupMetadataValue of the group as it stands (Kafka's newGroupMetadataRecord)."""
        members = [{"member_id": mb.member_id, "group_instance_id": mb.instance_id,
                    "client_id": mb.client_id, "client_host": mb.client_host,
                    "rebalance_timeout": mb.rebalance_timeout_ms,
                    "session_timeout": mb.session_timeout_ms,
                    "subscription": mb.metadata(self.protocol_name),
                    "assignment": mb.assignment} for mb in self.members.values()]
        stamp = self.state_timestamp_ms
        return {"protocol_type": self.protocol_type or "", "generation": self.generation,
                "protocol": self.protocol_name, "leader": self.leader,
                "current_state_timestamp": -1 if stamp is None else stamp, "members": members}


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscription_topics(data: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (read as v0, the prefix of every
    version: int16 version, int32 count, int16-sized strings); None if it is not one."""
    try:
        pos = 2
        count, = _I32.unpack_from(data, pos)
        pos += 4
        if count < 0 or count > len(data):
            return None
        topics = set()
        for _ in range(count):
            size, = _I16.unpack_from(data, pos)
            pos += 2
            if size < 0 or pos + size > len(data):
                return None
            topics.add(bytes(data[pos:pos + size]).decode("utf-8"))
            pos += size
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def describe(group_id: str, group: Group | None) -> dict:
    """DescribeGroups' DescribedGroup: a group that does not exist is Dead (v0-v5)."""
    out = records.defaults_of(m.DescribeGroupsResponse.DescribedGroup)
    out.update(group_id=group_id, group_state=S.DEAD.value)
    if group is None:
        return out
    stable = group.state is S.STABLE
    out.update(group_state=group.state.value, protocol_type=group.protocol_type or "",
               protocol_data=(group.protocol_name or "") if stable else "")
    out["members"] = [{"member_id": mb.member_id, "group_instance_id": mb.instance_id,
                       "client_id": mb.client_id, "client_host": mb.client_host,
                       "member_metadata": mb.metadata(group.protocol_name) if stable else b"",
                       "member_assignment": mb.assignment if stable else b""}
                      for mb in group.members.values()]
    return out


def listed(group: Group) -> dict:
    return {"group_id": group.group_id, "protocol_type": group.protocol_type or "",
            "group_state": group.state.value, "group_type": "classic"}
