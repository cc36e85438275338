"""bench.chaos.history: Op rows through Parquet and through the workers' JSON events."""
from __future__ import annotations

import json

import pytest

from bench.chaos.checker import Op
from bench.chaos.history import (op_from_event, op_to_event, ops_from_events, read_history,
                                 write_history)

OPS = [
    Op("p0", "invoke", "send", 1, b"p0-0"),
    Op("p0", "ok", "send", 2, b"p0-0", 1, 7),
    Op("p0", "info", "send", 3, b"p0-1", error="RequestTimedOut: x"),
    Op("c0", "ok", "assign", 4, partitions=(0, 2), member="c0-abc", generation=3),
    Op("c0", "ok", "poll", 5, reads=((0, 0, b"p0-0"), (2, 5, None))),
    Op("c0", "info", "poll", 6, error="boom"),
    Op("c0", "ok", "commit", 7, offsets=((0, 1), (2, 6))),
    Op("c0", "fail", "commit", 8, error="REBALANCE_IN_PROGRESS"),
    Op("c0", "ok", "revoke", 9, partitions=(2,), error="lost"),
    Op("observer", "ok", "committed", 10, offsets=((0, 1),)),
]


def test_every_field_survives_a_parquet_round_trip(tmp_path):
    path = tmp_path / "h.parquet"
    write_history(path, OPS)
    assert read_history(path) == OPS


def test_an_empty_history_round_trips(tmp_path):
    write_history(tmp_path / "e.parquet", [])
    assert read_history(tmp_path / "e.parquet") == []


def test_a_file_in_the_old_schema_loads_with_the_defaults(tmp_path):
    """Written as bench.chaos.worker wrote histories before consumer groups (no
    partitions/offsets/member/generation columns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    read_type = pa.list_(pa.struct([("partition", pa.int32()), ("offset", pa.int64()),
                                    ("value", pa.binary())]))
    pq.write_table(pa.table({
        "process": pa.array(["p0", "c0"], pa.string()),
        "type": pa.array(["ok", "ok"], pa.string()),
        "f": pa.array(["send", "poll"], pa.string()),
        "time_ns": pa.array([5, 6], pa.int64()),
        "value": pa.array([b"v", None], pa.binary()),
        "partition": pa.array([1, -1], pa.int32()),
        "offset": pa.array([9, -1], pa.int64()),
        "error": pa.array([None, None], pa.string()),
        "reads": pa.array([[], [{"partition": 1, "offset": 9, "value": b"v"}]], read_type),
    }), tmp_path / "old.parquet")
    ops = read_history(tmp_path / "old.parquet")
    assert ops == [Op("p0", "ok", "send", 5, b"v", 1, 9),
                   Op("c0", "ok", "poll", 6, reads=((1, 9, b"v"),))]
    assert (ops[1].partitions, ops[1].offsets, ops[1].member, ops[1].generation) == \
        ((), (), "", -1)


def test_a_file_that_is_not_a_history_is_refused_clearly(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"partition": [0], "offset": [1]}), tmp_path / "final.parquet")
    with pytest.raises(ValueError, match="not a chaos history"):
        read_history(tmp_path / "final.parquet")


def test_json_events_decode_to_ops_and_back():
    events = [{"event": "start", "client": "kafka-python", "role": "consumer"}]
    events += [json.loads(json.dumps(op_to_event(op))) for op in OPS]
    events += [{"event": "client", "time_ns": 1, "kind": "retry", "text": "x", "count": 2},
               {"event": "end", "time_ns": 11, "ok": 3, "errors": 1}]
    assert ops_from_events(events) == OPS


def test_a_worker_event_as_the_contract_spells_it():
    line = ('{"event": "op", "process": "c1", "type": "ok", "f": "poll", "time_ns": 12,'
            ' "reads": [[0, 4, "YQ=="], [1, 0, null]]}')
    assert op_from_event(json.loads(line)) == \
        Op("c1", "ok", "poll", 12, reads=((0, 4, b"a"), (1, 0, None)))
    send = {"event": "op", "process": "p0", "type": "ok", "f": "send", "time_ns": 3,
            "value": "cDAtMA==", "partition": 2, "offset": 40}
    assert op_from_event(send) == Op("p0", "ok", "send", 3, b"p0-0", 2, 40)


@pytest.mark.parametrize("event, message", [
    ({"event": "op", "process": "p", "type": "ok", "f": "send"}, "time_ns"),
    ({"event": "op", "process": "p", "type": "done", "f": "send", "time_ns": 1}, "none of"),
    ({"event": "op", "process": "p", "type": "ok", "f": "send", "time_ns": 1,
      "value": "not base64!"}, "malformed"),
    ({"event": "op", "process": "p", "type": "ok", "f": "commit", "time_ns": 1,
      "offsets": [[0]]}, "malformed"),
    ({"event": "end", "time_ns": 1}, "not an op"),
])
def test_a_malformed_event_is_a_clear_error(event, message):
    with pytest.raises(ValueError, match=message):
        op_from_event(event)
