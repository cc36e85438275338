"""format("minikafka"): a real cluster read by a real Spark, over Fetch and locally."""
from __future__ import annotations

import sys

import pytest

from node.spark import source
from tests.node.spark.sessions import local_session, own_cluster

# ------------------------------------------------------------------ pure parts


def test_split_reaches_min_partitions_without_gaps_or_overlaps():
    ranges = [("t", 0, 0, 1000), ("t", 1, 10, 20), ("t", 2, 5, 5)]
    out = source.split(ranges, 8)
    assert len(out) >= 8 and ("t", 2, 5, 5) not in out
    for topic, partition, start, end in ranges:
        covered = sorted((s, e) for t, p, s, e in out if (t, p) == (topic, partition))
        if end > start:
            assert covered[0][0] == start and covered[-1][1] == end
            assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))
    assert source.split(ranges, None) == ranges[:2]
    assert len(source.split([("t", 0, 0, 3)], 10)) == 3        # no range below one record


def test_group_deals_ranges_into_at_most_n_tasks_of_about_equal_records():
    ranges = [source.Range("t", p, 0, size, "h:1")
              for p, size in enumerate([900, 100, 500, 500, 300, 700])]
    groups = source.group(ranges, 2)
    assert len(groups) == 2
    assert sorted(r.partition for g in groups for r in g) == list(range(6))
    sizes = sorted(sum(r.end - r.start for r in g) for g in groups)
    assert sizes == [1500, 1500]
    assert all(g == sorted(g, key=lambda r: r.partition) for g in groups)
    assert source.group(ranges, None) == [[r] for r in ranges]
    assert source.group(ranges[:1], 4) == [ranges[:1]]


@pytest.mark.parametrize("text, expected", [
    ("earliest", "earliest"), ("latest", "latest"),
    ('{"t": {"0": 5, "1": -2}}', {"t": {0: 5, 1: -2}}),
])
def test_offset_options(text, expected):
    assert source._offset_spec({"startingoffsets": text}, "startingOffsets", "x") == expected


