"""``minikafka transactions``: Kafka's kafka-transactions.sh, its ``list`` and
``describe`` commands, over the native wire.

    minikafka transactions --bootstrap-server B list
    minikafka transactions --bootstrap-server B describe --transactional-id ID

- ``list``: ListTransactions to every broker (each answers for the transactional ids
  whose ``__transaction_state`` partition it leads), as Kafka's admin client does;
  columns TransactionalId, Coordinator, ProducerId, TransactionState.
- ``describe``: FindCoordinator (key type 1), then DescribeTransactions; columns
  CoordinatorId, TransactionalId, ProducerId, ProducerEpoch, TransactionState,
  TransactionTimeoutMs, CurrentTransactionStartTimeMs, TransactionDurationMs (None when
  no transaction is open), TopicPartitions (``topic-partition``, comma-separated).

Tables are Kafka's ``prettyPrintTable``: each cell padded to its column's widest cell and
followed by a tab. Not built: Kafka's ``describe-producers``, ``abort`` and
``find-hanging`` (they need DescribeProducers, which the brokers do not serve yet).
Errors are one line on stderr and exit 1.
"""
from __future__ import annotations

import sys
import time

from node.tools.common import EXIT_OK, ToolError, guarded, one_line_usage_errors

PROG = "minikafka transactions"
ERROR_PREFIX = "Error: "
LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs",
                    "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")


def add_arguments(parser) -> None:
    one_line_usage_errors(parser, PROG)
    parser.add_argument("--bootstrap-server", required=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    one_line_usage_errors(commands.add_parser("list", help="list transactions"), PROG)
    describe = commands.add_parser("describe", help="describe a transaction's state")
    one_line_usage_errors(describe, PROG)
    describe.add_argument("--transactional-id", required=True)
    parser.set_defaults(func=run)


def run(args) -> int:
    return guarded(ERROR_PREFIX, _run, args)


def _run(args) -> int:
    from node.client import coordinator as coord
    from node.client.metadata import MetadataFetcher, parse_bootstrap
    from node.client.network import Network
    from node.tools.common import ADMIN_TIMEOUT_MS
    net = Network("minikafka-transactions", ADMIN_TIMEOUT_MS)
    try:
        meta = MetadataFetcher(net, parse_bootstrap(args.bootstrap_server), ADMIN_TIMEOUT_MS)
        if args.command == "list":
            rows = list_transactions(net, meta)
            print_table(LIST_HEADERS, rows)
            return EXIT_OK
        coordinators = coord.Coordinators(net, meta, request_timeout_ms=ADMIN_TIMEOUT_MS,
                                          key_type=coord.COORDINATOR_KEY_TRANSACTION)
        print_table(DESCRIBE_HEADERS,
                    [describe_transaction(coordinators, args.transactional_id)])
        return EXIT_OK
    finally:
        net.close()


def list_transactions(net, meta) -> list[tuple]:
    from node.client.coordinator import check_refused
    from node.wire.errors import name_of
    from node.wire.protocol import ApiKey
    rows = []
    md = meta.refresh([])
    for broker in sorted(md.brokers):
        body = check_refused(net.request(
            md.endpoint(broker), ApiKey.LIST_TRANSACTIONS,
            {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}).body,
            "ListTransactions")
        code = int(body.get("error_code") or 0)
        if code:
            raise ToolError(f"ListTransactions at broker {broker}: {name_of(code)}")
        for t in body.get("transaction_states") or ():
            rows.append((t["transactional_id"], broker, t["producer_id"],
                         t["transaction_state"]))
    return sorted(rows)


def describe_transaction(coordinators, transactional_id: str) -> tuple:
    from node.wire.errors import name_of
    from node.wire.protocol import ApiKey

    def first_error(body) -> int:
        states = body.get("transaction_states") or [{}]
        return int(states[0].get("error_code") or 0)

    body = coordinators.request(transactional_id, ApiKey.DESCRIBE_TRANSACTIONS,
                                {"transactional_ids": [transactional_id]},
                                error_of=first_error)
    state = (body.get("transaction_states") or [{}])[0]
    code = int(state.get("error_code") or 0)
    if code:
        raise ToolError(f"Failed to describe transaction state of transactional-id "
                        f"`{transactional_id}`: {name_of(code)}")
    start = int(state.get("transaction_start_time_ms", -1))
    started, duration = ("None", "None") if start < 0 else \
        (str(start), str(int(time.time() * 1000) - start))
    partitions = ",".join(f"{t['topic']}-{p}" for t in state.get("topics") or ()
                          for p in t["partitions"])
    return (coordinators.node_id(transactional_id), transactional_id, state["producer_id"],
            state["producer_epoch"], state["transaction_state"],
            state["transaction_timeout_ms"], started, duration, partitions)


def print_table(headers, rows, out=None) -> None:
    """Kafka's ToolsUtils.prettyPrintTable: each cell left-aligned, padded to its
    column's widest cell, then a tab (the last one too)."""
    out = out or sys.stdout
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    for row in [list(headers)] + cells:
        out.write("".join(c.ljust(w) + "\t" for c, w in zip(row, widths)) + "\n")
