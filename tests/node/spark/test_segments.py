"""The JVM segment reader (``node.spark.segments``, ``node/spark/java``; issue 29): the
same rows as the Python source's local mode on a real cluster (several partitions and
segments, null keys, a compacted log with holes, transactions with markers), one
clear error for a file that is gone or cut, and the jar's build from a clean cache.
The same reader over batches fetched into a spool (``node.spark.fetched``): the same
rows again, a range fetched in many small answers, a released spool's clear error."""
from __future__ import annotations

import json
import os
import shutil
import uuid
import zipfile

import pytest

from node.spark import jar
from node.waiting import poll_until
from tests.node.spark.sessions import local_session, own_cluster

SEGMENT_BYTES = "4096"
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "4096",
             "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"}
CLEAN_TIMEOUT_S = 60.0


# ------------------------------------------------------------------ the jar's build

@pytest.mark.process
@pytest.mark.slow
def test_the_jar_builds_from_a_clean_cache_and_is_reused(tmp_path):
    built = jar.jar_path(tmp_path)
    assert built.parent == tmp_path and jar.source_hash() in built.name
    with zipfile.ZipFile(built) as z:
        assert "minikafka/spark/SegmentSource.class" in z.namelist()
    stamp = built.stat().st_mtime_ns
    assert jar.jar_path(tmp_path) == built and built.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [built.name]     # no build leftovers


def test_no_javac_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(jar.JarUnavailable, match="no javac"):
        jar.jar_path(tmp_path)


# ------------------------------------------------------------------ real Spark

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with own_cluster(tmp_path_factory.mktemp("segments") / "cluster", 1,
                     {"log.cleaner.backoff.ms": "200"}) as c:
        yield c


@pytest.fixture(scope="module")
def spark():
    # Without jar.configure: read_segments adds the jar (ADD JAR) to a session made
    # without it, as it must when this test worker's JVM started before (another
    # module's session). The bench makes its session with jar.configure.
    with local_session("minikafka-segments-tests") as session:
        yield session


def _create(cluster, topic: str, partitions: int, config: dict) -> None:
    from node.client import Admin
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topic(topic, partitions, 1, config=config)


def _all_rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=lambda r: (r[2], r[3], r[4]))


def _python(spark, cluster, topic: str, **options):
    return (spark.read.format("minikafka").option("dir", str(cluster.dir))
            .option("subscribe", topic).options(**options).load())


def _jvm(spark, cluster, topic: str, **options):
    from node.spark import read_segments
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # no fallback to the Python source here
        return read_segments(spark, dir=str(cluster.dir), subscribe=topic, **options)


def _fetched(spark, cluster, topic: str, **options):
    from node.spark import read_fetched
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # no fallback to the Python source here
        return read_fetched(spark, bootstrap=cluster.bootstrap_servers, subscribe=topic,
                            **options)


@pytest.fixture(scope="module")
def plain(cluster):
    """3 partitions of small segments; every 7th record has a null key."""
    from node.client import Producer
    topic = "plain"
    _create(cluster, topic, 3, {"segment.bytes": SEGMENT_BYTES})
    with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                  batch_size=2048) as producer:
        futures = [producer.send(topic, b"value-%d" % i,
                                 key=None if i % 7 == 0 else b"k%d" % (i % 5))
                   for i in range(3000)]
        producer.flush()
        for f in futures:
            f.get(10)
    return topic


