"""Kafka's znode layout (ZooKeeper mode) and the JSON each znode holds: paths and codecs.

Pure: no client here, only names and (de)serialisation, shared by the broker shell, the
controller shell and the tools, so every writer and reader agrees on one format.

    /brokers/ids/N                            ephemeral, broker registration
    /brokers/topics/T                         replica assignment of T's partitions
    /brokers/topics/T/partitions/P/state      leader, leader_epoch, isr, controller_epoch
                                              (its znode version is the conditional-
                                              update version: "zk_version")
    /controller                               ephemeral, {"brokerid": N}
    /controller_epoch                         "E"
    /admin/reassign_partitions                {"partitions": [{topic, partition, replicas}]}
    /admin/preferred_replica_election         {"partitions": [{topic, partition}]}
                                              (+ "election_type": "unclean", our
                                              extension for ElectLeaders type unclean)
    /admin/delete_topics/T                    empty
    /isr_change_notification/isr_change_NNNN  sequential, {"partitions": [...]}
    /config/topics/T                          {"version": 1, "config": {key: value}}

Decoders raise ``ZkDataError`` for anything malformed (a znode another writer garbled
must not crash a broker).
"""
from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from dataclasses import dataclass

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
ADMIN = "/admin"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "/isr_change_notification/isr_change_"
CONFIG_TOPICS = "/config/topics"
# A broker whose log directory failed writes a sequential child here (Kafka's
# LogDirEventNotification; ours also names the partitions that went offline).
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "/log_dir_event_notification/log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1

# Created (empty) by whoever starts first; every broker ensures them at start-up.
PERSISTENT_PATHS = (BROKER_IDS, BROKER_TOPICS, ADMIN, DELETE_TOPICS,
                    ISR_CHANGE_NOTIFICATION, CONFIG_TOPICS, LOG_DIR_EVENT_NOTIFICATION)


