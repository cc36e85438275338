"""The narration of what a producer saw (``bench.teach.narrate``), a pure core: error
kinds as clients name them, tallies since a mark, cumulative retries, the end lines."""
from __future__ import annotations

from bench.chaos.checker import Op
from bench.teach import narrate


def test_an_error_is_named_as_its_client_names_it():
    assert narrate.kind('KafkaError{code=_MSG_TIMED_OUT,val=-192,str="Local: x"}') \
        == "_MSG_TIMED_OUT"
    assert narrate.kind("NOT_ENOUGH_REPLICAS: Messages are rejected") == "NOT_ENOUGH_REPLICAS"
    assert narrate.kind("KafkaTimeoutError: Batch expired") == "KafkaTimeoutError"
    assert narrate.kind("KafkaJSNumberOfRetriesExceeded") == "KafkaJSNumberOfRetriesExceeded"
    assert narrate.kind("Local: Broker transport failure") == "Local"
    assert narrate.kind(None) == narrate.kind("") == "error"


def _send(type_, n, error=None):
    return Op("w", type_, "send", n, f"w-{n}".encode(), 0, n if type_ == "ok" else -1,
              error=error)


def test_a_step_tallies_outcomes_errors_and_the_clients_retries():
    ops = [_send("invoke", 1), _send("ok", 1), _send("ok", 2),
           _send("fail", 3, "NOT_ENOUGH_REPLICAS: x"), _send("info", 4, "_MSG_TIMED_OUT: y"),
           _send("info", 5, "_MSG_TIMED_OUT: y")]
    events = [{"kind": "error", "text": "_TRANSPORT: broker down"},
              {"kind": "retry", "count": 7}, {"kind": "retry", "count": 12},
              {"kind": "log", "text": "whatever"}]
    s = narrate.seen(ops, events, retries_before=3)
    assert (s.acknowledged, s.refused, s.unknown) == (2, 1, 2)
    assert s.errors == {"NOT_ENOUGH_REPLICAS": 1, "_MSG_TIMED_OUT": 2}
    assert s.reported == {"_TRANSPORT": 1} and s.retries == 12
    lines = narrate.step_lines("w", "confluent-kafka 2.16.1", s)
    assert len(lines) == 2 and "2 delivery reports ok" in lines[0]
    assert "_MSG_TIMED_OUT x2" in lines[1] and "retries so far: 12" in lines[1]
    quiet = narrate.step_lines("w", "native", narrate.seen([_send("ok", 9)], []))
    assert len(quiet) == 1 and "1 delivery reports ok" in quiet[0]
    assert "awaiting" not in quiet[0]
    assert narrate.awaiting([_send("invoke", 6), _send("invoke", 7), _send("ok", 6)]) == 1
    queued = narrate.step_lines("w", "kafka-python", s, waiting=120)
    assert "; 120 sends awaiting a report" in queued[0]


def test_the_end_names_the_lost_and_what_the_client_reported():
    lost = [(b"w-3", 0, 3), (b"w-4", 0, 4)]
    b = narrate.Belief("w", "t", 0, 10, lost, 1, 2, 0, narrate.seen(
        [_send("fail", 3, "NOT_ENOUGH_REPLICAS: x")], []))
    lines = narrate.end_lines("kafkajs 2.2.4", [b])
    assert lines[0] == "what kafkajs 2.2.4 believed was written against what survived:"
    assert "acknowledged 10, of which lost 2 (e.g. w-3@3, w-4@4); refused 1, unknown 2" \
        in lines[1]
    assert "NOT_ENOUGH_REPLICAS x1" in lines[2]
