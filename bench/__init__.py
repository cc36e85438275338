"""What runs above the cluster: benchmarks, chaos runs, the teaching tools, analysis.

``bench`` sits above ``node``: it may import ``node``, ``shm`` and ``zk_lite``, and
nothing of ``node`` imports it. Its packages, by purpose:

- ``bench.perf``: the measuring tools, their workloads and the peers they are compared to;
- ``bench.chaos``: the chaos workload, the nemesis, the checker (``minikafka chaos``);
- ``bench.teach``: the scenarios, the dashboard and ``top``;
- ``bench.analysis``: the PySpark jobs over results stores and chaos runs;
- ``bench.cli``: the ``minikafka`` console script, ``node.cli``'s parser with bench's
  subcommands added (the only module that knows them all).

None of them reaches into ``node.broker``: a broker is a process started with
``python -m node.broker``. ``tests/test_layering.py`` checks what each package imports.
"""
