"""CreateTopics, DeleteTopics and CreatePartitions: writes of /config/topics/T and
/brokers/topics/T (one multi), /admin/delete_topics/T, and appends to /brokers/topics/T
conditional on its version. The controller's watches do the rest.
"""
from __future__ import annotations

import json

from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError

from node.broker.apis.admin.common import (PARTITIONS_PER_TOPIC_MAX, WRITE_ATTEMPTS_MAX,
                                           _assignment_map, _being_deleted, _error, _int,
                                           _int_list, _live_brokers, _read_topic, _topic_list,
                                           _topics)
from node.broker.apis.admin.configs import (InvalidConfig, describe_topic_entries,
                                            read_dynamic_broker_configs,
                                            validate_topic_config)
from node.broker.coordinator import GuardedZk
from node.wire.protocol import INTERNAL_TOPICS
from node.core import placement
from node.wire.errors import ErrorCode
from node.wire import protocol
from node.wire.protocol import ProtocolError
from node.wire import zkdata
from shm.names import topic_name_error


# ------------------------------------------------------------------ CreateTopics

def _refuse(name: str, message: str | None = None) -> tuple[int, str | None, tuple]:
    return (*_error(name, message), (-1, -1, None))


def create_topics(body: dict, zk: GuardedZk, config) -> dict:
    items = _topic_list(body, "topics")
    validate_only = protocol.field(body, "validate_only", bool, optional=True, default=False)
    parsed = []
    for item in items:
        if not isinstance(item, list) or len(item) != 5:
            raise ProtocolError("topics: every entry is [name, num_partitions, "
                                "replication_factor, assignment, configs]")
        name, num_partitions, rf, assignment, configs = item
        if not isinstance(name, str):
            raise ProtocolError("topic name must be a string")
        num_partitions = _int(num_partitions, "num_partitions", low=-1)
        rf = _int(rf, "replication_factor", low=-1)
        if assignment is not None:
            assignment = _assignment_map(assignment, "assignment")
        if configs is None:
            configs = {}
        if not isinstance(configs, dict):
            raise ProtocolError("configs must be a map")
        parsed.append((name, num_partitions, rf, assignment, configs))
    include_configs = protocol.field(body, "include_configs", bool, optional=True,
                                     default=False)
    brokers = _live_brokers(zk)
    existing = _topics(zk)
    results = []
    details = {}
    topic_ids = {}
    counts = {}
    seen: set[str] = set()
    for name, num_partitions, rf, assignment, configs in parsed:
        if name in seen:
            code, message = _error("INVALID_REQUEST", f"Create topics request from client "
                                   f"contains a duplicate topic: {name}")
        else:
            code, message, shape = _create_topic(zk, config, brokers, existing, name,
                                                 num_partitions, rf, assignment, configs,
                                                 validate_only)
            if code == ErrorCode.NONE and include_configs:
                overrides = validate_topic_config(configs)
                details[name] = [*shape[:2], describe_topic_entries(
                    config, overrides, dynamic=read_dynamic_broker_configs(
                        zk, getattr(config, "broker_id", -1)))]
            if shape[2] is not None:         # made (not validate_only)
                topic_ids[name] = shape[2]
                counts[name] = shape[0]
        seen.add(name)
        results.append([name, code, message])
    out = {"topics": results, "topic_ids": topic_ids, "partition_counts": counts}
    if include_configs:
        out["details"] = details
    return out


