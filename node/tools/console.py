"""``minikafka console-producer`` and ``console-consumer``: Kafka's console tools.

Producer (kafka-console-producer.sh): one record per line of stdin, read as Kafka's
LineMessageReader: ``[headers<headers.delimiter>][key<key.separator>]value``.
``--property parse.key=true`` splits each line at ``key.separator`` (default a tab) into
key and value; ``parse.headers=true`` first takes the headers, ``k:v`` pairs
(``headers.key.separator``, default ``:``) separated by ``headers.separator`` (default
``,``, a literal string here, a regex in Kafka) up to ``headers.delimiter`` (default a
tab); ``null.marker=S`` makes a key, value or header value equal to S a null. A header
without its key separator is an error (with ``ignore.error=true``: a null value).
``--producer-property k=v`` sets a producer config (Kafka's names: acks,
linger.ms, batch.size, retries, request.timeout.ms, ...). A record that fails is
reported as Kafka's ErrorLoggingCallback does, and the exit code is then 1.

Consumer (kafka-console-consumer.sh): every partition of the topic, or ``--partition P
[--offset O|earliest|latest]``, or as a member of ``--group G`` (its committed offsets,
committing as it reads); new records only unless ``--from-beginning``. Each record is
printed by Kafka's DefaultMessageFormatter:
``[CreateTime:ts<sep>][Partition:p<sep>][Offset:o<sep>][headers<sep>][key<sep>]value``
with ``sep`` = ``key.separator`` (a tab) and ``line.separator`` after the value;
headers (``print.headers=true``) as ``k:v`` joined by ``headers.separator`` (default
``,``), a null value as ``null.literal``, ``NO_HEADERS`` for none. It stops after
``--max-messages`` records, after ``--timeout-ms`` without a record, or on Ctrl-C, and
prints ``Processed a total of N messages`` on stderr, as Kafka.

Avro values, as Confluent's Avro console tools (whose property names these are, with
our registry in the coordinator instead of a URL): the producer with ``--property
schema.registry=HOST:PORT value.schema='{...}'`` (or ``value.schema.file=F``) reads one
JSON value per line and writes it in the registry's wire format under
``<topic>-value``; the consumer with ``--property schema.registry=HOST:PORT`` prints
each value decoded, as one line of JSON.

``--property``, ``--producer-property`` and ``--consumer-property`` take one KEY=VALUE per
flag, as Kafka, or several after one flag (``--property print.key=true print.offset=true``).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

from node.wire import errors
from node.tools.common import (EXIT_ERROR, EXIT_OK, ToolError, check_topics_exist, guarded,
                               one_line_usage_errors, open_admin, parse_key_values)

PRODUCER_PROG = "minikafka console-producer"
CONSUMER_PROG = "minikafka console-consumer"
ERROR_PREFIX = "ERROR "
POLL_MS = 200
LINE_BYTES_MAX = 16 * 1024 * 1024

# Kafka producer config name -> (Producer keyword, parser)
PRODUCER_CONFIGS = {
    "acks": ("acks", str),
    "linger.ms": ("linger_ms", int),
    "batch.size": ("batch_size", int),
    "retries": ("retries", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "delivery.timeout.ms": ("delivery_timeout_ms", int),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "max.block.ms": ("max_block_ms", int),
    "max.request.size": ("max_request_size", int),
    "client.id": ("client_id", str),
    "enable.idempotence": ("enable_idempotence", lambda v: v.strip().lower() == "true"),
}
CONSUMER_CONFIGS = {
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", int),
    "max.poll.records": ("max_poll_records", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "check.crcs": ("check_crcs", lambda v: v.lower() == "true"),
    "client.id": ("client_id", str),
}


def _client_kwargs(props: dict[str, str], table: dict, flag: str) -> dict:
    out = {}
    for key, value in props.items():
        if key not in table:
            raise ToolError(f"{flag} {key}: unknown or unsupported config (known: "
                            f"{', '.join(sorted(table))})")
        name, parse = table[key]
        try:
            out[name] = parse(value)
        except ValueError:
            raise ToolError(f"{flag} {key}={value}: invalid value") from None
    return out


def _unescape(text: str) -> str:
    """Property values like key.separator may be written with backslash escapes (\\t)."""
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text


def _flag(props: dict[str, str], key: str, default: bool = False) -> bool:
    return props.get(key, str(default)).strip().lower() == "true"


# ----------------------------------------------------------------- producer

def add_producer_arguments(parser) -> None:
    one_line_usage_errors(parser, PRODUCER_PROG)
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--producer-property", action="extend", nargs="+", default=[],
                        metavar="KEY=VALUE")
    parser.add_argument("--property", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                        help="line reader properties: parse.key, key.separator, "
                             "parse.headers, headers.delimiter, headers.separator, "
                             "headers.key.separator, null.marker, "
                             "ignore.error; schema.registry=HOST:PORT with value.schema=JSON "
                             "or value.schema.file=F: each line is a JSON value, sent as Avro")
    parser.add_argument("--request-required-acks", default="-1",
                        help="acks: -1 (all), 1 or 0 (default -1)")
    parser.add_argument("--sync", action="store_true", help="wait for each record's ack")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--timeout", type=int, default=1000,
                        help="linger.ms: how long a record may wait for more (default 1000)")
    parser.add_argument("--max-block-ms", type=int, default=60_000)
    parser.set_defaults(func=run_producer)


def run_producer(args) -> int:
    return guarded(ERROR_PREFIX, _produce, args)


def _produce(args) -> int:
    from node.client.producer import Producer

    reader = parse_key_values(args.property, "--property")
    lines = LineReader(reader)
    kwargs = {"acks": args.request_required_acks, "linger_ms": args.timeout,
              "max_block_ms": args.max_block_ms}
    if args.batch_size is not None:
        kwargs["batch_size"] = args.batch_size
    kwargs.update(_client_kwargs(parse_key_values(args.producer_property,
                                                  "--producer-property"),
                                 PRODUCER_CONFIGS, "--producer-property"))
    admin = open_admin(args.bootstrap_server)
    try:
        check_topics_exist(admin, [args.topic])
    finally:
        admin.close()
    registry, encode = _avro_encoder(reader, args.topic)
    try:
        producer = Producer(args.bootstrap_server, **kwargs)
    except ValueError as e:
        raise ToolError(str(e)) from None
    failures = []
    prompt = sys.stdin.isatty()
    try:
        for number, value, key, headers in _lines(sys.stdin.buffer, lines, prompt):
            if encode is not None and value is not None:
                value = encode(number, value)
            future = producer.send(args.topic, value, key=key, headers=headers)
            future.add_callback(_on_error(args.topic, key, value, failures))
            if args.sync:
                _wait(future)
        producer.flush()
    except KeyboardInterrupt:
        pass
    finally:
        producer.close()
        if registry is not None:
            registry.close()
    return EXIT_ERROR if failures else EXIT_OK


def _registry(props: dict[str, str]):
    from node.client.avro import RegistryError, SchemaRegistry
    address = props.get("schema.registry")
    if not address:
        raise ToolError("Avro values need --property schema.registry=HOST:PORT (the "
                        "coordinator holding the schema registry)")
    try:
        return SchemaRegistry(address)
    except RegistryError as e:
        raise ToolError(str(e)) from None


def _avro_encoder(props: dict[str, str], topic: str):
    """(registry, (line number, JSON line) -> Avro bytes), or (None, None) when no value
    schema is given."""
    from node.client.avro import AvroSerializer, RegistryError, SerializationError
    text = props.get("value.schema")
    if text is None and props.get("value.schema.file"):
        try:
            with open(props["value.schema.file"]) as f:
                text = f.read()
        except OSError as e:
            raise ToolError(f"value.schema.file: {e.strerror}: {e.filename}") from None
    if text is None:
        return None, None
    registry = _registry(props)
    try:
        serializer = AvroSerializer(registry, text, f"{topic}-value")
        serializer.register()
    except RegistryError as e:
        registry.close()
        raise ToolError(f"value.schema: {e}") from None

    def encode(number: int, line: bytes) -> bytes:
        try:
            return serializer(json.loads(line))
        except ValueError as e:     # JSONDecodeError and SerializationError
            what = "does not match the schema" if isinstance(e, SerializationError) \
                else "is not JSON"
            raise ToolError(f"line {number} {what}: {e}") from None
    return registry, encode


class LineReader:
    """Kafka's LineMessageReader: one line -> (value, key, headers) (module docstring)."""

    def __init__(self, props: dict[str, str]):
        self.parse_key = _flag(props, "parse.key")
        self.parse_headers = _flag(props, "parse.headers")
        self.ignore_error = _flag(props, "ignore.error")
        separators = {}
        for name, default in (("key.separator", "\t"), ("headers.delimiter", "\t"),
                              ("headers.separator", ","), ("headers.key.separator", ":")):
            separators[name] = _unescape(props.get(name, default)).encode()
            if not separators[name]:
                raise ToolError(f"--property {name} may not be empty")
        self.key_separator = separators["key.separator"]
        self.headers_delimiter = separators["headers.delimiter"]
        self.headers_separator = separators["headers.separator"]
        self.headers_key_separator = separators["headers.key.separator"]
        marker = props.get("null.marker")
        self.null_marker = None if marker is None else _unescape(marker).encode()
        names = list(separators)[1:] + ["null.marker"]
        values = list(separators.values())[1:] + [self.null_marker]
        for i, a in enumerate(names):        # Kafka's checks, in its words
            for b, value in zip(names[i + 1:], values[i + 1:]):
                if values[i] == value:
                    raise ToolError(f"{a} and {b} may not be equal")
        if self.key_separator == self.null_marker:
            raise ToolError("null.marker and key.separator may not be equal")

    def parse(self, number: int, line: bytes):
        """(value, key, headers) of line ``number`` (without its line break)."""
        rest, headers = line, None
        if self.parse_headers:
            text, rest = self._cut(number, line, self.headers_delimiter, "headers delimiter")
            if text is not None and text != self.null_marker:
                headers = self._headers(number, text)
        key = None
        if self.parse_key:
            key, rest = self._cut(number, rest, self.key_separator, "key separator")
            if key == self.null_marker:
                key = None
        return (None if rest == self.null_marker else rest), key, headers

    def _cut(self, number: int, line: bytes, separator: bytes, name: str):
        head, sep, rest = line.partition(separator)
        if sep:
            return head, rest
        if self.ignore_error:
            return None, line
        raise ToolError(f"No {name} found on line number {number}: "
                        f"'{line.decode(errors='replace')}'")

    def _headers(self, number: int, text: bytes) -> list:
        pairs = text.split(self.headers_separator)
        while len(pairs) > 1 and not pairs[-1]:    # as Java's split: no trailing empties
            pairs.pop()
        headers = []
        for pair in pairs:
            key, sep, value = pair.partition(self.headers_key_separator)
            if not sep:
                if not self.ignore_error:
                    raise ToolError(f"No header key separator found in pair "
                                    f"'{pair.decode(errors='replace')}' on line number {number}")
                value = None
            elif key == self.null_marker:
                raise ToolError(f"Header keys should not be equal to the null marker "
                                f"'{self.null_marker.decode(errors='replace')}' as they "
                                f"can't be null")
            elif value == self.null_marker:
                value = None
            headers.append((key.decode("utf-8", "surrogateescape"), value))
        return headers


