"""The records of a ``__consumer_offsets`` partition, in Kafka's own schemas.

A record is Kafka's: key = int16 key version + the key struct at that version; value =
int16 value version + the value struct, or no value (a tombstone: the cleaner drops the key).
The key version says what the record is (coordinator_records.RECORDS):

    0, 1  OffsetCommitKey -> OffsetCommitValue        (a committed offset)
    2     GroupMetadataKey -> GroupMetadataValue      (a classic group)
    3-8   ConsumerGroup{Metadata, PartitionMetadata, MemberMetadata,
          TargetAssignmentMetadata, TargetAssignmentMember, CurrentMemberAssignment}

The cores speak ``Rec``: the key version and the key and value as dicts with the generated
classes' snake_case names, nested structs as dicts, topic ids as Kafka's text form (the
records hold UUIDs). Versions written, as Kafka 4 writes them: offset commit key 1 and
value 3 (value 1 when an expire timestamp is set: OffsetCommit v2-v4's retention time),
group metadata value 3, the consumer group values 0. Decoding accepts every version Kafka's
schemas define; anything else, or any malformed byte, raises ``RecordError``.
"""

import re
import struct
import sys
import uuid
from dataclasses import dataclass

from node.kafka.protocol import KafkaProtocolError
from node.kafka.protocol import codec
from node.kafka.protocol import coordinator_records as cr
from node.wire.zkdata import topic_id_text, topic_id_uuid

OFFSET_COMMIT_KEY_VERSION = 1   # written; 0 is read as 1 (the same layout)
GROUP_METADATA_KEY_VERSION = 2
CONSUMER_GROUP_KEY_VERSIONS = range(3, 9)
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_EXPIRING_VALUE_VERSION = 1
GROUP_METADATA_VALUE_VERSION = 3
CONSUMER_GROUP_VALUE_VERSION = 0
RECORD_BYTES_MAX = 1 << 24      # a key or value larger than this is not one of ours

_VERSION = struct.Struct(">h")


class RecordError(ValueError):
    """A ``__consumer_offsets`` record that is not one of Kafka's (or is malformed)."""


class UnknownRecordType(RecordError):
    """A key version this coordinator does not know (Kafka's loader skips those: share
    groups, records of later versions)."""


@dataclass(frozen=True)
class Rec:
    """One ``__consumer_offsets`` record, before encoding / after decoding."""
    key_version: int
    key: dict
    value: dict | None   # None: tombstone

    @property
    def tombstone(self) -> bool:
        return self.value is None


# ---- dicts <-> generated objects -----------------------------------------------------------

_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)")
_FIELDS: dict[type, list[tuple[str, str, type | None, bool]]] = {}


def _fields(cls: type) -> list[tuple[str, str, type | None, bool]]:
    """(attribute, kind "struct"/"uuid"/"plain", struct class, is a list) per field."""
    found = _FIELDS.get(cls)
    if found is None:
        found = []
        for name in cls.__dataclass_fields__:
            note = cls.__annotations__[name]
            is_list = note.startswith("list[")
            nested = _NAME.search(note)
            if nested is not None:
                root = getattr(sys.modules[cls.__module__], nested.group(1))
                found.append((name, "struct", getattr(root, nested.group(2)), is_list))
            elif "UUID" in note:
                found.append((name, "uuid", None, is_list))
            else:
                found.append((name, "plain", None, is_list))
        _FIELDS[cls] = found
    return found


def to_dict(obj) -> dict:
    out = {}
    for name, kind, _, is_list in _fields(type(obj)):
        value = getattr(obj, name)
        if value is not None and kind != "plain":
            convert = to_dict if kind == "struct" else topic_id_text
            value = [convert(v) for v in value] if is_list else convert(value)
        out[name] = value
    return out


_DEFAULTS: dict[type, dict] = {}


def defaults_of(cls: type) -> dict:
    """A generated class's fields at their defaults, as a new dict (a response body to fill)."""
    found = _DEFAULTS.get(cls)
    if found is None:
        found = _DEFAULTS[cls] = to_dict(cls())
    return {k: list(v) if isinstance(v, list) else v for k, v in found.items()}


def from_dict(cls: type, data: dict):
    if not isinstance(data, dict):
        raise RecordError(f"{cls.__name__}: not a dict: {data!r}")
    fields = _fields(cls)
    unknown = data.keys() - {name for name, *_ in fields}
    if unknown:
        raise RecordError(f"{cls.__name__} has no field {sorted(unknown)}")
    values = {}
    for name, kind, nested, is_list in fields:
        if name not in data:
            continue
        value = data[name]
        if value is not None and kind != "plain":
            if kind == "struct":
                def convert(v, nested=nested):
                    return from_dict(nested, v)
            else:
                convert = _uuid
            value = [convert(v) for v in value] if is_list else convert(value)
        values[name] = value
    return cls(**values)


