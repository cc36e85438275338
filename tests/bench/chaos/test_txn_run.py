"""The transactional workload's pure parts: its history files and events
(bench.chaos.txn_history), its flags (bench.chaos.options), its printed verdict
(bench.chaos.txn_run) and its worker's command line (bench.chaos.txn_worker). The
workload itself needs the brokers' transactions (issue 28's other branches)."""
from __future__ import annotations

import argparse
import json

import pytest

from bench.chaos import txn_worker
from bench.chaos.options import UsageError, build_parser, check_run_args
from bench.chaos.txn_checker import Txn, check_txns
from bench.chaos.txn_history import (read_txns, read_view, txn_event, txn_from_event,
                                     write_txns, write_view)
from bench.chaos.txn_run import judge_txn, verdict_lines, worker_command

T = "chaos"


def test_txn_events_and_files_round_trip(tmp_path):
    txns = [Txn("p0-0", "p0", "ok", ((T, 1, b"p0-0-0"), (T, 2, b"\x00\xff")),
                ((T, 0, 4, b"x"),), continues=True, start_ns=5, end_ns=9),
            Txn("p0-1", "p0", "info"), Txn("c0-0", "c0", "ok", (), ((T, 1, 0, b"p0-0-0"),))]
    events = [txn_event(t, error="boom" if t.type == "info" else None) for t in txns]
    assert [txn_from_event(json.loads(json.dumps(e))) for e in events] == txns
    assert events[1]["error"] == "boom"
    write_txns(tmp_path / "p0.jsonl", events)
    assert read_txns(tmp_path / "p0.jsonl") == txns
    view = {(T, 0): [(0, b"a"), (3, b"b")], (T, 1): []}
    write_view(tmp_path / "v.jsonl", view)
    assert read_view(tmp_path / "v.jsonl") == view      # the empty partition kept


@pytest.mark.parametrize("event", [
    {"event": "op"}, {"event": "txn", "id": "a", "process": "p", "type": "done",
                      "writes": [], "reads": []},
    {"event": "txn", "id": "a", "process": "p", "type": "ok", "writes": [[T, 0, "%%"]],
     "reads": []},
    {"event": "txn", "id": "a", "process": "p", "type": "ok", "writes": [[T, 0]],
     "reads": []},
    {"event": "txn", "id": "a", "process": "p", "type": "ok"}])
def test_malformed_txn_events_are_refused(event):
    with pytest.raises(ValueError):
        txn_from_event(event)


def test_a_malformed_line_names_its_file_and_line(tmp_path):
    path = tmp_path / "p0.jsonl"
    path.write_text(json.dumps(txn_event(Txn("a", "p", "ok"))) + "\n{\"event\": \"txn\"}\n")
    with pytest.raises(ValueError, match="p0.jsonl:2"):
        read_txns(path)


def _run_args(*argv):
    parser = build_parser(argparse.ArgumentParser())
    return parser.parse_args(["run", "--dir", "/tmp/x", *argv])


def test_txn_workload_flags():
    args = _run_args("--workload", "txn")
    check_run_args(args)
    assert (args.rate, args.txn_writes, args.txn_abort) == (10.0, 3, 0.2)
    args = _run_args()
    check_run_args(args)
    assert args.rate == 200.0 and args.workload == "plain"
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:         # the flag is refused with a line saying how to install it
        with pytest.raises(UsageError, match="not installed"):
            check_run_args(_run_args("--workload", "txn", "--client", "confluent-kafka"))
    else:
        check_run_args(_run_args("--workload", "txn", "--client", "confluent-kafka"))
    for bad in (["--client", "kafka-python"], ["--group"], ["--txn-writes", "0"],
                ["--txn-abort", "1.5"], ["--value-format", "avro"]):
        with pytest.raises(UsageError):
            check_run_args(_run_args("--workload", "txn", *bad))


def test_worker_command_and_its_checks():
    command = worker_command("txn", "p0", "127.0.0.1:1", T, 5.0, 10.0, 3, 0.2, 7,
                             "confluent-kafka")
    assert command[1:3] == ["-m", "bench.chaos.txn_worker"]
    args = txn_worker.parser().parse_args(command[3:])
    assert (args.role, args.client, args.name, args.writes, args.abort, args.seed) == \
        ("txn", "confluent-kafka", "p0", 3, 0.2, 7)
    assert txn_worker.main(["--role", "txn", "--name", "p0", "--bootstrap", "b",
                            "--topic", T, "--writes", "0"]) == 2
    assert txn_worker.main(["--role", "nope"]) == 2


def _meta(**kw):
    return {"producers": 2, "consumers": 1, "txn_writes": 3, "txn_abort": 0.2,
            "profile": "safe", "seed": 1, "duration": 5, "schedule": [], **kw}


