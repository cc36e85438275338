"""minikafka topics in Spark: ``register(spark)`` makes ``format("minikafka")`` known
(see ``node.spark.source``)."""
from __future__ import annotations


def register(spark) -> None:
    from node.spark.source import MinikafkaDataSource
    spark.dataSource.register(MinikafkaDataSource)
