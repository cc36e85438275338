"""The chaos run's command line and its profiles: ``chaos run|sweep|check|replay``'s
flags, what each profile sets on the brokers and on the workload's clients, and the
checks of flag combinations (``UsageError``: one line, exit 2).

A profile maps to worker options (``bench.chaos.clients.worker_command``) the same way
for every client; everything else keeps the client's own default:

- ``safe``: acks all, idempotence on;
- ``acks1``: acks 1, idempotence off;
- ``unclean``, ``hw-truncation``: acks all, idempotence on.

``--idempotence on|off`` overrides the profile's (e.g. ``off`` for kafkajs, whose
idempotent producer is marked experimental and acknowledges writes it never made after
a timed-out request: see ``bench/chaos/clients/kafkajs_worker.js``); without the
idempotent producer a duplicate is counted and shown, not an anomaly.

``--group`` makes the consumers members of the group ``chaos-group`` (``--consumers``
defaults to 2 then, so there is a rebalance to judge). ``--group-protocol`` picks
the classic protocol or KIP-848's ``consumer`` protocol; only the clients that speak
KIP-848 take ``consumer`` (native, whose default it is, and confluent-kafka's
``group.protocol=consumer``); omitted, each client uses its own default (classic for
every real client).
"""
from __future__ import annotations

import argparse

from node.tools.common import ToolError

TOPIC = "chaos"
PARTITIONS = 3
GROUP = "chaos-group"
GROUP_CONSUMERS = 2          # --consumers when --group is given without it
PROFILES = {
    "safe": {"acks": "all", "idempotence": "on", "min.insync.replicas": "2",
             "broker": {"unclean.leader.election.enable": "false",
                        "replication.truncation.mode": "leader-epoch"}},
    "acks1": {"acks": "1", "idempotence": "off", "min.insync.replicas": "1",
              "broker": {"unclean.leader.election.enable": "false"}},
    # An out-of-sync replica may be elected when no ISR member is left: it lacks what
    # the ISR acknowledged (the seeds' acks=all walkthrough, its last step).
    "unclean": {"acks": "all", "idempotence": "on", "min.insync.replicas": "1",
                "broker": {"unclean.leader.election.enable": "true",
                           "replication.truncation.mode": "leader-epoch"}},
    # Kafka before KIP-101: a restarted follower truncates to its high watermark, so a
    # double failure loses acknowledged writes (seeds 000/001/004, KIP-101 scenario 1).
    "hw-truncation": {"acks": "all", "idempotence": "on", "min.insync.replicas": "2",
                      "broker": {"unclean.leader.election.enable": "false",
                                 "replication.truncation.mode": "high-watermark"}},
    # Kafka's transactions without their defences (issue 28): no KIP-890 part 1 (the
    # partition leader appends a transactional write without asking the coordinator
    # whether the partition was added) and no part 2 (no epoch bump per transaction).
    # Every other profile keeps the brokers' defaults: both on.
    "kafka-txn": {"acks": "all", "idempotence": "on", "min.insync.replicas": "2",
                  "broker": {"unclean.leader.election.enable": "false",
                             "replication.truncation.mode": "leader-epoch",
                             "transaction.partition.verification.enable": "false",
                             "transaction.version": "0"}},
}
TXN_DEFENCES = ("transaction.partition.verification.enable", "transaction.version")
WORKLOADS = ("plain", "txn")
REPLICA_TRANSPORTS = ("fetch", "shm")
REPLICA_TRANSPORT_HELP = ("the brokers' replica.transport: shm (the default: followers "
                          "copy from the leader's segments through shared memory) or "
                          "fetch (Fetch requests over sockets; the only one, and the "
                          "default, with --netns)")
