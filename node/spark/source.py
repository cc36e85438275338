"""``spark.read.format("minikafka")``: topics as Spark DataFrames (Spark 4's Python Data
Source API), with spark-sql-kafka's schema and offset options.

    from node.spark import register
    register(spark)
    df = (spark.read.format("minikafka")
          .option("bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "t1,t2")
          .option("startingOffsets", "earliest")     # or "latest", or JSON
          .option("endingOffsets", "latest")         # or JSON; -1 = latest
          .load())

Schema (spark-sql-kafka's): ``key`` binary, ``value`` binary, ``topic`` string,
``partition`` int, ``offset`` long, ``timestamp`` timestamp, ``timestampType`` int
(0: CreateTime).

Options (names as spark-sql-kafka's where it has them):

- ``bootstrap.servers`` (``kafka.bootstrap.servers`` is accepted too);
- ``subscribe``: comma-separated topics;
- ``startingOffsets``: ``earliest`` (default), ``latest``, or JSON
  ``{"t": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest); ``endingOffsets``:
  ``latest`` (default) or JSON (-1 latest). Latest is the high watermark: a read never
  sees an uncommitted record;
- ``minPartitions``: split large topic partitions into offset ranges until there are at
  least this many input partitions (default: one per topic partition);
- ``maxPartitions``: at most this many input partitions (Spark tasks): a task then
  reads several ranges one after the other (batch reads; e.g. the executors' cores:
  each task costs Spark a Python worker hand-over, and fewer, longer tasks read faster);
- ``dir``: local mode. The supervisor's cluster directory (``minikafka cluster up
  --dir``): each input partition reads its leader's segment files on this host through
  ``shm.local_reader.LocalReader`` (zero-copy, below the HW) instead of Fetch, and the
  Arrow arrays of the batches' columnar bodies become the DataFrame's columns without
  re-encoding (transaction markers give no rows). ``node.spark.read_segments`` reads
  the same snapshot with the JVM alone (``node.spark.segments``): no Python workers.

- ``valueFormat``: ``binary`` (default) or ``avro``: ``value`` becomes a struct
  column of the Avro record (``df.select("value.*")``), decoded with the schema
  registry (``node.client.avro``, ``node.spark.avro``); ``schema.registry`` is the
  coordinator's HOST:PORT (default with ``dir``: the cluster's), ``valueSubject`` the
  subject whose newest version is the reader schema (default ``<topic>-value``).

Every input partition yields Arrow record batches (one per record batch of the log,
sliced to its offset range). The driver resolves the offsets once (Metadata and
ListOffsets), so a read is one consistent snapshot: ``[start, end)`` per partition.

Streaming (``spark.readStream.format("minikafka")``): offsets are ``{"topic":
{"partition": next offset}}``; each micro-batch reads from the last offsets to the
current high watermarks, and a restart from Spark's checkpoint goes on from the offsets
it committed.

Writer (``df.write.format("minikafka").option("topic", t).mode("append").save()``):
each row's ``value`` (binary or string; required), optional ``key``, ``partition`` and
``topic`` columns (the ``topic`` option otherwise), produced with acks=all; a failed
send fails the task.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    DataSourceWriter, InputPartition, WriterCommitMessage)

from node.spark.plan import group, split

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int")
EARLIEST, LATEST = -2, -1
REQUEST_TIMEOUT_MS = 30_000
FETCH_BYTES = 8 * 1024 * 1024
POLL_MS = 500
STALL_S = 30.0          # a read that gets nothing for this long fails its task
BOARD_LAG_MAX_S = 2.0   # a local read waits this long for the board to show the range's end
BOARD_POLL_S = 0.005


class SourceError(ValueError):
    """A wrong option or an unreadable topic: one clear message."""


@dataclass
class Range(InputPartition):
    """One input partition: offsets ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int
    bootstrap: str
    cluster_dir: str | None = None
    leader: int = -1
    registry: str | None = None          # valueFormat avro: the coordinator's address
    reader_schema: str | None = None     # and the reader schema's JSON text


# ------------------------------------------------------------------ options

def _options(options) -> dict:
    return {k.lower(): v for k, v in dict(options).items()}


def _bootstrap_and_dir(opts: dict) -> tuple[str, str | None]:
    directory = opts.get("dir")
    bootstrap = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if directory and not bootstrap:
        from node.perf.consumer import cluster_layout
        from node.tools.common import ToolError
        try:
            bootstrap = cluster_layout(directory)[2]
        except ToolError as e:
            raise SourceError(f"option dir: {e}") from None
    if not bootstrap:
        raise SourceError('option "bootstrap.servers" is required (or "dir" of a local '
                          'cluster)')
    return bootstrap, directory


