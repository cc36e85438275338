"""The PySpark jobs: ``analyze`` (``minikafka analyze``: tables, plots and an HTML
report over a results store; ``series``: which runs make one throughput-latency curve),
``analyze_chaos`` (the same over chaos runs' histories)
and ``spark_source`` (``format("minikafka")`` against Parquet, timed). Spark's log4j
configuration ``log4j2-analyze.properties`` is package data.

May import: ``node.spark``, ``node.perf`` (the results store's schema), ``node.tools``,
``node.client``, ``node.cluster``, ``node.paths``; no other package of ``bench``.
"""
