"""``minikafka consumer-groups``: Kafka's kafka-consumer-groups.sh, for both kinds of
group this cluster has: the brokers' groups (classic and KIP-848 "consumer", kept by
the group coordinator in ``__consumer_offsets``; ``node.tools.groups_broker``), and,
with ``--zookeeper-groups``, the Kafka paper's groups (registries in ZooKeeper;
``node.tools.groups_zookeeper``).

    minikafka consumer-groups --bootstrap-server B --list [--state [S,..]] [--type [T,..]]
    minikafka consumer-groups --bootstrap-server B --describe (--group G | --all-groups)
        [--members [--verbose] | --state [--verbose] | --offsets]
    minikafka consumer-groups --bootstrap-server B --reset-offsets --group G
        (--topic T[:P,P...] | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --shift-by N | --to-datetime ISO)
        [--dry-run | --execute]
    minikafka consumer-groups --bootstrap-server B --delete --group G
    minikafka consumer-groups --bootstrap-server B --delete-offsets --group G --topic T[:P,..]
    (any of them with --zookeeper-groups: the paper's groups)

Output is Kafka's: the same columns, widths and blank lines. ``--list --type`` shows
each group's type (Classic, Consumer; ZooKeeper for the paper's groups); with
``--verbose`` as Kafka 4: ``--describe --state`` adds GROUP-EPOCH and
TARGET-ASSIGNMENT-EPOCH, ``--members`` each member's CURRENT-EPOCH, CURRENT-ASSIGNMENT,
TARGET-EPOCH and TARGET-ASSIGNMENT, the offsets LEADER-EPOCH ("-" where a kind of group
has none). An offset reset and a deletion are refused while the group has
members (Kafka: the group must be inactive); new offsets outside [log start, log end]
are moved to the nearest end, with Kafka's warning. Errors are one line on stderr and
a non-zero exit.
"""
from __future__ import annotations

import datetime
import sys

from node.tools.common import EXIT_ERROR, EXIT_OK, ToolError, guarded, one_line_usage_errors

PROG = "minikafka consumer-groups"
ERROR_PREFIX = "Error: "
MISSING = "-"
SCENARIOS = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_datetime")
ACTIONS = ("list", "describe", "reset_offsets", "delete", "delete_offsets")


def add_arguments(parser) -> None:
    one_line_usage_errors(parser, PROG)
    parser.add_argument("--bootstrap-server")
    actions = parser.add_mutually_exclusive_group()
    for flag in ("--list", "--describe", "--reset-offsets", "--delete", "--delete-offsets"):
        actions.add_argument(flag, action="store_true")
    parser.add_argument("--zookeeper-groups", action="store_true",
                        help="the Kafka paper's groups (registries in ZooKeeper) instead "
                        "of the brokers' groups")
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--all-groups", action="store_true")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true")
    view.add_argument("--state", nargs="?", const="", default=None,
                      help="with --describe: the group's state; with --list: show (and "
                      "filter by, comma-separated) the state")
    view.add_argument("--offsets", action="store_true")
    parser.add_argument("--type", nargs="?", const="", default=None,
                        help="with --list: show (and filter by) the type: classic, "
                        "consumer (zookeeper with --zookeeper-groups)")
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
    if not any(getattr(args, a) for a in ACTIONS):
        raise ToolError("Command must include exactly one action: --list, --describe, "
                        "--delete, --reset-offsets, --delete-offsets")
    if not args.bootstrap_server:
        raise ToolError("Missing required argument \"[bootstrap-server]\"")
    groups_source = _source(args)
    try:
        if args.list:
            return _list(args, groups_source.list_groups())
        groups = _groups(args, groups_source)
        if args.describe:
            return _describe(args, groups_source, groups)
        if args.reset_offsets:
            return _reset(args, groups_source, groups)
        if args.delete_offsets:
            return _delete_offsets(args, groups_source, groups)
        return _delete(groups_source, groups)
    finally:
        groups_source.close()


def _source(args):
    if args.zookeeper_groups:
        from node.tools.groups_zookeeper import ZooKeeperGroups
        return ZooKeeperGroups(args.bootstrap_server)
    from node.tools.groups_broker import BrokerGroups
    return BrokerGroups(args.bootstrap_server)


def _groups(args, source) -> list[str]:
    from node.client.group import GroupError, check_group_id
    if args.all_groups and not args.describe:
        raise ToolError("--all-groups is only supported with --describe here")
    if args.all_groups:
        return [g.group_id for g in source.list_groups()]
    if not args.group:
        action = next(a for a in ACTIONS if getattr(args, a)).replace("_", "-")
        raise ToolError(f"Option [{action}] takes one of these options: [all-groups], "
                        f"[group]")
    for group in args.group:
        try:
            check_group_id(group)
        except GroupError as e:
            raise ToolError(str(e)) from None
    return args.group


