"""The broker wire, sans-I/O: ``protocol`` (frames, headers, bodies, API keys),
``errors`` (Kafka's error codes and exceptions) and ``zkdata`` (the coordinator's znode
paths and JSON values). Imports nothing else of ``node``.
"""
