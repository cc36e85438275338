"""Populated Kafka messages built from the schema itself, for the codec's tests.

``populated(spec, version, rng)`` fills every field the version has (tagged ones too) with
a random value of its type - None now and then where the version allows null - and leaves
the fields the version lacks at their defaults.
"""

import random
import uuid

from node.kafka.protocol import coordinator_records, messages, schema, txn_records

SPECS = schema.load_all()
RECORD_SPECS = (schema.load_records()  # __consumer_offsets keys and values ("data" specs)
                + schema.load_records(schema.TXN_RECORD_SCHEMA_DIR))   # __transaction_state
CLASSES = {**{cls.__name__: cls for cls in messages.REQUESTS.values()},
           **{cls.__name__: cls for cls in messages.RESPONSES.values()},
           **{cls.__name__: cls for cls in coordinator_records.ENCODERS},
           **{cls.__name__: cls for cls in txn_records.ENCODERS}}
CASES = [(spec, version) for spec in SPECS for version in spec.versions]
RECORD_CASES = [(spec, version) for spec in RECORD_SPECS for version in spec.versions]
TEXT = "az_-.Zé€😀"
INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def case_id(case) -> str:
    spec, version = case
    return f"{spec.name}-v{version}"


def populated(spec: schema.MessageSpec, version: int, rng: random.Random):
    cls = CLASSES[spec.name]
    return _struct(cls, cls, spec.root, version, rng)


def _struct(message_cls, cls, st: schema.StructSpec, version: int, rng: random.Random):
    values = {f.attr: _field(message_cls, f, version, rng)
              for f in st.fields if version in f.versions}
    return cls(**values)


def _field(message_cls, f: schema.FieldSpec, version: int, rng: random.Random):
    if version in f.nullable and rng.random() < 0.25:
        return None
    if f.is_array:
        return [_element(message_cls, f, version, rng) for _ in range(rng.randint(0, 3))]
    return _element(message_cls, f, version, rng)


def _element(message_cls, f: schema.FieldSpec, version: int, rng: random.Random):
    t = f.element
    if f.struct is not None:
        return _struct(message_cls, getattr(message_cls, f.struct.name), f.struct, version, rng)
    if t in INT_BITS:
        bits = INT_BITS[t]
        return rng.randint(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if t == "uint16":
        return rng.randint(0, 0xFFFF)
    if t == "bool":
        return rng.random() < 0.5
    if t == "float64":
        return rng.uniform(-1e9, 1e9)
    if t == "string":
        return "".join(rng.choice(TEXT) for _ in range(rng.randint(0, 12)))
    if t in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 40))
    assert t == "uuid", t
    return uuid.UUID(int=rng.getrandbits(128))


# ---- the same, as hypothesis strategies --------------------------------------------------

def strategy(spec: schema.MessageSpec, version: int):
    """A hypothesis strategy of populated messages of ``spec`` at ``version``."""
    from hypothesis import strategies as st

    def of_struct(cls, sspec):
        return st.builds(cls, **{f.attr: of_field(f) for f in sspec.fields
                                 if version in f.versions})

    def of_element(f):
        t = f.element
        if f.struct is not None:
            return of_struct(getattr(message_cls, f.struct.name), f.struct)
        if t in INT_BITS:
            bits = INT_BITS[t]
            return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        return {"uint16": st.integers(0, 0xFFFF), "bool": st.booleans(),
                "float64": st.floats(allow_nan=False), "string": st.text(max_size=20),
                "bytes": st.binary(max_size=40), "records": st.binary(max_size=40),
                "uuid": st.uuids()}[t]

    def of_field(f):
        value = of_element(f)
        if f.is_array:
            value = st.lists(value, max_size=3)
        if version in f.nullable:
            value = st.none() | value
        return value

    message_cls = CLASSES[spec.name]
    return of_struct(message_cls, spec.root)
