"""The run's JSON-lines protocol (profiler_core/spec/events.py): every record written and read back
the same, the lines on the wire as the readers have always read them, a malformed or unknown record
refused with a typed error, and no record written or read anywhere but through spec/events.py."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from profiler_core.spec import events
from profiler_core.spec.events import (
    DoneEvent,
    ErrorEvent,
    EventFormatError,
    LauncherNote,
    ProgressEvent,
    WorkerEvent,
)
from profiler_core.spec.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
EVENTS_MODULE = ROOT / "profiler_core" / "spec" / "events.py"
# Where the protocol is written or read: no JSON of their own (spec/events.py's to_line and parse).
PROTOCOL_MODULES = ("profiler_core/cli/parser.py", "profiler_core/cli/main.py",
                    "profiler_core/cli/ddp.py", "profiler_core/orchestration/launcher.py",
                    "profiler_core/orchestration/child.py", "profiler_core/orchestration/runjob.py",
                    "profiler_core/orchestration/repeats.py", "profiler_core/sweep/runner.py")
# The warm worker's module also reads and writes its run request (a line of its own, on stdin).
REQUEST_FUNCTIONS = {"profiler_core/engine/serve.py": {"to_line", "read_request"}}

EVERY_EVENT = [
    ProgressEvent("timed trials", 2, 5, 0.4, "trial 2 of 5"),
    ProgressEvent("done", 5, 5, 1, ""),
    DoneEvent("runs/seed-fp32"),
    ErrorEvent("ConfigError", "replays", "--replays: too many", "lower it"),
    ErrorEvent("CudaFaultError", None, "CUDA error: an illegal memory access", ""),
    LauncherNote("stopping", "no result after 0.5 s: stopping the worker"),
    LauncherNote("fallback", "the warm worker exited; the run starts in a fresh process"),
    WorkerEvent("ready", pid=4242, device="cuda:0", warm_s=3.125),
    WorkerEvent("accepted"),
]


@pytest.mark.parametrize("event", EVERY_EVENT, ids=lambda event: type(event).__name__)
def test_every_event_reads_back_as_it_was_written(event):
    line = event.to_line()
    assert "\n" not in line
    assert events.parse(line) == event
    assert events.parse(f"  {line}\n") == event
    assert events.from_record(json.loads(line)) == event


def test_every_kind_of_record_is_tried():
    assert {type(event) for event in EVERY_EVENT} == set(events.EVENT_CLASSES)


def test_the_lines_are_the_records_the_readers_have_always_read():
    """The wire is unchanged: ``event`` first, the fields in their order, the fraction rounded,
    a worker's absent fields left out, an error's missing field null."""
    assert ProgressEvent.of(Progress("capture", 1, 3, "step 1")).to_line() == (
        '{"event": "progress", "phase": "capture", "done": 1, "total": 3, "fraction": 0.3333, '
        '"message": "step 1"}')
    assert DoneEvent("out").to_record() == {"event": "done", "out": "out"}
    assert ErrorEvent("TimeLimit", None, "no result", "").to_record() == {
        "event": "error", "kind": "TimeLimit", "field": None, "message": "no result", "hint": ""}
    assert WorkerEvent("accepted").to_line() == '{"event": "worker", "state": "accepted"}'
    assert list(WorkerEvent("ready", pid=1, device="cpu", warm_s=0.5).to_record()) == [
        "event", "state", "pid", "device", "warm_s"]
    assert LauncherNote("stopping", "m").to_record() == {"event": "launcher", "kind": "stopping",
                                                         "message": "m"}


@pytest.mark.parametrize("line, says", [
    ("warming up...", "not a JSON line"),
    ("", "not a JSON line"),
    ('{"event": "progress", "phase": "x"', "not a JSON line"),
    ("[" * 100_000, "not a JSON line"),
    ('["progress"]', "a record is a JSON object"),
    ('{"phase": "timed trials"}', "unknown record kind None"),
    ('{"event": "hello"}', "unknown record kind 'hello'"),
    ('{"event": 3}', "unknown record kind 3"),
    ('{"event": "progress", "phase": "watching"}', "lacks 'done', 'total', 'fraction', 'message'"),
    ('{"event": "done", "out": "x", "rank": 0}', "has no field 'rank'"),
    ('{"event": "done", "out": 7}', "DoneEvent.out must be str, not int"),
    ('{"event": "progress", "phase": "p", "done": true, "total": 4, "fraction": 0.5, '
     '"message": ""}', "ProgressEvent.done must be int, not bool"),
    ('{"event": "progress", "phase": "p", "done": 1, "total": 4, "fraction": "half", '
     '"message": ""}', "ProgressEvent.fraction must be int or float, not str"),
    ('{"event": "progress", "phase": "p", "done": 1, "total": 4, "fraction": NaN, '
     '"message": ""}', "ProgressEvent.fraction must be int or float, not float nan"),
    ('{"event": "progress", "phase": "p", "done": 1, "total": 4, "fraction": 1.5, '
     '"message": ""}', "fraction must be from 0 to 1"),
    ('{"event": "error", "kind": "ConfigError", "field": 3, "message": "m", "hint": ""}',
     "ErrorEvent.field must be str or null, not int"),
    ('{"event": "launcher", "kind": "restarting", "message": "m"}',
     "LauncherNote.kind must be one of stopping, fallback"),
    ('{"event": "worker", "state": "busy"}', "WorkerEvent.state must be one of ready, accepted"),
])
def test_a_line_that_is_not_a_record_is_refused_with_a_typed_error(line, says):
    with pytest.raises(EventFormatError) as refused:
        events.parse(line)
    assert says in refused.value.message
    assert isinstance(refused.value, ValueError) and refused.value.hint
    assert refused.value.hint in str(refused.value)


def test_an_event_is_checked_when_it_is_made_too():
    with pytest.raises(EventFormatError, match="ProgressEvent.total must be int"):
        ProgressEvent("p", 1, 2.0, 0.5, "")  # type: ignore[arg-type]
    with pytest.raises(EventFormatError, match="must be one of"):
        LauncherNote("paused", "")


# ----------------------------------------------------------------------------- one writer, one reader

def _python_files() -> list[Path]:
    return [path for package in ("profiler_core", "dashboard")
            for path in sorted((ROOT / package).rglob("*.py")) if path != EVENTS_MODULE]


def _is_json_call(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == name and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "json")


def _builds_a_record(node: ast.AST) -> bool:
    """A dict literal, or a ``dict(...)`` call, with the protocol's ``event`` key."""
    if isinstance(node, ast.Dict):
        return any(isinstance(key, ast.Constant) and key.value == events.EVENT_KEY
                   for key in node.keys)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
            and any(keyword.arg == events.EVENT_KEY for keyword in node.keywords))


