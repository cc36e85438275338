"""DescribeLogDirs: this broker's log directories, the replicas each holds and their
sizes (Kafka's, for ``kafka-log-dirs`` and ``AdminClient.describe_log_dirs``)."""
from __future__ import annotations

import os

from node.wire import protocol
from node.wire.errors import ErrorCode


def handle_describe_log_dirs(apis, identity, request: protocol.Request) -> None:
    wanted = protocol.entries(request.body, "partitions", 2, optional=True)
    apis.send_response(identity, request.correlation_id, request.api_key,
                       describe_log_dirs(apis.replicas, wanted))


def _space(path: str) -> tuple[int, int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def describe_log_dirs(replicas, wanted) -> dict:
    chosen = None if wanted is None else {(t, p) for t, p in wanted}
    by_dir: dict[str, list] = {d: [] for d in replicas.config.log_dirs}
    for key, part in sorted(replicas.partitions.items()):
        if chosen is not None and key not in chosen:
            continue
        if part.log_dir not in by_dir or part.log_dir in replicas.offline_dirs:
            continue
        log = part.log
        # Kafka's lag of a current (not future) replica: how far the HW trails the LEO,
        # never negative.
        lag = max(log.high_watermark - log.log_end_offset, 0)
        by_dir[part.log_dir].append([key[0], key[1], log.size_bytes, lag])
    out = []
    for path, entries in by_dir.items():
        if path in replicas.offline_dirs:
            out.append([os.path.abspath(path), ErrorCode.KAFKA_STORAGE_ERROR, -1, -1, []])
            continue
        total, usable = _space(path)
        out.append([os.path.abspath(path), ErrorCode.NONE, total, usable, entries])
    return {"error": ErrorCode.NONE, "log_dirs": out}
