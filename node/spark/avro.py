"""Avro values as Spark columns: ``.option("valueFormat", "avro")`` on the source.

The reader schema is the subject's newest version in the registry
(``node.client.avro``); each value is decoded with the schema its id names and resolved
to the reader schema (Avro's rules), so a topic written by several versions of a
producer reads as one table. The Avro types map to Arrow (and so to Spark) as
spark-avro maps them:

    boolean int long float double string bytes -> boolean int bigint float double
                                                 string binary
    enum -> string      fixed -> binary        record -> struct    array -> array
    map -> map<string, _>    [null, T] / [T, null] -> T (nullable)
    date -> date   timestamp-millis/micros -> timestamp   local-timestamp-* -> timestamp_ntz
    decimal(p, s) -> decimal(p, s)   uuid -> string   time-millis/micros -> int/bigint

Unions of several non-null types and recursive records have no Spark column type: they
are refused with one clear line when the source is planned.
"""
from __future__ import annotations

import json
import threading

DEPTH_MAX = 32
_PRIMITIVES = {"boolean": "bool_", "int": "int32", "long": "int64", "float": "float32",
               "double": "float64", "string": "string", "bytes": "binary"}
# Logical types with no Spark type (or a Python value Arrow cannot take): read as their
# underlying Avro type.
_STRIPPED_LOGICAL = {"uuid", "time-millis", "time-micros"}


class AvroTypeError(ValueError):
    """An Avro schema with no Spark column type."""


def arrow_type(schema: dict):
    """The Arrow type of a parsed Avro schema (``fastavro.parse_schema``'s result)."""
    from fastavro.schema import expand_schema
    return _arrow(expand_schema(schema), 0, ())


def _arrow(schema, depth: int, seen: tuple):
    import pyarrow as pa
    if depth > DEPTH_MAX:
        raise AvroTypeError(f"the schema nests deeper than {DEPTH_MAX} levels")
    if isinstance(schema, list):
        types = [t for t in schema if t != "null"]
        if len(types) != 1:
            raise AvroTypeError(f"a union of {len(types)} non-null types "
                                f"({_describe(types)}) has no Spark column type")
        return _arrow(types[0], depth + 1, seen)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return getattr(pa, _PRIMITIVES[schema])()
        if schema == "null":
            raise AvroTypeError("a field of type null has no Spark column type")
        raise AvroTypeError(f"named type {schema!r} refers to itself (a recursive "
                            f"record has no Spark column type)")
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return pa.timestamp("us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return pa.timestamp("us")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if not 0 < precision <= 38:
            raise AvroTypeError(f"decimal precision {precision} is outside Spark's 1..38")
        return pa.decimal128(precision, scale)
    if kind == "record":
        name = schema.get("name")
        if name in seen:
            raise AvroTypeError(f"record {name!r} refers to itself (a recursive record "
                                f"has no Spark column type)")
        return pa.struct([pa.field(f["name"], _arrow(f["type"], depth + 1, seen + (name,)))
                          for f in schema["fields"]])
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        return pa.list_(_arrow(schema["items"], depth + 1, seen))
    if kind == "map":
        return pa.map_(pa.string(), _arrow(schema["values"], depth + 1, seen))
    if kind in _PRIMITIVES or kind == "null" or isinstance(kind, (dict, list)):
        return _arrow(kind, depth + 1, seen)
    raise AvroTypeError(f"unknown Avro type {kind!r}")


def _describe(types) -> str:
    return ", ".join(t if isinstance(t, str) else str(t.get("type")) for t in types)


def reader_schema(schema):
    """A copy of ``schema`` (JSON-like, not fastavro-parsed) without the logical types
    Spark has no type for (their values are then read as strings or integers)."""
    if isinstance(schema, list):
        return [reader_schema(n) for n in schema]
    if isinstance(schema, dict):
        return {k: reader_schema(v) for k, v in schema.items()
                if not (k == "logicalType" and v in _STRIPPED_LOGICAL)}
    return schema


class ValueDecoder:
    """Decodes a column of Avro values (Confluent wire format) into one Arrow array of
    the reader schema's type. One per task; writer schemas come from the registry once
    per id (and are cached for the life of the worker process)."""

    _schemas: dict = {}                  # (registry address, id) -> parsed writer schema
    _lock = threading.Lock()

    def __init__(self, registry_address: str, reader_text: str):
        from fastavro import parse_schema
        self.address = registry_address
        self.reader = parse_schema(reader_schema(json.loads(reader_text)))
        self.type = arrow_type(self.reader)
        self._registry = None

    def _writer(self, schema_id: int):
        key = (self.address, schema_id)
        with self._lock:
            found = self._schemas.get(key)
        if found is None:
            from fastavro import parse_schema
            if self._registry is None:
                from node.client.avro import SchemaRegistry
                self._registry = SchemaRegistry(self.address)
            found = parse_schema(reader_schema(json.loads(
                self._registry.schema_text(schema_id))))
            with self._lock:
                self._schemas[key] = found
        return found

    def decode(self, values):
        """An Arrow array of the reader type from a binary Arrow array of values."""
        import pyarrow as pa
        from node.client.avro import decode_body, schema_id_of
        rows = []
        for data in values.to_pylist():
            if data is None:
                rows.append(None)
                continue
            schema_id = schema_id_of(data)
            rows.append(decode_body(self._writer(schema_id), self.reader, data, schema_id))
        return pa.array(rows, type=self.type)

    def close(self) -> None:
        if self._registry is not None:
            self._registry.close()
            self._registry = None
