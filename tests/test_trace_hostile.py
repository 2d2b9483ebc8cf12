"""Hostile trace files for ``python -m profiler_core trace-stats`` (issue 9), all in temporary
folders: pipes, devices, bombs, deep or overflowing JSON, absurd events and names. Each is refused
with exit 2 and one line on stderr naming what is wrong (never a hang, a traceback or a read until
memory runs out), and what trace-stats writes cannot run as a spreadsheet formula."""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from profiler_core.analysis import trace, trace_reading
from profiler_core.analysis.kernel_names import short_kernel_name
from profiler_core.analysis.timeline import TIMELINE_MAX_THREADS, iteration_timeline
from profiler_core.analysis.trace import analyse_trace
from profiler_core.analysis.trace_reading import load_trace
from profiler_core.cli.main import main
from profiler_core.spec.errors import RunFormatError
from profiler_core.storage.trace_tables import write_tables

KERNEL = {"ph": "X", "cat": "kernel", "name": "void foo<float>(float*)", "pid": 0, "tid": 7,
          "ts": 20, "dur": 30, "args": {"correlation": 1}}
LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
          "ts": 10, "dur": 5, "args": {"correlation": 1}}


def _trace_file(tmp_path: Path, events: list, name: str = "trace.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _refused(capsys, argv: list[str], *fragments: str) -> str:
    """Run the command; it must exit 2 with one line on stderr holding every fragment."""
    code = main(argv)
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == 2, (code, captured.err)
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# ----------------------------------------------------------------------------- what is read


def _fifo(tmp_path):
    path = tmp_path / "fifo.json"
    os.mkfifo(path)
    return path, "is a named pipe, not a regular file"


def _link_to(target: str):
    def build(tmp_path):
        path = tmp_path / "trace.json"
        path.symlink_to(target)
        return path, "is a device, not a regular file"
    return build


def _folder(tmp_path):
    path = tmp_path / "folder.json"
    path.mkdir()
    return path, "is a folder, not a regular file"


def _link_to_fifo(tmp_path):
    fifo, _ = _fifo(tmp_path)
    path = tmp_path / "link.json"
    path.symlink_to(fifo)
    return path, "is a named pipe"


def _dangling_link(tmp_path):
    path = tmp_path / "dangling.json"
    path.symlink_to(tmp_path / "absent")
    return path, "cannot read trace"


@pytest.mark.parametrize("build", [_fifo, _link_to("/dev/zero"), _link_to("/dev/urandom"),
                                   _link_to("/dev/null"), _folder, _link_to_fifo, _dangling_link],
                         ids=["fifo", "zero", "urandom", "null", "folder", "link-fifo", "dangling"])
def test_only_regular_files_are_read_and_nothing_blocks(tmp_path, capsys, build):
    path, message = build(tmp_path)
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(
        line=_refused(capsys, ["trace-stats", str(path)], message, path.name)), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # blocked on the pipe: release it, then fail
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"trace-stats blocked on {path.name}")
    assert "line" in outcome


def test_a_link_to_a_regular_file_is_read(tmp_path, capsys):
    real = _trace_file(tmp_path, [LAUNCH, KERNEL])
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert main(["trace-stats", str(link)]) == 0
    assert "Iterations: 1" in capsys.readouterr().out


def test_the_size_cap_names_itself_and_how_to_raise_it(tmp_path, capsys, monkeypatch):
    path = _trace_file(tmp_path, [LAUNCH, KERNEL] * 20_000)  # about 3 MB
    monkeypatch.setenv(trace_reading.MAX_TRACE_MB_ENV, "1")
    _refused(capsys, ["trace-stats", str(path)], "over the 1 MiB limit for a trace",
             f"set {trace_reading.MAX_TRACE_MB_ENV} to a larger number of MiB")
    monkeypatch.setenv(trace_reading.MAX_TRACE_MB_ENV, "8")
    assert main(["trace-stats", str(path)]) == 0
    capsys.readouterr()
    for bad in ("abc", "0", "-5", "nan", "inf", "1e400"):
        monkeypatch.setenv(trace_reading.MAX_TRACE_MB_ENV, bad)
        _refused(capsys, ["trace-stats", str(path)], f"{trace_reading.MAX_TRACE_MB_ENV} is '{bad}'",
                 "not a positive number of MiB")
    monkeypatch.delenv(trace_reading.MAX_TRACE_MB_ENV)
    assert trace_reading.max_trace_bytes() == trace_reading.MAX_TRACE_MB * 2**20 == 512 * 2**20


