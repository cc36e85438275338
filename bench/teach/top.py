"""``minikafka top --dir D``: the dashboard's picture of a running cluster in a terminal,
refreshed in place (``--once`` prints it once)."""
from __future__ import annotations

import json
import sys
import time

from node.cluster.view import Snapshot, events, snapshot
from node.paths import absolute_path

BAR = 40
# Each broker's log cleaner figures, in its first log dir (node.broker.log_cleaner's
# CLEANER_STATS_FILE; bench does not import the broker).
CLEANER_STATS_FILE = "cleaner-stats.json"


def cleaner_lines(cluster) -> list[str]:
    """One line per broker whose log cleaner has cleaned since it started: cleans, MB of
    log read, when the last swap happened, the dirtiest ratio at its last look."""
    lines = []
    for b in sorted(cluster.broker_ids):
        try:
            stats = json.loads((cluster.broker_dir(b) / "logs" / CLEANER_STATS_FILE)
                               .read_text())
        except (OSError, ValueError):
            continue
        last = stats.get("last_clean_wall_ms", -1)
        when = time.strftime("%H:%M:%S", time.localtime(last / 1000)) if last > 0 else "-"
        lines.append(f"  broker {b}: {stats.get('cleans', 0)} clean(s), "
                     f"{stats.get('bytes_read', 0) / 1e6:.1f} MB read, "
                     f"{stats.get('bytes_before', 0) / 1e6:.1f} -> "
                     f"{stats.get('bytes_after', 0) / 1e6:.1f} MB, last {when}, max dirty "
                     f"{100 * stats.get('max_dirty_ratio', 0.0):.0f}%"
                     + (f", cleaning {', '.join(stats['cleaning'])}"
                        if stats.get("cleaning") else ""))
    return ["", "log cleaner:"] + lines if lines else []


def render(snap: Snapshot, timeline: list[dict], width_bar: int = BAR) -> str:
    lines = []
    ctrl = "none" if snap.controller is None else f"broker {snap.controller}"
    lines.append(f"minikafka top — {time.strftime('%H:%M:%S', time.localtime(snap.t_ms / 1000))}"
                 f"   controller {ctrl} (epoch {snap.controller_epoch})   coordinator "
                 f"{snap.zk_state}")
    lines.append("brokers: " + "   ".join(
        f"{b.id}:{b.state}{'*' if b.controller else ''}" for b in snap.brokers)
        + ("   cut: " + ", ".join(f"{a}|{b}" for a, b in snap.cut_links)
           if snap.cut_links else ""))
    lines.append("")
    states = {b.id: b.state for b in snap.brokers}
    for p in snap.partitions:
        leader = "offline" if p.leader < 0 else str(p.leader)
        lines.append(f"{p.name:<20} leader {leader:<8} epoch {p.leader_epoch:<4} ISR {p.isr}"
                     f"   HW {'-' if p.hw is None else p.hw}"
                     # the LSO when a transaction holds it below the HW (KIP-98)
                     + ("" if p.lso is None or p.lso == p.hw else f"   LSO {p.lso}"))
        top = max([r.leo or 0 for r in p.views] + [1])
        for r in p.views:
            if r.leo is None:
                bar = ""
            else:
                width = round(width_bar * r.leo / top)
                committed = min(width, round(width_bar * min(r.leo, p.hw or 0) / top))
                bar = "█" * committed + "░" * (width - committed)
            role = "L" if r.broker == p.leader else " "
            lines.append(f"  {role} {r.broker:<3} {states.get(r.broker, '?'):<9}"
                         f"{'isr' if r.in_isr else '   '} LEO {'-' if r.leo is None else r.leo:>8}"
                         f"  {bar}")
            if r.believes_leader:
                lines.append(f"      ! broker {r.broker} still believes it leads (epoch "
                             f"{r.own_leader_epoch}); its own log ends at {r.own_leo}")
    if timeline:
        lines.append("")
        lines.append("recent events:")
        for e in timeline[-8:]:
            t = time.strftime("%H:%M:%S", time.localtime(e["t_ms"] / 1000))
            lines.append(f"  {t}  {e['kind']:<10} {e['text']}")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    parser.add_argument("--dir", required=True, type=absolute_path, help="the cluster's directory")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between frames")
    parser.add_argument("--once", action="store_true", help="print one picture and exit")


def run(args) -> int:
    import logging
    from node.cluster import Cluster, ClusterError
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    if args.interval <= 0:
        print("top: error: --interval must be positive", file=sys.stderr)
        return 2
    try:
        cluster = Cluster.open(args.dir)
    except ClusterError as e:
        print(f"top: error: {e}", file=sys.stderr)
        return 1
    timeline: list[dict] = []
    previous = None
    try:
        while True:
            try:
                snap = snapshot(cluster)
            except Exception as e:
                if args.once:
                    print(f"top: error: {e}", file=sys.stderr)
                    return 1
                time.sleep(args.interval)
                continue
            timeline += events(previous, snap)
            previous = snap
            text = render(snap, timeline) + "\n".join([""] + cleaner_lines(cluster))
            if args.once:
                print(text)
                return 0
            sys.stdout.write("\x1b[H\x1b[2J" + text + "\n")
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.close()
