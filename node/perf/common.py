"""What the perf tools share: one-line errors, Kafka-style properties, the topic check,
percentiles as Kafka's tools take them."""
from __future__ import annotations

import argparse
import logging
import sys

from node.wire import errors
from node.wire.errors import ErrorCode
from node.client import KafkaTimeoutError
from node.config import ConfigError, parse_key_values
from node.tools.common import ToolError

CLUSTER_CHECK_TIMEOUT_MS = 10_000
NS_PER_MS = 1_000_000
MB_BYTES = 1024 * 1024  # Kafka's tools' "MB"


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse with Kafka-tool manners: a bad flag is one line on stderr, exit 2.

    Unknown arguments are reported by the subparser itself (argparse would hand them
    to the top-level parser, which prints its usage too)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def add_tool_parser(subparsers, name: str, help: str, description: str):
    parser = subparsers.add_parser(name, help=help, description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.__class__ = OneLineArgumentParser  # the parent's class is not ours to choose
    return parser


def run_tool(name: str, body, args) -> int:
    """Run ``body(args)``; user-facing failures become one line on stderr and exit 1."""
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    try:
        return body(args)
    except (ToolError, ConfigError) as e:
        message = str(e)
    except (errors.KafkaError, KafkaTimeoutError, TimeoutError, ValueError, OSError) as e:
        message = f"{type(e).__name__}: {e}" if not isinstance(e, errors.KafkaError) else str(e)
    except KeyboardInterrupt:
        print(f"minikafka {name}: interrupted", file=sys.stderr)
        return 130
    print(f"minikafka {name}: error: {message}", file=sys.stderr, flush=True)
    return 1


def parse_props(pairs, flag: str) -> dict[str, str]:
    """``--producer-props a=1 b=2``: each argument may hold several pairs."""
    return parse_key_values(pairs, flag, split_whitespace=True)


def bootstrap_of(flag_value: str | None, props: dict[str, str]) -> str:
    servers = flag_value or props.get("bootstrap.servers")
    if not servers:
        raise ToolError("--bootstrap-server (or bootstrap.servers in the properties) "
                        "is required")
    return servers


def check_topic(bootstrap: str, topic: str) -> dict:
    """The topic's partitions ({partition: PartitionMetadata}) from a live broker.

    Fails fast with a ToolError when no broker answers or the topic does not exist,
    instead of the clients' long waits (max.block.ms, request.timeout.ms)."""
    from node.client.admin import Admin

    try:
        admin = Admin(bootstrap_servers=bootstrap, request_timeout_ms=CLUSTER_CHECK_TIMEOUT_MS)
    except ValueError as e:
        raise ToolError(str(e)) from None
    try:
        md = admin.meta.refresh([topic], timeout_ms=CLUSTER_CHECK_TIMEOUT_MS, merge=False)
    except (errors.KafkaError, KafkaTimeoutError) as e:
        raise ToolError(f"cannot reach the cluster at {bootstrap}: {e}") from None
    finally:
        admin.net.close()
    if topic in md.topic_errors or not md.topics.get(topic):
        code = md.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        raise ToolError(f"Topic {topic} does not exist ({errors.error_for(code).name})")
    return md.topics[topic]


def percentile(sorted_values, fraction: float) -> float:
    """Kafka's tools: the value at index int(fraction * n) of the sorted values."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    return float(sorted_values[min(n - 1, int(fraction * n))])


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value