def _lines(stream, reader: LineReader, prompt: bool):
    """(line number, value, key, headers) for each line of ``stream``."""
    number = 0
    while True:
        if prompt:
            sys.stdout.write(">")
            sys.stdout.flush()
        line = stream.readline(LINE_BYTES_MAX + 1)
        if not line:
            return
        number += 1
        yield (number, *reader.parse(number, line.rstrip(b"\n").rstrip(b"\r")))


def _on_error(topic: str, key, value, failures: list):
    def callback(metadata, exception) -> None:
        if exception is not None:
            failures.append(exception)
            key_text = "null" if key is None else f"{len(key)} bytes"
            value_text = "null" if value is None else f"{len(value)} bytes"
            detail = exception.message if isinstance(exception, errors.KafkaError) else exception
            sys.stderr.write(f"ERROR Error when sending message to topic {topic} with key: "
                             f"{key_text}, value: {value_text} with error: {detail}\n")
    return callback


def _wait(future) -> None:
    try:
        future.get()
    except Exception:  # reported by the callback
        pass


# ----------------------------------------------------------------- consumer

def add_consumer_arguments(parser) -> None:
    one_line_usage_errors(parser, CONSUMER_PROG)
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--from-beginning", action="store_true")
    parser.add_argument("--group", help="read as a member of this consumer group (its "
                        "committed offsets; commits as it goes)")
    parser.add_argument("--group-protocol", choices=("consumer", "classic", "zookeeper"),
                        default="consumer",
                        help="with --group: consumer (the brokers' group coordinator, "
                        "KIP-848; the default), classic (the same coordinator, "
                        "JoinGroup/SyncGroup) or zookeeper (the Kafka paper's groups)")
    parser.add_argument("--partition", type=int)
    parser.add_argument("--offset", help="a non-negative offset, earliest or latest "
                        "(default latest); needs --partition")
    parser.add_argument("--max-messages", type=int, default=-1)
    parser.add_argument("--timeout-ms", type=int, default=-1,
                        help="exit if no record arrives for this long")
    parser.add_argument("--property", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                        help="formatter properties: print.key, print.offset, "
                             "print.partition, print.timestamp, print.value, "
                             "print.headers, key.separator, line.separator, "
                             "headers.separator, null.literal; "
                             "schema.registry=HOST:PORT prints Avro values as JSON")
    parser.add_argument("--consumer-property", action="extend", nargs="+", default=[],
                        metavar="KEY=VALUE")
    parser.set_defaults(func=run_consumer)