def test_verdict_lines_show_counts_anomalies_and_the_verdict():
    t1 = Txn("t1", "p0", "ok", ((T, 0, b"a"),), ((T, 1, 0, b"b"),))
    t2 = Txn("t2", "p1", "ok", ((T, 1, b"b"),), ((T, 0, 0, b"a"),))
    t3 = Txn("t3", "p1", "fail", ((T, 2, b"c"),))
    view = {(T, 0): [(0, b"a")], (T, 1): [(0, b"b")], (T, 2): []}
    s = check_txns([t1, t2, t3], view, {**view, (T, 2): [(0, b"c")]}).summary()
    text = "\n".join(verdict_lines(_meta(), s))
    assert "transactions 3: committed 2, aborted 1, unknown 0" in text
    assert "G1c" in text and "t1 -wr-> t2 -wr-> t1" in text
    assert text.endswith("INVALID: the checker found anomalies")
    s = check_txns([t3], {(T, 2): []}, {(T, 2): [(0, b"c")]}).summary()
    assert verdict_lines(_meta(), s)[-1] == "VALID"


def test_judge_txn_reads_a_runs_files(tmp_path, capsys):
    (tmp_path / "txns").mkdir()
    write_txns(tmp_path / "txns" / "p0.jsonl",
               [txn_event(Txn("p0-0", "p0", "ok", ((T, 0, b"a"), (T, 1, b"b"))))])
    write_view(tmp_path / "final-uncommitted.jsonl", {(T, 0): [(0, b"a")], (T, 1): []})
    write_view(tmp_path / "final-committed.jsonl", {(T, 0): [(0, b"a")], (T, 1): []})
    assert judge_txn(tmp_path, _meta()) == 1
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["lost"] == 1 and verdict["torn"] == 1 and not verdict["valid"]
    assert "INVALID" in capsys.readouterr().out


class Scripted:
    """A client double for the outcome rules of one_transaction: ``fail_at`` names the
    call that raises (with ``error``), the calls are recorded."""
    name = "scripted"

    def __init__(self, fail_at=None, error=None, abort_error=None):
        self.calls, self.fail_at, self.error, self.abort_error = [], fail_at, error, \
            abort_error
        self.em = self
        self.renewed = 0

    def client(self, kind, text):
        self.calls.append(("event", kind))

    def _call(self, name, *a):
        self.calls.append((name, *a))
        if name == "abort" and self.abort_error is not None:
            raise self.abort_error
        if name == self.fail_at:
            raise self.error

    def begin(self):
        self._call("begin")

    def send(self, topic, partition, value):
        self._call("send", partition)

    def send_offsets(self, offsets):
        self._call("send_offsets", dict(offsets))

    def commit(self):
        self._call("commit")

    def abort(self):
        self._call("abort")

    def fatal(self, e):
        return "fenced" in str(e)

    def new_producer(self):
        self.renewed += 1


WRITES = ((T, 0, b"v0"), (T, 2, b"v1"))
READS = ((T, 1, 4, b"x"), (T, 1, 5, b"y"))


def test_one_transaction_outcomes():
    c = Scripted()
    assert txn_worker.one_transaction(c, "t", READS, WRITES, abort=False) == \
        ("ok", None, False)
    assert [x[0] for x in c.calls] == ["begin", "send", "send", "send_offsets", "commit"]
    assert ("send_offsets", {(T, 1): 6}) in c.calls          # the next offset to read
    c = Scripted()
    assert txn_worker.one_transaction(c, "t", (), WRITES, abort=True)[0] == "fail"
    assert [x[0] for x in c.calls] == ["begin", "send", "send", "abort"]
    # An error before the commit: certainly not committed, and aborted.
    c = Scripted(fail_at="send", error=RuntimeError("broker gone"))
    outcome, error, renewed = txn_worker.one_transaction(c, "t", READS, WRITES, False)
    assert (outcome, renewed) == ("fail", False) and "broker gone" in error
    assert c.calls[-1] == ("abort",)
    # The commit raised: it may have happened.
    c = Scripted(fail_at="commit", error=TimeoutError("no answer"))
    assert txn_worker.one_transaction(c, "t", READS, WRITES, False)[0] == "info"
    # Fenced: a new producer, the outcome still by where it failed.
    c = Scripted(fail_at="commit", error=RuntimeError("fenced"))
    assert txn_worker.one_transaction(c, "t", READS, WRITES, False) [0::2] == \
        ("info", True) and c.renewed == 1
    c = Scripted(fail_at="send", error=RuntimeError("x"), abort_error=RuntimeError("fenced"))
    outcome, error, renewed = txn_worker.one_transaction(c, "t", READS, WRITES, False)
    assert (outcome, renewed, c.renewed) == ("fail", True, 1) and "abort" in error


