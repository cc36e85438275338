"""A chaos history on disk and on the wire: Parquet files of ``Op`` rows, and the JSON
``op`` events the client workers print (``bench.chaos.clients``), decoded in one place.

Parquet schema, one row per operation (the columns after ``reads`` were added for
consumer groups; a file without them loads with the ``Op`` defaults):

    process string, type string, f string, time_ns int64 (CLOCK_MONOTONIC),
    value binary, partition int32, offset int64, error string,
    reads list<struct<partition int32, offset int64, value binary>>,
    partitions list<int32>, offsets list<struct<partition int32, offset int64>>,
    member string, generation int32

JSON ``op`` event (one line of a worker's stdout, values base64):

    {"event": "op", "process": "c0", "type": "ok", "f": "poll", "time_ns": N,
     "reads": [[partition, offset, value_b64], ...]}
    ... "f": "send", "value": b64, "partition": P, "offset": O, "error": "..."
    ... "f": "assign"|"revoke", "partitions": [p, ...], "member": "...", "generation": G
    ... "f": "commit"|"committed", "offsets": [[partition, offset], ...]
"""
from __future__ import annotations

import base64
import os
from typing import Iterable

from bench.chaos.checker import Op

COLUMNS = ("process", "type", "f", "time_ns", "value", "partition", "offset", "error",
           "reads", "partitions", "offsets", "member", "generation")
TYPES = ("invoke", "ok", "fail", "info")


def _schema():
    import pyarrow as pa
    return pa.schema([
        ("process", pa.string()), ("type", pa.string()), ("f", pa.string()),
        ("time_ns", pa.int64()), ("value", pa.binary()), ("partition", pa.int32()),
        ("offset", pa.int64()), ("error", pa.string()),
        ("reads", pa.list_(pa.struct([("partition", pa.int32()), ("offset", pa.int64()),
                                      ("value", pa.binary())]))),
        ("partitions", pa.list_(pa.int32())),
        ("offsets", pa.list_(pa.struct([("partition", pa.int32()), ("offset", pa.int64())]))),
        ("member", pa.string()), ("generation", pa.int32()),
    ])


def write_history(path: str | os.PathLike, ops: Iterable[Op]) -> None:
    """Write ``ops`` (in the given order) as one Parquet file at ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    ops = list(ops)
    columns = {
        "process": [op.process for op in ops],
        "type": [op.type for op in ops],
        "f": [op.f for op in ops],
        "time_ns": [op.time_ns for op in ops],
        "value": [op.value for op in ops],
        "partition": [op.partition for op in ops],
        "offset": [op.offset for op in ops],
        "error": [op.error for op in ops],
        "reads": [[{"partition": p, "offset": o, "value": v} for p, o, v in op.reads]
                  for op in ops],
        "partitions": [list(op.partitions) for op in ops],
        "offsets": [[{"partition": p, "offset": o} for p, o in op.offsets] for op in ops],
        "member": [op.member for op in ops],
        "generation": [op.generation for op in ops],
    }
    pq.write_table(pa.Table.from_pydict(columns, schema=_schema()), str(path))


def read_history(path: str | os.PathLike) -> list[Op]:
    """The ops of one history file, in file order. Columns a file lacks (written before
    consumer groups) take the ``Op`` defaults; a null in any column does too."""
    import pyarrow.parquet as pq
    table = pq.read_table(str(path))
    missing = {"process", "type", "f", "time_ns"} - set(table.column_names)
    if missing:
        raise ValueError(f"{path}: not a chaos history (no column {', '.join(sorted(missing))})")
    return [_op_from_row(row) for row in table.to_pylist()]


def _op_from_row(row: dict) -> Op:
    def get(name, default):
        value = row.get(name)
        return default if value is None else value
    return Op(row["process"], row["type"], row["f"], row["time_ns"],
              value=row.get("value"), partition=get("partition", -1),
              offset=get("offset", -1),
              reads=tuple((r["partition"], r["offset"], r["value"])
                          for r in get("reads", ())),
              error=row.get("error"),
              partitions=tuple(get("partitions", ())),
              offsets=tuple((r["partition"], r["offset"]) for r in get("offsets", ())),
              member=get("member", ""), generation=get("generation", -1))


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


def op_from_event(event: dict) -> Op:
    """One JSON ``op`` event (already parsed) as an ``Op``; ValueError if it is not one."""
    if event.get("event", "op") != "op":
        raise ValueError(f"not an op event: {event.get('event')!r}")
    try:
        kind, f, time_ns = event["type"], event["f"], int(event["time_ns"])
        process = str(event["process"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"op event without a valid process/type/f/time_ns: {event!r:.200}") \
            from e
    if kind not in TYPES:
        raise ValueError(f"op event type {kind!r} is none of {', '.join(TYPES)}")
    try:
        return Op(process, kind, str(f), time_ns,
                  value=_b64(event.get("value")),
                  partition=int(event.get("partition", -1)),
                  offset=int(event.get("offset", -1)),
                  reads=tuple((int(p), int(o), _b64(v)) for p, o, v in event.get("reads") or ()),
                  error=event.get("error"),
                  partitions=tuple(int(p) for p in event.get("partitions") or ()),
                  offsets=tuple((int(p), int(o)) for p, o in event.get("offsets") or ()),
                  member=str(event.get("member") or ""),
                  generation=int(event.get("generation", -1)))
    except (TypeError, ValueError) as e:   # binascii.Error is a ValueError
        raise ValueError(f"malformed op event ({e}): {event!r:.200}") from e


def ops_from_events(events: Iterable[dict]) -> list[Op]:
    """The ``op`` events among ``events`` (parsed JSON objects: start, client and end
    events are skipped) as ``Op`` objects, in the given order."""
    return [op_from_event(e) for e in events if e.get("event") == "op"]


def op_to_event(op: Op) -> dict:
    """The JSON ``op`` event for ``op`` (the inverse of ``op_from_event``; only the
    fields that differ from the defaults)."""
    def b64(value):
        return None if value is None else base64.b64encode(value).decode()
    event = {"event": "op", "process": op.process, "type": op.type, "f": op.f,
             "time_ns": op.time_ns}
    if op.value is not None:
        event["value"] = b64(op.value)
    if op.partition != -1:
        event["partition"] = op.partition
    if op.offset != -1:
        event["offset"] = op.offset
    if op.reads:
        event["reads"] = [[p, o, b64(v)] for p, o, v in op.reads]
    if op.error is not None:
        event["error"] = op.error
    if op.partitions:
        event["partitions"] = list(op.partitions)
    if op.offsets:
        event["offsets"] = [[p, o] for p, o in op.offsets]
    if op.member:
        event["member"] = op.member
    if op.generation != -1:
        event["generation"] = op.generation
    return event
