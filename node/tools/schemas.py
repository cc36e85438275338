"""``minikafka schemas``: the schema registry in the coordinator (``node.client.avro``),
like Confluent's registry REST calls, from the command line.

    minikafka schemas --zookeeper HOST:PORT --list                 subjects, one per line
    minikafka schemas --zookeeper HOST:PORT --describe --subject S VERSION ID per version
    minikafka schemas --zookeeper HOST:PORT --subject S [--version V]   that schema (JSON)
    minikafka schemas --zookeeper HOST:PORT --id N                      schema N (JSON)
    minikafka schemas --zookeeper HOST:PORT --register --subject S --schema-file F
"""
from __future__ import annotations

import json

from node.tools.common import EXIT_OK, ToolError, guarded, one_line_usage_errors

PROG = "minikafka schemas"
ERROR_PREFIX = "Error: "


def add_arguments(parser) -> None:
    one_line_usage_errors(parser, PROG)
    parser.add_argument("--zookeeper", required=True, metavar="HOST:PORT",
                        help="the coordinator (a cluster's ZooKeeper address)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="list the subjects")
    action.add_argument("--describe", action="store_true",
                        help="the versions of --subject and their schema ids")
    action.add_argument("--register", action="store_true",
                        help="register --schema-file under --subject; prints its id")
    action.add_argument("--id", type=int, help="print the schema with this id")
    parser.add_argument("--subject")
    parser.add_argument("--version", type=int, help="with --subject: this version "
                                                    "(default: the newest)")
    parser.add_argument("--schema-file", help="an Avro schema (.avsc, JSON)")
    parser.set_defaults(func=run)


def run(args) -> int:
    return guarded(ERROR_PREFIX, _run, args)


def _run(args) -> int:
    from node.client.avro import RegistryError, SchemaRegistry
    if (args.describe or args.register) and not args.subject:
        raise ToolError("Missing required option(s): subject")
    if args.register and not args.schema_file:
        raise ToolError("Missing required option(s): schema-file")
    if not (args.list or args.describe or args.register or args.id is not None
            or args.subject):
        raise ToolError("one of --list, --describe, --register, --id or --subject is "
                        "required")
    try:
        with SchemaRegistry(args.zookeeper) as registry:
            if args.list:
                for subject in registry.subjects():
                    print(subject)
            elif args.describe:
                versions = registry.versions(args.subject)
                if not versions:
                    raise ToolError(f"no schema registered under subject "
                                    f"{args.subject!r}")
                print("SUBJECT\tVERSION\tID")
                for version, schema_id in versions.items():
                    print(f"{args.subject}\t{version}\t{schema_id}")
            elif args.register:
                try:
                    with open(args.schema_file) as f:
                        text = f.read()
                except OSError as e:
                    raise ToolError(f"{e.strerror}: {e.filename}") from None
                schema_id = registry.register(args.subject, text)
                version = next(v for v, i in registry.versions(args.subject).items()
                               if i == schema_id)
                print(f"Registered schema id {schema_id} as version {version} of "
                      f"subject {args.subject}")
            elif args.id is not None:
                print(_pretty(registry.schema_text(args.id)))
            else:
                versions = registry.versions(args.subject)
                version = args.version if args.version is not None else \
                    max(versions, default=None)
                if version not in versions:
                    raise ToolError(f"subject {args.subject!r} has no version {version} "
                                    f"(versions: {sorted(versions) or 'none'})")
                print(_pretty(registry.schema_text(versions[version])))
    except RegistryError as e:
        raise ToolError(str(e)) from None
    return EXIT_OK


def _pretty(text: str) -> str:
    return json.dumps(json.loads(text), indent=2)