def _uuid(text) -> uuid.UUID:
    if isinstance(text, uuid.UUID):
        return text
    try:
        return topic_id_uuid(text)
    except ValueError as e:
        raise RecordError(str(e)) from None


# ---- bytes -------------------------------------------------------------------------------

def value_version(rec: Rec) -> int:
    if rec.key_version in (0, 1):
        expiring = rec.value.get("expire_timestamp", -1) != -1
        return OFFSET_COMMIT_EXPIRING_VALUE_VERSION if expiring else OFFSET_COMMIT_VALUE_VERSION
    if rec.key_version == GROUP_METADATA_KEY_VERSION:
        return GROUP_METADATA_VALUE_VERSION
    return CONSUMER_GROUP_VALUE_VERSION


def encode(rec: Rec) -> tuple[bytes, bytes | None]:
    """The record's key and value bytes (value None for a tombstone)."""
    if rec.key_version not in cr.RECORDS:
        raise RecordError(f"unknown key version {rec.key_version}")
    key_cls, value_cls = cr.RECORDS[rec.key_version]
    try:
        out = [_VERSION.pack(rec.key_version)]
        codec.encode_body(from_dict(key_cls, rec.key), rec.key_version, out)
        key = b"".join(out)
        if rec.value is None:
            return key, None
        version = value_version(rec)
        out = [_VERSION.pack(version)]
        codec.encode_body(from_dict(value_cls, rec.value), version, out)
        return key, b"".join(out)
    except (KafkaProtocolError, TypeError) as e:
        raise RecordError(f"cannot encode {rec}: {e}") from None


def _split(data, what: str) -> tuple[int, memoryview]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise RecordError(f"{what} is not bytes: {type(data).__name__}")
    view = memoryview(data).cast("B")
    if len(view) < 2:
        raise RecordError(f"{what} of {len(data)} bytes has no version")
    if len(view) > RECORD_BYTES_MAX:
        raise RecordError(f"{what} of {len(view)} bytes is over {RECORD_BYTES_MAX}")
    return _VERSION.unpack_from(view)[0], view[2:]


def decode(key, value) -> Rec:
    """The Rec of a ``__consumer_offsets`` record; RecordError if it is not one."""
    key_version, body = _split(key, "record key")
    if key_version not in cr.RECORDS:
        raise UnknownRecordType(f"unknown record key version {key_version}")
    key_cls, value_cls = cr.RECORDS[key_version]
    try:
        key_dict = to_dict(codec.decode_body(key_cls, key_version, body))
        if value is None:
            value_dict = None
        else:
            version, body = _split(value, f"{value_cls.__name__}")
            low, high = value_cls.VALID_VERSIONS
            if not low <= version <= high:
                raise RecordError(f"{value_cls.__name__} has no version {version} ({low}-{high})")
            value_dict = to_dict(codec.decode_body(value_cls, version, body))
    except KafkaProtocolError as e:
        raise RecordError(f"malformed record (key version {key_version}): {e}") from None
    if key_version == 0:
        key_version = OFFSET_COMMIT_KEY_VERSION
    return Rec(key_version, key_dict, value_dict)


# ---- the records the classic cores write -------------------------------------------------

def offset_commit(group: str, topic: str, partition: int, offset: int, leader_epoch: int,
                  metadata: str, commit_timestamp: int, expire_timestamp: int = -1) -> Rec:
    return Rec(OFFSET_COMMIT_KEY_VERSION,
               {"group": group, "topic": topic, "partition": partition},
               {"offset": offset, "leader_epoch": leader_epoch, "metadata": metadata,
                "commit_timestamp": commit_timestamp, "expire_timestamp": expire_timestamp})


def offset_tombstone(group: str, topic: str, partition: int) -> Rec:
    return Rec(OFFSET_COMMIT_KEY_VERSION,
               {"group": group, "topic": topic, "partition": partition}, None)


def group_metadata(group: str, value: dict) -> Rec:
    return Rec(GROUP_METADATA_KEY_VERSION, {"group": group}, value)


def group_tombstone(group: str) -> Rec:
    return Rec(GROUP_METADATA_KEY_VERSION, {"group": group}, None)


def group_of(rec: Rec) -> str:
    """The group a record belongs to."""
    if rec.key_version <= GROUP_METADATA_KEY_VERSION:
        return rec.key["group"]
    return rec.key["group_id"]