def _segments(cluster, topic: str, partition: int) -> list[str]:
    found = [p for p in cluster.dir.rglob(f"{topic}-{partition}/*.log")]
    return sorted(str(p) for p in found)


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_the_same_rows_as_the_python_source(cluster, spark, plain):
    assert len(_segments(cluster, plain, 0)) >= 3
    expected = _all_rows(_python(spark, cluster, plain))
    assert len(expected) == 3000 and sum(r[0] is None for r in expected) == 429
    jvm = _jvm(spark, cluster, plain)
    assert jvm.schema == _python(spark, cluster, plain).schema
    assert _all_rows(jvm) == expected
    assert _all_rows(_fetched(spark, cluster, plain)) == expected
    # Ranges, split and grouped tasks, and a pruned aggregation.
    ranged = {"startingOffsets": json.dumps({plain: {"0": 17}}),
              "endingOffsets": json.dumps({plain: {"1": 301}}), "minPartitions": 7}
    assert _all_rows(_jvm(spark, cluster, plain, **ranged)) == \
        _all_rows(_python(spark, cluster, plain, **ranged)) == \
        _all_rows(_fetched(spark, cluster, plain, **ranged))
    assert _all_rows(_fetched(spark, cluster, plain, maxPartitions=2)) == expected
    grouped = _jvm(spark, cluster, plain, maxPartitions=2)
    assert grouped.rdd.getNumPartitions() == 2 and _all_rows(grouped) == expected
    from pyspark.sql import functions as F
    sums = sorted(tuple(r) for r in _jvm(spark, cluster, plain).groupBy("partition")
                  .agg(F.sum(F.length("value")), F.count(F.lit(1))).collect())
    assert sums == sorted(tuple(r) for r in _python(spark, cluster, plain)
                          .groupBy("partition")
                          .agg(F.sum(F.length("value")), F.count(F.lit(1))).collect())


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_a_compacted_log_with_holes(cluster, spark):
    from node.client import Producer
    topic = "compacted"
    _create(cluster, topic, 1, COMPACTED)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=1,
                  batch_size=1024) as producer:
        # Every 10th key is written once (it stays), the others over and over (cleaned).
        futures = [producer.send(topic, b"v%06d" % i, partition=0,
                                 key=b"u%04d" % i if i % 10 == 0 else b"k%02d" % (i % 12))
                   for i in range(1500)]
        producer.flush()
        for f in futures:
            f.get(10)

    def holes():
        rows = _all_rows(_python(spark, cluster, topic))
        return rows if len(rows) < 1000 else None
    expected = poll_until(holes, CLEAN_TIMEOUT_S, what="the cleaner's holes", interval_s=1.0)
    offsets = [r[4] for r in expected]
    assert offsets[-1] - offsets[0] + 1 > len(offsets)          # holes between offsets
    assert _all_rows(_jvm(spark, cluster, topic)) == expected
    assert _all_rows(_fetched(spark, cluster, topic)) == expected
    middle = offsets[len(offsets) // 2] + 1                      # a start in a hole
    ranged = {"startingOffsets": json.dumps({topic: {"0": middle}})}
    assert _all_rows(_jvm(spark, cluster, topic, **ranged)) == \
        _all_rows(_python(spark, cluster, topic, **ranged)) == \
        _all_rows(_fetched(spark, cluster, topic, **ranged))


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_transactions_markers_give_no_rows(cluster, spark):
    from node.client import Producer
    topic = "txn"
    _create(cluster, topic, 2, {})
    sent = []
    producer = Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                        transactional_id="seg-" + uuid.uuid4().hex[:8])
    try:
        producer.init_transactions()
        for round_, commit in enumerate((True, False, True)):
            producer.begin_transaction()
            for i in range(20):
                value = b"t%d-%d" % (round_, i)
                producer.send(topic, value, key=b"k", partition=i % 2)
                sent.append(value)
            producer.flush(30)
            (producer.commit_transaction if commit else producer.abort_transaction)()
    finally:
        producer.close()
    expected = _all_rows(_python(spark, cluster, topic))
    assert sorted(r[1] for r in expected) == sorted(sent)    # no marker rows
    # The markers are in the log: offsets skip them.
    assert max(r[4] for r in expected) >= 30
    assert _all_rows(_jvm(spark, cluster, topic)) == expected
    assert _all_rows(_fetched(spark, cluster, topic)) == expected


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_fetched_in_small_answers_then_released(cluster, spark, plain, tmp_path,
                                               monkeypatch):
    """Answers of 700 bytes end inside a batch (the cut batch is fetched again) and give
    nothing to the partitions after the first (the answer's bytes ran out: no hole, as
    the bench's first run took them, losing a partition's tail); the spool holds each
    range's batches once; a released spool fails the read with the reader's message; a
    wrong option or spoolDir is one clear error."""
    from node.spark import fetched, release_spools
    from node.spark.source import SourceError
    expected = _all_rows(_python(spark, cluster, plain))
    monkeypatch.setattr(fetched, "PARTITION_FETCH_BYTES", 700)
    monkeypatch.setattr(fetched, "FETCH_BYTES", 700)
    spool = tmp_path / "spool"
    spool.mkdir()
    df = _fetched(spark, cluster, plain, spoolDir=str(spool))
    assert _all_rows(df) == expected
    (directory,) = list(spool.iterdir())
    files = sorted(directory.glob("*.log"))
    assert len(files) == 3            # one file per range, each the range's batches once
    assert sorted(p.name for p in directory.glob("*.done")) == [f.name + ".done" for f in files]
    from node.spark.segments import plan_range
    from node.spark.source import BatchReader
    local = [piece for part in BatchReader({"dir": str(cluster.dir), "subscribe": plain}).plan
             for piece in plan_range(part)]
    assert sum(f.stat().st_size for f in files) == sum(p["end"] - p["start"] for p in local)
    assert release_spools() >= 1 and not directory.exists()
    with pytest.raises(Exception, match="the file is gone"):
        df.collect()
    # A fetch that fails leaves failed marks: the action fails with its words.
    def broken(items, response):
        raise SourceError("an answer this test refused")
    monkeypatch.setattr(fetched, "_take_response", broken)
    with pytest.raises(Exception, match="the fetch failed: an answer this test refused"):
        _fetched(spark, cluster, plain).collect()
    with pytest.raises(SourceError, match="unknown options"):
        _fetched(spark, cluster, plain, dir=str(cluster.dir))
    with pytest.raises(SourceError, match="spoolDir"):
        _fetched(spark, cluster, plain, spoolDir=str(tmp_path / "missing"))


