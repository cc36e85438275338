"""``minikafka configs``: Kafka's kafka-configs.sh for topics and brokers.

    minikafka configs --bootstrap-server B --entity-type topics|brokers
        (--entity-name N | --entity-default)
        (--describe [--all] | --alter [--add-config K=V,K=[V1,V2]] [--delete-config K,K])

Output lines are Kafka's::

    Dynamic configs for topic t are:
      retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, ...}
    Completed updating config for topic t.

``--describe`` lists the dynamic configs (a topic's overrides, a broker's or, with
``--entity-default``, the cluster-wide dynamic broker configs); with ``--all`` every
config with its value. A broker's dynamic keys are the defaults of topic configs
(log.retention.ms, min.insync.replicas, compression.type ...); altering another is
refused with the broker's error, as Kafka refuses a key that is not dynamic.
"""
from __future__ import annotations

from node.config import parse_key_values
from node.tools.common import (EXIT_OK, ToolError, guarded, one_line_usage_errors,
                               open_admin)

PROG = "minikafka configs"
ERROR_PREFIX = "Error while executing config command with args: "
ENTITY_TYPES = {"topics": "topic", "brokers": "broker"}
DYNAMIC_SOURCES = {"DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG",
                   "DYNAMIC_DEFAULT_BROKER_CONFIG"}


def add_arguments(parser) -> None:
    one_line_usage_errors(parser, PROG)
    parser.add_argument("--bootstrap-server")
    parser.add_argument("--entity-type", choices=sorted(ENTITY_TYPES))
    parser.add_argument("--entity-name")
    parser.add_argument("--entity-default", action="store_true",
                        help="the cluster-wide dynamic broker configs")
    parser.add_argument("--describe", action="store_true")
    parser.add_argument("--alter", action="store_true")
    parser.add_argument("--all", action="store_true",
                        help="with --describe: every config, not only the overrides")
    parser.add_argument("--add-config", default="", metavar="K=V,K=V")
    parser.add_argument("--delete-config", default="", metavar="K,K")
    parser.set_defaults(func=run)


def run(args) -> int:
    return guarded(ERROR_PREFIX, _run, args)


def _run(args) -> int:
    if args.describe == args.alter:
        raise ToolError("Command must include exactly one action: --describe, --alter")
    if not args.entity_type or bool(args.entity_name) == args.entity_default:
        raise ToolError("--entity-type and one of --entity-name or --entity-default are "
                        "required")
    kind = ENTITY_TYPES[args.entity_type]
    if args.entity_default and kind != "broker":
        raise ToolError("--entity-default is for --entity-type brokers")
    name = "" if args.entity_default else args.entity_name
    if kind == "broker" and name:
        try:
            int(name)
        except ValueError:
            raise ToolError(f"The entity name for brokers must be a broker id, got "
                            f"{name}") from None
    admin = open_admin(args.bootstrap_server)
    try:
        if args.describe:
            _describe(admin, kind, name, args.all)
        else:
            _alter(admin, kind, name, args.add_config, args.delete_config)
    finally:
        admin.close()
    return EXIT_OK


def _describe(admin, kind: str, name: str, everything: bool) -> None:
    if kind == "broker" and not name:    # the cluster-wide ones, asked of any broker
        some = min(b.broker_id for b in admin.describe_cluster().brokers)
        entries = [e for e in admin.describe_config_entries(broker=some)
                   if e.source == "DYNAMIC_DEFAULT_BROKER_CONFIG" or
                   any(s == "DYNAMIC_DEFAULT_BROKER_CONFIG" for _, _, s in e.synonyms)]
        print("Default configs for brokers in the cluster are:")
        for e in entries:
            (value,) = [v for _, v, s in e.synonyms if s == "DYNAMIC_DEFAULT_BROKER_CONFIG"]
            print(f"  {e.name}={value} sensitive={'true' if e.sensitive else 'false'} "
                  f"synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{e.name}={value}}}")
        return
    entries = admin.describe_config_entries(topic=name if kind == "topic" else None,
                                            broker=int(name) if kind == "broker" else None)
    shown = entries if everything else [e for e in entries if e.source in DYNAMIC_SOURCES]
    print(f"{'All' if everything else 'Dynamic'} configs for {kind} {name} are:")
    for e in shown:
        synonyms = ", ".join(f"{source}:{k}={v}" for k, v, source in e.synonyms)
        value = "null" if e.value is None else e.value
        print(f"  {e.name}={value} sensitive={'true' if e.sensitive else 'false'} "
              f"synonyms={{{synonyms}}}")


def split_add_config(text: str) -> list[str]:
    """``--add-config``'s K=V pairs, split on the commas outside square brackets; a list
    value is given in brackets, as Kafka's kafka-configs takes it
    (``cleanup.policy=[compact,delete]``), and loses them."""
    pairs, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ToolError(f"--add-config {text!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            pairs.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise ToolError(f"--add-config {text!r}: unbalanced '['")
    pairs.append("".join(current))
    out = []
    for pair in (p for p in pairs if p.strip()):
        key, sep, value = pair.partition("=")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out.append(f"{key}{sep}{value}")
    return out


def _alter(admin, kind: str, name: str, add: str, delete: str) -> None:
    pairs = split_add_config(add)
    to_set = parse_key_values(pairs, "--add-config")
    to_delete = [k.strip() for k in delete.split(",") if k.strip()]
    if not to_set and not to_delete:
        raise ToolError("At least one of --add-config or --delete-config must be specified "
                        "with --alter")
    if kind == "broker":
        admin.alter_broker_configs(name, set=to_set, delete=to_delete)
    else:
        admin.alter_configs(name, set=to_set, delete=to_delete)
    print(f"Completed updating config for {kind} {name}." if name else
          "Completed updating default config for brokers in the cluster.")