@pytest.mark.parametrize("options, words", [
    ({}, "bootstrap.servers"),
    ({"bootstrap.servers": "h:1"}, "subscribe"),
    ({"bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "{bad"},
     "startingOffsets"),
    ({"bootstrap.servers": "h:1", "subscribe": "t", "minPartitions": "zero"},
     "minPartitions"),
    ({"bootstrap.servers": "h:1", "subscribe": "t", "maxPartitions": "0"},
     "maxPartitions"),
    ({"bootstrap.servers": "h:1", "subscribe": "t", "maxPartitions": "2",
      "minPartitions": "4"}, "maxPartitions .2. is below minPartitions"),
])
def test_wrong_options_are_one_clear_message(options, words):
    with pytest.raises(source.SourceError, match=words):
        source.BatchReader(options)


# ------------------------------------------------------------------ real Spark

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with own_cluster(tmp_path_factory.mktemp("spark") / "cluster", 2) as c:
        yield c


@pytest.fixture(scope="module")
def spark():
    with local_session("minikafka-tests") as session:
        yield session


def _produce(cluster, topic: str, n: int, partitions: int = 3, start: int = 0) -> dict:
    """Create (if needed) and fill ``topic``; {(partition, offset): (key, value)}."""
    from node.client import Admin, Producer
    admin = Admin(bootstrap_servers=cluster.bootstrap_servers)
    try:
        if topic not in admin.list_topics():
            admin.create_topic(topic, partitions, 2)
    finally:
        admin.close()
    producer = Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                        batch_size=2048)
    try:
        futures = {(b"k%d" % (i % 5), b"value-%d" % i): producer.send(
            topic, b"value-%d" % i, key=b"k%d" % (i % 5)) for i in range(start, start + n)}
        producer.flush()
        return {(f.get(10).partition, f.get(10).offset): kv for kv, f in futures.items()}
    finally:
        producer.close()


def _reader(cluster, spark, mode: str, topic: str):
    """A batch reader of ``topic``: over Fetch, or local (the segment files)."""
    reader = spark.read.format("minikafka").option("subscribe", topic)
    return reader.option("dir", str(cluster.dir)) if mode == "local" else \
        reader.option("bootstrap.servers", cluster.bootstrap_servers)


def _rows(df) -> dict:
    return {(r.partition, r.offset): (r.key, r.value) for r in df.collect()}


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fetch", "local"])
def test_what_the_producer_wrote_is_read_back_exactly(cluster, spark, mode):
    topic = f"round-{mode}"
    written = _produce(cluster, topic, 2500)
    df = _reader(cluster, spark, mode, topic).option("minPartitions", "6").load()
    assert df.rdd.getNumPartitions() >= 6
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition",
                                                  "offset", "timestamp", "timestampType"]
    rows = _rows(df)
    assert rows == written
    assert {r.topic for r in df.select("topic").distinct().collect()} == {topic}
    total = df.groupBy("partition").agg({"value": "count"}).collect()
    assert sum(r[1] for r in total) == 2500


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fetch", "local"])
def test_max_partitions_reads_several_ranges_per_task_exactly(cluster, spark, mode):
    topic = f"grouped-{mode}"
    written = _produce(cluster, topic, 1200)
    df = _reader(cluster, spark, mode, topic).option("maxPartitions", "2").load()  # 3 partitions, 2 tasks
    assert df.rdd.getNumPartitions() == 2
    assert _rows(df) == written
    per_task = df.rdd.glom().map(len).collect()
    assert len(per_task) == 2 and min(per_task) > 0 and sum(per_task) == 1200


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_offset_ranges_and_an_unknown_topic(cluster, spark):
    topic = "ranges"
    written = _produce(cluster, topic, 900)
    per_partition = {}
    for partition, offset in written:
        per_partition[partition] = max(per_partition.get(partition, -1), offset) + 1
    start = '{"%s": {"0": 10, "1": -2}}' % topic
    end = '{"%s": {"0": 20, "2": 5}}' % topic
    df = (spark.read.format("minikafka").option("bootstrap.servers",
                                                cluster.bootstrap_servers)
          .option("subscribe", topic).option("startingOffsets", start)
          .option("endingOffsets", end).load())
    rows = _rows(df)
    expected = {k: v for k, v in written.items()
                if (k[0] == 0 and 10 <= k[1] < 20) or (k[0] == 1) or (k[0] == 2 and k[1] < 5)}
    assert rows == expected
    latest = (spark.read.format("minikafka").option("bootstrap.servers",
                                                    cluster.bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "latest").load())
    assert latest.count() == 0
    with pytest.raises(Exception, match="unknown topic 'nope'"):
        (spark.read.format("minikafka").option("bootstrap.servers", cluster.bootstrap_servers)
         .option("subscribe", "nope").load().count())