class Formatter:
    """Kafka's DefaultMessageFormatter."""

    def __init__(self, props: dict[str, str]):
        self.timestamp = _flag(props, "print.timestamp")
        self.partition = _flag(props, "print.partition")
        self.offset = _flag(props, "print.offset")
        self.headers = _flag(props, "print.headers")
        self.key = _flag(props, "print.key")
        self.value = _flag(props, "print.value", True)
        self.separator = _unescape(props.get("key.separator", "\t")).encode()
        self.line_separator = _unescape(props.get("line.separator", "\n")).encode()
        self.headers_separator = _unescape(props.get("headers.separator", ",")).encode()
        self.null = props.get("null.literal", "null").encode()

    def format(self, record) -> bytes:
        parts = []
        if self.timestamp:
            parts.append(b"CreateTime:%d" % record.timestamp)
        if self.partition:
            parts.append(b"Partition:%d" % record.partition)
        if self.offset:
            parts.append(b"Offset:%d" % record.offset)
        if self.headers:
            parts.append(self.headers_separator.join(
                k.encode("utf-8", "surrogateescape") + b":" + (self.null if v is None else v)
                for k, v in record.headers) if record.headers else b"NO_HEADERS")
        if self.key:
            parts.append(self.null if record.key is None else bytes(record.key))
        out = self.separator.join(parts)
        if self.value:
            value = self.null if record.value is None else record.value
            if isinstance(value, dict):     # an Avro value, decoded
                value = json.dumps(value, default=_json_value).encode()
            else:
                value = bytes(value)
            out = out + self.separator + value if parts else value
        elif parts:
            out += self.separator
        return out + self.line_separator