class ZkDataError(Exception):
    """A znode holds something that is not the JSON this layout expects."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def _load(data: bytes, what: str):
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ZkDataError(f"{what}: not JSON ({e})") from None
    return value


def _dump(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _int_list(value, what: str) -> list[int]:
    if not isinstance(value, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise ZkDataError(f"{what}: expected a list of ints, got {value!r}")
    return list(value)


# ------------------------------------------------------------------ brokers

@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    timestamp_ms: int = 0
    # Ours: replicas this broker was in the ISR of but lost committed data of (its log dir
    # is new or was wiped, or its log ends below its checkpointed HW after a power
    # failure): not to be elected until they have caught up (KIP-966's idea).
    lost_replicas: tuple[tuple[str, int], ...] = ()
    # Whether the broker's previous run ended with a clean shutdown (Kafka's
    # .kafka_cleanshutdown; KRaft tells it by the previous broker epoch). A broker back
    # from an unclean one may have lost its unflushed tail: it leaves every ELR (KIP-966).
    clean_shutdown: bool = True
    # Every listener but the native one, as Kafka registers them: (name, host, port),
    # e.g. ("KAFKA", "127.0.0.1", 9094) for the Kafka-protocol listener.
    other_endpoints: tuple[tuple[str, str, int], ...] = ()

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    def listener(self, name: str) -> tuple[str, int] | None:
        """(host, port) of the listener ``name`` (PLAINTEXT: the native one)."""
        if name == "PLAINTEXT":
            return self.host, self.port
        return next(((h, p) for n, h, p in self.other_endpoints if n == name), None)


def encode_broker(info: BrokerInfo) -> bytes:
    # Kafka's registration: "endpoints" lists every listener, host/port the PLAINTEXT one,
    # and every listener here is plaintext.
    endpoints = [("PLAINTEXT", info.host, info.port), *info.other_endpoints]
    value = {"version": 4, "host": info.host, "port": info.port, "jmx_port": -1,
             "endpoints": [f"{n}://{h}:{p}" for n, h, p in endpoints],
             "listener_security_protocol_map": {n: "PLAINTEXT" for n, _, _ in endpoints},
             "rack": info.rack,
             "timestamp": str(info.timestamp_ms or int(time.time() * 1000))}
    if info.lost_replicas:
        value["lost_replicas"] = [[t, p] for t, p in sorted(info.lost_replicas)]
    if not info.clean_shutdown:
        value["clean_shutdown"] = False
    return _dump(value)


def decode_broker(broker_id: int, data: bytes) -> BrokerInfo:
    value = _load(data, f"broker {broker_id}")
    try:
        host, port = value["host"], value["port"]
        if not isinstance(host, str) or not isinstance(port, int):
            raise TypeError
        lost = tuple((str(t), int(p)) for t, p in value.get("lost_replicas", []))
        clean = value.get("clean_shutdown", True)
        if not isinstance(clean, bool):
            raise TypeError
        others = []
        for text in value.get("endpoints", []):
            name, sep, address = str(text).partition("://")
            ep_host, _, ep_port = address.rpartition(":")
            if not sep or not ep_port.isdigit():
                raise ValueError
            if name != "PLAINTEXT":
                others.append((name, ep_host, int(ep_port)))
        return BrokerInfo(broker_id, host, port, value.get("rack"),
                          int(value.get("timestamp", 0)), lost, clean, tuple(others))
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"broker {broker_id}: bad registration {value!r}") from None


# ------------------------------------------------------------------ topics

def encode_assignment(assignment: dict[int, list[int]],
                      adding: dict[int, list[int]] | None = None,
                      removing: dict[int, list[int]] | None = None,
                      topic_id: str | None = None) -> bytes:
    value = {"version": 2,
             "partitions": {str(p): list(r) for p, r in sorted(assignment.items())},
             "adding_replicas": {str(p): list(r) for p, r in (adding or {}).items()},
             "removing_replicas": {str(p): list(r) for p, r in (removing or {}).items()}}
    if topic_id is not None:    # Kafka's version 3 (KIP-516)
        value["version"] = 3
        value["topic_id"] = topic_id
    return _dump(value)


def new_topic_id() -> str:
    """A fresh topic id (KIP-516) in Kafka's text form."""
    return topic_id_text(uuid.uuid4())


def topic_id_text(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def topic_id_uuid(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString; ValueError for anything else."""
    if not isinstance(text, str) or len(text) != 22:
        raise ValueError(f"not a topic id: {text!r}")
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    except (ValueError, TypeError) as e:
        raise ValueError(f"not a topic id: {text!r} ({e})") from None


def decode_topic_id(topic: str, data: bytes, czxid: int) -> str:
    """The topic's id (KIP-516): the znode's "topic_id" (written with the topic, as Kafka
    does). A topic written without one (by an older writer or a test) gets an id derived
    from its name and the znode's creation zxid: the same on every broker and controller,
    and a new one if the topic is deleted and created again."""
    value = _load(data, f"topic {topic}")
    text = value.get("topic_id") if isinstance(value, dict) else None
    if text is not None:
        try:
            topic_id_uuid(text)
            return text
        except ValueError:
            raise ZkDataError(f"topic {topic}: bad topic_id {text!r}") from None
    digest = hashlib.sha256(f"{topic}\0{czxid}".encode()).digest()[:16]
    return topic_id_text(uuid.UUID(bytes=digest))


def decode_assignment(topic: str, data: bytes) -> dict[int, list[int]]:
    """partition -> replicas (the first is the preferred leader)."""
    value = _load(data, f"topic {topic}")
    try:
        parts = value["partitions"]
        return {int(p): _int_list(r, f"topic {topic} partition {p}") for p, r in parts.items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ZkDataError(f"topic {topic}: bad assignment {value!r}") from None


@dataclass(frozen=True)
class PartitionState:
    """Contents of /brokers/topics/T/partitions/P/state (plus the znode version)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1
    # KIP-966's eligible leader replicas: replicas that left the ISR while it was below
    # min.insync.replicas, so the HW has not passed their log end since (not written
    # when empty, so Kafka's own ZooKeeper-mode layout is unchanged).
    elr: tuple[int, ...] = ()


def encode_partition_state(state: PartitionState) -> bytes:
    value = {"version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
             "isr": list(state.isr), "controller_epoch": state.controller_epoch}
    if state.elr:
        value["eligible_leader_replicas"] = list(state.elr)
    return _dump(value)


def decode_partition_state(data: bytes, zk_version: int = -1, what: str = "state"
                           ) -> PartitionState:
    value = _load(data, what)
    try:
        return PartitionState(int(value["leader"]), int(value["leader_epoch"]),
                              tuple(_int_list(value["isr"], what)),
                              int(value["controller_epoch"]), zk_version,
                              tuple(_int_list(value.get("eligible_leader_replicas", []),
                                              what)))
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"{what}: bad partition state {value!r}") from None


# ------------------------------------------------------------------ controller

def encode_controller(broker_id: int, timestamp_ms: int | None = None) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id,
                  "timestamp": str(timestamp_ms or int(time.time() * 1000))})


