"""Avro schemas to Spark column types (node.spark.avro): pure."""
from __future__ import annotations

import pyarrow as pa
import pytest
from fastavro import parse_schema

from node.spark.avro import AvroTypeError, arrow_type, reader_schema


def _type(schema):
    return arrow_type(parse_schema(reader_schema(schema)))


def _record(*fields):
    return {"type": "record", "name": "R", "fields": [
        {"name": f"f{i}", "type": t} for i, t in enumerate(fields)]}


def test_every_mapped_type():
    inner = {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}
    schema = _record(
        "boolean", "int", "long", "float", "double", "string", "bytes",
        {"type": "enum", "name": "E", "symbols": ["A", "B"]},
        {"type": "fixed", "name": "F", "size": 4},
        {"type": "array", "items": "long"}, {"type": "map", "values": "double"},
        ["null", "string"], ["long", "null"],
        {"type": "int", "logicalType": "date"},
        {"type": "long", "logicalType": "timestamp-millis"},
        {"type": "long", "logicalType": "timestamp-micros"},
        {"type": "long", "logicalType": "local-timestamp-millis"},
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        {"type": "string", "logicalType": "uuid"},
        {"type": "int", "logicalType": "time-millis"},
        inner, "Inner")
    expected = [pa.bool_(), pa.int32(), pa.int64(), pa.float32(), pa.float64(),
                pa.string(), pa.binary(), pa.string(), pa.binary(), pa.list_(pa.int64()),
                pa.map_(pa.string(), pa.float64()), pa.string(), pa.int64(), pa.date32(),
                pa.timestamp("us", tz="UTC"), pa.timestamp("us", tz="UTC"),
                pa.timestamp("us"), pa.decimal128(10, 2), pa.string(), pa.int32(),
                pa.struct([("x", pa.int32())]), pa.struct([("x", pa.int32())])]
    got = _type(schema)
    assert [got.field(i).type for i in range(got.num_fields)] == expected


@pytest.mark.parametrize("field, words", [
    (["int", "string"], "union of 2 non-null types"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 60}, "precision 60"),
])
def test_types_spark_cannot_hold_are_refused(field, words):
    with pytest.raises(AvroTypeError, match=words):
        _type(_record(field))


def test_a_recursive_record_is_refused():
    node = {"type": "record", "name": "Node", "fields": [
        {"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(AvroTypeError, match="refers to itself"):
        _type(node)
