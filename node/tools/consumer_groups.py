"""``minikafka consumer-groups``: Kafka's kafka-consumer-groups.sh over the Kafka paper's
group registries in the coordinator (``node.client.group``).

    minikafka consumer-groups --bootstrap-server B --list
    minikafka consumer-groups --bootstrap-server B --describe (--group G | --all-groups)
        [--members [--verbose] | --state | --offsets]
    minikafka consumer-groups --bootstrap-server B --reset-offsets --group G
        (--topic T[:P,P...] | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --shift-by N | --to-datetime ISO)
        [--dry-run | --execute]
    minikafka consumer-groups --bootstrap-server B --delete --group G

Output is Kafka's: the same columns, widths and blank lines. The coordinator is found
through a broker (its ``zookeeper.connect``), as the consumers find it. An offset
reset and a deletion are refused while the group has members (Kafka: the group must be
inactive); new offsets outside [log start, log end] are moved to the nearest end, with
Kafka's warning. Errors are one line on stderr and a non-zero exit.
"""
from __future__ import annotations

import datetime
import json
import sys

from node.tools.common import (EXIT_OK, ToolError, guarded, one_line_usage_errors,
                               open_admin)

PROG = "minikafka consumer-groups"
ERROR_PREFIX = "Error: "
MISSING = "-"
SCENARIOS = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_datetime")


def add_arguments(parser) -> None:
    one_line_usage_errors(parser, PROG)
    parser.add_argument("--bootstrap-server")
    actions = parser.add_mutually_exclusive_group()
    for flag in ("--list", "--describe", "--reset-offsets", "--delete"):
        actions.add_argument(flag, action="store_true")
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--all-groups", action="store_true")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true")
    view.add_argument("--state", action="store_true")
    view.add_argument("--offsets", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--topic", action="append", default=[])
    parser.add_argument("--all-topics", action="store_true")
    scenario = parser.add_mutually_exclusive_group()
    scenario.add_argument("--to-earliest", action="store_true")
    scenario.add_argument("--to-latest", action="store_true")
    scenario.add_argument("--to-offset", type=int)
    scenario.add_argument("--shift-by", type=int)
    scenario.add_argument("--to-datetime")
    run_mode = parser.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true")
    run_mode.add_argument("--execute", action="store_true")
    parser.set_defaults(func=run)


def run(args) -> int:
    return guarded(ERROR_PREFIX, _run, args)


def _run(args) -> int:
    if not (args.list or args.describe or args.reset_offsets or args.delete):
        raise ToolError("Command must include exactly one action: --list, --describe, "
                        "--delete, --reset-offsets")
    admin = open_admin(args.bootstrap_server)
    try:
        _, configs = admin.describe_broker_config()
    finally:
        admin.close()
    zk = _coordinator(configs["zookeeper.connect"])
    try:
        if args.list:
            from node.client.group import list_groups
            for group in list_groups(zk):
                print(group)
            return EXIT_OK
        groups = _groups(args, zk)
        if args.describe:
            return _describe(args, zk, groups)
        if args.reset_offsets:
            return _reset(args, zk, groups)
        return _delete(zk, groups)
    finally:
        zk.stop()
        zk.close()


def _coordinator(address: str):
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError
    zk = KazooClient(hosts=address, timeout=10)
    try:
        zk.start(timeout=10)
    except KazooTimeoutError:
        zk.close()
        raise ToolError(f"cannot reach the coordinator at {address}") from None
    return zk


def _groups(args, zk) -> list[str]:
    from node.client.group import GroupError, check_group_id, list_groups
    if args.all_groups and not args.describe:
        raise ToolError("--all-groups is only supported with --describe here")
    if args.all_groups:
        return list_groups(zk)
    if not args.group:
        action = "describe" if args.describe else "reset-offsets" if args.reset_offsets \
            else "delete"
        raise ToolError(f"Option [{action}] takes one of these options: [all-groups], "
                        f"[group]")
    for group in args.group:
        try:
            check_group_id(group)
        except GroupError as e:
            raise ToolError(str(e)) from None
    return args.group


def _view(zk, group: str):
    from node.client.group import read_group
    view = read_group(zk, group)
    if view is None:
        raise ToolError(f"Consumer group '{group}' does not exist.")
    return view


# ------------------------------------------------------------------ describe

def _describe(args, zk, groups: list[str]) -> int:
    for group in groups:
        view = _view(zk, group)
        if view.state == "Empty" and not args.state:
            sys.stderr.write(f"\nConsumer group '{group}' has no active members.\n")
        elif view.state == "PreparingRebalance":
            sys.stderr.write(f"\nWarning: Consumer group '{group}' is rebalancing.\n")
        if args.members:
            _print_members(view, args.verbose)
        elif args.state:
            _print_state(view, zk)
        else:
            _print_offsets(args, view)
    return EXIT_OK


def _entry(view, member: str) -> tuple[str, str]:
    entry = view.members.get(member) or {}
    return str(entry.get("host", MISSING)), str(entry.get("client_id", MISSING))


def _print_offsets(args, view) -> None:
    tps = sorted(set(view.owners) | set(view.offsets))
    if not tps:
        return
    ends = _log_end_offsets(args.bootstrap_server, tps)
    rows = []
    for tp in tps:
        member = view.owners.get(tp)
        member = member if member in view.members else None
        host, client = _entry(view, member) if member else (MISSING, MISSING)
        current = view.offsets.get(tp)
        end = ends.get(tp)
        lag = end - current if current is not None and end is not None else None
        rows.append((view.group_id, tp[0], str(tp[1]), _text(current), _text(end),
                     _text(lag), member or MISSING, host, client))
    widths = [max(15, *(len(r[0]) for r in rows)), max(15, *(len(r[1]) for r in rows)),
              10, 15, 15, 15, max(15, *(len(r[6]) for r in rows)),
              max(15, *(len(r[7]) for r in rows))]
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "HOST", "CLIENT-ID")
    out = ["", _row(header, widths)] + [_row(r, widths) for r in rows]
    print("\n".join(out))
    print()