def _gzip_bomb(inflated_mib: int) -> bytes:
    """A gzip inflating to ``inflated_mib`` MiB of JSON whitespace, cheaply: one compressed MiB
    repeated as members of a multi-member gzip (about 1 kB per MiB)."""
    one_mib = gzip.compress(b" " * 2**20, compresslevel=9)
    return (gzip.compress(b'{"traceEvents": [') + one_mib * inflated_mib
            + gzip.compress(b"]}"))


def test_a_gzip_bomb_is_inflated_only_up_to_the_cap(tmp_path, capsys, monkeypatch):
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(_gzip_bomb(3 * 1024))  # 3 GiB inflated, 3 MB on disk
    assert path.stat().st_size < 4 * 2**20
    monkeypatch.setenv(trace_reading.MAX_TRACE_MB_ENV, "16")
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(RunFormatError, match="inflates to over the 16 MiB limit") as caught:
            load_trace(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 5
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB held while inflating"
    assert trace_reading.MAX_TRACE_MB_ENV in caught.value.hint
    # The same bomb under the default cap, by the command: refused at 512 MiB, not 3 GiB.
    monkeypatch.delenv(trace_reading.MAX_TRACE_MB_ENV)
    _refused(capsys, ["trace-stats", str(path)], "inflates to over the 512 MiB limit")


def test_a_bomb_under_the_cap_still_loads(tmp_path):
    path = tmp_path / "small.json.gz"
    path.write_bytes(_gzip_bomb(2))
    loaded = load_trace(path)
    assert loaded.entries == 0 and loaded.events.empty


# ----------------------------------------------------------------------------- what is parsed


def _write(content: bytes | str):
    def build(tmp_path):
        path = tmp_path / "trace.json"
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path
    return build


def _event(**fields) -> str:
    event = dict(LAUNCH, **{k: v for k, v in fields.items() if not isinstance(v, str)})
    text = json.dumps({"traceEvents": [event, KERNEL]})
    for key, raw in fields.items():  # raw JSON text, e.g. a 400-digit number or NaN
        if isinstance(raw, str):
            text = text.replace(f'"{key}": {json.dumps(LAUNCH[key])}', f'"{key}": {raw}', 1)
    return text


PARSE_FAILURES = {
    "deep-array": (_write('{"traceEvents": ' + "[" * 100_000 + "]" * 100_000 + "}"),
                   "nests its JSON too deeply"),
    "deep-object": (_write('{"traceEvents": [], "x": ' + '{"a":' * 50_000 + "1" + "}" * 50_000
                           + "}"), "nests its JSON too deeply"),
    "ts-400-zeros": (_write(_event(ts="1" + "0" * 400)), "has an out-of-range 'ts'"),
    "dur-400-zeros": (_write(_event(dur="1" + "0" * 400)), "has an out-of-range 'dur'"),
    "ts-5000-digits": (_write(_event(ts="1" + "0" * 5000)), "holds a number too long to read"),
    "ts-1e400": (_write(_event(ts="1e400")), "has a non-finite 'ts': inf"),
    "ts-NaN": (_write(_event(ts="NaN")), "has a non-finite 'ts': nan"),
    "dur-Infinity": (_write(_event(dur="Infinity")), "has a non-finite 'dur': inf"),
    "ts-string-inf": (_write(_event(ts='"-inf"')), "has a non-finite 'ts': -inf"),
    "ts-1e300": (_write(_event(ts="1e300")), "has an out-of-range 'ts': 1e+300"),
    "dur-negative": (_write(_event(dur="-10")), "has a negative duration: 'dur' is -10"),
    "dur-list": (_write(_event(dur="[1, 2]")), "has a non-numeric 'dur': a JSON list"),
    "ts-object": (_write(_event(ts='{"a": 1}')), "has a non-numeric 'ts': a JSON object"),
    "truncated": (_write('{"traceEvents": ['), "is not valid (gzipped) JSON"),
    "not-utf8": (_write(b'{"traceEvents": ["\xff"]}'), "is not valid (gzipped) JSON"),
    "bad-gzip": (_write(b"\x1f\x8b\x08\x00 broken"), "is not valid gzip"),
    "truncated-gzip": (_write(gzip.compress(b'{"traceEvents": []}')[:-12]), "is not valid gzip"),
    "no-events": (_write('{"traceEvents": []}'), "holds no events to analyse"),
    "only-metadata": (_write(json.dumps({"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "i", "name": "mark", "ts": 3, "pid": 1, "tid": 1}, "junk", 42, None]})),
        "holds no events to analyse"),
    "events-not-a-list": (_write('{"traceEvents": {"ph": "X"}}'), "has no 'traceEvents' list"),
    "bare-list": (_write("[]"), "has no 'traceEvents' list"),
}


@pytest.mark.parametrize("name", PARSE_FAILURES)
def test_every_parse_failure_is_a_one_line_format_error(tmp_path, capsys, name):
    build, message = PARSE_FAILURES[name]
    path = build(tmp_path)
    line = _refused(capsys, ["trace-stats", str(path)], message)
    assert len(line) < 400


def test_a_refused_event_is_named_by_its_index_and_name():
    events = [dict(LAUNCH), dict(KERNEL, dur=-10, name="evil_kernel")]
    with pytest.raises(RunFormatError) as caught:
        analyse_trace({"traceEvents": events})
    assert caught.value.message == ("trace event #1 ('evil_kernel') has a negative duration: "
                                    "'dur' is -10")
    assert "edited by hand" in caught.value.hint


def test_a_zero_duration_and_a_missing_one_are_still_fine():
    events = [dict(LAUNCH), dict(KERNEL, dur=0), {k: v for k, v in KERNEL.items() if k != "dur"}]
    assert analyse_trace({"traceEvents": events}).launch_split["kernels"].tolist() == [2]


ECHOED = ["evil\nerror: all is fine", "carriage\rreturn", "escape\x1b[2J", "sep\u2028arator",
          "nul\x00byte", "lone\udcffsurrogate", "x" * 10_000]


@pytest.mark.parametrize("name", ECHOED, ids=["newline", "cr", "ansi", "u2028", "nul",
                                              "surrogate", "long"])
def test_echoed_text_never_breaks_the_one_line_message(tmp_path, capsys, name):
    events = [dict(LAUNCH), dict(KERNEL, name=name, ts="soon")]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))  # ensure_ascii: the JSON is plain ASCII
    line = _refused(capsys, ["trace-stats", str(path)], "trace event #1", "non-numeric 'ts'")
    assert line.isprintable() and len(line) < 400


def test_a_file_name_with_a_line_break_stays_on_one_line(tmp_path, capsys):
    path = tmp_path / "two\nlines.json"
    path.write_text('{"traceEvents": []}')
    _refused(capsys, ["trace-stats", str(path)], "two\\nlines.json holds no events")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(hs.fixed_dictionaries({
    "ph": hs.sampled_from(["X", "X", "X", "i", "M", None]),
    "cat": hs.sampled_from(["kernel", "cuda_runtime", "gpu_memset", "user_annotation", "cpu_op",
                            "", None, 7]),
    "name": hs.one_of(hs.sampled_from(["cudaLaunchKernel", "cudaGraphLaunch", "ProfilerStep#1",
                                       "cutlass::Kernel2<cutlass::Kernel<x>>"]), hs.text(),
                      hs.integers(), hs.none()),
    "ts": hs.one_of(hs.floats(allow_nan=True, allow_infinity=True), hs.integers(-2**70, 2**70),
                    hs.text(max_size=5), hs.none(), hs.lists(hs.integers(), max_size=2)),
    "dur": hs.one_of(hs.floats(-1e3, 1e20), hs.integers(-5, 10**30), hs.none(),
                     hs.text(max_size=3)),
    "args": hs.one_of(hs.fixed_dictionaries({"correlation": hs.one_of(
        hs.integers(-2**70, 2**70), hs.floats(), hs.text(max_size=3), hs.none())}), hs.none(),
        hs.integers()),
}), max_size=12))
def test_property_any_event_list_is_analysed_or_refused_as_a_format_error(events):
    try:
        analysis = analyse_trace({"traceEvents": events})
    except RunFormatError as error:
        assert str(error).isprintable() and error.hint
        return
    assert not analysis.launch_split[["span_us", "gpu_busy_us"]].isin([float("inf")]).any().any()
    assert (analysis.kernels["total_us"] >= 0).all()


# ----------------------------------------------------------------------------- kernel names


@pytest.mark.parametrize("name, short", [
    ("Kernel<" * 1_000, "Kernel"),  # 7,000 characters: RecursionError before the fix
    ("Kernel2<" * 375, "Kernel2"),  # 3,000 characters
    ("void cutlass::Kernel2<" * 300 + "inner_gemm" + ">" * 300 + "(Params)", "Kernel2"),
    ("Kernel<" * 100_000, "Kernel"),
    ("<" * 3_000, "<" * 57 + "..."),
    (">)" * 3_000 + "name", ">)" * 28 + ">..."),
])
def test_deeply_nested_wrapper_names_neither_recurse_nor_stall(name, short):
    started = time.perf_counter()
    assert short_kernel_name(name) == short  # wrappers looked through 8 deep at most
    assert time.perf_counter() - started < 0.2


def test_long_real_looking_names_are_shortened_correctly():
    arguments = ", ".join(f"cute::C<{i}>" for i in range(2_000))  # a 20,000-character name
    name = (f"void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<{arguments}>>"
            f"(cutlass::gemm::kernel::GemmUniversal<{arguments}>::Params)")
    assert len(name) > 20_000
    assert short_kernel_name(name) == "GemmUniversal"
    assert short_kernel_name(f"void at::native::reduce_kernel<{arguments}>(int)") == "reduce_kernel"
    assert short_kernel_name("cutlass::Kernel2<cutlass::Kernel<sm90_gemm>>(x)") == "sm90_gemm"
    assert short_kernel_name("k" * 100) == "k" * 57 + "..."


def test_unprintable_characters_of_a_kernel_name_are_escaped_in_the_report(tmp_path, capsys):
    path = _trace_file(tmp_path, [LAUNCH, dict(KERNEL, name="evil\x1b[31m\nkernel<int>()")])
    assert main(["trace-stats", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "evil\\x1b[31m\\nkernel" in printed and "\x1b" not in printed


# ----------------------------------------------------------------------------- tables written


FORMULAS = ["=cmd|' /C calc'!A0", "+1+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0",
            "@SUM(1+1)*cmd|' /C calc'!A0", "\t=1+1", "\r=1+1"]


def test_trace_stats_tables_cannot_run_as_spreadsheet_formulas(tmp_path, capsys):
    events = [LAUNCH] + [dict(KERNEL, name=name, ts=20 + 40 * i, dur=10 + i)
                         for i, name in enumerate(FORMULAS)]
    path = _trace_file(tmp_path, events)
    assert main(["trace-stats", str(path), "--out", str(tmp_path / "out")]) == 0
    data = (tmp_path / "out" / "kernels.csv").read_bytes()
    kernels = pd.read_csv(io.BytesIO(data), keep_default_na=False)
    assert sorted(kernels["kernel_full"]) == sorted("'" + name for name in FORMULAS)
    for column in ("kernel", "kernel_full"):
        assert not kernels[column].str.startswith(("=", "+", "-", "@", "\t", "\r")).any()
    assert kernels["total_us"].sum() == sum(10 + i for i in range(len(FORMULAS)))
    assert b'"\r=1+1' not in data and b"'\r=1+1" in data  # quoted, the line break inside


def test_negative_numbers_in_tables_stay_numbers(tmp_path):
    # the CPU runs ahead of a clipped GPU window: a real negative number in a numeric column
    analysis = analyse_trace({"traceEvents": [dict(LAUNCH), dict(KERNEL)]})
    split = analysis.launch_split.assign(cpu_other_us=-3.5)
    analysis = trace.TraceAnalysis(analysis.mode, split, analysis.kernels,
                                   analysis.iteration_source, analysis.launch_api_names,
                                   analysis.gpu_event_count)
    written = write_tables(analysis, tmp_path)
    assert pd.read_csv(written[0])["cpu_other_us"].tolist() == [-3.5]


def test_an_unwritable_out_folder_is_a_one_line_error(tmp_path, capsys):
    path = _trace_file(tmp_path, [LAUNCH, KERNEL])
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    _refused(capsys, ["trace-stats", str(path), "--out", str(blocker / "sub")],
             "--out: cannot write the tables into", "pick a folder you can write to")
    assert blocker.read_text() == "not a folder"


# ----------------------------------------------------------------------------- what is parsed: limits
# Issue 18: a small gzip of tiny events, or of step markers, or of thousands of long names, cost
# gigabytes and minutes (the events, not the bytes); a huge PROFILER_CORE_MAX_TRACE_MB became a
# read buffer of that size; a name holding the JSON escape "\ud800" failed in pyarrow.

REPO = Path(__file__).resolve().parent.parent
TINY_EVENT = b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1}'


def _repeated_gzip(path: Path, event: bytes, count: int, block: int = 10_000) -> Path:
    """A gzip of a trace holding ``count`` copies of ``event``, built cheaply: one compressed
    block of events repeated as members of a multi-member gzip."""
    members = [gzip.compress(b'{"traceEvents":[')]
    one_block = gzip.compress((event + b",") * block, compresslevel=9)
    members += [one_block] * ((count - 1) // block)
    members.append(gzip.compress((event + b",") * ((count - 1) % block) + event + b"]}"))
    path.write_bytes(b"".join(members))
    return path


def _limited_run(argv: list[str], env: dict | None = None) -> tuple[subprocess.CompletedProcess,
                                                                     float, float]:
    """``python -m profiler_core argv`` under a 4 GB address-space limit: the process, its wall
    time (s) and its peak resident memory (MiB)."""
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (4 * 10**9, 4 * 10**9));"
              "from profiler_core.cli.main import main; code = main(sys.argv[1:]);"
              "print('peak_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
              "file=sys.stderr); sys.exit(code)")
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True,
                               text=True, timeout=120, cwd=REPO, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - started
    peak = [line for line in completed.stderr.splitlines() if line.startswith("peak_kib")]
    return completed, wall, int(peak[-1].split()[1]) / 1024 if peak else math.nan


def test_a_small_gzip_of_tiny_events_is_refused_at_the_event_cap_in_bounded_memory(tmp_path):
    # The case: 0.9 MB of gzip, 4,000,000 tiny kernel events (280 MB inflated, under
    # the byte cap): 3.5 GB and 20 s before, then a MemoryError; now refused after the
    # 1,000,000th event, in about 4 s and under 300 MB.
    path = _repeated_gzip(tmp_path / "tiny.json.gz", TINY_EVENT, 4_000_000)
    assert path.stat().st_size < 2**20
    completed, wall, peak_mib = _limited_run(["trace-stats", str(path)])
    error = completed.stderr.splitlines()[0]
    assert completed.returncode == 2, completed.stderr
    assert error.startswith("error: ") and "holds more than 1,000,000 events" in error
    assert trace_reading.MAX_TRACE_EVENTS_ENV in error and "Traceback" not in completed.stderr
    assert peak_mib < 1024 and wall < 30, (peak_mib, wall)


def test_the_event_cap_counts_every_entry_and_names_how_to_raise_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(trace_reading.MAX_TRACE_EVENTS_ENV, "1000")
    flow = b'{"ph":"f","id":1,"pid":0,"tid":7,"ts":1}'  # not a complete event: counted too
    path = _repeated_gzip(tmp_path / "flows.json.gz", flow, 1001, block=100)
    _refused(capsys, ["trace-stats", str(path)], "holds more than 1,000 events",
             f"set {trace_reading.MAX_TRACE_EVENTS_ENV} to a larger number")
    path = _repeated_gzip(tmp_path / "kernels.json.gz", TINY_EVENT, 1000, block=100)
    assert len(load_trace(path).events) == 1000  # the limit itself is fine
    for bad in ("abc", "0", "-5", "nan", "inf"):
        monkeypatch.setenv(trace_reading.MAX_TRACE_EVENTS_ENV, bad)
        _refused(capsys, ["trace-stats", str(path)], f"{trace_reading.MAX_TRACE_EVENTS_ENV} is '{bad}'",
                 "not a positive number of events")
    monkeypatch.setenv(trace_reading.MAX_TRACE_EVENTS_ENV, "1e30")
    assert trace_reading.max_trace_events() == trace_reading.MAX_TRACE_EVENTS_CEILING


def test_a_huge_byte_cap_is_clamped_never_a_read_buffer(tmp_path, capsys, monkeypatch):
    # PROFILER_CORE_MAX_TRACE_MB=1e6 made trace-stats of a tiny file fail with MemoryError at
    # handle.read(limit + 1): a terabyte buffer.
    path = _trace_file(tmp_path, [LAUNCH, KERNEL])
    for huge in ("1e6", "1e15", "123456789"):
        monkeypatch.setenv(trace_reading.MAX_TRACE_MB_ENV, huge)
        assert trace_reading.max_trace_bytes() == trace_reading.MAX_TRACE_MB_CEILING * 2**20
        tracemalloc.start()
        try:
            assert main(["trace-stats", str(path)]) == 0
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert "Iterations: 1" in capsys.readouterr().out
        assert peak < 64 * 2**20


def test_step_markers_with_distinct_names_stop_at_the_name_cap(tmp_path, capsys):
    # The 15 MB gzip of step markers failed in numpy; every marker has its own name
    # (ProfilerStep#N), so the name cap refuses such a file early.
    events = ",".join('{"ph":"X","cat":"user_annotation","name":"ProfilerStep#' + str(i)
                      + '","pid":1,"tid":1,"ts":' + str(2 * i) + ',"dur":1}' for i in range(30_000))
    path = tmp_path / "steps.json.gz"
    path.write_bytes(gzip.compress(('{"traceEvents":[' + events + "]}").encode(), 1))
    started = time.perf_counter()
    _refused(capsys, ["trace-stats", str(path)], "holds more than 20,000 distinct names",
             f"set {trace_reading.MAX_TRACE_NAMES_ENV} to a larger number")
    assert time.perf_counter() - started < 3


def test_many_step_markers_under_the_caps_are_analysed_quickly(tmp_path):
    marker = b'{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":5,"dur":1}'
    path = _repeated_gzip(tmp_path / "steps.json.gz", marker, 200_000)
    started = time.perf_counter()
    analysis = analyse_trace(load_trace(path))
    assert len(analysis.launch_split) == 200_000
    assert time.perf_counter() - started < 10  # 1 s on a 2-core machine


def test_thousands_of_long_distinct_names_are_refused_quickly(tmp_path, capsys):
    # The 60,000 distinct 4 kB kernel names ran 35 s (no progress): refused at the
    # 20,001st distinct name.
    tail = "x" * 4000 + ">(float*)"
    events = ",".join(json.dumps(dict(KERNEL, name=f"void k{i:06d}<{tail}", ts=i))
                      for i in range(60_000))
    path = tmp_path / "names.json.gz"
    path.write_bytes(gzip.compress(('{"traceEvents":[' + events + "]}").encode(), 1))
    started = time.perf_counter()
    _refused(capsys, ["trace-stats", str(path)], "holds more than 20,000 distinct names")
    assert time.perf_counter() - started < 10  # 2.7 s on a 2-core machine; 43 s before


def test_long_names_are_cut_and_shortened_fast(tmp_path):
    long_name = "void cutlass::Kernel2<" * 400 + "inner" + ">" * 400 + "(Params)"  # 9 kB
    events = [dict(LAUNCH), dict(KERNEL, name=long_name)]
    kernels = analyse_trace({"traceEvents": events}).kernels
    assert kernels["kernel"].tolist() == ["Kernel2"]
    full = kernels["kernel_full"].iloc[0]
    assert len(full) == trace_reading.TRACE_TEXT_MAX_CHARS and full.endswith("...")
    assert full[:-3] == long_name[: trace_reading.TRACE_TEXT_MAX_CHARS - 3]
    # the worst names for shortening: wrappers inside wrappers, 4,096 characters each
    names = ["Kernel<" * 584 + f"x{i}" for i in range(2000)]
    started = time.perf_counter()
    assert {short_kernel_name(name) for name in names} == {"Kernel"}
    assert time.perf_counter() - started < 4  # 0.3 s on a 2-core machine; 14 s before


def test_one_event_over_the_value_cap_is_refused_unbuilt(tmp_path, capsys):
    # 15 MB, one event of 5 million empty lists (2.8 GB as Python objects): refused once 2 MiB
    # of it are held, never built whole
    path = tmp_path / "big.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "args": [' + b"[]," * 5_000_000
                     + b"[]]}]}")
    started = time.perf_counter()
    _refused(capsys, ["trace-stats", str(path)], "trace event #0 is over 1 MiB of JSON text")
    assert time.perf_counter() - started < 5  # 0.7 s on a 2-core machine


