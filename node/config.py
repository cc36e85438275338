"""Broker configuration: a Kafka-format properties file with Kafka's key names.

``BrokerConfig.from_file(path)`` (or ``from_props(load_properties(path))``) builds one
frozen ``BrokerConfig``. Field names are the Kafka keys with dots turned into
underscores (``replica.lag.time.max.ms`` -> ``replica_lag_time_max_ms``); defaults are
Kafka's unless noted in ``_KEYS``. The storage engine's ``log.*`` keys (and
``message.max.bytes``) build ``log_config: shm.config.LogConfig``.

Unknown keys and invalid values raise ``ConfigError`` with a one-line message naming
the key, so a broker refuses to start instead of running with a typo.

Topic-level overrides (``/config/topics/T``, Kafka's topic keys such as
``min.insync.replicas`` or ``retention.ms``): ``topic_log_config(config, overrides)``
gives the topic's ``LogConfig`` and ``topic_setting(config, overrides, key)`` one
replication setting, falling back to the broker's value; ``check_topic_config``
validates a topic config map (CreateTopics).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Callable

from shm.config import KAFKA_NAMES as LOG_KAFKA_NAMES
from shm.config import LONG_MAX, LogConfig

PROPERTIES_BYTES_MAX = 1024 * 1024
INT_MAX = 2**31 - 1

LEADER_EPOCH_MODE = "leader-epoch"
HIGH_WATERMARK_MODE = "high-watermark"
TRUNCATION_MODES = (LEADER_EPOCH_MODE, HIGH_WATERMARK_MODE)

_CLUSTER_ID = re.compile(r"^[A-Za-z0-9_]{1,40}$")
_LISTENER = re.compile(r"^([A-Za-z0-9_]+)://([A-Za-z0-9.\-]*|\[[0-9a-fA-F:]+\]):(\d{1,5})$")
# The listener names a broker knows: PLAINTEXT is the native wire (node.wire.protocol,
# what node.client, the fetchers and the tools speak); KAFKA speaks Kafka's own protocol
# (node.kafka.listener). Both are plaintext (Kafka's security protocol PLAINTEXT).
NATIVE_LISTENER = "PLAINTEXT"
KAFKA_LISTENER = "KAFKA"
LISTENER_NAMES = (NATIVE_LISTENER, KAFKA_LISTENER)
# Kafka's socket.request.max.bytes default: the largest request frame a listener accepts.
SOCKET_REQUEST_MAX_BYTES_DEFAULT = 104857600
_RACK = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid (message names the key)."""


def parse_key_values(pairs, flag: str, *, split_whitespace: bool = False) -> dict[str, str]:
    """The one KEY=VALUE parser of every command line (``--config``, ``--property``,
    ``--override``, ``--producer-props`` ...): ``["k=v", ...] -> {k: v}``, whitespace
    around the key and the value trimmed as Kafka's tools do, the first ``=`` splitting.
    With ``split_whitespace`` one argument may hold several pairs
    (``--producer-props "acks=1 linger.ms=5"``). A pair without ``=`` or without a key
    is a ``ConfigError`` naming the flag."""
    out: dict[str, str] = {}
    for item in pairs or ():
        for pair in (str(item).split() if split_whitespace else (str(item),)):
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"Invalid {flag} '{pair}': all values must be in the "
                                  f"format \"key=value\".")
            out[key.strip()] = value.strip()
    return out


# ------------------------------------------------------------------ value parsers

