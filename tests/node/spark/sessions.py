"""What the Spark test modules share: a cluster of their own and a local[2] session
with the minikafka source registered (each module's fixtures wrap these)."""
from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def own_cluster(directory, brokers: int, config: dict | None = None):
    """A cluster under ``directory`` with a unique id; stopped and its shared memory
    removed after."""
    from node.cluster import Cluster
    from shm.names import cleanup_cluster
    from tests.conftest import new_cluster_id
    cid = new_cluster_id()
    cluster = Cluster.up(directory, brokers, cluster_id=cid, config=config)
    try:
        yield cluster
    finally:
        cluster.down(grace_s=10)
        cleanup_cluster(cid)


@contextlib.contextmanager
def local_session(app_name: str):
    """A local[2] SparkSession on loopback, quiet, with the source registered (made
    without ``jar.configure``: read_segments adds the jar to such a session itself)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master("local[2]").appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    from node.spark import register
    register(session)
    try:
        yield session
    finally:
        session.stop()
