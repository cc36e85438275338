"""Chaos runs (``minikafka chaos run|check|replay|sweep``): the workload processes
(``worker``), the nemesis that applies faults on a schedule (``nemesis``; ``compose``
draws rounds of overlapping faults), the pure checker of the recorded history
(``checker``, its consumer-group part in ``group_checker``), the history's Parquet files
and the client workers' JSON op events (``history``) and the run that ties them together
(``run``).

May import: ``shm`` (the final read of every replica's log) and ``node``'s client side
with the supervisor (``node.client``, ``node.wire``, ``node.cluster``, ``node.tools``,
``node.waiting``, ``node.paths``); no other package of ``bench``.
"""