# ------------------------------------------------------------------ list

def _list(args, listed) -> int:
    if args.state is None and args.type is None:
        for g in listed:
            print(g.group_id)
        return EXIT_OK
    states = {s.strip().lower() for s in (args.state or "").split(",") if s.strip()}
    types = {t.strip().lower() for t in (args.type or "").split(",") if t.strip()}
    listed = [g for g in listed if (not states or g.state.lower() in states)
              and (not types or g.type.lower() in types)]
    width = max([15] + [len(g.group_id) for g in listed]) + 10
    header, cells = ["GROUP"], [lambda g: g.group_id]
    if args.type is not None:
        header.append("TYPE")
        cells.append(lambda g: g.type)
    if args.state is not None:
        header.append("STATE")
        cells.append(lambda g: g.state)
    widths = [width] + [20] * (len(header) - 1)
    print(_row(header, widths))
    for g in listed:
        print(_row([c(g) for c in cells], widths))
    return EXIT_OK


# ------------------------------------------------------------------ describe

def _describe(args, source, groups: list[str]) -> int:
    for group in groups:
        info = source.describe(group)
        if info is None or not info.exists:
            raise ToolError(f"Consumer group '{group}' does not exist.")
        if info.state == "Empty" and args.state is None:
            sys.stderr.write(f"\nConsumer group '{group}' has no active members.\n")
        elif info.state in ("PreparingRebalance", "CompletingRebalance", "Assigning",
                            "Reconciling"):
            sys.stderr.write(f"\nWarning: Consumer group '{group}' is rebalancing.\n")
        if args.members:
            _print_members(info, args.verbose)
        elif args.state is not None:
            _print_state(info, args.verbose)
        else:
            _print_offsets(args, info)
    return EXIT_OK


def _print_offsets(args, info) -> None:
    owners = info.owners()
    tps = sorted(set(owners) | set(info.offsets))
    if not tps:
        return
    ends = _log_end_offsets(args.bootstrap_server, tps)
    rows = []
    verbose = args.verbose          # Kafka 4: the committed offsets' leader epochs
    for tp in tps:
        member = owners.get(tp)
        current = info.offsets.get(tp)
        end = ends.get(tp)
        lag = end - current if current is not None and end is not None else None
        rows.append((info.group_id, tp[0], str(tp[1])) +
                    ((_text(info.leader_epochs.get(tp)),) if verbose else ()) +
                    (_text(current), _text(end), _text(lag),
                     member.member_id if member else MISSING,
                     member.host if member else MISSING,
                     member.client_id if member else MISSING))
    at = 4 if verbose else 3          # where CURRENT-OFFSET is
    widths = [max(15, *(len(r[0]) for r in rows)), max(15, *(len(r[1]) for r in rows)),
              10] + ([15] if verbose else []) + \
        [15, 15, 15, max(15, *(len(r[at + 3]) for r in rows)),
         max(15, *(len(r[at + 4]) for r in rows))]
    header = ("GROUP", "TOPIC", "PARTITION") + (("LEADER-EPOCH",) if verbose else ()) + \
        ("CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")
    out = ["", _row(header, widths)] + [_row(r, widths) for r in rows]
    print("\n".join(out))
    print()


def _print_members(info, verbose: bool) -> None:
    """Kafka 4's --members: with --verbose, each member's epoch and assignment and the
    coordinator's target for it (KIP-848 groups; "-" where a kind has none)."""
    members = sorted(info.members, key=lambda m: m.member_id)
    with_instance = any(m.instance_id for m in members)
    rows = []
    for m in members:
        row = [info.group_id, m.member_id] + ([m.instance_id or ""] if with_instance else [])
        rows.append(row + [m.host, m.client_id, str(len(m.assignment)),
                           _text(m.member_epoch), _assignment(m.assignment),
                           _text(info.assignment_epoch if m.target is not None else None),
                           _assignment(m.target) if m.target is not None else MISSING])
    names = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
        ["HOST", "CLIENT-ID", "#PARTITIONS"]
    minimum = [15, 15] + ([17] if with_instance else []) + [15, 15]
    widths = [max([w] + [len(r[i]) for r in rows]) for i, w in enumerate(minimum)] + [15]
    base = len(widths)
    if verbose:
        names += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        widths += [15, max([20] + [len(r[base + 1]) for r in rows]), 15]
    print()
    print(_row(names, widths))
    for r in rows:
        print(_row(r if verbose else r[:base], widths))


def _assignment(tps) -> str:
    if not tps:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    return ", ".join(sorted(f"{t}({','.join(str(p) for p in sorted(ps))})"
                            for t, ps in by_topic.items()))