def _int_in(low: int, high: int) -> Callable[[str, str], int]:
    def parse(key: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise ConfigError(f"{key}: {value} is outside [{low}, {high}]")
        return value
    return parse


def _bool(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{key}: expected true or false, got {text!r}")
    return value == "true"


def _text(key: str, text: str) -> str:
    value = text.strip()
    if not value:
        raise ConfigError(f"{key}: must not be empty")
    return value


def _optional_text(key: str, text: str) -> str | None:
    value = text.strip()
    return value or None


@dataclass(frozen=True)
class Listener:
    """One entry of ``listeners`` / ``advertised.listeners``: NAME://HOST:PORT."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(key: str, text: str) -> tuple[Listener, ...]:
    """Kafka's comma-separated NAME://HOST:PORT list; ConfigError naming ``key`` for a
    malformed entry, an unknown name, a name or (non-zero) port given twice."""
    out: list[Listener] = []
    for item in text.split(","):
        item = item.strip()
        match = _LISTENER.match(item)
        if match is None:
            raise ConfigError(f"{key}: expected NAME://HOST:PORT[,NAME://HOST:PORT] with NAME "
                              f"one of {', '.join(LISTENER_NAMES)}, got {text!r}")
        name, host, port = match.group(1), match.group(2), int(match.group(3))
        if name not in LISTENER_NAMES:
            raise ConfigError(f"{key}: unknown listener name {name!r} (known: PLAINTEXT, the "
                              f"native wire; KAFKA, Kafka's protocol)")
        if port > 65535:
            raise ConfigError(f"{key}: port {port} is outside [0, 65535]")
        if any(entry.name == name for entry in out):
            raise ConfigError(f"{key}: listener {name} is given twice")
        if port and any(entry.port == port and entry.host == host for entry in out):
            raise ConfigError(f"{key}: listeners {name} and "
                              f"{next(e.name for e in out if e.port == port)} share port {port}")
        out.append(Listener(name, host, port))
    return tuple(out)


def _listeners(key: str, text: str) -> str:
    listeners = parse_listeners(key, text)
    if not any(entry.name == NATIVE_LISTENER for entry in listeners):
        raise ConfigError(f"{key}: a PLAINTEXT listener (the native wire the brokers replicate "
                          f"over) is required, got {text!r}")
    return text.strip()


def _advertised_listeners(key: str, text: str) -> str | None:
    value = text.strip()
    if not value:
        return None
    parse_listeners(key, value)
    return value


COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


def _compression_type(key: str, text: str) -> str:
    value = text.strip().lower()
    if value not in COMPRESSION_TYPES:
        raise ConfigError(f"{key}: expected one of {', '.join(COMPRESSION_TYPES)}, got {text!r}")
    return value


def _log_dirs(key: str, text: str) -> tuple[str, ...]:
    dirs = tuple(d.strip() for d in text.split(",") if d.strip())
    if not dirs:
        raise ConfigError(f"{key}: expected a comma-separated list of directories")
    return dirs


def _zookeeper_connect(key: str, text: str) -> str:
    value = text.strip()
    hosts = value.split("/", 1)[0]
    for host in hosts.split(","):
        name, _, port = host.strip().rpartition(":")
        if not name or not port.isdigit():
            raise ConfigError(f"{key}: expected host:port[,host:port...][/chroot], got {text!r}")
    return value


def _truncation_mode(key: str, text: str) -> str:
    value = text.strip()
    if value not in TRUNCATION_MODES:
        raise ConfigError(f"{key}: expected one of {', '.join(TRUNCATION_MODES)}, got {text!r}")
    return value


REPLICA_TRANSPORTS = ("fetch", "shm")


def _replica_transport(key: str, text: str) -> str:
    value = text.strip()
    if value not in REPLICA_TRANSPORTS:
        raise ConfigError(f"{key}: expected one of {', '.join(REPLICA_TRANSPORTS)}, got {text!r}")
    return value


def _optional_bool(key: str, text: str) -> bool | None:
    return None if not text.strip() else _bool(key, text)


UNCLEAN_RECOVERY_STRATEGIES = ("balanced", "none")


def _unclean_recovery_strategy(key: str, text: str) -> str:
    value = text.strip().lower()
    if value not in UNCLEAN_RECOVERY_STRATEGIES:
        raise ConfigError(f"{key}: expected Balanced or None, got {text!r}")
    return value


def _cluster_id(key: str, text: str) -> str | None:
    value = text.strip()
    if not value:
        return None
    if not _CLUSTER_ID.match(value):
        raise ConfigError(f"{key}: {text!r} must be 1-40 characters of [A-Za-z0-9_]")
    return value


def _rack(key: str, text: str) -> str | None:
    value = text.strip()
    if not value:
        return None
    if not _RACK.match(value):
        raise ConfigError(f"{key}: {text!r} must be 1-64 characters of [A-Za-z0-9._-]")
    return value


_POSITIVE = _int_in(1, INT_MAX)
_NON_NEGATIVE = _int_in(0, INT_MAX)
_LONG_POSITIVE = _int_in(1, LONG_MAX)


# ------------------------------------------------------------------ the keys

@dataclass(frozen=True)
class _Key:
    name: str                       # Kafka's key
    parse: Callable[[str, str], object]
    default: str | None             # as text, parsed like a file value; None = required


# ------------------------------------------------------------------ log compaction (issue 26)
# Kafka's LogCleaner keys. The topic keys (cleanup.policy, min.cleanable.dirty.ratio, the
# compaction lags, delete.retention.ms) are LogConfig fields (shm.config) whose broker
# defaults are Kafka's synonyms (log.cleanup.policy, log.cleaner.min.cleanable.ratio ...);
# the cleaner's own keys (threads, I/O bound, backoff, enable) are BrokerConfig fields and
# read when the broker starts (node.broker.log_cleaner).

CLEANUP_POLICIES = ("delete", "compact")
# Kafka's CleanerConfig.LOG_CLEANER_IO_MAX_BYTES_PER_SECOND: Double.MAX_VALUE = unbounded.
CLEANER_IO_UNBOUNDED = 1.7976931348623157e308
# Ours: Kafka allows any number of cleaner threads; each is a Python thread here.
LOG_CLEANER_THREADS_MAX = 8


def _cleanup_policy(key: str, text: str) -> frozenset[str]:
    """Kafka's LIST of "delete" and "compact", in either order."""
    items = [v.strip().lower() for v in text.split(",") if v.strip()]
    if not items:
        raise ConfigError(f"{key}: must be delete, compact or both (comma separated)")
    for item in items:
        if item not in CLEANUP_POLICIES:
            raise ConfigError(f"{key}: invalid value {item!r}; String must be one of: "
                              f"{', '.join(CLEANUP_POLICIES)}")
    return frozenset(items)


def _ratio(key: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigError(f"{key}: expected a number, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key}: {value} is outside [0.0, 1.0]")
    return value


def _positive_rate(key: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigError(f"{key}: expected a number, got {text!r}") from None
    if not value > 0 or value != value:
        raise ConfigError(f"{key}: must be a positive number, got {text!r}")
    return value


def policy_text(policy) -> str:
    """A cleanup policy as Kafka shows it: "compact", "delete" or "compact,delete"."""
    return ",".join(sorted(policy))


# The cleaner's broker keys (BrokerConfig fields; Kafka's defaults).
_CLEANER_KEYS: tuple[_Key, ...] = (
    _Key("log.cleaner.enable", _bool, "true"),
    _Key("log.cleaner.threads", _int_in(0, LOG_CLEANER_THREADS_MAX), "1"),
    _Key("log.cleaner.io.max.bytes.per.second", _positive_rate, repr(CLEANER_IO_UNBOUNDED)),
    _Key("log.cleaner.backoff.ms", _int_in(0, LONG_MAX), "15000"),
)
# Topic key -> (LogConfig field, parser, the broker key that is its default, Kafka's default).
COMPACTION_TOPIC_KEYS: dict[str, tuple[str, Callable[[str, str], object], str, str]] = {
    "cleanup.policy": ("cleanup_policy", _cleanup_policy, "log.cleanup.policy", "delete"),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio,
                                  "log.cleaner.min.cleanable.ratio", "0.5"),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _int_in(0, LONG_MAX),
                              "log.cleaner.min.compaction.lag.ms", "0"),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _int_in(1, LONG_MAX),
                              "log.cleaner.max.compaction.lag.ms", str(LONG_MAX)),
    "delete.retention.ms": ("delete_retention_ms", _int_in(0, LONG_MAX),
                            "log.cleaner.delete.retention.ms", "86400000"),
}
# Broker synonym -> topic key.
COMPACTION_BROKER_KEYS = {broker: topic for topic, (_, _, broker, _)
                          in COMPACTION_TOPIC_KEYS.items()}


def compaction_value(key: str, text) -> object:
    """A compaction key's value (topic key or its broker synonym), ConfigError if bad."""
    topic_key = COMPACTION_BROKER_KEYS.get(key, key)
    return COMPACTION_TOPIC_KEYS[topic_key][1](key, str(text))


def compaction_text(log_config: LogConfig) -> dict[str, str]:
    """The topic compaction keys of ``log_config`` as text (Kafka's spelling)."""
    out = {}
    for key, (name, _, _, default) in COMPACTION_TOPIC_KEYS.items():
        value = getattr(log_config, name, None)
        if value is None:
            out[key] = default
        elif isinstance(value, (frozenset, set, tuple, list)):
            out[key] = policy_text(value)
        else:
            out[key] = str(value)
    return out


def with_compaction(log_config: LogConfig, changes: dict[str, object]) -> LogConfig:
    """``log_config`` with compaction fields (LogConfig field -> value) replaced."""
    if not changes:
        return log_config
    try:
        return dataclasses.replace(log_config, **changes)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"compaction config: {e}") from None
