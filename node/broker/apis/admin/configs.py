"""DescribeConfigs (a topic's overrides over the broker's defaults), and the topic-level
configs (Kafka's names) that CreateTopics validates.
"""
from __future__ import annotations

from functools import lru_cache

from kazoo.exceptions import NoNodeError

from node.broker.apis.admin.common import CONFIG_ENTRIES_MAX, _topic_list, _topics
from node.broker.coordinator import GuardedZk
from node.config import (COMPACTION_BROKER_KEYS, COMPACTION_TOPIC_KEYS, COMPRESSION_TYPES,
                         TOPIC_KEYS, ConfigError, compaction_text, compaction_value)
from node.wire.errors import ErrorCode
from node.wire.protocol import ProtocolError
from node.wire import zkdata
from shm.config import KAFKA_NAMES, LogConfig
from node.config import BrokerConfig, broker_config_text
from node.wire import protocol

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
    "compression.type": "compression.type",
    # log compaction: cleanup.policy, min.cleanable.dirty.ratio, the lags, delete.retention.ms
    **{topic: broker for topic, (_, _, broker, _) in COMPACTION_TOPIC_KEYS.items()},
}
_LOG_KEYS = set(KAFKA_NAMES.values()) - set(COMPACTION_BROKER_KEYS)
# Broker keys that change while brokers run (Kafka's dynamic broker configs, per broker or
# cluster-wide): the defaults of topic configs, as the topic key they stand for. The
# controller's unclean.leader.election.enable is not.
DYNAMIC_BROKER_KEYS = {broker: topic for topic, broker in TOPIC_CONFIG_KEYS.items()
                       if topic != "unclean.leader.election.enable"}
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
        elif key == "compression.type":
            if text.lower() not in COMPRESSION_TYPES:
                raise InvalidConfig(f"Invalid value {text} for configuration {key}: String "
                                    f"must be one of: {', '.join(COMPRESSION_TYPES)}")
            text = text.lower()
        elif key in COMPACTION_TOPIC_KEYS:
            try:
                compaction_value(key, text)
            except ConfigError as e:
                raise InvalidConfig(f"Invalid value {text} for configuration {key}: "
                                    f"{e}") from None
            text = text.lower().replace(" ", "") if key == "cleanup.policy" else text
        out[key] = text
    try:
        LogConfig.from_props(log_props)
    except ValueError as e:
        raise InvalidConfig(str(e)) from None
    return out


# ------------------------------------------------------------------ describing

# Kafka's ConfigSource numbers (DescribeConfigsResponse).
SOURCE_TOPIC = 1                  # DYNAMIC_TOPIC_CONFIG
SOURCE_DYNAMIC_BROKER = 2         # DYNAMIC_BROKER_CONFIG
SOURCE_DYNAMIC_DEFAULT_BROKER = 3  # DYNAMIC_DEFAULT_BROKER_CONFIG
SOURCE_STATIC_BROKER = 4          # STATIC_BROKER_CONFIG (server.properties)
SOURCE_DEFAULT = 5                # DEFAULT_CONFIG
# Kafka's ConfigType numbers (DescribeConfigs v3+).
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_SHORT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = \
    1, 2, 3, 4, 5, 6, 7
_DOUBLE_KEYS = {"min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio",
                "log.cleaner.io.max.bytes.per.second"}
_INT_KEYS = {"segment.bytes", "segment.index.bytes", "index.interval.bytes",
             "max.message.bytes", "min.insync.replicas", "log.segment.bytes",
             "log.index.size.max.bytes", "log.index.interval.bytes", "message.max.bytes",
             "num.partitions", "broker.id", "request.timeout.ms",
             "replica.fetch.wait.max.ms", "replica.fetch.max.bytes",
             "replica.fetch.min.bytes", "replica.fetch.response.max.bytes",
             "replica.fetch.backoff.ms", "zookeeper.session.timeout.ms",
             "zookeeper.connection.timeout.ms", "leader.imbalance.per.broker.percentage",
             "controlled.shutdown.max.retries", "log.cleaner.threads"}
