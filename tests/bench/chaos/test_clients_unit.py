"""bench.chaos.clients' pure parts: the command line, each client's setting names, the
event encoding and its decoding, the send and ownership bookkeeping (no processes)."""
from __future__ import annotations

import io
import json
import sys

import pytest

from bench.chaos.clients import CLIENTS, missing, present, worker_command
from bench.chaos.clients.common import Pacer
from bench.chaos.clients.events import Emitter, Ownership, Sends, decode_op, op_event
from bench.chaos.clients.options import (UsageError, argv_for, group_protocol_settings, parse,
                                        settings, typed)
from bench.chaos.clients.stream import op_from_event

BASE = ["--role", "producer", "--name", "p0", "--bootstrap", "127.0.0.1:9", "--topic", "t"]


def _args(client: str, *extra: str, role: str = "producer"):
    base = [a if a != "producer" else role for a in BASE]
    return parse(["--client", client, *base, *extra])


@pytest.mark.parametrize("client,expected", [
    ("confluent-kafka", {"acks": "all", "enable.idempotence": "true",
                         "request.timeout.ms": "3000", "delivery.timeout.ms": "9000"}),
    ("kafka-python", {"acks": "all", "enable_idempotence": True, "request_timeout_ms": 3000,
                      "delivery_timeout_ms": 9000}),
    ("native", {"acks": "all", "enable_idempotence": True, "request_timeout_ms": 3000,
                "delivery_timeout_ms": 9000, "retry_backoff_ms": 100, "max_block_ms": 5000,
                "linger_ms": 0}),
])
def test_producer_options_map_to_each_clients_own_names(client, expected):
    args = _args(client, "--acks", "all", "--idempotence", "on", "--request-timeout-ms",
                 "3000", "--delivery-timeout-ms", "9000")
    assert settings(client, "producer", args) == expected


def test_acks_one_and_idempotence_off_in_python_types():
    args = _args("kafka-python", "--acks", "1", "--idempotence", "off")
    assert settings("kafka-python", "producer", args) == {"acks": 1, "enable_idempotence": False}
    args = _args("confluent-kafka", "--acks", "0")
    assert settings("confluent-kafka", "producer", args) == {"acks": "0"}


def test_nothing_is_set_that_no_option_asked_for_except_earliest_for_consumers():
    assert settings("confluent-kafka", "producer", _args("confluent-kafka")) == {}
    assert settings("aiokafka", "producer", _args("aiokafka")) == {}
    assert settings("confluent-kafka", "consumer", _args("confluent-kafka", role="consumer")) \
        == {"auto.offset.reset": "earliest"}
    assert settings("kafka-python", "consumer", _args("kafka-python", role="consumer")) \
        == {"auto_offset_reset": "earliest"}


def test_a_consumers_request_timeout_is_librdkafkas_socket_timeout():
    args = _args("confluent-kafka", "--request-timeout-ms", "5000", role="consumer")
    assert settings("confluent-kafka", "consumer", args)["socket.timeout.ms"] == "5000"


def test_set_passes_any_setting_in_the_clients_spelling_typed_for_python_clients():
    args = _args("kafka-python", "--set", "linger_ms=5", "--set", "client_id=x",
                 "--set", "retries=none", "--set", "enable_idempotence=false")
    assert settings("kafka-python", "producer", args) == {
        "linger_ms": 5, "client_id": "x", "retries": None, "enable_idempotence": False}
    args = _args("confluent-kafka", "--set", "linger.ms=5")
    assert settings("confluent-kafka", "producer", args) == {"linger.ms": "5"}
    assert typed("1.5") == 1.5 and typed("True") is True and typed("abc") == "abc"


def test_aiokafka_refuses_a_delivery_timeout_it_does_not_have():
    with pytest.raises(UsageError, match="aiokafka has no delivery timeout"):
        settings("aiokafka", "producer", _args("aiokafka", "--delivery-timeout-ms", "5000"))


@pytest.mark.parametrize("extra,why", [
    (["--group", "g"], "--group is for consumers"),
    (["--value-format", "avro", "--schema-registry", "h:1"], "native-only"),
    (["--set", "novalue"], "KEY=VALUE"),
    (["--rate", "0"], "--rate"),
    (["--request-timeout-ms", "0"], "positive"),
])
def test_bad_command_lines_are_usage_errors(extra, why):
    with pytest.raises(UsageError, match=why):
        _args("kafka-python", *extra)


