"""``minikafka mirror-maker``: Kafka's MirrorMaker (kafka-mirror-maker.sh), the Kafka
paper's deployment: a consumer group on the source cluster, an acks=all producer to the
target, source offsets committed only after the target acknowledged.

    minikafka mirror-maker --consumer.config SOURCE.properties \\
        --producer.config TARGET.properties --include 'orders|clicks.*' \\
        [--offset.commit.interval.ms 60000]

The consumer config takes ``bootstrap.servers`` and ``group.id`` (required), and
``auto.offset.reset`` (default latest, as Kafka's consumer), ``group.protocol``
(``consumer``, the brokers' group coordinator with KIP-848, by default; ``classic``,
the same coordinator with JoinGroup/SyncGroup; ``zookeeper`` for the Kafka paper's
groups), ``zookeeper.connect`` (those groups' coordinator; default: asked of a
source broker) and ``client.id``; the producer config takes
``bootstrap.servers`` and the producer keys of ``console-producer`` (acks is all unless
set). ``--whitelist`` is Kafka's old name of ``--include``.

Each record goes to the same topic, partition, key, headers and timestamp in the target, so the
target's partitions hold the source's records in the source's order. A topic missing in
the target is created with the source's partition count (the target's default
replication factor); one with fewer partitions stops the mirror with one line. Every
``--offset.commit.interval.ms``, before partitions are revoked in a rebalance, and on
SIGTERM/Ctrl-C, the producer is flushed and then the positions of what it sent are
committed in the source group. A failed send stops the mirror without committing
(Kafka's abort.on.send.failure): a restart sends again from the last commit, so a crash
can repeat records in the target but never loses or reorders them.
"""
from __future__ import annotations

import re
import signal
import sys
import time

from node.tools.common import (EXIT_OK, ToolError, guarded, one_line_usage_errors,
                               read_properties_file)

PROG = "minikafka mirror-maker"
ERROR_PREFIX = "ERROR "
POLL_MS = 100


def add_arguments(parser) -> None:
    one_line_usage_errors(parser, PROG)
    parser.add_argument("--consumer.config", dest="consumer_config", required=True)
    parser.add_argument("--producer.config", dest="producer_config", required=True)
    parser.add_argument("--include", default=None, help="a regular expression of topics")
    parser.add_argument("--whitelist", default=None, help="Kafka's old name of --include")
    parser.add_argument("--offset.commit.interval.ms", dest="commit_interval_ms", type=int,
                        default=60_000)
    parser.set_defaults(func=run)


def run(args) -> int:
    return guarded(ERROR_PREFIX, _run, args)


class _Stop(BaseException):
    """SIGTERM: a BaseException, so no ``except Exception`` on the way takes it for a
    failure."""


def _raise_stop(*_):
    raise _Stop()


def _run(args) -> int:
    include = args.include or args.whitelist
    if not include:
        raise ToolError("--include (a regular expression of the topics to mirror) is required")
    try:
        re.compile(include)
    except re.error as e:
        raise ToolError(f"--include {include!r} is not a valid regular expression: {e}") from None
    if args.commit_interval_ms < 1:
        raise ToolError("--offset.commit.interval.ms must be positive")
    source = read_properties_file(args.consumer_config)
    target = read_properties_file(args.producer_config)
    for name, config, keys in (("consumer", source, ("bootstrap.servers", "group.id")),
                               ("producer", target, ("bootstrap.servers",))):
        missing = [k for k in keys if not config.get(k)]
        if missing:
            raise ToolError(f"--{name}.config {getattr(args, name + '_config')}: missing "
                            f"{', '.join(missing)}")
    mirror = Mirror(source, target, include, args.commit_interval_ms / 1000)
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGTERM,)}
    try:
        mirror.run()
    except (_Stop, KeyboardInterrupt):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # one stop is enough: finish it
        mirror.checkpoint()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        mirror.close()
    return EXIT_OK


