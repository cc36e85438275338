"""The worker's command line and how its common options map onto each client's own
settings (pure: no client is imported here).

``settings(client, role, args)`` is what the worker sets (and reports in its start
event): only what an option asked for, in the client's own spelling, plus
``auto.offset.reset=earliest`` for consumers (the checker reads from the start) and, for
``native``, today's chaos-worker timeouts (``NATIVE_PRODUCER``).
"""
from __future__ import annotations

import argparse

CLIENTS = ("native", "confluent-kafka", "kafka-python", "aiokafka", "kafkajs")
ROLES = ("producer", "consumer")
DEFAULT_RATE = 200.0
DEFAULT_FLUSH_TIMEOUT_S = 10.0
# The native producer keeps bench.chaos.worker's settings (faults show in seconds).
NATIVE_PRODUCER = {"acks": "all", "request_timeout_ms": 3000, "delivery_timeout_ms": 8000,
                   "retry_backoff_ms": 100, "max_block_ms": 5000, "linger_ms": 0}
NATIVE_SEND_TIMEOUT_S = 10.0      # one synchronous send's wait (bench.chaos.worker's)

# option -> {client: (setting name, role or None for both, value mapping)}
_ACKS_LIBRDKAFKA = {"all": "all", "1": "1", "0": "0"}
_ACKS_PY = {"all": "all", "1": 1, "0": 0}
_ON_OFF_STR = {"on": "true", "off": "false"}
_ON_OFF = {"on": True, "off": False}


class UsageError(Exception):
    """A bad command line: the worker exits 2 with this message."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.chaos.clients",
        description="One chaos workload process through a real Kafka client: JSON-line "
                    "events on stdout (bench.chaos.clients.events).")
    p.add_argument("--client", choices=CLIENTS, required=True)
    p.add_argument("--role", choices=ROLES, required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT,...")
    p.add_argument("--topic", required=True)
    p.add_argument("--duration", type=float, default=0.0,
                   help="seconds of workload; 0: until stdin reaches EOF or SIGTERM")
    p.add_argument("--rate", type=float, default=DEFAULT_RATE, help="sends/s (producer)")
    p.add_argument("--partition", type=int, default=None,
                   help="producer: every send to P; consumer: read only P")
    p.add_argument("--acks", choices=("all", "1", "0"), default=None)
    p.add_argument("--idempotence", choices=("on", "off"), default=None)
    p.add_argument("--group", default=None, help="consumer: subscribe in group G")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any client setting, in the client's own spelling (repeatable)")
    p.add_argument("--request-timeout-ms", type=int, default=None)
    p.add_argument("--delivery-timeout-ms", type=int, default=None)
    p.add_argument("--flush-timeout-s", type=float, default=DEFAULT_FLUSH_TIMEOUT_S)
    p.add_argument("--value-format", choices=("plain", "avro"), default="plain",
                   help="native only: avro values (bench.chaos.worker's CHAOS_VALUE_SCHEMA)")
    p.add_argument("--schema-registry", default=None, metavar="HOST:PORT",
                   help="native avro: the coordinator holding the schema registry")
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse and check the command line; ``UsageError`` (or argparse's exit 2) when bad."""
    args = parser().parse_args(argv)
    if args.duration < 0 or args.rate <= 0 or args.flush_timeout_s < 0:
        raise UsageError("--duration and --flush-timeout-s must be >= 0, --rate > 0")
    if args.partition is not None and args.partition < 0:
        raise UsageError("--partition must be >= 0")
    for opt in ("request_timeout_ms", "delivery_timeout_ms"):
        if getattr(args, opt) is not None and getattr(args, opt) < 1:
            raise UsageError(f"--{opt.replace('_', '-')} must be positive")
    if args.role == "producer" and args.group:
        raise UsageError("--group is for consumers")
    if args.role == "consumer" and (args.acks or args.idempotence or args.delivery_timeout_ms):
        raise UsageError("--acks, --idempotence and --delivery-timeout-ms are for producers")
    if args.value_format != "plain" and args.client != "native":
        raise UsageError("--value-format avro is native-only")
    if args.value_format == "avro" and not args.schema_registry:
        raise UsageError("--value-format avro needs --schema-registry HOST:PORT")
    args.extra = extra_settings(args.set)
    return args


