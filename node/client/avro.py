"""Typed values as the Kafka paper's pipeline had them: Avro, with a schema id in front
of each value, and the schemas in a small registry kept in the coordinator.

    from node.client.avro import SchemaRegistry, AvroSerializer, AvroDeserializer
    registry = SchemaRegistry("127.0.0.1:2181")
    producer = Producer(B, value_serializer=AvroSerializer(registry, schema, "t-value"))
    producer.send("t", {"user": "ann", "clicks": 3})
    consumer = Consumer(B, value_deserializer=AvroDeserializer(registry))

The value's bytes are the Confluent wire format, which every Kafka tool that reads Avro
understands: a zero magic byte, the schema id as 4 big-endian bytes, then the record in
Avro's binary encoding (fastavro's ``schemaless_writer``; no hand-written codec).

The registry (Confluent Schema Registry's model: ids global, versions per subject,
``<topic>-value`` the default subject) keeps in the coordinator:

    /schemas/ids/N                        {"schema": <JSON text>}       N = 1, 2, ...
    /schemas/fingerprints/<sha256>        {"id": N}     the same schema gets the same id
    /schemas/subjects/S/versions/V        {"id": N}     V = 1, 2, ...

An id is taken with conditional writes: one multi-operation creates ``ids/N`` and the
schema's fingerprint node, and fails as a whole when another registrant took ``N`` or
registered the same schema first (then we read again and retry). Versions are taken the
same way. Registered schemas are immutable, so every reader caches them. Compatibility
between a subject's versions is not checked (Confluent checks BACKWARD by default);
readers resolve old writers' schemas to the reader schema with Avro's resolution rules.
"""
from __future__ import annotations

import hashlib
import io
import json
import struct
import threading

MAGIC = 0
HEADER = struct.Struct(">bI")            # magic byte, schema id
ROOT = "/schemas"
REGISTER_ATTEMPTS = 50
CONNECT_TIMEOUT_S = 10.0
SUBJECT_MAX = 255


class SerializationError(ValueError):
    """A value that is not what its schema says, or bytes that are not a registered
    Avro value."""


class RegistryError(RuntimeError):
    """The registry cannot answer: unreachable coordinator, unknown id or subject, a
    schema that is not valid Avro."""


def normalized(schema) -> tuple[dict, str]:
    """(parsed schema, its JSON text with sorted keys): the text is what is stored and
    what the fingerprint is taken over. ``schema`` is a dict or JSON text."""
    from fastavro import parse_schema
    from fastavro.schema import SchemaParseException, UnknownType
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise RegistryError(f"the schema is not JSON: {e}") from None
    try:
        parsed = parse_schema(schema)
    except (SchemaParseException, UnknownType, KeyError, TypeError, ValueError,
            AttributeError) as e:
        raise RegistryError(f"not a valid Avro schema: {e}") from None
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    return parsed, text


def _check_subject(subject: str) -> None:
    if not subject or len(subject) > SUBJECT_MAX or "/" in subject or \
            subject in (".", "..") or not subject.isprintable():
        raise RegistryError(f"invalid subject {subject!r}: 1..{SUBJECT_MAX} printable "
                            f"characters without '/'")