def _print_state(info, verbose: bool) -> None:
    width = max(25, len(info.coordinator))
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    row = [info.group_id, info.coordinator, info.assignment_strategy or MISSING, info.state]
    widths = [width, 25, 20, 15]
    if verbose and info.group_epoch is not None:        # Kafka 4, KIP-848 groups
        header += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [str(info.group_epoch), _text(info.assignment_epoch)]
        widths += [15, 25]
    print()
    print(_row(header + ["#MEMBERS"], widths))
    print(_row(row + [str(len(info.members))], widths))
    print()


def _row(values, widths) -> str:
    """Kafka's "%-Ws" cells: each value padded to its width, the rest as they are."""
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


# ------------------------------------------------------------------ reset

def _reset(args, source, groups: list[str]) -> int:
    from node.client import Consumer, TopicPartition
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
    plans = {}
    with Consumer(args.bootstrap_server, client_id="minikafka-consumer-groups") as c:
        for group in groups:
            # A group that does not exist yet may be given offsets (Kafka allows it too).
            info = source.describe(group)
            if info is not None and info.exists and not info.inactive:
                raise ToolError(f"Assignments can only be reset if the group '{group}' is "
                                f"inactive, but the current state is {info.state}.")
            committed = info.offsets if info is not None else {}
            tps = _reset_partitions(args, committed, c)
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
                    if tp not in committed:
                        raise ToolError(f"Cannot shift offset for partition {tp[0]}-{tp[1]} "
                                        f"since there is no current committed offset")
                    target = committed[tp] + args.shift_by
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
            source.commit(group, plan)
    return EXIT_OK


def _topic_specs(args) -> list[tuple[str, list[int] | None]]:
    specs = []
    for text in args.topic:
        topic, _, parts = text.partition(":")
        try:
            chosen = [int(p) for p in parts.split(",")] if parts else None
        except ValueError:
            raise ToolError(f"--topic {text}: partitions must be numbers, as "
                            f"topic:0,1") from None
        specs.append((topic, chosen))
    return specs


def _partition_count(consumer, topic: str) -> int:
    from node.wire.errors import KafkaError
    try:
        md = consumer.meta.refresh([topic])
    except KafkaError:
        md = consumer.meta.current
    count = md.partition_count(topic)
    if not count:
        raise ToolError(f"Topic '{topic}' does not exist as expected")
    return count


def _reset_partitions(args, committed: dict, consumer) -> list[tuple[str, int]]:
    if args.all_topics:
        specs = [(t, None) for t in sorted({t for t, _ in committed})]
    else:
        specs = _topic_specs(args)
    out = []
    for topic, chosen in specs:
        count = _partition_count(consumer, topic)
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


# ------------------------------------------------------------------ delete

def _delete(source, groups: list[str]) -> int:
    failed = {}
    for group in groups:
        why = source.delete(group)
        if why is not None:
            failed[group] = why
    done = [g for g in groups if g not in failed]
    if done:
        print("Deletion of requested consumer groups ('" + "', '".join(done) +
              "') was successful.")
    if failed:
        raise ToolError("Deletion of some consumer groups failed: " + " ".join(
            f"* Group '{g}' could not be deleted due to: {why}" for g, why in failed.items()))
    return EXIT_OK


def _delete_offsets(args, source, groups: list[str]) -> int:
    from node.client import Consumer
    if len(groups) != 1:
        raise ToolError("Option [delete-offsets] takes exactly one --group")
    if not args.topic:
        raise ToolError("Option [delete-offsets] takes one of these options: [topic]")
    group = groups[0]
    with Consumer(args.bootstrap_server, client_id="minikafka-consumer-groups") as c:
        tps = [(t, p) for t, chosen in _topic_specs(args)
               for p in (chosen if chosen is not None else range(_partition_count(c, t)))]
    code, results = source.delete_offsets(group, tps)
    from node.client.coordinator import error_name
    topics = ", ".join(t for t, _ in _topic_specs(args))
    messages = {0: f"Request succeed for deleting offsets with topic {topics} group {group}",
                24: f"'{group}' is not valid.", 69: f"'{group}' does not exist.",
                68: f"Deleting offsets of a consumer group '{group}' is forbidden if the "
                    f"group is not empty.",
                86: "Encounter some partition level error, see the follow-up details:"}
    line = messages.get(code, f"Encounter some unknown error: {error_name(code)}")
    (print if code == 0 else lambda m: sys.stderr.write(ERROR_PREFIX + m + "\n"))(line)
    print(f"\n{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}", end="")
    for (topic, partition), error in sorted(results.items()):
        status = "Successful" if not error else f"Error: :{error_name(error)}"
        print(f"\n{topic:<30} {partition:<15} {status:<15}", end="")
    print()
    return EXIT_OK if code == 0 else EXIT_ERROR
