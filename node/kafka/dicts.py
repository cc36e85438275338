"""One generic converter between the generated Kafka message classes
(``node.kafka.protocol.messages``) and plain dicts, the bodies of the native wire's group
APIs (the group-coordinator contract: Kafka's fields by their snake_case attribute names,
nested structs as dicts, lists as lists).

- ``to_dict(message)``: every field, recursively (fields a version lacks carry their
  defaults).
- ``from_dict(cls, body, version)``: an object of ``cls`` holding the fields ``version``
  has; fields the dict lacks, and fields the version does not have, keep their defaults
  (the generated encoders refuse a non-default value in a field the version lacks, as
  Kafka's do). Field versions come from Kafka's JSON definitions
  (``node.kafka.protocol.schema``), read once per message.
- ``default_dict(cls)``: the defaults of every field (a complete body to fill in).
- ``check(cls, body)``: the problem with a dict that is not such a body (a wrong type
  anywhere: what a fuzzed or broken native request sends), else None.

Topic ids (Kafka's ``uuid`` fields) are Kafka's text form in the dicts
(``node.wire.zkdata.topic_id_text``), UUIDs in the objects.
"""
from __future__ import annotations

import dataclasses
import functools
import uuid

from node.kafka.protocol import messages
from node.kafka.protocol import schema
from node.wire.zkdata import topic_id_text, topic_id_uuid


def _fields(obj_or_cls) -> tuple:
    return dataclasses.fields(obj_or_cls)


def to_dict(message) -> dict:
    out = {}
    for f in _fields(message):
        out[f.name] = _plain(getattr(message, f.name))
    return out


def _plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return topic_id_text(value)
    return value


def default_dict(cls) -> dict:
    return to_dict(cls())


@functools.lru_cache(maxsize=None)
def _spec(root_name: str) -> schema.MessageSpec:
    return schema.load(schema.SCHEMA_DIR / f"{root_name}.json")


def _root_name(cls) -> str:
    """The message a (possibly nested) generated class belongs to: nested classes are
    ``_<Message>_<Struct>``, messages their own name."""
    name = cls.__name__
    if not name.startswith("_"):
        return name
    return name[1:].split("_", 1)[0]


def nested_class(cls, attr: str):
    """The generated class of struct field ``attr`` of ``cls`` (from its annotation:
    'list[X.Y]' or 'X.Y | None'); None for a primitive field."""
    annotation = str(cls.__annotations__.get(attr, ""))
    text = annotation.split(" | ")[0].removeprefix("list[").removesuffix("]")
    if "." not in text:
        return None
    root, name = text.split(".", 1)[0], text.rsplit(".", 1)[-1]
    return getattr(messages, f"_{root}_{name}", None)


def _struct_class(root_name: str, struct_name: str):
    return getattr(messages, f"_{root_name}_{struct_name}")


def from_dict(cls, body: dict, version: int):
    root = _root_name(cls)
    spec = _spec(root)
    struct = spec.root if cls.__name__ == root else next(
        s for s in spec.structs if f"_{root}_{s.name}" == cls.__name__)
    return _build(cls, struct, root, body, version)


def _build(cls, struct: schema.StructSpec, root: str, body: dict, version: int):
    if not isinstance(body, dict):
        raise TypeError(f"{cls.__name__}: expected a dict, got {type(body).__name__}")
    kwargs = {}
    for f in struct.fields:
        if version not in f.versions or f.attr not in body:
            continue
        value = body[f.attr]
        if f.struct is not None and value is not None:
            sub = _struct_class(root, f.struct.name)
            if f.is_array:
                value = [_build(sub, f.struct, root, item, version) for item in value]
            else:
                value = _build(sub, f.struct, root, value, version)
        elif value is None and version not in f.nullable:
            continue          # null where this version cannot say it: the default
        elif f.element == "uuid" and isinstance(value, str):
            value = topic_id_uuid(value)
        elif f.element == "uuid" and isinstance(value, list):
            value = [topic_id_uuid(v) if isinstance(v, str) else v for v in value]
        kwargs[f.attr] = value
    return cls(**kwargs)


_INTS = {"int8", "int16", "uint16", "int32", "int64"}


def check(cls, body) -> str | None:
    """What is wrong with ``body`` as a dict of ``cls`` (types, recursively; unknown
    keys are ignored), or None."""
    root = _root_name(cls)
    spec = _spec(root)
    struct = spec.root if cls.__name__ == root else next(
        s for s in spec.structs if f"_{root}_{s.name}" == cls.__name__)
    return _check(struct, body, struct.name)


def _check(struct: schema.StructSpec, body, where: str) -> str | None:
    if not isinstance(body, dict):
        return f"{where} must be a map"
    for f in struct.fields:
        if f.attr not in body:
            continue
        value = body[f.attr]
        name = f"{where}.{f.attr}"
        if value is None:
            if f.nullable.empty:
                return f"{name} must not be null"
            continue
        if f.is_array:
            if not isinstance(value, list):
                return f"{name} must be a list"
            items = value
        else:
            items = [value]
        for item in items:
            problem = _check_value(f, item, name)
            if problem:
                return problem
    return None


def _check_value(f: schema.FieldSpec, value, name: str) -> str | None:
    kind = f.element
    if f.struct is not None:
        return _check(f.struct, value, name)
    if kind in _INTS:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "string":
        ok = isinstance(value, str)
    elif kind in ("bytes", "records"):
        ok = isinstance(value, (bytes, bytearray))
    elif kind == "uuid":
        try:
            topic_id_uuid(value)
            ok = True
        except ValueError:
            ok = False
    elif kind == "float64":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = True
    return None if ok else f"{name} must be {kind}, got {type(value).__name__}"
