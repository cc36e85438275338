"""Second opinions: other Python Kafka codecs read every message we encode and write the
same bytes back.

- kafka-python 3: generated at run time from the same JSON definitions, written
  independently of ours (every message and version both know);
- aiokafka: hand-written struct definitions (``ProduceRequest_v3`` ...), independent of the
  JSON too (the older versions it has).

Each is skipped where its package (the ``kafka-clients`` extra) is not installed.
"""

import dataclasses
import importlib
import io
import pkgutil
import random
import re
import warnings

import pytest

from node.kafka.protocol import codec

from .kafka_values import CASES, populated


def encoded(spec, version, seed: str) -> bytes:
    message = populated(spec, version, random.Random(f"{seed}/{spec.name}/{version}"))
    if spec.name == "ApiVersionsResponse":
        # Both read an ApiVersions error answer as v0, as brokers send it then.
        message = dataclasses.replace(message, error_code=0)
    out = []
    codec.encode_body(message, version, out)
    return b"".join(out)


def modules(package: str):
    with warnings.catch_warnings():  # kafka-python's own importlib.resources deprecations
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            root = importlib.import_module(package)
        except ImportError:
            return []
        return [importlib.import_module(info.name)
                for info in pkgutil.walk_packages(root.__path__, package + ".")
                if not any(part in info.name for part in (".old", ".schemas", "generate_stubs"))]


def kafka_python_classes() -> dict:
    """kafka-python's message classes by Kafka's message name."""
    classes = {}
    for module in modules("kafka.protocol"):
        for value in vars(module).values():
            definition = getattr(value, "_json", None)
            if isinstance(value, type) and isinstance(definition, dict) and "name" in definition:
                classes[definition["name"]] = value
    return classes


def aiokafka_classes() -> dict:
    """aiokafka's message classes by (Kafka's message name, version)."""
    classes = {}
    for module in modules("aiokafka.protocol"):
        for name, value in vars(module).items():
            match = re.fullmatch(r"(\w+(?:Request|Response))_v(\d+)", name)
            if match and isinstance(value, type) and hasattr(value, "SCHEMA"):
                classes[(match.group(1), int(match.group(2)))] = value
    return classes


KAFKA_PYTHON = kafka_python_classes()
AIOKAFKA = aiokafka_classes()
KAFKA_PYTHON_CASES = [(spec, version) for spec, version in CASES if spec.name in KAFKA_PYTHON
                      and version <= KAFKA_PYTHON[spec.name].max_version]
AIOKAFKA_CASES = [(spec, version) for spec, version in CASES if (spec.name, version) in AIOKAFKA]


def case_id(value) -> str:
    return getattr(value, "name", str(value))


@pytest.mark.skipif(not (KAFKA_PYTHON and AIOKAFKA), reason="kafka-python or aiokafka missing")
def test_both_know_the_data_path_messages():
    for cases in (KAFKA_PYTHON_CASES, AIOKAFKA_CASES):
        names = {spec.name for spec, _ in cases}
        assert {"ProduceRequest", "FetchResponse", "MetadataResponse"} <= names


@pytest.mark.skipif(not KAFKA_PYTHON, reason="kafka-python is not installed")
@pytest.mark.parametrize("spec,version", KAFKA_PYTHON_CASES, ids=case_id)
def test_kafka_python_reads_our_bytes_and_writes_them_back(spec, version):
    ours = encoded(spec, version, "kafka-python")
    theirs = KAFKA_PYTHON[spec.name].decode(ours, version=version)
    if not hasattr(theirs, "_header"):
        theirs._header = None  # kafka-python's decode leaves it unset; encode reads it
    assert bytes(theirs.encode(version=version)) == ours


@pytest.mark.skipif(not AIOKAFKA, reason="aiokafka is not installed")
@pytest.mark.parametrize("spec,version", AIOKAFKA_CASES, ids=case_id)
def test_aiokafka_reads_our_bytes_and_writes_them_back(spec, version):
    ours = encoded(spec, version, "aiokafka")
    theirs = AIOKAFKA[(spec.name, version)].decode(io.BytesIO(ours))
    assert bytes(theirs.encode()) == ours
