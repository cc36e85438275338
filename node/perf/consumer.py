"""``minikafka consumer-perf-test``: Kafka's ConsumerPerformance.

    minikafka consumer-perf-test --bootstrap-server H:P --topic T --messages N \\
        [--fetch-size BYTES] [--timeout MS] [--from-latest] [--hide-header] \\
        [--local --dir CLUSTER_DIR]

Reads every partition of the topic from the beginning (``--from-latest``: from the end)
until N messages were read or none came for ``--timeout`` ms, and prints Kafka's header
and one line of figures (``--show-detailed-stats``: Kafka's per-interval lines instead):

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec

MB counts key and value bytes (1024 * 1024 bytes), as Kafka does. There are no
consumer groups here: ``rebalance.time.ms`` is the time to find the partitions' leaders
and starting offsets (metadata and ListOffsets), the part of the run that corresponds
to Kafka's group join; ``fetch.*`` cover the rest.

Two ways to read:
- default: the consumer (``node.client.consumer.Consumer.poll_batches``), i.e. Fetch
  requests to the leaders, whole batches, CRCs checked (Kafka's check.crcs=true);
  ``--fetch-size`` is max.partition.fetch.bytes.
- ``--local``: ``shm.local_reader.LocalReader`` on each partition's leader replica —
  the segment files and the broker's shared-memory board, zero-copy, no requests.
  It needs the cluster id, the broker ids and their log directories; the tool takes
  them from the supervisor's ``cluster.json`` in ``--dir`` (the coordinator does not
  know log directories, and a cluster on this host is one the supervisor started).
  Leaders and starting offsets still come from the brokers (Metadata, ListOffsets).
  ``--fetch-size`` is the bytes per ``LocalReader.read``.
"""
from __future__ import annotations

import datetime
import json
import struct
import sys
import time
from pathlib import Path

from node.paths import absolute_path
from node.perf import results
from node.perf.common import (MB_BYTES, ToolError, add_tool_parser, check_topic, positive_int,
                              run_tool)

NAME = "consumer-perf-test"
FETCH_SIZE_DEFAULT = 1024 * 1024
TIMEOUT_MS_DEFAULT = 10_000
POLL_MS = 100
LOCAL_IDLE_SLEEP_S = 0.001
HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
          "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
_I32 = struct.Struct("<i")


class Progress:
    """Kafka's --show-detailed-stats: every ``interval_ms``, the figures of the interval
    (time, threadId, MB, MB.sec, nMsg, nMsg.sec, then rebalance and fetch columns)."""

    def __init__(self, interval_ms: int, enabled: bool, per_second: bool = False):
        self.interval_s = interval_ms / 1000
        self.enabled = enabled
        self.last_s = time.monotonic()
        self.last_bytes = self.last_messages = 0
        # --results: records and bytes read in each second of the run (epoch second ->
        # [records, bytes]).
        self.seconds: dict[int, list[int]] | None = {} if per_second else None
        self._counted = (0, 0)

    def update(self, messages: int, total_bytes: int, rebalance_ms: float) -> None:
        if self.seconds is not None:
            bucket = self.seconds.setdefault(int(time.time()), [0, 0])
            bucket[0] += messages - self._counted[0]
            bucket[1] += total_bytes - self._counted[1]
            self._counted = (messages, total_bytes)
        now = time.monotonic()
        if not self.enabled or now - self.last_s < self.interval_s:
            return
        elapsed_s = now - self.last_s
        mb = (total_bytes - self.last_bytes) / MB_BYTES
        n = messages - self.last_messages
        print(f"{kafka_time(time.time())}, 0, {total_bytes / MB_BYTES:.4f}, "
              f"{mb / elapsed_s:.4f}, {messages}, {n / elapsed_s:.4f}, {round(rebalance_ms)}, "
              f"{round(elapsed_s * 1000)}, {mb / elapsed_s:.4f}, {n / elapsed_s:.4f}",
              flush=True)
        self.last_s, self.last_bytes, self.last_messages = now, total_bytes, messages