def test_no_record_of_the_protocol_is_built_outside_spec_events():
    """No dict with the protocol's ``event`` key is made anywhere in the package or the
    dashboard (to be dumped, or compared with a record read) but in spec/events.py."""
    found = [f"{path.relative_to(ROOT)}:{node.lineno}"
             for path in _python_files()
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if _builds_a_record(node)]
    assert not found, "records of the run's protocol built by hand (use spec/events.py): " + \
        ", ".join(found)


def test_the_protocols_writers_and_readers_use_no_json_of_their_own():
    """Where records are written or read, ``json.dumps(`` and ``json.loads(`` appear only in the
    warm worker's run request (a line of its own on stdin), never for a record."""
    found = []
    for relative in (*PROTOCOL_MODULES, *REQUEST_FUNCTIONS):
        tree = ast.parse((ROOT / relative).read_text(encoding="utf-8"))
        allowed: set[int] = set()
        for function in ast.walk(tree):
            if (isinstance(function, ast.FunctionDef)
                    and function.name in REQUEST_FUNCTIONS.get(relative, set())):
                allowed |= {id(node) for node in ast.walk(function)}
        found += [f"{relative}:{node.lineno}" for node in ast.walk(tree)
                  if (_is_json_call(node, "dumps") or _is_json_call(node, "loads"))
                  and id(node) not in allowed]
    assert not found, "JSON written or read by hand where records are (use spec/events.py): " + \
        ", ".join(found)


def test_the_check_would_see_a_record_built_by_hand():
    """The two checks above flag what they are for (so that they cannot pass by missing it)."""
    written = ast.parse('stream.write(json.dumps({"event": "done", "out": out}) + "\\n")')
    assert any(_builds_a_record(node) for node in ast.walk(written))
    assert any(_is_json_call(node, "dumps") for node in ast.walk(written))
    merged = ast.parse('json.dumps(dict(event="worker", **record))')
    assert any(_builds_a_record(node) for node in ast.walk(merged))
    summary = ast.parse('json.dumps({"tool": "profiler", "kind": "run"}, indent=1)')
    assert not any(_builds_a_record(node) for node in ast.walk(summary))


def test_the_launcher_uses_run_processes_public_interface_only():
    """Outside ``RunProcess`` itself, launcher.py reads no private member of another object."""
    tree = ast.parse((ROOT / "profiler_core/orchestration/launcher.py").read_text(encoding="utf-8"))
    inside = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "RunProcess":
            inside = {id(child) for child in ast.walk(node)}
    reached = [f"launcher.py:{node.lineno} {ast.unparse(node)}" for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr.startswith("_")
               and not node.attr.startswith("__") and id(node) not in inside
               and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))]
    assert not reached, reached
