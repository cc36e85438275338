"""``minikafka reassign-partitions``: Kafka's kafka-reassign-partitions.sh (KIP-455 era).

    --generate --topics-to-move-json-file F --broker-list 0,1,2 [--disable-rack-aware]
    --execute  --reassignment-json-file F [--additional]
    --verify   --reassignment-json-file F
    --list
    --cancel   --reassignment-json-file F

Files are Kafka's JSON: topics to move ``{"version":1,"topics":[{"topic":"t"}]}``;
a reassignment ``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],
"log_dirs":["any","any"]}]}`` (``log_dirs`` optional; only "any" is supported — there is
one log directory per broker). Messages are Kafka's. There are no replication
throttles here, so --throttle is not offered and --verify has nothing to clear.

``execute_and_wait`` is the part ``minikafka cluster add-broker/remove-broker`` reuse:
start a reassignment and wait, with progress, until every partition has its target
replicas and no reassignment is listed.
"""
from __future__ import annotations

import json

from node.core import placement
from node.tools.common import (ADMIN_TIMEOUT_MS, EXIT_OK, WAIT_TIMEOUT_S, Progress,
                               ToolError, guarded, one_line_usage_errors, open_admin,
                               parse_broker_list, read_json_file, tp_name, wait_until)

PROG = "minikafka reassign-partitions"
ERROR_PREFIX = "Error: "
ANY_LOG_DIR = "any"
ACTIONS = ("generate", "execute", "verify", "list", "cancel")
CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional "
    "to override this and create a new partition assignment in addition to the existing "
    "one. The --additional flag can also be used to change the throttle by resubmitting "
    "the current reassignment.")


def add_arguments(parser) -> None:
    one_line_usage_errors(parser, PROG)
    parser.add_argument("--bootstrap-server")
    for action in ACTIONS:
        parser.add_argument(f"--{action}", action="store_true")
    parser.add_argument("--topics-to-move-json-file")
    parser.add_argument("--broker-list")
    parser.add_argument("--reassignment-json-file")
    parser.add_argument("--disable-rack-aware", action="store_true")
    parser.add_argument("--additional", action="store_true")
    parser.add_argument("--timeout", type=int, default=10_000,
                        help="ms to wait for the reassignment to be accepted")
    parser.set_defaults(func=run)


def run(args) -> int:
    return guarded(ERROR_PREFIX, _run, args)


REQUIRED = {"generate": ("topics_to_move_json_file", "broker_list"),
            "execute": ("reassignment_json_file",), "verify": ("reassignment_json_file",),
            "cancel": ("reassignment_json_file",), "list": ()}


def _run(args) -> int:
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise ToolError("Command must include exactly one action: --generate, --execute, "
                        "--verify, --cancel, --list")
    action = actions[0]
    if not args.bootstrap_server:
        raise ToolError("Please specify --bootstrap-server")
    for name in REQUIRED[action]:
        if getattr(args, name) is None:
            raise ToolError(f"Missing required argument \"[{name.replace('_', '-')}]\"")
    # Parse the files before connecting: a bad file is reported as such.
    if action == "generate":
        topics = parse_topics_json(read_json_file(args.topics_to_move_json_file,
                                                  "topics-to-move file"))
        brokers = parse_broker_list(args.broker_list)
    elif action != "list":
        targets = parse_reassignment_json(read_json_file(args.reassignment_json_file,
                                                         "reassignment file"))
    admin = open_admin(args.bootstrap_server)
    try:
        if action == "generate":
            current, proposed = generate(admin, topics, brokers, not args.disable_rack_aware)
            print("Current partition replica assignment")
            print(format_reassignment_json(current))
            print()
            print("Proposed partition reassignment configuration")
            print(format_reassignment_json(proposed))
        elif action == "execute":
            execute(admin, targets, args.additional)
        elif action == "verify":
            verify(admin, targets)
        elif action == "cancel":
            cancel(admin, targets)
        else:
            print(list_text(admin.list_reassignments()))
    finally:
        admin.close()
    return EXIT_OK


# ----------------------------------------------------------------- JSON (pure)

def format_reassignment_json(assignment: dict) -> str:
    """Kafka's formatAsReassignmentJson, compact as Jackson writes it."""
    partitions = [{"topic": t, "partition": p, "replicas": list(r),
                   "log_dirs": [ANY_LOG_DIR] * len(r)}
                  for (t, p), r in sorted(assignment.items())]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def parse_topics_json(data) -> list[str]:
    if not isinstance(data, dict):
        raise ToolError("The input string is not a valid JSON")
    version = data.get("version", 1)
    if version != 1:
        raise ToolError(f"Not supported version field value {version}")
    try:
        topics = [str(entry["topic"]) for entry in data.get("topics", [])]
    except (TypeError, KeyError):
        raise ToolError("every entry of \"topics\" needs a \"topic\"") from None
    if not topics:
        raise ToolError("the topics-to-move file names no topic")
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise ToolError("List of topics to reassign contains duplicate entries: "
                        + ",".join(duplicates))
    return topics


