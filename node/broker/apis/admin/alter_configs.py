"""IncrementalAlterConfigs (KIP-339): SET, DELETE, APPEND and SUBTRACT on a topic's
overrides in /config/topics/T (read-modify-write on the znode's version), as Kafka's
ZK-mode admin does; the controller watches that znode.

Rules (Kafka's):
- Resource types are Kafka's numbers: 2 = topic, 4 = broker ("" = the cluster default).
- A key given twice for one resource: INVALID_REQUEST; an unknown key, APPEND/SUBTRACT of
  a key that is not a list, or a value the topic config refuses: INVALID_CONFIG.
- The default topic resource ("") is refused with INVALID_REQUEST.
- Brokers: /config/brokers/<id> or /config/brokers/<default> (""), Kafka's dynamic
  broker configs, for the keys that are topic configs' defaults (``DYNAMIC_BROKER_KEYS``:
  log.retention.ms, min.insync.replicas, compression.type ...), each checked as the topic
  config it stands for; the brokers watch them (``node.broker.topic_configs``). Any
  other broker key is answered as Kafka answers a key that is not dynamic: INVALID_CONFIG
  "Cannot update these configs dynamically".
- ``validate_only``: every check, no write.
- ``replace`` (Kafka's older AlterConfigs): the SETs given are the topic's whole override
  set; every other override goes.
"""
from __future__ import annotations

from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError

from node.broker.apis.admin.common import (CONFIG_ENTRIES_MAX, TOPICS_PER_REQUEST_MAX,
                                           WRITE_ATTEMPTS_MAX, _being_deleted,
                                           _topics)
from node.broker.apis.admin.configs import (DYNAMIC_BROKER_KEYS, TOPIC_CONFIG_KEYS,
                                            InvalidConfig, _broker_values,
                                            validate_topic_config)
from node.broker.coordinator import GuardedZk
from node.wire import protocol
from node.wire import zkdata
from node.wire.errors import ErrorCode
from node.wire.protocol import ProtocolError

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
OPS = (OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT)
# Topic keys whose Kafka type is LIST (APPEND/SUBTRACT apply to them only).
LIST_TOPIC_KEYS = frozenset({"cleanup.policy"})


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode[code]


def _parse(body: dict) -> list[tuple[int, str, list[tuple[str, int, str | None]]]]:
    items = protocol.field(body, "resources", list)
    if len(items) > TOPICS_PER_REQUEST_MAX:
        raise ProtocolError(f"resources: more than {TOPICS_PER_REQUEST_MAX} entries")
    out = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                and not isinstance(item[0], bool) and isinstance(item[1], str)
                and isinstance(item[2], list)):
            raise ProtocolError("resources: every entry is [resource_type, name, "
                                "[[key, op, value], ...]]")
        ops = item[2]
        if len(ops) > CONFIG_ENTRIES_MAX:
            raise ProtocolError(f"more than {CONFIG_ENTRIES_MAX} configs for one resource")
        parsed = []
        for op in ops:
            if not (isinstance(op, list) and len(op) == 3 and isinstance(op[0], str)
                    and isinstance(op[1], int) and not isinstance(op[1], bool)
                    and (op[2] is None or isinstance(op[2], str))):
                raise ProtocolError("configs: every entry is [key, op, value|None]")
            parsed.append((op[0], op[1], op[2]))
        out.append((item[0], item[1], parsed))
    return out


def apply_ops(current: dict[str, str], ops, defaults: dict[str, str],
              known=TOPIC_CONFIG_KEYS, list_keys=LIST_TOPIC_KEYS,
              what: str = "topic") -> dict[str, str]:
    """The overrides after ``ops`` (pure; _Refused on a bad op). ``defaults`` gives a
    list key's value when it is not overridden (APPEND extends that)."""
    out = dict(current)
    for key, op, value in ops:
        if op not in OPS:
            raise _Refused("INVALID_REQUEST", f"Unknown config operation {op} for {key}")
        if key not in known:
            raise _Refused("INVALID_CONFIG", f"Unknown {what} config name: {key}")
        if op == OP_DELETE:
            out.pop(key, None)
            continue
        if value is None:
            raise _Refused("INVALID_REQUEST", f"Null value not supported for : {key}")
        if op == OP_SET:
            out[key] = value
            continue
        if key not in list_keys:
            verb = "append" if op == OP_APPEND else "subtract"
            raise _Refused("INVALID_CONFIG", f"Config value {verb} is not allowed for "
                                             f"config key: {key}")
        old = [v for v in out.get(key, defaults.get(key, "")).split(",") if v]
        given = value.split(",")
        new = old + [v for v in given if v not in old] if op == OP_APPEND else \
            [v for v in old if v not in given]
        out[key] = ",".join(new)
    return out


