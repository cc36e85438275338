"""Growing and shrinking a supervised cluster: ``minikafka cluster add-broker|remove-broker``.

    minikafka cluster add-broker --dir D
    minikafka cluster remove-broker --dir D ID

add-broker: the new broker gets the next id. The plan (``node.core.placement.plan_add_broker``)
gives it a balanced share of the replicas — floor(replicas / brokers), of which
floor(partitions / brokers) as preferred (first) replica — taken from the most loaded
brokers, one replica per moved partition, so as little data as possible is copied. The
plan is printed, the broker is started, the reassignment runs (progress on stderr) and,
once every partition has its new replicas, a preferred leader election gives the new
broker the leaderships it is now first replica of.

remove-broker: the plan (``plan_remove_broker``) moves each replica of the broker to the
least loaded remaining broker that does not hold the partition yet; it is printed, run
and waited for; then the broker is stopped and removed (registration, cluster.json,
directory).

``add_broker(cluster)`` / ``remove_broker(cluster, id)`` are the Python API (tests use
them); failures raise ``ClusterError`` with a one-line message.
"""
from __future__ import annotations

import sys

from node.wire import errors
from node.core import placement
from node.client.types import KafkaTimeoutError
from node.tools.common import WAIT_TIMEOUT_S, ToolError, open_admin, tp_name
from node.tools.leader_election import elect
from node.tools.reassign import current_assignment, execute_and_wait
from node.cluster.supervisor import Cluster, ClusterError
from node.paths import absolute_path


def add_arguments(sub) -> None:
    """Mount add-broker and remove-broker on ``minikafka cluster``'s subparsers."""
    add = sub.add_parser("add-broker", help="start a new broker and move a balanced share "
                                            "of the replicas onto it")
    add.add_argument("--dir", required=True, type=absolute_path)
    add.add_argument("--timeout", type=float, default=WAIT_TIMEOUT_S,
                     help="seconds to wait for the reassignment")
    remove = sub.add_parser("remove-broker", help="move every replica off a broker, then "
                                                  "stop it and remove it")
    remove.add_argument("--dir", required=True, type=absolute_path)
    remove.add_argument("id", type=int)
    remove.add_argument("--timeout", type=float, default=WAIT_TIMEOUT_S,
                        help="seconds to wait for the reassignment")


def run(args) -> int:
    cluster = Cluster.open(args.dir)
    try:
        if args.cluster_command == "add-broker":
            add_broker(cluster, timeout_s=args.timeout)
        else:
            remove_broker(cluster, args.id, timeout_s=args.timeout)
    finally:
        cluster.close()
    return 0


def _user_errors(fn):
    """ToolError / broker errors -> ClusterError (what ``minikafka cluster`` reports)."""
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ToolError as e:
            raise ClusterError(str(e)) from None
        except errors.KafkaError as e:
            raise ClusterError(e.message or e.name) from None
        except (KafkaTimeoutError, placement.PlacementError) as e:
            raise ClusterError(str(e)) from None
    wrapper.__doc__ = fn.__doc__
    wrapper.__name__ = fn.__name__
    return wrapper


def load(assignment: dict) -> dict[int, tuple[int, int]]:
    """broker -> (replicas, preferred leaderships)."""
    out: dict[int, list[int]] = {}
    for replicas in assignment.values():
        for i, broker in enumerate(replicas):
            entry = out.setdefault(broker, [0, 0])
            entry[0] += 1
            entry[1] += i == 0
    return {b: (r, p) for b, (r, p) in out.items()}


def plan_lines(assignment: dict, moves: dict) -> list[str]:
    """One line per moved partition: old replicas -> new replicas (which replicas move)."""
    lines = []
    for tp in sorted(moves):
        old, new = assignment[tp], moves[tp]
        moved = [f"{o}->{n}" for o, n in zip(old, new) if o != n]
        lines.append(f"  {tp_name(*tp)}: replicas {','.join(map(str, old))} -> "
                     f"{','.join(map(str, new))} (moves {', '.join(moved)})")
    return lines


def _no_reassignment_running(admin) -> None:
    if admin.list_reassignments():
        raise ToolError("a partition reassignment is in progress; wait for it to finish "
                        "(minikafka reassign-partitions --list)")


@_user_errors
def add_broker(cluster, *, timeout_s: float = WAIT_TIMEOUT_S, out=print) -> int:
    """Start broker max(id)+1 and move its share of replicas onto it; returns its id."""
    admin = open_admin(cluster.bootstrap_servers)
    try:
        _no_reassignment_running(admin)
        assignment = current_assignment(admin, admin.list_topics())
        new_id = max(cluster.broker_ids, default=-1) + 1
        brokers = sorted(set(cluster.broker_ids) | {new_id})
        moves = placement.plan_add_broker(assignment, brokers, new_id)
        total = sum(len(r) for r in assignment.values())
        share = load(moves).get(new_id, (0, 0))
        out(f"Plan: broker {new_id} takes {share[0]} of {total} replicas ({share[1]} as "
            f"preferred leader); {len(moves)} partition(s) move:")
        for line in plan_lines(assignment, moves):
            out(line)
        sys.stdout.flush()
        started = cluster.add_broker()
        assert started == new_id, (started, new_id)
        out(f"Started broker {new_id} at {cluster.broker_address(new_id)}")
        if moves:
            execute_and_wait(admin, moves, timeout_s, out=out, show_rollback=False)
            led = sorted(tp for tp, r in moves.items() if r[0] == new_id)
            if led:
                elect(admin, "preferred", led, timeout_s)
        final = load(current_assignment(admin, admin.list_topics())).get(new_id, (0, 0))
        out(f"Broker {new_id} now holds {final[0]} replica(s), {final[1]} as preferred "
            f"leader.")
        return new_id
    finally:
        admin.close()


@_user_errors
def remove_broker(cluster, broker_id: int, *, timeout_s: float = WAIT_TIMEOUT_S,
                  out=print) -> None:
    """Move every replica off ``broker_id``, then stop it and remove it from the cluster."""
    if broker_id not in cluster.broker_ids:
        raise ClusterError(f"broker {broker_id} is not part of the cluster in {cluster.dir} "
                           f"(brokers: {', '.join(map(str, cluster.broker_ids))})")
    admin = open_admin(cluster.bootstrap_servers)
    try:
        _no_reassignment_running(admin)
        assignment = current_assignment(admin, admin.list_topics())
        live = {b.broker_id for b in admin.describe_cluster().brokers}
        remaining = sorted(set(cluster.broker_ids) - {broker_id})
        dead = [b for b in remaining if b not in live]
        if dead:
            raise ToolError(f"broker(s) {', '.join(map(str, dead))} are not running; start "
                            f"them first (replicas can only move to live brokers)")
        moves = placement.plan_remove_broker(assignment, remaining + [broker_id], broker_id)
        held = load(assignment).get(broker_id, (0, 0))
        out(f"Plan: move {held[0]} replica(s) off broker {broker_id} ({held[1]} as "
            f"preferred leader); {len(moves)} partition(s) move:")
        for line in plan_lines(assignment, moves):
            out(line)
        sys.stdout.flush()
        if moves:
            execute_and_wait(admin, moves, timeout_s, out=out, show_rollback=False)
    finally:
        admin.close()
    cluster.forget_broker(broker_id)
    out(f"Stopped broker {broker_id} and removed it from the cluster in {cluster.dir}")