_LIST_KEYS = {"cleanup.policy", "log.cleanup.policy", "log.dirs", "listeners",
              "advertised.listeners"}


def _text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


def config_type(key: str, value: str | None) -> int:
    if key in _LIST_KEYS:
        return TYPE_LIST
    if key in _DOUBLE_KEYS:
        return TYPE_DOUBLE
    if key == "default.replication.factor":
        return TYPE_SHORT
    if value in ("true", "false"):
        return TYPE_BOOLEAN
    if key in _INT_KEYS:
        return TYPE_INT
    if value is not None and value.lstrip("-").isdigit():
        return TYPE_LONG
    return TYPE_STRING


def _broker_values(config) -> dict[str, str]:
    """Every broker key (Kafka's names) of ``config``, as text: the broker keys plus the
    log keys of its LogConfig."""
    out = broker_config_text(config)
    log_config = getattr(config, "log_config", None) or LogConfig()
    for name, kafka in KAFKA_NAMES.items():
        if kafka not in COMPACTION_BROKER_KEYS:
            out[kafka] = _text(getattr(log_config, name))
    for key, text in compaction_text(log_config).items():
        out[TOPIC_CONFIG_KEYS[key]] = text
    return out


@lru_cache(maxsize=1)
def _broker_defaults() -> dict[str, str]:
    """Kafka's default of every broker key that has one (a key set to its default in
    server.properties looks like an unset one: STATIC needs a value that differs)."""
    out = _broker_values(BrokerConfig(broker_id=0, zookeeper_connect="-"))
    del out["broker.id"], out["zookeeper.connect"]
    return out


# The dynamic broker configs a description sees: (this broker's, the cluster-wide).
NO_DYNAMIC: tuple[dict, dict] = ({}, {})


def _broker_entry(key: str, value: str | None, defaults: dict,
                  dynamic: tuple[dict, dict] = NO_DYNAMIC) -> list:
    """[name, value, source, read_only, sensitive, synonyms, type] of a broker key, its
    synonyms most specific first as Kafka lists them: this broker's dynamic config, the
    cluster-wide one, server.properties (when it differs from Kafka's default), the
    default. Only the dynamic keys are writable."""
    default = defaults.get(key)
    synonyms = []
    per_broker, cluster = dynamic
    if key in per_broker:
        synonyms.append([key, per_broker[key], SOURCE_DYNAMIC_BROKER])
    if key in cluster:
        synonyms.append([key, cluster[key], SOURCE_DYNAMIC_DEFAULT_BROKER])
    if key not in defaults or value != default:
        synonyms.append([key, value, SOURCE_STATIC_BROKER])
    if key in defaults:
        synonyms.append([key, default, SOURCE_DEFAULT])
    first = synonyms[0]
    return [key, first[1], first[2], key not in DYNAMIC_BROKER_KEYS, False, synonyms,
            config_type(key, first[1])]


def _topic_entry(key: str, overrides: dict, broker: dict, defaults: dict,
                 dynamic: tuple[dict, dict]) -> list:
    """[name, value, source, read_only, sensitive, synonyms, type] of a topic key: the
    topic's override, else the broker's key it falls back to."""
    broker_key = TOPIC_CONFIG_KEYS[key]
    fallback = _broker_entry(broker_key, broker.get(broker_key), defaults, dynamic)
    synonyms = list(fallback[5])
    if key in overrides:
        value, source = overrides[key], SOURCE_TOPIC
        synonyms.insert(0, [key, value, SOURCE_TOPIC])
    else:
        value, source = fallback[1], fallback[2]
    return [key, value, source, False, False, synonyms, config_type(key, value)]


