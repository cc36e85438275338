"""The faults a chaos run (``bench.chaos.nemesis``) or a user applies to a running
cluster: signals to a process group (kill, pause, resume), a power cut of a dead
broker's disk, moving the controller, and cutting and healing links of a ``--netns``
mesh. ``Faults`` is a mixin of ``supervisor.Cluster``.

Rules:
- KILL waits until the process is gone; the other signals return at once.
- A power cut applies to a dead broker only: its segments are cut back to the recovery
  point it wrote (what was flushed); the HW checkpoint, fsynced when written, stays.
- Links are cut and healed in both directions; the management links never are.
"""
from __future__ import annotations

import os
import signal as signals

from node.cluster.process import KILL_WAIT_S, POLL_INTERVAL_S, ClusterError
from node.waiting import poll_until

SIGNALS = {"KILL": signals.SIGKILL, "TERM": signals.SIGTERM, "STOP": signals.SIGSTOP,
           "CONT": signals.SIGCONT, "INT": signals.SIGINT}


class Faults:
    """Faults on a ``supervisor.Cluster`` (rules above)."""

    def kill(self, ident, signal="KILL") -> int:
        """Send ``signal`` (KILL, TERM, STOP, CONT, INT or a number) to a process group;
        returns the pid. KILL waits until the process is gone."""
        sig = self._signal(signal)
        process = self.process(ident)
        pid = process.pid()
        if pid is None:
            raise ClusterError(f"{process.name} is not running")
        process.signal(sig)
        if sig == signals.SIGKILL:
            process.kill_now()
        return pid

    @staticmethod
    def _signal(signal) -> int:
        if isinstance(signal, int):
            return signal
        name = str(signal).upper().removeprefix("SIG")
        if name not in SIGNALS:
            raise ClusterError(f"unknown signal {signal!r} (one of {', '.join(SIGNALS)})")
        return SIGNALS[name]

    def lose_unflushed(self, broker_id: int) -> dict[str, int]:
        """What a power cut does to a dead broker's disk: every partition's segment
        files are cut back to its recovery point (what was flushed; the page cache held
        the rest). Returns ``{"topic-partition": records lost}`` for the partitions that
        lost any. The broker must not be running."""
        from shm.checkpoint import (RECOVERY_POINT_OFFSET_CHECKPOINT,
                                    REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile)
        from shm.log import Log

        process = self.process(broker_id)
        if process.pid() is not None:
            raise ClusterError(f"{process.name} is running: a power cut needs it dead first")
        data_dir = self.broker_dir(broker_id) / "logs"
        try:
            points = OffsetCheckpointFile(
                str(data_dir / RECOVERY_POINT_OFFSET_CHECKPOINT)).read()
        except (OSError, ValueError):
            points = {}
        # The HW checkpoint was fsynced when written: it survives the power cut as it
        # was. (Closing a Log would rewrite it clamped to the cut log: put it back.)
        hw_file = data_dir / REPLICATION_OFFSET_CHECKPOINT
        hw_bytes = hw_file.read_bytes() if hw_file.is_file() else None
        lost = {}
        for entry in sorted(os.listdir(data_dir)) if data_dir.is_dir() else []:
            topic, _, number = entry.rpartition("-")
            if not topic or not number.isdigit() or not (data_dir / entry).is_dir():
                continue
            log_ = _open_when_released(Log, str(data_dir), topic, int(number),
                                       self.cluster_id, broker_id)
            try:
                end = log_.log_end_offset
                keep = max(log_.log_start_offset, points.get((topic, int(number)), 0))
                if keep < end:
                    log_.truncate_to(keep)
                    lost[entry] = end - keep
            finally:
                log_.close()
        if hw_bytes is not None:
            tmp = hw_file.with_suffix(".power-cut.tmp")
            tmp.write_bytes(hw_bytes)
            os.replace(tmp, hw_file)
        return lost

    def move_controller(self) -> int | None:
        """Delete /controller: every broker's watch fires and a new election runs (the
        operators' way to move Kafka's controller). Returns the controller it deposed,
        None if none was elected."""
        from node.wire.zkdata import CONTROLLER, decode_controller

        def delete(zk):
            data, stat = zk.get(CONTROLLER)
            zk.delete(CONTROLLER, version=stat.version)
            return decode_controller(data)

        return self._zk_call(delete, None)

    def cut(self, a, b) -> tuple[str, str]:
        """Partition two processes from each other (both directions); ``--netns`` only."""
        from node.cluster.netns import NetnsError
        pair = (self.node_of(a), self.node_of(b))
        try:
            self.mesh.cut(*pair)
        except NetnsError as e:
            raise ClusterError(str(e)) from None
        return pair

    def heal(self, a=None, b=None) -> list[tuple[str, str]]:
        """Bring the link between ``a`` and ``b`` back (every cut link without them)."""
        from node.cluster.netns import NetnsError
        if self.mesh is None:
            raise ClusterError("this cluster was not started with --netns: no links to heal")
        try:
            if a is None:
                links = self.mesh.cut_links()
                self.mesh.heal_all()
                return links
            pair = (self.node_of(a), self.node_of(b))
            self.mesh.heal(*pair)
            return [pair]
        except NetnsError as e:
            raise ClusterError(str(e)) from None

    def isolate(self, ident) -> list[tuple[str, str]]:
        """Cut one process from every other node of the mesh."""
        node = self.node_of(ident)
        return [self.cut(node, other) for other in self.mesh.nodes if other != node]


def _open_when_released(log_class, data_dir: str, topic: str, partition: int,
                        cluster_id: str, broker_id: int):
    """Open a dead broker's log. A SIGKILLed process shows as a zombie as soon as its
    main thread is gone, but its files (and the log's flock) are released only when its
    last thread has exited: wait for that."""
    from shm.errors import LogError

    def attempt():
        try:
            return log_class.open(data_dir, topic, partition, cluster_id=cluster_id,
                                  broker_id=broker_id)
        except LogError as e:
            if "is open in another Log" not in str(e):
                raise
            return None

    return poll_until(attempt, KILL_WAIT_S, f"{data_dir}/{topic}-{partition}'s lock",
                      interval_s=POLL_INTERVAL_S)
