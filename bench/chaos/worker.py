"""One native workload process writing its history to a Parquet file: the command line
chaos runs used before ``bench.chaos.clients`` (which now runs every client, native
included, as an event stream), kept for scripts that want a file.

    python -m bench.chaos.worker --role producer|consumer --name p0 --bootstrap B \\
        --topic T --duration S --out FILE.parquet [--acks all] [--rate R]
        [--value-format avro --schema-registry HOST:PORT]

It runs ``python -m bench.chaos.clients --client native`` with the same options
(``bench.chaos.clients.native``: what a producer and a consumer record, the Avro value
``CHAOS_VALUE_SCHEMA``) and writes what it reported with ``bench.chaos.history``.
"""
from __future__ import annotations

import argparse
import sys

from bench.chaos.clients.native import CHAOS_VALUE_SCHEMA

__all__ = ["CHAOS_VALUE_SCHEMA", "main"]
GRACE_S = 30.0       # past --duration: closing the client, writing the last events


def main(argv: list[str] | None = None) -> int:
    from bench.chaos.clients import WorkerStream, worker_command
    from bench.chaos.history import write_history
    parser = argparse.ArgumentParser(prog="python -m bench.chaos.worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=("producer", "consumer"), required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--acks", default="all", choices=("all", "1", "0"))
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--value-format", choices=("plain", "avro"), default="plain")
    parser.add_argument("--schema-registry", default=None, metavar="HOST:PORT",
                        help="the coordinator holding the schema registry (avro values)")
    args = parser.parse_args(argv)
    if args.duration <= 0:
        parser.error("--duration must be positive")
    options = {"role": args.role, "name": args.name, "bootstrap": args.bootstrap,
               "topic": args.topic, "duration": args.duration}
    if args.role == "producer":
        options.update(acks=args.acks, rate=args.rate, value_format=args.value_format,
                       schema_registry=args.schema_registry)
    # The worker's own errors go to this process's stderr.
    stream = WorkerStream(worker_command("native", **options), log_path="/dev/stderr")
    code = stream.wait(args.duration + GRACE_S)
    if code:
        print(f"bench.chaos.worker: the native worker exited {code}: "
              f"{stream.last_error or 'see its stderr'}", file=sys.stderr)
        return code
    write_history(args.out, stream.history())
    return 0


if __name__ == "__main__":
    sys.exit(main())