def _print_members(view, verbose: bool) -> None:
    assigned: dict[str, list] = {m: [] for m in view.members}
    for tp, member in view.owners.items():
        if member in assigned:
            assigned[member].append(tp)
    rows = []
    for member in sorted(view.members):
        host, client = _entry(view, member)
        rows.append((view.group_id, member, host, client, str(len(assigned[member])),
                     _assignment(assigned[member])))
    widths = [max(15, *(len(r[0]) for r in rows), 0), max(15, *(len(r[1]) for r in rows), 0),
              max(15, *(len(r[2]) for r in rows), 0), max(15, *(len(r[3]) for r in rows), 0),
              15]
    header = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    print()
    print(_row(header, widths) + " " + ("ASSIGNMENT" if verbose else ""))
    for r in rows:
        print(_row(r[:5], widths) + " " + (r[5] if verbose else ""))


def _assignment(tps: list) -> str:
    if not tps:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    return ", ".join(sorted(f"{t}({','.join(str(p) for p in sorted(ps))})"
                            for t, ps in by_topic.items()))


def _print_state(view, zk) -> None:
    host, port = zk.hosts[0] if zk.hosts else ("-", "-")
    coordinator = f"{host}:{port}  (zookeeper)"
    width = max(25, len(coordinator))
    fmt = [width, 25, 20, 15]
    print()
    print(_row(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"), fmt))
    print(_row((view.group_id, coordinator, "range", view.state, str(len(view.members))), fmt))
    print()


def _row(values, widths) -> str:
    cells = [str(v).ljust(w) for v, w in zip(values, widths)]
    return " ".join(cells + [str(v) for v in values[len(widths):]])


def _text(value) -> str:
    return MISSING if value is None else str(value)


def _log_end_offsets(bootstrap: str, tps) -> dict:
    from node.client import Consumer, TopicPartition
    from node.wire.errors import KafkaError
    with Consumer(bootstrap, client_id="minikafka-consumer-groups") as consumer:
        try:
            found = consumer.end_offsets([TopicPartition(*tp) for tp in tps])
        except KafkaError:
            found = {}
    return {(tp.topic, tp.partition): o for tp, o in found.items()}


# ------------------------------------------------------------------ reset and delete

def _reset(args, zk, groups: list[str]) -> int:
    from node.client import Consumer, TopicPartition
    from node.client.group import write_offsets
    scenario = [s for s in SCENARIOS if getattr(args, s) not in (None, False)]
    if not scenario:
        raise ToolError("Option [reset-offsets] takes one of these options: "
                        "[to-datetime], [to-earliest], [to-latest], [shift-by], "
                        "[to-offset]")
    if bool(args.topic) == args.all_topics:
        raise ToolError("Option [reset-offsets] takes one of these options: [all-topics], "
                        "[topic]")
    when = _datetime_ms(args.to_datetime) if args.to_datetime is not None else None
    if not args.dry_run and not args.execute:
        sys.stderr.write("WARN: No action will be performed as the --execute option is "
                         "missing. You should add the --dry-run option explicitly if you "
                         "are scripting this command.\n")
    from node.client.group import GroupView, read_group
    plans = {}
    for group in groups:
        # A group that does not exist yet may be given offsets (Kafka allows it too).
        view = read_group(zk, group) or GroupView(group, {}, {}, {}, {})
        if view.members:
            raise ToolError(f"Assignments can only be reset if the group '{group}' is "
                            f"inactive, but the current state is {view.state}.")
        tps = _reset_partitions(args, view, zk)
        with Consumer(args.bootstrap_server, client_id="minikafka-consumer-groups") as c:
            keys = [TopicPartition(*tp) for tp in tps]
            starts = {(k.topic, k.partition): o for k, o in c.beginning_offsets(keys).items()}
            ends = {(k.topic, k.partition): o for k, o in c.end_offsets(keys).items()}
            found = c.offsets_for_times({k: when for k in keys}) if when is not None else {}
        plan = {}
        for tp in tps:
            if args.to_earliest:
                target = starts[tp]
            elif args.to_latest:
                target = ends[tp]
            elif args.to_offset is not None:
                target = args.to_offset
            elif args.shift_by is not None:
                if tp not in view.offsets:
                    raise ToolError(f"Cannot shift offset for partition {tp[0]}-{tp[1]} "
                                    f"since there is no current committed offset")
                target = view.offsets[tp] + args.shift_by
            else:
                hit = found.get(TopicPartition(*tp))
                target = ends[tp] if hit is None else hit.offset
            plan[tp] = _in_range(tp, target, starts[tp], ends[tp])
        plans[group] = plan
    print(f"\n{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'NEW-OFFSET':<15}", end="")
    for group, plan in plans.items():
        for (topic, partition), offset in sorted(plan.items()):
            print(f"\n{group:<30} {topic:<30} {partition:<10} {offset:<15}", end="")
    print()
    if args.execute:
        for group, plan in plans.items():
            write_offsets(zk, group, plan)
    return EXIT_OK


def _reset_partitions(args, view, zk) -> list[tuple[str, int]]:
    if args.all_topics:
        topics = sorted({t for t, _ in view.offsets} | set(view.partitions))
        specs = [(t, None) for t in topics]
    else:
        specs = []
        for text in args.topic:
            topic, _, parts = text.partition(":")
            try:
                chosen = [int(p) for p in parts.split(",")] if parts else None
            except ValueError:
                raise ToolError(f"--topic {text}: partitions must be numbers, as "
                                f"topic:0,1") from None
            specs.append((topic, chosen))
    out = []
    for topic, chosen in specs:
        if not zk.exists(f"/brokers/topics/{topic}"):
            raise ToolError(f"Topic '{topic}' does not exist as expected")
        count = len(json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"])
        for p in chosen if chosen is not None else range(count):
            if not 0 <= p < count:
                raise ToolError(f"Partition {p} of topic {topic} does not exist")
            out.append((topic, p))
    return out


def _in_range(tp, offset: int, start: int, end: int) -> int:
    if offset < start:
        sys.stderr.write(f"New offset ({offset}) is lower than earliest offset for topic "
                         f"partition {tp[0]}-{tp[1]}. Value will be set to {start}\n")
        return start
    if offset > end:
        sys.stderr.write(f"New offset ({offset}) is higher than latest offset for topic "
                         f"partition {tp[0]}-{tp[1]}. Value will be set to {end}\n")
        return end
    return offset


def _datetime_ms(text: str) -> int:
    """Kafka's --to-datetime: 'YYYY-MM-DDTHH:mm:SS.sss' with an optional zone (local
    time without one)."""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ToolError(f"Error parsing timestamp. It does not contain a valid date time "
                        f"format ('YYYY-MM-DDTHH:mm:SS.sss' with an optional zone): "
                        f"{text}") from None
    if when.tzinfo is None:
        when = when.astimezone()
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise ToolError(f"--to-datetime {text} is before 1970")
    return ms


def _delete(zk, groups: list[str]) -> int:
    from node.client.group import delete_group
    for group in groups:
        view = _view(zk, group)
        if view.members:
            raise ToolError(f"Deletion of some consumer groups failed: * Group '{group}' "
                            f"could not be deleted due to: GroupNotEmptyException: The "
                            f"group is not empty.")
    for group in groups:
        delete_group(zk, group)
    print("Deletion of requested consumer groups ('" + ", ".join(groups) +
          "') was successful.")
    return EXIT_OK