# ------------------------------------------------------------------ end of log compaction


# Broker keys (not the log.* keys of LogConfig, which come from shm.config).
_KEYS: tuple[_Key, ...] = (
    _Key("broker.id", _int_in(0, INT_MAX), None),
    # Kafka's default is PLAINTEXT://:9092 (all interfaces); everything here binds loopback.
    _Key("listeners", _listeners, "PLAINTEXT://127.0.0.1:9092"),
    # Kafka's: the addresses clients are told (Metadata, the registration); empty = the
    # listeners' (a port 0 there: the port bound).
    _Key("advertised.listeners", _advertised_listeners, ""),
    _Key("socket.request.max.bytes", _POSITIVE, str(SOCKET_REQUEST_MAX_BYTES_DEFAULT)),
    # Kafka's: the codec of the batches consumers get over the Kafka listener (our log
    # keeps records uncompressed); producer = the codec the producer used.
    _Key("compression.type", _compression_type, "producer"),
    _Key("log.dirs", _log_dirs, "/tmp/kafka-logs"),
    _Key("zookeeper.connect", _zookeeper_connect, None),
    _Key("zookeeper.session.timeout.ms", _int_in(100, INT_MAX), "18000"),
    _Key("zookeeper.connection.timeout.ms", _int_in(100, INT_MAX), "18000"),
    _Key("num.partitions", _POSITIVE, "1"),
    _Key("default.replication.factor", _int_in(1, 16), "1"),
    _Key("min.insync.replicas", _POSITIVE, "1"),
    _Key("unclean.leader.election.enable", _bool, "false"),
    _Key("delete.topic.enable", _bool, "true"),
    _Key("replica.lag.time.max.ms", _LONG_POSITIVE, "30000"),
    _Key("replica.fetch.wait.max.ms", _int_in(0, INT_MAX), "500"),
    _Key("replica.fetch.max.bytes", _POSITIVE, "1048576"),
    _Key("replica.fetch.min.bytes", _POSITIVE, "1"),
    _Key("replica.fetch.response.max.bytes", _POSITIVE, "10485760"),
    _Key("replica.fetch.backoff.ms", _NON_NEGATIVE, "1000"),
    # Ours (issue 29): how a follower on the leader's host replicates. fetch = Fetch
    # requests over the local link or TCP; shm = straight from the leader's segment files,
    # LEOs through a shared slot, wake-ups through FIFO doorbells
    # (node.broker.shm_replication), with Fetch as the fallback (a leader elsewhere, a
    # leader without a slot, a read that fails). A --netns cluster is pinned to fetch
    # (node.cluster: a partition fault would not cut shared memory).
    _Key("replica.transport", _replica_transport, "shm"),
    _Key("replica.high.watermark.checkpoint.interval.ms", _LONG_POSITIVE, "5000"),
    # Kafka's (KIP-854): an idempotent producer's state in a partition is forgotten once
    # this long has passed since its last batch's timestamp (none with a transaction
    # open), checked this often (shm.producer_state.ProducerStates.expire).
    _Key("producer.id.expiration.ms", _int_in(1, INT_MAX), "86400000"),
    _Key("producer.id.expiration.check.interval.ms", _int_in(1, INT_MAX), "600000"),
    # Kafka's: how often the recovery points that roll flushes moved are written (one
    # write per log dir); a roll does not write it (node.broker.replica_manager).
    _Key("log.flush.offset.checkpoint.interval.ms", _POSITIVE, "60000"),
    _Key("request.timeout.ms", _POSITIVE, "30000"),
    _Key("auto.leader.rebalance.enable", _bool, "true"),
    _Key("leader.imbalance.check.interval.seconds", _LONG_POSITIVE, "300"),
    _Key("leader.imbalance.per.broker.percentage", _int_in(0, 100), "10"),
    _Key("controlled.shutdown.enable", _bool, "true"),
    _Key("controlled.shutdown.max.retries", _NON_NEGATIVE, "3"),
    _Key("controlled.shutdown.retry.backoff.ms", _NON_NEGATIVE, "5000"),
    # ---- the group coordinator and __consumer_offsets (node.broker.groups; Kafka's keys).
    # Kafka's defaults except where a laptop cluster needs less: 3 partitions (Kafka 50),
    # 8 MiB segments (Kafka 100 MiB). The replication factor is min(this, live brokers).
    _Key("offsets.topic.num.partitions", _int_in(1, 1000), "3"),
    _Key("offsets.topic.replication.factor", _int_in(1, 16), "3"),
    _Key("offsets.topic.segment.bytes", _int_in(14, INT_MAX), str(8 * 1024 * 1024)),
    _Key("offsets.load.buffer.size", _POSITIVE, "5242880"),
    _Key("offsets.retention.minutes", _POSITIVE, "10080"),
    _Key("offsets.retention.check.interval.ms", _LONG_POSITIVE, "600000"),
    _Key("offsets.commit.timeout.ms", _POSITIVE, "5000"),
    _Key("offset.metadata.max.bytes", _NON_NEGATIVE, "4096"),
    _Key("group.min.session.timeout.ms", _POSITIVE, "6000"),
    _Key("group.max.session.timeout.ms", _POSITIVE, "1800000"),
    _Key("group.initial.rebalance.delay.ms", _NON_NEGATIVE, "3000"),
    # Kafka's default is unbounded (Int.MaxValue); a named limit here.
    _Key("group.max.size", _POSITIVE, "1000"),
    _Key("group.consumer.heartbeat.interval.ms", _POSITIVE, "5000"),
    _Key("group.consumer.min.heartbeat.interval.ms", _POSITIVE, "5000"),
    _Key("group.consumer.max.heartbeat.interval.ms", _POSITIVE, "15000"),
    _Key("group.consumer.session.timeout.ms", _POSITIVE, "45000"),
    _Key("group.consumer.min.session.timeout.ms", _POSITIVE, "45000"),
    _Key("group.consumer.max.session.timeout.ms", _POSITIVE, "60000"),
    _Key("group.consumer.assignors", _text, "uniform,range"),
    _Key("group.consumer.max.size", _POSITIVE, "1000"),
    # ---- __transaction_state (node.broker.txn; Kafka's keys). Kafka's defaults except
    # 3 partitions (Kafka 50) and 8 MiB segments (Kafka 100 MiB); the replication factor
    # is min(this, live brokers); min.isr is the topic's min.insync.replicas.
    _Key("transaction.state.log.num.partitions", _int_in(1, 1000), "3"),
    _Key("transaction.state.log.replication.factor", _int_in(1, 16), "3"),
    _Key("transaction.state.log.min.isr", _POSITIVE, "2"),
    _Key("transaction.state.log.segment.bytes", _int_in(14, INT_MAX), str(8 * 1024 * 1024)),
    _Key("transaction.state.log.load.buffer.size", _POSITIVE, "5242880"),
    # The transaction coordinator's (node.core.txn.config.TxnConfig), Kafka's defaults.
    # transaction.version is Kafka's feature as a broker key: 2 = KIP-890 (an epoch bump
    # per transaction), 0/1 = without (the kafka-txn chaos profile).
    _Key("transaction.max.timeout.ms", _POSITIVE, "900000"),
    _Key("transactional.id.expiration.ms", _POSITIVE, "604800000"),
    _Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", _POSITIVE, "10000"),
    _Key("transaction.remove.expired.transaction.cleanup.interval.ms", _POSITIVE, "3600000"),
    _Key("transaction.version", _int_in(0, 2), "2"),
    _Key("broker.rack", _rack, ""),
    _Key("log.retention.check.interval.ms", _LONG_POSITIVE, "300000"),
    # Ours (HDFS's block scanner): bytes of sealed segments whose CRCs a background
    # scrubber verifies per second; 0 turns it off.
    _Key("log.scrub.bytes.per.second", _NON_NEGATIVE, "1048576"),
    _Key("replication.truncation.mode", _truncation_mode, LEADER_EPOCH_MODE),
    # KIP-966 (Kafka 4.x's eligible.leader.replicas.version feature): empty = on in
    # leader-epoch mode, off in high-watermark mode (Kafka's ZooKeeper-mode behaviour,
    # which the teaching scenarios show).
    _Key("eligible.leader.replicas.enable", _optional_bool, ""),
    # KIP-966's unclean recovery: Balanced elects the longest log once no eligible
    # replica can lead (every replica heard, or the timeout passed); None never does.
    _Key("unclean.recovery.strategy", _unclean_recovery_strategy, "balanced"),
    _Key("unclean.recovery.timeout.ms", _LONG_POSITIVE, "300000"),
    # Transactions (issue 28), the partition leader's side: KIP-890 part 1, a leader asks
    # the transaction coordinator before the first transactional batch of a transaction.
    _Key("transaction.partition.verification.enable", _bool, "true"),
    _Key("cluster.id", _cluster_id, ""),
) + _CLEANER_KEYS
_BY_NAME = {k.name: k for k in _KEYS}

