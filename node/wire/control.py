"""The controller's requests to brokers, as records: the partition entries of
LeaderAndIsr, UpdateMetadata and StopReplica (sans-I/O).

The controller core builds these and sends ``to_wire()``; the broker reads the body's
``partitions`` with ``from_wire`` and works with named fields, so no module unpacks a
positional list by hand. On the wire an entry is still a msgpack list (the order below),
which keeps the format and the tests that speak it raw unchanged:

    LeaderAndIsr    [topic, partition, leader, leader_epoch, isr, zk_version, replicas, is_new,
                     elr, leader_recovery_state]   (the last two optional: an 8-field
                     entry means no ELR and a recovered leader)
    UpdateMetadata  [topic, partition, leader, leader_epoch, isr, zk_version, replicas,
                     offline_replicas]
    StopReplica     [topic, partition, leader_epoch]

``from_wire`` checks every field's type and the replica lists' shape and raises
``ProtocolError`` (never anything else) for a malformed entry. Whether a topic name is
safe to use as a directory is the storage's rule, checked by the broker.
"""
from __future__ import annotations

from dataclasses import dataclass

from node.wire.protocol import PARTITIONS_PER_REQUEST_MAX, ProtocolError

# Kafka's LeaderRecoveryState values (KIP-704).
LEADER_RECOVERED = 0
LEADER_RECOVERING = 1

# The longest replica list a controller request may carry (the broker's replica-state
# board holds this many per partition; node.broker.limits asserts they agree).
REPLICAS_MAX = 16


def _int(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"{name} must be an int")
    return value


def _ids(value, name: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > REPLICAS_MAX or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in value) or \
            len(set(value)) != len(value):
        raise ProtocolError(f"{name} must be a list of distinct broker ids "
                            f"(at most {REPLICAS_MAX})")
    return tuple(value)


def _head(entry, arity: int, what: str) -> tuple[str, int]:
    if not isinstance(entry, list) or len(entry) != arity:
        raise ProtocolError(f"{what}: every partition entry is a list of {arity} fields")
    topic, partition = entry[0], entry[1]
    if not isinstance(topic, str):
        raise ProtocolError(f"{what}: topic must be a string")
    if _int(partition, "partition") < 0:
        raise ProtocolError(f"{what}: partition {partition} < 0")
    return topic, partition


def _entries(raw, what: str) -> list:
    if not isinstance(raw, list):
        raise ProtocolError(f"{what}: partitions must be a list")
    if len(raw) > PARTITIONS_PER_REQUEST_MAX:
        raise ProtocolError(f"{what}: {len(raw)} partitions exceed "
                            f"{PARTITIONS_PER_REQUEST_MAX}")
    return raw


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartition:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    is_new: bool = False
    # KIP-966: the eligible leader replicas, and Kafka's LeaderRecoveryState (KIP-704):
    # RECOVERING when the controller elected this leader by unclean recovery, which a
    # replica that lost committed data may accept (it is then the longest log there is).
    elr: tuple[int, ...] = ()
    leader_recovery_state: int = 0

    def to_wire(self) -> list:
        head = [self.topic, self.partition, self.leader, self.leader_epoch, list(self.isr),
                self.zk_version, list(self.replicas), self.is_new]
        if not self.elr and self.leader_recovery_state == LEADER_RECOVERED:
            return head          # the 8-field form: no ELR, a recovered leader
        return head + [list(self.elr), self.leader_recovery_state]

    @classmethod
    def from_wire(cls, entry) -> "LeaderAndIsrPartition":
        arity = 10 if isinstance(entry, list) and len(entry) == 10 else 8
        topic, partition = _head(entry, arity, "LeaderAndIsr" if arity == 10 else
                                 "LeaderAndIsr (or 10 with elr, leader_recovery_state)")
        if not isinstance(entry[7], bool):
            raise ProtocolError("LeaderAndIsr: is_new must be a bool")
        elr, recovery = ((), 0) if arity == 8 else (_ids(entry[8], "elr"),
                                                     _int(entry[9], "leader_recovery_state"))
        if recovery not in (LEADER_RECOVERED, LEADER_RECOVERING):
            raise ProtocolError(f"LeaderAndIsr: leader_recovery_state {recovery} is not 0 or 1")
        return cls(topic, partition, _int(entry[2], "leader"),
                   _int(entry[3], "leader_epoch"), _ids(entry[4], "isr"),
                   _int(entry[5], "zk_version"), _ids(entry[6], "replicas"), entry[7],
                   elr, recovery)

    @classmethod
    def list_from_wire(cls, raw) -> list["LeaderAndIsrPartition"]:
        return [cls.from_wire(e) for e in _entries(raw, "LeaderAndIsr")]


@dataclass(frozen=True, slots=True)
class UpdateMetadataPartition:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()

    def to_wire(self) -> list:
        return [self.topic, self.partition, self.leader, self.leader_epoch, list(self.isr),
                self.zk_version, list(self.replicas), list(self.offline_replicas)]

    @classmethod
    def from_wire(cls, entry) -> "UpdateMetadataPartition":
        topic, partition = _head(entry, 8, "UpdateMetadata")
        return cls(topic, partition, _int(entry[2], "leader"),
                   _int(entry[3], "leader_epoch"), _ids(entry[4], "isr"),
                   _int(entry[5], "zk_version"), _ids(entry[6], "replicas"),
                   _ids(entry[7], "offline_replicas"))

    @classmethod
    def list_from_wire(cls, raw) -> list["UpdateMetadataPartition"]:
        return [cls.from_wire(e) for e in _entries(raw, "UpdateMetadata")]


@dataclass(frozen=True, slots=True)
class StopReplicaPartition:
    topic: str
    partition: int
    leader_epoch: int = -1  # -1: any epoch (a deletion)

    def to_wire(self) -> list:
        return [self.topic, self.partition, self.leader_epoch]

    @classmethod
    def from_wire(cls, entry) -> "StopReplicaPartition":
        topic, partition = _head(entry, 3, "StopReplica")
        return cls(topic, partition, _int(entry[2], "leader_epoch"))

    @classmethod
    def list_from_wire(cls, raw) -> list["StopReplicaPartition"]:
        return [cls.from_wire(e) for e in _entries(raw, "StopReplica")]