def _create_topic(zk, config, brokers, existing, name, num_partitions, rf, assignment,
                  configs, validate_only) -> tuple[int, str | None, tuple]:
    """(code, message, (partitions, replication factor, topic id|None) of the topic
    made)."""
    problem = topic_name_error(name)
    if problem:
        return _refuse("INVALID_TOPIC_EXCEPTION", problem)
    if name in existing:
        return _refuse("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
    collides = [t for t in existing if t.replace(".", "_") == name.replace(".", "_")]
    if collides:
        return _refuse("INVALID_TOPIC_EXCEPTION", f"Topic '{name}' collides with existing "
                       f"topics: {', '.join(collides)}")
    if _being_deleted(zk, name):
        return _refuse("TOPIC_ALREADY_EXISTS", f"Topic '{name}' is marked for deletion.")
    if assignment is not None and (num_partitions != -1 or rf != -1):
        return _refuse("INVALID_REQUEST", "Both numPartitions or replicationFactor and "
                       "replicasAssignments were set. Both cannot be used at the same time.")
    try:
        overrides = validate_topic_config(configs)
    except InvalidConfig as e:
        return _refuse("INVALID_CONFIG", str(e))
    if assignment is not None:
        try:
            placement.validate_assignment(assignment, brokers)
        except placement.PlacementError as e:
            return _refuse(e.kafka_error, str(e))
        replicas = assignment
    else:
        if num_partitions == -1:
            num_partitions = int(getattr(config, "num_partitions", 1))
        if rf == -1:
            rf = int(getattr(config, "default_replication_factor", 1))
        if num_partitions > PARTITIONS_PER_TOPIC_MAX:
            return _refuse("INVALID_PARTITIONS", f"Number of partitions {num_partitions} "
                          f"exceeds {PARTITIONS_PER_TOPIC_MAX}")
        try:
            replicas = placement.assign_replicas(sorted(brokers), brokers, num_partitions, rf)
        except placement.PlacementError as e:
            return _refuse(e.kafka_error, str(e))
    shape = (len(replicas), len(next(iter(replicas.values()))) if replicas else 0, None)
    if validate_only:
        return ErrorCode.NONE, None, shape
    for path in (zkdata.CONFIG_TOPICS, zkdata.BROKER_TOPICS):
        zk.ensure_path(path)
    txn = zk.transaction()
    config_path = zkdata.topic_config_path(name)
    stale_config = zk.exists(config_path)
    if stale_config is None:
        txn.create(config_path, zkdata.encode_topic_config(overrides))
    else:   # left behind by an interrupted deletion
        txn.set_data(config_path, zkdata.encode_topic_config(overrides),
                     version=stale_config.version)
    topic_id = zkdata.new_topic_id()
    txn.create(zkdata.topic_path(name), zkdata.encode_assignment(replicas, topic_id=topic_id))
    results = txn.commit()
    if any(isinstance(r, NodeExistsError) for r in results):
        return _refuse("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
    failure = next((r for r in results if isinstance(r, Exception)), None)
    if failure is not None:
        return _refuse("UNKNOWN_SERVER_ERROR", f"coordinator refused the write: {failure!r}")
    existing.append(name)
    return ErrorCode.NONE, None, (*shape[:2], topic_id)


# ------------------------------------------------------------------ DeleteTopics

def delete_topics(body: dict, zk: GuardedZk, config) -> dict:
    names = _topic_list(body, "topics")
    if not all(isinstance(n, str) for n in names):
        raise ProtocolError("topics must be a list of names")
    existing = set(_topics(zk))
    zk.ensure_path(zkdata.DELETE_TOPICS)
    results = []
    enabled = getattr(config, "delete_topic_enable", True)
    for name in names:
        if not enabled:
            results.append([name, *_error("TOPIC_DELETION_DISABLED", "Topic deletion is "
                                          "disabled.")])
            continue
        problem = topic_name_error(name)
        if problem:
            results.append([name, *_error("INVALID_TOPIC_EXCEPTION", problem)])
            continue
        if name in INTERNAL_TOPICS:       # the group coordinator's offsets (Kafka 4 allows it)
            results.append([name, *_error("INVALID_TOPIC_EXCEPTION",
                                          f"Cannot delete internal topic {name}")])
            continue
        if name not in existing:
            results.append([name, *_error("UNKNOWN_TOPIC_OR_PARTITION",
                                          "This server does not host this topic-partition.")])
            continue
        try:
            zk.create(zkdata.delete_topic_path(name), b"")
        except NodeExistsError:
            pass    # already queued
        results.append([name, ErrorCode.NONE, None])
    return {"topics": results}


# ------------------------------------------------------------------ CreatePartitions

def create_partitions(body: dict, zk: GuardedZk, config) -> dict:
    items = _topic_list(body, "topics")
    parsed = []
    for item in items:
        if not isinstance(item, list) or len(item) != 3 or not isinstance(item[0], str):
            raise ProtocolError("topics: every entry is [name, new_total_count, assignment]")
        name, total, assignment = item
        total = _int(total, "new_total_count")
        if assignment is not None:
            if isinstance(assignment, list):     # Kafka's form: the new partitions in order
                assignment = [_int_list(r, "assignment") for r in assignment]
            else:
                assignment = _assignment_map(assignment, "assignment")
        parsed.append((name, total, assignment))
    validate_only = protocol.field(body, "validate_only", bool, optional=True, default=False)
    brokers = _live_brokers(zk)
    results = []
    for name, total, assignment in parsed:
        code, message = _create_partitions_one(zk, brokers, name, total, assignment,
                                               validate_only)
        results.append([name, code, message])
    return {"topics": results}


def _create_partitions_one(zk, brokers, name, total, assignment,
                           validate_only: bool) -> tuple[int, str | None]:
    for _ in range(WRITE_ATTEMPTS_MAX):
        found = _read_topic(zk, name)
        if found is None:
            return _error("UNKNOWN_TOPIC_OR_PARTITION", f"The topic '{name}' does not exist.")
        if _being_deleted(zk, name):
            return _error("INVALID_TOPIC_EXCEPTION", "The topic is queued for deletion.")
        current, raw, version = found
        count = len(current)
        if total <= count:
            return _error("INVALID_PARTITIONS", f"Topic currently has {count} partitions, "
                          f"which is higher than the requested {total}." if total < count else
                          f"Topic already has {count} partitions.")
        if total > PARTITIONS_PER_TOPIC_MAX:
            return _error("INVALID_PARTITIONS", f"{total} partitions exceed "
                          f"{PARTITIONS_PER_TOPIC_MAX}")
        rf = len(current[min(current)])
        added_count = total - count
        if assignment is not None:
            new = (dict(enumerate(assignment, start=count)) if isinstance(assignment, list)
                   else dict(assignment))
            if len(new) != added_count:
                return _error("INVALID_REPLICA_ASSIGNMENT", f"Increasing the number of "
                              f"partitions by {added_count} but {len(new)} assignments provided.")
            try:
                placement.validate_assignment(new, brokers, first_partition=count)
            except placement.PlacementError as e:
                return _error(e.kafka_error, str(e))
            if any(len(r) != rf for r in new.values()):
                return _error("INVALID_REPLICA_ASSIGNMENT",
                              "Inconsistent replication factor between partitions, partition 0 "
                              f"has {rf} while the new partitions have another.")
        else:
            start = placement.start_index_for_new_partitions(brokers, current)
            try:
                new = placement.assign_replicas(sorted(brokers), brokers, added_count, rf,
                                                start_index=start, start_partition_id=count)
            except placement.PlacementError as e:
                return _error(e.kafka_error, str(e))
        if validate_only:
            return ErrorCode.NONE, None
        raw = dict(raw)
        raw["partitions"] = {**raw.get("partitions", {}),
                             **{str(p): list(r) for p, r in sorted(new.items())}}
        data = json.dumps(raw, separators=(",", ":"), sort_keys=True).encode()
        try:
            zk.set(zkdata.topic_path(name), data, version=version)
            return ErrorCode.NONE, None
        except BadVersionError:
            continue       # the controller or another admin wrote meanwhile: read again
        except NoNodeError:
            return _error("UNKNOWN_TOPIC_OR_PARTITION", f"The topic '{name}' does not exist.")
    return _error("REQUEST_TIMED_OUT", "the topic kept changing; retry")


