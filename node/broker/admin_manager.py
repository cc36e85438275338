"""Admin requests, answered by any broker by writing the coordinator (Kafka's ZK mode).

``handle_admin_request(api_key, body, zk=..., config=...) -> dict`` for the APIs in
``ADMIN_API_KEYS`` (bodies: node/protocol.py). The broker calls it from its loop; every
coordinator call is a synchronous round trip and nothing here waits for the controller:
the controller's watches do the rest (create states, elect, move replicas, delete), so
an answer of NONE means "accepted", as Kafka's ZK-mode admin paths before KIP-497.

- CreateTopics: name as Kafka ([a-zA-Z0-9._-], at most 249 characters, not "." or "..",
  no collision with an existing topic once '.' and '_' are the same), -1 takes
  num.partitions / default.replication.factor, placement by ``node.core.placement`` over the
  live brokers (rack-aware when they have racks); writes /config/topics/T, then
  /brokers/topics/T, in one multi.
- DeleteTopics: /admin/delete_topics/T.
- CreatePartitions: appends to /brokers/topics/T (conditional on its version), Kafka's
  start index, keeping a reassignment's AR/RR fields.
- ElectLeaders: /admin/preferred_replica_election (merged into a pending one of the same
  type; "election_type": "unclean" is our extension).
- AlterPartitionReassignments / ListPartitionReassignments: /admin/reassign_partitions
  (read-modify-write on its version; an entry removed = a cancellation).
- DescribeConfigs: the topic's overrides over the broker's defaults.
- InitProducerId (idempotent producers, KIP-98 without transactions): a new producer id
  from this broker's block, or the next epoch of a given id. Blocks of
  ``PRODUCER_ID_BLOCK_SIZE`` ids are reserved in ``/latest_producer_id_block`` with
  conditional writes (Kafka's znode and JSON), so no two brokers hand out one id.

Malformed bodies raise ``node.wire.protocol.ProtocolError`` (the broker answers
INVALID_REQUEST); a coordinator failure surfaces as kazoo's exception to the broker.
"""
from __future__ import annotations

import json

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from node.broker.coordinator import CoordinatorUnavailable, GuardedZk
from node.wire.errors import ErrorCode
from node.core import placement
from node.wire import protocol as P
from node.wire import zkdata as Z
from node.wire.control import REPLICAS_MAX
from node.wire.protocol import ApiKey, ProtocolError
from node.config import TOPIC_KEYS
from shm.config import KAFKA_NAMES, LogConfig
from shm.names import topic_name_error

ADMIN_API_KEYS = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
    ApiKey.ELECT_LEADERS, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.DESCRIBE_CONFIGS, ApiKey.INIT_PRODUCER_ID})

# Limits
TOPICS_PER_REQUEST_MAX = 10_000
PARTITIONS_PER_TOPIC_MAX = 100_000
REPLICATION_FACTOR_MAX = 1_000
CONFIG_ENTRIES_MAX = 1_000
WRITE_ATTEMPTS_MAX = 10          # read-modify-write retries on a version conflict


# Topic-level config keys (Kafka's) -> the broker key they override.
TOPIC_CONFIG_KEYS = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "cleanup.policy": "log.cleanup.policy",
}
_LOG_KEYS = set(KAFKA_NAMES.values())
# One set of topic keys: node.config parses and applies them, this validates requests.
assert set(TOPIC_CONFIG_KEYS) == set(TOPIC_KEYS), "topic config keys disagree with node.config"


class InvalidConfig(ValueError):
    pass