def test_a_long_name_is_held_once_however_many_events_carry_it(tmp_path):
    event = json.dumps(dict(KERNEL, name="n" * 5000)).encode()
    path = _repeated_gzip(tmp_path / "same.json.gz", event, 20_000, block=1000)
    events = load_trace(path).events
    assert len(events) == 20_000
    texts = events["name"].cat.categories
    assert len(texts) == 4 and "n" * (trace_reading.TRACE_TEXT_MAX_CHARS - 3) + "..." in set(texts)
    names = events["name"].to_numpy(dtype=object)
    assert len({id(name) for name in names}) == 1  # one string object for 20,000 events


SURROGATE_TRACE = ('{"traceEvents": [' + json.dumps(LAUNCH) + ", "
                   + json.dumps(dict(KERNEL, name="PLACEHOLDER")).replace(
                       "PLACEHOLDER", "bad\\ud800name\\udfff") + "]}")


def test_a_lone_surrogate_in_a_name_is_replaced_everywhere(tmp_path, capsys):
    # the JSON escape "\ud800" decodes to a lone surrogate, which UTF-8 (CSV, Arrow) cannot hold
    path = tmp_path / "surrogate.json"
    path.write_text(SURROGATE_TRACE)
    assert main(["trace-stats", str(path), "--out", str(tmp_path / "out")]) == 0
    assert "bad\ufffdname\ufffd" in capsys.readouterr().out
    kernels = pd.read_csv(tmp_path / "out" / "kernels.csv")
    assert kernels["kernel_full"].tolist() == ["bad\ufffdname\ufffd"]
    assert main(["predict", str(path), "--steps-per-iteration", "1"]) == 0
    assert "Predicted speedup" in capsys.readouterr().out
    timeline = iteration_timeline(load_trace(path))
    assert "bad\ufffdname\ufffd" in set(timeline.events["name"])
    timeline.events.astype({"name": "str"}).to_csv(io.StringIO())
    pd.DataFrame({"name": timeline.events["name"]}).astype("string[pyarrow]")