def incremental_alter_configs(body: dict, zk: GuardedZk, config) -> dict:
    resources = _parse(body)
    validate_only = protocol.field(body, "validate_only", bool, optional=True, default=False)
    replace = protocol.field(body, "replace", bool, optional=True, default=False)
    results = []
    for resource_type, name, ops in resources:
        try:
            keys = [k for k, _, _ in ops]
            if len(set(keys)) != len(keys):
                raise _Refused("INVALID_REQUEST", f"Error due to duplicate config keys: "
                                                  f"{sorted({k for k in keys if keys.count(k) > 1})}")
            if replace and any(op != OP_SET for _, op, _ in ops):
                raise _Refused("INVALID_REQUEST", "AlterConfigs only sets configs")
            if resource_type == RESOURCE_TOPIC:
                _alter_topic(zk, config, name, ops, validate_only, replace)
            elif resource_type == RESOURCE_BROKER:
                _alter_broker(zk, config, name, ops, validate_only, replace)
            else:
                raise _Refused("INVALID_REQUEST", f"AlterConfigs is only supported for topics "
                                                  f"and brokers, but resource type is "
                                                  f"{resource_type}")
            results.append([resource_type, name, ErrorCode.NONE, None])
        except _Refused as e:
            results.append([resource_type, name, e.code, str(e)])
    return {"resources": results}


def _alter_topic(zk: GuardedZk, config, name: str, ops, validate_only: bool,
                 replace: bool) -> None:
    if not name:
        raise _Refused("INVALID_REQUEST", "Default topic resources are not allowed.")
    if name not in _topics(zk) or _being_deleted(zk, name):
        raise _Refused("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {name} does not exist.")

    def updated(current: dict[str, str]) -> dict[str, str]:
        new = apply_ops({} if replace else current, ops,
                        {"cleanup.policy": _broker_values(config)["log.cleanup.policy"]})
        try:
            return validate_topic_config(new)
        except InvalidConfig as e:
            raise _Refused("INVALID_CONFIG", f"Invalid config value for resource "
                                             f"ConfigResource(type=TOPIC, name='{name}'): "
                                             f"{e}") from None
    _write_config(zk, zkdata.topic_config_path(name), name, updated, validate_only)


def _alter_broker(zk: GuardedZk, config, name: str, ops, validate_only: bool,
                  replace: bool) -> None:
    """Per broker (its id) or cluster-wide (""): only the dynamic keys, each checked as
    the topic config it is the default of."""
    if name:
        try:
            int(name)
        except ValueError:
            raise _Refused("INVALID_REQUEST", f"Broker id must be an integer, but it is: "
                                              f"{name}") from None
    resource = f"ConfigResource(type=BROKER, name='{name}')"
    known = _broker_values(config)
    unknown = sorted(k for k, _, _ in ops if k not in known and k not in DYNAMIC_BROKER_KEYS)
    if unknown:
        raise _Refused("INVALID_CONFIG", f"Unknown broker configs: {', '.join(unknown)}")
    static = sorted(k for k, _, _ in ops if k not in DYNAMIC_BROKER_KEYS)
    if static:
        raise _Refused("INVALID_CONFIG", f"Invalid config value for resource {resource}: "
                                         f"Cannot update these configs dynamically: {static}")

    def updated(current: dict[str, str]) -> dict[str, str]:
        new = apply_ops({} if replace else current, ops, _broker_values(config),
                        known=DYNAMIC_BROKER_KEYS, list_keys=("log.cleanup.policy",),
                        what="broker")
        try:
            checked = validate_topic_config({DYNAMIC_BROKER_KEYS[k]: v
                                             for k, v in new.items()})
        except InvalidConfig as e:
            raise _Refused("INVALID_CONFIG", f"Invalid config value for resource {resource}: "
                                             f"{e}") from None
        return {k: checked[DYNAMIC_BROKER_KEYS[k]] for k in new}
    zk.ensure_path(zkdata.CONFIG_BROKERS)
    _write_config(zk, zkdata.broker_config_path(name), name or zkdata.BROKER_DEFAULT_CONFIG,
                  updated, validate_only)


def _write_config(zk: GuardedZk, path: str, name: str, updated, validate_only: bool) -> None:
    """Read-modify-write of a config znode on its version: ``updated(current)`` gives the
    new map (or raises _Refused)."""
    for _ in range(WRITE_ATTEMPTS_MAX):
        try:
            data, stat = zk.get(path)
            current, version = zkdata.decode_topic_config(name, data), stat.version
        except NoNodeError:
            current, version = {}, -1
        except zkdata.ZkDataError:      # garbled: replaced by the new overrides
            current, version = {}, stat.version
        new = updated(current)
        if validate_only or new == current:
            return
        try:
            if version < 0:
                zk.ensure_path(path.rsplit("/", 1)[0])
                zk.create(path, zkdata.encode_topic_config(new))
            else:
                zk.set(path, zkdata.encode_topic_config(new), version=version)
            return
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue        # another admin wrote meanwhile: read again
    raise _Refused("REQUEST_TIMED_OUT", f"the config of {name} kept changing; retry")
