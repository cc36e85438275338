"""AlterPartitionReassignments and ListPartitionReassignments: /admin/reassign_partitions,
read-modify-write on its version (an entry removed is a cancellation).
"""
from __future__ import annotations

from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError

from node.broker.apis.admin.common import (WRITE_ATTEMPTS_MAX, _error, _int_list,
                                           _live_brokers, _partition_exists, _read_topic)
from node.broker.coordinator import GuardedZk
from node.wire.control import REPLICAS_MAX
from node.wire.errors import ErrorCode
from node.wire import protocol
from node.wire import zkdata


# ------------------------------------------------------------------ reassignments

def _read_reassignments(zk: GuardedZk) -> tuple[dict, int]:
    try:
        data, stat = zk.get(zkdata.REASSIGN_PARTITIONS)
    except NoNodeError:
        return {}, -1
    try:
        return zkdata.decode_reassignment(data), stat.version
    except zkdata.ZkDataError:
        return {}, stat.version


def alter_reassignments(body: dict, zk: GuardedZk, config) -> dict:
    items = protocol.entries(body, "partitions", 3)
    requests = []
    for topic, partition, replicas in items:
        requests.append((topic, partition,
                         None if replicas is None else _int_list(replicas, "replicas")))
    live = set(_live_brokers(zk))
    zk.ensure_path(zkdata.ADMIN)
    for _ in range(WRITE_ATTEMPTS_MAX):
        moves, version = _read_reassignments(zk)
        updated = dict(moves)
        results = []
        cache: dict = {}
        for topic, partition, replicas in requests:
            tp = (topic, partition)
            if not _partition_exists(zk, cache, topic, partition):
                results.append([topic, partition, *_error("UNKNOWN_TOPIC_OR_PARTITION")])
                continue
            if replicas is None:
                if tp not in updated:
                    results.append([topic, partition, *_error(
                        "NO_REASSIGNMENT_IN_PROGRESS", f"No reassignment in progress for "
                        f"{topic}-{partition}")])
                    continue
                del updated[tp]
                results.append([topic, partition, ErrorCode.NONE, None])
                continue
            if not replicas or len(set(replicas)) != len(replicas):
                results.append([topic, partition, *_error(
                    "INVALID_REPLICA_ASSIGNMENT", f"The replica list {replicas} is empty or "
                    f"has duplicates")])
                continue
            if len(replicas) > REPLICAS_MAX:
                results.append([topic, partition, *_error(
                    "INVALID_REPLICATION_FACTOR", f"Replication factor: {len(replicas)} "
                    f"larger than {REPLICAS_MAX}, the most replicas a partition may have "
                    f"here.")])
                continue
            dead = sorted(set(replicas) - live)
            if dead:
                results.append([topic, partition, *_error(
                    "INVALID_REPLICA_ASSIGNMENT", f"Replica assignment has brokers that are "
                    f"not alive: {dead}")])
                continue
            updated[tp] = replicas
            results.append([topic, partition, ErrorCode.NONE, None])
        if updated == moves:
            return {"error": ErrorCode.NONE, "partitions": results}
        try:
            if not updated:
                zk.delete(zkdata.REASSIGN_PARTITIONS, version=version)
            elif version < 0:
                zk.create(zkdata.REASSIGN_PARTITIONS, zkdata.encode_reassignment(updated))
            else:
                zk.set(zkdata.REASSIGN_PARTITIONS, zkdata.encode_reassignment(updated),
                       version=version)
            return {"error": ErrorCode.NONE, "partitions": results}
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue
    return {"error": ErrorCode.REQUEST_TIMED_OUT, "partitions": []}


def list_reassignments(body: dict, zk: GuardedZk, config) -> dict:
    wanted = protocol.entries(body, "partitions", 2, optional=True)
    moves, _ = _read_reassignments(zk)
    chosen = sorted(moves) if wanted is None else sorted(
        {(t, p) for t, p in wanted} & set(moves))
    topics: dict = {}
    out = []
    for topic, partition in chosen:
        if topic not in topics:
            topics[topic] = _read_topic(zk, topic)
        found = topics[topic]
        if found is None or partition not in found[0]:
            continue
        current, raw, _ = found
        target = moves[(topic, partition)]
        replicas = current[partition]
        adding = (raw.get("adding_replicas") or {}).get(str(partition))
        removing = (raw.get("removing_replicas") or {}).get(str(partition))
        if adding is None and removing is None:     # the controller has not started it
            replicas = list(dict.fromkeys(list(target) + list(replicas)))
            adding = [r for r in target if r not in current[partition]]
            removing = [r for r in current[partition] if r not in target]
        out.append([topic, partition, list(replicas), list(adding or []), list(removing or [])])
    return {"error": ErrorCode.NONE, "partitions": out}