def _avro(opts: dict, topics: list[str], directory: str | None
          ) -> tuple[str | None, str | None]:
    """(registry address, reader schema text) for ``valueFormat`` avro, else
    (None, None)."""
    form = opts.get("valueformat", "binary").strip().lower()
    if form == "binary":
        return None, None
    if form != "avro":
        raise SourceError(f'option valueFormat: "binary" (default) or "avro", got '
                          f'{form!r}')
    address = opts.get("schema.registry")
    if not address and directory:
        address = _cluster_zookeeper(directory)
    if not address:
        raise SourceError('valueFormat avro needs option "schema.registry" (the '
                          'coordinator\'s HOST:PORT) or "dir" of a local cluster')
    subject = opts.get("valuesubject")
    if not subject:
        if len(topics) != 1:
            raise SourceError('valueFormat avro over several topics needs option '
                              '"valueSubject" (the reader schema\'s subject)')
        subject = f"{topics[0]}-value"
    from node.client.avro import RegistryError, SchemaRegistry
    from node.spark.avro import AvroTypeError, arrow_type, reader_schema
    try:
        with SchemaRegistry(address) as registry:
            schema_id, _, _ = registry.latest(subject)
            text = registry.schema_text(schema_id)
        from fastavro import parse_schema
        arrow_type(parse_schema(reader_schema(json.loads(text))))
    except (RegistryError, AvroTypeError) as e:
        raise SourceError(f"valueFormat avro, subject {subject!r}: {e}") from None
    return address, text