def kafka_time(epoch_s: float) -> str:
    """Kafka's "yyyy-MM-dd HH:mm:ss:SSS" (local time)."""
    t = datetime.datetime.fromtimestamp(epoch_s)
    return t.strftime("%Y-%m-%d %H:%M:%S:") + f"{t.microsecond // 1000:03d}"


def result_line(start_s: float, end_s: float, total_bytes: int, messages: int,
                rebalance_ms: float) -> str:
    elapsed_s = max(1e-9, end_s - start_s)
    fetch_ms = max(0.0, (end_s - start_s) * 1000 - rebalance_ms)
    mb = total_bytes / MB_BYTES
    fetch_s = fetch_ms / 1000
    fetch_mb_s = mb / fetch_s if fetch_s > 0 else 0.0
    fetch_msg_s = messages / fetch_s if fetch_s > 0 else 0.0
    return (f"{kafka_time(start_s)}, {kafka_time(end_s)}, {mb:.4f}, {mb / elapsed_s:.4f}, "
            f"{messages}, {messages / elapsed_s:.4f}, {round(rebalance_ms)}, {round(fetch_ms)}, "
            f"{fetch_mb_s:.4f}, {fetch_msg_s:.4f}")


def payload_bytes(buf, position: int, record_count: int, skip: int = 0) -> int:
    """Key + value bytes of records ``skip..`` of the batch at ``position`` (from its
    offset columns, without parsing it; layout in ``shm.batch``)."""
    from shm.batch import HEADER_BYTES

    n = record_count
    keys_at = position + HEADER_BYTES + 4 * n
    values_at = keys_at + 4 * (n + 1)
    end = _I32.unpack_from(buf, keys_at + 4 * n)[0] + _I32.unpack_from(buf, values_at + 4 * n)[0]
    if skip:
        end -= _I32.unpack_from(buf, keys_at + 4 * skip)[0] + \
            _I32.unpack_from(buf, values_at + 4 * skip)[0]
    return end


# ----------------------------------------------------------------- over Fetch

def consume_fetch(args, bootstrap: str, partitions: list[int], progress: Progress):
    """(messages, bytes, rebalance ms, end time) reading with Fetch requests."""
    from node.client.consumer import Consumer

    consumer = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                        max_partition_fetch_bytes=args.fetch_size,
                        fetch_max_bytes=max(args.fetch_size, 50 * MB_BYTES))
    try:
        started = time.monotonic()
        tps = [(args.topic, p) for p in partitions]
        consumer.assign(tps)
        if args.from_latest:
            consumer.seek_to_end()
        else:
            consumer.seek_to_beginning()
        for tp in tps:
            consumer.position(tp, timeout_ms=args.timeout)
        rebalance_ms = (time.monotonic() - started) * 1000
        messages = total_bytes = 0
        last_read = time.monotonic()
        while messages < args.messages:
            batches = consumer.poll_batches(timeout_ms=POLL_MS)
            now = time.monotonic()
            if not batches:
                if (now - last_read) * 1000 > args.timeout:
                    _timeout_warning(args.timeout)
                    break
                continue
            last_read = now
            for fetched in batches:
                batch = fetched.batch
                messages += fetched.record_count
                keys, values = batch.keys, batch.values
                total_bytes += _arrow_bytes(keys, fetched.skip) + _arrow_bytes(values,
                                                                                fetched.skip)
            progress.update(messages, total_bytes, rebalance_ms)
        return messages, total_bytes, rebalance_ms, time.time()
    finally:
        consumer.close()


def _arrow_bytes(array, skip: int) -> int:
    """Bytes of elements ``skip..`` of a pyarrow binary array, from its offsets buffer."""
    offsets = _I32.unpack_from
    buf = array.buffers()[1]
    return offsets(buf, 4 * (array.offset + len(array)))[0] - \
        offsets(buf, 4 * (array.offset + skip))[0]


