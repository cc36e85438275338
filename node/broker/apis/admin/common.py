"""What the admin handlers share: their limits, their reads of the coordinator, and the
checks of a request body's fields (a malformed field raises ``ProtocolError``, which
the broker answers INVALID_REQUEST).
"""
from __future__ import annotations

import json

from kazoo.exceptions import NoNodeError

from node.broker.coordinator import GuardedZk
from node.wire.errors import ErrorCode
from node.wire import protocol
from node.wire.protocol import ProtocolError
from node.wire import zkdata

# Limits
TOPICS_PER_REQUEST_MAX = 10_000
PARTITIONS_PER_TOPIC_MAX = 100_000
REPLICATION_FACTOR_MAX = 1_000
CONFIG_ENTRIES_MAX = 1_000
WRITE_ATTEMPTS_MAX = 10          # read-modify-write retries on a version conflict


# ------------------------------------------------------------------ coordinator reads

def _live_brokers(zk: GuardedZk) -> dict[int, str | None]:
    """broker id -> rack, of the registered brokers."""
    out: dict[int, str | None] = {}
    try:
        children = zk.get_children(zkdata.BROKER_IDS)
    except NoNodeError:
        return out
    for child in children:
        try:
            broker_id = int(child)
            data = zk.get(zkdata.broker_path(broker_id))[0]
            out[broker_id] = zkdata.decode_broker(broker_id, data).rack
        except (ValueError, NoNodeError, zkdata.ZkDataError):
            continue
    return out


def _topics(zk: GuardedZk) -> list[str]:
    try:
        return sorted(zk.get_children(zkdata.BROKER_TOPICS))
    except NoNodeError:
        return []


def _read_topic(zk: GuardedZk, topic: str):
    """(assignment, raw JSON dict, version) or None."""
    try:
        data, stat = zk.get(zkdata.topic_path(topic))
    except NoNodeError:
        return None
    try:
        assignment = zkdata.decode_assignment(topic, data)
        raw = json.loads(data.decode())
    except (zkdata.ZkDataError, ValueError):
        return None
    return assignment, raw, stat.version


def _being_deleted(zk: GuardedZk, topic: str) -> bool:
    return zk.exists(zkdata.delete_topic_path(topic)) is not None


def _partition_exists(zk, cache: dict, topic: str, partition: int) -> bool:
    if topic not in cache:
        found = _read_topic(zk, topic)
        cache[topic] = None if found is None else found[0]
    return cache[topic] is not None and partition in cache[topic]


def _int(value, what: str, *, low: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"{what} must be an int")
    if low is not None and value < low:
        raise ProtocolError(f"{what} must be >= {low}")
    return value


def _int_list(value, what: str) -> list[int]:
    if not isinstance(value, list) or len(value) > REPLICATION_FACTOR_MAX:
        raise ProtocolError(f"{what} must be a list of broker ids")
    return [_int(v, what) for v in value]


def _assignment_map(value, what: str) -> dict[int, list[int]]:
    if not isinstance(value, dict) or len(value) > PARTITIONS_PER_TOPIC_MAX:
        raise ProtocolError(f"{what} must be a map partition -> replicas")
    out = {}
    for key, replicas in value.items():
        try:
            partition = int(key)
        except (TypeError, ValueError):
            raise ProtocolError(f"{what}: bad partition {key!r}") from None
        out[partition] = _int_list(replicas, what)
    return out


def _topic_list(body: dict, name: str) -> list:
    items = protocol.field(body, name, list)
    if len(items) > TOPICS_PER_REQUEST_MAX:
        raise ProtocolError(f"{name}: more than {TOPICS_PER_REQUEST_MAX} entries")
    return items


def _error(name: str, message: str | None = None) -> tuple[int, str | None]:
    return ErrorCode[name], message