def _read_plan(spark, pieces):
    from node.spark.segments import load_plan
    return load_plan(spark, [pieces])


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_a_file_gone_or_cut_fails_with_one_clear_message(cluster, spark, plain, tmp_path):
    from node.spark.segments import plan_range
    from node.spark.source import BatchReader
    reader = BatchReader({"dir": str(cluster.dir), "subscribe": plain})
    piece = plan_range(reader.plan[0])[0]
    copy = tmp_path / "copy.log"
    shutil.copyfile(piece["path"], copy)
    good = {**piece, "path": str(copy), "ino": os.stat(copy).st_ino}
    assert _read_plan(spark, [good]).count() > 0

    def failure(pieces) -> str:
        with pytest.raises(Exception) as caught:
            _read_plan(spark, pieces).collect()
        return str(caught.value)
    assert "the file is gone" in failure([{**good, "path": str(tmp_path / "none.log")}])
    assert "the file was replaced" in failure([{**good, "ino": good["ino"] + 1}])
    assert "no batch at byte" in failure([{**good, "start": good["start"] + 1}])
    assert "expected" in failure([{**good, "base": good["base"] + 1}])
    with open(copy, "r+b") as f:
        f.truncate(good["end"] // 2)
    assert "the file has only" in failure([good])


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_a_growing_piece_is_read_as_its_file_grows_and_its_marks_end_it(
        cluster, spark, plain, tmp_path):
    """read_fetched's pieces: the reader maps a spool file as the fetch appends to it
    (here a thread copies a segment's batches in 1000-byte writes), waits for bytes
    until the range's end or the done mark, and fails with the failed mark's words or
    when a done file ends inside a batch."""
    import threading
    import time
    from node.spark.segments import plan_range
    from node.spark.source import BatchReader
    reader = BatchReader({"dir": str(cluster.dir), "subscribe": plain})
    pieces = plan_range(reader.plan[0])[:4]      # 4 segments' batches, back to back
    data = b""
    for piece in pieces:
        with open(piece["path"], "rb") as f:
            f.seek(piece["start"])
            data += f.read(piece["end"] - piece["start"])
    first, until = pieces[0]["base"], pieces[-1]["next"]
    expected = _all_rows(_read_plan(spark, [{**p, "from": first, "until": until}
                                            for p in pieces]))
    assert len(expected) > 200

    def growing(path):
        return {**pieces[0], "path": str(path), "ino": os.stat(path).st_ino, "start": 0,
                "end": -1, "base": -1, "next": until, "from": first, "until": until,
                "growing": True}

    spool = tmp_path / "grown.log"
    spool.write_bytes(b"")
    written = []

    def write() -> None:
        # Half, then the rest once the reader has the file open: it reads while the
        # file grows (it keeps it open until the range ends).
        with open(spool, "ab") as f:
            for at in range(0, len(data), 200):
                if at >= len(data) // 2 and not opened:
                    opened.append(poll_until(lambda: _opened_elsewhere(spool), 30,
                                             "the reader opening the spool file"))
                f.write(data[at:at + 200])
                f.flush()
                written.append(time.monotonic())
                time.sleep(0.005)
        (tmp_path / "grown.log.done").write_bytes(b"")
    opened: list = []
    writer = threading.Thread(target=write)
    writer.start()
    try:
        rows = _all_rows(_read_plan(spark, [growing(spool)]))
    finally:
        writer.join(30)
    assert rows == expected and len(written) > 5 and opened
    # The done mark ends a range whose rest is not there (compacted away, as a Fetch
    # that got nothing up to the HW): what was written is read.
    half = tmp_path / "half.log"
    starts = _batch_starts(data)
    assert len(starts) >= 2
    cut = starts[-1]                # the last batch is not there
    half.write_bytes(data[:cut])
    (tmp_path / "half.log.done").write_bytes(b"")
    short = _all_rows(_read_plan(spark, [growing(half)]))
    assert short == expected[:len(short)] and 0 < len(short) < len(expected)

    def failure(path) -> str:
        with pytest.raises(Exception) as caught:
            _read_plan(spark, [growing(path)]).collect()
        return str(caught.value)
    failed = tmp_path / "failed.log"
    failed.write_bytes(data[:cut])
    (tmp_path / "failed.log.failed").write_text("broker 7 is gone")
    assert "the fetch failed: broker 7 is gone" in failure(failed)
    inside = tmp_path / "inside.log"
    inside.write_bytes(data[:cut + 10])
    (tmp_path / "inside.log.done").write_bytes(b"")
    assert "the spool ends inside a batch" in failure(inside)
    # Released while a read waits for bytes (no mark yet): the file is gone.
    waiting = tmp_path / "waiting.log"
    waiting.write_bytes(data[:cut])
    remover = threading.Thread(target=lambda: (
        poll_until(lambda: _opened_elsewhere(waiting), 30, "the reader opening the file"),
        waiting.unlink()))
    remover.start()
    try:
        started = time.monotonic()
        assert "the file is gone" in failure(waiting)
        assert time.monotonic() - started < 30
    finally:
        remover.join(30)


def _opened_elsewhere(path) -> bool:
    """Whether another process (the Spark JVM) has ``path`` open."""
    target = os.path.realpath(path)
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return True
            except OSError:
                continue
    return False


def _batch_starts(data: bytes) -> list[int]:
    """The byte positions of the batches of back-to-back batches ``data``."""
    from shm.batch import read_header
    starts, position = [], 0
    while position < len(data):
        starts.append(position)
        position += read_header(memoryview(data), position).size_bytes
    return starts


@pytest.mark.spark
@pytest.mark.process
@pytest.mark.slow
def test_without_javac_the_python_source_reads_instead(cluster, spark, plain, tmp_path,
                                                       monkeypatch):
    from node.spark import read_segments
    monkeypatch.setenv("MINIKAFKA_CACHE", str(tmp_path))      # no jar built yet
    monkeypatch.setenv("PATH", str(tmp_path))                 # and no javac
    with pytest.warns(RuntimeWarning, match="no javac"):
        df = read_segments(spark, dir=str(cluster.dir), subscribe=plain)
    assert "minikafka" in df._jdf.queryExecution().toString()   # the Python source
    assert len(df.collect()) == 3000
    from node.spark import read_fetched
    with pytest.warns(RuntimeWarning, match="no javac"):
        df = read_fetched(spark, bootstrap=cluster.bootstrap_servers, subscribe=plain)
    assert "minikafka" in df._jdf.queryExecution().toString()   # its Fetch mode
    assert len(df.collect()) == 3000
