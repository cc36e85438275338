"""``minikafka topics``: Kafka's kafka-topics.sh (the --bootstrap-server flavour).

Actions (exactly one): --create, --list, --describe, --alter (--partitions), --delete.
Output lines are Kafka's (TopicCommand with an AdminClient)::

    Created topic T.
    Topic: T	PartitionCount: 3	ReplicationFactor: 3	Configs: min.insync.replicas=2
    	Topic: T	Partition: 0	Leader: 0	Replicas: 0,1,2	Isr: 0,1,2

``Configs`` lists the values that differ from the built-in defaults (Kafka lists the
entries whose source is not DEFAULT_CONFIG: topic overrides and broker settings). There
are no topic ids here, so ``TopicId`` is left out, as Kafka does for a zero id. A
partition being reassigned shows ``Adding Replicas`` / ``Removing Replicas``.
Errors: ``Error while executing topic command : <message>`` on one line, exit 1.
"""
from __future__ import annotations

import argparse

from node.tools.common import (ADMIN_TIMEOUT_MS, EXIT_OK, ToolError, guarded,
                               one_line_usage_errors, open_admin, parse_key_values,
                               topic_filter, wait_until)

PROG = "minikafka topics"
ERROR_PREFIX = "Error while executing topic command : "
ACTIONS = ("create", "list", "describe", "alter", "delete")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_usage_errors(parser, PROG)
    parser.add_argument("--bootstrap-server", help="REQUIRED: the broker(s) to connect to, "
                        "host:port[,host:port...]")
    for action in ACTIONS:
        parser.add_argument(f"--{action}", action="store_true")
    parser.add_argument("--topic", help="the topic (a regular expression except for --create)")
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--replication-factor", type=int)
    parser.add_argument("--replica-assignment",
                        help="broker:broker,broker:broker,... (partition by partition)")
    parser.add_argument("--config", action="extend", nargs="+", default=[], metavar="NAME=VALUE",
                        help="a topic config override (repeatable)")
    parser.add_argument("--under-replicated-partitions", action="store_true")
    parser.add_argument("--unavailable-partitions", action="store_true")
    parser.add_argument("--under-min-isr-partitions", action="store_true")
    parser.add_argument("--at-min-isr-partitions", action="store_true")
    parser.add_argument("--topics-with-overrides", action="store_true")
    parser.add_argument("--if-exists", action="store_true")
    parser.add_argument("--if-not-exists", action="store_true")
    parser.set_defaults(func=run)


def run(args) -> int:
    return guarded(ERROR_PREFIX, _run, args)


def _run(args) -> int:
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise ToolError("Command must include exactly one action: --list, --describe, "
                        "--create, --alter or --delete")
    action = actions[0]
    if action in ("create", "alter", "delete") and not args.topic:
        raise ToolError(f"Missing required argument \"[topic]\" for --{action}")
    if action == "alter" and args.partitions is None:
        raise ToolError("--alter needs --partitions (topic configs are changed with "
                        "kafka-configs, which minikafka does not have)")
    admin = open_admin(args.bootstrap_server)
    try:
        return _ACTIONS[action](admin, args)
    finally:
        admin.close()


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """Kafka's --replica-assignment: "0:1,1:2" -> {0: [0, 1], 1: [1, 2]}."""
    out: dict[int, list[int]] = {}
    for partition, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise ToolError(f"--replica-assignment '{text}' is not "
                            f"broker:broker,broker:broker,...") from None
        duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
        if duplicates:
            raise ToolError("Partition replica lists may not contain duplicate entries: "
                            + ",".join(map(str, duplicates)))
        if out and len(brokers) != len(out[0]):
            raise ToolError(f"Partition {partition} has different replication factor: "
                            f"{brokers}")
        out[partition] = brokers
    return out


# ----------------------------------------------------------------- actions

def _create(admin, args) -> int:
    configs = parse_key_values(args.config, "--config")
    if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise ToolError("The replication factor must be between 1 and 32767 inclusive")
    if args.partitions is not None and args.partitions < 1:
        raise ToolError("The partitions must be greater than 0")
    assignment = None
    if args.replica_assignment:
        if args.partitions is not None or args.replication_factor is not None:
            raise ToolError("Option --replica-assignment can't be used with --partitions "
                            "or --replication-factor")
        assignment = parse_replica_assignment(args.replica_assignment)
    if args.topic in admin.list_topics():
        if args.if_not_exists:
            return EXIT_OK
        raise ToolError(f"Topic '{args.topic}' already exists.")
    if "." in args.topic and "_" in args.topic:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or "
              "underscore ('_') could collide. To avoid issues it is best to use either, "
              "but not both.")
    admin.create_topic(args.topic, -1 if args.partitions is None else args.partitions,
                       -1 if args.replication_factor is None else args.replication_factor,
                       config=configs, replica_assignment=assignment,
                       timeout_ms=ADMIN_TIMEOUT_MS)
    print(f"Created topic {args.topic}.")
    return EXIT_OK