def parse_reassignment_json(data) -> dict[tuple[str, int], list[int]]:
    """Kafka's parsePartitionReassignmentData + the checks of parseExecuteAssignmentArgs."""
    if not isinstance(data, dict):
        raise ToolError("The reassignment file is not a JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise ToolError(f"Not supported version field value {version}")
    entries = []
    try:
        for entry in data.get("partitions", []):
            tp = (str(entry["topic"]), int(entry["partition"]))
            replicas = [int(r) for r in entry["replicas"]]
            log_dirs = entry.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
            if len(log_dirs) != len(replicas):
                raise ToolError(f"Size of replicas list {replicas} is different from size of "
                                f"log dirs list {log_dirs} for partition {tp_name(*tp)}")
            if any(d != ANY_LOG_DIR for d in log_dirs):
                raise ToolError(f"log_dirs other than \"any\" are not supported "
                                f"(partition {tp_name(*tp)})")
            entries.append((tp, replicas))
    except (TypeError, KeyError, ValueError, AttributeError):
        raise ToolError("every partition needs \"topic\", \"partition\" and \"replicas\" "
                        "(a list of broker ids)") from None
    if not entries:
        raise ToolError("Partition reassignment list cannot be empty")
    if any(not r for _, r in entries):
        raise ToolError("Partition replica list cannot be empty")
    tps = [tp for tp, _ in entries]
    duplicates = sorted({tp for tp in tps if tps.count(tp) > 1})
    if duplicates:
        raise ToolError("Partition reassignment contains duplicate topic partitions: "
                        + ",".join(tp_name(*tp) for tp in duplicates))
    repeated = [(tp, sorted({b for b in r if r.count(b) > 1})) for tp, r in entries]
    repeated = [(tp, d) for tp, d in repeated if d]
    if repeated:
        raise ToolError("Partition replica lists may not contain duplicate entries: " + ". ".join(
            f"{tp_name(*tp)} contains multiple entries for {','.join(map(str, d))}"
            for tp, d in repeated))
    return dict(entries)


def list_text(reassignments: dict) -> str:
    lines = []
    for (t, p), r in sorted(reassignments.items()):
        line = f"{tp_name(t, p)}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding:
            line += f" adding: {','.join(map(str, r.adding))}."
        if r.removing:
            line += f" removing: {','.join(map(str, r.removing))}."
        lines.append(line)
    if not lines:
        return "No partition reassignments found."
    return "Current partition reassignments:\n" + "\n".join(lines)


# ----------------------------------------------------------------- actions

def current_assignment(admin, topics) -> dict[tuple[str, int], list[int]]:
    described = admin.describe_topics(list(topics))
    return {(t, p.partition): list(p.replicas) for t, parts in described.items() for p in parts}


def _known_brokers(admin) -> dict[int, str | None]:
    return {b.broker_id: b.rack for b in admin.describe_cluster().brokers}


def generate(admin, topics: list[str], brokers: list[int], rack_aware: bool = True):
    """(current, proposed) assignments of ``topics`` over ``brokers`` (Kafka's placement)."""
    known = _known_brokers(admin)
    unknown = [b for b in brokers if b not in known]
    if unknown:
        raise ToolError(f"Unknown broker id {unknown[0]}")
    existing = set(admin.list_topics())
    missing = [t for t in topics if t not in existing]
    if missing:
        raise ToolError(f"Topic {missing[0]} not found.")
    current = current_assignment(admin, topics)
    racks = {b: known[b] for b in brokers} if rack_aware else None
    if rack_aware and any(r is not None for r in racks.values()) and \
            any(r is None for r in racks.values()):
        raise ToolError("Not all brokers have rack information. Add --disable-rack-aware in "
                        "command line to make replica assignment without rack information.")
    proposed = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        try:
            placed = placement.assign_replicas(brokers, racks, len(parts), rf)
        except placement.PlacementError as e:
            raise ToolError(str(e)) from None
        proposed.update({(topic, p): r for p, r in placed.items()})
    return current, proposed


def _check_targets(admin, targets: dict) -> dict:
    """The current replicas of the targets' partitions; unknown brokers or partitions fail."""
    known = _known_brokers(admin)
    for replicas in targets.values():
        for broker in replicas:
            if broker not in known:
                raise ToolError(f"Unknown broker id {broker}")
    topics = sorted({t for t, _ in targets})
    existing = set(admin.list_topics())
    current = current_assignment(admin, [t for t in topics if t in existing])
    missing = [tp for tp in sorted(targets) if tp not in current]
    if missing:
        raise ToolError("Unable to find partition: "
                        + ", ".join(tp_name(*tp) for tp in missing))
    return {tp: current[tp] for tp in targets}


def start(admin, targets: dict, additional: bool = False, out=print,
          show_rollback: bool = True) -> None:
    """Kafka's --execute: print the rollback JSON, submit, print the started partitions."""
    if not additional and admin.list_reassignments():
        raise ToolError(CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE)
    current = _check_targets(admin, targets)
    if show_rollback:
        out("Current partition replica assignment\n\n" + format_reassignment_json(current)
            + "\n\nSave this to use as the --reassignment-json-file option during rollback")
    results = admin.reassign_partitions(targets, timeout_ms=ADMIN_TIMEOUT_MS)
    errors = {tp: e for tp, e in results.items() if e is not None}
    if errors:
        raise ToolError("Error reassigning partition(s): " + "; ".join(
            f"{tp_name(*tp)}: {getattr(e, 'message', e)}" for tp, e in sorted(errors.items())))
    names = ",".join(tp_name(*tp) for tp in sorted(targets))
    out(f"Successfully started partition reassignment{'' if len(targets) == 1 else 's'} "
        f"for {names}")


def execute(admin, targets: dict, additional: bool = False) -> None:
    start(admin, targets, additional)


def states(admin, targets: dict) -> dict[tuple[str, int], tuple[bool, list[int]]]:
    """{tp: (done, current replicas)}: done = no reassignment of tp is listed."""
    ongoing = admin.list_reassignments()
    existing = set(admin.list_topics())
    topics = sorted({t for t, _ in targets if t in existing})
    current = current_assignment(admin, topics)
    out = {}
    for tp in targets:
        if tp in ongoing:
            out[tp] = (False, list(ongoing[tp].replicas))
        else:
            out[tp] = (True, current.get(tp, []))
    return out


def status_lines(targets: dict, found: dict) -> list[str]:
    lines = ["Status of partition reassignment:"]
    for tp in sorted(targets):
        done, replicas = found[tp]
        if not done:
            lines.append(f"Reassignment of partition {tp_name(*tp)} is still in progress.")
        elif replicas == list(targets[tp]):
            lines.append(f"Reassignment of partition {tp_name(*tp)} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {tp_name(*tp)}, but "
                         f"replica set is {','.join(map(str, replicas))} rather than "
                         f"{','.join(map(str, targets[tp]))}.")
    return lines


def verify(admin, targets: dict) -> None:
    for line in status_lines(targets, states(admin, targets)):
        print(line)


def cancel(admin, targets: dict) -> None:
    ongoing = admin.list_reassignments()
    active = sorted(tp for tp in targets if tp in ongoing)
    if not active:
        print("None of the specified partition reassignments are active.")
        return
    results = admin.reassign_partitions({tp: None for tp in active},
                                        timeout_ms=ADMIN_TIMEOUT_MS)
    errors = {tp: e for tp, e in results.items() if e is not None}
    if errors:
        raise ToolError("Error cancelling partition reassignment(s) for: " + "; ".join(
            f"{tp_name(*tp)}: {getattr(e, 'message', e)}" for tp, e in sorted(errors.items())))
    print(f"Successfully cancelled partition reassignment{'' if len(active) == 1 else 's'} "
          f"for: {','.join(tp_name(*tp) for tp in active)}")


def wait_done(admin, targets: dict, timeout_s: float = WAIT_TIMEOUT_S, out=print) -> None:
    """Wait, with progress lines, until every target partition has its target replicas."""
    progress = Progress(f"Reassigning {len(targets)} partition(s)")

    def check() -> bool:
        found = states(admin, targets)
        finished = sum(1 for tp, (done, replicas) in found.items()
                       if done and replicas == list(targets[tp]))
        progress.update(finished, len(targets))
        return finished == len(targets)

    wait_until(check, timeout_s, "the reassignment to complete")
    for tp in sorted(targets):
        out(f"Reassignment of partition {tp_name(*tp)} is completed.")


def execute_and_wait(admin, targets: dict, timeout_s: float = WAIT_TIMEOUT_S,
                     out=print, show_rollback: bool = True) -> None:
    start(admin, targets, additional=False, out=out, show_rollback=show_rollback)
    wait_done(admin, targets, timeout_s, out)