class SchemaRegistry:
    """The registry's client: a kazoo session to the coordinator (``zookeeper``: its
    connect string, e.g. the cluster's ``127.0.0.1:PORT``), or an already started
    ``KazooClient`` (``client=``, which is then not closed here)."""

    def __init__(self, zookeeper: str | None = None, *, client=None,
                 timeout_s: float = CONNECT_TIMEOUT_S):
        if client is None:
            if not zookeeper:
                raise RegistryError("the schema registry needs the coordinator's "
                                    "address (HOST:PORT)")
            from kazoo.client import KazooClient
            from kazoo.handlers.threading import KazooTimeoutError
            client = KazooClient(hosts=zookeeper, timeout=timeout_s)
            try:
                client.start(timeout=timeout_s)
            except KazooTimeoutError:
                client.close()
                raise RegistryError(f"cannot reach the coordinator at {zookeeper} "
                                    f"(schema registry)") from None
            self._owned = True
        else:
            self._owned = False
        self.zk = client
        self._by_id: dict[int, tuple[dict, str]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------- reading
    def schema(self, schema_id: int) -> dict:
        """The parsed schema registered as ``schema_id``."""
        return self._entry(schema_id)[0]

    def schema_text(self, schema_id: int) -> str:
        return self._entry(schema_id)[1]

    def _entry(self, schema_id: int) -> tuple[dict, str]:
        with self._lock:
            cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        from kazoo.exceptions import NoNodeError
        try:
            data, _ = self.zk.get(f"{ROOT}/ids/{schema_id}")
        except NoNodeError:
            raise RegistryError(f"no schema with id {schema_id}") from None
        entry = normalized(json.loads(data)["schema"])
        with self._lock:
            self._by_id[schema_id] = entry
        return entry

    def subjects(self) -> list[str]:
        from kazoo.exceptions import NoNodeError
        try:
            return sorted(self.zk.get_children(f"{ROOT}/subjects"))
        except NoNodeError:
            return []

    def versions(self, subject: str) -> dict[int, int]:
        """{version: schema id} of ``subject`` (empty when it has none)."""
        from kazoo.exceptions import NoNodeError
        _check_subject(subject)
        base = f"{ROOT}/subjects/{subject}/versions"
        try:
            names = self.zk.get_children(base)
        except NoNodeError:
            return {}
        out = {}
        for name in names:
            try:
                data, _ = self.zk.get(f"{base}/{name}")
            except NoNodeError:
                continue
            out[int(name)] = json.loads(data)["id"]
        return dict(sorted(out.items()))

    def latest(self, subject: str) -> tuple[int, int, dict]:
        """(schema id, version, parsed schema) of the subject's newest version."""
        versions = self.versions(subject)
        if not versions:
            raise RegistryError(f"no schema registered under subject {subject!r}")
        version = max(versions)
        return versions[version], version, self.schema(versions[version])

    def ids(self) -> list[int]:
        from kazoo.exceptions import NoNodeError
        try:
            return sorted(int(n) for n in self.zk.get_children(f"{ROOT}/ids"))
        except NoNodeError:
            return []

    # ------------------------------------------------------------- registering
    def register(self, subject: str, schema) -> int:
        """The id of ``schema`` under ``subject``: the existing one when this schema was
        registered before (under any subject), else a new id; the subject gets a new
        version unless its versions already include this schema."""
        _check_subject(subject)
        parsed, text = normalized(schema)
        fingerprint = hashlib.sha256(text.encode()).hexdigest()
        self.zk.ensure_path(f"{ROOT}/ids")
        self.zk.ensure_path(f"{ROOT}/fingerprints")
        schema_id = self._id_for(fingerprint, text)
        with self._lock:
            self._by_id.setdefault(schema_id, (parsed, text))
        self._add_version(subject, schema_id)
        return schema_id

    def _id_for(self, fingerprint: str, text: str) -> int:
        from kazoo.exceptions import NoNodeError
        path = f"{ROOT}/fingerprints/{fingerprint}"
        for _ in range(REGISTER_ATTEMPTS):
            try:
                data, _ = self.zk.get(path)
                return json.loads(data)["id"]
            except NoNodeError:
                pass
            taken = [int(n) for n in self.zk.get_children(f"{ROOT}/ids")]
            candidate = max(taken, default=0) + 1
            txn = self.zk.transaction()
            txn.create(f"{ROOT}/ids/{candidate}", json.dumps({"schema": text}).encode())
            txn.create(path, json.dumps({"id": candidate}).encode())
            if _committed(txn.commit()):
                return candidate
        raise RegistryError(f"could not take a schema id in {REGISTER_ATTEMPTS} attempts")

    def _add_version(self, subject: str, schema_id: int) -> int:
        base = f"{ROOT}/subjects/{subject}/versions"
        self.zk.ensure_path(base)
        for _ in range(REGISTER_ATTEMPTS):
            versions = self.versions(subject)
            for version, known in versions.items():
                if known == schema_id:
                    return version
            version = max(versions, default=0) + 1
            txn = self.zk.transaction()
            txn.create(f"{base}/{version}", json.dumps({"id": schema_id}).encode())
            if _committed(txn.commit()):
                return version
        raise RegistryError(f"could not add a version to {subject!r} in "
                            f"{REGISTER_ATTEMPTS} attempts")

    def close(self) -> None:
        if self._owned:
            self.zk.stop()
            self.zk.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _committed(results) -> bool:
    """True when a transaction committed; False when it lost a race (a node existed:
    ZooKeeper reports the operations before the failed one as rolled back and those
    after it as runtime inconsistencies); any other failure is raised."""
    from kazoo.exceptions import NodeExistsError, RolledBackError, RuntimeInconsistency
    failures = [r for r in results if isinstance(r, Exception)]
    if not failures:
        return True
    for failure in failures:
        if not isinstance(failure, (NodeExistsError, RolledBackError, RuntimeInconsistency)):
            raise failure
    return False


# ------------------------------------------------------------------ the wire format

def encode(schema_id: int, parsed: dict, value) -> bytes:
    """One value in the Confluent wire format."""
    from fastavro import schemaless_writer
    out = io.BytesIO()
    out.write(HEADER.pack(MAGIC, schema_id))
    try:
        schemaless_writer(out, parsed, value)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
        raise SerializationError(f"the value does not match schema {schema_id}: "
                                 f"{type(e).__name__}: {e}") from None
    return out.getvalue()


def schema_id_of(data) -> int:
    """The schema id in front of an Avro value; SerializationError if there is none."""
    if data is None or len(data) < HEADER.size:
        raise SerializationError(f"not an Avro value: {0 if data is None else len(data)} "
                                 f"bytes, a header takes {HEADER.size}")
    magic, schema_id = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise SerializationError(f"not an Avro value: magic byte {magic}, expected "
                                 f"{MAGIC}")
    return schema_id


class AvroSerializer:
    """``value_serializer`` for the Producer: registers ``schema`` under ``subject`` on
    first use and writes each value (a dict) with its id in front."""

    def __init__(self, registry: SchemaRegistry, schema, subject: str):
        self.registry = registry
        self.parsed, _ = normalized(schema)
        self.schema = schema
        self.subject = subject
        self.schema_id: int | None = None

    def register(self) -> int:
        """Register the schema now (else the first value does); its id."""
        if self.schema_id is None:
            self.schema_id = self.registry.register(self.subject, self.schema)
        return self.schema_id

    def __call__(self, value) -> bytes | None:
        if value is None:
            return None
        if self.schema_id is None:
            self.register()
        return encode(self.schema_id, self.parsed, value)


class AvroDeserializer:
    """``value_deserializer`` for the Consumer: the value's writer schema comes from the
    registry by id; with ``reader_schema`` the record is resolved to it (Avro's schema
    resolution: added fields take their defaults, removed ones are skipped)."""

    def __init__(self, registry: SchemaRegistry, reader_schema=None):
        self.registry = registry
        self.reader = normalized(reader_schema)[0] if reader_schema is not None else None

    def __call__(self, data):
        if data is None:
            return None
        schema_id = schema_id_of(data)
        return decode_body(self.registry.schema(schema_id), self.reader, data, schema_id)


def decode_body(writer: dict, reader: dict | None, data, schema_id: int):
    from fastavro import schemaless_reader
    stream = io.BytesIO(memoryview(data)[HEADER.size:])
    try:
        return schemaless_reader(stream, writer, reader)
    except Exception as e:      # fastavro raises many kinds on bad bytes
        raise SerializationError(f"cannot decode a value written with schema "
                                 f"{schema_id}: {type(e).__name__}: {e}") from None
