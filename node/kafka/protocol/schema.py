"""Apache Kafka's JSON message definitions (``schema/*.json``) read into plain specs.

The files are Kafka's own (``clients/src/main/resources/common/message``), kept as data.
They are JSON with ``//`` comments. What this reader keeps of them:
- a message: apiKey, type (request/response/header, or "data": the group coordinator's
  ``__consumer_offsets`` record keys and values, group-coordinator/src/main/resources/
  common/message, kept in ``schema/coordinator/``), name, validVersions, flexibleVersions,
  fields, commonStructs;
- a field: name, type, versions, nullableVersions, taggedVersions + tag, ignorable, default,
  fields (an inline struct) and a per-field flexibleVersions (RequestHeader's ClientId);
- ignored: mapKey (arrays stay lists), entityType, about, listeners, deprecatedVersions,
  latestVersionUnstable (every version in validVersions is decodable; the broker decides
  what it advertises).
"""

import json
import keyword
import pathlib
import re
from dataclasses import dataclass, field

SCHEMA_DIR = pathlib.Path(__file__).with_name("schema")
RECORD_SCHEMA_DIR = SCHEMA_DIR / "coordinator"  # the "data" specs of __consumer_offsets
TXN_RECORD_SCHEMA_DIR = SCHEMA_DIR / "transaction"  # ... and of __transaction_state

PRIMITIVES = ("bool", "int8", "int16", "uint16", "int32", "int64", "float64",
              "string", "bytes", "records", "uuid")
# Fixed-size primitives: struct format character and size in bytes.
FIXED = {"bool": ("?", 1), "int8": ("b", 1), "int16": ("h", 2), "uint16": ("H", 2),
         "int32": ("i", 4), "int64": ("q", 8), "float64": ("d", 8)}


@dataclass(frozen=True)
class Versions:
    """A version range as Kafka writes it: "3+", "0-7", "5" or "none"."""
    low: int
    high: int | None  # None: no upper bound

    @classmethod
    def parse(cls, text: str | None) -> "Versions":
        if text is None or text == "none":
            return cls(1, 0)  # empty
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            low, high = text.split("-")
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    @property
    def empty(self) -> bool:
        return self.high is not None and self.high < self.low

    def __contains__(self, version: int) -> bool:
        return self.low <= version and (self.high is None or version <= self.high)

    def __str__(self) -> str:
        if self.high is None:
            return f"{self.low}+"
        if self.empty:
            return "none"
        return f"{self.low}-{self.high}"


@dataclass
class FieldSpec:
    name: str              # JSON name, e.g. "ThrottleTimeMs"
    attr: str              # Python attribute, e.g. "throttle_time_ms"
    type: str              # JSON type, e.g. "int32", "[]string", "[]TopicData", "EpochEndOffset"
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    ignorable: bool
    default: str | None    # JSON default text, None when absent
    flexible: Versions | None  # a per-field override of the message's flexibleVersions
    struct: "StructSpec | None" = None  # element struct of a struct or array-of-struct field

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass
class StructSpec:
    name: str
    fields: list[FieldSpec]


@dataclass
class MessageSpec:
    name: str
    kind: str                # "request", "response", "header" or "data"
    api_key: int | None
    valid: Versions
    flexible: Versions
    root: StructSpec
    structs: list[StructSpec] = field(default_factory=list)  # nested, leaves first

    @property
    def versions(self) -> range:
        return range(self.valid.low, self.valid.high + 1)


def strip_comments(text: str) -> str:
    """Drop ``//`` comments, leaving ``//`` inside JSON strings alone."""
    out = []
    in_string = False
    i = 0
    while i < len(text):
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def snake_case(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    attr = s.lower()
    assert attr.isidentifier() and not keyword.iskeyword(attr), name
    return attr


def _default_text(value) -> str | None:
    """Defaults are mostly JSON strings; a few files write numbers, booleans or a JSON null
    (which means what "null" means)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def load(path: pathlib.Path) -> MessageSpec:
    doc = json.loads(strip_comments(path.read_text(encoding="utf-8")))
    common = {s["name"]: s for s in doc.get("commonStructs", ())}
    structs: dict[str, StructSpec] = {}
    order: list[StructSpec] = []

    def build_struct(name: str, fields_json: list) -> StructSpec:
        if name in structs:
            return structs[name]
        spec = StructSpec(name, [build_field(f) for f in fields_json])
        assert name not in structs, f"{path.name}: struct {name} defined twice"
        structs[name] = spec
        order.append(spec)  # after its children: leaves first
        return spec

    def build_field(f: dict) -> FieldSpec:
        spec = FieldSpec(
            name=f["name"], attr=snake_case(f["name"]), type=f["type"],
            versions=Versions.parse(f.get("versions")),
            nullable=Versions.parse(f.get("nullableVersions")),
            tagged=Versions.parse(f.get("taggedVersions")),
            tag=f.get("tag"), ignorable=bool(f.get("ignorable", False)),
            default=_default_text(f["default"]) if "default" in f else None,
            flexible=Versions.parse(f["flexibleVersions"]) if "flexibleVersions" in f else None)
        element = spec.element
        if element not in PRIMITIVES:
            if "fields" in f:
                spec.struct = build_struct(element, f["fields"])
            else:
                assert element in common, f"{path.name}: unknown type {spec.type}"
                spec.struct = build_struct(element, common[element]["fields"])
        else:
            assert "fields" not in f, f"{path.name}: {spec.name} has fields"
            assert not (spec.is_array and element in ("records", "bytes", "bool")), spec.type
        assert (spec.tag is None) == spec.tagged.empty, f"{path.name}: {spec.name} tag"
        return spec

    root = StructSpec(doc["name"], [build_field(f) for f in doc["fields"]])
    names = [f.attr for f in root.fields]
    assert len(names) == len(set(names)), f"{path.name}: duplicate field"
    valid = Versions.parse(doc["validVersions"])
    assert valid.high is not None
    return MessageSpec(name=doc["name"], kind=doc["type"], api_key=doc.get("apiKey"),
                       valid=valid, flexible=Versions.parse(doc.get("flexibleVersions")),
                       root=root, structs=order)


def load_all(directory: pathlib.Path = SCHEMA_DIR) -> list[MessageSpec]:
    """Every request and response (headers are hand-written), by API key, request first."""
    specs = [load(p) for p in sorted(directory.glob("*.json"))]
    specs = [s for s in specs if s.kind in ("request", "response")]
    specs.sort(key=lambda s: (s.api_key, s.kind != "request"))
    return specs


def load_records(directory: pathlib.Path = RECORD_SCHEMA_DIR) -> list[MessageSpec]:
    """The ``__consumer_offsets`` (or, given TXN_RECORD_SCHEMA_DIR, ``__transaction_state``)
    record specs: keys (each one version: the record's key
    version, which says what the record is) and their values, by key version, key first."""
    specs = [load(p) for p in sorted(directory.glob("*.json"))]
    assert specs and all(s.kind == "data" for s in specs)
    keys = {s.name: s for s in specs if s.name.endswith("Key")}
    values = {s.name: s for s in specs if s.name.endswith("Value")}
    assert len(keys) + len(values) == len(specs)
    assert {k.removesuffix("Key") for k in keys} == {v.removesuffix("Value") for v in values}
    order = sorted(keys.values(), key=lambda s: s.valid.low)
    return [spec for key in order for spec in (key, values[key.name[:-3] + "Value"])]
