"""Kafka's command-line tools as ``minikafka`` subcommands (same flags, same output lines).

- ``topics`` (kafka-topics.sh): ``node.tools.topics``
- ``console-producer`` / ``console-consumer``: ``node.tools.console``
- ``leader-election`` (kafka-leader-election.sh): ``node.tools.leader_election``
- ``reassign-partitions`` (kafka-reassign-partitions.sh): ``node.tools.reassign``
- ``consumer-groups`` (kafka-consumer-groups.sh): ``node.tools.consumer_groups``
- ``mirror-maker`` (kafka-mirror-maker.sh): ``node.tools.mirror_maker``
- ``get-offsets`` (kafka-get-offsets.sh, GetOffsetShell): ``node.tools.get_offsets``
- ``configs`` (kafka-configs.sh, topics and brokers): ``node.tools.configs``
- ``transactions`` (kafka-transactions.sh: list, describe): ``node.tools.transactions``
- ``schemas``: the Avro schema registry in the coordinator: ``node.tools.schemas``
- ``cluster add-broker`` / ``cluster remove-broker``: ``node.cluster.scale``
- what they share (one-line errors, flags, admin connection, progress): ``node.tools.common``

``add_subcommands(sub)`` mounts the tools on the ``minikafka`` parser (``node.cli``).
"""
from __future__ import annotations

TOOLS = {
    "topics": ("node.tools.topics", "add_arguments",
               "create, list, describe, alter and delete topics (kafka-topics)"),
    "console-producer": ("node.tools.console", "add_producer_arguments",
                         "produce lines of stdin (kafka-console-producer)"),
    "console-consumer": ("node.tools.console", "add_consumer_arguments",
                         "print records to stdout (kafka-console-consumer)"),
    "leader-election": ("node.tools.leader_election", "add_arguments",
                        "preferred or unclean leader election (kafka-leader-election)"),
    "reassign-partitions": ("node.tools.reassign", "add_arguments",
                            "generate, execute and verify reassignments "
                            "(kafka-reassign-partitions)"),
    "consumer-groups": ("node.tools.consumer_groups", "add_arguments",
                        "list, describe, reset offsets of and delete consumer groups (the "
                        "brokers', or the paper's with --zookeeper-groups) "
                        "(kafka-consumer-groups)"),
    "mirror-maker": ("node.tools.mirror_maker", "add_arguments",
                     "copy topics from one cluster to another (kafka-mirror-maker)"),
    "get-offsets": ("node.tools.get_offsets", "add_arguments",
                    "offsets by time, earliest or latest (kafka-get-offsets)"),
    "configs": ("node.tools.configs", "add_arguments",
                "describe and alter topic and broker configs (kafka-configs)"),
    "transactions": ("node.tools.transactions", "add_arguments",
                     "list and describe transactions (kafka-transactions)"),
    "schemas": ("node.tools.schemas", "add_arguments",
                "list, show and register Avro schemas in the registry"),
}


def add_subcommands(sub) -> None:
    import importlib

    for name, (module, function, help_text) in TOOLS.items():
        parser = sub.add_parser(name, help=help_text, description=help_text)
        getattr(importlib.import_module(module), function)(parser)