BROKER_SETTINGS = {"zookeeper.session.timeout.ms": "4000", "replica.lag.time.max.ms": "4000",
                   "replica.fetch.wait.max.ms": "100",
                   # A group's first JoinGroup is answered at once (Kafka's default waits
                   # 3 s, and 3 s more per member arriving): the run's seconds go to faults,
                   # and every later member's arrival is a rebalance the checker judges.
                   "group.initial.rebalance.delay.ms": "0"}


def cluster_config(profile: str, replica_transport: str = "shm",
                   segment_bytes: int | None = None) -> dict[str, str]:
    """The brokers' settings of a run under ``profile`` (``segment_bytes``: the internal
    topics', ``__consumer_offsets`` and ``__transaction_state``, as the chaos topic's:
    ``--segment-bytes``).

    The profile's ``min.insync.replicas`` is the brokers' default too, not only the chaos
    topic's: ``__consumer_offsets`` (created by the brokers with no such override, as
    Kafka's) inherits it. With the default of 1 a group's offset commits are acknowledged
    by a lone ISR member, and a power failure of that broker loses them: the committed
    offset goes down (sweep confluent-kafka seed 3, commit_backwards), which the profile
    promises not to happen to the records themselves either."""
    p = PROFILES[profile]
    out = {**BROKER_SETTINGS, **p["broker"], "min.insync.replicas": p["min.insync.replicas"],
           "replica.transport": replica_transport}
    if segment_bytes is not None:
        out["offsets.topic.segment.bytes"] = str(segment_bytes)
        out["transaction.state.log.segment.bytes"] = str(segment_bytes)
    return out


COMPOSE_HELP = ("the seed draws rounds of one or two overlapping faults (Jepsen's "
                "composed nemeses) instead of one fault at a time")
DEFAULT_FAULTS = "kill,pause,restart,controller,coordinator"
SWEEP_FAULTS = "kill,pause,restart,controller,coordinator,coordinator-pause,slow,power-failure"


SEGMENT_BYTES_MIN = 64 * 1024   # a producer's batch (16 KiB by default) fits many times
SEGMENT_BYTES_HELP = ("the chaos topic's segment.bytes (default: the brokers' 1 GiB, so a "
                      "run never rolls), and the internal topics' (__consumer_offsets, "
                      "__transaction_state; default 8 MiB): small segments roll every few "
                      "seconds, so the faults land on rolls, their background flushes, "
                      "the recovery of sealed segments and the cleaner too; at least "
                      f"{SEGMENT_BYTES_MIN}")


def topic_config(min_insync_replicas: str, segment_bytes: int | None) -> dict[str, str]:
    """The chaos topic's config: the profile's min.insync.replicas, and segment.bytes
    when ``--segment-bytes`` asks for it."""
    config = {"min.insync.replicas": min_insync_replicas}
    if segment_bytes is not None:
        config["segment.bytes"] = str(segment_bytes)
    return config


class Terminated(KeyboardInterrupt):
    """SIGTERM, which ``chaos run`` and ``chaos sweep`` take as Ctrl-C (their clusters
    still go down); a sweep passes it on to the run it waits for."""


class UsageError(ToolError):
    """Bad flags or a bad schedule file: exit 2."""


def ms(value) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def clients() -> tuple[str, ...]:
    from bench.chaos.clients import CLIENTS
    return CLIENTS


def check_client(client: str, group: bool, group_protocol: str | None,
                 value_format: str = "plain") -> None:
    """Raise ``UsageError`` for a client that cannot run here or a flag it cannot take."""
    from bench.chaos.clients import CLIENTS, missing
    if client not in CLIENTS:
        raise UsageError(f"--client {client!r}: one of {', '.join(CLIENTS)}")
    if value_format != "plain" and client != "native":
        raise UsageError(f"--value-format {value_format} needs --client native (the "
                         f"real clients write plain values)")
    if group_protocol is not None and not group:
        raise UsageError("--group-protocol needs --group")
    if group_protocol is not None:
        from bench.chaos.clients import group_protocol_settings
        try:
            group_protocol_settings(client, group_protocol)
        except ValueError as e:
            raise UsageError(f"--group-protocol {group_protocol}: {e}") from None
    why = missing(client)
    if why:
        raise UsageError(f"--client {client}: {why}")


