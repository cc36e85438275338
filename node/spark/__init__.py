"""minikafka topics in Spark: ``register(spark)`` makes ``format("minikafka")`` known
(see ``node.spark.source``); ``read_segments`` reads a local cluster's topics with the
JVM segment reader (``node.spark.segments``, ``node.spark.jar``); ``read_fetched`` reads
any cluster's over Fetch with the same reader (``node.spark.fetched``), and
``release_spools`` removes what it fetched."""
from __future__ import annotations


def register(spark) -> None:
    from node.spark.source import MinikafkaDataSource
    spark.dataSource.register(MinikafkaDataSource)


def read_segments(spark, dir: str, subscribe: str, **options):
    from node.spark.segments import read_segments as read
    return read(spark, dir, subscribe, **options)


def read_fetched(spark, bootstrap: str, subscribe: str, **options):
    from node.spark.fetched import read_fetched as read
    return read(spark, bootstrap, subscribe, **options)


def release_spools() -> int:
    from node.spark.fetched import release_spools as release
    return release()
