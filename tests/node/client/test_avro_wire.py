"""The Confluent wire format against bytes built by hand from the specifications, not
from the serializer itself: a zero magic byte, the schema id as 4 big-endian bytes, then
the record in Avro's binary encoding (https://avro.apache.org/docs/current/specification/
"Binary Encoding": longs and lengths as zig-zag varints, a string as its length then its
UTF-8 bytes, a union as the branch index then the value, record fields in order)."""
from __future__ import annotations

from node.client.avro import decode_body, encode, normalized, schema_id_of

CLICK = {"type": "record", "name": "Click", "namespace": "test",
         "fields": [{"name": "user", "type": "string"},
                    {"name": "clicks", "type": "long"},
                    {"name": "page", "type": ["null", "string"], "default": None}]}
SCHEMA_ID = 0x0102   # two nonzero bytes: the byte order shows

GOLDEN = {
    # magic | id 258, big-endian | "ann": length 3 (zig-zag 6) | 3 (zig-zag 6) |
    # branch 1 (zig-zag 2), "home": length 4 (zig-zag 8)
    (("user", "ann"), ("clicks", 3), ("page", "home")):
        b"\x00" + b"\x00\x00\x01\x02" + b"\x06ann" + b"\x06" + b"\x02\x08home",
    # -65 zig-zags to 129: a two-byte varint (low 7 bits with the continuation bit, then 1);
    # branch 0: null, no bytes; "" is length 0
    (("user", ""), ("clicks", -65), ("page", None)):
        b"\x00" + b"\x00\x00\x01\x02" + b"\x00" + b"\x81\x01" + b"\x00",
}


def test_values_are_the_confluent_framing_of_avro_binary():
    parsed, _ = normalized(CLICK)
    for fields, golden in GOLDEN.items():
        value = dict(fields)
        assert encode(SCHEMA_ID, parsed, value) == golden
        assert schema_id_of(golden) == SCHEMA_ID
        assert decode_body(parsed, None, golden, SCHEMA_ID) == value