def _cluster_zookeeper(directory: str) -> str | None:
    from pathlib import Path
    try:
        return json.loads((Path(directory) / "cluster.json").read_text())["zookeeper"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def spark_schema(reader_text: str | None):
    """The DataFrame's schema: SCHEMA, with ``value`` the Avro record's struct when a
    reader schema is given."""
    if reader_text is None:
        return SCHEMA
    import pyarrow as pa
    from fastavro import parse_schema
    from pyspark.sql.pandas.types import from_arrow_schema
    from node.spark.avro import arrow_type, reader_schema
    value = arrow_type(parse_schema(reader_schema(json.loads(reader_text))))
    return from_arrow_schema(pa.schema([
        ("key", pa.binary()), ("value", value), ("topic", pa.string()),
        ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]))


def _topics(opts: dict) -> list[str]:
    topics = [t.strip() for t in (opts.get("subscribe") or "").split(",") if t.strip()]
    if not topics:
        raise SourceError('option "subscribe" is required: comma-separated topics')
    return topics


def _offset_spec(opts: dict, name: str, default: str):
    """"earliest" / "latest" / {topic: {partition: offset}} from an option."""
    text = opts.get(name.lower(), default).strip()
    if text in ("earliest", "latest"):
        return text
    try:
        spec = json.loads(text)
        return {str(t): {int(p): int(o) for p, o in parts.items()}
                for t, parts in spec.items()}
    except (ValueError, AttributeError, TypeError):
        raise SourceError(f'option {name}: "earliest", "latest" or JSON like '
                          f'{{"topic": {{"0": 23}}}}, got {text[:80]!r}') from None


def _int_option(opts: dict, name: str, default: int | None) -> int | None:
    text = opts.get(name.lower())
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise SourceError(f"option {name} must be an integer, got {text!r}") from None
    if value < 1:
        raise SourceError(f"option {name} must be at least 1, got {value}")
    return value


# ------------------------------------------------------------------ the driver's plan

def topic_partitions(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    """{(topic, partition): leader}; an unknown topic or a partition with no leader is
    a SourceError."""
    from node.client import Admin
    from node.wire.errors import ErrorCode, KafkaError
    admin = Admin(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        described = {}
        for topic in topics:
            try:
                described.update(admin.describe_topics([topic]))
            except KafkaError as e:
                if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise SourceError(f"unknown topic {topic!r} at {bootstrap}") from None
                raise SourceError(f"cannot describe {topic} at {bootstrap}: {e}") from None
    finally:
        admin.close()
    out = {}
    for topic in topics:
        partitions = described.get(topic) or []
        if not partitions:
            raise SourceError(f"unknown topic {topic!r} at {bootstrap}")
        for meta in partitions:
            if meta.leader < 0:
                raise SourceError(f"{topic}-{meta.partition} has no leader")
            out[(topic, meta.partition)] = meta.leader
    return out


def watermarks(bootstrap: str, tps) -> tuple[dict, dict]:
    """({tp: log start}, {tp: high watermark})."""
    from node.client import Consumer
    consumer = Consumer(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        tps = list(tps)
        consumer.assign(tps)
        earliest = consumer.beginning_offsets(tps, timeout_ms=REQUEST_TIMEOUT_MS)
        latest = consumer.end_offsets(tps, timeout_ms=REQUEST_TIMEOUT_MS)
    finally:
        consumer.close()
    key = _tp_key
    return ({key(tp): o for tp, o in earliest.items()},
            {key(tp): o for tp, o in latest.items()})


def _tp_key(tp) -> tuple[str, int]:
    return (tp.topic, tp.partition) if hasattr(tp, "topic") else (tp[0], tp[1])


def _resolve(spec, tp, earliest: dict, latest: dict, name: str) -> int:
    if spec == "earliest":
        return earliest[tp]
    if spec == "latest":
        return latest[tp]
    offset = spec.get(tp[0], {}).get(tp[1])
    if offset is None:
        return earliest[tp] if name == "startingOffsets" else latest[tp]
    if offset == EARLIEST:
        return earliest[tp]
    if offset == LATEST:
        return latest[tp]
    if not earliest[tp] <= offset <= latest[tp]:
        raise SourceError(f"{name}: offset {offset} of {tp[0]}-{tp[1]} is outside "
                          f"[{earliest[tp]}, {latest[tp]}] (log start to high watermark)")
    return offset


@dataclass
class Group(InputPartition):
    """One Spark task's input: several offset ranges, read one after the other."""

    ranges: list


# ------------------------------------------------------------------ reading a range

def read_range(part: Range):
    """Arrow record batches of the records in ``[part.start, part.end)``."""
    batches = _read_local(part) if part.cluster_dir else _read_fetch(part)
    if part.reader_schema is None:
        yield from batches
        return
    from node.spark.avro import ValueDecoder
    decoder = ValueDecoder(part.registry, part.reader_schema)
    try:
        for batch in batches:
            columns = batch.columns
            columns[1] = decoder.decode(columns[1])
            yield type(batch).from_arrays(columns, names=batch.schema.names)
    finally:
        decoder.close()


ROWS_PER_ARROW_BATCH = 65_536   # log batches are gathered up to this many rows per yield
_CONSTANTS: dict = {}


def _constant(value, n: int, type_):
    """A column of ``n`` times ``value``: a slice of one cached array (no per-row work)."""
    import pyarrow as pa
    key = (value, str(type_))
    column = _CONSTANTS.get(key)
    if column is None or len(column) < n:
        column = pa.array([value] * max(n, ROWS_PER_ARROW_BATCH), type=type_)
        _CONSTANTS[key] = column
    return column.slice(0, n)


def _arrow_batch(topic: str, partition: int, pieces: list):
    """One Arrow record batch with the source's columns, from (parsed log batch, first,
    last) pieces: the batches' own key and value arrays, sliced and concatenated."""
    import numpy as np
    import pyarrow as pa
    keys, values, offsets, millis = [], [], [], []
    for batch, first, last in pieces:
        header = batch.header
        keys.append(batch.keys.slice(first, last - first))
        values.append(batch.values.slice(first, last - first))
        offsets.append(np.arange(header.base_offset + first, header.base_offset + last,
                                 dtype=np.int64))
        millis.append(header.base_timestamp +
                      batch.timestamp_deltas[first:last].astype(np.int64))
    n = sum(len(k) for k in keys)
    return pa.RecordBatch.from_arrays([
        pa.concat_arrays(keys) if len(keys) > 1 else keys[0],
        pa.concat_arrays(values) if len(values) > 1 else values[0],
        _constant(topic, n, pa.string()),
        _constant(partition, n, pa.int32()),
        pa.array(np.concatenate(offsets)),
        pa.array(np.concatenate(millis) * 1000, type=pa.timestamp("us", tz="UTC")),
        _constant(0, n, pa.int32()),
    ], names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"])


def _gathered(part: "Range", batches):
    """Arrow record batches of about ROWS_PER_ARROW_BATCH rows from parsed log batches
    (fewer, larger hand-overs to Spark)."""
    pieces, rows = [], 0
    for batch in batches:
        window = _slice(part, batch)
        if window is None:
            continue
        pieces.append((batch, *window))
        rows += window[1] - window[0]
        if rows >= ROWS_PER_ARROW_BATCH:
            yield _arrow_batch(part.topic, part.partition, pieces)
            pieces, rows = [], 0
    if pieces:
        yield _arrow_batch(part.topic, part.partition, pieces)


def _slice(part: Range, batch):
    base = batch.header.base_offset
    count = batch.header.record_count
    first = max(0, part.start - base)
    last = min(count, part.end - base)
    return (first, last) if last > first else None


def _read_fetch(part: Range):
    yield from _gathered(part, _fetched_batches(part))


def _fetched_batches(part: Range):
    import time
    from node.client import Consumer
    consumer = Consumer(bootstrap_servers=part.bootstrap, auto_offset_reset="none",
                        max_partition_fetch_bytes=FETCH_BYTES, fetch_max_bytes=FETCH_BYTES,
                        request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        tp = (part.topic, part.partition)
        consumer.assign([tp])
        consumer.seek(tp, part.start)
        position = part.start
        last_progress = time.monotonic()
        while position < part.end:
            fetched = consumer.poll_batches(timeout_ms=POLL_MS)
            if not fetched and consumer.hole_until(tp) >= part.end:
                return          # the rest of the range was compacted away
            if not fetched:
                if time.monotonic() - last_progress > STALL_S:
                    raise SourceError(f"{part.topic}-{part.partition}: no records past "
                                      f"offset {position} for {STALL_S:.0f} s (wanted up "
                                      f"to {part.end})")
                continue
            last_progress = time.monotonic()
            for item in fetched:
                yield item.batch
                position = max(position, item.batch.header.next_offset)
                if position >= part.end:
                    return
    finally:
        consumer.close()


def _read_local(part: Range):
    yield from _gathered(part, _local_batches(part))


def _local_batches(part: Range):
    from shm.batch import parse_batch
    for view, _place, _header in walk_local(part, FETCH_BYTES):
        batch = parse_batch(view, verify_crc=False)
        if not batch.control:   # a transaction marker is no record (as Fetch)
            yield batch


def walk_local(part: Range, max_bytes: int):
    """Every batch of ``part``'s range in its leader's segment files on this host
    (``LocalReader``, below the HW), in order, as ``(view, place, header)``: place is
    (segment file, byte position, size, inode). Local mode and ``read_segments``'s plan
    both walk this way."""
    from node.perf.consumer import cluster_layout
    from shm.batch import read_header
    from shm.local_reader import LocalReader
    cluster_id, log_dirs, _ = cluster_layout(part.cluster_dir)
    if part.leader not in log_dirs:
        raise SourceError(f"{part.topic}-{part.partition}: leader {part.leader} is not a "
                          f"broker of the cluster in {part.cluster_dir}")
    reader = LocalReader(cluster_id, part.leader, log_dirs[part.leader], part.topic,
                         part.partition)
    try:
        position = part.start
        board_deadline = None
        while position < part.end:
            read = reader.read(position, max_bytes)
            if not read.batches and read.high_watermark >= part.end:
                return          # the rest of the range was compacted away
            if not read.batches and read.high_watermark <= position:
                # The broker's board is published a moment after its answers (a timer
                # of node.broker.limits.BOARD_PUBLISH_DELAY_MS, late under load): the
                # range's end, from ListOffsets, may not be on it yet.
                now = time.monotonic()
                board_deadline = board_deadline or now + BOARD_LAG_MAX_S
                if now < board_deadline:
                    time.sleep(BOARD_POLL_S)
                    continue
            if not read.batches:
                raise SourceError(f"{part.topic}-{part.partition}: the local log ends at "
                                  f"{position}, before {part.end} (did the leader move?)")
            board_deadline = None
            for view, place in zip(read.batches, read.places):
                header = read_header(view)
                yield view, place, header
                position = header.next_offset
                if position >= part.end:
                    return
    finally:
        reader.close()


# ------------------------------------------------------------------ Spark's classes

class MinikafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "minikafka"

    def schema(self):
        opts = _options(self.options)
        if opts.get("valueformat", "binary").strip().lower() == "binary":
            return SCHEMA
        bootstrap, directory = _bootstrap_and_dir(opts)
        return spark_schema(_avro(opts, _topics(opts), directory)[1])

    def reader(self, schema):
        return BatchReader(self.options)

    def streamReader(self, schema):
        return StreamReader(self.options)

    def writer(self, schema, overwrite: bool):
        return Writer(self.options)


class BatchReader(DataSourceReader):
    def __init__(self, options) -> None:
        opts = _options(options)
        self.bootstrap, self.directory = _bootstrap_and_dir(opts)
        self.topics = _topics(opts)
        self.starting = _offset_spec(opts, "startingOffsets", "earliest")
        self.ending = _offset_spec(opts, "endingOffsets", "latest")
        if self.ending == "earliest":
            raise SourceError('endingOffsets cannot be "earliest"')
        self.min_partitions = _int_option(opts, "minPartitions", None)
        self.groups = _int_option(opts, "maxPartitions", None)
        if self.groups and self.min_partitions and self.groups < self.min_partitions:
            raise SourceError(f"option maxPartitions ({self.groups}) is below "
                              f"minPartitions ({self.min_partitions})")
        self.registry, self.reader_schema = _avro(opts, self.topics, self.directory)
        self.plan = self._plan()

    def _plan(self) -> list[Range]:
        leaders = topic_partitions(self.bootstrap, self.topics)
        earliest, latest = watermarks(self.bootstrap, leaders)
        ranges = []
        for tp in sorted(leaders):
            start = _resolve(self.starting, tp, earliest, latest, "startingOffsets")
            end = _resolve(self.ending, tp, earliest, latest, "endingOffsets")
            ranges.append((tp[0], tp[1], start, max(start, end)))
        return [Range(t, p, s, e, self.bootstrap, self.directory, leaders[(t, p)],
                      self.registry, self.reader_schema)
                for t, p, s, e in split(ranges, self.min_partitions)]

    def partitions(self):
        # Spark wants at least one partition; an empty range reads nothing.
        if not self.plan:
            return [Range(self.topics[0], 0, 0, 0, self.bootstrap)]
        if not self.groups:
            return self.plan
        return [Group(g) for g in group(self.plan, self.groups)]

    def read(self, partition):
        for part in getattr(partition, "ranges", [partition]):
            if part.end > part.start:
                yield from read_range(part)


class StreamReader(DataSourceStreamReader):
    def __init__(self, options) -> None:
        opts = _options(options)
        self.bootstrap, self.directory = _bootstrap_and_dir(opts)
        self.topics = _topics(opts)
        self.starting = _offset_spec(opts, "startingOffsets", "latest")
        self.registry, self.reader_schema = _avro(opts, self.topics, self.directory)

    def _current(self) -> tuple[dict, dict, dict]:
        leaders = topic_partitions(self.bootstrap, self.topics)
        earliest, latest = watermarks(self.bootstrap, leaders)
        return leaders, earliest, latest

    def initialOffset(self) -> dict:
        leaders, earliest, latest = self._current()
        offsets = {}
        for tp in sorted(leaders):
            offsets.setdefault(tp[0], {})[str(tp[1])] = _resolve(
                self.starting, tp, earliest, latest, "startingOffsets")
        return offsets

    def latestOffset(self) -> dict:
        _, _, latest = self._current()
        offsets = {}
        for (topic, partition), offset in sorted(latest.items()):
            offsets.setdefault(topic, {})[str(partition)] = offset
        return offsets

    def partitions(self, start: dict, end: dict):
        leaders = topic_partitions(self.bootstrap, self.topics)
        ranges = []
        for topic, parts in end.items():
            for p, stop in parts.items():
                begin = start.get(topic, {}).get(p, 0)
                if stop > begin:
                    ranges.append(Range(topic, int(p), begin, stop, self.bootstrap,
                                        self.directory, leaders.get((topic, int(p)), -1),
                                        self.registry, self.reader_schema))
        return ranges

    def read(self, partition: Range):
        yield from read_range(partition)

    def commit(self, end: dict) -> None:
        pass   # nothing to release: the log keeps the records


@dataclass
class Written(WriterCommitMessage):
    records: int


class Writer(DataSourceWriter):
    def __init__(self, options) -> None:
        opts = _options(options)
        self.bootstrap, _ = _bootstrap_and_dir(opts)
        self.topic = opts.get("topic")

    def write(self, iterator) -> Written:
        from node.client import Producer
        producer = Producer(bootstrap_servers=self.bootstrap, acks="all")
        futures = []
        try:
            for row in iterator:
                fields = row.asDict() if hasattr(row, "asDict") else dict(row)
                topic = fields.get("topic") or self.topic
                if not topic:
                    raise SourceError('a row without "topic" and no "topic" option')
                if "value" not in fields:
                    raise SourceError('the rows need a "value" column')
                futures.append(producer.send(topic, _bytes(fields["value"]),
                                             key=_bytes(fields.get("key")),
                                             partition=fields.get("partition")))
            producer.flush()
            for future in futures:
                future.get(timeout=REQUEST_TIMEOUT_MS / 1000)
        finally:
            producer.close()
        return Written(len(futures))


def _bytes(value):
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return str(value).encode()