@pytest.mark.process
@pytest.mark.slow
def test_a_leader_change_during_a_read_loses_and_repeats_nothing(cluster):
    """An input partition read over Fetch (what an executor runs): its leader is killed
    after the first Arrow batch; the read follows the new leader and yields every record
    once, with the offsets the Producer got."""
    from node.client import Admin, Producer
    topic = "moving"
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topic(topic, 1, 2)
        leader = admin.describe_topics([topic])[topic][0].leader
    n = source.ROWS_PER_ARROW_BATCH * 2 + 500
    with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
        producer.send_many(topic, [b"m%d" % i for i in range(n)], partition=0)
        producer.flush()
    part = source.Range(topic, 0, 0, n, cluster.bootstrap_servers, None, leader)
    batches = source.read_range(part)
    got = [next(batches)]
    cluster.kill(leader, "KILL")
    try:
        got += list(batches)
    finally:
        cluster.start(leader)
    offsets = [o for b in got for o in b.column("offset").to_pylist()]
    values = [v for b in got for v in b.column("value").to_pylist()]
    assert offsets == list(range(n))
    assert values == [b"m%d" % i for i in range(n)]


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_the_writer_produces_rows(cluster, spark):
    topic = "written"
    _produce(cluster, topic, 0, partitions=2)
    data = [(b"k%d" % i, b"w%d" % i) for i in range(300)]
    spark.createDataFrame(data, "key binary, value binary").write.format("minikafka") \
        .option("bootstrap.servers", cluster.bootstrap_servers).option("topic", topic) \
        .mode("append").save()
    back = (spark.read.format("minikafka").option("bootstrap.servers",
                                                  cluster.bootstrap_servers)
            .option("subscribe", topic).load())
    assert sorted((r.key, r.value) for r in back.collect()) == sorted(data)


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_streaming_micro_batches_restart_from_the_checkpoint(cluster, spark, tmp_path):
    topic = "streamed"
    first = _produce(cluster, topic, 400, partitions=2)
    checkpoint, sink = str(tmp_path / "checkpoint"), str(tmp_path / "sink")

    def run_available_now():
        stream = (spark.readStream.format("minikafka")
                  .option("bootstrap.servers", cluster.bootstrap_servers)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .load())
        query = (stream.writeStream.format("parquet").option("path", sink)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True)
                 .start())
        query.awaitTermination(120)
        assert query.exception() is None

    run_available_now()
    assert _rows(spark.read.parquet(sink)) == first
    second = _produce(cluster, topic, 250, partitions=2, start=400)
    run_available_now()   # a restart: only what the checkpoint has not committed
    rows = spark.read.parquet(sink).select("partition", "offset").collect()
    assert len(rows) == len({(r.partition, r.offset) for r in rows}) == 650
    assert _rows(spark.read.parquet(sink)) == {**first, **second}


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_the_audit_finds_every_acknowledged_record_and_names_a_missing_one(cluster, spark,
                                                                          tmp_path):
    import subprocess

    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from bench.analysis import analyze
    topic = "audited"
    _produce(cluster, topic, 0, partitions=2)
    store = tmp_path / "store"
    result = subprocess.run(
        [sys.executable, "-m", "node.cli", "producer-perf-test", "--topic", topic,
         "--num-records", "1500", "--record-size", "100", "--throughput", "-1",
         "--producer-props", f"bootstrap.servers={cluster.bootstrap_servers}", "acks=all",
         "--results", str(store)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    runs = analyze.load_runs(store)
    produce = analyze.read_kind(spark, store, "produce")
    windows, mismatched = analyze.audit(spark, F, produce, runs, cluster.bootstrap_servers)
    assert sum(w["produced"] for w in windows) == sum(w["consumed"] for w in windows) == 1500
    assert mismatched == []
    # An acknowledged record the topic does not have (its offset moved past the end):
    # the audit must name its window.
    [part] = list(store.glob("samples/produce/run_id=*/part-0.parquet"))
    table = pq.read_table(part)
    offsets = table["offset"].to_pylist()
    offsets[0] = 10**9
    pq.write_table(table.set_column(table.schema.get_field_index("offset"), "offset",
                                    pc.cast(pa_array(offsets), table["offset"].type)), part)
    produce = analyze.read_kind(spark, store, "produce")
    windows, mismatched = analyze.audit(spark, F, produce, runs, cluster.bootstrap_servers)
    assert len(mismatched) == 1 and mismatched[0]["produced"] - mismatched[0]["consumed"] == 1


def pa_array(values):
    import pyarrow as pa
    return pa.array(values, type=pa.int64())


CLICK_V1 = {"type": "record", "name": "Click", "namespace": "test",
            "fields": [{"name": "user", "type": "string"},
                       {"name": "clicks", "type": "long"},
                       {"name": "at", "type": {"type": "long",
                                               "logicalType": "timestamp-millis"}}]}
CLICK_V2 = {**CLICK_V1, "fields": CLICK_V1["fields"] + [
    {"name": "tags", "type": {"type": "map", "values": "int"}, "default": {}}]}


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fetch", "local"])
def test_avro_values_become_typed_columns(cluster, spark, mode):
    """Values written with two versions of a schema read as one typed table with the
    newest version (old values get its defaults), in both modes; a tombstone is a null
    struct; the columns aggregate like any others."""
    import datetime

    from pyspark.sql import functions as F

    from node.client import Producer
    from node.client.avro import AvroSerializer, SchemaRegistry
    topic = f"typed-{mode}"
    _produce(cluster, topic, 0, partitions=2)
    at = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.timezone.utc)
    expected = {}
    with SchemaRegistry(cluster.zookeeper) as registry:
        for partition, schema in ((0, CLICK_V1), (1, CLICK_V2)):
            serializer = AvroSerializer(registry, schema, f"{topic}-value")
            with Producer(cluster.bootstrap_servers, value_serializer=serializer) as p:
                futures = []
                for i in range(120):
                    value = {"user": f"u{i % 4}", "clicks": i, "at": at}
                    if schema is CLICK_V2:
                        value["tags"] = {"n": i}
                    futures.append((value, p.send(topic, value, partition=partition)))
                tombstone = p.send(topic, None, partition=partition)
                p.flush()
                for value, future in futures:
                    expected[(partition, future.get(10).offset)] = \
                        {"tags": {}, **value}
                expected[(partition, tombstone.get(10).offset)] = None
    reader = spark.read.format("minikafka").option("subscribe", topic) \
        .option("valueFormat", "avro")
    reader = reader.option("dir", str(cluster.dir)) if mode == "local" else \
        reader.option("bootstrap.servers", cluster.bootstrap_servers) \
        .option("schema.registry", cluster.zookeeper)
    df = reader.load()
    assert df.schema["value"].dataType.simpleString() == \
        "struct<user:string,clicks:bigint,at:timestamp,tags:map<string,int>>"
    rows = {(r.partition, r.offset): None if r.value is None else {
        "user": r.value.user, "clicks": r.value.clicks,
        "at": r.value.at.astimezone(datetime.timezone.utc), "tags": r.value.tags}
        for r in df.collect()}
    assert rows == expected
    sums = {r.user: r.total for r in df.where(F.col("value").isNotNull())
            .groupBy(F.col("value.user").alias("user"))
            .agg(F.sum("value.clicks").alias("total")).collect()}
    assert sums == {f"u{k}": 2 * sum(i for i in range(120) if i % 4 == k) for k in range(4)}


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_avro_option_errors_are_one_clear_message(cluster, spark):
    _produce(cluster, "untyped", 3, partitions=1)
    base = {"bootstrap.servers": cluster.bootstrap_servers, "subscribe": "untyped"}
    with pytest.raises(source.SourceError, match="valueFormat"):
        source.BatchReader({**base, "valueFormat": "protobuf"})
    with pytest.raises(source.SourceError, match="schema.registry"):
        source.BatchReader({**base, "valueFormat": "avro"})
    with pytest.raises(source.SourceError, match="no schema registered under subject "
                                                 "'untyped-value'"):
        source.BatchReader({**base, "valueFormat": "avro", "schema.registry": cluster.zookeeper})
    # Values that are not Avro: the task fails naming the problem.
    from node.client.avro import SchemaRegistry
    with SchemaRegistry(cluster.zookeeper) as registry:
        registry.register("untyped-value", CLICK_V1)
    with pytest.raises(Exception, match="not an Avro value"):
        (spark.read.format("minikafka").options(**base).option("valueFormat", "avro")
         .option("schema.registry", cluster.zookeeper).load().collect())


def test_a_local_read_waits_for_the_board_to_show_the_ranges_end(monkeypatch):
    """The range's end comes from ListOffsets, the local reader's from the broker's
    board, published BOARD_PUBLISH_DELAY_MS later (CI: "the local log ends at 32,
    before 33" right after a transaction marker). The walk waits for the board, and
    still fails, naming the gap, when the board never gets there."""
    import shm.local_reader
    import node.perf.consumer
    from shm.batch import build_batch
    from shm.local_reader import LocalRead
    batch = build_batch([b"marker"], base_offset=32)
    boards = []

    class Reader:
        """The board shows HW 32 for the first reads, then 33 (or never)."""
        def __init__(self, *args):
            self.reads = 0

        def read(self, position, max_bytes):
            self.reads += 1
            hw = 33 if boards[0] is not None and self.reads > boards[0] else 32
            if position >= hw:
                return LocalRead([], position, hw, 0, 0)
            return LocalRead([memoryview(bytes(batch))], 33, hw, 0, 0,
                             (("segment", 0, len(batch), 1),))

        def close(self):
            pass
    monkeypatch.setattr(shm.local_reader, "LocalReader", Reader)
    monkeypatch.setattr(node.perf.consumer, "cluster_layout", lambda d: ("c", {0: "/x"}, ""))
    monkeypatch.setattr(source, "BOARD_LAG_MAX_S", 0.2)
    part = source.Range("txn", 0, 32, 33, "h:1", cluster_dir="/d", leader=0)
    boards.append(3)                 # the board catches up after 3 reads
    assert [h.base_offset for _, _, h in source.walk_local(part, 1024)] == [32]
    boards[0] = None                 # it never does
    with pytest.raises(source.SourceError, match="the local log ends at 32, before 33"):
        list(source.walk_local(part, 1024))
