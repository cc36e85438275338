"""What the consumer-group tests with real clients share: the kinds of member, the
cluster settings that make groups quick, records in waves, and the checks on who read
what.

Kinds of member (each a child process, ``bench.perf.kafka_groups.group.Member``):
``confluent-classic`` and ``confluent-consumer`` (librdkafka with ``group.protocol``
classic or consumer, KIP-848), ``kafka-python``, ``aiokafka`` (the Python ones commit
synchronously after each poll), ``kcat`` (``kcat -G``) and ``kafkajs`` (both
auto-commit every 100 ms and on rebalance).
"""
from __future__ import annotations

import json
import uuid
from collections import defaultdict

import pytest

from bench.perf.kafka_groups.group import Member, kcat_member, python_member
from bench.perf.kafka_groups.placement import coordinator_partition
from node.client import Producer
from tests.node.kafka.clients import NODE_SCRIPTS, missing, node_env, skip_if_missing

# Classic members' session timeout and heartbeat interval (client settings), and the
# KIP-848 ones (broker settings, GROUPS_CONFIG): alike, so one bound fits both.
SESSION_MS = 3000
HEARTBEAT_MS = 250
# Kafka's broker keys: no initial rebalance delay, sessions as short as the tests want.
GROUPS_CONFIG = {"group.initial.rebalance.delay.ms": "0",
                 "group.min.session.timeout.ms": "500",
                 "group.consumer.min.session.timeout.ms": "500",
                 "group.consumer.session.timeout.ms": str(SESSION_MS),
                 "group.consumer.min.heartbeat.interval.ms": "50",
                 "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
                 "offsets.topic.num.partitions": "3",
                 "offsets.topic.replication.factor": "3"}
OFFSETS_TOPIC = "__consumer_offsets"
JOIN_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 60.0

# kind -> (the client it needs, group.protocol)
KINDS = {"confluent-classic": ("confluent-kafka", "classic"),
         "confluent-consumer": ("confluent-kafka", "consumer"),
         "kafka-python": ("kafka-python", "classic"),
         "aiokafka": ("aiokafka", "classic"),
         "kcat": ("kcat", "classic"),
         "kafkajs": ("kafkajs", "classic")}
PYTHON_KINDS = ("confluent-classic", "confluent-consumer", "kafka-python", "aiokafka")


def kind_params(kinds=tuple(KINDS)):
    return [pytest.param(k, id=k) for k in kinds]


def skip_unless_present(kind: str) -> None:
    skip_if_missing(KINDS[kind][0])


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def start_member(kind: str, bootstrap: str, group: str, topic: str, name: str, *,
                 session_ms: int = SESSION_MS, heartbeat_ms: int = HEARTBEAT_MS,
                 instance_id: str | None = None, commit: str = "sync") -> Member:
    """One member of ``kind`` in ``group``, reading ``topic`` from the beginning."""
    client, protocol = KINDS[kind]
    if kind in PYTHON_KINDS:
        return python_member(name, client, bootstrap, group, topic, protocol=protocol,
                             session_ms=session_ms, heartbeat_ms=heartbeat_ms,
                             instance_id=instance_id, commit=commit)
    if kind == "kcat":
        return kcat_member(name, bootstrap, group, topic, session_ms=session_ms,
                           heartbeat_ms=heartbeat_ms, instance_id=instance_id)
    assert kind == "kafkajs" and instance_id is None, "kafkajs has no static membership"
    command = {"brokers": bootstrap.split(","), "group": group, "topic": topic,
               "sessionTimeout": session_ms, "heartbeatInterval": heartbeat_ms}
    return Member(name, ["node", str(NODE_SCRIPTS / "kafkajs_group.js"), json.dumps(command)],
                  env=node_env(), topic=topic)


def produce_wave(cluster, topic: str, wave: str, partitions, per_partition: int) -> set[str]:
    """``per_partition`` records to each partition (native producer, acks=all), valued
    ``<wave>:<partition>:<i>``; returns the values."""
    values = set()
    with Producer(cluster.bootstrap_servers, acks="all", linger_ms=5) as producer:
        futures = []
        for p in partitions:
            for i in range(per_partition):
                value = f"{wave}:{p}:{i}"
                values.add(value)
                futures.append(producer.send(topic, value.encode(), partition=p))
        producer.flush(READ_TIMEOUT_S)
        for f in futures:
            f.get(READ_TIMEOUT_S)
    return values


def reads_of(members, wave: str) -> dict[str, list[tuple[str, int, int]]]:
    """value -> [(member, partition, offset)] of each read of a record of ``wave``."""
    out: dict[str, list] = defaultdict(list)
    for m in members:
        for p, o, v, *_ in m.read():
            if v is not None and v.startswith(wave + ":"):
                out[v].append((m.name, p, o))
    return out


def read_all(members, values: set[str], wave: str, timeout_s: float = READ_TIMEOUT_S):
    """Wait until the members have read every one of ``values``; their reads."""
    from tests.waiting import poll_until

    def done():
        reads = reads_of(members, wave)
        return reads if values <= set(reads) else None
    try:
        return poll_until(done, timeout_s, f"every record of wave {wave} to be read",
                          interval_s=0.02)
    except AssertionError as e:
        missing = sorted(values - set(reads_of(members, wave)))
        raise AssertionError(f"{e}: {len(missing)} unread, e.g. {missing[:5]}; " +
                             " | ".join(m.describe() for m in members)) from None


def readers_by_partition(reads) -> dict[int, set[str]]:
    by_partition: dict[int, set[str]] = defaultdict(set)
    for each in reads.values():
        for member, p, _ in each:
            by_partition[p].add(member)
    return by_partition


def assert_one_reader_per_partition(reads, owners: dict[str, frozenset[int]]) -> None:
    """Each partition's records were read by one member, the one that owns it."""
    for p, readers in readers_by_partition(reads).items():
        assert len(readers) == 1, f"partition {p} read by {sorted(readers)}"
        (reader,) = readers
        assert p in owners[reader], f"partition {p} read by {reader}, which owns " \
                                    f"{sorted(owners[reader])}"


def assert_read_once(reads) -> None:
    twice = {v: each for v, each in reads.items() if len(each) > 1}
    assert not twice, f"{len(twice)} records read more than once, e.g. {list(twice.items())[:3]}"


def coordinator_of(cluster, group: str, partitions: int) -> int | None:
    """The broker leading the group's ``__consumer_offsets`` partition (ZooKeeper's
    partition state), or None while it has no leader."""
    state = cluster.partition_state(OFFSETS_TOPIC, coordinator_partition(group, partitions))
    return None if state is None or state.leader < 0 else state.leader


def committed_offsets(cluster, group: str, topic: str, partitions) -> dict[int, int] | None:
    """The group's committed offsets as a fresh client's OffsetFetch sees them (no join),
    or None while the coordinator does not answer."""
    if missing("confluent-kafka"):
        from kafka import KafkaConsumer, TopicPartition
        consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap_servers.split(","),
                                 group_id=group, enable_auto_commit=False)
        try:
            return {p: consumer.committed(TopicPartition(topic, p)) or -1 for p in partitions}
        except Exception:   # the coordinator is moving; asked again
            return None
        finally:
            consumer.close()
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                         "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=5)
    except KafkaException:
        return None
    finally:
        consumer.close()
    if any(tp.error for tp in got):
        return None
    return {tp.partition: tp.offset for tp in got}
