"""``minikafka leader-election``: Kafka's kafka-leader-election.sh (KIP-460).

    minikafka leader-election --bootstrap-server B --election-type preferred|unclean
        (--all-topic-partitions | --topic T --partition P | --path-to-json-file F)

The brokers accept an election by writing it to the coordinator and the controller
performs it; this tool then waits (with progress) until the metadata shows the result
— the preferred replica leading (preferred), a live leader (unclean) — so that, as
with Kafka's tool, "Successfully completed" means completed. Output lines are Kafka's::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: <error>

``--all-topic-partitions`` asks for the partitions that need an election (preferred:
led by another replica than the first; unclean: without a leader) and reports the
others as already elected (ELECTION_NOT_NEEDED).
"""
from __future__ import annotations

from node.wire import errors
from node.tools.common import (ADMIN_TIMEOUT_MS, EXIT_OK, WAIT_TIMEOUT_S, Progress,
                               ToolError, guarded, one_line_usage_errors, open_admin,
                               read_json_file, tp_name, wait_until)

PROG = "minikafka leader-election"
ERROR_PREFIX = "Error: "


def add_arguments(parser) -> None:
    one_line_usage_errors(parser, PROG)
    parser.add_argument("--bootstrap-server")
    parser.add_argument("--election-type", type=str.lower)
    parser.add_argument("--all-topic-partitions", action="store_true")
    parser.add_argument("--topic")
    parser.add_argument("--partition", type=int)
    parser.add_argument("--path-to-json-file")
    parser.add_argument("--wait-timeout-s", type=float, default=WAIT_TIMEOUT_S,
                        help="how long to wait for the elections to complete")
    parser.set_defaults(func=run)


def run(args) -> int:
    return guarded(ERROR_PREFIX, _run, args)


def _validate(args) -> None:
    missing = [f for f, v in (("bootstrap-server", args.bootstrap_server),
                              ("election-type", args.election_type)) if v is None]
    if missing:
        raise ToolError(f"Missing required option(s): {', '.join(missing)}")
    if args.election_type not in ("preferred", "unclean"):
        raise ToolError(f"--election-type must be preferred or unclean, got "
                        f"'{args.election_type}'")
    chosen = [args.topic is not None, args.all_topic_partitions,
              args.path_to_json_file is not None]
    if sum(chosen) != 1:
        raise ToolError("One and only one of the following options is required: topic, "
                        "all-topic-partitions, path-to-json-file")
    if args.topic is not None and args.partition is None:
        raise ToolError("Missing required option(s): partition")
    if args.topic is None and args.partition is not None:
        raise ToolError("Option partition is only allowed if topic is used")


def _json_partitions(path: str) -> list[tuple[str, int]]:
    data = read_json_file(path, "election file")
    if not isinstance(data, dict) or "partitions" not in data:
        raise ToolError("Replica election data is missing \"partitions\" field")
    out = []
    try:
        for entry in data["partitions"]:
            out.append((str(entry["topic"]), int(entry["partition"])))
    except (TypeError, KeyError, ValueError):
        raise ToolError(f"{path}: every partition needs \"topic\" and \"partition\"") from None
    duplicates = sorted({tp for tp in out if out.count(tp) > 1})
    if duplicates:
        raise ToolError("Replica election data contains duplicate partitions: "
                        + ",".join(tp_name(*tp) for tp in duplicates))
    return out


def needs_election(kind: str, partition, live: set) -> bool:
    if kind == "preferred":
        return partition.leader != partition.replicas[0]
    return partition.leader < 0 or partition.leader not in live


def elected(kind: str, partition, live: set) -> bool:
    if partition is None:
        return False
    if kind == "preferred":
        return partition.leader == partition.replicas[0]
    return partition.leader >= 0 and partition.leader in live


def _run(args) -> int:
    _validate(args)
    kind = args.election_type
    requested = None
    if args.topic is not None:
        requested = [(args.topic, args.partition)]
    elif args.path_to_json_file is not None:
        requested = _json_partitions(args.path_to_json_file)
    admin = open_admin(args.bootstrap_server)
    try:
        return elect(admin, kind, requested, args.wait_timeout_s)
    finally:
        admin.close()


def elect(admin, kind: str, requested, wait_timeout_s: float = WAIT_TIMEOUT_S) -> int:
    """Elect leaders of ``requested`` [(topic, partition)] (None: every partition that
    needs it), wait until done and print Kafka's lines; ToolError if any failed."""
    label = kind.upper()
    noop: list[tuple[str, int]] = []
    failed: dict[tuple[str, int], Exception] = {}
    if requested is None:   # all partitions: ask for those that need it
        live = {b.broker_id for b in admin.describe_cluster().brokers}
        everything = admin.describe_topics(None)
        requested = []
        for topic, partitions in everything.items():
            for p in partitions:
                (requested if needs_election(kind, p, live) else noop).append(
                    (topic, p.partition))
    started = []
    if requested:
        results = admin.elect_leaders(kind, requested, timeout_ms=ADMIN_TIMEOUT_MS)
        for tp in requested:
            problem = results.get(tp)
            if problem is None:
                started.append(tp)
            elif isinstance(problem, errors.ElectionNotNeededError):
                noop.append(tp)
            else:
                failed[tp] = problem
    succeeded = _wait_for_elections(admin, kind, started, wait_timeout_s, failed)
    if succeeded:
        print(f"Successfully completed leader election ({label}) for partitions "
              + ", ".join(tp_name(*tp) for tp in sorted(succeeded)))
    if noop:
        print("Valid replica already elected for partitions "
              + ", ".join(tp_name(*tp) for tp in sorted(noop)))
    for tp, problem in sorted(failed.items()):
        name = type(problem).__name__
        detail = problem.message if isinstance(problem, errors.KafkaError) else str(problem)
        print(f"Error completing leader election ({label}) for partition: {tp_name(*tp)}: "
              f"{name}: {detail}")
    if failed:
        raise ToolError(f"{len(failed)} replica(s) could not be elected")
    return EXIT_OK


def _wait_for_elections(admin, kind: str, started: list, timeout_s: float,
                        failed: dict) -> list:
    """The partitions of ``started`` whose election shows in the metadata; the ones that
    do not within ``timeout_s`` go to ``failed``."""
    if not started:
        return []
    progress = Progress(f"Waiting for {len(started)} leader election(s)")
    topics = sorted({t for t, _ in started})
    done: set = set()

    def check() -> bool:
        live = {b.broker_id for b in admin.describe_cluster().brokers}
        described = admin.describe_topics(topics)
        for topic, partition in started:
            parts = {p.partition: p for p in described.get(topic, [])}
            if elected(kind, parts.get(partition), live):
                done.add((topic, partition))
        progress.update(len(done), len(started))
        return len(done) == len(started)

    try:
        wait_until(check, timeout_s, "the elections to complete")
    except ToolError:
        for tp in started:
            if tp not in done:
                failed[tp] = errors.RequestTimedOutError("Timeout waiting for election results")
    return [tp for tp in started if tp in done]