def describe_topic_entries(config, overrides: dict[str, str], keys: list[str] | None = None,
                           dynamic: tuple[dict, dict] = NO_DYNAMIC) -> list[list]:
    """The entries of a topic's configs (all, or ``keys``; unknown keys left out)."""
    broker, defaults = _broker_values(config), _broker_defaults()
    wanted = sorted(TOPIC_CONFIG_KEYS) if keys is None else \
        [k for k in keys if k in TOPIC_CONFIG_KEYS]
    return [_topic_entry(k, overrides, broker, defaults, dynamic) for k in wanted]


def describe_broker_entries(config, keys: list[str] | None = None,
                            dynamic: tuple[dict, dict] = NO_DYNAMIC) -> list[list]:
    broker, defaults = _broker_values(config), _broker_defaults()
    wanted = sorted(broker) if keys is None else [k for k in keys if k in broker]
    return [_broker_entry(k, broker[k], defaults, dynamic) for k in wanted]


def read_dynamic_broker_configs(zk: GuardedZk, broker_id: int) -> tuple[dict, dict]:
    """(this broker's dynamic configs, the cluster-wide ones), dynamic keys only."""
    out = []
    for who in (broker_id, ""):
        try:
            values = zkdata.decode_topic_config(
                "broker", zk.get(zkdata.broker_config_path(who))[0])
        except (NoNodeError, zkdata.ZkDataError):
            values = {}
        out.append({k: v for k, v in values.items() if k in DYNAMIC_BROKER_KEYS})
    return out[0], out[1]


def read_topic_overrides(zk: GuardedZk, name: str) -> dict[str, str]:
    try:
        return zkdata.decode_topic_config(name, zk.get(zkdata.topic_config_path(name))[0])
    except (NoNodeError, zkdata.ZkDataError):
        return {}


def _keys_field(value, what: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > CONFIG_ENTRIES_MAX or \
            not all(isinstance(k, str) for k in value):
        raise ProtocolError(f"{what}: configuration keys must be a list of names")
    return value


def describe_configs(body: dict, zk: GuardedZk, config) -> dict:
    """Topics: [name, error, {key: value}] each, or with ``"include_sources": true``
    [name, error, {key: value}, [[key, value, source, read_only, sensitive, synonyms,
    type], ...]] (``"keys": {name: [key, ...]}`` narrows them); brokers likewise."""
    names = _topic_list(body, "topics")
    if not all(isinstance(n, str) for n in names):
        raise ProtocolError("topics must be a list of names")
    detailed = protocol.field(body, "include_sources", bool, optional=True, default=False)
    keys = protocol.field(body, "keys", dict, optional=True, default={})
    existing = set(_topics(zk))
    dynamic = read_dynamic_broker_configs(zk, config.broker_id)
    results = []
    for name in names:
        if name not in existing:
            results.append([name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, {}] +
                           ([[]] if detailed else []))
            continue
        entries = describe_topic_entries(config, read_topic_overrides(zk, name),
                                         _keys_field(keys.get(name), name), dynamic)
        values = {e[0]: e[1] for e in entries if e[1] is not None}
        results.append([name, ErrorCode.NONE, values] + ([entries] if detailed else []))
    out = {"topics": results}
    brokers = body.get("brokers")
    if brokers is not None:
        if not isinstance(brokers, list) or not all(isinstance(b, int) for b in brokers):
            raise ProtocolError("brokers must be a list of broker ids")
        out["brokers"] = []
        # A broker describes itself only (Kafka sends a broker resource to that broker).
        for b in brokers:
            if b != config.broker_id:
                out["brokers"].append([b, ErrorCode.INVALID_REQUEST, {}] +
                                      ([[]] if detailed else []))
                continue
            entries = describe_broker_entries(config, _keys_field(keys.get(str(b)), str(b)),
                                              dynamic)
            values = {e[0]: e[1] for e in entries if e[1] is not None}
            out["brokers"].append([b, ErrorCode.NONE, values] +
                                  ([entries] if detailed else []))
    return out
