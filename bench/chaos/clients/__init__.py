"""The chaos workload through real Kafka clients: one worker process per producer or
consumer, any client, one command line (``python -m bench.chaos.clients``), one event
stream (JSON lines on stdout, ``bench.chaos.clients.events``).

- ``CLIENTS``; ``missing(client)`` (why it cannot run here, one line, or None);
  ``present()``;
- ``worker_command(client, **options)``: the worker's command line (options: see
  ``options.argv_for``);
- ``WorkerStream``: a running worker whose events become ``bench.chaos.checker.Op`` s;
- ``group_protocol_settings(client, protocol)``: the ``set`` option choosing a group
  consumer's protocol (classic or KIP-848's consumer) in the client's spelling.

Adapters: ``native`` (node.client, the native wire), ``confluent`` (confluent-kafka,
librdkafka), ``kafka_python``, ``aiokafka_client``; ``--client kafkajs`` execs node on
``kafkajs_worker.js`` beside this file, with ``NODE_PATH`` = ``node_modules()``.
"""
from bench.chaos.clients.lookup import (KAFKAJS_WORKER, missing, node_modules, present,
                                       worker_command)
from bench.chaos.clients.options import CLIENTS, GROUP_PROTOCOLS, group_protocol_settings
from bench.chaos.clients.stream import WorkerStream

__all__ = ["CLIENTS", "missing", "present", "worker_command", "WorkerStream",
           "node_modules", "KAFKAJS_WORKER", "GROUP_PROTOCOLS", "group_protocol_settings"]
