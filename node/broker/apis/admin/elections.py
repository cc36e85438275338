"""ElectLeaders: /admin/preferred_replica_election, merged into a pending election of
the same type ("election_type": "unclean" is our extension).
"""
from __future__ import annotations

import json

from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError

from node.broker.apis.admin.common import (WRITE_ATTEMPTS_MAX, _error, _live_brokers,
                                           _partition_exists)
from node.broker.coordinator import GuardedZk
from node.wire.errors import ErrorCode
from node.wire import protocol
from node.wire.protocol import ProtocolError
from node.wire import zkdata


# ------------------------------------------------------------------ ElectLeaders

def elect_leaders(body: dict, zk: GuardedZk, config, metadata=None) -> dict:
    """With ``metadata`` (the broker's cache), null partitions mean every partition it
    knows, each answered (Kafka's KafkaApis does the same from its cache); without, the
    election znode says "all" and nothing is answered per partition."""
    kind_code = protocol.field(body, "election_type", int)
    if kind_code not in (protocol.ELECTION_PREFERRED, protocol.ELECTION_UNCLEAN):
        raise ProtocolError(f"election_type must be 0 or 1, got {kind_code}")
    kind = "preferred" if kind_code == protocol.ELECTION_PREFERRED else "unclean"
    requested = protocol.entries(body, "partitions", 2, optional=True)
    results = []
    chosen: list[tuple[str, int]] | None = None
    if requested is None and metadata is not None:
        results, chosen = _from_cache(kind, metadata)
        if not chosen:
            return {"error": ErrorCode.NONE, "partitions": results}
    elif requested is not None:
        chosen = []
        live = set(_live_brokers(zk))
        cache: dict = {}
        for topic, partition in requested:
            if not _partition_exists(zk, cache, topic, partition):
                results.append([topic, partition, *_error("UNKNOWN_TOPIC_OR_PARTITION")])
                continue
            code, message = _election_precheck(zk, kind, cache[topic][partition], live,
                                               topic, partition)
            if code == ErrorCode.NONE:
                chosen.append((topic, partition))
            results.append([topic, partition, code, message])
        if not chosen:
            return {"error": ErrorCode.NONE, "partitions": results}
    problem = _write_election(zk, kind, chosen)
    if problem is None:
        return {"error": ErrorCode.NONE, "partitions": results}
    code = ErrorCode.REQUEST_TIMED_OUT
    if chosen is None:
        return {"error": code, "partitions": []}
    refused = set(chosen)
    return {"error": ErrorCode.NONE, "partitions": [
        [t, p, code, problem] if (t, p) in refused else [t, p, c, m] for t, p, c, m in results]}


def _election_precheck(zk, kind, replicas, live, topic, partition) -> tuple[int, str | None]:
    """What Kafka would answer for a partition that needs no election or cannot have one."""
    try:
        data, stat = zk.get(zkdata.partition_state_path(topic, partition))
        state = zkdata.decode_partition_state(data, stat.version)
    except (NoNodeError, zkdata.ZkDataError):
        return ErrorCode.NONE, None      # no state yet: let the controller decide
    return _verdict(kind, state.leader, state.isr, replicas, live, topic, partition)


def _verdict(kind, leader, isr, replicas, live, topic, partition) -> tuple[int, str | None]:
    if kind == "preferred":
        if leader == replicas[0]:
            return _error("ELECTION_NOT_NEEDED", "Leader election not needed for topic "
                          "partition.")
        if replicas[0] not in live or replicas[0] not in isr:
            return _error("PREFERRED_LEADER_NOT_AVAILABLE", f"Failed to elect leader for "
                          f"partition {topic}-{partition} under strategy "
                          f"PreferredReplicaPartitionLeaderElectionStrategy")
        return ErrorCode.NONE, None
    if leader in live:
        return _error("ELECTION_NOT_NEEDED", "Leader election not needed for topic partition.")
    if not any(r in live for r in replicas):
        return _error("ELIGIBLE_LEADERS_NOT_AVAILABLE", f"No replica of {topic}-{partition} "
                      f"is alive")
    return ErrorCode.NONE, None


def _from_cache(kind: str, metadata) -> tuple[list, list]:
    """Every partition of the broker's metadata cache: (results, the ones to elect),
    judged from the cache alone (no coordinator read per partition)."""
    live = set(metadata.brokers)
    results, chosen = [], []
    for topic in sorted(metadata.topics):
        for partition, m in sorted(metadata.topics[topic].items()):
            if not m.replicas:
                continue
            code, message = _verdict(kind, m.leader, m.isr, m.replicas, live, topic,
                                     partition)
            if code == ErrorCode.NONE:
                chosen.append((topic, partition))
            results.append([topic, partition, code, message])
    return results, chosen


def _encode_election(kind: str, partitions) -> bytes:
    value: dict = {"version": 1, "partitions": None if partitions is None else
                   [{"topic": t, "partition": p} for t, p in sorted(set(partitions))]}
    if kind == "unclean":
        value["election_type"] = "unclean"
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _write_election(zk: GuardedZk, kind: str, partitions) -> str | None:
    """Create the election znode, or merge into a pending one of the same type. None on
    success, else why not."""
    from node.broker.controller_runner import decode_election   # one decoder for the znode
    zk.ensure_path(zkdata.ADMIN)
    for _ in range(WRITE_ATTEMPTS_MAX):
        try:
            zk.create(zkdata.PREFERRED_REPLICA_ELECTION, _encode_election(kind, partitions))
            return None
        except NodeExistsError:
            pass
        try:
            data, stat = zk.get(zkdata.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            continue      # the controller finished it meanwhile
        try:
            pending = decode_election(data)
        except zkdata.ZkDataError:
            pending = None
        if pending is not None and pending.election_type != kind:
            return (f"a {pending.election_type} leader election is in progress; retry when "
                    f"it is done")
        if pending is None or pending.partitions is None or partitions is None:
            merged = None
        else:
            merged = sorted(set(pending.partitions) | set(partitions))
        try:
            zk.set(zkdata.PREFERRED_REPLICA_ELECTION, _encode_election(kind, merged),
                   version=stat.version)
            return None
        except (BadVersionError, NoNodeError):
            continue
    return "the election znode kept changing; retry"