def test_a_slow_parse_reports_progress(tmp_path):
    path = _repeated_gzip(tmp_path / "kernels.json.gz", TINY_EVENT, 100_000, block=1000)
    heard = []
    load_trace(path, progress=heard.append)
    assert heard and heard[-1].total == path.stat().st_size
    assert [p.done for p in heard] == sorted(p.done for p in heard)
    assert "100,000 events" in heard[-1].message or heard[-1].done == heard[-1].total
    # the command's bar: on a terminal, after a second, and its line ended before any message
    from profiler_core.cli.parser import LateBar
    stream = io.StringIO()
    bar = LateBar(after_s=0.0, stream=stream, always=True, every_s=0.0)
    for progress in heard:
        bar(progress)
    bar.close()
    assert "reading the trace" in stream.getvalue() and stream.getvalue().endswith("\n")
    quiet = io.StringIO()  # not a terminal: no bar
    LateBar(after_s=0.0, stream=quiet)(heard[-1])
    assert quiet.getvalue() == ""


def test_a_timeline_draws_a_bounded_number_of_thread_lanes():
    events = [dict(LAUNCH), dict(KERNEL)]
    events += [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 100 + i,
                "ts": 11, "dur": 1} for i in range(500)]
    timeline = iteration_timeline({"traceEvents": events})
    lanes = {lane for lane in timeline.events["lane"] if lane.startswith("CPU: ops")}
    assert len(lanes) == TIMELINE_MAX_THREADS
    assert timeline.hidden_threads == 500 - TIMELINE_MAX_THREADS