def test_producer_options_on_a_consumer_are_usage_errors():
    with pytest.raises(UsageError, match="for producers"):
        _args("native", "--acks", "1", role="consumer")


def test_worker_command_round_trips_through_the_parser():
    command = worker_command("confluent-kafka", role="consumer", name="c1",
                             bootstrap="h:1,h:2", topic="t", duration=0, group="g",
                             set={"fetch.wait.max.ms": 50}, idempotence=None,
                             flush_timeout_s=3.5)
    assert command[:3] == [sys.executable, "-m", "bench.chaos.clients"]
    args = parse(command[3:])
    assert (args.client, args.role, args.name, args.bootstrap, args.group, args.duration,
            args.flush_timeout_s, args.extra) == (
        "confluent-kafka", "consumer", "c1", "h:1,h:2", "g", 0.0, 3.5,
        {"fetch.wait.max.ms": "50"})
    assert "--idempotence" not in command
    with pytest.raises(ValueError, match="unknown worker options"):
        worker_command("native", role="producer", nmae="typo")
    with pytest.raises(ValueError, match="unknown client"):
        worker_command("java", role="producer")


def test_worker_command_spells_a_boolean_idempotence_on_off():
    argv = argv_for("kafka-python", role="producer", name="p", bootstrap="b", topic="t",
                    idempotence=False, acks="1")
    assert parse(argv).idempotence == "off" and parse(argv).acks == "1"


def test_missing_and_present_agree_and_native_is_always_here():
    assert missing("native") is None
    assert present() == [c for c in CLIENTS if missing(c) is None]
    assert "native" in present()
    with pytest.raises(ValueError):
        missing("java")


def test_op_events_encode_values_and_decode_to_checker_ops():
    event = op_event("c0", "ok", "poll", 7, reads=[(1, 5, b"p0-1"), (1, 6, None)])
    assert event == {"event": "op", "process": "c0", "type": "ok", "f": "poll", "time_ns": 7,
                     "reads": [[1, 5, "cDAtMQ=="], [1, 6, None]]}
    op = op_from_event(json.loads(json.dumps(event)))
    assert (op.process, op.type, op.f, op.time_ns, op.reads) == (
        "c0", "ok", "poll", 7, ((1, 5, b"p0-1"), (1, 6, None)))
    send = op_from_event(op_event("p0", "ok", "send", 9, value=b"p0-3", partition=2, offset=40))
    assert (send.value, send.partition, send.offset) == (b"p0-3", 2, 40)


def test_group_op_fields_decode():
    kw = decode_op(op_event("c0", "ok", "assign", 1, partitions={2, 0}, member="m-1",
                            generation=4))
    assert (kw["partitions"], kw["member"], kw["generation"]) == ((0, 2), "m-1", 4)
    kw = decode_op(op_event("c0", "info", "commit", 1, offsets=[(0, 10)], error="timeout"))
    assert (kw["offsets"], kw["error"], kw["type"]) == (((0, 10),), "timeout", "info")
    with pytest.raises(AssertionError):
        op_event("c0", "maybe", "send", 1)


def _lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_sends_complete_once_and_what_is_left_becomes_info():
    out = io.StringIO()
    em = Emitter("p0", out)
    sends = Sends(em)
    for v in (b"p0-0", b"p0-1", b"p0-2"):
        sends.invoke(v)
    sends.ok(b"p0-0", 0, 1)
    sends.ok(b"p0-0", 0, 1)             # a second report of one send is dropped
    sends.failed(b"p0-1", True, "refused")
    assert sends.outstanding() == 1
    sends.give_up("gone")
    em.end()
    sends.ok(b"p0-2", 0, 2)             # after the end: nothing is written
    events = _lines(out)
    ops = [(e["type"], e.get("error")) for e in events if e["event"] == "op"]
    assert ops == [("invoke", None)] * 3 + [("ok", None), ("fail", "refused"), ("info", "gone")]
    assert events[-1]["event"] == "end" and (events[-1]["ok"], events[-1]["errors"]) == (1, 2)