class Mirror:
    def __init__(self, source: dict, target: dict, include: str, commit_every_s: float):
        from node.client import Admin, Consumer, Producer
        from node.client.group import GroupError
        from node.tools.console import PRODUCER_CONFIGS, _client_kwargs
        kwargs = _client_kwargs({k: v for k, v in target.items() if k in PRODUCER_CONFIGS},
                                PRODUCER_CONFIGS, "--producer.config")
        kwargs.setdefault("acks", "all")
        self.source_admin = Admin(source["bootstrap.servers"])
        self.target_admin = Admin(target["bootstrap.servers"])
        try:
            self.producer = Producer(target["bootstrap.servers"], **kwargs)
        except ValueError as e:
            raise ToolError(f"producer config: {e}") from None
        try:
            self.consumer = Consumer(
                source["bootstrap.servers"], group_id=source["group.id"],
                auto_offset_reset=source.get("auto.offset.reset", "latest"),
                enable_auto_commit=False, zookeeper_connect=source.get("zookeeper.connect"),
                client_id=source.get("client.id"),
                group_protocol=source.get("group.protocol", "consumer"))
        except (ValueError, GroupError) as e:
            raise ToolError(f"consumer config: {e}") from None
        self.include = include
        self.commit_every_s = commit_every_s
        self.sent: dict = {}            # (topic, partition) -> next source offset sent
        self.futures: list = []
        self.known_topics: set[str] = set()
        self.next_commit_s = time.monotonic() + commit_every_s
        self.mirrored = 0

    # The consumer calls these inside poll (node.client.group's listener).
    def on_partitions_revoked(self, tps) -> None:
        self.checkpoint()
        for tp in tps:
            self.sent.pop((tp.topic, tp.partition), None)

    def on_partitions_assigned(self, tps) -> None:
        self._ensure_topics({tp.topic for tp in tps})

    def run(self) -> None:
        from node.client.group import GroupError
        try:
            self.consumer.subscribe(pattern=self.include, listener=self)
        except GroupError as e:
            raise ToolError(str(e)) from None
        while True:
            for r in self.consumer.poll(POLL_MS):
                self.futures.append(self.producer.send(
                    r.topic, r.value, key=r.key, partition=r.partition,
                    timestamp_ms=r.timestamp, headers=r.headers or None))
                self.sent[(r.topic, r.partition)] = r.offset + 1
                self.mirrored += 1
            if time.monotonic() >= self.next_commit_s:
                self.checkpoint()

    def checkpoint(self) -> None:
        """Flush the producer; once everything sent is acknowledged, commit it."""
        self.next_commit_s = time.monotonic() + self.commit_every_s
        if not self.sent:
            return
        positions = dict(self.sent)
        self.producer.flush()
        for future in self.futures:
            try:
                future.get(timeout=0)
            except Exception as e:     # abort.on.send.failure: stop, commit nothing
                raise ToolError(f"a send to the target failed, nothing more is committed "
                                f"(a restart goes on from the last commit): {e}") from None
        self.futures.clear()
        self.consumer.commit(positions)

    def _ensure_topics(self, topics: set[str]) -> None:
        from node.wire.errors import KafkaError
        for topic in sorted(topics - self.known_topics):
            source = self.source_admin.describe_topics([topic]).get(topic) or []
            try:
                existing = self.target_admin.describe_topics([topic]).get(topic) or []
            except KafkaError:
                existing = []
            if not existing:
                try:
                    self.target_admin.create_topic(topic, len(source))
                except KafkaError as e:
                    if "exists" not in str(e).lower():
                        raise ToolError(f"cannot create {topic} in the target: {e}") from None
                existing = self.target_admin.describe_topics([topic]).get(topic) or []
            if len(existing) < len(source):
                raise ToolError(f"topic {topic} has {len(existing)} partitions in the "
                                f"target and {len(source)} in the source: records could not "
                                f"keep their partition")
            self.known_topics.add(topic)

    def close(self) -> None:
        for closer in (self.consumer.close, lambda: self.producer.close(timeout=10),
                       self.source_admin.close, self.target_admin.close):
            try:
                closer()
            except Exception as e:   # closing the rest matters more
                sys.stderr.write(f"{ERROR_PREFIX}while closing: {e}\n")
