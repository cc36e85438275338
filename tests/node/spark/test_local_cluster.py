"""The Spark source and job beyond one JVM (issue 13, item 6): Spark's
``local-cluster[2,1,1024]`` master runs two executors as separate JVM processes, each
with its own Python workers, as a standalone Spark cluster would; they read the topic
over Fetch. Run in a child process: one SparkContext per process, and this test
worker's module-scoped local session may be alive."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.node.spark.test_source import _produce, cluster  # noqa: F401 (fixture)

pytestmark = [pytest.mark.spark, pytest.mark.process, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[3]

CHILD = r"""
import json, os, sys
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
from pyspark.sql import SparkSession
bootstrap, topic = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
         .appName("minikafka-local-cluster-test")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
from node.spark import register
register(spark)
df = (spark.read.format("minikafka").option("bootstrap.servers", bootstrap)
      .option("subscribe", topic).option("minPartitions", "4").load())
rows = {f"{r.partition}/{r.offset}": r.value.decode() for r in df.collect()}
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
pids = spark.sparkContext.parallelize(range(8), 8).map(lambda _: os.getppid()).distinct().count()
print(json.dumps({"rows": rows, "executors": executors, "worker_parents": pids}))
spark.stop()
"""


def test_executors_in_separate_jvms_read_the_topic_over_fetch(cluster):  # noqa: F811
    written = _produce(cluster, "remote", 1200)
    done = subprocess.run([sys.executable, "-c", CHILD, cluster.bootstrap_servers, "remote"],
                          cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["executors"] == 2
    assert answer["worker_parents"] >= 2          # Python workers under both executors
    expected = {f"{p}/{o}": v.decode() for (p, o), (_, v) in written.items()}
    assert answer["rows"] == expected
