"""Teaching tools: the seeds' replication stories told on real processes
(``minikafka scenario``: ``catalog``, ``stage``, ``run``), the live dashboard
(``minikafka dashboard``, its page in ``static/``), ``minikafka top``, and ``delay``
(how long an election takes to show on the dashboard).

May import: ``bench.chaos`` (a scenario's history is checked by the chaos checker and
read back as a chaos run reads it), ``shm`` (the replica-state board) and ``node``'s
client side with the supervisor and ``node.http_guard``; no other package of ``bench``.
"""