def extra_settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set wants KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out


def typed(value: str):
    """A ``--set`` value for a Python client's keyword argument: int, float, bool, None
    or the string."""
    low = value.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def settings(client: str, role: str, args) -> dict:
    """What the worker sets on ``client``, in its own spelling (see the module doc)."""
    producer = role == "producer"
    out: dict = {}
    if client == "confluent-kafka":
        if args.acks:
            out["acks"] = _ACKS_LIBRDKAFKA[args.acks]
        if args.idempotence:
            out["enable.idempotence"] = _ON_OFF_STR[args.idempotence]
        if args.request_timeout_ms is not None:
            # librdkafka's request.timeout.ms is the producer's ack timeout; a consumer's
            # network requests time out after socket.timeout.ms.
            out["request.timeout.ms" if producer else "socket.timeout.ms"] = \
                str(args.request_timeout_ms)
        if args.delivery_timeout_ms is not None:
            out["delivery.timeout.ms"] = str(args.delivery_timeout_ms)
        if not producer:
            out["auto.offset.reset"] = "earliest"
        out.update(args.extra)
        return out
    if client == "native" and producer:
        out.update(NATIVE_PRODUCER)
    if args.acks:
        out["acks"] = _ACKS_PY[args.acks]
    if args.idempotence:
        out["enable_idempotence"] = _ON_OFF[args.idempotence]
    if args.request_timeout_ms is not None:
        out["request_timeout_ms"] = args.request_timeout_ms
    if args.delivery_timeout_ms is not None:
        if client == "aiokafka":
            raise UsageError("aiokafka has no delivery timeout (its batches expire after "
                             "request_timeout_ms, or never with idempotence)")
        out["delivery_timeout_ms"] = args.delivery_timeout_ms
    if not producer:
        out["auto_offset_reset"] = "earliest"
    out.update({k: typed(v) for k, v in args.extra.items()})
    return out


def argv_for(client: str, **options) -> list[str]:
    """The worker's arguments for ``options`` (Python names: role, name, bootstrap, topic,
    duration, rate, partition, acks, idempotence, group, set (dict or list of
    "k=v"), request_timeout_ms, delivery_timeout_ms, flush_timeout_s, value_format,
    schema_registry); None values are left out."""
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r} (one of {', '.join(CLIENTS)})")
    known = {a.dest for a in parser()._actions} - {"help", "client"}
    unknown = set(options) - known
    if unknown:
        raise ValueError(f"unknown worker options {sorted(unknown)}")
    argv = ["--client", client]
    for key, value in options.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if key == "set":
            pairs = [f"{k}={v}" for k, v in value.items()] if isinstance(value, dict) \
                else list(value)
            for pair in pairs:
                argv += ["--set", pair]
        elif key == "idempotence" and isinstance(value, bool):
            argv += [flag, "on" if value else "off"]
        else:
            argv += [flag, str(value)]
    return argv


GROUP_PROTOCOLS = ("classic", "consumer")


def group_protocol_settings(client: str, protocol: str) -> dict:
    """The ``--set`` settings making ``client``'s group consumer use ``protocol``
    (``classic``, or ``consumer``: KIP-848); ValueError where the client lacks it."""
    if protocol not in GROUP_PROTOCOLS:
        raise ValueError(f"group protocol {protocol!r}: one of {', '.join(GROUP_PROTOCOLS)}")
    if client == "confluent-kafka":
        return {"group.protocol": protocol}
    if client == "native":
        return {"group_protocol": protocol}
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r}")
    if protocol == "classic":
        return {}            # kafka-python, aiokafka, kafkajs: their only protocol
    raise ValueError(f"{client} speaks the classic group protocol only")