# Kafka's coarser spellings of two log keys (log.retention.ms wins over .minutes over
# .hours, as Kafka; log.roll.ms over log.roll.hours).
_LOG_ALIASES = {
    "log.retention.hours": ("log.retention.ms", 3600 * 1000, ("log.retention.ms",
                                                               "log.retention.minutes")),
    "log.retention.minutes": ("log.retention.ms", 60 * 1000, ("log.retention.ms",)),
    "log.roll.hours": ("log.roll.ms", 3600 * 1000, ("log.roll.ms",)),
}
# (the compaction keys are parsed by their own block, whatever shm.config names)
_LOG_KEYS = frozenset(LOG_KAFKA_NAMES.values()) - frozenset(COMPACTION_BROKER_KEYS)


def field_name(kafka_key: str) -> str:
    return kafka_key.replace(".", "_")


def broker_config_text(config) -> dict[str, str]:
    """The broker keys (Kafka's names) of ``config`` as text, for DescribeConfigs of a
    broker; unset optional keys are left out."""
    out = {}
    for key in _KEYS:
        value = getattr(config, field_name(key.name), None)
        if value is None:
            continue
        if isinstance(value, float):
            value = repr(value)
        elif isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (tuple, list)):
            value = ",".join(map(str, value))
        out[key.name] = str(value)
    return out