def idempotence(profile: str, override: str | None = None) -> str:
    """The producers' idempotence: ``--idempotence`` when given, else the profile's."""
    return override or PROFILES[profile]["idempotence"]


def worker_options(profile: str, role: str, client: str, group: bool,
                   group_protocol: str | None, idempotence_override: str | None = None
                   ) -> dict:
    """``worker_command`` keyword options of one workload member, from the profile (the
    producers) and the group flags (the consumers)."""
    p = PROFILES[profile]
    if role == "producer":
        return {"acks": p["acks"], "idempotence": idempotence(profile, idempotence_override)}
    options: dict = {}
    if group:
        options["group"] = GROUP
        if group_protocol is not None:
            from bench.chaos.clients import group_protocol_settings
            options["set"] = group_protocol_settings(client, group_protocol) or None
    return options


def consumers_of(args) -> int:
    if args.consumers is not None:
        return args.consumers
    return GROUP_CONSUMERS if getattr(args, "group", False) else 1


def _client_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", default="native", metavar="NAME",
                        help="the workload's Kafka client: native (default), "
                             "confluent-kafka, kafka-python, aiokafka or kafkajs (real "
                             "clients use the brokers' Kafka listener)")
    parser.add_argument("--group", action="store_true",
                        help=f"the consumers subscribe as members of the group {GROUP} "
                             f"(default {GROUP_CONSUMERS} of them); the checker judges "
                             f"group delivery too")
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default=None,
                        help="the group protocol (default: the client's own; consumer = "
                             "KIP-848: native and confluent-kafka)")
    parser.add_argument("--idempotence", choices=("on", "off"), default=None,
                        help="the producers' idempotence instead of the profile's (safe, "
                             "unclean, hw-truncation: on; acks1: off)")


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from node.paths import absolute_path

    sub = parser.add_subparsers(dest="chaos_command", required=True)
    run = sub.add_parser("run", help="start a cluster, run the workload under faults, check")
    run.add_argument("--dir", required=True, type=absolute_path,
                     help="a new directory for the run")
    run.add_argument("--brokers", type=int, default=3)
    run.add_argument("--netns", action="store_true",
                     help="every process in its own network namespace (root): enables the "
                          "partition fault")
    run.add_argument("--profile", default="safe", choices=sorted(PROFILES))
    run.add_argument("--replica-transport", choices=REPLICA_TRANSPORTS, default=None,
                     help=REPLICA_TRANSPORT_HELP)
    run.add_argument("--faults", default=DEFAULT_FAULTS)
    run.add_argument("--duration", type=float, default=30.0, help="seconds of workload")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--partitions", type=int, default=PARTITIONS,
                     help="of the topic chaos (replication factor 3)")
    run.add_argument("--producers", type=int, default=2)
    run.add_argument("--consumers", type=int, default=None,
                     help=f"default 1 ({GROUP_CONSUMERS} with --group)")
    run.add_argument("--rate", type=float, default=None,
                     help="sends/s per producer (default 200); with --workload txn, "
                          "transactions/s per process (default 10)")
    run.add_argument("--workload", choices=WORKLOADS, default="plain",
                     help="txn: transactional read-process-write processes and "
                          "read_committed readers (bench.chaos.txn_run; --client native "
                          "or confluent-kafka)")
    run.add_argument("--txn-writes", type=int, default=3,
                     help="--workload txn: values per transaction, to distinct partitions")
    run.add_argument("--txn-abort", type=float, default=0.2,
                     help="--workload txn: the probability a transaction aborts")
    run.add_argument("--schedule", default=None, type=absolute_path,
                     help="a schedule.json to run instead")
    run.add_argument("--compose", action="store_true", help=COMPOSE_HELP)
    run.add_argument("--segment-bytes", type=int, default=None, help=SEGMENT_BYTES_HELP)
    run.add_argument("--value-format", choices=("plain", "avro"), default="plain",
                     help="avro (--client native only): the producers write typed values "
                          "(bench.chaos.worker's CHAOS_VALUE_SCHEMA) registered in the "
                          "cluster's schema registry")
    _client_flags(run)
    sweep = sub.add_parser("sweep", help="many seeded runs one after another, and a summary")
    sweep.add_argument("--dir", required=True, type=absolute_path,
                       help="a directory for the runs (RUN/seed-N)")
    sweep.add_argument("--seeds", default="1-50", help="e.g. 1-50 or 3,7,9")
    sweep.add_argument("--profile", default="safe", choices=sorted(PROFILES))
    sweep.add_argument("--replica-transport", choices=REPLICA_TRANSPORTS, default=None,
                       help=REPLICA_TRANSPORT_HELP)
    sweep.add_argument("--faults", default=SWEEP_FAULTS)
    sweep.add_argument("--duration", type=float, default=60.0)
    sweep.add_argument("--netns", action="store_true")
    sweep.add_argument("--compose", action="store_true", help=COMPOSE_HELP)
    sweep.add_argument("--segment-bytes", type=int, default=None, help=SEGMENT_BYTES_HELP)
    sweep.add_argument("--rate", type=float, default=None,
                       help="as chaos run's (default 200 sends/s, or 10 transactions/s)")
    sweep.add_argument("--workload", choices=WORKLOADS, default="plain")
    sweep.add_argument("--txn-writes", type=int, default=None)
    sweep.add_argument("--txn-abort", type=float, default=None)
    sweep.add_argument("--keep", action="store_true",
                       help="keep every run's files (default: only the invalid runs')")
    _client_flags(sweep)
    check_ = sub.add_parser("check", help="check a recorded run again")
    check_.add_argument("run", type=absolute_path)
    again = sub.add_parser("replay", help="run a recorded run's schedule again")
    again.add_argument("run", type=absolute_path)
    return parser


