"""DescribeConfigs (a topic's overrides over the broker's defaults), and the topic-level
configs (Kafka's names) that CreateTopics validates.
"""
from __future__ import annotations

from kazoo.exceptions import NoNodeError

from node.broker.apis.admin.common import CONFIG_ENTRIES_MAX, _topic_list, _topics
from node.broker.coordinator import GuardedZk
from node.config import COMPRESSION_TYPES, TOPIC_KEYS
from node.wire.errors import ErrorCode
from node.wire.protocol import ProtocolError
from node.wire import zkdata
from shm.config import KAFKA_NAMES, LogConfig

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
    "compression.type": "compression.type",
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
        elif key == "compression.type":
            if text.lower() not in COMPRESSION_TYPES:
                raise InvalidConfig(f"Invalid value {text} for configuration {key}: String "
                                    f"must be one of: {', '.join(COMPRESSION_TYPES)}")
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


def describe_configs(body: dict, zk: GuardedZk, config) -> dict:
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
            values.update(zkdata.decode_topic_config(
                name, zk.get(zkdata.topic_config_path(name))[0]))
        except (NoNodeError, zkdata.ZkDataError):
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


