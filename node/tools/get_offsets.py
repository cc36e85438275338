"""``minikafka get-offsets``: Kafka's kafka-get-offsets.sh (GetOffsetShell).

    minikafka get-offsets --bootstrap-server B [--topic REGEX] [--partitions 0,1]
        [--time latest|-1|earliest|-2|MS]

Prints ``topic:partition:offset`` per partition, sorted as Kafka sorts them (by
``topic-partition`` text). ``--time MS`` gives the first offset whose record timestamp
is at or after MS (the brokers' time index); a partition with no such record is left
out, as Kafka's tool leaves it out. A partition whose leader cannot answer is reported
on stderr ("Skip getting offsets ...") and the others are still printed.
"""
from __future__ import annotations

import sys

from node.wire import errors
from node.tools.common import (EXIT_OK, ToolError, guarded, one_line_usage_errors,
                               open_admin, topic_filter)

PROG = "minikafka get-offsets"
ERROR_PREFIX = "Error occurred: "
TIMES = {"latest": -1, "-1": -1, "earliest": -2, "-2": -2}


def add_arguments(parser) -> None:
    one_line_usage_errors(parser, PROG)
    parser.add_argument("--bootstrap-server")
    parser.add_argument("--topic", help="a topic or a regular expression (default: all)")
    parser.add_argument("--partitions", help="comma-separated partition ids (default: all)")
    parser.add_argument("--time", default="latest",
                        help="-1 or latest, -2 or earliest, or a timestamp in ms")
    parser.set_defaults(func=run)


def run(args) -> int:
    return guarded(ERROR_PREFIX, _run, args)


def parse_time(text: str) -> int:
    text = str(text).strip()
    if text in TIMES:
        return TIMES[text]
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 0:
        raise ToolError(f"Malformed time argument {text}. Please use -1 or latest / -2 or "
                        f"earliest, or a specified long format timestamp")
    return value


def _partition_set(text: str | None) -> set[int] | None:
    if not text:
        return None
    try:
        return {int(p) for p in text.split(",")}
    except ValueError:
        raise ToolError(f"--partitions expects a comma separated list of numeric partition "
                        f"ids, but received: {text}") from None


def _run(args) -> int:
    from node.client.consumer import Consumer
    time_ms = parse_time(args.time)
    partitions = _partition_set(args.partitions)
    allowed = topic_filter(args.topic)
    admin = open_admin(args.bootstrap_server)
    try:
        topics = [t for t in admin.list_topics() if allowed(t)]
        described = admin.describe_topics(topics) if topics else {}
    finally:
        admin.close()
    tps = [(topic, meta.partition) for topic, metas in described.items() for meta in metas
           if partitions is None or meta.partition in partitions]
    if not tps:
        raise ToolError("Could not match any topic-partitions with the specified filters")
    found: dict[tuple[str, int], int | None] = {}
    with Consumer(args.bootstrap_server, client_id="GetOffsetShell") as consumer:
        for tp in tps:     # one at a time: a partition without a leader spoils no other
            try:
                if time_ms == -1:
                    found[tp] = consumer.end_offsets([tp])[_key(tp)]
                elif time_ms == -2:
                    found[tp] = consumer.beginning_offsets([tp])[_key(tp)]
                else:
                    entry = consumer.offsets_for_times({tp: time_ms})[_key(tp)]
                    found[tp] = None if entry is None else entry.offset
            except errors.KafkaError as e:
                sys.stderr.write(f"Skip getting offsets for topic-partition "
                                 f"{tp[0]}-{tp[1]} due to error: {e.message or e.name}\n")
    for (topic, partition), offset in sorted(found.items(),
                                             key=lambda item: f"{item[0][0]}-{item[0][1]}"):
        if offset is not None:
            print(f"{topic}:{partition}:{offset}")
    return EXIT_OK


def _key(tp):
    from node.client import TopicPartition
    return TopicPartition(*tp)