def decode_controller(data: bytes) -> int:
    value = _load(data, "controller")
    try:
        return int(value["brokerid"])
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"controller: bad value {value!r}") from None


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode())
    except (UnicodeDecodeError, ValueError):
        raise ZkDataError(f"controller_epoch: bad value {data!r}") from None


# ------------------------------------------------------------------ admin znodes

def encode_partition_list(partitions, **extra) -> bytes:
    return _dump({"version": 1, **extra,
                  "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def decode_partition_list(data: bytes, what: str) -> list[tuple[str, int]]:
    value = _load(data, what)
    try:
        return [(str(e["topic"]), int(e["partition"])) for e in value["partitions"]]
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"{what}: bad partition list {value!r}") from None


def encode_log_dir_event(broker_id: int, partitions) -> bytes:
    """Kafka's {"version":1,"broker":N,"event":1}, plus the partitions now offline."""
    return encode_partition_list(sorted(partitions), broker=broker_id,
                                 event=LOG_DIR_FAILURE_EVENT)


def decode_log_dir_event(data: bytes, what: str) -> tuple[int, list[tuple[str, int]]]:
    """(broker id, offline partitions) of a log dir event notification (a notification
    without partitions, as Kafka writes it, names none: every replica is asked)."""
    value = _load(data, what)
    if not isinstance(value, dict) or not isinstance(value.get("broker"), int) or \
            isinstance(value.get("broker"), bool):
        raise ZkDataError(f"{what}: no broker id in {value!r}")
    partitions = decode_partition_list(data, what) if "partitions" in value else []
    return value["broker"], partitions


def decode_election_type(data: bytes) -> str:
    """"preferred" (Kafka's znode) or "unclean" (our extension)."""
    value = _load(data, "preferred_replica_election")
    kind = value.get("election_type", "preferred") if isinstance(value, dict) else None
    if kind not in ("preferred", "unclean"):
        raise ZkDataError(f"preferred_replica_election: bad election_type {kind!r}")
    return kind


def encode_reassignment(moves: dict[tuple[str, int], list[int]]) -> bytes:
    return _dump({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(moves.items())]})


def decode_reassignment(data: bytes) -> dict[tuple[str, int], list[int]]:
    value = _load(data, "reassign_partitions")
    try:
        return {(str(e["topic"]), int(e["partition"])):
                _int_list(e["replicas"], "reassign_partitions") for e in value["partitions"]}
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"reassign_partitions: bad value {value!r}") from None


def encode_topic_config(config: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": {k: str(v) for k, v in config.items()}})


def decode_topic_config(topic: str, data: bytes) -> dict[str, str]:
    if not data:
        return {}
    value = _load(data, f"config of {topic}")
    try:
        return {str(k): str(v) for k, v in value["config"].items()}
    except (KeyError, TypeError, AttributeError):
        raise ZkDataError(f"config of {topic}: bad value {value!r}") from None