def validate_topic_config(configs: dict) -> dict[str, str]:
    """Kafka-named topic overrides -> {key: str value}, or InvalidConfig."""
    if not isinstance(configs, dict) or len(configs) > CONFIG_ENTRIES_MAX:
        raise InvalidConfig("configs must be a map of at most "
                            f"{CONFIG_ENTRIES_MAX} entries")
    out: dict[str, str] = {}
    log_props: dict[str, str] = {}
    for key, value in sorted(configs.items()):
        if not isinstance(key, str) or key not in TOPIC_CONFIG_KEYS:
            raise InvalidConfig(f"Unknown topic config name: {key}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        if not isinstance(value, (str, int)):
            raise InvalidConfig(f"{key}: value must be a string, got {value!r}")
        text = str(value).strip()
        broker_key = TOPIC_CONFIG_KEYS[key]
        if broker_key in _LOG_KEYS:
            try:
                int(text)
            except ValueError:
                raise InvalidConfig(f"Invalid value {text} for configuration {key}: "
                                    f"Not a number of type LONG") from None
            log_props[broker_key] = text
        elif key == "min.insync.replicas":
            if not text.isdigit() or int(text) < 1:
                raise InvalidConfig(f"Invalid value {text} for configuration {key}: "
                                    f"Value must be at least 1")
        elif key == "unclean.leader.election.enable":
            if text.lower() not in ("true", "false"):
                raise InvalidConfig(f"Invalid value {text} for configuration {key}: "
                                    f"Expected value to be either true or false")
            text = text.lower()
        elif key == "cleanup.policy" and text != "delete":
            raise InvalidConfig(f"Invalid value {text} for configuration {key}: "
                                f"only delete is supported")
        out[key] = text
    try:
        LogConfig.from_props(log_props)
    except ValueError as e:
        raise InvalidConfig(str(e)) from None
    return out


def handle_admin_request(api_key: int, body: dict, *, zk: GuardedZk, config) -> dict:
    handler = _HANDLERS.get(api_key)
    if handler is None:
        raise ProtocolError(f"api key {api_key} is not an admin request")
    if not isinstance(body, dict):
        raise ProtocolError("body must be a map")
    return handler(body, zk, config)


# ------------------------------------------------------------------ coordinator reads

def _live_brokers(zk: GuardedZk) -> dict[int, str | None]:
    """broker id -> rack, of the registered brokers."""
    out: dict[int, str | None] = {}
    try:
        children = zk.get_children(Z.BROKER_IDS)
    except NoNodeError:
        return out
    for child in children:
        try:
            broker_id = int(child)
            out[broker_id] = Z.decode_broker(broker_id, zk.get(Z.broker_path(broker_id))[0]).rack
        except (ValueError, NoNodeError, Z.ZkDataError):
            continue
    return out


def _topics(zk: GuardedZk) -> list[str]:
    try:
        return sorted(zk.get_children(Z.BROKER_TOPICS))
    except NoNodeError:
        return []


def _read_topic(zk: GuardedZk, topic: str):
    """(assignment, raw JSON dict, version) or None."""
    try:
        data, stat = zk.get(Z.topic_path(topic))
    except NoNodeError:
        return None
    try:
        assignment = Z.decode_assignment(topic, data)
        raw = json.loads(data.decode())
    except (Z.ZkDataError, ValueError):
        return None
    return assignment, raw, stat.version


def _being_deleted(zk: GuardedZk, topic: str) -> bool:
    return zk.exists(Z.delete_topic_path(topic)) is not None


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
    items = P.field(body, name, list)
    if len(items) > TOPICS_PER_REQUEST_MAX:
        raise ProtocolError(f"{name}: more than {TOPICS_PER_REQUEST_MAX} entries")
    return items


def _error(name: str, message: str | None = None) -> tuple[int, str | None]:
    return ErrorCode[name], message


# ------------------------------------------------------------------ CreateTopics

def _create_topics(body: dict, zk: GuardedZk, config) -> dict:
    items = _topic_list(body, "topics")
    validate_only = P.field(body, "validate_only", bool, optional=True, default=False)
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
    brokers = _live_brokers(zk)
    existing = _topics(zk)
    results = []
    seen: set[str] = set()
    for name, num_partitions, rf, assignment, configs in parsed:
        if name in seen:
            code, message = _error("INVALID_REQUEST", f"Create topics request from client "
                                   f"contains a duplicate topic: {name}")
        else:
            code, message = _create_topic(zk, config, brokers, existing, name, num_partitions,
                                          rf, assignment, configs, validate_only)
        seen.add(name)
        results.append([name, code, message])
    return {"topics": results}


def _create_topic(zk, config, brokers, existing, name, num_partitions, rf, assignment,
                  configs, validate_only) -> tuple[int, str | None]:
    problem = topic_name_error(name)
    if problem:
        return _error("INVALID_TOPIC_EXCEPTION", problem)
    if name in existing:
        return _error("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
    collides = [t for t in existing if t.replace(".", "_") == name.replace(".", "_")]
    if collides:
        return _error("INVALID_TOPIC_EXCEPTION", f"Topic '{name}' collides with existing "
                      f"topics: {', '.join(collides)}")
    if _being_deleted(zk, name):
        return _error("TOPIC_ALREADY_EXISTS", f"Topic '{name}' is marked for deletion.")
    if assignment is not None and (num_partitions != -1 or rf != -1):
        return _error("INVALID_REQUEST", "Both numPartitions or replicationFactor and "
                      "replicasAssignments were set. Both cannot be used at the same time.")
    try:
        overrides = validate_topic_config(configs)
    except InvalidConfig as e:
        return _error("INVALID_CONFIG", str(e))
    if assignment is not None:
        try:
            placement.validate_assignment(assignment, brokers)
        except placement.PlacementError as e:
            return _error(e.kafka_error, str(e))
        replicas = assignment
    else:
        if num_partitions == -1:
            num_partitions = int(getattr(config, "num_partitions", 1))
        if rf == -1:
            rf = int(getattr(config, "default_replication_factor", 1))
        if num_partitions > PARTITIONS_PER_TOPIC_MAX:
            return _error("INVALID_PARTITIONS", f"Number of partitions {num_partitions} "
                          f"exceeds {PARTITIONS_PER_TOPIC_MAX}")
        try:
            replicas = placement.assign_replicas(sorted(brokers), brokers, num_partitions, rf)
        except placement.PlacementError as e:
            return _error(e.kafka_error, str(e))
    if validate_only:
        return ErrorCode.NONE, None
    for path in (Z.CONFIG_TOPICS, Z.BROKER_TOPICS):
        zk.ensure_path(path)
    txn = zk.transaction()
    config_path = Z.topic_config_path(name)
    stale_config = zk.exists(config_path)
    if stale_config is None:
        txn.create(config_path, Z.encode_topic_config(overrides))
    else:   # left behind by an interrupted deletion
        txn.set_data(config_path, Z.encode_topic_config(overrides), version=stale_config.version)
    txn.create(Z.topic_path(name), Z.encode_assignment(replicas))
    results = txn.commit()
    if any(isinstance(r, NodeExistsError) for r in results):
        return _error("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
    failure = next((r for r in results if isinstance(r, Exception)), None)
    if failure is not None:
        return _error("UNKNOWN_SERVER_ERROR", f"coordinator refused the write: {failure!r}")
    existing.append(name)
    return ErrorCode.NONE, None


# ------------------------------------------------------------------ DeleteTopics

def _delete_topics(body: dict, zk: GuardedZk, config) -> dict:
    names = _topic_list(body, "topics")
    if not all(isinstance(n, str) for n in names):
        raise ProtocolError("topics must be a list of names")
    existing = set(_topics(zk))
    zk.ensure_path(Z.DELETE_TOPICS)
    results = []
    for name in names:
        problem = topic_name_error(name)
        if problem:
            results.append([name, *_error("INVALID_TOPIC_EXCEPTION", problem)])
            continue
        if name not in existing:
            results.append([name, *_error("UNKNOWN_TOPIC_OR_PARTITION",
                                          "This server does not host this topic-partition.")])
            continue
        try:
            zk.create(Z.delete_topic_path(name), b"")
        except NodeExistsError:
            pass    # already queued
        results.append([name, ErrorCode.NONE, None])
    return {"topics": results}


# ------------------------------------------------------------------ CreatePartitions

def _create_partitions(body: dict, zk: GuardedZk, config) -> dict:
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
    brokers = _live_brokers(zk)
    results = []
    for name, total, assignment in parsed:
        code, message = _create_partitions_one(zk, brokers, name, total, assignment)
        results.append([name, code, message])
    return {"topics": results}


def _create_partitions_one(zk, brokers, name, total, assignment) -> tuple[int, str | None]:
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
        raw = dict(raw)
        raw["partitions"] = {**raw.get("partitions", {}),
                             **{str(p): list(r) for p, r in sorted(new.items())}}
        data = json.dumps(raw, separators=(",", ":"), sort_keys=True).encode()
        try:
            zk.set(Z.topic_path(name), data, version=version)
            return ErrorCode.NONE, None
        except BadVersionError:
            continue       # the controller or another admin wrote meanwhile: read again
        except NoNodeError:
            return _error("UNKNOWN_TOPIC_OR_PARTITION", f"The topic '{name}' does not exist.")
    return _error("REQUEST_TIMED_OUT", "the topic kept changing; retry")


# ------------------------------------------------------------------ ElectLeaders

def _elect_leaders(body: dict, zk: GuardedZk, config) -> dict:
    kind_code = P.field(body, "election_type", int)
    if kind_code not in (P.ELECTION_PREFERRED, P.ELECTION_UNCLEAN):
        raise ProtocolError(f"election_type must be 0 or 1, got {kind_code}")
    kind = "preferred" if kind_code == P.ELECTION_PREFERRED else "unclean"
    requested = P.entries(body, "partitions", 2, optional=True)
    results = []
    chosen: list[tuple[str, int]] | None = None
    if requested is not None:
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
        data, stat = zk.get(Z.partition_state_path(topic, partition))
        state = Z.decode_partition_state(data, stat.version)
    except (NoNodeError, Z.ZkDataError):
        return ErrorCode.NONE, None      # no state yet: let the controller decide
    if kind == "preferred":
        if state.leader == replicas[0]:
            return _error("ELECTION_NOT_NEEDED", "Leader election not needed for topic "
                          "partition.")
        if replicas[0] not in live or replicas[0] not in state.isr:
            return _error("PREFERRED_LEADER_NOT_AVAILABLE", f"Failed to elect leader for "
                          f"partition {topic}-{partition} under strategy "
                          f"PreferredReplicaPartitionLeaderElectionStrategy")
        return ErrorCode.NONE, None
    if state.leader in live:
        return _error("ELECTION_NOT_NEEDED", "Leader election not needed for topic partition.")
    if not any(r in live for r in replicas):
        return _error("ELIGIBLE_LEADERS_NOT_AVAILABLE", f"No replica of {topic}-{partition} "
                      f"is alive")
    return ErrorCode.NONE, None


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
    zk.ensure_path(Z.ADMIN)
    for _ in range(WRITE_ATTEMPTS_MAX):
        try:
            zk.create(Z.PREFERRED_REPLICA_ELECTION, _encode_election(kind, partitions))
            return None
        except NodeExistsError:
            pass
        try:
            data, stat = zk.get(Z.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            continue      # the controller finished it meanwhile
        try:
            pending = decode_election(data)
        except Z.ZkDataError:
            pending = None
        if pending is not None and pending.election_type != kind:
            return (f"a {pending.election_type} leader election is in progress; retry when "
                    f"it is done")
        if pending is None or pending.partitions is None or partitions is None:
            merged = None
        else:
            merged = sorted(set(pending.partitions) | set(partitions))
        try:
            zk.set(Z.PREFERRED_REPLICA_ELECTION, _encode_election(kind, merged),
                   version=stat.version)
            return None
        except (BadVersionError, NoNodeError):
            continue
    return "the election znode kept changing; retry"


# ------------------------------------------------------------------ reassignments

def _read_reassignments(zk: GuardedZk) -> tuple[dict, int]:
    try:
        data, stat = zk.get(Z.REASSIGN_PARTITIONS)
    except NoNodeError:
        return {}, -1
    try:
        return Z.decode_reassignment(data), stat.version
    except Z.ZkDataError:
        return {}, stat.version


def _alter_reassignments(body: dict, zk: GuardedZk, config) -> dict:
    items = P.entries(body, "partitions", 3)
    requests = []
    for topic, partition, replicas in items:
        requests.append((topic, partition,
                         None if replicas is None else _int_list(replicas, "replicas")))
    live = set(_live_brokers(zk))
    zk.ensure_path(Z.ADMIN)
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
                zk.delete(Z.REASSIGN_PARTITIONS, version=version)
            elif version < 0:
                zk.create(Z.REASSIGN_PARTITIONS, Z.encode_reassignment(updated))
            else:
                zk.set(Z.REASSIGN_PARTITIONS, Z.encode_reassignment(updated), version=version)
            return {"error": ErrorCode.NONE, "partitions": results}
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue
    return {"error": ErrorCode.REQUEST_TIMED_OUT, "partitions": []}


def _list_reassignments(body: dict, zk: GuardedZk, config) -> dict:
    wanted = P.entries(body, "partitions", 2, optional=True)
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


# ------------------------------------------------------------------ DescribeConfigs

def _broker_default(config, topic_key: str):
    broker_key = TOPIC_CONFIG_KEYS[topic_key]
    value = getattr(config, broker_key.replace(".", "_"), None)
    if value is None:
        field = next((f for f, k in KAFKA_NAMES.items() if k == broker_key), None)
        value = getattr(LogConfig(), field) if field else None
    if value is None and topic_key == "cleanup.policy":
        value = "delete"
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if value is None else str(value)


def _describe_configs(body: dict, zk: GuardedZk, config) -> dict:
    names = _topic_list(body, "topics")
    if not all(isinstance(n, str) for n in names):
        raise ProtocolError("topics must be a list of names")
    existing = set(_topics(zk))
    results = []
    for name in names:
        if name not in existing:
            results.append([name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, {}])
            continue
        values = {k: v for k in sorted(TOPIC_CONFIG_KEYS)
                  if (v := _broker_default(config, k)) is not None}
        try:
            values.update(Z.decode_topic_config(name, zk.get(Z.topic_config_path(name))[0]))
        except (NoNodeError, Z.ZkDataError):
            pass
        results.append([name, ErrorCode.NONE, values])
    out = {"topics": results}
    brokers = body.get("brokers")
    if brokers is not None:
        if not isinstance(brokers, list) or not all(isinstance(b, int) for b in brokers):
            raise ProtocolError("brokers must be a list of broker ids")
        from node.config import broker_config_text
        # A broker describes itself only (Kafka sends a broker resource to that broker).
        out["brokers"] = [[b, ErrorCode.NONE, broker_config_text(config)]
                          if b == config.broker_id else
                          [b, ErrorCode.INVALID_REQUEST, {}] for b in brokers]
    return out


PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
PRODUCER_ID_BLOCK_SIZE = 1000
PRODUCER_EPOCH_MAX = 32767
_producer_ids = {"next": 0, "end": -1}     # this broker process's block: [next, end]


def _init_producer_id(body: dict, zk: GuardedZk, config) -> dict:
    pid = body.get("producer_id", -1)
    epoch = body.get("producer_epoch", -1)
    if not isinstance(pid, int) or not isinstance(epoch, int):
        raise ProtocolError("producer_id and producer_epoch must be ints")
    if pid >= 0 and 0 <= epoch < PRODUCER_EPOCH_MAX:
        return {"error": ErrorCode.NONE, "producer_id": pid, "producer_epoch": epoch + 1}
    if _producer_ids["next"] > _producer_ids["end"]:
        _reserve_producer_ids(zk, config.broker_id)
    pid = _producer_ids["next"]
    _producer_ids["next"] += 1
    return {"error": ErrorCode.NONE, "producer_id": pid, "producer_epoch": 0}


def _reserve_producer_ids(zk: GuardedZk, broker_id: int) -> None:
    for _ in range(WRITE_ATTEMPTS_MAX):
        try:
            data, stat = zk.get(PRODUCER_ID_BLOCK_PATH)
            try:
                start = int(json.loads(data)["block_end"]) + 1
            except (ValueError, KeyError, TypeError):
                raise ProtocolError(f"{PRODUCER_ID_BLOCK_PATH} holds no block: "
                                    f"{data[:100]!r}") from None
            version = stat.version
        except NoNodeError:
            start, version = 0, None
        end = start + PRODUCER_ID_BLOCK_SIZE - 1
        value = json.dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                            "block_end": str(end)}).encode()
        try:
            if version is None:
                zk.create(PRODUCER_ID_BLOCK_PATH, value)
            else:
                zk.set(PRODUCER_ID_BLOCK_PATH, value, version=version)
        except (NodeExistsError, BadVersionError):
            continue       # another broker took this block: read again
        _producer_ids.update(next=start, end=end)
        return
    raise CoordinatorUnavailable(f"could not reserve producer ids in {WRITE_ATTEMPTS_MAX} "
                                 f"attempts (answered as a retriable timeout)")


_HANDLERS = {
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _alter_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _list_reassignments,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
}
assert set(_HANDLERS) == ADMIN_API_KEYS