def test_a_txn_sweep_sums_transactions_and_anomalies(capsys):
    from bench.chaos.sweep import _workload_flags
    from bench.chaos.txn_run import print_txn_summary, summarize_txn, sweep_line
    t1 = Txn("t1", "p0", "ok", ((T, 0, b"a"),), ((T, 1, 0, b"b"),))
    t2 = Txn("t2", "p1", "ok", ((T, 1, b"b"),), ((T, 0, 0, b"a"),))
    view = {(T, 0): [(0, b"a")], (T, 1): [(0, b"b")]}
    bad = check_txns([t1, t2], view, view).summary()
    alone = Txn("t1", "p0", "ok", ((T, 0, b"a"),))
    good = check_txns([alone], {(T, 0): [(0, b"a")]}, {(T, 0): [(0, b"a")]}).summary()
    rows = [{"seed": 1, "verdict": bad}, {"seed": 2, "verdict": good},
            {"seed": 3, "verdict": None}]
    s = summarize_txn(rows)
    assert good["valid"]
    assert (s["runs"], s["checked"], s["committed"], s["G1c"]) == (3, 2, 3, 1)
    assert s["invalid"] == [1] and s["failed_runs"] == [3]
    assert s["runs_with"]["G1c"] == [1]
    assert sweep_line(bad).endswith(", G1c 1") and "committed 2" in sweep_line(bad)
    print_txn_summary("safe", s)
    out = capsys.readouterr().out
    assert "runs with G1c: [1]" in out and "invalid runs: [1]" in out
    args = argparse.Namespace(rate=None, workload="txn", txn_writes=2, txn_abort=None)
    assert _workload_flags(args) == ["--workload", "txn", "--txn-writes", "2"]
    args = argparse.Namespace(rate=5.0, workload="plain")
    assert _workload_flags(args) == ["--rate", "5.0"]


def test_a_hanging_transaction_is_named_in_the_verdict():
    s = check_txns([], {(T, 0): []}, {(T, 0): []}).summary()
    lines = verdict_lines(_meta(last_stable_offsets={"0": 3}, high_watermarks={"0": 9}), s)
    assert any("partition 0 LSO 3 < HW 9" in line for line in lines)


def test_an_invoke_without_completion_becomes_info():
    from bench.chaos.txn_history import completed
    a = txn_event(Txn("p0-0", "p0", "info", ((T, 0, b"a"),)))
    events = [{**a, "type": "invoke"}, {**a, "type": "ok"},
              {**txn_event(Txn("p0-1", "p0", "info", ((T, 1, b"b"),))), "type": "invoke"}]
    out = completed(events)
    assert [(e["id"], e["type"]) for e in out] == [("p0-0", "ok"), ("p0-1", "info")]
    assert "never completed" in out[1]["error"]
    assert [txn_from_event(e).type for e in out] == ["ok", "info"]
    with pytest.raises(ValueError):
        completed([{**a, "type": "done"}])


@pytest.mark.process
def test_a_worker_stream_keeps_txn_events_and_counts_them(tmp_path):
    import sys
    from bench.chaos.clients import WorkerStream
    a = txn_event(Txn("p0-0", "p0", "ok", ((T, 0, b"a"),), ((T, 1, 0, b"z"),)))
    b = txn_event(Txn("p0-1", "p0", "fail", ((T, 0, b"b"),)))
    lines = [{**a, "type": "invoke"}, a, {**b, "type": "invoke"}, b]
    script = "import sys\n" + "".join(f"print({json.dumps(json.dumps(e))})\n" for e in lines)
    with WorkerStream([sys.executable, "-c", script], log_path=tmp_path / "w.log") as w:
        assert w.wait(30) == 0
    assert [e["type"] for e in w.txn_events] == ["invoke", "ok", "invoke", "fail"]
    assert (w.acked, w.failed, w.unknown, w.read) == (1, 1, 0, 1)


@pytest.mark.process
def test_a_readers_polls_are_not_counted_as_transactions(tmp_path):
    import sys
    from bench.chaos.clients import WorkerStream
    poll = txn_event(Txn("c0-0", "c0", "ok", (), ((T, 1, 0, b"z"), (T, 1, 1, b"y"))))
    script = f"print({json.dumps(json.dumps(poll))})\n"
    with WorkerStream([sys.executable, "-c", script], log_path=tmp_path / "w.log") as w:
        assert w.wait(30) == 0
    assert (w.acked, w.read) == (0, 2)