def _json_value(value):
    """JSON for what Avro decodes to that JSON has no type for (Confluent prints bytes
    as text and timestamps as numbers; we print ISO times and bytes as text)."""
    if isinstance(value, (bytes, bytearray)):
        return value.decode("latin-1")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _start_offset(args):
    """'earliest', 'latest' or an offset."""
    if args.offset is not None and args.partition is None:
        raise ToolError("The partition is required when offset is specified.")
    if args.offset is not None and args.from_beginning:
        raise ToolError("Options from-beginning and offset cannot be specified together.")
    if args.offset is None:
        return "earliest" if args.from_beginning else "latest"
    text = args.offset.strip().lower()
    if text in ("earliest", "latest"):
        return text
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise ToolError(f"The provided offset value '{args.offset}' is incorrect. Valid "
                        f"values are 'earliest', 'latest', or a non-negative long.")
    return offset


def run_consumer(args) -> int:
    return guarded(ERROR_PREFIX, _consume, args)


class _Stop(Exception):
    pass


def _consume(args) -> int:
    from node.client.consumer import Consumer, DeserializationError

    props = parse_key_values(args.property, "--property")
    formatter = Formatter(props)
    start = _start_offset(args)
    kwargs = _client_kwargs(parse_key_values(args.consumer_property, "--consumer-property"),
                            CONSUMER_CONFIGS, "--consumer-property")
    admin = open_admin(args.bootstrap_server)
    try:
        check_topics_exist(admin, [args.topic])
        partitions = [p.partition for p in admin.describe_topics([args.topic])[args.topic]]
    finally:
        admin.close()
    if args.partition is not None:
        if args.partition not in partitions:
            raise ToolError(f"Partition {args.partition} of topic {args.topic} does not "
                            f"exist (partitions: 0..{len(partitions) - 1})")
        partitions = [args.partition]
    reset = start if isinstance(start, str) else "earliest"
    if args.group is not None:
        if args.partition is not None:
            raise ToolError("Options group and partition cannot be specified together.")
        from node.client.group import GroupError, check_group_id
        try:
            check_group_id(args.group)
        except GroupError as e:
            raise ToolError(str(e)) from None
        kwargs.update(group_id=args.group, auto_commit_interval_ms=1000,
                      group_protocol=args.group_protocol)
    registry = None
    if props.get("schema.registry"):
        from node.client.avro import AvroDeserializer
        registry = _registry(props)
        kwargs["value_deserializer"] = AvroDeserializer(registry)
    consumer = Consumer(args.bootstrap_server, auto_offset_reset=reset, **kwargs)
    count = 0
    out = sys.stdout.buffer
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGTERM,)}
    try:
        if args.group is not None:
            from node.client.group import GroupError
            try:
                consumer.subscribe([args.topic])
            except GroupError as e:
                raise ToolError(str(e)) from None
        else:
            consumer.assign([(args.topic, p) for p in partitions])
        if not isinstance(start, str):
            consumer.seek((args.topic, partitions[0]), start)
        last_record_s = time.monotonic()
        while args.max_messages < 0 or count < args.max_messages:
            room = None if args.max_messages < 0 else args.max_messages - count
            records = consumer.poll(POLL_MS, max_records=room)
            if records:
                last_record_s = time.monotonic()
                out.write(b"".join(formatter.format(r) for r in records))
                out.flush()
                count += len(records)
            elif args.timeout_ms >= 0 and \
                    (time.monotonic() - last_record_s) * 1000 >= args.timeout_ms:
                sys.stderr.write("ERROR Error processing message, terminating consumer "
                                 "process: org.apache.kafka.common.errors.TimeoutException\n")
                break
    except (KeyboardInterrupt, _Stop):
        pass
    except BrokenPipeError:
        _silence_stdout()
    except DeserializationError as e:
        raise ToolError(str(e)) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        consumer.close()
        if registry is not None:
            registry.close()
        sys.stderr.write(f"Processed a total of {count} messages\n")
        sys.stderr.flush()
    return EXIT_OK


def _raise_stop(signum, frame):
    raise _Stop()


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so the exit flush stays quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