def test_ownership_writes_changes_only_and_revokes_all_at_the_end():
    out = io.StringIO()
    em = Emitter("c0", out)
    group = Ownership(em)
    group.assign([0, 1], member="m", generation=3)
    group.assign([1])                   # owned already: nothing
    group.revoke([1, 2], lost=True)     # 2 was never owned
    group.commit([(0, 5)])
    group.commit([])                    # nothing committed: nothing written
    group.revoke_all()
    ops = [(e["f"], e.get("partitions"), e.get("error")) for e in _lines(out)]
    assert ops == [("assign", [0, 1], None), ("revoke", [1], "lost"), ("commit", None, None),
                   ("revoke", [0], None)]


def test_pacer_spaces_sends_and_does_not_burst_after_a_stall():
    pacer = Pacer(100)
    pacer.sent()
    assert 0 < pacer.delay_s() <= 0.01
    pacer.next -= 5                     # five seconds late
    pacer.sent()
    assert pacer.delay_s() > 0          # the next one an interval later, not 500 at once


def test_group_protocol_settings_in_each_clients_spelling():
    assert group_protocol_settings("confluent-kafka", "consumer") == {"group.protocol": "consumer"}
    assert group_protocol_settings("native", "classic") == {"group_protocol": "classic"}
    assert group_protocol_settings("kafka-python", "classic") == {}
    for client in ("kafka-python", "aiokafka", "kafkajs"):
        with pytest.raises(ValueError, match="classic group protocol only"):
            group_protocol_settings(client, "consumer")
    with pytest.raises(ValueError, match="one of"):
        group_protocol_settings("native", "zookeeper")


def test_stop_counts_the_duration_from_the_workloads_begin():
    from bench.chaos.clients.common import Stop
    stop = Stop(0.05, install=False)
    stop.deadline -= 1                  # the client took a second to construct...
    stop.begin()                        # ...the workload starts now
    assert not stop
    assert stop.wait(5.0)               # returns at the deadline, well before 5 s
    forever = Stop(0, install=False)
    assert not forever.wait(0.01)
    forever.set()
    assert forever


def test_bounded_tells_a_close_that_fails_or_hangs_and_goes_on():
    import threading

    from bench.chaos.clients import common
    out = io.StringIO()
    em = Emitter("c0", out)
    assert common.bounded(lambda: None, 1.0, "close", em)

    def fails():
        raise RuntimeError("broker away")
    assert not common.bounded(fails, 1.0, "close", em)
    release = threading.Event()
    assert not common.bounded(release.wait, 0.05, "hanging close", em)
    release.set()
    assert "hanging close" in common.ABANDONED
    common.ABANDONED.remove("hanging close")
    texts = [(e["kind"], e["text"]) for e in _lines(out)]
    assert texts == [("error", "close: RuntimeError: broker away"),
                     ("log", "hanging close did not return in 0.05 s")]


def test_confluent_delivery_report_errors_are_info_never_fail():
    """librdkafka fails a partition's queue, retries of sent messages included, when the
    partition leaves the metadata (_UNKNOWN_PARTITION, _UNKNOWN_TOPIC) or is purged
    (_PURGE_QUEUE): no report error proves a message was not written (chaos seed 9: a
    send reported _UNKNOWN_PARTITION had been written and was read)."""
    ck = pytest.importorskip("confluent_kafka")
    from bench.chaos.clients.confluent import delivery_report
    codes = (ck.KafkaError._UNKNOWN_PARTITION, ck.KafkaError._UNKNOWN_TOPIC,
             ck.KafkaError._PURGE_QUEUE, ck.KafkaError._PURGE_INFLIGHT,
             ck.KafkaError._MSG_TIMED_OUT, ck.KafkaError.NOT_ENOUGH_REPLICAS)
    out = io.StringIO()
    sends = Sends(Emitter("p0", out))
    report = delivery_report(sends)
    values = [f"p0-{n}".encode() for n in range(len(codes) + 1)]
    for v in values:
        sends.invoke(v)
    report(None, ck.Message(topic="t", value=values[0], partition=2, offset=41))
    for v, code in zip(values[1:], codes):
        report(ck.KafkaError(code), ck.Message(topic="t", value=v))
    ops = [e for e in _lines(out) if e["event"] == "op" and e["type"] != "invoke"]
    assert [(o["type"], o.get("partition"), o.get("offset")) for o in ops[:1]] == [("ok", 2, 41)]
    assert [o["type"] for o in ops[1:]] == ["info"] * len(codes)
    assert [o["error"].split(":")[0] for o in ops[1:]] == [ck.KafkaError(c).name() for c in codes]
    assert sends.outstanding() == 0