def check_segment_bytes(segment_bytes: int | None) -> None:
    if segment_bytes is not None and segment_bytes < SEGMENT_BYTES_MIN:
        raise UsageError(f"--segment-bytes must be at least {SEGMENT_BYTES_MIN}, "
                         f"got {segment_bytes}")


def check_run_args(args) -> None:
    """The flag checks of ``chaos run`` (before anything starts); fills in ``--rate``'s
    default (per workload)."""
    consumers = consumers_of(args)
    workload = getattr(args, "workload", "plain")
    if args.rate is None:
        args.rate = 10.0 if workload == "txn" else 200.0
    if workload == "txn":
        if args.client not in ("native", "confluent-kafka"):
            raise UsageError("--workload txn runs the native client or confluent-kafka")
        if args.group or getattr(args, "value_format", "plain") != "plain":
            raise UsageError("--workload txn has its own group (chaos-txn) and plain "
                             "values: no --group, no --value-format")
        if args.txn_writes < 1 or not 0 <= args.txn_abort <= 1:
            raise UsageError("--txn-writes must be positive, --txn-abort in [0, 1]")
    if args.brokers < 1 or args.duration <= 0 or args.rate <= 0 or \
            args.producers < 1 or consumers < 0 or args.partitions < 1:
        raise UsageError("--brokers, --duration, --rate and --producers must be positive")
    check_segment_bytes(getattr(args, "segment_bytes", None))
    if args.compose and args.schedule:
        raise UsageError("--compose draws a schedule from --seed; --schedule gives one: "
                         "not both")
    if args.profile not in PROFILES:
        raise UsageError(f"--profile: one of {', '.join(PROFILES)}")
    check_client(args.client, args.group, args.group_protocol,
                 getattr(args, "value_format", "plain"))