def _timeout_warning(timeout_ms: int) -> None:
    print(f"WARNING: Exiting before consuming the expected number of messages: timeout "
          f"({timeout_ms} ms) exceeded. You can use the --timeout option to increase the "
          f"timeout.", file=sys.stderr, flush=True)


# ----------------------------------------------------------------- local, zero-copy

def cluster_layout(directory: str) -> tuple[str, dict[int, str], str]:
    """(cluster id, {broker id: log dir}, bootstrap servers) from the supervisor's
    cluster.json (layout in ``node.cluster``)."""
    from node.cluster import HOST

    path = Path(directory) / "cluster.json"
    try:
        spec = json.loads(path.read_text())
        cluster_id = spec["cluster_id"]
        ports = {int(b): int(port) for b, port in spec["brokers"].items()}
    except FileNotFoundError:
        raise ToolError(f"no cluster in {directory} (cluster.json missing)") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ToolError(f"{path} is not a cluster description: {e}") from None
    log_dirs = {b: str(Path(directory) / f"broker-{b}" / "logs") for b in ports}
    bootstrap = ",".join(f"{HOST}:{ports[b]}" for b in sorted(ports))
    return cluster_id, log_dirs, bootstrap


def consume_local(args, bootstrap: str, partitions: dict, progress: Progress):
    """(messages, bytes, rebalance ms, end time) reading the leaders' segment files."""
    from node.client.consumer import Consumer
    from shm.batch import read_header
    from shm.errors import LocalReadError
    from shm.local_reader import LocalReader

    cluster_id, log_dirs, _ = cluster_layout(args.dir)
    started = time.monotonic()
    consumer = Consumer(bootstrap_servers=bootstrap)
    try:
        tps = [(args.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        lookup = consumer.end_offsets if args.from_latest else consumer.beginning_offsets
        start_offsets = {tp.partition: offset for tp, offset in
                         lookup(tps, timeout_ms=args.timeout).items()}
    finally:
        consumer.close()
    readers = {}
    try:
        for p, meta in sorted(partitions.items()):
            if meta.leader not in log_dirs:
                raise ToolError(f"partition {p}: leader {meta.leader} is not a broker of the "
                                f"cluster in {args.dir}")
            readers[p] = LocalReader(cluster_id, meta.leader, log_dirs[meta.leader],
                                     args.topic, p)
        rebalance_ms = (time.monotonic() - started) * 1000
        offsets = dict(start_offsets)
        messages = total_bytes = 0
        last_read = time.monotonic()
        while messages < args.messages:
            progressed = False
            for p, reader in readers.items():
                read = reader.read(offsets[p], args.fetch_size)
                for view in read.batches:
                    header = read_header(view)
                    skip = max(0, offsets[p] - header.base_offset)
                    messages += header.record_count - skip
                    total_bytes += payload_bytes(view, 0, header.record_count, skip)
                    offsets[p] = header.next_offset
                progressed = progressed or bool(read.batches)
                if messages >= args.messages:
                    break
            progress.update(messages, total_bytes, rebalance_ms)
            now = time.monotonic()
            if progressed:
                last_read = now
            elif (now - last_read) * 1000 > args.timeout:
                _timeout_warning(args.timeout)
                break
            else:
                time.sleep(LOCAL_IDLE_SLEEP_S)
        return messages, total_bytes, rebalance_ms, time.time()
    except LocalReadError as e:
        raise ToolError(f"local read failed: {e}") from None
    finally:
        for reader in readers.values():
            reader.close()


# ----------------------------------------------------------------- command line

def run(args) -> int:
    if args.local and not args.dir:
        raise ToolError("--local needs --dir CLUSTER_DIR (the supervisor's cluster "
                        "directory: cluster id, brokers, log dirs)")
    bootstrap = args.bootstrap_server
    if bootstrap is None and args.dir:
        bootstrap = cluster_layout(args.dir)[2]
    if bootstrap is None:
        raise ToolError("--bootstrap-server is required (or --dir of a local cluster)")
    partitions = check_topic(bootstrap, args.topic)
    if any(m.leader < 0 for m in partitions.values()):
        offline = sorted(p for p, m in partitions.items() if m.leader < 0)
        raise ToolError(f"partitions {offline} of {args.topic} have no leader")
    recording = results.Run.start(args.results, NAME, args) if args.results else None
    progress = Progress(args.reporting_interval, args.show_detailed_stats,
                        per_second=recording is not None)
    if not args.hide_header:  # Kafka prints the header first, the figures at the end
        print(DETAILED_HEADER if args.show_detailed_stats else HEADER, flush=True)
    start_s = time.time()
    if args.local:
        messages, total_bytes, rebalance_ms, end_s = consume_local(args, bootstrap, partitions,
                                                                   progress)
    else:
        messages, total_bytes, rebalance_ms, end_s = consume_fetch(args, bootstrap,
                                                                   sorted(partitions), progress)
    if not args.show_detailed_stats:
        print(result_line(start_s, end_s, total_bytes, messages, rebalance_ms), flush=True)
    if recording is not None:
        _record(recording, progress, bootstrap, args, start_s, end_s, messages, total_bytes,
                rebalance_ms)
    return 0


def seconds_table(progress: Progress):
    """The results store's ``consume`` samples: records and bytes read in each second."""
    import pyarrow as pa
    seconds = sorted(progress.seconds.items())
    return pa.table({
        "second": pa.array([s * 1_000_000 for s, _ in seconds],
                           type=pa.timestamp("us", tz="UTC")),
        "records": pa.array([c[0] for _, c in seconds], type=pa.int64()),
        "bytes": pa.array([c[1] for _, c in seconds], type=pa.int64())})


def _record(recording, progress: Progress, bootstrap: str, args, start_s: float,
            end_s: float, messages: int, total_bytes: int, rebalance_ms: float) -> None:
    recording.add_samples("consume", seconds_table(progress))
    elapsed_s = max(1e-9, end_s - start_s)
    cluster, topic = results.describe(bootstrap, args.topic)
    recording.finish(summary={"records": messages, "bytes": total_bytes,
                              "seconds": elapsed_s, "records_per_s": messages / elapsed_s,
                              "mb_per_s": total_bytes / MB_BYTES / elapsed_s,
                              "rebalance_ms": rebalance_ms,
                              "mode": "local" if args.local else "fetch"},
                     cluster=cluster, topic=topic)


def register(subparsers) -> None:
    parser = add_tool_parser(subparsers, NAME, "Kafka's consumer performance test", __doc__)
    parser.add_argument("--bootstrap-server", default=None, help="HOST:PORT[,...]")
    parser.add_argument("--topic", required=True, help="the topic to consume from")
    parser.add_argument("--messages", type=positive_int, required=True,
                        help="the number of messages to consume")
    parser.add_argument("--fetch-size", type=positive_int, default=FETCH_SIZE_DEFAULT,
                        help="bytes to fetch per partition and request (default 1 MiB)")
    parser.add_argument("--timeout", type=positive_int, default=TIMEOUT_MS_DEFAULT,
                        help="max ms between returned records (default 10000)")
    parser.add_argument("--from-latest", action="store_true",
                        help="start at the end of each partition, not the beginning")
    parser.add_argument("--hide-header", action="store_true", help="skip the header line")
    parser.add_argument("--show-detailed-stats", action="store_true",
                        help="a line per --reporting-interval instead of the summary")
    parser.add_argument("--results", default=None, type=absolute_path, metavar="DIR",
                        help="record the run in the results store DIR (node.perf.results)")
    parser.add_argument("--reporting-interval", type=positive_int, default=5000,
                        help="ms between --show-detailed-stats lines (default 5000)")
    parser.add_argument("--local", action="store_true",
                        help="read the segment files zero-copy (LocalReader), not with Fetch")
    parser.add_argument("--dir", default=None, type=absolute_path,
                        help="the cluster directory (for --local; also gives the brokers)")
    parser.set_defaults(func=lambda args: run_tool(NAME, run, args))