@dataclass(frozen=True)
class BrokerConfig:
    """One broker's configuration; every field is a Kafka key (dots -> underscores).

    Units are in the names (``*_ms``, ``*_bytes``, ``*_seconds``). ``log_dirs`` is a
    tuple; ``broker_rack`` and ``cluster_id`` are None when not set (a broker without
    ``cluster.id`` reads or creates ``/cluster/id`` in the coordinator).
    ``message_max_bytes`` mirrors ``log_config.message_max_bytes``.
    """

    broker_id: int
    zookeeper_connect: str
    listeners: str = "PLAINTEXT://127.0.0.1:9092"
    advertised_listeners: str | None = None
    socket_request_max_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT
    compression_type: str = "producer"
    log_dirs: tuple[str, ...] = ("/tmp/kafka-logs",)
    zookeeper_session_timeout_ms: int = 18000
    zookeeper_connection_timeout_ms: int = 18000
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    delete_topic_enable: bool = True
    replica_lag_time_max_ms: int = 30000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_min_bytes: int = 1
    replica_fetch_response_max_bytes: int = 10485760
    replica_transport: str = "shm"
    replica_fetch_backoff_ms: int = 1000
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    producer_id_expiration_ms: int = 86400000
    producer_id_expiration_check_interval_ms: int = 600000
    log_flush_offset_checkpoint_interval_ms: int = 60000
    request_timeout_ms: int = 30000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    # ---- the group coordinator and __consumer_offsets (see _KEYS)
    offsets_topic_num_partitions: int = 3
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 8 * 1024 * 1024
    offsets_load_buffer_size: int = 5242880
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    offsets_commit_timeout_ms: int = 5000
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 1000
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_min_heartbeat_interval_ms: int = 5000
    group_consumer_max_heartbeat_interval_ms: int = 15000
    group_consumer_session_timeout_ms: int = 45000
    group_consumer_min_session_timeout_ms: int = 45000
    group_consumer_max_session_timeout_ms: int = 60000
    group_consumer_assignors: str = "uniform,range"
    group_consumer_max_size: int = 1000
    # ---- __transaction_state (see _KEYS)
    transaction_state_log_num_partitions: int = 3
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 8 * 1024 * 1024
    transaction_state_log_load_buffer_size: int = 5242880
    transaction_max_timeout_ms: int = 900000
    transactional_id_expiration_ms: int = 604800000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    transaction_version: int = 2
    broker_rack: str | None = None
    log_retention_check_interval_ms: int = 300000
    log_scrub_bytes_per_second: int = 1048576
    replication_truncation_mode: str = LEADER_EPOCH_MODE
    eligible_leader_replicas_enable: bool | None = None
    unclean_recovery_strategy: str = "balanced"
    unclean_recovery_timeout_ms: int = 300000
    transaction_partition_verification_enable: bool = True
    cluster_id: str | None = None
    # log compaction (issue 26): the cleaner's keys
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_io_max_bytes_per_second: float = CLEANER_IO_UNBOUNDED
    log_cleaner_backoff_ms: int = 15000
    log_config: LogConfig = field(default_factory=LogConfig)

    @property
    def eligible_leader_replicas(self) -> bool:
        """KIP-966 in force: set explicitly, or on in leader-epoch mode."""
        if self.eligible_leader_replicas_enable is not None:
            return self.eligible_leader_replicas_enable
        return self.replication_truncation_mode == LEADER_EPOCH_MODE

    def __post_init__(self) -> None:
        if self.replica_fetch_wait_max_ms > self.replica_lag_time_max_ms:
            # Kafka's rule: otherwise a caught-up follower parked in a long poll looks lagging.
            raise ConfigError(
                f"replica.fetch.wait.max.ms ({self.replica_fetch_wait_max_ms}) must be at most "
                f"replica.lag.time.max.ms ({self.replica_lag_time_max_ms})")
        if self.replica_fetch_max_bytes < 64:
            raise ConfigError("replica.fetch.max.bytes must be at least 64")
        self._check_group_keys()
        names = {entry.name for entry in self.listener_list}
        for entry in self.advertised_listener_list:
            if entry.name not in names:
                raise ConfigError(f"advertised.listeners: {entry.name} is not one of the "
                                  f"listeners ({self.listeners})")

    def _check_group_keys(self) -> None:
        """The group coordinator's ranges (node.core.groups.config checks them again)."""
        def ordered(*names: str) -> None:
            values = [getattr(self, field_name(n)) for n in names]
            if values != sorted(values):
                raise ConfigError(" <= ".join(f"{n} ({v})" for n, v in zip(names, values))
                                  + " must hold")
        ordered("group.min.session.timeout.ms", "group.max.session.timeout.ms")
        ordered("group.consumer.min.heartbeat.interval.ms",
                "group.consumer.heartbeat.interval.ms",
                "group.consumer.max.heartbeat.interval.ms")
        ordered("group.consumer.min.session.timeout.ms", "group.consumer.session.timeout.ms",
                "group.consumer.max.session.timeout.ms")
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ConfigError("group.consumer.heartbeat.interval.ms must be less than "
                              "group.consumer.session.timeout.ms")

    # ---- derived ----------------------------------------------------------------------

    @property
    def message_max_bytes(self) -> int:
        return self.log_config.message_max_bytes

    @property
    def listener_list(self) -> tuple[Listener, ...]:
        return parse_listeners("listeners", self.listeners)

    @property
    def advertised_listener_list(self) -> tuple[Listener, ...]:
        """advertised.listeners, else the listeners (Kafka's default)."""
        if self.advertised_listeners is None:
            return self.listener_list
        return parse_listeners("advertised.listeners", self.advertised_listeners)

    def listener(self, name: str) -> Listener | None:
        """The listener ``name`` with its host filled in (empty host: 127.0.0.1)."""
        for entry in self.listener_list:
            if entry.name == name:
                return Listener(entry.name, entry.host or "127.0.0.1", entry.port)
        return None

    def advertised(self, name: str, bound_port: int) -> Listener | None:
        """What clients are told for listener ``name`` bound on ``bound_port``: its
        advertised entry (else the listener itself), a port 0 replaced by the bound one."""
        if self.listener(name) is None:
            return None
        entry = next((e for e in self.advertised_listener_list if e.name == name),
                     self.listener(name))
        return Listener(name, entry.host or self.listener(name).host, entry.port or bound_port)

    @property
    def host(self) -> str:
        """The native (PLAINTEXT) listener's host."""
        return self.listener(NATIVE_LISTENER).host

    @property
    def port(self) -> int:
        """The native (PLAINTEXT) listener's port (0: any free one)."""
        return self.listener(NATIVE_LISTENER).port

    @property
    def bind_endpoint(self) -> str:
        """The ZeroMQ address the ROUTER listener binds (port 0 -> any free port)."""
        return f"tcp://{self.host}:{self.port if self.port else '*'}"

    # ---- construction -----------------------------------------------------------------

    @classmethod
    def from_props(cls, props: dict[str, str]) -> "BrokerConfig":
        """Build from Kafka keys -> text values; ConfigError names the first bad key."""
        values: dict[str, object] = {}
        log_props: dict[str, str] = {}
        compaction: dict[str, object] = {}
        for key, text in props.items():
            if not isinstance(text, str):
                text = str(text).lower() if isinstance(text, bool) else str(text)
            if key in COMPACTION_BROKER_KEYS:
                topic_key = COMPACTION_BROKER_KEYS[key]
                compaction[COMPACTION_TOPIC_KEYS[topic_key][0]] = compaction_value(key, text)
            elif key in _BY_NAME:
                values[field_name(key)] = _BY_NAME[key].parse(key, text)
            elif key == "message.max.bytes" or key in _LOG_KEYS:
                log_props[key] = text
            elif key == "log.dir":
                if "log.dirs" not in props:  # Kafka: log.dirs wins over log.dir
                    values["log_dirs"] = _log_dirs(key, text)
            elif key in _LOG_ALIASES:
                target, scale, stronger = _LOG_ALIASES[key]
                if not any(k in props for k in stronger):
                    value = _int_in(-1, LONG_MAX // scale)(key, text)
                    log_props[target] = str(value * scale if value >= 0 else -1)
            else:
                raise ConfigError(f"{key}: unknown configuration key")
        for key in _KEYS:
            if key.default is None and field_name(key.name) not in values:
                raise ConfigError(f"{key.name}: required configuration key is missing")
        values["log_config"] = with_compaction(_log_config(log_props), compaction)
        try:
            return cls(**values)
        except TypeError as e:  # a bug in the table above, not the user's input
            raise AssertionError(f"BrokerConfig fields and keys disagree: {e}") from None

    @classmethod
    def from_file(cls, path: str) -> "BrokerConfig":
        return cls.from_props(load_properties(path))

    def to_props(self) -> dict[str, str]:
        """The Kafka keys and values of this configuration (round-trips from_props)."""
        out = {}
        for key in _KEYS:
            value = getattr(self, field_name(key.name))
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, tuple):
                text = ",".join(value)
            elif value is None:
                continue
            else:
                text = str(value)
            out[key.name] = text
        for name, kafka in LOG_KAFKA_NAMES.items():
            if kafka not in COMPACTION_BROKER_KEYS:
                out[kafka] = str(getattr(self.log_config, name))
        for key, text in compaction_text(self.log_config).items():
            out[COMPACTION_TOPIC_KEYS[key][2]] = text
        return out