def _matching(admin, args) -> list[str]:
    matches = topic_filter(args.topic)
    topics = [t for t in admin.list_topics() if matches(t)]
    if args.topic is not None and not topics and not args.if_exists:
        raise ToolError(f"Topic '{args.topic}' does not exist as expected")
    return topics


def _list(admin, args) -> int:
    for topic in _matching(admin, args):
        print(topic)
    return EXIT_OK


def _delete(admin, args) -> int:
    for topic in _matching(admin, args):
        admin.delete_topic(topic, timeout_ms=ADMIN_TIMEOUT_MS)
    return EXIT_OK


def _alter(admin, args) -> int:
    topics = _matching(admin, args)
    assignment = None
    if args.replica_assignment:
        assignment = parse_replica_assignment(args.replica_assignment)
    for topic in topics:
        current = len(admin.describe_topics([topic])[topic])
        new = None if assignment is None else \
            {p: r for p, r in assignment.items() if p >= current}
        admin.create_partitions(topic, args.partitions, new, timeout_ms=ADMIN_TIMEOUT_MS)
        wait_until(lambda: _has_led_partitions(admin, topic, args.partitions),
                   ADMIN_TIMEOUT_MS / 1000, f"the new partitions of {topic} to have leaders")
    return EXIT_OK


def _has_led_partitions(admin, topic: str, count: int) -> bool:
    partitions = admin.describe_topics([topic])[topic]
    return len(partitions) >= count and all(p.leader >= 0 for p in partitions)


def _describe(admin, args) -> int:
    topics = _matching(admin, args)
    if not topics:
        return EXIT_OK
    descriptions = admin.describe_topics(topics)
    configs = admin.describe_configs(topics)
    live = {b.broker_id for b in admin.describe_cluster().brokers}
    reassignments = admin.list_reassignments()
    for line in describe_lines(descriptions, configs, reassignments, live, args,
                               default_configs()):
        print(line)
    return EXIT_OK


_ACTIONS = {"create": _create, "list": _list, "describe": _describe, "alter": _alter,
            "delete": _delete}


# ----------------------------------------------------------------- describe (pure)

def default_configs() -> dict[str, str]:
    """The value of every topic config key when neither the topic nor the broker sets it."""
    from node.config import BrokerConfig, topic_defaults

    return topic_defaults(BrokerConfig(broker_id=0, zookeeper_connect="127.0.0.1:2181"))


def _ids(values) -> str:
    return ",".join(str(v) for v in values)


def replication_factor(partition, reassignment) -> int:
    """Kafka's getReplicationFactor: during a reassignment, the replicas not being added."""
    if reassignment is not None and set(partition.replicas) & \
            (set(reassignment.adding) | set(reassignment.removing)):
        return len([r for r in reassignment.replicas if r not in reassignment.adding])
    return len(partition.replicas)


def describe_lines(descriptions: dict, configs: dict, reassignments: dict, live: set,
                   options, defaults: dict) -> list[str]:
    """Kafka's --describe output for ``descriptions`` ({topic: [PartitionMetadata]})."""
    under_replicated = getattr(options, "under_replicated_partitions", False)
    unavailable = getattr(options, "unavailable_partitions", False)
    under_min_isr = getattr(options, "under_min_isr_partitions", False)
    at_min_isr = getattr(options, "at_min_isr_partitions", False)
    overrides_only = getattr(options, "topics_with_overrides", False)
    describe_configs = not (under_replicated or unavailable or under_min_isr or at_min_isr)
    lines = []
    for topic in sorted(descriptions):
        partitions = descriptions[topic]
        if not partitions:
            continue
        values = configs.get(topic, {})
        non_default = {k: v for k, v in sorted(values.items()) if defaults.get(k) != v}
        min_isr = int(values.get("min.insync.replicas", defaults.get("min.insync.replicas", 1)))
        if describe_configs and (not overrides_only or non_default):
            first = partitions[0]
            rf = replication_factor(first, reassignments.get((topic, first.partition)))
            lines.append(f"Topic: {topic}\tPartitionCount: {len(partitions)}\t"
                         f"ReplicationFactor: {rf}\tConfigs: "
                         + ",".join(f"{k}={v}" for k, v in non_default.items()))
        if overrides_only:
            continue
        for p in partitions:
            reassignment = reassignments.get((topic, p.partition))
            has_leader = p.leader >= 0
            show = describe_configs or \
                (under_replicated and replication_factor(p, reassignment) > len(p.isr)) or \
                (unavailable and (not has_leader or p.leader not in live)) or \
                (under_min_isr and (not has_leader or len(p.isr) < min_isr)) or \
                (at_min_isr and len(p.isr) == min_isr)
            if not show:
                continue
            line = (f"\tTopic: {topic}\tPartition: {p.partition}\t"
                    f"Leader: {p.leader if has_leader else 'none'}\t"
                    f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")
            if reassignment is not None:
                line += (f"\tAdding Replicas: {_ids(reassignment.adding)}"
                         f"\tRemoving Replicas: {_ids(reassignment.removing)}")
            lines.append(line)
    return lines

