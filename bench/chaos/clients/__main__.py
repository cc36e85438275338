"""``python -m bench.chaos.clients --client C --role producer|consumer ...``: one chaos
workload process through a real Kafka client (options: ``bench.chaos.clients.options``;
events: ``bench.chaos.clients.events``). Exit 0 after a clean stop (the duration, stdin's
EOF with ``--duration 0``, or SIGTERM), 2 on a bad command line or a missing client.
``--client kafkajs`` execs ``node kafkajs_worker.js`` with the same arguments."""
from __future__ import annotations

import importlib
import logging
import os
import sys

from bench.chaos.clients import common, options
from bench.chaos.clients.lookup import KAFKAJS_WORKER, missing, node_modules
from bench.chaos.clients.events import Emitter, error_text

PROG = "python -m bench.chaos.clients"
ADAPTERS = {"native": "bench.chaos.clients.native",
            "confluent-kafka": "bench.chaos.clients.confluent",
            "kafka-python": "bench.chaos.clients.kafka_python",
            "aiokafka": "bench.chaos.clients.aiokafka_client"}
CLIENT_LOG_LEVEL = logging.WARNING      # the Python clients' warnings go to stderr


def _usage(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def exec_kafkajs(argv: list[str]) -> None:
    env = dict(os.environ, NODE_PATH=str(node_modules()), KAFKAJS_NO_PARTITIONER_WARNING="1")
    sys.stdout.flush()
    os.execvpe("node", ["node", str(KAFKAJS_WORKER), *argv], env)


def _stderr_log() -> None:
    """The clients' warnings to stderr (the worker's log file); an adapter may lower one
    logger's level to observe its debug lines without printing them."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(CLIENT_LOG_LEVEL)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(CLIENT_LOG_LEVEL)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = options.parse(argv)
    except options.UsageError as e:
        return _usage(str(e))
    why = missing(args.client)
    if why:
        return _usage(why)
    if args.client == "kafkajs":
        exec_kafkajs(argv)          # does not return
    stop = common.Stop(args.duration)     # SIGTERM from now on is a clean stop
    try:
        settings = options.settings(args.client, args.role, args)
    except options.UsageError as e:
        return _usage(str(e))
    _stderr_log()
    adapter = importlib.import_module(ADAPTERS[args.client])
    em = Emitter(args.name)
    try:
        adapter.run(args, settings, em, stop)
    except options.UsageError as e:
        return _usage(str(e))
    except Exception as e:   # the worker's own failure: told as an event, exit 1
        em.client("error", f"worker failed: {error_text(e)}")
        em.end()
        raise
    em.end()
    # Everything is told: exit now. The interpreter's teardown (the clients' threads and
    # finalizers, a close still blocked in ``common.ABANDONED``) can take seconds, and it
    # restores SIGTERM's default action, so a driver's SIGTERM then would end the
    # worker with -15 instead of 0.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