def _log_config(log_props: dict[str, str]) -> LogConfig:
    kwargs = {}
    by_kafka = {kafka: name for name, kafka in LOG_KAFKA_NAMES.items()}
    for key, text in log_props.items():
        kwargs[by_kafka[key]] = _int_in(-1, LONG_MAX)(key, text)
    try:
        return LogConfig(**kwargs)
    except ValueError as e:
        raise ConfigError(str(e)) from None


# ------------------------------------------------------------------ properties files

def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Java properties, the subset Kafka's files use: ``key=value`` or ``key: value``
    lines, ``#``/``!`` comments, blank lines, ``\\`` line continuations. A key given
    twice is an error (Java would silently keep the last)."""
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number = i + 1
        line = lines[i].strip()
        i += 1
        while line.endswith("\\") and not line.endswith("\\\\"):
            line = line[:-1] + (lines[i].strip() if i < len(lines) else "")
            i += 1
        if not line or line[0] in "#!":
            continue
        match = re.match(r"^([^=:\s]+)\s*(?:[=:]\s*|\s+)?(.*)$", line)
        if match is None:
            raise ConfigError(f"{source}:{number}: cannot parse line {line!r}")
        key, value = match.group(1), match.group(2).strip()
        if key in props:
            raise ConfigError(f"{key}: given twice ({source}:{number})")
        props[key] = value
    return props


def load_properties(path: str) -> dict[str, str]:
    try:
        with open(path, "rb") as f:
            data = f.read(PROPERTIES_BYTES_MAX + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    if len(data) > PROPERTIES_BYTES_MAX:
        raise ConfigError(f"{path}: larger than {PROPERTIES_BYTES_MAX} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8") from None
    return parse_properties(text, path)


def write_properties(path: str, props: dict[str, object]) -> None:
    """Write a properties file (tests, the cluster supervisor)."""
    lines = []
    for key, value in props.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        lines.append(f"{key}={value}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


# ------------------------------------------------------------------ topic-level overrides

# Kafka's topic keys -> the LogConfig field they override.
TOPIC_LOG_KEYS = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "roll_ms",
    "segment.index.bytes": "index_size_max_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "flush.messages": "flush_interval_messages",
    "flush.ms": "flush_interval_ms",
    "max.message.bytes": "message_max_bytes",
}
# Kafka's topic keys -> (BrokerConfig field they override, parser).
TOPIC_SETTING_KEYS: dict[str, tuple[str, Callable[[str, str], object]]] = {
    "min.insync.replicas": ("min_insync_replicas", _POSITIVE),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool),
    "compression.type": ("compression_type", _compression_type),
}
TOPIC_KEYS = frozenset(TOPIC_LOG_KEYS) | frozenset(TOPIC_SETTING_KEYS) | frozenset(
    COMPACTION_TOPIC_KEYS)


def check_topic_config(overrides: dict[str, str]) -> None:
    """ConfigError naming the first unknown key or invalid value of a topic config."""
    for key, text in overrides.items():
        text = str(text)
        if key in TOPIC_LOG_KEYS:
            _int_in(-1, LONG_MAX)(key, text)
        elif key in TOPIC_SETTING_KEYS:
            TOPIC_SETTING_KEYS[key][1](key, text)
        elif key in COMPACTION_TOPIC_KEYS:
            compaction_value(key, text)
        else:
            raise ConfigError(f"{key}: unknown topic configuration key")
    topic_log_config(BrokerConfig(broker_id=0, zookeeper_connect="127.0.0.1:2181"),
                     overrides)


def topic_log_config(config: BrokerConfig, overrides: dict[str, str]) -> LogConfig:
    """The broker's LogConfig with a topic's overrides applied (ConfigError if invalid)."""
    changes = {}
    for key, text in overrides.items():
        if key in TOPIC_LOG_KEYS:
            changes[TOPIC_LOG_KEYS[key]] = _int_in(-1, LONG_MAX)(key, str(text))
        elif key in COMPACTION_TOPIC_KEYS:
            changes[COMPACTION_TOPIC_KEYS[key][0]] = compaction_value(key, text)
    if not changes:
        return config.log_config
    try:
        return dataclasses.replace(config.log_config, **changes)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"topic config: {e}") from None


def topic_defaults(config: BrokerConfig) -> dict[str, str]:
    """Every topic config key's value when the topic does not override it: the broker's
    (Kafka's DescribeConfigs DEFAULT_CONFIG / STATIC_BROKER_CONFIG), as strings."""
    def text(value) -> str:
        return ("true" if value else "false") if isinstance(value, bool) else str(value)
    out = {key: text(getattr(config.log_config, name)) for key, name in TOPIC_LOG_KEYS.items()}
    out.update({key: text(getattr(config, name))
                for key, (name, _) in TOPIC_SETTING_KEYS.items()})
    out.update(compaction_text(config.log_config))
    return out


def topic_setting(config: BrokerConfig, overrides: dict[str, str], key: str):
    """A topic-level replication setting (``min.insync.replicas``,
    ``unclean.leader.election.enable``, or a log key), the broker's value if the topic
    does not override it."""
    if key in TOPIC_SETTING_KEYS:
        name, parse = TOPIC_SETTING_KEYS[key]
        if key in overrides:
            return parse(key, str(overrides[key]))
        return getattr(config, name)
    if key in TOPIC_LOG_KEYS:
        return getattr(topic_log_config(config, overrides), TOPIC_LOG_KEYS[key])
    if key in COMPACTION_TOPIC_KEYS:
        return getattr(topic_log_config(config, overrides), COMPACTION_TOPIC_KEYS[key][0])
    raise ConfigError(f"{key}: unknown topic configuration key")