def test_the_operator_column_stays_short_however_many_ops_launch_a_kernel():
    """A kernel launched by many operators, each with a long name: the cell lists the three most
    frequent, each cut, then '+N more'."""
    events = []
    for i in range(50):
        name = f"aten::op{i:02d}_" + "x" * 5_000
        events += [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1,
                    "ts": 100 * i, "dur": 50},
                   {**LAUNCH, "ts": 100 * i + 10, "args": {"correlation": i + 1}},
                   {**KERNEL, "ts": 100 * i + 20, "args": {"correlation": i + 1}}]
    events += [{"ph": "X", "cat": "cpu_op", "name": "aten::often", "pid": 1, "tid": 1,
                "ts": 10_000 + 100 * i, "dur": 50} for i in range(3)]
    events += [{**LAUNCH, "ts": 10_010 + 100 * i, "args": {"correlation": 100 + i}} for i in range(3)]
    events += [{**KERNEL, "ts": 10_020 + 100 * i, "args": {"correlation": 100 + i}} for i in range(3)]
    kernels = analyse_trace({"traceEvents": events}).kernels
    operator = kernels["operator"].iloc[0]
    assert operator.startswith("aten::often, aten::op00_x")  # the most frequent first
    assert operator.endswith("(+48 more)") and len(operator) < 700
